/* cuda_backend.h - the CUDA backend's entry points beyond kernels/backend.h.
 *
 * These are exported by build/libstrata_cuda.so, which the main binary never links: it
 * loads the library at run time (kernels/backend_select.c) and finds these functions with
 * dlsym, so a machine without CUDA still runs strata on the CPU backend. C linkage.
 * Thread: like every op, from the one thread that owns the backend. */
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

/* Device bytes held through alloc / weight_prepare plus the backend's scratch: now and
 * the highest since create. */
size_t cuda_backend_used_bytes(const backend *b);
size_t cuda_backend_peak_bytes(const backend *b);
/* Free and total device memory as the driver reports them now. */
void cuda_backend_mem_info(const backend *b, size_t *free_bytes, size_t *total_bytes);
/* The first CUDA error since create ("op: message"), or NULL. Ops cannot return errors,
 * so a failed launch is kept here and every later batch_prepare fails with it. */
const char *cuda_backend_error(const backend *b);

/* ---- decode graphs (kernels/cuda/README.md) ----
 * graph_begin(key) before a forward, graph_end after it. The first forward under a key is
 * captured (nothing runs yet) and returns 0; a later one returns 1 and only refills the
 * host-side inputs while the ops are called; graph_end then launches the graph, waits,
 * and completes the downloads the forward asked for. The key must determine the whole op
 * sequence (e.g. tokens, sequences and logit rows of the step). When graph_end fails
 * (a different op sequence under the same key, a capture that could not be made), nothing
 * of the forward has run: run it again without graphs. Negative returns are errors. */
int cuda_backend_graph_begin(backend *b, uint64_t key, strata_err *err);
int cuda_backend_graph_end(backend *b, strata_err *err);
/* Drops every captured graph (e.g. after buffers they point at were freed). */
void cuda_backend_graph_clear(backend *b);

/* ---- device-side sampling and token feedback ---- */
/* ids[i] = argmax_j logits[i, j] (lowest j on ties) for i < m, rows of n; ids and logits
 * in device memory. */
void cuda_backend_argmax(backend *b, int32_t *ids, const float *logits, int m, int n);
/* embed() with the ids already in device memory (the previous step's sampled tokens). */
void cuda_backend_embed_dev(backend *b, float *out, const bk_weight *table, const int32_t *ids,
                            int m);

#ifdef __cplusplus
}
#endif

#endif
