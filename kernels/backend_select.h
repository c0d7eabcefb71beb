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

#endif
