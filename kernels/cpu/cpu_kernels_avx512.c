/* cpu_kernels_avx512.c - the AVX-512 kernel table (F, BW, VL, DQ; built with the
 * Makefile's ISA_AVX512 flags and only called when cpu_backend_isa_supported says so).
 *
 * Matmul here serves F16 (vcvtph2ps) and F32 weights, widened to f32 in registers and
 * accumulated with FMA (BF16 weights take vdpbf16ps in cpu_matmul_bf16_avx512.c). Tails
 * use masked loads, which never touch memory past the end. */
#include <immintrin.h>

#include "kernels/cpu/cpu_internal.h"

#define AI static inline __attribute__((always_inline))

#ifndef AVX512_STREAM_M
#define AVX512_STREAM_M 8 /* m below which matmul streams W row by row (decode) */
#endif

/* 16 weights from element off of w, as f32; mask mk selects the lanes read. */
AI __m512 avx512_ldw(const void *w, size_t off, dtype dt, __mmask16 mk) {
    if (dt == DTYPE_BF16) {
        __m256i h = _mm256_maskz_loadu_epi16(mk, (const uint16_t *)w + off);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    if (dt == DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)w + off));
    return _mm512_maskz_loadu_ps(mk, (const float *)w + off);
}

/* One k-step of 16 for avx512_tile: run unmasked (an all-ones mask folds to plain loads)
 * over whole vectors, then once masked for the tail. */
#define AVX512_TILE_STEP(MK)                                                                       \
    do {                                                                                           \
        __m512 wv[4];                                                                              \
        _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) wv[r] =                               \
            avx512_ldw(w, (size_t)(j + r) * k + l, dt, (MK));                                      \
        _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {                                     \
            __m512 xv = _mm512_maskz_loadu_ps((MK), x + (size_t)i * k + l);                        \
            _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) acc[i][r] =                       \
                _mm512_fmadd_ps(xv, wv[r], acc[i][r]);                                             \
        }                                                                                          \
    } while (0)

/* out[i, j + r] for i < MR, r < NR: MR rows of x against NR rows of W, MR·NR accumulators. */
AI void avx512_tile(float *out, int ldo, const float *x, int k, const void *w, dtype dt, int j,
                    const int MR, const int NR) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            acc[i][r] = _mm512_setzero_ps();
    int l = 0;
    for (; l + 16 <= k; l += 16)
        AVX512_TILE_STEP((__mmask16)0xffff);
    if (l < k) AVX512_TILE_STEP((__mmask16)((1u << (k - l)) - 1));
#undef AVX512_TILE_STEP
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            out[(size_t)i * ldo + j + r] = _mm512_reduce_add_ps(acc[i][r]);
}

/* Software prefetch distance for the decode weight stream, in bytes ahead of the loads.
 * The hardware prefetchers alone left m = 1 at 75-90% of the streaming-read probe, and at
 * ~50% when x does not fit in L1 (k >= 8192); prefetching every line 4 KiB ahead into L1
 * raised all shapes by 5-40% (tools/bench_cpu_matmul.c, AMD EPYC Zen 5). Prefetches never
 * fault, so running past the end of W is harmless. */
#define AVX512_PF_BYTES 4096

/* Prefetches the `bytes` of W that one unrolled step reads, PF bytes ahead of p. */
AI void avx512_prefetch(const void *p, int bytes, int pf) {
#pragma GCC unroll 4
    for (int q = 0; q < bytes; q += 64)
        _mm_prefetch((const char *)p + pf + q, _MM_HINT_T0);
}

/* out[i, j] for i < MR against the single W row j, k unrolled U times (MR·U independent
 * accumulators hide the FMA latency). Walking W one row after another makes each thread
 * one sequential stream; four rows read side by side (the 4×4 tile) reached only ~55-70%
 * of the streaming-read probe on m = 1 (measured on the dev machine, AMD EPYC Zen 5). */
AI void avx512_row(float *out, int ldo, const float *x, int k, const void *w, dtype dt, int j,
                   const int MR, const int U) {
    __m512 acc[4][4];
    const size_t row = (size_t)j * k;
    const int es = dt == DTYPE_F32 ? 4 : 2;
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int u = 0; u < U; u++)
            acc[i][u] = _mm512_setzero_ps();
    int l = 0;
    for (; l + 16 * U <= k; l += 16 * U) {
        avx512_prefetch((const char *)w + (row + l) * es, 16 * U * es, AVX512_PF_BYTES);
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) {
            __m512 wv = avx512_ldw(w, row + l + 16 * u, dt, (__mmask16)0xffff);
#pragma GCC unroll 4
            for (int i = 0; i < MR; i++)
                acc[i][u] =
                    _mm512_fmadd_ps(_mm512_loadu_ps(x + (size_t)i * k + l + 16 * u), wv, acc[i][u]);
        }
    }
    for (; l < k; l += 16) {
        __mmask16 mk = k - l >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - l)) - 1);
        __m512 wv = avx512_ldw(w, row + l, dt, mk);
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++)
            acc[i][0] =
                _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, x + (size_t)i * k + l), wv, acc[i][0]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) {
#pragma GCC unroll 4
        for (int u = 1; u < U; u++)
            acc[i][0] = _mm512_add_ps(acc[i][0], acc[i][u]);
        out[(size_t)i * ldo + j] = _mm512_reduce_add_ps(acc[i][0]);
    }
}

/* x rows longer than this (in floats) no longer fit in L1 next to the weight stream. */
#ifndef AVX512_WIDE_K
#define AVX512_WIDE_K 8192
#endif

/* out[j + r] for r < R: one x row against R consecutive W rows, k unrolled twice. For a
 * wide x (k > AVX512_WIDE_K, e.g. the 12288-wide Gemma 4 down projection) each x vector
 * comes from L2, and sharing it between R rows cuts that traffic R times: R = 3 reached
 * ~33 GB/s where one row at a time reached ~28 (Zen 5, one thread). For narrower x the
 * single-row walk is faster (R streams side by side defeat the prefetchers). */
AI void avx512_rows(float *out, const float *x, int k, const void *w, dtype dt, int j,
                    const int R) {
    enum { U = 2 };
    __m512 acc[3][U];
    const int es = dt == DTYPE_F32 ? 4 : 2;
#pragma GCC unroll 3
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int u = 0; u < U; u++)
            acc[r][u] = _mm512_setzero_ps();
    int l = 0;
    for (; l + 16 * U <= k; l += 16 * U) {
#pragma GCC unroll 3
        for (int r = 0; r < R; r++)
            avx512_prefetch((const char *)w + ((size_t)(j + r) * k + l) * es, 16 * U * es,
                            AVX512_PF_BYTES / 2);
#pragma GCC unroll 2
        for (int u = 0; u < U; u++) {
            __m512 xv = _mm512_loadu_ps(x + l + 16 * u);
#pragma GCC unroll 3
            for (int r = 0; r < R; r++)
                acc[r][u] = _mm512_fmadd_ps(
                    xv, avx512_ldw(w, (size_t)(j + r) * k + l + 16 * u, dt, (__mmask16)0xffff),
                    acc[r][u]);
        }
    }
    for (; l < k; l += 16) {
        __mmask16 mk = k - l >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - l)) - 1);
        __m512 xv = _mm512_maskz_loadu_ps(mk, x + l);
#pragma GCC unroll 3
        for (int r = 0; r < R; r++)
            acc[r][0] =
                _mm512_fmadd_ps(xv, avx512_ldw(w, (size_t)(j + r) * k + l, dt, mk), acc[r][0]);
    }
#pragma GCC unroll 3
    for (int r = 0; r < R; r++)
        out[j + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]));
}

AI void avx512_matmul_dt(float *restrict out, int ldo, const float *restrict x,
                         const void *restrict w, dtype dt, int k, int m, int n0, int n1) {
    if (m == 1 && k > AVX512_WIDE_K) { /* batch-1 decode with an x too wide for L1 */
        int j = n0;
        for (; j + 3 <= n1; j += 3)
            avx512_rows(out, x, k, w, dt, j, 3);
        for (; j < n1; j++)
            avx512_rows(out, x, k, w, dt, j, 1);
        return;
    }
    if (m < AVX512_STREAM_M) {
        /* Decode: bound by the weight stream. One W row at a time for every x row; a
         * second group of x rows re-reads the row from L1, not from memory. */
        for (int j = n0; j < n1; j++) {
            int i = 0;
            for (; i + 4 <= m; i += 4)
                avx512_row(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 4, 2);
            switch (m - i) {
            case 3:
                avx512_row(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 3, 2);
                break;
            case 2:
                avx512_row(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 2, 4);
                break;
            case 1:
                avx512_row(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 1, 4);
                break;
            default: break;
            }
        }
        return;
    }
    /* Prefill: compute-bound; 4×4 tiles reuse each loaded weight vector for four x rows
     * and each x vector for four weights. */
    int j = n0;
    for (; j + 4 <= n1; j += 4) {
        int i = 0;
        for (; i + 4 <= m; i += 4)
            avx512_tile(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 4, 4);
        for (; i < m; i++)
            avx512_tile(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 1, 4);
    }
    for (; j < n1; j++) {
        int i = 0;
        for (; i + 4 <= m; i += 4)
            avx512_tile(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 4, 1);
        for (; i < m; i++)
            avx512_tile(out + (size_t)i * ldo, ldo, x + (size_t)i * k, k, w, dt, j, 1, 1);
    }
}

static void avx512_matmul(float *restrict out, int ldo, const float *restrict x,
                          const void *restrict w, dtype dt, int k, int m, int n0, int n1) {
    /* One instantiation per dtype so the widening is resolved at compile time. */
    if (dt == DTYPE_BF16)
        avx512_matmul_dt(out, ldo, x, w, DTYPE_BF16, k, m, n0, n1);
    else if (dt == DTYPE_F16)
        avx512_matmul_dt(out, ldo, x, w, DTYPE_F16, k, m, n0, n1);
    else
        avx512_matmul_dt(out, ldo, x, w, DTYPE_F32, k, m, n0, n1);
}

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
    for (; i < n; i++)
        s += x[i];
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
        for (int u = 0; u < 4; u++)
            _mm512_mask_storeu_ps(out + j + 16 * u, mk[u], o[u]);
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

static void avx512_silu_mul(float *out, const float *g, const float *u, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 mk = avx512_mask(n - i > 16 ? 16 : (int)(n - i));
        __m512 gv = _mm512_maskz_loadu_ps(mk, g + i);
        __m512 s = _mm512_div_ps(
            gv, _mm512_add_ps(one, avx512_exp(_mm512_sub_ps(_mm512_setzero_ps(), gv))));
        if (u) s = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(mk, u + i));
        _mm512_mask_storeu_ps(out + i, mk, s);
    }
}

static void avx512_sigmoid_mul(float *x, const float *g, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 mk = avx512_mask(n - i > 16 ? 16 : (int)(n - i));
        __m512 gv = _mm512_maskz_loadu_ps(mk, g + i);
        __m512 sg = _mm512_div_ps(
            one, _mm512_add_ps(one, avx512_exp(_mm512_sub_ps(_mm512_setzero_ps(), gv))));
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
    .matmul = avx512_matmul,
    .matmul_bf16 = cpu_matmul_bf16_avx512,
    .pack_bf16 = cpu_pack_bf16_avx512,
    .sum = avx512_sum,
    .delta_step = avx512_delta_step,
    .dot = avx512_dot,
    .axpby = avx512_axpby,
    .silu_mul = avx512_silu_mul,
    .sigmoid_mul = avx512_sigmoid_mul,
    .exp_sum = avx512_exp_sum,
};
