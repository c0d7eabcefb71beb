/* cpu_tile.c - the plain-C tile product (cpu_tile.h) and the per-ISA pick. The scalar
 * backend runs this one, so the chunked scans are tested on it too. */
#include "kernels/cpu/cpu_tile.h"

#include "kernels/cpu/cpu_backend.h"

void cpu_tile_gemm_ref(float *restrict c, int ldc, const float *restrict a, int lda,
                       const float *restrict b, int ldb, int m, int n, int k, float alpha) {
    for (int i = 0; i < m; i++) {
        float *ci = c + (size_t)i * ldc;
        for (int j = 0; j < n; j++) ci[j] = alpha != 0.0f ? alpha * ci[j] : 0.0f;
        for (int l = 0; l < k; l++) {
            float ail = a[(size_t)i * lda + l];
            const float *bl = b + (size_t)l * ldb;
            for (int j = 0; j < n; j++) ci[j] += ail * bl[j];
        }
    }
}

cpu_tile_gemm_fn cpu_tile_gemm_of(const backend *b) {
    switch (cpu_backend_isa(b)) {
    case CPU_ISA_AVX512: return cpu_tile_avx512_gemm;
    case CPU_ISA_AVX2: return cpu_tile_avx2_gemm;
    default: return cpu_tile_gemm_ref;
    }
}
