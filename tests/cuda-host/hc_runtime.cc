/* hc_runtime.cc - the CUDA runtime API of hc_api.h on the CPU: one sm_90 device with a
 * memory limit, device and pinned allocations (fresh device memory is NaN bytes, so a read
 * of never-written memory shows in the outputs), copies with their real ordering, streams
 * as FIFO worker threads, events, stream capture into graphs and their replay, and
 * CUDA's error model (the last error of a host thread, kept until read).
 *
 * Ordering, as CUDA's: a copy from or to pageable host memory has completed when the call
 * returns (the stream is drained first); pinned and device copies, memsets, kernels and
 * GEMMs run later, in order, on the stream's thread, so staging rings and events are
 * exercised asynchronously for real. During a capture all of those are recorded instead;
 * a pageable copy, a synchronisation or an allocation while capturing invalidates the
 * capture, and its end reports it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "tests/cuda-host/hc_internal.h"

/* ---- errors ---- */

static thread_local cudaError_t hc_last = cudaSuccess;

cudaError_t hc_error(cudaError_t e) {
    if (e != cudaSuccess) hc_last = e;
    return e;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = hc_last;
    hc_last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return hc_last; }

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define HC_NAME(x)                                                                                 \
    case x: return #x;
        HC_NAME(cudaSuccess)
        HC_NAME(cudaErrorInvalidValue)
        HC_NAME(cudaErrorMemoryAllocation)
        HC_NAME(cudaErrorInitializationError)
        HC_NAME(cudaErrorInvalidConfiguration)
        HC_NAME(cudaErrorInvalidDevicePointer)
        HC_NAME(cudaErrorInvalidMemcpyDirection)
        HC_NAME(cudaErrorInsufficientDriver)
        HC_NAME(cudaErrorNoDevice)
        HC_NAME(cudaErrorInvalidDevice)
        HC_NAME(cudaErrorInvalidResourceHandle)
        HC_NAME(cudaErrorIllegalState)
        HC_NAME(cudaErrorNotReady)
        HC_NAME(cudaErrorLaunchOutOfResources)
        HC_NAME(cudaErrorHostMemoryAlreadyRegistered)
        HC_NAME(cudaErrorHostMemoryNotRegistered)
        HC_NAME(cudaErrorStreamCaptureUnsupported)
        HC_NAME(cudaErrorStreamCaptureInvalidated)
        HC_NAME(cudaErrorStreamCaptureWrongThread)
        HC_NAME(cudaErrorUnknown)
#undef HC_NAME
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorHostMemoryAlreadyRegistered:
        return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered:
        return "pointer does not correspond to a registered memory region";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureWrongThread:
        return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorUnknown: break;
    }
    return "unknown error";
}

/* ---- HC_STATS: what ran, counted where it runs (graph replays included) ---- */

static std::mutex hc_stats_lock;
static std::map<std::string, uint64_t> hc_stats_kernels;
static uint64_t hc_stats_copies, hc_stats_memsets, hc_stats_graphs;

static void hc_stats_print(void) {
    std::lock_guard<std::mutex> lk(hc_stats_lock);
    uint64_t runs = 0;
    for (const auto &k : hc_stats_kernels) runs += k.second;
    fprintf(stderr,
            "cuda-host stats: %llu kernel runs (GEMMs included) of %zu kernels, %llu copies, %llu "
            "memsets, %llu graph launches\n",
            (unsigned long long)runs, hc_stats_kernels.size(), (unsigned long long)hc_stats_copies,
            (unsigned long long)hc_stats_memsets, (unsigned long long)hc_stats_graphs);
    for (const auto &k : hc_stats_kernels)
        fprintf(stderr, "  %10llu  %s\n", (unsigned long long)k.second, k.first.c_str());
}

static bool hc_stats_on(void) {
    static bool on = [] {
        const char *e = getenv("HC_STATS");
        bool v = e && *e && strcmp(e, "0");
        if (v) atexit(hc_stats_print);
        return v;
    }();
    return on;
}

void hc_stat(const char *kernel) {
    if (!hc_stats_on()) return;
    std::lock_guard<std::mutex> lk(hc_stats_lock);
    hc_stats_kernels[kernel]++;
}

static void hc_stat_count(uint64_t *n) {
    if (!hc_stats_on()) return;
    std::lock_guard<std::mutex> lk(hc_stats_lock);
    (*n)++;
}

/* ---- the device ---- */

enum { HC_SMS = 132, HC_SMEM_DEFAULT = 48 << 10, HC_SMEM_OPTIN = 227 << 10 };

/* HC_DEVICE_MEMORY (MiB) or 16 GiB, and never more than half of this machine's memory. */
static size_t hc_mem_limit(void) {
    static size_t limit = [] {
        size_t want = (size_t)16 << 30;
        const char *env = getenv("HC_DEVICE_MEMORY");
        if (env && *env) want = (size_t)strtoull(env, NULL, 10) << 20;
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        if (pages > 0 && psz > 0 && want > (size_t)pages * (size_t)psz / 2)
            want = (size_t)pages * (size_t)psz / 2;
        return want;
    }();
    return limit;
}

cudaError_t cudaGetDeviceCount(int *n) {
    if (!n) return hc_error(cudaErrorInvalidValue);
    *n = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : hc_error(cudaErrorInvalidDevice); }

cudaError_t cudaGetDevice(int *d) {
    if (!d) return hc_error(cudaErrorInvalidValue);
    *d = 0;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (!p) return hc_error(cudaErrorInvalidValue);
    if (d != 0) return hc_error(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuda-host (sm_90 emulated on the CPU)");
    p->totalGlobalMem = hc_mem_limit();
    p->sharedMemPerBlock = HC_SMEM_DEFAULT;
    p->sharedMemPerBlockOptin = HC_SMEM_OPTIN;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = HC_SMS;
    p->l2CacheSize = 50 << 20;
    p->memoryBusWidth = 6144;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
    if (!v) return hc_error(cudaErrorInvalidValue);
    *v = 13000;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) { return cudaDriverGetVersion(v); }

/* ---- allocations ---- */

struct hc_alloc {
    size_t bytes;
    bool device;
    bool registered; /* host memory of the caller's, page-locked by cudaHostRegister */
};

static std::mutex hc_mem_lock;
static std::map<uintptr_t, hc_alloc> hc_allocs; /* by start address */
static size_t hc_dev_used;

hc_where hc_locate(const void *p, size_t n) {
    std::lock_guard<std::mutex> lk(hc_mem_lock);
    uintptr_t a = (uintptr_t)p;
    auto it = hc_allocs.upper_bound(a);
    if (it == hc_allocs.begin()) return HC_HOST_PAGEABLE;
    --it;
    uintptr_t end = it->first + it->second.bytes;
    if (a > end || (a == end && n > 0 && it->second.bytes > 0)) return HC_HOST_PAGEABLE;
    if (a + n > end) return HC_OUT_OF_RANGE;
    return it->second.device ? HC_DEVICE : HC_HOST_PINNED;
}

/* Captures in progress: allocating or synchronising during one is an error in CUDA's
 * global and thread-local modes (relaxed mode allows allocation). */
static std::mutex hc_cap_lock;
static int hc_caps_global;            /* global-mode captures in progress */
static thread_local int hc_caps_here; /* thread-local-mode captures begun by this thread */
static bool hc_capture_forbids(void);
static void hc_capture_spoil_all(void);

static cudaError_t hc_alloc_any(void **p, size_t bytes, bool device) {
    if (!p) return hc_error(cudaErrorInvalidValue);
    *p = NULL;
    if (hc_capture_forbids()) {
        hc_capture_spoil_all();
        return hc_error(cudaErrorStreamCaptureUnsupported);
    }
    size_t want = bytes ? bytes : 1;
    {
        std::lock_guard<std::mutex> lk(hc_mem_lock);
        if (device && (want > hc_mem_limit() || hc_dev_used + want > hc_mem_limit()))
            return hc_error(cudaErrorMemoryAllocation);
    }
    /* whole pages, as a driver maps them: never a page shared with the process's own heap,
     * which cudaHostRegister may pin */
    void *m = aligned_alloc(4096, (want + 4095) & ~(size_t)4095);
    if (!m) return hc_error(cudaErrorMemoryAllocation);
    if (device) memset(m, 0xff, want); /* NaN in f32, f16 and bf16 alike */
    std::lock_guard<std::mutex> lk(hc_mem_lock);
    hc_allocs[(uintptr_t)m] = hc_alloc{bytes, device, false};
    if (device) hc_dev_used += want;
    *p = m;
    return cudaSuccess;
}

static cudaError_t hc_free_any(void *p, bool device) {
    if (!p) return cudaSuccess;
    cudaDeviceSynchronize(); /* as cudaFree does: nothing queued may still use it */
    std::lock_guard<std::mutex> lk(hc_mem_lock);
    auto it = hc_allocs.find((uintptr_t)p);
    if (it == hc_allocs.end() || it->second.device != device || it->second.registered)
        return hc_error(device ? cudaErrorInvalidDevicePointer : cudaErrorInvalidValue);
    if (device) hc_dev_used -= it->second.bytes ? it->second.bytes : 1;
    hc_allocs.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) { return hc_alloc_any(p, bytes, true); }
cudaError_t cudaFree(void *p) { return hc_free_any(p, true); }
cudaError_t cudaMallocHost(void **p, size_t bytes) { return hc_alloc_any(p, bytes, false); }
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags) {
    if (flags & ~0x7u) return hc_error(cudaErrorInvalidValue);
    return hc_alloc_any(p, bytes, false);
}
cudaError_t cudaFreeHost(void *p) { return hc_free_any(p, false); }

/* Host memory the caller owns becomes pinned: kernels and copies may take it (one address
 * space: the device pointer is the host one, as on every 64-bit CUDA system). CUDA refuses a
 * range that overlaps one already pinned; so does this. */
cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned flags) {
    if (!p || !bytes || (flags & ~0xfu)) return hc_error(cudaErrorInvalidValue);
    if (getenv("HC_NO_REGISTER")) /* as a locked-memory limit would: callers' fallbacks run */
        return hc_error(cudaErrorMemoryAllocation);
    if (hc_capture_forbids()) {
        hc_capture_spoil_all();
        return hc_error(cudaErrorStreamCaptureUnsupported);
    }
    std::lock_guard<std::mutex> lk(hc_mem_lock);
    uintptr_t a = (uintptr_t)p;
    auto it = hc_allocs.lower_bound(a);
    if (it != hc_allocs.end() && it->first < a + bytes)
        return hc_error(cudaErrorHostMemoryAlreadyRegistered);
    if (it != hc_allocs.begin() && std::prev(it)->first + std::prev(it)->second.bytes > a)
        return hc_error(cudaErrorHostMemoryAlreadyRegistered);
    hc_allocs[a] = hc_alloc{bytes, false, true};
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p) {
    cudaDeviceSynchronize(); /* as CUDA: nothing queued may still read it */
    std::lock_guard<std::mutex> lk(hc_mem_lock);
    auto it = hc_allocs.find((uintptr_t)p);
    if (it == hc_allocs.end() || !it->second.registered)
        return hc_error(cudaErrorHostMemoryNotRegistered);
    hc_allocs.erase(it);
    return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void **dev, void *host, unsigned flags) {
    if (!dev || flags) return hc_error(cudaErrorInvalidValue);
    if (hc_locate(host, 0) != HC_HOST_PINNED) return hc_error(cudaErrorInvalidValue);
    *dev = host;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    if (!free_bytes || !total_bytes) return hc_error(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lk(hc_mem_lock);
    *total_bytes = hc_mem_limit();
    *free_bytes = hc_mem_limit() - hc_dev_used;
    return cudaSuccess;
}

/* ---- streams ---- */

struct hc_graph {
    std::vector<std::function<void()>> nodes;
};
struct hc_graph_exec {
    std::vector<std::function<void()>> nodes;
};

struct hc_stream {
    unsigned flags = 0;
    std::mutex m;
    std::condition_variable more, idle;
    std::deque<std::function<void()>> q;
    uint64_t queued = 0, finished = 0;
    bool stop = false;
    std::thread worker;
    /* capture (owned by the capturing thread; checked under m) */
    bool capturing = false, spoiled = false;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
    std::thread::id capturer;
    hc_graph *graph = NULL;
};

static std::mutex hc_streams_lock;
static std::set<hc_stream *> hc_streams; /* every live stream, for spoiling captures */

static void hc_stream_loop(hc_stream *s) {
    std::unique_lock<std::mutex> lk(s->m);
    for (;;) {
        s->more.wait(lk, [s] { return s->stop || !s->q.empty(); });
        if (s->q.empty()) return;
        std::function<void()> w = std::move(s->q.front());
        s->q.pop_front();
        lk.unlock();
        w();
        lk.lock();
        s->finished++;
        s->idle.notify_all();
    }
}

static hc_stream *hc_stream_new(unsigned flags) {
    hc_stream *s = new hc_stream();
    s->flags = flags;
    s->worker = std::thread(hc_stream_loop, s);
    std::lock_guard<std::mutex> lk(hc_streams_lock);
    hc_streams.insert(s);
    return s;
}

/* The legacy default stream (0): made on first use, lives until exit. */
static hc_stream *hc_stream_of(cudaStream_t s) {
    if (s) return s;
    static hc_stream *legacy = hc_stream_new(0);
    return legacy;
}

static void hc_stream_drain(hc_stream *s) {
    std::unique_lock<std::mutex> lk(s->m);
    s->idle.wait(lk, [s] { return s->finished == s->queued; });
}

cudaError_t hc_enqueue(cudaStream_t st, std::function<void()> work) {
    hc_stream *s = hc_stream_of(st);
    std::lock_guard<std::mutex> lk(s->m);
    if (s->capturing) {
        s->graph->nodes.push_back(std::move(work));
        return cudaSuccess;
    }
    s->q.push_back(std::move(work));
    s->queued++;
    s->more.notify_one();
    return cudaSuccess;
}

static bool hc_capturing(hc_stream *s) {
    std::lock_guard<std::mutex> lk(s->m);
    return s->capturing;
}

static void hc_spoil(hc_stream *s) {
    std::lock_guard<std::mutex> lk(s->m);
    if (s->capturing) s->spoiled = true;
}

static bool hc_capture_forbids(void) {
    std::lock_guard<std::mutex> lk(hc_cap_lock);
    return hc_caps_global > 0 || hc_caps_here > 0;
}

/* An unsafe call during a capture invalidates the captures it could disturb: a global
 * one always, a thread-local one when this thread began it. */
static void hc_capture_spoil_all(void) {
    std::lock_guard<std::mutex> lk(hc_streams_lock);
    for (hc_stream *s : hc_streams) {
        std::lock_guard<std::mutex> sl(s->m);
        if (!s->capturing) continue;
        if (s->mode == cudaStreamCaptureModeGlobal ||
            (s->mode == cudaStreamCaptureModeThreadLocal &&
             s->capturer == std::this_thread::get_id()))
            s->spoiled = true;
    }
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    if (!s || (flags & ~1u)) return hc_error(cudaErrorInvalidValue);
    *s = hc_stream_new(flags);
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return hc_error(cudaErrorInvalidResourceHandle);
    {
        std::lock_guard<std::mutex> lk(hc_streams_lock);
        if (!hc_streams.erase(s)) return hc_error(cudaErrorInvalidResourceHandle);
    }
    { /* CUDA lets queued work finish after the destroy; the worker drains it first */
        std::lock_guard<std::mutex> lk(s->m);
        s->stop = true;
        s->more.notify_one();
    }
    s->worker.join();
    delete s->graph;
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t st) {
    hc_stream *s = hc_stream_of(st);
    if (hc_capturing(s)) {
        hc_spoil(s);
        return hc_error(cudaErrorStreamCaptureUnsupported);
    }
    if (hc_capture_forbids()) {
        hc_capture_spoil_all();
        return hc_error(cudaErrorStreamCaptureUnsupported);
    }
    hc_stream_drain(s);
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t st) {
    hc_stream *s = hc_stream_of(st);
    std::lock_guard<std::mutex> lk(s->m);
    if (s->capturing) return hc_error(cudaErrorStreamCaptureUnsupported);
    return s->finished == s->queued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaDeviceSynchronize(void) {
    if (hc_capture_forbids()) {
        hc_capture_spoil_all();
        return hc_error(cudaErrorStreamCaptureUnsupported);
    }
    std::vector<hc_stream *> all;
    {
        std::lock_guard<std::mutex> lk(hc_streams_lock);
        all.assign(hc_streams.begin(), hc_streams.end());
    }
    for (hc_stream *s : all) hc_stream_drain(s);
    return cudaSuccess;
}

/* ---- copies and memsets ---- */

static bool hc_is_host(hc_where w) { return w == HC_HOST_PAGEABLE || w == HC_HOST_PINNED; }

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t st) {
    if (!bytes) return cudaSuccess;
    if (!dst || !src || (unsigned)kind > cudaMemcpyDefault) return hc_error(cudaErrorInvalidValue);
    hc_where wd = hc_locate(dst, bytes), ws = hc_locate(src, bytes);
    if (wd == HC_OUT_OF_RANGE || ws == HC_OUT_OF_RANGE) return hc_error(cudaErrorInvalidValue);
    bool ok;
    switch (kind) {
    case cudaMemcpyHostToHost: ok = hc_is_host(wd) && hc_is_host(ws); break;
    case cudaMemcpyHostToDevice: ok = wd == HC_DEVICE && hc_is_host(ws); break;
    case cudaMemcpyDeviceToHost: ok = hc_is_host(wd) && ws == HC_DEVICE; break;
    case cudaMemcpyDeviceToDevice: ok = wd == HC_DEVICE && ws == HC_DEVICE; break;
    default: ok = true; break;
    }
    if (!ok) return hc_error(cudaErrorInvalidMemcpyDirection);
    hc_stream *s = hc_stream_of(st);
    if (wd == HC_HOST_PAGEABLE || ws == HC_HOST_PAGEABLE) {
        /* Pageable memory: done before the call returns, after the stream's earlier work. */
        if (hc_capturing(s)) {
            hc_spoil(s);
            return hc_error(cudaErrorStreamCaptureUnsupported);
        }
        hc_stream_drain(s);
        memmove(dst, src, bytes);
        return cudaSuccess;
    }
    return hc_enqueue(s, [dst, src, bytes] {
        hc_stat_count(&hc_stats_copies);
        memmove(dst, src, bytes);
    });
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    if (hc_capture_forbids()) {
        hc_capture_spoil_all();
        return hc_error(cudaErrorStreamCaptureUnsupported);
    }
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, 0);
    if (e == cudaSuccess) hc_stream_drain(hc_stream_of(0));
    return e;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t st) {
    if (!bytes) return cudaSuccess;
    if (hc_locate(dst, bytes) != HC_DEVICE) return hc_error(cudaErrorInvalidValue);
    return hc_enqueue(st, [dst, value, bytes] {
        hc_stat_count(&hc_stats_memsets);
        memset(dst, value, bytes);
    });
}

cudaError_t cudaMemset(void *dst, int value, size_t bytes) {
    cudaError_t e = cudaMemsetAsync(dst, value, bytes, 0);
    if (e == cudaSuccess) hc_stream_drain(hc_stream_of(0));
    return e;
}

/* ---- events ---- */

struct hc_event {
    unsigned flags = 0;
    std::mutex m;
    std::condition_variable cv;
    uint64_t recorded = 0, completed = 0;
    bool in_capture = false; /* last recorded into a capture: not waitable */
    double t = 0;            /* seconds, when the last record ran */
};

static double hc_seconds(void) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    if (!e || (flags & ~0x7u)) return hc_error(cudaErrorInvalidValue);
    *e = new hc_event();
    (*e)->flags = flags;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!e) return hc_error(cudaErrorInvalidResourceHandle);
    { /* CUDA defers the release until a pending record has run */
        std::unique_lock<std::mutex> lk(e->m);
        e->cv.wait(lk, [e] { return e->in_capture || e->completed >= e->recorded; });
    }
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t st) {
    if (!e) return hc_error(cudaErrorInvalidResourceHandle);
    hc_stream *s = hc_stream_of(st);
    uint64_t gen;
    {
        std::lock_guard<std::mutex> lk(e->m);
        gen = ++e->recorded;
        e->in_capture = hc_capturing(s);
    }
    return hc_enqueue(s, [e, gen] {
        std::lock_guard<std::mutex> lk(e->m);
        if (gen > e->completed) e->completed = gen;
        e->t = hc_seconds();
        e->cv.notify_all();
    });
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e) return hc_error(cudaErrorInvalidResourceHandle);
    if (hc_capture_forbids()) {
        hc_capture_spoil_all();
        return hc_error(cudaErrorStreamCaptureUnsupported);
    }
    std::unique_lock<std::mutex> lk(e->m);
    if (e->in_capture) return hc_error(cudaErrorStreamCaptureUnsupported);
    uint64_t want = e->recorded;
    e->cv.wait(lk, [e, want] { return e->completed >= want; });
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!e) return hc_error(cudaErrorInvalidResourceHandle);
    std::lock_guard<std::mutex> lk(e->m);
    if (e->in_capture) return hc_error(cudaErrorStreamCaptureUnsupported);
    return e->completed >= e->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (!ms || !a || !b) return hc_error(cudaErrorInvalidResourceHandle);
    if ((a->flags | b->flags) & cudaEventDisableTiming)
        return hc_error(cudaErrorInvalidResourceHandle);
    std::lock_guard<std::mutex> la(a->m);
    if (a != b) b->m.lock();
    cudaError_t r = cudaSuccess;
    if (!a->recorded || !b->recorded) r = cudaErrorInvalidResourceHandle;
    else if (a->completed < a->recorded || b->completed < b->recorded) r = cudaErrorNotReady;
    else *ms = (float)((b->t - a->t) * 1e3);
    if (a != b) b->m.unlock();
    return hc_error(r);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t e, unsigned flags) {
    if (!e || flags) return hc_error(cudaErrorInvalidValue);
    uint64_t want;
    {
        std::lock_guard<std::mutex> lk(e->m);
        want = e->recorded;
    }
    return hc_enqueue(st, [e, want] {
        std::unique_lock<std::mutex> lk(e->m);
        e->cv.wait(lk, [e, want] { return e->completed >= want; });
    });
}

/* ---- capture and graphs ---- */

cudaError_t cudaStreamBeginCapture(cudaStream_t st, cudaStreamCaptureMode mode) {
    if (!st) return hc_error(cudaErrorStreamCaptureUnsupported); /* the legacy stream */
    if ((unsigned)mode > cudaStreamCaptureModeRelaxed) return hc_error(cudaErrorInvalidValue);
    {
        std::lock_guard<std::mutex> lk(st->m);
        if (st->capturing) return hc_error(cudaErrorIllegalState);
        st->capturing = true;
        st->spoiled = false;
        st->mode = mode;
        st->capturer = std::this_thread::get_id();
        st->graph = new hc_graph();
    }
    std::lock_guard<std::mutex> lk(hc_cap_lock);
    if (mode == cudaStreamCaptureModeGlobal) hc_caps_global++;
    else if (mode == cudaStreamCaptureModeThreadLocal) hc_caps_here++;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t st, cudaGraph_t *g) {
    if (!st || !g) return hc_error(cudaErrorInvalidValue);
    hc_graph *graph;
    bool spoiled;
    cudaStreamCaptureMode mode;
    {
        std::lock_guard<std::mutex> lk(st->m);
        if (!st->capturing) return hc_error(cudaErrorIllegalState);
        if (st->mode != cudaStreamCaptureModeRelaxed && st->capturer != std::this_thread::get_id())
            return hc_error(cudaErrorStreamCaptureWrongThread);
        graph = st->graph;
        spoiled = st->spoiled;
        mode = st->mode;
        st->graph = NULL;
        st->capturing = false;
    }
    {
        std::lock_guard<std::mutex> lk(hc_cap_lock);
        if (mode == cudaStreamCaptureModeGlobal) hc_caps_global--;
        else if (mode == cudaStreamCaptureModeThreadLocal) hc_caps_here--;
    }
    if (spoiled) {
        delete graph;
        *g = NULL;
        return hc_error(cudaErrorStreamCaptureInvalidated);
    }
    *g = graph;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t st, cudaStreamCaptureStatus *status) {
    if (!status) return hc_error(cudaErrorInvalidValue);
    hc_stream *s = hc_stream_of(st);
    std::lock_guard<std::mutex> lk(s->m);
    *status = !s->capturing ? cudaStreamCaptureStatusNone
              : s->spoiled  ? cudaStreamCaptureStatusInvalidated
                            : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags) {
    if (!x || !g || flags) return hc_error(cudaErrorInvalidValue);
    *x = new hc_graph_exec();
    (*x)->nodes = g->nodes;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t st) {
    if (!x) return hc_error(cudaErrorInvalidResourceHandle);
    hc_enqueue(st, [] { hc_stat_count(&hc_stats_graphs); });
    for (const auto &node : x->nodes) {
        cudaError_t e = hc_enqueue(st, node);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete g;
    return cudaSuccess;
}

/* Queued replays hold copies of the nodes, so the exec may go before they have run. */
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) {
    delete x;
    return cudaSuccess;
}

/* ---- launches ---- */

static std::mutex hc_kern_lock;
static std::map<const void *, int> hc_smem_optin;       /* kernel -> dynamic shared memory limit */
static std::map<const void *, std::string> hc_launched; /* kernel -> its name */

cudaError_t hc_func_set_attribute(const void *kernel, cudaFuncAttribute a, int value) {
    if (!kernel || a != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
        value > HC_SMEM_OPTIN)
        return hc_error(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lk(hc_kern_lock);
    hc_smem_optin[kernel] = value;
    return cudaSuccess;
}

void hc_check_arg(const char *name, const void *kernel, int index, const void *p) {
    if (!p) return;
    hc_where w = hc_locate(p, 0);
    if (w == HC_DEVICE || w == HC_HOST_PINNED) return;
    fprintf(stderr,
            "cuda-host: kernel %s, argument %d: pointer %p is neither device memory nor pinned "
            "host memory (a GPU would fault or read garbage there)\n",
            hc_kernel_name(name, kernel).c_str(), index, p);
    fflush(stderr);
    abort();
}

/* HC_COVERAGE=file: the kernels launched, one instantiation a line, appended at exit. */
static void hc_write_coverage(void) {
    const char *path = getenv("HC_COVERAGE");
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    std::lock_guard<std::mutex> lk(hc_kern_lock);
    for (const auto &k : hc_launched) fprintf(f, "%s\n", k.second.c_str());
    fclose(f);
}

void hc_submit(const hc_cfg &cfg, const char *name, const void *kernel, hc_invoke_fn invoke,
               std::shared_ptr<const void> rec) {
    const dim3 g = cfg.grid, b = cfg.block;
    size_t smem_limit = HC_SMEM_DEFAULT;
    std::string kname;
    {
        std::lock_guard<std::mutex> lk(hc_kern_lock);
        auto it = hc_smem_optin.find(kernel);
        if (it != hc_smem_optin.end() && (size_t)it->second > smem_limit) smem_limit = it->second;
        auto nm = hc_launched.find(kernel);
        if (nm == hc_launched.end()) {
            if (hc_launched.empty()) atexit(hc_write_coverage);
            nm = hc_launched.emplace(kernel, hc_kernel_name(name, kernel)).first;
        }
        kname = nm->second;
    }
    /* CUDA's limits for sm_90: the launch is refused, nothing runs, the error waits for
     * cudaGetLastError. */
    if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z || b.x > 1024 || b.y > 1024 || b.z > 64 ||
        (size_t)b.x * b.y * b.z > 1024 || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) {
        hc_error(cudaErrorInvalidConfiguration);
        return;
    }
    if (cfg.smem > smem_limit) {
        hc_error(cudaErrorInvalidValue);
        return;
    }
    auto grid = std::make_shared<hc_grid>();
    grid->name = kname;
    grid->kernel = kernel;
    grid->invoke = invoke;
    grid->rec = std::move(rec);
    grid->grid = g;
    grid->block = b;
    grid->smem = cfg.smem;
    hc_enqueue(cfg.stream, [grid] {
        hc_stat(grid->name.c_str());
        hc_run_grid(*grid);
    });
}
