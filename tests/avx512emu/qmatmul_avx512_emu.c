/* qmatmul_avx512_emu.c - kernels/cpu/cpu_qmatmul_avx512.c, built against SIMDe by
 * test_avx512_kernels.sh (its cpu_qmatmul_avx512 renamed cpu_qmatmul_avx512_emu), must give
 * the bits of the scalar reference cpu_qmatmul_ref, as on a real AVX-512 machine
 * (tests/unit/test_cpu_qmatmul.c checks that there): every block type, reference-quantized
 * and raw random blocks, odd block counts (the lone last Q8_0 / Q4_0 block), and m from 1
 * to 9 across the 4-row tiles and the decode / prefill switch at 8 (decode of Q4_0 / Q5_0
 * with x's lane sums, as cpu_qmatmul.c gives them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

void cpu_qmatmul_avx512_emu(float *restrict out, int ldo, const cpu_qrows *x,
                            const void *restrict w, dtype dt, int k, int m, int n0, int n1);

static uint64_t rng = 88172645463325252ull;
static uint32_t rng_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float rng_f(void) { return (float)rng_u32() / 2147483648.0f - 1.0f; }
#include "tests/qweight_rand.h"

int main(void) {
    static const dtype dts[] = {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q5_0, DTYPE_Q4_K, DTYPE_Q6_K};
    int fails = 0, runs = 0;
    for (int t = 0; t < (int)(sizeof dts / sizeof *dts); t++)
        for (int raw = 0; raw < 2; raw++)
            for (int kk = 1; kk <= 7; kk += 2)
                for (int m = 1; m <= 9; m++) {
                    dtype dt = dts[t];
                    int big = dtype_block_elems(dt) == 256, k = big ? 256 * kk : 96 * kk, n = 5;
                    unsigned char *w = qweight_rand_rows(dt, n, k, raw);
                    /* x rows as cpu_qmatmul.c lays them out, with the lane sums its
                     * Q4_0 / Q5_0 decode takes (the scalar kernels ignore them) */
                    int lanes = m < 8 && (dt == DTYPE_Q4_0 || dt == DTYPE_Q5_0);
                    cpu_qrows r = {.doff = (size_t)k, .soff = (size_t)k + 4 * (size_t)(k / 32)};
                    r.stride = r.soff + 2 * (size_t)(k / 16);
                    if (lanes) {
                        r.coff = r.stride;
                        r.stride += (size_t)k;
                    }
                    uint8_t *qx = calloc(r.stride, (size_t)m);
                    float *x = malloc(sizeof(float) * (size_t)k);
                    float *o1 = calloc((size_t)(m * n), 4), *o2 = calloc((size_t)(m * n), 4);
                    if (!qx || !x || !o1 || !o2) abort();
                    r.base = qx;
                    for (int i = 0; i < m; i++) {
                        for (int l = 0; l < k; l++) x[l] = rng_f() * (l % 64 < 32 ? 3.0f : 0.1f);
                        int8_t *q = (int8_t *)(qx + (size_t)i * r.stride);
                        cpu_quantize_x_ref(q, (float *)((uint8_t *)q + r.doff), x, k,
                                           big ? 256 : 32);
                        int16_t *s = (int16_t *)((uint8_t *)q + r.soff);
                        for (int g = 0; g < k / 16; g++) {
                            int sum = 0;
                            for (int e = 0; e < 16; e++) sum += q[16 * g + e];
                            s[g] = (int16_t)sum;
                        }
                        if (lanes)
                            cpu_qrows_lane_sums((int32_t *)((uint8_t *)q + r.coff), q, k,
                                                cpu_q32_offset(dt));
                    }
                    cpu_qmatmul_ref(o1, n, &r, w, dt, k, m, 0, n);
                    /* the AVX-512 Q4_K kernels take x as cpu_qmatmul.c swaps it for them */
                    if (dt == DTYPE_Q4_K)
                        for (int i = 0; i < m; i++)
                            cpu_qrows_q4k_swap((int8_t *)(qx + (size_t)i * r.stride), k);
                    cpu_qmatmul_avx512_emu(o2, n, &r, w, dt, k, m, 0, n);
                    runs++;
                    if (memcmp(o1, o2, sizeof(float) * (size_t)(m * n)) && fails++ < 10)
                        fprintf(stderr, "%s%s k=%d m=%d: %.9g, scalar %.9g\n", dtype_name(dt),
                                raw ? " raw" : "", k, m, o2[0], o1[0]);
                    free(w);
                    free(qx);
                    free(x);
                    free(o1);
                    free(o2);
                }
    fprintf(stderr, "%d shapes, %d differ from the scalar kernels\n", runs, fails);
    return fails != 0;
}
