/* cpu_kernels_avx512.c - the AVX-512 kernel table (F, BW, VL, DQ; built with the
 * Makefile's ISA_AVX512 flags and only called when cpu_backend_isa_supported says so).
 *
 * The matmuls live in cpu_matmul_avx512.c (F32 / F16 weights and BF16 ones). Tails
 * use masked loads, which never touch memory past the end. */
#include <immintrin.h>

#include "kernels/cpu/cpu_internal.h"

#define AI static inline __attribute__((always_inline))

static float avx512_sum(const float *restrict x, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(x + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(x + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(x + i + 48));
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < n; i++) s += x[i];
    return s;
}

static inline __mmask16 avx512_mask(int rem) {
    return rem >= 16 ? (__mmask16)0xffff : rem > 0 ? (__mmask16)((1u << rem) - 1) : 0;
}

/* Columns [j, j + 64) of S at a time, four vectors of 16; a masked-out vector reads
 * zeros and stores nothing, so the dv tail needs no separate path. */
static void avx512_delta_step(float *restrict s, float *restrict out, const float *restrict q,
                              const float *restrict k, const float *restrict v, float decay,
                              float beta, int dk, int dv) {
    __m512 vdec = _mm512_set1_ps(decay), vbeta = _mm512_set1_ps(beta);
    for (int j = 0; j < dv; j += 64) {
        __mmask16 mk[4];
        __m512 kv[4], d[4], o[4];
        for (int u = 0; u < 4; u++) {
            mk[u] = avx512_mask(dv - j - 16 * u);
            kv[u] = _mm512_setzero_ps();
            o[u] = _mm512_setzero_ps();
        }
        for (int i = 0; i < dk; i++) {
            float *row = s + (size_t)i * dv + j;
            __m512 kb = _mm512_set1_ps(k[i]);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                __m512 sv = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk[u], row + 16 * u), vdec);
                _mm512_mask_storeu_ps(row + 16 * u, mk[u], sv);
                kv[u] = _mm512_fmadd_ps(sv, kb, kv[u]);
            }
        }
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            d[u] = _mm512_mul_ps(
                vbeta, _mm512_sub_ps(_mm512_maskz_loadu_ps(mk[u], v + j + 16 * u), kv[u]));
        for (int i = 0; i < dk; i++) {
            float *row = s + (size_t)i * dv + j;
            __m512 kb = _mm512_set1_ps(k[i]), qb = _mm512_set1_ps(q[i]);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                __m512 sv = _mm512_fmadd_ps(kb, d[u], _mm512_maskz_loadu_ps(mk[u], row + 16 * u));
                _mm512_mask_storeu_ps(row + 16 * u, mk[u], sv);
                o[u] = _mm512_fmadd_ps(sv, qb, o[u]);
            }
        }
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) _mm512_mask_storeu_ps(out + j + 16 * u, mk[u], o[u]);
    }
}

static float avx512_dot(const float *restrict a, const float *restrict b, int n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), a1);
    }
    for (; i < n; i += 16) {
        __mmask16 mk = avx512_mask(n - i);
        a0 =
            _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, a + i), _mm512_maskz_loadu_ps(mk, b + i), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

static void avx512_axpby(float *restrict y, const float *restrict x, float a, float c, int n) {
    __m512 va = _mm512_set1_ps(a), vc = _mm512_set1_ps(c);
    for (int i = 0; i < n; i += 16) {
        __mmask16 mk = avx512_mask(n - i);
        __m512 yv = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, y + i), vc);
        _mm512_mask_storeu_ps(y + i, mk, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(mk, x + i), yv));
    }
}

/* avx512_dot of a against four rows: each row's two accumulators and final sum as there. */
static void avx512_dot4(const float *restrict a, const float *const *b, int n, float out[4]) {
    __m512 s0[4], s1[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) s0[r] = s1[r] = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 x0 = _mm512_loadu_ps(a + i), x1 = _mm512_loadu_ps(a + i + 16);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            s0[r] = _mm512_fmadd_ps(x0, _mm512_loadu_ps(b[r] + i), s0[r]);
            s1[r] = _mm512_fmadd_ps(x1, _mm512_loadu_ps(b[r] + i + 16), s1[r]);
        }
    }
    for (; i < n; i += 16) {
        __mmask16 mk = avx512_mask(n - i);
        __m512 x0 = _mm512_maskz_loadu_ps(mk, a + i);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            s0[r] = _mm512_fmadd_ps(x0, _mm512_maskz_loadu_ps(mk, b[r] + i), s0[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(s0[r], s1[r]));
}

/* Four avx512_axpby calls (c, then 1) on each 16 elements of y while they sit in a register
 * (the calls' y · 1 is y itself: y is never a signalling NaN, being arithmetic's result). */
static void avx512_axpy4(float *restrict y, const float *const *x, const float *a, float c, int n) {
    __m512 vc = _mm512_set1_ps(c), va[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) va[r] = _mm512_set1_ps(a[r]);
    for (int i = 0; i < n; i += 16) {
        __mmask16 mk = avx512_mask(n - i);
        __m512 yv = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, y + i), vc);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            yv = _mm512_fmadd_ps(va[r], _mm512_maskz_loadu_ps(mk, x[r] + i), yv);
        _mm512_mask_storeu_ps(y + i, mk, yv);
    }
}

/* e^x to ~1 ulp: x = n·ln2 + r with |r| <= ln2/2 (ln2 split in two for an exact
 * reduction), Cephes' degree-6 polynomial for e^r, then scalef by 2^n. Inputs are clamped
 * to [-87.3, 88.7], where expf is still finite and normal; beyond, callers' results
 * (a sigmoid of ±88, an exp that is then summed) are already at their limits. */
AI __m512 avx512_exp(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    return _mm512_scalef_ps(_mm512_add_ps(p, _mm512_set1_ps(1.0f)), n);
}

/* 1 + e^-g: the denominator of the sigmoid, a / (1 + e^-g) being a·sigmoid(g). */
AI __m512 avx512_sigmoid_den(__m512 g) {
    return _mm512_add_ps(_mm512_set1_ps(1.0f), avx512_exp(_mm512_sub_ps(_mm512_setzero_ps(), g)));
}

static void avx512_silu_mul(float *out, const float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 mk = avx512_mask(n - i > 16 ? 16 : (int)(n - i));
        __m512 gv = _mm512_maskz_loadu_ps(mk, g + i);
        __m512 s = _mm512_div_ps(gv, avx512_sigmoid_den(gv));
        if (u) s = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(mk, u + i));
        _mm512_mask_storeu_ps(out + i, mk, s);
    }
}

static void avx512_sigmoid_mul(float *x, const float *g, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 mk = avx512_mask(n - i > 16 ? 16 : (int)(n - i));
        __m512 sg = _mm512_div_ps(_mm512_set1_ps(1.0f),
                                  avx512_sigmoid_den(_mm512_maskz_loadu_ps(mk, g + i)));
        _mm512_mask_storeu_ps(x + i, mk, _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, x + i), sg));
    }
}

static float avx512_exp_sum(float *y, const float *x, float shift, int n) {
    __m512 acc = _mm512_setzero_ps(), sh = _mm512_set1_ps(shift);
    for (int i = 0; i < n; i += 16) {
        __mmask16 mk = avx512_mask(n - i);
        __m512 e = avx512_exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, x + i), sh));
        _mm512_mask_storeu_ps(y + i, mk, e);
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(mk, e));
    }
    return _mm512_reduce_add_ps(acc);
}

const cpu_kernels cpu_kernels_avx512 = {
    .name = "avx512",
    .matmul = cpu_matmul_f32_avx512,
    .matmul_bf16 = cpu_matmul_bf16_avx512,
    .pack_bf16 = cpu_pack_bf16_avx512,
    .sum = avx512_sum,
    .delta_step = avx512_delta_step,
    .dot = avx512_dot,
    .axpby = avx512_axpby,
    .dot4 = avx512_dot4,
    .axpy4 = avx512_axpy4,
    .silu_mul = avx512_silu_mul,
    .sigmoid_mul = avx512_sigmoid_mul,
    .exp_sum = avx512_exp_sum,
    .quantize_x = cpu_quantize_x_avx2, /* not a hot loop: AVX2's is enough */
    .q4k_swap_x = 1,
    .lane_sums = 1,
    .qmatmul = cpu_qmatmul_avx512,
};
