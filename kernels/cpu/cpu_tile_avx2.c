/* cpu_tile_avx2.c - the tile product of cpu_tile.h for AVX2 + FMA, built with the
 * Makefile's ISA_AVX2 flags and only called on a backend that picked avx2.
 *
 * Register tiles of MR = 4 rows × 16 columns (8 accumulators): per step of l, two loads
 * of b and four broadcasts of a feed eight FMAs, so the FMA ports, not the loads, bound
 * it. Column blocks run outermost so a [k, 16] panel of b (8 KiB at k = 128) stays in L1
 * while the rows of a stream past it. Every c[i, j] is summed over l in order. */
#include <immintrin.h>

#include "kernels/cpu/cpu_tile.h"

#define AI static inline __attribute__((always_inline))

AI void tile2_block(float *restrict c, int ldc, const float *restrict a, int lda,
                    const float *restrict b, int ldb, int k, float alpha, const int MR) {
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int l = 0; l < k; l++) {
        __m256 b0 = _mm256_loadu_ps(b + (size_t)l * ldb),
               b1 = _mm256_loadu_ps(b + (size_t)l * ldb + 8);
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            __m256 ai = _mm256_broadcast_ss(a + (size_t)i * lda + l);
            acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    __m256 va = _mm256_set1_ps(alpha);
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) {
        float *ci = c + (size_t)i * ldc;
        if (alpha != 0.0f) {
            acc[i][0] = _mm256_fmadd_ps(va, _mm256_loadu_ps(ci), acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(va, _mm256_loadu_ps(ci + 8), acc[i][1]);
        }
        _mm256_storeu_ps(ci, acc[i][0]);
        _mm256_storeu_ps(ci + 8, acc[i][1]);
    }
}

void cpu_tile_avx2_gemm(float *restrict c, int ldc, const float *restrict a, int lda,
                        const float *restrict b, int ldb, int m, int n, int k, float alpha) {
    for (int j = 0; j < n; j += 16) {
        float *cj = c + j;
        const float *ai = a;
        int i = 0;
        for (; i + 4 <= m; i += 4, cj += (size_t)4 * ldc, ai += (size_t)4 * lda)
            tile2_block(cj, ldc, ai, lda, b + j, ldb, k, alpha, 4);
        switch (m - i) {
        case 3: tile2_block(cj, ldc, ai, lda, b + j, ldb, k, alpha, 3); break;
        case 2: tile2_block(cj, ldc, ai, lda, b + j, ldb, k, alpha, 2); break;
        case 1: tile2_block(cj, ldc, ai, lda, b + j, ldb, k, alpha, 1); break;
        default: break;
        }
    }
}
