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

/* Rows [p, p + R) of a head's state (N = 128: 8 vectors a row) through T tokens, held in
 * registers from the first token to the last. Each element sees the operations of
 * cpu_ssd_avx512_token in the same order (the state's decay and update, the even and odd
 * vectors into two accumulators, their sum reduced, then d·x), so T tokens here equal T
 * calls of the token step bit for bit. */
static inline __attribute__((always_inline)) void ssd_rows128(
    float *restrict S, float *restrict y, int ld_y, const float *restrict x, int ld_x,
    const float *restrict B, const float *restrict C, int ld_bc, const float *restrict decay,
    const float *restrict delta, float d, int p, int T, const int R) {
    __m512 s[2][8];
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) s[r][v] = _mm512_loadu_ps(S + (size_t)(p + r) * 128 + v * 16);
    for (int t = 0; t < T; t++) {
        const float *Bt = B + (size_t)t * ld_bc, *Ct = C + (size_t)t * ld_bc;
        const float *xt = x + (size_t)t * ld_x;
        const __m512 va = _mm512_set1_ps(decay[t]);
        __m512 acc[2][2];
        __m512 vdx[2];
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            vdx[r] = _mm512_set1_ps(delta[t] * xt[p + r]);
            acc[r][0] = acc[r][1] = _mm512_setzero_ps();
        }
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) {
            __m512 bv = _mm512_loadu_ps(Bt + v * 16), cv = _mm512_loadu_ps(Ct + v * 16);
#pragma GCC unroll 2
            for (int r = 0; r < R; r++) {
                s[r][v] = _mm512_fmadd_ps(vdx[r], bv, _mm512_mul_ps(va, s[r][v]));
                acc[r][v & 1] = _mm512_fmadd_ps(s[r][v], cv, acc[r][v & 1]);
            }
        }
#pragma GCC unroll 2
        for (int r = 0; r < R; r++)
            y[(size_t)t * ld_y + p + r] =
                _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1])) + d * xt[p + r];
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int v = 0; v < 8; v++) _mm512_storeu_ps(S + (size_t)(p + r) * 128 + v * 16, s[r][v]);
}

int cpu_ssd_avx512_span(float *restrict S, float *restrict y, int ld_y, const float *restrict x,
                        int ld_x, const float *restrict B, const float *restrict C, int ld_bc,
                        const float *restrict decay, const float *restrict delta, float d, int P,
                        int N, int T) {
    if (N != 128) return 0;
    int p = 0;
    for (; p + 2 <= P; p += 2)
        ssd_rows128(S, y, ld_y, x, ld_x, B, C, ld_bc, decay, delta, d, p, T, 2);
    if (p < P) ssd_rows128(S, y, ld_y, x, ld_x, B, C, ld_bc, decay, delta, d, p, T, 1);
    return 1;
}
