/* cpu_ssd_avx512.c - the SSD token step (kernels/cpu/cpu_mamba.h) for AVX-512 F, built
 * with the Makefile's ISA_AVX512 flags and only called on a backend that picked avx512.
 *
 * One pass over the head's state per token: each row p of S is decayed, gets its rank-1
 * update dt·x[p]·B and is contracted with C while it is in registers, so decode reads and
 * writes the state once. Tails are masked loads and stores, never past N. */
#include <immintrin.h>

#include "kernels/cpu/cpu_mamba.h"

void cpu_ssd_avx512_token(float *restrict S, float *restrict y, const float *restrict x,
                          const float *restrict B, const float *restrict C, float a, float dt,
                          float d, int P, int N) {
    const __m512 va = _mm512_set1_ps(a);
    for (int p = 0; p < P; p++) {
        float *Sp = S + (size_t)p * N;
        const __m512 vdx = _mm512_set1_ps(dt * x[p]);
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        int n = 0;
        for (; n + 32 <= N; n += 32) {
            __m512 s0 = _mm512_fmadd_ps(vdx, _mm512_loadu_ps(B + n),
                                        _mm512_mul_ps(va, _mm512_loadu_ps(Sp + n)));
            __m512 s1 = _mm512_fmadd_ps(vdx, _mm512_loadu_ps(B + n + 16),
                                        _mm512_mul_ps(va, _mm512_loadu_ps(Sp + n + 16)));
            _mm512_storeu_ps(Sp + n, s0);
            _mm512_storeu_ps(Sp + n + 16, s1);
            acc0 = _mm512_fmadd_ps(s0, _mm512_loadu_ps(C + n), acc0);
            acc1 = _mm512_fmadd_ps(s1, _mm512_loadu_ps(C + n + 16), acc1);
        }
        for (; n < N; n += 16) {
            __mmask16 mk = N - n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (N - n)) - 1);
            __m512 s0 = _mm512_fmadd_ps(vdx, _mm512_maskz_loadu_ps(mk, B + n),
                                        _mm512_mul_ps(va, _mm512_maskz_loadu_ps(mk, Sp + n)));
            _mm512_mask_storeu_ps(Sp + n, mk, s0);
            acc0 = _mm512_fmadd_ps(s0, _mm512_maskz_loadu_ps(mk, C + n), acc0);
        }
        y[p] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + d * x[p];
    }
}
