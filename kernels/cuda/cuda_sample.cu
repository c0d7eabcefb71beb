/* cuda_sample.cu - sampling on the device: greedy arg-max over logit rows, and the embed
 * that reads the chosen ids from device memory, so a decode step's token never has to
 * cross to the host before the next step starts (README.md, decode loop). Ties pick the
 * lowest id, as the host sampler's greedy does. */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"

enum { AM_THREADS = 1024 };

/* (v, i) beats (w, j) when larger, or equal with a lower id; NaN never wins. */
__device__ __forceinline__ void am_pick(float &v, int &i, float w, int j) {
    if (w > v || (w == v && j < i) || (v != v && w == w)) {
        v = w;
        i = j;
    }
}

__global__ void __launch_bounds__(AM_THREADS)
    am_rows(int32_t *__restrict__ ids, const float *__restrict__ logits, int n) {
    __shared__ float sv[AM_THREADS / 32];
    __shared__ int si[AM_THREADS / 32];
    const float *row = logits + (size_t)blockIdx.x * n;
    float v = -INFINITY;
    int i = 0x7fffffff;
    for (int j = threadIdx.x; j < n; j += AM_THREADS) am_pick(v, i, row[j], j);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        int j = __shfl_xor_sync(0xffffffffu, i, o);
        am_pick(v, i, w, j);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) {
        sv[warp] = v;
        si[warp] = i;
    }
    __syncthreads();
    if (warp == 0) {
        v = lane < AM_THREADS / 32 ? sv[lane] : -INFINITY;
        i = lane < AM_THREADS / 32 ? si[lane] : 0x7fffffff;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float w = __shfl_xor_sync(0xffffffffu, v, o);
            int j = __shfl_xor_sync(0xffffffffu, i, o);
            am_pick(v, i, w, j);
        }
        if (lane == 0) ids[blockIdx.x] = i < n ? i : 0;
    }
}

void cuda_argmax_rows(backend *b, int32_t *ids, const float *logits, int m, int n) {
    cuda_impl *c = cuda_impl_of(b);
    if (m <= 0 || n <= 0 ||
        !cuda_enter(c, CUDA_OP_ARGMAX, (const void *)ids, (const void *)logits, m, n))
        return;
    am_rows<<<(unsigned)m, AM_THREADS, 0, c->stream>>>(ids, logits, n);
    cuda_check_launch(c, "argmax");
}
