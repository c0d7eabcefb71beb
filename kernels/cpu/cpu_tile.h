/* cpu_tile.h - small f32 matrix products on tiles that live in L1/L2, for the chunked
 * scans (cpu_gated_delta_chunk.c, cpu_ssd_chunk.c): a plain-C reference (cpu_tile.c) and
 * per-ISA kernels (cpu_tile_avx2.c, cpu_tile_avx512.c), picked once per backend.
 *
 * These are not the model's matmuls (cpu_matmul*.c stream weights as x · Wᵀ); here both
 * operands are activations a chunk has just laid out in per-thread scratch, so the caller
 * pads the column count to CPU_TILE_VW and no kernel needs a tail. Not for use outside
 * kernels/cpu and its tests. */
#ifndef STRATA_CPU_TILE_H
#define STRATA_CPU_TILE_H

#include <stddef.h>

#include "kernels/backend.h"

/* Column padding of every tile product: the widest vector (16 floats, AVX-512). */
#define CPU_TILE_VW 16

/* c[i, j] = alpha · c[i, j] + Σ_{l < k} a[i, l] · b[l, j] for i < m, j < n, with rows
 * lda / ldb / ldc floats apart, n a multiple of CPU_TILE_VW and k >= 0. alpha 0 only
 * writes c (it is not read, so it may hold anything). a and c may share a buffer when
 * the elements they touch are disjoint. Each c[i, j] is summed over l in order, whatever
 * m and n are. */
typedef void (*cpu_tile_gemm_fn)(float *restrict c, int ldc, const float *restrict a, int lda,
                                 const float *restrict b, int ldb, int m, int n, int k,
                                 float alpha);

void cpu_tile_gemm_ref(float *restrict c, int ldc, const float *restrict a, int lda,
                       const float *restrict b, int ldb, int m, int n, int k, float alpha);
void cpu_tile_avx2_gemm(float *restrict c, int ldc, const float *restrict a, int lda,
                        const float *restrict b, int ldb, int m, int n, int k, float alpha);
void cpu_tile_avx512_gemm(float *restrict c, int ldc, const float *restrict a, int lda,
                          const float *restrict b, int ldb, int m, int n, int k, float alpha);

/* The kernel of the ISA backend b picked at create. */
cpu_tile_gemm_fn cpu_tile_gemm_of(const backend *b);

/* Asks for rows [0, rows) of width floats, ld floats apart, to be brought into cache: a
 * chunk gathers its next chunk's rows this way while it computes, since the rows of a
 * long prompt's activations lie far apart (one page each) and would otherwise stall the
 * gather on every row. A hint: it never faults. */
static inline void cpu_tile_prefetch_rows(const float *p, size_t ld, int rows, int width) {
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < width; i += 16) __builtin_prefetch(p + (size_t)r * ld + i, 0, 3);
}

/* n rounded up to a multiple of CPU_TILE_VW. */
static inline int cpu_tile_pad(int n) { return (n + CPU_TILE_VW - 1) / CPU_TILE_VW * CPU_TILE_VW; }

#endif
