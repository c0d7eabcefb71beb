/* cuda_norm.cuh - the pieces of a row norm that the norm kernels (cuda_norm.cu) share with
 * the GEMV that norms its x while staging it (cuda_matmul.cu, matmul_gnorm): the same sums
 * in the same order and the same products, so the fused and the unfused path give the same
 * bits. */
#pragma once

#include "kernels/cuda/cuda_internal.cuh"

enum { NORM_BLOCK = 256, NORM_WIDE = 256 };

/* Sum over the TPR threads of a row (TPR 32: a warp; TPR 256: the whole block, sm holding
 * NORM_BLOCK / 32 floats). */
template <int TPR> __device__ __forceinline__ float norm_row_sum(float v, float *sm) {
    v = cuda_warp_sum(v);
    if (TPR == 32) return v;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) sm[w] = v;
    __syncthreads();
    float t = lane < TPR / 32 ? sm[lane] : 0.0f;
    t = cuda_warp_sum(t);
    __syncthreads(); /* sm is reused by the next row of this thread group */
    return t;
}

/* Thread t's share (elements t, t + TPR, ...) of the sum of squares of a row of n, of
 * x · silu(z) where the gate comes first (Mamba2's grouped norm). */
template <int TPR>
__device__ __forceinline__ float norm_part_ss(const float *xr, const float *zr, int n, int t,
                                              bool gate_first) {
    float ss = 0.0f;
    for (int j = t; j < n; j += TPR) {
        float v = xr[j];
        if (gate_first) v *= cuda_silu(zr[j]);
        ss += v * v;
    }
    return ss;
}

/* 1 / rms as the CPU reference computes it (1 / sqrtf, not rsqrtf). */
__device__ __forceinline__ float norm_inv_rms(float ss, int n, float eps) {
    return 1.0f / sqrtf(ss / (float)n + eps);
}

/* An element of a gated norm, r the row's 1 / rms and w its gain: x̂ · w · silu(z), or
 * where the gate comes first (x · silu(z))^ · w. */
__device__ __forceinline__ float norm_gated(bool gate_first, float v, float z, float r, float w) {
    return gate_first ? v * cuda_silu(z) * r * w : v * r * w * cuda_silu(z);
}
