/* qweight_rand.h - random rows of a quantized weight, for the quantized matmul tests
 * (tests/unit/test_cpu_qmatmul.c and the SIMDe AVX-512 run tests/avx512emu): rows of f32
 * noise at a random row scale quantized by the reference quantizer, or (raw) random bytes
 * with moderate f16 scales, which reach codes the quantizers never write (Q8_0's -128, Q4_K
 * scales and mins of 63). The including file defines rng_u32() and rng_f() (uniform in
 * [-1, 1)) before including it, so each test keeps its own generator and seed. Test-only. */
#ifndef STRATA_QWEIGHT_RAND_H
#define STRATA_QWEIGHT_RAND_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/dtype.h"
#include "engine/base/quant.h"

/* n rows of k elements of dt, row after row; the caller frees it. Aborts out of memory. */
static unsigned char *qweight_rand_rows(dtype dt, int n, int k, int raw) {
    size_t rb = dtype_row_bytes(dt, k), bb = dtype_row_bytes(dt, dtype_block_elems(dt));
    unsigned char *d = malloc(rb * (size_t)n);
    float *row = malloc(sizeof(float) * (size_t)k);
    if (!d || !row) abort();
    for (int j = 0; j < n; j++) {
        if (!raw) {
            float scale = 0.02f * (1 + (float)(rng_u32() % 50));
            for (int l = 0; l < k; l++) row[l] = rng_f() * scale;
            quant_quantize_row(d + (size_t)j * rb, row, dt, k);
            continue;
        }
        for (size_t i = 0; i < rb; i++) d[(size_t)j * rb + i] = (unsigned char)rng_u32();
        for (size_t b = 0; b < rb / bb; b++) {
            unsigned char *blk = d + (size_t)j * rb + b * bb;
            uint16_t h = dtype_f32_to_f16(rng_f() * 0.01f);
            memcpy(blk + (dt == DTYPE_Q6_K ? bb - 2 : 0), &h, 2);
            if (dt == DTYPE_Q4_K) { /* dmin */
                h = dtype_f32_to_f16(fabsf(rng_f()) * 0.01f);
                memcpy(blk + 2, &h, 2);
            }
        }
    }
    free(row);
    return d;
}

#endif
