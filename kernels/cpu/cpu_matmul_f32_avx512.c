/* cpu_matmul_f32_avx512.c - out = x · Wᵀ for F32 and F16 weights on AVX-512: x stays f32,
 * W widens to f32 in registers (vcvtph2ps for F16), f32 FMA.
 *
 * The same layout as the BF16 kernels (cpu_matmul_bf16_avx512.c), with 16-element blocks:
 * every (i, j) is summed the same way by every kernel here, its blocks alternating
 * between two accumulators by parity (the masked tail block too), reduce(acc0 + acc1). So
 * a row's output does not depend on m or on the task split, as for BF16 weights. Decode
 * rows whose x fits in L1 (l1x) stream W one row at a time (one prefetched sequential stream per
 * thread); wider x (a 12544-wide down projection, prefill blocks) takes 4 × 3 tiles. */
#include <immintrin.h>

#include "kernels/cpu/cpu_internal.h"

#define AI static inline __attribute__((always_inline))

/* Prefetching 4 KiB ahead raised decode by 5-40% over the hardware prefetchers alone
 * (tools/bench_cpu_matmul.c, AMD EPYC Zen 5); prefetches never fault past the end. */
#define F32_PF_BYTES 4096

AI __m512 f32_ldw(const void *w, size_t off, dtype dt, __mmask16 mk) {
    if (dt == DTYPE_BF16) {
        __m256i h = _mm256_maskz_loadu_epi16(mk, (const uint16_t *)w + off);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    if (dt == DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)w + off));
    return _mm512_maskz_loadu_ps(mk, (const float *)w + off);
}
AI __mmask16 f32_mask(int rem) {
    return rem >= 16 ? (__mmask16)0xffff : rem > 0 ? (__mmask16)((1u << rem) - 1) : 0;
}

/* MR x rows (k apart) against NR W rows from j. */
AI void f32_tile(float *out, int ldo, const float *x, int k, const void *w, dtype dt, int j,
                 const int MR, const int NR, const int PF) {
    __m512 a0[8][3], a1[8][3];
    const int es = dt == DTYPE_F32 ? 4 : 2;
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 3
        for (int r = 0; r < NR; r++)
            a0[i][r] = a1[i][r] = _mm512_setzero_ps();
    const __mmask16 all = (__mmask16)0xffff;
    int l = 0;
    for (; l + 32 <= k; l += 32) {
        __m512 w0[3], w1[3];
#pragma GCC unroll 3
        for (int r = 0; r < NR; r++) {
            size_t off = (size_t)(j + r) * k + l;
            if (PF)
                for (int q = 0; q < 32 * es; q += 64)
                    _mm_prefetch((const char *)w + off * es + F32_PF_BYTES + q, _MM_HINT_T0);
            w0[r] = f32_ldw(w, off, dt, all);
            w1[r] = f32_ldw(w, off + 16, dt, all);
        }
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            __m512 x0 = _mm512_loadu_ps(x + (size_t)i * k + l);
            __m512 x1 = _mm512_loadu_ps(x + (size_t)i * k + l + 16);
#pragma GCC unroll 3
            for (int r = 0; r < NR; r++) {
                a0[i][r] = _mm512_fmadd_ps(x0, w0[r], a0[i][r]);
                a1[i][r] = _mm512_fmadd_ps(x1, w1[r], a1[i][r]);
            }
        }
    }
    if (l < k) { /* 1..31 left: an even block, then maybe an odd one */
        __mmask16 m0 = f32_mask(k - l), m1 = f32_mask(k - l - 16);
#pragma GCC unroll 3
        for (int r = 0; r < NR; r++) {
            size_t off = (size_t)(j + r) * k + l;
            __m512 w0 = f32_ldw(w, off, dt, m0), w1 = f32_ldw(w, off + 16, dt, m1);
#pragma GCC unroll 8
            for (int i = 0; i < MR; i++) {
                a0[i][r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, x + (size_t)i * k + l), w0, a0[i][r]);
                if (m1)
                    a1[i][r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, x + (size_t)i * k + l + 16),
                                               w1, a1[i][r]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 3
        for (int r = 0; r < NR; r++)
            out[(size_t)i * ldo + j + r] = _mm512_reduce_add_ps(_mm512_add_ps(a0[i][r], a1[i][r]));
}

AI void f32_stream(float *out, int ldo, const float *x, int k, const void *w, dtype dt, int m,
                   int n0, int n1) {
    for (int j = n0; j < n1; j++) {
        int i = 0;
        for (; i + 8 <= m; i += 8)
            f32_tile(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 8, 1, 1);
        for (; i + 4 <= m; i += 4)
            f32_tile(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 4, 1, 1);
        switch (m - i) {
        case 3: f32_tile(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 3, 1, 1); break;
        case 2: f32_tile(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 2, 1, 1); break;
        case 1: f32_tile(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 1, 1, 1); break;
        default: break;
        }
    }
}

AI void f32_tiles_m(float *out, int ldo, const float *x, int k, const void *w, dtype dt, int m,
                    int j, const int NR, const int PF) {
    int i = 0;
    for (; i + 4 <= m; i += 4)
        f32_tile(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 4, NR, PF);
    switch (m - i) {
    case 3: f32_tile(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 3, NR, PF); break;
    case 2: f32_tile(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 2, NR, PF); break;
    case 1: f32_tile(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 1, NR, PF); break;
    default: break;
    }
}

AI void f32_matmul_dt(float *restrict out, int ldo, const float *restrict x,
                      const void *restrict w, dtype dt, int k, int m, int n0, int n1, int l1x) {
    if ((size_t)m * k * 4 <= (size_t)l1x) {
        f32_stream(out, ldo, x, k, w, dt, m, n0, n1);
        return;
    }
    int j = n0;
    if (m < 16) { /* a decode batch: still bound by the weight stream, so prefetch it */
        for (; j + 3 <= n1; j += 3)
            f32_tiles_m(out, ldo, x, k, w, dt, m, j, 3, 1);
        if (n1 - j == 2) f32_tiles_m(out, ldo, x, k, w, dt, m, j, 2, 1);
        if (n1 - j == 1) f32_tiles_m(out, ldo, x, k, w, dt, m, j, 1, 1);
        return;
    }
    for (; j + 3 <= n1; j += 3)
        f32_tiles_m(out, ldo, x, k, w, dt, m, j, 3, 0);
    if (n1 - j == 2) f32_tiles_m(out, ldo, x, k, w, dt, m, j, 2, 0);
    if (n1 - j == 1) f32_tiles_m(out, ldo, x, k, w, dt, m, j, 1, 0);
}

/* One instantiation per dtype so the widening is resolved at compile time. BF16 weights
 * come here only for a k wider than the packing scratch (no model has one). */
void cpu_matmul_f32_avx512(float *restrict out, int ldo, const float *restrict x,
                           const void *restrict w, dtype dt, int k, int m, int n0, int n1,
                           int l1x) {
    if (dt == DTYPE_F16)
        f32_matmul_dt(out, ldo, x, w, DTYPE_F16, k, m, n0, n1, l1x);
    else if (dt == DTYPE_BF16)
        f32_matmul_dt(out, ldo, x, w, DTYPE_BF16, k, m, n0, n1, l1x);
    else
        f32_matmul_dt(out, ldo, x, w, DTYPE_F32, k, m, n0, n1, l1x);
}
