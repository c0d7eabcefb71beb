/* cpu_tile_avx512.c - the tile product of cpu_tile.h for AVX-512 F, built with the
 * Makefile's ISA_AVX512 flags and only called on a backend that picked avx512.
 *
 * The AVX2 scheme (cpu_tile_avx2.c) at 16 lanes: MR = 4 rows × 32 columns (8
 * accumulators, two loads and four broadcasts per eight FMAs), and a 16-column block
 * where n is an odd multiple of 16. Every c[i, j] is summed over l in order. */
#include <immintrin.h>

#include "kernels/cpu/cpu_tile.h"

#define AI static inline __attribute__((always_inline))

/* MR rows × NV vectors of 16 columns. */
AI void tile5_block(float *restrict c, int ldc, const float *restrict a, int lda,
                    const float *restrict b, int ldb, int k, float alpha, const int MR,
                    const int NV) {
    __m512 acc[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int l = 0; l < k; l++) {
        __m512 bv[2];
#pragma GCC unroll 2
        for (int u = 0; u < NV; u++) bv[u] = _mm512_loadu_ps(b + (size_t)l * ldb + 16 * u);
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            __m512 ai = _mm512_set1_ps(a[(size_t)i * lda + l]);
#pragma GCC unroll 2
            for (int u = 0; u < NV; u++) acc[i][u] = _mm512_fmadd_ps(ai, bv[u], acc[i][u]);
        }
    }
    __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) {
        float *ci = c + (size_t)i * ldc;
#pragma GCC unroll 2
        for (int u = 0; u < NV; u++) {
            if (alpha != 0.0f)
                acc[i][u] = _mm512_fmadd_ps(va, _mm512_loadu_ps(ci + 16 * u), acc[i][u]);
            _mm512_storeu_ps(ci + 16 * u, acc[i][u]);
        }
    }
}

/* All rows of a column block of NV vectors. */
AI void tile5_cols(float *restrict c, int ldc, const float *restrict a, int lda,
                   const float *restrict b, int ldb, int m, int k, float alpha, const int NV) {
    int i = 0;
    for (; i + 4 <= m; i += 4)
        tile5_block(c + (size_t)i * ldc, ldc, a + (size_t)i * lda, lda, b, ldb, k, alpha, 4, NV);
    c += (size_t)i * ldc;
    a += (size_t)i * lda;
    switch (m - i) {
    case 3: tile5_block(c, ldc, a, lda, b, ldb, k, alpha, 3, NV); break;
    case 2: tile5_block(c, ldc, a, lda, b, ldb, k, alpha, 2, NV); break;
    case 1: tile5_block(c, ldc, a, lda, b, ldb, k, alpha, 1, NV); break;
    default: break;
    }
}

void cpu_tile_avx512_gemm(float *restrict c, int ldc, const float *restrict a, int lda,
                          const float *restrict b, int ldb, int m, int n, int k, float alpha) {
    int j = 0;
    for (; j + 32 <= n; j += 32) tile5_cols(c + j, ldc, a, lda, b + j, ldb, m, k, alpha, 2);
    if (j < n) tile5_cols(c + j, ldc, a, lda, b + j, ldb, m, k, alpha, 1);
}
