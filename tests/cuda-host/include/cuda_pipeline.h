/* cuda_pipeline.h for kernels/cuda compiled on the host: tests/cuda-host/README.md. The
 * asynchronous global -> shared copies complete at once here (a copy then a wait are what
 * the kernels order; a kernel reading a slot before waiting for it is a bug the GPU shows
 * and this runtime does not). */
#ifndef STRATA_HC_CUDA_PIPELINE_H
#define STRATA_HC_CUDA_PIPELINE_H
#include <string.h>

static inline void __pipeline_memcpy_async(void *dst, const void *src, size_t n, size_t zfill = 0) {
    memcpy(dst, src, n - zfill);
    if (zfill) memset((char *)dst + (n - zfill), 0, zfill);
}
static inline void __pipeline_commit(void) {}
static inline void __pipeline_wait_prior(size_t prior) { (void)prior; }
#endif
