/* backend_select.h - picks the backend a model runs on: "cpu", "cuda" or "auto".
 *
 * The CUDA backend lives in libstrata_cuda.so (built by `make cuda`), which this module
 * loads at run time, so the strata binary itself never links CUDA and runs on machines
 * without a GPU or without the CUDA libraries. The library is searched, in order, at
 * $STRATA_CUDA_LIB, next to the executable, one folder above it (build/tests/ binaries),
 * then by the dynamic loader (LD_LIBRARY_PATH, ...). Once loaded it stays loaded for the
 * life of the process. Thread: any; a backend belongs to the thread that uses it. */
#ifndef STRATA_BACKEND_SELECT_H
#define STRATA_BACKEND_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* device: "cpu", "cuda" (device 0), "cuda:N", or "auto" (CUDA when the library, a driver
 * and a device are there, else the CPU). threads: CPU worker threads (0 = one per core).
 * "cuda" fails with a message saying what is missing (STRATA_EDEVICE / STRATA_ENOTFOUND);
 * "auto" falls back to the CPU silently (backend_name tells which one was made).
 * Caller frees with backend_destroy. */
int backend_create(const char *device, int threads, backend **out, strata_err *err);

/* "cpu" or "cuda". */
const char *backend_name(const backend *b);

/* Device memory of a backend that has its own (CUDA): bytes held now and at the peak
 * (weights, caches, activations, scratch), and the device's free / total bytes.
 * Returns -1 for the CPU backend (fields untouched). */
typedef struct backend_mem {
    size_t used, peak, free, total;
} backend_mem;
int backend_memory(const backend *b, backend_mem *m);

/* Decode graphs (kernels/cuda/README.md): begin returns 0 when this forward is being
 * captured, 1 when a captured graph will be replayed, STRATA_EUNSUPPORTED when the
 * backend has no graphs (then just run eagerly and do not call end). end launches the
 * graph and completes the forward's downloads; when it fails, nothing of the forward ran
 * and it must be run again eagerly. */
int backend_graph_begin(backend *b, uint64_t key, strata_err *err);
int backend_graph_end(backend *b, strata_err *err);

/* An exported function of the shared object that implements b (e.g.
 * "cuda_backend_argmax"), or NULL (the CPU backend, or no such symbol). */
void *backend_find_symbol(const backend *b, const char *name);

#endif
