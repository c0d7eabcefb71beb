/* cpu_matmul_bf16_avx512.c - out = x · Wᵀ for BF16 weights with vdpbf16ps (AVX512-BF16).
 *
 * x arrives rounded to bf16 (cpu_matmul.c packs it once per call), so each instruction
 * takes 32 exact bf16·bf16 products into 16 f32 lanes: twice the multiply-adds of an f32
 * FMA per issue and no widening of W, which is what makes a batch of decode rows (m = 8)
 * cost little more than one, and halves the x bytes a wide-k row keeps in L1.
 *
 * Batch invariance: every (i, j) is summed the same way in every kernel below: 32-element
 * blocks alternate between two accumulators by block parity (the masked tail block too),
 * and the result is reduce(acc0 + acc1). So a row's output does not depend on m, on which
 * other rows share its step, or on how the pool split n — a sequence's logits are the
 * same alone and batched, bit for bit. */
#include <immintrin.h>

#include "kernels/cpu/cpu_internal.h"

#define AI static inline __attribute__((always_inline))

/* Prefetch distance of the decode weight stream (see AVX512_PF_BYTES in
 * cpu_kernels_avx512.c: the hardware prefetchers alone fall short of the read probe). */
#define BF_PF_BYTES 4096

AI __m512bh bf_ld(const uint16_t *p) { return (__m512bh)_mm512_loadu_si512(p); }
AI __m512bh bf_ldm(const uint16_t *p, __mmask32 mk) {
    return (__m512bh)_mm512_maskz_loadu_epi16(mk, p);
}
AI __mmask32 bf_mask(int rem) {
    return rem >= 32 ? (__mmask32)0xffffffffu : rem > 0 ? (__mmask32)((1u << rem) - 1) : 0;
}

/* MR x rows (rows ldx apart) against NR W rows from j: a0/a1 are the even/odd-block
 * accumulators of each (i, r). W is masked past k; x is zero there already. */
AI void bf_tile(float *out, int ldo, const uint16_t *xb, int ldx, const uint16_t *w, int k, int j,
                const int MR, const int NR, const int PF) {
    __m512 a0[8][3], a1[8][3];
    const uint16_t *wr[3];
#pragma GCC unroll 3
    for (int r = 0; r < NR; r++)
        wr[r] = w + (size_t)(j + r) * k;
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 3
        for (int r = 0; r < NR; r++)
            a0[i][r] = a1[i][r] = _mm512_setzero_ps();
    int l = 0;
    for (; l + 64 <= k; l += 64) {
        __m512bh w0[3], w1[3];
        if (PF)
#pragma GCC unroll 3
            for (int r = 0; r < NR; r++) {
                _mm_prefetch((const char *)(wr[r] + l) + BF_PF_BYTES, _MM_HINT_T0);
                _mm_prefetch((const char *)(wr[r] + l) + BF_PF_BYTES + 64, _MM_HINT_T0);
            }
#pragma GCC unroll 3
        for (int r = 0; r < NR; r++) {
            w0[r] = bf_ld(wr[r] + l);
            w1[r] = bf_ld(wr[r] + l + 32);
        }
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            __m512bh x0 = bf_ld(xb + (size_t)i * ldx + l), x1 = bf_ld(xb + (size_t)i * ldx + l + 32);
#pragma GCC unroll 3
            for (int r = 0; r < NR; r++) {
                a0[i][r] = _mm512_dpbf16_ps(a0[i][r], x0, w0[r]);
                a1[i][r] = _mm512_dpbf16_ps(a1[i][r], x1, w1[r]);
            }
        }
    }
    if (l < k) { /* 1..63 left: an even block, then maybe an odd one */
        __mmask32 m0 = bf_mask(k - l), m1 = bf_mask(k - l - 32);
#pragma GCC unroll 3
        for (int r = 0; r < NR; r++) {
            __m512bh w0 = bf_ldm(wr[r] + l, m0), w1 = bf_ldm(wr[r] + l + 32, m1);
#pragma GCC unroll 8
            for (int i = 0; i < MR; i++) {
                a0[i][r] = _mm512_dpbf16_ps(a0[i][r], bf_ld(xb + (size_t)i * ldx + l), w0);
                if (m1) a1[i][r] = _mm512_dpbf16_ps(a1[i][r], bf_ld(xb + (size_t)i * ldx + l + 32), w1);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 3
        for (int r = 0; r < NR; r++)
            out[(size_t)i * ldo + j + r] = _mm512_reduce_add_ps(_mm512_add_ps(a0[i][r], a1[i][r]));
}

/* Decode: one W row at a time for every x row, so each thread reads one sequential,
 * prefetched stream; a second group of x rows re-reads the row from L1. */
static void bf_stream(float *out, int ldo, const uint16_t *xb, int ldx, const uint16_t *w, int k,
                      int m, int n0, int n1) {
    for (int j = n0; j < n1; j++) {
        int i = 0;
        for (; i + 8 <= m; i += 8)
            bf_tile(out + (size_t)i * ldo, ldo, xb + (size_t)i * ldx, ldx, w, k, j, 8, 1, 1);
        for (; i + 4 <= m; i += 4)
            bf_tile(out + (size_t)i * ldo, ldo, xb + (size_t)i * ldx, ldx, w, k, j, 4, 1, 1);
        switch (m - i) {
        case 3: bf_tile(out + (size_t)i * ldo, ldo, xb + (size_t)i * ldx, ldx, w, k, j, 3, 1, 1); break;
        case 2: bf_tile(out + (size_t)i * ldo, ldo, xb + (size_t)i * ldx, ldx, w, k, j, 2, 1, 1); break;
        case 1: bf_tile(out + (size_t)i * ldo, ldo, xb + (size_t)i * ldx, ldx, w, k, j, 1, 1, 1); break;
        default: break;
        }
    }
}

/* Rows of the x block against W rows [j, j + NR) with the widest tiles that fit. */
AI void bf_tiles_m(float *out, int ldo, const uint16_t *xb, int ldx, const uint16_t *w, int k,
                   int m, int j, const int NR, const int PF) {
    int i = 0;
    for (; i + 4 <= m; i += 4)
        bf_tile(out + (size_t)i * ldo, ldo, xb + (size_t)i * ldx, ldx, w, k, j, 4, NR, PF);
    switch (m - i) {
    case 3: bf_tile(out + (size_t)i * ldo, ldo, xb + (size_t)i * ldx, ldx, w, k, j, 3, NR, PF); break;
    case 2: bf_tile(out + (size_t)i * ldo, ldo, xb + (size_t)i * ldx, ldx, w, k, j, 2, NR, PF); break;
    case 1: bf_tile(out + (size_t)i * ldo, ldo, xb + (size_t)i * ldx, ldx, w, k, j, 1, NR, PF); break;
    default: break;
    }
}

/* Decode rows whose packed x fits in L1 next to the weight stream read W one row at a time
 * (one sequential prefetched stream per thread, each W vector used by up to 8 rows: at
 * m = 8 that reached 80-95% of the read probe for k <= 2560 on a 48 KiB L1, where x took
 * 16-40 KiB; l1x is 5/6 of the L1 data cache). Wider x would come from L2
 * for every W row, so prefill and wide-k batches take 4 × 3 register tiles, which load
 * each x vector once for three W rows and each W vector once for four x rows. */
void cpu_matmul_bf16_avx512(float *restrict out, int ldo, const uint16_t *restrict xb, int ldx,
                            const uint16_t *restrict w, int k, int m, int n0, int n1, int l1x) {
    if ((size_t)m * ldx * 2 <= (size_t)l1x) {
        bf_stream(out, ldo, xb, ldx, w, k, m, n0, n1);
        return;
    }
    int j = n0;
    if (m < 16) { /* a decode batch: still bound by the weight stream, so prefetch it */
        for (; j + 3 <= n1; j += 3)
            bf_tiles_m(out, ldo, xb, ldx, w, k, m, j, 3, 1);
        if (n1 - j == 2) bf_tiles_m(out, ldo, xb, ldx, w, k, m, j, 2, 1);
        if (n1 - j == 1) bf_tiles_m(out, ldo, xb, ldx, w, k, m, j, 1, 1);
        return;
    }
    for (; j + 3 <= n1; j += 3)
        bf_tiles_m(out, ldo, xb, ldx, w, k, m, j, 3, 0);
    if (n1 - j == 2) bf_tiles_m(out, ldo, xb, ldx, w, k, m, j, 2, 0);
    if (n1 - j == 1) bf_tiles_m(out, ldo, xb, ldx, w, k, m, j, 1, 0);
}

/* vcvtneps2bf16 rounds to nearest even and reads subnormal inputs as zero, which is the
 * rounding cpu_pack_bf16_ref spells out. */
void cpu_pack_bf16_avx512(uint16_t *restrict out, const float *restrict x, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(out + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 mk = (__mmask16)((1u << (n - i)) - 1);
        __m256i v = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mk, x + i));
        _mm256_mask_storeu_epi16(out + i, mk, v);
    }
}
