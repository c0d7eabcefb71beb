/* test_cuda_engine.c - the engine's unit test (tests/unit/test_engine.c: continuous batching,
 * limits, cancels, seeded sampling, prompt logprobs, the device loop) run on the CUDA
 * backend, where decode steps are graphs padded to their bucket, sampled on the device and
 * chained behind each other with their tokens fed on the device. The unit test is compiled
 * in as it is; only its backend_cpu_create call is routed to the CUDA backend. Its greedy
 * comparisons stay exact on the f32 checkpoint: a decode row's sums do not depend on the
 * rows beside it (the GEMV at m <= 8), nor a prompt's on the prompts prefilled with it
 * (the host runtime's GEMM sums each row in k order). Exit 77 when no CUDA device can be
 * used. */
#include "kernels/backend_select.h"
#include "kernels/cpu/cpu_backend.h"

static int engine_cuda_backend(int threads, backend **out, strata_err *err) {
    (void)threads;
    return backend_create("cuda", 0, out, err);
}

#define backend_cpu_create engine_cuda_backend
#define main engine_unit_main
#include "tests/unit/test_engine.c"
#undef main
#undef backend_cpu_create

int main(void) {
    backend *b = NULL;
    strata_err e = {0};
    if (backend_create("cuda", 0, &b, &e)) {
        fprintf(stderr, "no CUDA backend: %s\n", e.msg);
        return 77;
    }
    backend_destroy(b);
    return engine_unit_main();
}
