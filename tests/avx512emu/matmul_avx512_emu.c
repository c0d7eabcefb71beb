/* matmul_avx512_emu.c - kernels/cpu/cpu_matmul_avx512.c, built against SIMDe by
 * test_avx512_kernels.sh (its entry points renamed *_emu), on a CPU without AVX-512: the
 * AVX-512 bf16 and f32 matmuls must keep batch invariance (a row's output alone, m = 1, is
 * the bits of that row among m, through the decode stream, the decode-batch tiles and the
 * prefill tiles, with masked tails) and stay within rounding of a double reference on the
 * bf16-rounded inputs. On an AVX-512 machine tests/unit/test_cpu_matmul.c checks the same on
 * the real instructions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

void cpu_matmul_bf16_avx512_emu(float *restrict out, int ldo, const uint16_t *restrict xb, int ldx,
                                const uint16_t *restrict w, int k, int m, int n0, int n1, int l1d);
void cpu_matmul_f32_avx512_emu(float *restrict out, int ldo, const float *restrict x,
                               const void *restrict w, dtype dt, int k, int m, int n0, int n1,
                               int l1d);
void cpu_pack_bf16_avx512_emu(uint16_t *restrict out, const float *restrict x, int n);

static uint64_t rng = 88172645463325252ull;
static float rng_f(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(uint32_t)(rng >> 32) / 2147483648.0f - 1.0f;
}

/* The product of m rows, through the bf16 kernel (bf16 != 0) or the f32 one on BF16 W. */
static void run(float *out, const float *x, const uint16_t *xb, int ldx, const uint16_t *w, int k,
                int m, int n, int bf16) {
    if (bf16) cpu_matmul_bf16_avx512_emu(out, n, xb, ldx, w, k, m, 0, n, 48 * 1024);
    else cpu_matmul_f32_avx512_emu(out, n, x, w, DTYPE_BF16, k, m, 0, n, 48 * 1024);
}

/* The packing of x to bf16 gives cpu_pack_bf16_one's bits (ties, NaNs, subnormals,
 * overflow) for every tail length, and writes nothing past n. */
static int check_pack(void) {
    enum { N = 1000 };
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu,
                                       0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                                       0xffffffffu, 0x7f7fffffu, 0x3f808000u, 0x3f818000u,
                                       0x3f807fffu, 0x3f808001u, 0x00800000u};
    float x[N];
    uint16_t got[N + 1];
    for (int i = 0; i < N; i++) {
        uint32_t u =
            i < (int)(sizeof special / sizeof *special) ? special[i] : (uint32_t)(rng >> 32);
        rng_f();
        if (i % 3 == 0) u = (u & 0xffff0000u) | 0x8000u; /* a tie */
        memcpy(&x[i], &u, 4);
    }
    for (int n = 0; n <= N; n += n < 40 ? 1 : 320) {
        memset(got, 0xa5, sizeof got);
        cpu_pack_bf16_avx512_emu(got, x, n);
        for (int i = 0; i < n; i++)
            if (got[i] != cpu_pack_bf16_one(x[i])) {
                fprintf(stderr, "FAIL pack n=%d: element %d gave %04x, want %04x\n", n, i, got[i],
                        cpu_pack_bf16_one(x[i]));
                return 1;
            }
        if (got[n] != 0xa5a5) {
            fprintf(stderr, "FAIL pack n=%d wrote past the end\n", n);
            return 1;
        }
    }
    return 0;
}

int main(void) {
    /* m: the decode stream, a decode batch whose x overflows L1, prefill tiles with row and
     * W-row tails; k: whole blocks, tails of 1..63, wide rows */
    static const int shapes[][3] = {{1, 7, 100},   {5, 5, 2600},  {9, 4, 3000},  {20, 11, 515},
                                    {24, 7, 4096}, {40, 5, 6177}, {70, 4, 2112}, {16, 3, 12544}};
    int fails = check_pack(), runs = 0;
    for (int si = 0; si < (int)(sizeof shapes / sizeof *shapes); si++)
        for (int bf16 = 0; bf16 < 2; bf16++) {
            int m = shapes[si][0], n = shapes[si][1], k = shapes[si][2], ldx = (k + 31) & ~31;
            float *x = malloc(sizeof(float) * (size_t)m * k);
            uint16_t *xb = calloc((size_t)m * ldx, 2), *w = malloc(2 * (size_t)n * k);
            float *all = malloc(sizeof(float) * (size_t)m * n), *one = malloc(sizeof(float) * n);
            if (!x || !xb || !w || !all || !one) abort();
            for (size_t i = 0; i < (size_t)n * k; i++) w[i] = dtype_f32_to_bf16(rng_f());
            for (int i = 0; i < m; i++)
                for (int l = 0; l < k; l++) {
                    float v = rng_f() * (l % 64 < 32 ? 3.0f : 0.1f);
                    xb[(size_t)i * ldx + l] = cpu_pack_bf16_one(v);
                    /* the f32 kernel gets the same values, so one reference serves both */
                    x[(size_t)i * k + l] = dtype_bf16_to_f32(xb[(size_t)i * ldx + l]);
                }
            run(all, x, xb, ldx, w, k, m, n, bf16);
            for (int i = 0; i < m; i++) {
                run(one, x + (size_t)i * k, xb + (size_t)i * ldx, ldx, w, k, 1, n, bf16);
                runs++;
                if (memcmp(one, all + (size_t)i * n, sizeof(float) * n)) {
                    fprintf(stderr, "FAIL %s m=%d n=%d k=%d: row %d alone differs\n",
                            bf16 ? "bf16" : "f32", m, n, k, i);
                    fails++;
                    break;
                }
                for (int j = 0; j < n; j++) {
                    double s = 0, mag = 0;
                    for (int l = 0; l < k; l++) {
                        double p = (double)x[(size_t)i * k + l] *
                                   (double)dtype_bf16_to_f32(w[(size_t)j * k + l]);
                        s += p;
                        mag += fabs(p);
                    }
                    /* f32 sums of k products, each exact: a few ulps of the magnitude */
                    if (fabs(all[(size_t)i * n + j] - s) > 1e-5 * mag + 1e-30) {
                        fprintf(stderr, "FAIL %s m=%d n=%d k=%d: (%d, %d) %g, want %g\n",
                                bf16 ? "bf16" : "f32", m, n, k, i, j, all[(size_t)i * n + j], s);
                        fails++;
                        i = m;
                        break;
                    }
                }
            }
            free(x), free(xb), free(w), free(all), free(one);
        }
    printf("avx512 matmul (SIMDe): %d row checks, %s\n", runs, fails ? "FAILED" : "all bits kept");
    return fails != 0;
}
