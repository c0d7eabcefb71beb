/* test_kv.h - kv cache halves for the attention tests (tests/unit/test_cpu_mixers.c,
 * tests/device/cuda_ops_mixers.c): a host buffer of either cache dtype from f32 values, and
 * back. Test-only. */
#ifndef STRATA_TEST_KV_H
#define STRATA_TEST_KV_H

#include <stdint.h>
#include <stdlib.h>

#include "engine/base/dtype.h"

/* n values of src as a cache half of dt (F32 as they are, BF16 rounded to nearest even);
 * malloc'ed, aborts when out of memory. */
static inline void *test_kv_half(const float *src, size_t n, dtype dt) {
    void *p = malloc((n ? n : 1) * dtype_size(dt));
    if (!p) abort();
    for (size_t i = 0; i < n; i++) {
        if (dt == DTYPE_BF16) ((uint16_t *)p)[i] = dtype_f32_to_bf16(src[i]);
        else ((float *)p)[i] = src[i];
    }
    return p;
}

/* A cache half's n values as f32 (exact for both dtypes); malloc'ed. */
static inline float *test_kv_widen(const void *p, size_t n, dtype dt) {
    float *f = malloc((n ? n : 1) * sizeof(float));
    if (!f) abort();
    for (size_t i = 0; i < n; i++)
        f[i] =
            dt == DTYPE_BF16 ? dtype_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
    return f;
}

#endif
