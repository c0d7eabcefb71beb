/* hc_device.h - what a kernel of kernels/cuda sees when it is compiled for the host
 * (README.md): the CUDA qualifiers, the built-in indices, vector types, barriers, warp
 * operations, atomics, load hints, and the launch that hc_rewrite.py writes where a
 * `kernel<<<grid, block, smem, stream>>>(args)` was.
 *
 * A block runs on one OS thread, its threads as fibers (hc_exec.cc), each with its stack in
 * an aligned region that also holds its hc_thread. __shared__ becomes a static thread_local: one copy per OS thread, which is one copy per
 * block because a block never leaves the thread that started it. */
#ifndef STRATA_HC_DEVICE_H
#define STRATA_HC_DEVICE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tests/cuda-host/hc_api.h"

#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static thread_local

/* ---- vector types ---- */
struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct __align__(8) int2 {
    int x, y;
};
struct __align__(8) uint2 {
    unsigned x, y;
};
struct __align__(8) float2 {
    float x, y;
};
struct __align__(16) int4 {
    int x, y, z, w;
};
struct __align__(16) uint4 {
    unsigned x, y, z, w;
};
struct __align__(16) float4 {
    float x, y, z, w;
};
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
    return uint4{x, y, z, w};
}

/* ---- the running thread ---- */
enum { HC_WARP = 32, HC_MAX_THREADS = 1024, HC_REGION = 128 << 10 };

struct hc_block_pub {
    uint3 idx, dim, grid;
    void *smem; /* dynamic shared memory of this block */
};
struct hc_thread_pub {
    uint3 idx;
    int tid, lane, warp; /* linear index in the block; lane and warp of it */
    hc_block_pub *blk;
};

/* Which thread am I: the stack pointer rounded down to its fiber's region, plus the
 * region's own cache-line offset (hc_exec.cc lays regions out so): no thread-local
 * lookup where a kernel reads threadIdx. */
static inline hc_thread_pub *hc_me(void) {
    uintptr_t sp;
#if defined(__x86_64__)
    __asm__("movq %%rsp, %0" : "=r"(sp));
#elif defined(__aarch64__)
    __asm__("mov %0, sp" : "=r"(sp));
#else
    char here;
    sp = (uintptr_t)&here;
#endif
    uintptr_t base = sp & ~(uintptr_t)(HC_REGION - 1);
    return (hc_thread_pub *)(base + ((base / HC_REGION) % 64) * 64);
}

#define threadIdx (hc_me()->idx)
#define blockIdx (hc_me()->blk->idx)
/* Function calls, not parenthesised expressions, so that the fields of cudaLaunchConfig_t
 * that CUDA names gridDim and blockDim are reached as c.gridDim through its member functions
 * of the expanded names (below). */
static inline const uint3 &hc_blockDim() { return hc_me()->blk->dim; }
static inline const uint3 &hc_gridDim() { return hc_me()->blk->grid; }
#define blockDim hc_blockDim()
#define gridDim hc_gridDim()
static constexpr int warpSize = 32;

/* ---- barriers and warp operations (hc_exec.cc) ---- */
enum hc_warp_kind {
    HC_SHFL = 1,
    HC_SHFL_UP,
    HC_SHFL_DOWN,
    HC_SHFL_XOR,
    HC_VOTE,
    HC_SYNCWARP,
    HC_WMMA /* include/mma.h */
};
void hc_syncthreads(void);
/* Rendezvous of the lanes of the caller's warp at its next warp operation: every lane
 * leaves v; returns the 32 values once all lanes have arrived. Aborts on a mask other
 * than the full warp, on lanes at different operations, or on lanes that never come. */
const uint64_t *hc_warp_exchange(hc_warp_kind kind, unsigned mask, uint64_t v);
/* The same, where the last lane to arrive runs last(ctx) before the warp moves on: work a
 * warp does once for all its lanes (include/mma.h's products). */
const uint64_t *hc_warp_exchange_last(hc_warp_kind kind, unsigned mask, uint64_t v,
                                      void (*last)(void *), void *ctx);
/* Aborts naming the kernel, block and thread: a lane read a lane that does not exist. */
[[noreturn]] void hc_kernel_fault(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *hc_dynamic_smem(void);

static inline void __syncthreads(void) { hc_syncthreads(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    hc_warp_exchange(HC_SYNCWARP, mask, 0);
}

template <typename T> static inline uint64_t hc_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a wide type");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <typename T> static inline T hc_unbits(uint64_t u) {
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}
/* The value of lane src as lane `lane` receives it: src outside the lane's segment of
 * width lanes gives the lane its own value, as CUDA defines for up / down / xor. */
template <typename T>
static inline T hc_shfl(hc_warp_kind kind, unsigned mask, T v, int arg, int width) {
    const uint64_t *s = hc_warp_exchange(kind, mask, hc_bits(v));
    if (width <= 0 || width > 32 || (width & (width - 1)))
        hc_kernel_fault("shuffle width %d is not a power of two up to 32", width);
    const int lane = hc_me()->lane, seg = lane & ~(width - 1);
    int src;
    switch (kind) {
    case HC_SHFL: src = seg + (arg & (width - 1)); break;
    case HC_SHFL_UP: src = lane - arg < seg ? lane : lane - arg; break;
    case HC_SHFL_DOWN: src = lane + arg >= seg + width ? lane : lane + arg; break;
    default: src = (lane ^ arg) >= seg + width ? lane : lane ^ arg; break;
    }
    return hc_unbits<T>(s[src & 31]);
}
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return hc_shfl(HC_SHFL, mask, v, src, width);
}
template <typename T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
    return hc_shfl(HC_SHFL_UP, mask, v, (int)d, width);
}
template <typename T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
    return hc_shfl(HC_SHFL_DOWN, mask, v, (int)d, width);
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) {
    return hc_shfl(HC_SHFL_XOR, mask, v, m, width);
}
/* The predicates of the warp's lanes as a bit mask (lanes that exist only). */
unsigned hc_vote(unsigned mask, int pred);
static inline unsigned __ballot_sync(unsigned mask, int pred) { return hc_vote(mask, pred); }
static inline int __any_sync(unsigned mask, int pred) { return hc_vote(mask, pred) != 0; }
int hc_all(unsigned mask, int pred);
static inline int __all_sync(unsigned mask, int pred) { return hc_all(mask, pred); }

/* ---- atomics: blocks of a grid run on several OS threads, so these are real ---- */
template <typename T> static inline T hc_atomic_add(T *p, T v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
static inline int atomicAdd(int *p, int v) { return hc_atomic_add(p, v); }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return hc_atomic_add(p, v); }
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    return hc_atomic_add(p, v);
}
template <typename T, typename F> static inline T hc_atomic_update(T *p, F f) {
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (
        !__atomic_compare_exchange_n(p, &old, f(old), true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return old;
}
static inline float atomicAdd(float *p, float v) {
    uint32_t r = hc_atomic_update((uint32_t *)p, [v](uint32_t o) {
        float f;
        memcpy(&f, &o, 4);
        f += v;
        uint32_t n;
        memcpy(&n, &f, 4);
        return n;
    });
    float f;
    memcpy(&f, &r, 4);
    return f;
}
static inline int atomicSub(int *p, int v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
static inline unsigned atomicSub(unsigned *p, unsigned v) {
    return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED);
}
static inline int atomicMax(int *p, int v) {
    return hc_atomic_update(p, [v](int o) { return o > v ? o : v; });
}
static inline unsigned atomicMax(unsigned *p, unsigned v) {
    return hc_atomic_update(p, [v](unsigned o) { return o > v ? o : v; });
}
static inline int atomicMin(int *p, int v) {
    return hc_atomic_update(p, [v](int o) { return o < v ? o : v; });
}
static inline unsigned atomicMin(unsigned *p, unsigned v) {
    return hc_atomic_update(p, [v](unsigned o) { return o < v ? o : v; });
}
static inline int atomicExch(int *p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
static inline unsigned atomicExch(unsigned *p, unsigned v) {
    return __atomic_exchange_n(p, v, __ATOMIC_RELAXED);
}
static inline float atomicExch(float *p, float v) {
    uint32_t n, o;
    memcpy(&n, &v, 4);
    o = __atomic_exchange_n((uint32_t *)p, n, __ATOMIC_RELAXED);
    float f;
    memcpy(&f, &o, 4);
    return f;
}
template <typename T> static inline T hc_atomic_cas(T *p, T cmp, T v) {
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return cmp;
}
static inline int atomicCAS(int *p, int cmp, int v) { return hc_atomic_cas(p, cmp, v); }
static inline unsigned atomicCAS(unsigned *p, unsigned cmp, unsigned v) {
    return hc_atomic_cas(p, cmp, v);
}
static inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long cmp,
                                           unsigned long long v) {
    return hc_atomic_cas(p, cmp, v);
}
static inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* ---- loads and stores with cache hints: plain accesses here ---- */
template <typename T> static inline T __ldg(const T *p) { return *p; }
template <typename T> static inline T __ldcs(const T *p) { return *p; }
template <typename T> static inline T __ldcg(const T *p) { return *p; }
template <typename T> static inline T __ldca(const T *p) { return *p; }
template <typename T> static inline T __ldlu(const T *p) { return *p; }
template <typename T> static inline void __stcs(T *p, T v) { *p = v; }
template <typename T> static inline void __stcg(T *p, T v) { *p = v; }

/* ---- bit casts and integer intrinsics ---- */
static inline float __uint_as_float(uint32_t u) { return hc_unbits<float>(u); }
static inline uint32_t __float_as_uint(float f) { return (uint32_t)hc_bits(f); }
static inline float __int_as_float(int i) { return hc_unbits<float>((uint32_t)i); }
static inline int __float_as_int(float f) { return (int)(uint32_t)hc_bits(f); }
static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
static inline int __clz(unsigned v) { return v ? __builtin_clz(v) : 32; }
static inline int __ffs(unsigned v) { return __builtin_ffs((int)v); }
/* bytes of {hi, lo} picked by the low 3 bits of each selector nibble (no sign mode) */
static inline unsigned __byte_perm(unsigned lo, unsigned hi, unsigned s) {
    uint64_t v = (uint64_t)hi << 32 | lo;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)(v >> (8 * ((s >> (4 * i)) & 7)) & 255u) << (8 * i);
    return r;
}
/* the low 32 bits of {hi, lo} shifted right by sh, clamped to 32 */
static inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned sh) {
    return (unsigned)(((uint64_t)hi << 32 | lo) >> (sh < 32 ? sh : 32));
}

/* ---- the math CUDA has beside libm's ---- */
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
/* glibc declares these two (C linkage) without exporting them: define them inline */
extern "C" inline float __expf(float x) noexcept { return expf(x); }
extern "C" inline float __logf(float x) noexcept { return logf(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }

/* ---- launches ---- */
struct hc_cfg {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    hc_cfg(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = 0)
        : grid(g), block(b), smem(s), stream(st) {}
};
typedef void (*hc_invoke_fn)(const void *rec);
/* Checks the configuration as CUDA does (an error for cudaGetLastError, nothing runs),
 * else queues the grid on the stream (or into the graph it is capturing). */
void hc_submit(const hc_cfg &cfg, const char *name, const void *kernel, hc_invoke_fn invoke,
               std::shared_ptr<const void> rec);
/* Aborts unless p is NULL or points into device or pinned host memory: a kernel reading
 * a pageable host pointer reads garbage on a GPU, and here would read the right numbers. */
void hc_check_arg(const char *name, const void *kernel, int index, const void *p);

template <typename... P> struct hc_rec {
    void (*k)(P...);
    std::tuple<typename std::decay<P>::type...> args;
};
template <typename... P> static void hc_invoke(const void *r) {
    const hc_rec<P...> *rec = (const hc_rec<P...> *)r;
    std::apply(rec->k, rec->args);
}
template <typename T> static inline void hc_check_one(const char *n, const void *k, int i, T v) {
    if constexpr (std::is_pointer<T>::value) hc_check_arg(n, k, i, (const void *)v);
    (void)n, (void)k, (void)i, (void)v;
}
template <typename... P, size_t... I>
static inline void hc_check_args(const char *n, const void *k, const std::tuple<P...> &t,
                                 std::index_sequence<I...>) {
    (hc_check_one(n, k, (int)I, std::get<I>(t)), ...);
    (void)n, (void)k, (void)t; /* a kernel without parameters */
}
/* The arguments are converted to the kernel's parameter types here, at the launch, as
 * CUDA copies them then: later changes of the caller's variables do not reach the grid. */
template <typename... P, typename... A>
static inline void hc_launch(const hc_cfg &cfg, const char *name, void (*k)(P...), A &&...a) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong argument count");
    auto rec = std::make_shared<hc_rec<P...>>(
        hc_rec<P...>{k, std::tuple<typename std::decay<P>::type...>(static_cast<P>(a)...)});
    hc_check_args(name, (const void *)k, rec->args, std::index_sequence_for<P...>{});
    hc_submit(cfg, name, (const void *)k, &hc_invoke<P...>, rec);
}

/* cudaLaunchKernelEx with the one attribute strata sets, programmatic stream serialization
 * (cuda_launch_pdl). A stream here runs its grids one after another, so a dependent grid
 * never overlaps the one before it and its griddepcontrol wait (compiled for sm_90 only)
 * has nothing to wait for: the launch is a plain one. Errors wait for cudaGetLastError, as
 * the launches' do. */
enum cudaLaunchAttributeID { cudaLaunchAttributeProgrammaticStreamSerialization = 5 };
union cudaLaunchAttributeValue {
    int programmaticStreamSerializationAllowed;
};
struct cudaLaunchAttribute {
    cudaLaunchAttributeID id;
    cudaLaunchAttributeValue val;
};
struct cudaLaunchConfig_t {
    dim3 grid_, block_;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute *attrs;
    unsigned numAttrs;
    dim3 &hc_gridDim() { return grid_; } /* c.gridDim */
    dim3 &hc_blockDim() { return block_; }
};
template <typename... P, typename... A>
static inline cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t *c, void (*k)(P...),
                                             A &&...a) {
    for (unsigned i = 0; i < c->numAttrs; i++)
        if (c->attrs[i].id != cudaLaunchAttributeProgrammaticStreamSerialization)
            return cudaErrorInvalidValue;
    hc_launch(hc_cfg(c->grid_, c->block_, c->dynamicSmemBytes, c->stream), "cudaLaunchKernelEx", k,
              std::forward<A>(a)...);
    return cudaSuccess;
}

#endif
