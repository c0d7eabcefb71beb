/* cpu_kernels_avx2.c - the AVX2 + FMA + F16C kernel table (built with the Makefile's
 * ISA_AVX2 flags, called only when cpu_backend_isa_supported says so).
 *
 * The same scheme as the AVX-512 table with 8-lane vectors (the matmuls live in
 * cpu_matmul_avx2.c). AVX2 has no cheap masked 16-bit loads, so dv tails run scalar code
 * on exactly the remaining elements. */
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/cpu_internal.h"

#define AI static inline __attribute__((always_inline))

AI float avx2_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static float avx2_sum(const float *restrict x, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
    }
    float s = avx2_hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) s += x[i];
    return s;
}

/* NV vectors of 8 columns starting at column j (see cpu_kernels_avx512.c). */
AI void avx2_delta_cols(float *s, float *out, const float *q, const float *k, const float *v,
                        float decay, float beta, int dk, int dv, int j, const int NV) {
    __m256 vdec = _mm256_set1_ps(decay), kv[4], d[4], o[4];
#pragma GCC unroll 4
    for (int u = 0; u < NV; u++) kv[u] = o[u] = _mm256_setzero_ps();
    for (int i = 0; i < dk; i++) {
        float *row = s + (size_t)i * dv + j;
        __m256 kb = _mm256_set1_ps(k[i]);
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++) {
            __m256 sv = _mm256_mul_ps(_mm256_loadu_ps(row + 8 * u), vdec);
            _mm256_storeu_ps(row + 8 * u, sv);
            kv[u] = _mm256_fmadd_ps(sv, kb, kv[u]);
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < NV; u++)
        d[u] = _mm256_mul_ps(_mm256_set1_ps(beta),
                             _mm256_sub_ps(_mm256_loadu_ps(v + j + 8 * u), kv[u]));
    for (int i = 0; i < dk; i++) {
        float *row = s + (size_t)i * dv + j;
        __m256 kb = _mm256_set1_ps(k[i]), qb = _mm256_set1_ps(q[i]);
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++) {
            __m256 sv = _mm256_fmadd_ps(kb, d[u], _mm256_loadu_ps(row + 8 * u));
            _mm256_storeu_ps(row + 8 * u, sv);
            o[u] = _mm256_fmadd_ps(sv, qb, o[u]);
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < NV; u++) _mm256_storeu_ps(out + j + 8 * u, o[u]);
}

static void avx2_delta_step(float *restrict s, float *restrict out, const float *restrict q,
                            const float *restrict k, const float *restrict v, float decay,
                            float beta, int dk, int dv) {
    int j = 0;
    for (; j + 32 <= dv; j += 32) avx2_delta_cols(s, out, q, k, v, decay, beta, dk, dv, j, 4);
    for (; j + 8 <= dv; j += 8) avx2_delta_cols(s, out, q, k, v, decay, beta, dk, dv, j, 1);
    for (; j < dv; j++) { /* scalar tail columns, same math */
        float kv = 0.0f, o = 0.0f;
        for (int i = 0; i < dk; i++) {
            s[(size_t)i * dv + j] *= decay;
            kv += s[(size_t)i * dv + j] * k[i];
        }
        float d = beta * (v[j] - kv);
        for (int i = 0; i < dk; i++) {
            s[(size_t)i * dv + j] += k[i] * d;
            o += s[(size_t)i * dv + j] * q[i];
        }
        out[j] = o;
    }
}

static float avx2_dot(const float *restrict a, const float *restrict b, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    float s = avx2_hsum(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static void avx2_axpby(float *restrict y, const float *restrict x, float a, float c, int n) {
    __m256 va = _mm256_set1_ps(a), vc = _mm256_set1_ps(c);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i),
                                                _mm256_mul_ps(_mm256_loadu_ps(y + i), vc)));
    for (; i < n; i++) y[i] = y[i] * c + a * x[i];
}

/* avx2_dot of a against four rows: each row's two accumulators, sum and tail as there. */
static void avx2_dot4(const float *restrict a, const float *const *b, int n, float out[4]) {
    __m256 s0[4], s1[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) s0[r] = s1[r] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x0 = _mm256_loadu_ps(a + i), x1 = _mm256_loadu_ps(a + i + 8);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            s0[r] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(b[r] + i), s0[r]);
            s1[r] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(b[r] + i + 8), s1[r]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        __m256 x0 = _mm256_loadu_ps(a + i);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) s0[r] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(b[r] + i), s0[r]);
    }
    for (int r = 0; r < 4; r++) {
        float s = avx2_hsum(_mm256_add_ps(s0[r], s1[r]));
        for (int e = i; e < n; e++) s += a[e] * b[r][e];
        out[r] = s;
    }
}

/* Four avx2_axpby calls (c, then 1) on each 8 elements of y while they sit in a register (the
 * calls' y · 1 is y itself: y is never a signalling NaN, being arithmetic's result). */
static void avx2_axpy4(float *restrict y, const float *const *x, const float *a, float c, int n) {
    __m256 vc = _mm256_set1_ps(c), va[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) va[r] = _mm256_set1_ps(a[r]);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 yv = _mm256_mul_ps(_mm256_loadu_ps(y + i), vc);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) yv = _mm256_fmadd_ps(va[r], _mm256_loadu_ps(x[r] + i), yv);
        _mm256_storeu_ps(y + i, yv);
    }
    for (; i < n; i++) {
        float v = y[i] * c + a[0] * x[0][i];
        for (int r = 1; r < 4; r++) v = v + a[r] * x[r][i];
        y[i] = v;
    }
}

/* e^x to ~1 ulp (see avx512_exp); 2^n is built in the exponent field, so x is clamped
 * to [-87.3, 88.3] where n stays within [-126, 127]. */
AI __m256 avx2_exp(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* 1 + e^-g: the denominator of the sigmoid, a / (1 + e^-g) being a·sigmoid(g). */
AI __m256 avx2_sigmoid_den(__m256 g) {
    return _mm256_add_ps(_mm256_set1_ps(1.0f), avx2_exp(_mm256_sub_ps(_mm256_setzero_ps(), g)));
}

static void avx2_silu_mul(float *out, const float *g, const float *u, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i);
        __m256 s = _mm256_div_ps(gv, avx2_sigmoid_den(gv));
        if (u) s = _mm256_mul_ps(s, _mm256_loadu_ps(u + i));
        _mm256_storeu_ps(out + i, s);
    }
    for (; i < n; i++) {
        float s = g[i] / (1.0f + expf(-g[i]));
        out[i] = u ? s * u[i] : s;
    }
}

static void avx2_sigmoid_mul(float *x, const float *g, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 sg = _mm256_div_ps(_mm256_set1_ps(1.0f), avx2_sigmoid_den(_mm256_loadu_ps(g + i)));
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), sg));
    }
    for (; i < n; i++) x[i] *= 1.0f / (1.0f + expf(-g[i]));
}

static float avx2_exp_sum(float *y, const float *x, float shift, int n) {
    __m256 acc = _mm256_setzero_ps(), sh = _mm256_set1_ps(shift);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = avx2_exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh));
        _mm256_storeu_ps(y + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    float s = avx2_hsum(acc);
    for (; i < n; i++) s += y[i] = expf(x[i] - shift);
    return s;
}

const cpu_kernels cpu_kernels_avx2 = {
    .name = "avx2",
    .matmul = cpu_matmul_f32_avx2,
    .matmul_bf16 = cpu_matmul_bf16_avx2,
    .pack_bf16 = cpu_pack_bf16_avx2,
    .sum = avx2_sum,
    .delta_step = avx2_delta_step,
    .dot = avx2_dot,
    .axpby = avx2_axpby,
    .dot4 = avx2_dot4,
    .axpy4 = avx2_axpy4,
    .silu_mul = avx2_silu_mul,
    .sigmoid_mul = avx2_sigmoid_mul,
    .exp_sum = avx2_exp_sum,
    .quantize_x = cpu_quantize_x_avx2,
    .lane_sums = 1,
    .qmatmul = cpu_qmatmul_avx2,
};
