/* cuda_backend.h - the CUDA backend's one entry point.
 *
 * Exported by build/libstrata_cuda.so, which the main binary never links: it loads the
 * library at run time (kernels/backend_select.c) and finds this function by name, so a
 * machine without CUDA still runs strata on the CPU backend. What the backend offers
 * beyond the mandatory ops (graphs, the device sampler and embedding, memory, its last
 * error) are optional slots of the ops table (kernels/backend.h). C linkage. */
#ifndef STRATA_CUDA_BACKEND_H
#define STRATA_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/backend.h"

/* Creates the backend on CUDA device `device` (0 = first): one stream, a cuBLAS handle,
 * and the fixed scratch (staging ring, GEMM and attention scratch, 88 MiB). Fails with
 * STRATA_EDEVICE when there is no driver, no such device, or the runtime cannot start,
 * STRATA_ENOMEM when the scratch does not fit. Caller frees with backend_destroy. */
int strata_cuda_backend_create(int device, backend **out, strata_err *err);
typedef int (*strata_cuda_backend_create_fn)(int device, backend **out, strata_err *err);

#ifdef __cplusplus
}
#endif

#endif
