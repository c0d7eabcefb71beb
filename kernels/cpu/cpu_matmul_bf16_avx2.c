/* cpu_matmul_bf16_avx2.c - out = x · Wᵀ for BF16 weights on AVX2 + FMA, x already rounded
 * to bf16 by cpu_matmul.c (the semantics every ISA shares; see cpu_matmul_bf16_avx512.c).
 *
 * AVX2 has no bf16 dot product: both operands widen to f32 (a shift into the high half)
 * and meet in FMAs, which is exact for bf16 products. As on AVX-512, each (i, j) is summed
 * the same way by every kernel here, whatever m and the task split: 16-element blocks
 * whose low and high halves go to two accumulators, then the k % 16 tail in order. */
#include <immintrin.h>

#include "kernels/cpu/cpu_internal.h"

#define AI static inline __attribute__((always_inline))

#define BF2_PF_BYTES 4096

AI __m256 bf2_ld(const uint16_t *p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

AI float bf2_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* MR x rows against NR W rows from j (MR·NR ≤ 4: 8 accumulators, 2·NR weights, x). */
AI void bf2_tile(float *out, int ldo, const uint16_t *xb, int ldx, const uint16_t *w, int k, int j,
                 const int MR, const int NR, const int PF) {
    __m256 a0[4][2], a1[4][2];
    const uint16_t *wr[2];
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++)
        wr[r] = w + (size_t)(j + r) * k;
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++)
            a0[i][r] = a1[i][r] = _mm256_setzero_ps();
    int l = 0;
    for (; l + 16 <= k; l += 16) {
        __m256 w0[2], w1[2];
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++) {
            if (PF && (l & 31) == 0)
                _mm_prefetch((const char *)(wr[r] + l) + BF2_PF_BYTES, _MM_HINT_T0);
            w0[r] = bf2_ld(wr[r] + l);
            w1[r] = bf2_ld(wr[r] + l + 8);
        }
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            __m256 x0 = bf2_ld(xb + (size_t)i * ldx + l), x1 = bf2_ld(xb + (size_t)i * ldx + l + 8);
#pragma GCC unroll 2
            for (int r = 0; r < NR; r++) {
                a0[i][r] = _mm256_fmadd_ps(x0, w0[r], a0[i][r]);
                a1[i][r] = _mm256_fmadd_ps(x1, w1[r], a1[i][r]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++) {
            float s = bf2_hsum(_mm256_add_ps(a0[i][r], a1[i][r]));
            for (int t = l; t < k; t++)
                s += dtype_bf16_to_f32(xb[(size_t)i * ldx + t]) * dtype_bf16_to_f32(wr[r][t]);
            out[(size_t)i * ldo + j + r] = s;
        }
}

/* Rows of the x block against W rows [j, j + NR), four (or two, for NR = 2) at a time. */
AI void bf2_rows_m(float *out, int ldo, const uint16_t *xb, int ldx, const uint16_t *w, int k,
                   int m, int j, const int NR, const int PF) {
    int i = 0;
    if (NR == 1) {
        for (; i + 4 <= m; i += 4)
            bf2_tile(out + (size_t)i * ldo, ldo, xb + (size_t)i * ldx, ldx, w, k, j, 4, 1, PF);
        if (m - i == 3) bf2_tile(out + (size_t)i * ldo, ldo, xb + (size_t)i * ldx, ldx, w, k, j, 3, 1, PF);
    }
    for (; i + 2 <= m; i += 2)
        bf2_tile(out + (size_t)i * ldo, ldo, xb + (size_t)i * ldx, ldx, w, k, j, 2, NR, PF);
    if (i < m) bf2_tile(out + (size_t)i * ldo, ldo, xb + (size_t)i * ldx, ldx, w, k, j, 1, NR, PF);
}

void cpu_matmul_bf16_avx2(float *restrict out, int ldo, const uint16_t *restrict xb, int ldx,
                          const uint16_t *restrict w, int k, int m, int n0, int n1, int l1x) {
    (void)l1x; /* four x rows at most per W row: m < 8 streams regardless */
    if (m < 8) { /* decode: one prefetched W stream per thread */
        for (int j = n0; j < n1; j++)
            bf2_rows_m(out, ldo, xb, ldx, w, k, m, j, 1, 1);
        return;
    }
    int j = n0;
    for (; j + 2 <= n1; j += 2)
        bf2_rows_m(out, ldo, xb, ldx, w, k, m, j, 2, 0);
    if (j < n1) bf2_rows_m(out, ldo, xb, ldx, w, k, m, j, 1, 0);
}

/* Round to nearest even, subnormal inputs to zero (cpu_pack_bf16_ref): the integer form of
 * dtype_f32_to_bf16, eight lanes at a time. */
void cpu_pack_bf16_avx2(uint16_t *restrict out, const float *restrict x, int n) {
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    const __m256i absm = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i expm = _mm256_set1_epi32(0x7f800000), sign = _mm256_set1_epi32((int)0x80000000u);
    const __m256i qnan = _mm256_set1_epi32(0x400000);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i));
        __m256i a = _mm256_and_si256(u, absm);
        __m256i is_nan = _mm256_cmpgt_epi32(a, inf);
        __m256i is_sub = _mm256_cmpeq_epi32(_mm256_and_si256(u, expm), _mm256_setzero_si256());
        __m256i r = _mm256_add_epi32(
            u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
        r = _mm256_blendv_epi8(r, _mm256_or_si256(u, qnan), is_nan);
        r = _mm256_blendv_epi8(r, _mm256_and_si256(u, sign), is_sub);
        r = _mm256_srli_epi32(r, 16);
        __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128((__m128i *)(out + i), p);
    }
    for (; i < n; i++)
        out[i] = cpu_pack_bf16_one(x[i]);
}
