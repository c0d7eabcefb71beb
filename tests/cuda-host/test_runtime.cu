/* test_runtime.cu - the host CUDA runtime (tests/cuda-host) against what CUDA defines: warp
 * shuffles and votes, barriers and shared memory, atomics, launch limits and the last-error
 * model, memory, copies with their ordering, streams and events, capture and replay,
 * cuBLAS's product and argument checks; then the faults the runtime must name (it aborts
 * where a GPU would hang or compute garbage), each in a child process of this binary
 * (`test_runtime --die NAME`) whose stderr must name the fault.
 *
 * Plain CUDA: `make cuda-check` compiles it with nvcc too, and the checks above the faults
 * hold on a GPU as well; the checks of what only the emulation promises (fresh memory reads
 * as NaN, the faults) are under STRATA_CUDA_HOST. Prints one line a check and
 * "runtime: N passed, N failed". */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/base/philox.h"

static int n_pass, n_fail;

static void check(int ok, const char *what) {
    printf("%-64s %s\n", what, ok ? "PASS" : "FAIL");
    fflush(stdout);
    if (ok) n_pass++;
    else n_fail++;
}

/* ---- kernels ---- */

/* out[t * 8 + j]: the eight warp operations of thread t. */
__global__ void k_warp(int *out) {
    const int t = threadIdx.x, lane = t & 31;
    int *o = out + t * 8;
    o[0] = __shfl_sync(0xffffffffu, t * 10, (lane + 3) & 31);
    o[1] = __shfl_xor_sync(0xffffffffu, t, 5);
    o[2] = __shfl_up_sync(0xffffffffu, t, 3);
    o[3] = __shfl_down_sync(0xffffffffu, t, 7);
    o[4] = __shfl_xor_sync(0xffffffffu, t, 8, 16); /* within 16-lane segments */
    o[5] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
    o[6] = __any_sync(0xffffffffu, t == 40) * 2 + __all_sync(0xffffffffu, lane < 32);
    float v = (float)lane;
    for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
    __syncwarp();
    o[7] = (int)v;
}

/* A 2-D block: linear index x + y·dim.x, and a block-wide sum through shared memory. */
__global__ void k_block_sum(int *out) {
    __shared__ int part[32];
    const int t = threadIdx.x + threadIdx.y * blockDim.x, lane = t & 31, warp = t >> 5;
    int v = t;
    for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (t == 0) {
        int s = 0;
        for (int w = 0; w < (int)(blockDim.x * blockDim.y) / 32; w++) s += part[w];
        out[blockIdx.x] = s;
    }
}

/* Reverses a block's values through dynamic shared memory (a barrier between). */
__global__ void k_reverse(float *x) {
    extern __shared__ float buf[];
    const int t = threadIdx.x, n = blockDim.x;
    buf[t] = x[blockIdx.x * n + t];
    __syncthreads();
    x[blockIdx.x * n + t] = buf[n - 1 - t];
}

__global__ void k_atomics(int *count, float *fsum, unsigned *mx) {
    atomicAdd(count, 1);
    atomicAdd(fsum, 0.5f);
    atomicMax(mx, blockIdx.x * blockDim.x + threadIdx.x);
}

__global__ void k_fill(float *x, float v, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] = v;
}

__global__ void k_add_from(float *x, const float *src, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] += src[i];
}

__global__ void k_nothing(void) {}

/* Thread t: block (t, 0, 0, 0) under key (7, 9), and philox_uniform(seed 42, draw t). */
__global__ void k_philox(uint32_t *words, double *u) {
    const int t = threadIdx.x;
    philox_block c = {{(uint32_t)t, 0, 0, 0}};
    philox_block o = philox4x32_10(c, 7u, 9u);
    for (int j = 0; j < 4; j++) words[t * 4 + j] = o.v[j];
    u[t] = philox_uniform(42, (uint64_t)t);
}

/* ---- faults (STRATA_CUDA_HOST): each kernel is a bug a GPU shows only as wrong numbers
 * or a hang ---- */

__global__ void k_barrier_in_branch(float *x) {
    __shared__ float s[64];
    s[threadIdx.x] = x[threadIdx.x];
    if ((threadIdx.x & 31) == 0) __syncthreads(); /* the bug: lanes 1..31 never arrive */
    x[threadIdx.x] = s[63 - threadIdx.x];
}

__global__ void k_shuffle_count(float *x) {
    float v = x[threadIdx.x];
    if (threadIdx.x < 16) v += __shfl_xor_sync(0xffffffffu, v, 1); /* half the warp */
    x[threadIdx.x] = v;
}

__global__ void k_partial_mask(float *x) {
    x[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, x[threadIdx.x], 1);
}

__global__ void k_mixed_ops(int *x) {
    int v = x[threadIdx.x];
    if (threadIdx.x == 0) v = (int)__ballot_sync(0xffffffffu, v);
    else v = __shfl_xor_sync(0xffffffffu, v, 1);
    x[threadIdx.x] = v;
}

__global__ void k_read(float *out, const float *in) { out[threadIdx.x] = in[threadIdx.x] + 1.0f; }

/* ---- the checks ---- */

static void test_warp(void) {
    int *d, h[64 * 8];
    cudaMalloc(&d, sizeof h);
    k_warp<<<1, 64>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    int ok[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    for (int t = 0; t < 64; t++) {
        const int lane = t & 31, w0 = t - lane, *o = h + t * 8;
        unsigned ballot = 0;
        for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
        ok[0] &= o[0] == (w0 + ((lane + 3) & 31)) * 10;
        ok[1] &= o[1] == (w0 | (lane ^ 5));
        ok[2] &= o[2] == (lane >= 3 ? t - 3 : t);
        ok[3] &= o[3] == (lane + 7 < 32 ? t + 7 : t);
        ok[4] &= o[4] == (w0 | (lane ^ 8));
        ok[5] &= (unsigned)o[5] == ballot;
        ok[6] &= o[6] == (t >= 32 ? 2 : 0) + 1;
        ok[7] &= o[7] == 496; /* 0 + 1 + ... + 31 */
    }
    check(ok[0], "__shfl_sync from lane + 3");
    check(ok[1], "__shfl_xor_sync 5");
    check(ok[2], "__shfl_up_sync 3 (low lanes keep their own)");
    check(ok[3], "__shfl_down_sync 7 (high lanes keep their own)");
    check(ok[4], "__shfl_xor_sync 8 within width 16");
    check(ok[5], "__ballot_sync");
    check(ok[6], "__any_sync / __all_sync per warp");
    check(ok[7], "butterfly sum over 32 lanes, then __syncwarp");
    cudaFree(d);
}

static void test_blocks(void) {
    int *d, h[3];
    cudaMalloc(&d, sizeof h);
    k_block_sum<<<3, dim3(32, 32)>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    check(h[0] == 1023 * 1024 / 2 && h[2] == h[0], "1024-thread 2-D blocks: warps by linear index");
    float *x, hx[3 * 96];
    for (int i = 0; i < 3 * 96; i++) hx[i] = (float)i;
    cudaMalloc(&x, sizeof hx);
    cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
    k_reverse<<<3, 96, 96 * sizeof(float)>>>(x);
    cudaMemcpy(hx, x, sizeof hx, cudaMemcpyDeviceToHost);
    int ok = 1;
    for (int b = 0; b < 3; b++)
        for (int t = 0; t < 96; t++) ok &= hx[b * 96 + t] == (float)(b * 96 + 95 - t);
    check(ok, "dynamic shared memory and __syncthreads (3 blocks of 96)");
    int *c;
    float *f;
    unsigned *m;
    cudaMalloc(&c, 4), cudaMalloc(&f, 4), cudaMalloc(&m, 4);
    cudaMemset(c, 0, 4), cudaMemset(f, 0, 4), cudaMemset(m, 0, 4);
    k_atomics<<<64, 256>>>(c, f, m);
    int hc;
    float hf;
    unsigned hm;
    cudaMemcpy(&hc, c, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hf, f, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hm, m, 4, cudaMemcpyDeviceToHost);
    check(hc == 16384 && hf == 8192.0f && hm == 16383, "atomicAdd (int, float), atomicMax");
    cudaFree(d), cudaFree(x), cudaFree(c), cudaFree(f), cudaFree(m);
}

static void test_limits(void) {
    cudaGetLastError();
    k_nothing<<<1, 1025>>>();
    cudaError_t e1 = cudaGetLastError(), e2 = cudaGetLastError();
    check(e1 == cudaErrorInvalidConfiguration && e2 == cudaSuccess,
          "1025 threads refused; the error is read once");
    k_nothing<<<dim3(1, 65536), 32>>>();
    check(cudaGetLastError() == cudaErrorInvalidConfiguration, "grid.y 65536 refused");
    k_nothing<<<1, dim3(1, 1, 65)>>>();
    check(cudaGetLastError() == cudaErrorInvalidConfiguration, "block.z 65 refused");
    k_nothing<<<0, 32>>>();
    check(cudaGetLastError() == cudaErrorInvalidConfiguration, "an empty grid refused");
    k_nothing<<<1, 32, 48 * 1024 + 4>>>();
    check(cudaGetLastError() != cudaSuccess, "more than 48 KiB of dynamic shared memory refused");
    k_nothing<<<dim3(70000), 1>>>(); /* x, unlike y and z, may pass 65535 */
    cudaDeviceSynchronize();
    check(cudaGetLastError() == cudaSuccess, "grid.x 70000 accepted");
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    check(p.major >= 9 && p.warpSize == 32 && p.maxThreadsPerBlock == 1024,
          "an sm_90 device, 32-lane warps, 1024 threads a block");
}

/* cudaLaunchKernelEx with programmatic stream serialization (cuda_launch_pdl): the grid runs
 * after the one ahead of it in the stream, reading what it wrote; its limits are a launch's;
 * an attribute the runtime does not know is refused. */
static void test_launch_ex(void) {
    float *d = NULL, h[64];
    cudaMalloc((void **)&d, sizeof h);
    cudaLaunchAttribute at[1] = {};
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(2);
    cfg.blockDim = dim3(32);
    cfg.attrs = at;
    cfg.numAttrs = 1;
    k_fill<<<2, 32>>>(d, 1.0f, 64);
    cudaError_t e = cudaLaunchKernelEx(&cfg, k_add_from, d, (const float *)d, 64);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    check(e == cudaSuccess && cudaGetLastError() == cudaSuccess && h[0] == 2.0f && h[63] == 2.0f,
          "cudaLaunchKernelEx (programmatic serialization) runs after the grid ahead");
    cfg.blockDim = dim3(1025);
    cudaLaunchKernelEx(&cfg, k_add_from, d, (const float *)d, 64);
    check(cudaGetLastError() == cudaErrorInvalidConfiguration,
          "cudaLaunchKernelEx: 1025 threads refused");
    cfg.blockDim = dim3(32);
    at[0].id = (cudaLaunchAttributeID)99;
    check(cudaLaunchKernelEx(&cfg, k_add_from, d, (const float *)d, 64) == cudaErrorInvalidValue,
          "cudaLaunchKernelEx: an unknown attribute refused");
    cudaFree(d);
}

static void test_memory(void) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, (size_t)1 << 50);
    check(e == cudaErrorMemoryAllocation && cudaGetLastError() == cudaErrorMemoryAllocation &&
              cudaGetLastError() == cudaSuccess,
          "a 1 PiB cudaMalloc fails with cudaErrorMemoryAllocation");
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    float *d = NULL;
    cudaMalloc(&d, 1 << 20);
    size_t fr2 = 0;
    cudaMemGetInfo(&fr2, &tot);
    check(fr2 <= fr - (1 << 20) && tot >= fr, "cudaMemGetInfo counts an allocation");
    check((uintptr_t)d % 256 == 0, "allocations are 256-byte aligned");
#ifdef STRATA_CUDA_HOST
    float h[4];
    cudaMemcpy(h, d + 1000, sizeof h, cudaMemcpyDeviceToHost);
    check(isnan(h[0]) && isnan(h[3]), "fresh device memory reads as NaN");
#endif
    float v = 1;
    check(cudaMemcpy(d, &v, 4, cudaMemcpyDeviceToHost) == cudaErrorInvalidMemcpyDirection,
          "a copy whose kind does not match its pointers is refused");
    check(cudaMemcpy(d + (1 << 18) - 1, &v, 8, cudaMemcpyHostToDevice) != cudaSuccess,
          "a copy past the end of an allocation is refused");
    cudaGetLastError();
    cudaFree(d);
}

/* Host memory of the program's own, registered: a kernel reads it through the device
 * pointer CUDA gives for it; pages already registered are refused; unregistering twice is
 * an error. */
static void test_register(void) {
    const int n = 4096;
    float *host = (float *)aligned_alloc(4096, sizeof(float) * n), *dp = NULL, *d = NULL;
    for (int i = 0; i < n; i++) host[i] = (float)i;
    check(cudaHostRegister(host, sizeof(float) * n,
                           cudaHostRegisterMapped | cudaHostRegisterReadOnly) == cudaSuccess,
          "cudaHostRegister of malloc'ed memory");
    check(cudaHostGetDevicePointer((void **)&dp, host, 0) == cudaSuccess && dp,
          "the device pointer of registered memory");
    cudaMalloc(&d, sizeof(float) * n);
    k_fill<<<4, 256>>>(d, 1.0f, n);
    k_add_from<<<4, 256>>>(d, dp, n);
    float back[2];
    cudaMemcpy(back, d + n - 2, sizeof back, cudaMemcpyDeviceToHost);
    check(back[0] == n - 1.0f && back[1] == (float)n, "a kernel reads registered host memory");
    check(cudaHostRegister(host + 1024, 64, cudaHostRegisterMapped) ==
                  cudaErrorHostMemoryAlreadyRegistered &&
              cudaGetLastError() == cudaErrorHostMemoryAlreadyRegistered,
          "pages already registered are refused");
    check(cudaHostUnregister(host) == cudaSuccess, "cudaHostUnregister");
    check(cudaHostUnregister(host) == cudaErrorHostMemoryNotRegistered &&
              cudaGetLastError() == cudaErrorHostMemoryNotRegistered,
          "unregistering twice is an error");
    check(cudaHostGetDevicePointer((void **)&dp, host, 0) != cudaSuccess,
          "no device pointer for unregistered memory");
    cudaGetLastError();
    cudaFree(d);
    free(host);
}

/* Pageable copies complete before the call returns; pinned ones in stream order. */
static void test_copies(void) {
    const int n = 1 << 16;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float *d, *pin, *page = (float *)malloc(sizeof(float) * n);
    cudaMalloc(&d, sizeof(float) * n);
    cudaHostAlloc(&pin, sizeof(float) * n, cudaHostAllocDefault);
    k_fill<<<64, 256, 0, s>>>(d, 3.0f, n);
    cudaMemcpyAsync(page, d, sizeof(float) * n, cudaMemcpyDeviceToHost, s);
    check(page[0] == 3.0f && page[n - 1] == 3.0f,
          "a D2H copy to pageable memory is done on return");
    for (int i = 0; i < n; i++) pin[i] = 1.0f;
    cudaMemcpyAsync(d, pin, sizeof(float) * n, cudaMemcpyHostToDevice, s);
    k_add_from<<<64, 256, 0, s>>>(d, d, n); /* 2 after the copy, 6 had it overtaken */
    cudaMemcpyAsync(pin, d, sizeof(float) * n, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    check(pin[0] == 2.0f && pin[n - 1] == 2.0f, "pinned copies and kernels keep stream order");
    float *d2;
    cudaMalloc(&d2, sizeof(float) * n);
    k_fill<<<64, 256, 0, s>>>(d, 4.0f, n);
    cudaMemcpyAsync(d2, d, sizeof(float) * n, cudaMemcpyDeviceToDevice, s);
    k_fill<<<64, 256, 0, s>>>(d, 9.0f, n);
    cudaMemcpyAsync(pin, d2, sizeof(float) * n, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    check(pin[0] == 4.0f && pin[n - 1] == 4.0f,
          "a device-to-device copy runs after the kernel before it, before the one after");
    cudaFree(d2);
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    cudaEventRecord(a, s);
    k_fill<<<64, 256, 0, s>>>(d, 5.0f, n);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = -1;
    check(cudaEventQuery(b) == cudaSuccess && cudaEventElapsedTime(&ms, a, b) == cudaSuccess &&
              ms >= 0,
          "events: record, synchronize, query, elapsed time");
    cudaStream_t s2;
    cudaStreamCreate(&s2);
    k_fill<<<64, 256, 0, s>>>(d, 7.0f, n);
    cudaEventRecord(a, s);
    cudaStreamWaitEvent(s2, a, 0);
    cudaMemcpyAsync(pin, d, sizeof(float) * n, cudaMemcpyDeviceToHost, s2);
    cudaStreamSynchronize(s2);
    check(pin[n / 2] == 7.0f, "cudaStreamWaitEvent orders a second stream after the first");
    cudaEventDestroy(a), cudaEventDestroy(b);
    cudaStreamDestroy(s2);
    cudaStreamDestroy(s);
    cudaFree(d), cudaFreeHost(pin), free(page);
}

/* Capture a copy from pinned memory and a kernel; replays read the pinned input anew. */
static void test_graphs(void) {
    const int n = 1000;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    float *d, *src, *pin;
    cudaMalloc(&d, sizeof(float) * n), cudaMalloc(&src, sizeof(float) * n);
    cudaHostAlloc(&pin, sizeof(float) * n, cudaHostAllocDefault);
    k_fill<<<4, 256, 0, s>>>(d, 0.0f, n);
    cudaStreamSynchronize(s);
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    cudaMemcpyAsync(src, pin, sizeof(float) * n, cudaMemcpyHostToDevice, s);
    k_add_from<<<4, 256, 0, s>>>(d, src, n);
    cudaError_t e = cudaStreamEndCapture(s, &g);
    check(e == cudaSuccess && g, "capture of a pinned copy and a kernel");
    check(cudaGraphInstantiate(&x, g, 0) == cudaSuccess, "instantiate");
    float host[n];
    cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost);
    check(host[0] == 0.0f, "nothing captured has run");
    for (int r = 1; r <= 3; r++) {
        for (int i = 0; i < n; i++) pin[i] = (float)r;
        cudaGraphLaunch(x, s);
        cudaStreamSynchronize(s);
    }
    cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost);
    check(host[0] == 6.0f && host[n - 1] == 6.0f, "three replays read the refilled pinned input");
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    k_fill<<<4, 256, 0, s>>>(d, 1.0f, n);
    cudaError_t es = cudaStreamSynchronize(s);
    g = NULL;
    e = cudaStreamEndCapture(s, &g);
    check(es == cudaErrorStreamCaptureUnsupported && e == cudaErrorStreamCaptureInvalidated && !g,
          "a synchronize during capture fails and invalidates it");
    float *page = (float *)malloc(sizeof(float) * n);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    es = cudaMemcpyAsync(page, d, sizeof(float) * n, cudaMemcpyDeviceToHost, s);
    e = cudaStreamEndCapture(s, &g);
    check(es != cudaSuccess && e == cudaErrorStreamCaptureInvalidated,
          "a pageable copy during capture fails and invalidates it");
    void *p = NULL;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    es = cudaMalloc(&p, 64);
    e = cudaStreamEndCapture(s, &g);
    check(es == cudaErrorStreamCaptureUnsupported && e == cudaErrorStreamCaptureInvalidated,
          "cudaMalloc during a thread-local capture fails and invalidates it");
    cudaGetLastError();
    free(page);
    cudaStreamDestroy(s);
    cudaFree(d), cudaFree(src), cudaFreeHost(pin);
}

static float bf16r(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

/* The host conversions of cuda_bf16.h / cuda_fp16.h: nearest even, canonical NaN. */
static void test_convert(void) {
    check(__bfloat16_as_ushort(__float2bfloat16_rn(1.00390625f)) == 0x3f80 &&
              __bfloat16_as_ushort(__float2bfloat16_rn(1.01171875f)) == 0x3f82 &&
              __bfloat16_as_ushort(__float2bfloat16_rn(NAN)) == 0x7fff,
          "bf16: ties to even, canonical NaN");
    check(__half_as_ushort(__float2half_rn(65520.0f)) == 0x7c00 &&
              __half_as_ushort(__float2half_rn(5.96e-8f)) == 0x0001 &&
              __half2float(__ushort_as_half(0x3c01)) == 1.0009765625f &&
              __half_as_ushort(__float2half_rn(NAN)) == 0x7fff,
          "f16: overflow to inf, subnormals, canonical NaN");
}

/* The samplers' generator (engine/base/philox.h) gives the device the host's numbers. */
static void test_philox(void) {
    uint32_t *dw, hw[64 * 4];
    double *du, hu[64];
    cudaMalloc(&dw, sizeof hw), cudaMalloc(&du, sizeof hu);
    k_philox<<<1, 64>>>(dw, du);
    cudaMemcpy(hw, dw, sizeof hw, cudaMemcpyDeviceToHost);
    cudaMemcpy(hu, du, sizeof hu, cudaMemcpyDeviceToHost);
    int ok = 1;
    for (int t = 0; t < 64; t++) {
        philox_block c = {{(uint32_t)t, 0, 0, 0}};
        philox_block o = philox4x32_10(c, 7u, 9u);
        for (int j = 0; j < 4; j++) ok &= hw[t * 4 + j] == o.v[j];
        ok &= hu[t] == philox_uniform(42, (uint64_t)t);
    }
    check(ok, "Philox4x32-10 and the sampler's uniform: device == host");
    cudaFree(dw), cudaFree(du);
}

/* cuBLAS: C [m, n] (column-major) = A · B in f32, bf16 and f16, against a double product. */
static void test_blas(void) {
    const int m = 37, n = 19, k = 70;
    cublasHandle_t h;
    cublasCreate(&h);
    float A[k * m], B[k * n], C[m * n];
    for (int i = 0; i < k * m; i++) A[i] = bf16r((float)((i * 7) % 13) / 13.0f - 0.5f);
    for (int i = 0; i < k * n; i++) B[i] = bf16r((float)((i * 5) % 11) / 11.0f - 0.5f);
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType types[3] = {CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F};
    const char *names[3] = {"f32", "bf16", "f16"};
    float *dC;
    cudaMalloc(&dC, sizeof C);
    for (int ti = 0; ti < 3; ti++) {
        size_t es = ti ? 2 : 4;
        void *dA, *dB;
        cudaMalloc(&dA, es * k * m), cudaMalloc(&dB, es * k * n);
        unsigned short a16[k * m], b16[k * n];
        for (int i = 0; i < k * m; i++)
            a16[i] = ti == 1 ? __bfloat16_as_ushort(__float2bfloat16_rn(A[i]))
                             : __half_as_ushort(__float2half_rn(A[i]));
        for (int i = 0; i < k * n; i++)
            b16[i] = ti == 1 ? __bfloat16_as_ushort(__float2bfloat16_rn(B[i]))
                             : __half_as_ushort(__float2half_rn(B[i]));
        cudaMemcpy(dA, ti ? (void *)a16 : (void *)A, es * k * m, cudaMemcpyHostToDevice);
        cudaMemcpy(dB, ti ? (void *)b16 : (void *)B, es * k * n, cudaMemcpyHostToDevice);
        /* A stored [k, m] column-major and used transposed (as strata's weights are) */
        cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, dA, types[ti],
                                         k, dB, types[ti], k, &zero, dC, CUDA_R_32F, m,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        cudaMemcpy(C, dC, sizeof C, cudaMemcpyDeviceToHost);
        double worst = 0;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double r = 0;
                for (int l = 0; l < k; l++) r += (double)A[i * k + l] * B[j * k + l];
                double d = fabs(r - C[j * m + i]);
                if (!(d <= worst)) worst = d;
            }
        char what[96];
        snprintf(what, sizeof what, "cublasGemmEx T,N %s in, f32 out (fresh C, beta 0)", names[ti]);
        check(st == CUBLAS_STATUS_SUCCESS && worst < 1e-4, what);
        cudaFree(dA), cudaFree(dB);
    }
    float *dA, *dB;
    cudaMalloc(&dA, sizeof A), cudaMalloc(&dB, sizeof B);
    check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA, CUDA_R_32F, m - 1, dB,
                       CUDA_R_32F, k, &zero, dC, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE,
          "cublasGemmEx: lda < m refused (INVALID_VALUE)");
    check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, n, k, &one, dA, CUDA_R_32F, m, dB,
                       CUDA_R_32F, k, &zero, dC, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE,
          "cublasGemmEx: m < 0 refused (INVALID_VALUE)");
    check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA, CUDA_R_32F, m, dB,
                       CUDA_R_16F, k, &zero, dC, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED,
          "cublasGemmEx: f32 A with f16 B refused (NOT_SUPPORTED)");
    /* strided batch of 2, beta 1: C += A_b · B_b */
    cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice);
    float Cb[2 * 4 * 3], *dCb, *dAb, *dBb;
    cudaMalloc(&dAb, sizeof(float) * 2 * 4 * 5), cudaMalloc(&dBb, sizeof(float) * 2 * 5 * 3);
    cudaMalloc(&dCb, sizeof Cb);
    float hA[40], hB[30];
    for (int i = 0; i < 40; i++) hA[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 30; i++) hB[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < 24; i++) Cb[i] = 1.0f;
    cudaMemcpy(dAb, hA, sizeof hA, cudaMemcpyHostToDevice);
    cudaMemcpy(dBb, hB, sizeof hB, cudaMemcpyHostToDevice);
    cudaMemcpy(dCb, Cb, sizeof Cb, cudaMemcpyHostToDevice);
    cublasStatus_t st = cublasGemmStridedBatchedEx(
        h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 3, 5, &one, dAb, CUDA_R_32F, 4, 20, dBb, CUDA_R_32F, 5, 15,
        &one, dCb, CUDA_R_32F, 4, 12, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cudaMemcpy(Cb, dCb, sizeof Cb, cudaMemcpyDeviceToHost);
    int ok = st == CUBLAS_STATUS_SUCCESS;
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 4; i++) {
                float r = 1.0f;
                for (int l = 0; l < 5; l++) r += hA[b * 20 + l * 4 + i] * hB[b * 15 + j * 5 + l];
                ok &= Cb[b * 12 + j * 4 + i] == r;
            }
    check(ok, "cublasGemmStridedBatchedEx N,N batch 2, beta 1");
    cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dAb), cudaFree(dBb), cudaFree(dCb);
    cublasDestroy(h);
}

/* ---- faults: run in a child, which must abort naming the fault ---- */

static int die(const char *name) {
    float *x;
    int *xi;
    cudaMalloc(&x, 64 * sizeof(float));
    cudaMalloc(&xi, 64 * sizeof(int));
    cudaMemset(x, 0, 64 * sizeof(float));
    cudaMemset(xi, 0, 64 * sizeof(int));
    if (!strcmp(name, "barrier")) k_barrier_in_branch<<<2, 64>>>(x);
    else if (!strcmp(name, "shuffles")) k_shuffle_count<<<1, 32>>>(x);
    else if (!strcmp(name, "mask")) k_partial_mask<<<1, 32>>>(x);
    else if (!strcmp(name, "mixed")) k_mixed_ops<<<1, 32>>>(xi);
    else if (!strcmp(name, "hostptr")) {
        static float host[64];
        k_read<<<1, 32>>>(x, host);
    } else if (!strcmp(name, "blas-hostptr")) {
        cublasHandle_t h;
        cublasCreate(&h);
        static float host[64];
        const float one = 1.0f, zero = 0.0f;
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, host, CUDA_R_32F, 4, x, CUDA_R_32F,
                     4, &zero, x + 16, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    } else {
        fprintf(stderr, "no fault %s\n", name);
        return 2;
    }
    cudaDeviceSynchronize();
    fprintf(stderr, "fault %s: the runtime did not abort\n", name);
    return 0;
}

#ifdef STRATA_CUDA_HOST
static void expect_fault(const char *self, const char *name, const char *msg, const char *what) {
    char cmd[512], log[64], text[8192] = "";
    snprintf(log, sizeof log, "/tmp/hc_fault_%d_%s.log", (int)getpid(), name);
    snprintf(cmd, sizeof cmd, "ulimit -c 0; '%s' --die %s 2>%s", self, name, log);
    int st = system(cmd);
    FILE *f = fopen(log, "r");
    if (f) {
        text[fread(text, 1, sizeof text - 1, f)] = 0;
        fclose(f);
    }
    unlink(log);
    /* killed by SIGABRT: as the shell reports it (128 + 6), or directly */
    int aborted = (WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGABRT) ||
                  (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    int ok = aborted && strstr(text, msg);
    if (!ok) printf("    the child said: %s\n", text);
    check(ok, what);
}
#endif

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--die")) return die(argv[2]);
    test_warp();
    test_blocks();
    test_limits();
    test_launch_ex();
    test_memory();
    test_register();
    test_copies();
    test_graphs();
    test_convert();
    test_philox();
    test_blas();
#ifdef STRATA_CUDA_HOST
    expect_fault(argv[0], "barrier", "do not meet", "fault: __syncthreads inside if (lane == 0)");
    expect_fault(argv[0], "shuffles", "do not meet", "fault: half a warp shuffles");
    expect_fault(argv[0], "mask", "only the full-warp mask", "fault: a partial shuffle mask");
    expect_fault(argv[0], "mixed", "earlier lanes", "fault: lanes at different warp operations");
    expect_fault(argv[0], "hostptr", "argument 1", "fault: a host pointer as kernel argument");
    expect_fault(argv[0], "blas-hostptr", "matrix A", "fault: a host matrix given to cuBLAS");
#endif
    printf("runtime: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
