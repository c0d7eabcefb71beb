/* test_cuda_engine.c - the engine's unit test (tests/unit/test_engine.c: continuous batching,
 * limits, cancels, seeded sampling, prompt logprobs, the device loop) run on the CUDA
 * backend, where decode steps are graphs padded to their bucket, sampled on the device and
 * chained behind each other with their tokens fed on the device. The unit test is compiled
 * in as it is; only its backend_cpu_create call is routed to the CUDA backend. Its greedy
 * comparisons stay exact on the f32 checkpoint: a decode row's sums do not depend on the
 * rows beside it (the GEMV at m <= 8), nor a prompt's on the prompts prefilled with it
 * (the host runtime's GEMM sums each row in k order). Exit 77 when no CUDA device can be
 * used. */
#include "tests/device/cuda_unit.h"

#define backend_cpu_create cuda_unit_backend
#define main engine_unit_main
#include "tests/unit/test_engine.c"
#undef main
#undef backend_cpu_create

int main(void) { return cuda_unit_main(engine_unit_main); }
