/* cuda_unit.h - what a CPU unit test needs to run whole on the CUDA backend
 * (test_cuda_golden.c, test_cuda_engine.c): its backend_cpu_create calls routed to the CUDA
 * backend, and a main that exits 77 where no CUDA device can be used. Include it, define
 * backend_cpu_create as cuda_unit_backend and main as the unit's own name around the
 * unit test's include, then return cuda_unit_main(that name) from main. Test-only. */
#ifndef STRATA_CUDA_UNIT_H
#define STRATA_CUDA_UNIT_H

#include <stdio.h>

#include "kernels/backend_select.h"
#include "kernels/cpu/cpu_backend.h"

static int cuda_unit_backend(int threads, backend **out, strata_err *err) {
    (void)threads;
    return backend_create("cuda", 0, out, err);
}

static int cuda_unit_main(int (*unit_main)(void)) {
    backend *b = NULL;
    strata_err e = {0};
    if (backend_create("cuda", 0, &b, &e)) {
        fprintf(stderr, "no CUDA backend: %s\n", e.msg);
        return 77;
    }
    backend_destroy(b);
    return unit_main();
}

#endif
