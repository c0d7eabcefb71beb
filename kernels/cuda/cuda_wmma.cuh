/* cuda_wmma.cuh - the tensor-core tile products the prefill kernels share (the chunked
 * delta rule, the chunked SSD, the flash-attention prefill): 16 x 16 x 16 wmma tiles with
 * bf16 inputs and f32 sums, read from and written to shared memory. tests/cuda-host's
 * include/mma.h runs them on the CPU. */
#ifndef STRATA_CUDA_WMMA_CUH
#define STRATA_CUDA_WMMA_CUH

#include <mma.h>

#include "kernels/cuda/cuda_internal.cuh"

typedef __nv_bfloat16 cw_bf16;
typedef nvcuda::wmma::row_major cw_row;
typedef nvcuda::wmma::col_major cw_col;
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> cw_acc;

/* acc += Σ_{x<n} A_x·B_x, the x-th tiles at a + x·da and b + x·db (elements): A in layout
 * LA with leading dimension lda, B in LB with ldb (col_major reads a transpose in place). */
template <typename LA, typename LB>
__device__ __forceinline__ void cw_mma(cw_acc &acc, const cw_bf16 *a, int lda, int da,
                                       const cw_bf16 *b, int ldb, int db, int n) {
    for (int x = 0; x < n; x++) {
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, cw_bf16, LA> fa;
        nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, cw_bf16, LB> fb;
        nvcuda::wmma::load_matrix_sync(fa, a + (size_t)x * da, (unsigned)lda);
        nvcuda::wmma::load_matrix_sync(fb, b + (size_t)x * db, (unsigned)ldb);
        nvcuda::wmma::mma_sync(acc, fa, fb, acc);
    }
}

/* An accumulator from the f32 row-major tile at p (ld floats a row), or zero for NULL. */
__device__ __forceinline__ void cw_load(cw_acc &acc, const float *p, int ld) {
    if (p) nvcuda::wmma::load_matrix_sync(acc, p, (unsigned)ld, nvcuda::wmma::mem_row_major);
    else nvcuda::wmma::fill_fragment(acc, 0.0f);
}
__device__ __forceinline__ void cw_store(float *p, const cw_acc &acc, int ld) {
    nvcuda::wmma::store_matrix_sync(p, acc, (unsigned)ld, nvcuda::wmma::mem_row_major);
}

/* The job-th tile (ti, tj) on or below the diagonal, row by row: (0,0) (1,0) (1,1) (2,0)... */
__device__ __forceinline__ void cw_tri(int job, int &ti, int &tj) {
    ti = 0, tj = job;
    while (tj > ti) tj -= ++ti;
}

/* acc += the job-th tile on or below the diagonal of A·Bᵀ (A and B row-major, ld elements a
 * row, nk 16-wide tiles of the shared dimension), stored as f32 into its tile of d (ldd
 * floats a row): the causal score products of the chunked kernels (K·Kᵀ, Q·Kᵀ, C·Bᵀ). */
__device__ __forceinline__ void cw_tri_abt(float *d, int ldd, cw_acc &acc, const cw_bf16 *a,
                                           const cw_bf16 *b, int ld, int nk, int job) {
    int ti, tj;
    cw_tri(job, ti, tj);
    cw_mma<cw_row, cw_col>(acc, a + ti * 16 * ld, ld, 16, b + tj * 16 * ld, ld, 16, nk);
    cw_store(d + ti * 16 * ldd + tj * 16, acc, ldd);
}

/* acc = the job-th 16 x 16 tile of the f32 state s (lds floats a row, nct tiles a row) plus
 * Aᵀ·B over a 64-row chunk (A and B row-major, lda and ldb elements a row; Aᵀ is read in
 * place as column-major): the chunked kernels' state update S += Kᵀ·U, S += Xwᵀ·B. Returns
 * the tile, for the caller's cw_store. */
__device__ __forceinline__ float *cw_atb_add(cw_acc &acc, float *s, int lds, const cw_bf16 *a,
                                             int lda, const cw_bf16 *b, int ldb, int nct, int job) {
    const int rt = job / nct, ct = job % nct;
    float *dst = s + rt * 16 * lds + ct * 16;
    cw_load(acc, dst, lds);
    cw_mma<cw_col, cw_row>(acc, a + rt * 16, lda, 16 * lda, b + ct * 16, ldb, 16 * ldb, 4);
    return dst;
}

/* Carves a block's dynamic shared memory: the next n elements of T at *p, *p moved past them
 * (callers keep every buffer a multiple of 32 bytes, so each stays aligned for wmma). */
template <typename T> __device__ __forceinline__ T *cw_carve(unsigned char *&p, size_t n) {
    T *r = (T *)p;
    p += sizeof(T) * n;
    return r;
}

/* Opts kernel in to bytes of dynamic shared memory (past the default 48 KiB); the error is
 * recorded under op. */
template <typename K>
static inline int cw_smem_optin(cuda_impl *c, K kernel, size_t bytes, const char *op) {
    cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess) return 0;
    cuda_fail(c, op, e);
    return -1;
}

#endif
