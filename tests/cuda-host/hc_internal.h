/* hc_internal.h - what the files of the host runtime share: a grid ready to run
 * (hc_exec.cc runs it), where a pointer lives (hc_runtime.cc keeps the allocations), the
 * work queue of a stream, and the names of kernels for messages. */
#ifndef STRATA_HC_INTERNAL_H
#define STRATA_HC_INTERNAL_H

#include <functional>
#include <memory>
#include <string>

#include "tests/cuda-host/hc_device.h"

/* One launch: the kernel, its converted arguments, its configuration. */
struct hc_grid {
    std::string name; /* as the message should name it: the instantiation */
    const void *kernel;
    hc_invoke_fn invoke;
    std::shared_ptr<const void> rec;
    dim3 grid, block;
    size_t smem;
};

/* Runs every block of g on the pool of OS threads and returns when all are done. */
void hc_run_grid(const hc_grid &g);

/* The kernel's instantiation as a reader names it ("mm_gemv<2, 3>"), from the symbol
 * table; the source text of the launch when the symbol cannot be found. */
std::string hc_kernel_name(const char *text, const void *kernel);

typedef enum {
    HC_HOST_PAGEABLE, /* not an allocation of ours */
    HC_HOST_PINNED,   /* cudaHostAlloc / cudaMallocHost */
    HC_DEVICE,        /* cudaMalloc */
    HC_OUT_OF_RANGE,  /* starts inside one of ours and runs past its end */
} hc_where;
/* Where the n bytes at p live; n = 0 asks for p alone (one past the end is inside). */
hc_where hc_locate(const void *p, size_t n);

/* Queues work on s in stream order, or records it into the graph s is capturing.
 * Returns cudaSuccess or the capture error. */
cudaError_t hc_enqueue(cudaStream_t s, std::function<void()> work);
/* HC_STATS=1: counts one run of the named kernel (printed at exit). */
void hc_stat(const char *kernel);
/* Records e as the last error of this host thread and returns it. */
cudaError_t hc_error(cudaError_t e);

#endif
