/* cpu_ssd_avx2.c - the SSD token step (kernels/cpu/cpu_mamba.h) for AVX2 + FMA, built with
 * the Makefile's ISA_AVX2 flags and only called on a backend that picked avx2.
 *
 * The same single pass over the state as the AVX-512 step (cpu_ssd_avx512.c), 8 lanes
 * wide; the last N % 8 columns go through the scalar form. */
#include <immintrin.h>

#include "kernels/cpu/cpu_mamba.h"

static inline float avx2_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

void cpu_ssd_avx2_token(float *restrict S, float *restrict y, const float *restrict x,
                        const float *restrict B, const float *restrict C, float a, float dt,
                        float d, int P, int N) {
    const __m256 va = _mm256_set1_ps(a);
    for (int p = 0; p < P; p++) {
        float *Sp = S + (size_t)p * N;
        float dx = dt * x[p];
        const __m256 vdx = _mm256_set1_ps(dx);
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        int n = 0;
        for (; n + 16 <= N; n += 16) {
            __m256 s0 = _mm256_fmadd_ps(vdx, _mm256_loadu_ps(B + n),
                                        _mm256_mul_ps(va, _mm256_loadu_ps(Sp + n)));
            __m256 s1 = _mm256_fmadd_ps(vdx, _mm256_loadu_ps(B + n + 8),
                                        _mm256_mul_ps(va, _mm256_loadu_ps(Sp + n + 8)));
            _mm256_storeu_ps(Sp + n, s0);
            _mm256_storeu_ps(Sp + n + 8, s1);
            acc0 = _mm256_fmadd_ps(s0, _mm256_loadu_ps(C + n), acc0);
            acc1 = _mm256_fmadd_ps(s1, _mm256_loadu_ps(C + n + 8), acc1);
        }
        for (; n + 8 <= N; n += 8) {
            __m256 s0 = _mm256_fmadd_ps(vdx, _mm256_loadu_ps(B + n),
                                        _mm256_mul_ps(va, _mm256_loadu_ps(Sp + n)));
            _mm256_storeu_ps(Sp + n, s0);
            acc0 = _mm256_fmadd_ps(s0, _mm256_loadu_ps(C + n), acc0);
        }
        float acc = avx2_hsum(_mm256_add_ps(acc0, acc1));
        for (; n < N; n++) {
            float s = a * Sp[n] + dx * B[n];
            Sp[n] = s;
            acc += s * C[n];
        }
        y[p] = acc + d * x[p];
    }
}
