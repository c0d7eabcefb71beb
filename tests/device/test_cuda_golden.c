/* test_cuda_golden.c - the Qwen3.5 golden tests (tests/unit/test_qwen35_golden.c: logits
 * against transformers' own, and one-shot == chunked == step-by-step == batched) run on
 * the CUDA backend, with the CPU run's tolerances unchanged. The unit test is compiled in
 * as it is; only its backend_cpu_create calls are routed to the CUDA backend. Built on the
 * CPU machine with the library (tests/device/cuda_tests.sh prepare), run on the GPU one
 * from the repository root (the fixtures are read from tests/golden/). Exit 77 when no
 * CUDA device can be used. */
#include "engine/backend.h"
#include "engine/backend_select.h"

static int golden_cuda_backend(int threads, backend **out, strata_err *err) {
    (void)threads;
    return backend_create("cuda", 0, out, err);
}

#define backend_cpu_create golden_cuda_backend
#define main golden_unit_main
#include "tests/unit/test_qwen35_golden.c"
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
    return golden_unit_main();
}
