/* test_cuda_quant_model.c - the quantize-on-load test (tests/unit/test_quant_model.c: tiny
 * models with Q8_0 / Q4_K weights against the same weights dequantized to f32, and the demo
 * model in Q8_0 continuing its prompts with transformers' greedy tokens) run on the CUDA
 * backend, as test_cuda_golden.c runs the golden tests: the unit test is compiled in as it
 * is, its backend_cpu_create calls routed to the CUDA backend. It proves the quantized
 * weights' path end to end (weight_prepare, the quantized GEMVs at m <= 8 and m > 8, embed
 * of a quantized table, tied lm_head). Exit 77 when no CUDA device can be used. */
#include <math.h>
#include <stdio.h>

#include "kernels/backend.h"
#include "tests/device/cuda_unit.h"

/* One shot, token by token and odd chunks: bit for bit on the CPU. On CUDA the quantized
 * matmuls are batch invariant too (test_cuda_ops), but the weights left unquantized (rows
 * not whole blocks) take the GEMV at m <= 8 and cuBLAS past it, and decode attention splits
 * its keys, so sums round in another order: the paths must agree as the CUDA golden tests'
 * f32 paths do, within 2e-4 of the largest |logit| (test_cuda_golden.c's F32_REL_TOL for its
 * f32 fixtures); measured worst 3.5e-6 through tests/cuda-host. Each prints its difference. */
#define QUANT_CUDA_SELF_TOL 2e-4
static int quant_cuda_same(const float *a, const float *b, size_t n) {
    double scale = 0, worst = 0;
    for (size_t i = 0; i < n; i++) {
        double w = fabs(b[i]), d = fabs((double)a[i] - b[i]);
        if (w > scale) scale = w;
        if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
    }
    double rel = worst / (scale > 1 ? scale : 1);
    fprintf(stderr, "    paths agree to %.3g of the largest |logit| (cuda tol %.0e)\n", rel,
            QUANT_CUDA_SELF_TOL);
    return rel <= QUANT_CUDA_SELF_TOL;
}
#define QUANT_SAME_LOGITS(a, b, n) quant_cuda_same((a), (b), (n))

#define backend_cpu_create cuda_unit_backend
#define main quant_unit_main
#include "tests/unit/test_quant_model.c"
#undef main
#undef backend_cpu_create

int main(void) { return cuda_unit_main(quant_unit_main); }
