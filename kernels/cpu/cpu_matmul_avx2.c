/* cpu_matmul_avx2.c - out = x · Wᵀ on AVX2 + FMA, for every weight dtype: the F32 / F16 /
 * BF16 weights of cpu_matmul_fn with f32 x, and BF16 weights with x already rounded to
 * bf16 by cpu_matmul.c (cpu_matmul_bf16_fn; the semantics every ISA shares).
 *
 * AVX2 has no bf16 dot product: operands widen to f32 and meet in f32 FMAs, which is exact
 * for bf16 products. Each (i, j) is summed the same way by every kernel of a family,
 * whatever m and the task split (batch invariance, as on AVX-512):
 *  f32 x   16-element blocks whose low and high halves go to two accumulators per output
 *          (bf16 W widened by a shift into the high half, f16 through vcvtph2ps), then
 *          the k % 16 tail in order; tiles of MR·NR <= 4 outputs.
 *  bf16 x  (the models' BF16 weights) one accumulator per output, fed the even, then the
 *          odd elements of each 16-element block, then the k % 16 tail in order. Half the
 *          accumulators per output let a tile hold 8 outputs (2 x rows × 4 W rows), and
 *          widening by even / odd lanes costs a shift or a mask per 8 elements and no
 *          shuffle: prefill ran at 70 GFLOP/s on one Zen 3 core against 42 for the
 *          two-accumulator 2 × 2 tile (FMA peak measured 103).
 * AVX2 has no cheap masked 16-bit loads, so tails run scalar code on exactly the remaining
 * elements. */
#include <immintrin.h>

#include "kernels/cpu/cpu_internal.h"

#define AI static inline __attribute__((always_inline))

/* Prefetch distance of the decode weight stream (see F32_PF_BYTES). */
#define MM2_PF_BYTES 4096

/* 8 elements of a dt array from element off, as f32. */
AI __m256 mm2_ld(const void *p, size_t off, dtype dt) {
    if (dt == DTYPE_BF16) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + off));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    if (dt == DTYPE_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + off)));
    return _mm256_loadu_ps((const float *)p + off);
}

AI float mm2_at(const void *p, size_t off, dtype dt) {
    if (dt == DTYPE_BF16) return dtype_bf16_to_f32(((const uint16_t *)p)[off]);
    if (dt == DTYPE_F16) return dtype_f16_to_f32(((const uint16_t *)p)[off]);
    return ((const float *)p)[off];
}

AI float mm2_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* MR rows of x (dtype xt, rows ldx elements apart) against NR W rows from j. */
AI void mm2_tile(float *out, int ldo, const void *x, dtype xt, int ldx, const void *w, dtype dt,
                 int k, int j, const int MR, const int NR, const int PF) {
    __m256 a0[4][2], a1[4][2];
    const int es = dt == DTYPE_F32 ? 4 : 2;
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++) a0[i][r] = a1[i][r] = _mm256_setzero_ps();
    int l = 0;
    for (; l + 16 <= k; l += 16) {
        __m256 w0[2], w1[2];
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++) {
            size_t off = (size_t)(j + r) * k + l;
            if (PF && (es == 4 || (l & 31) == 0))
                _mm_prefetch((const char *)w + off * es + MM2_PF_BYTES, _MM_HINT_T0);
            w0[r] = mm2_ld(w, off, dt);
            w1[r] = mm2_ld(w, off + 8, dt);
        }
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            __m256 x0 = mm2_ld(x, (size_t)i * ldx + l, xt),
                   x1 = mm2_ld(x, (size_t)i * ldx + l + 8, xt);
#pragma GCC unroll 2
            for (int r = 0; r < NR; r++) {
                a0[i][r] = _mm256_fmadd_ps(x0, w0[r], a0[i][r]);
                a1[i][r] = _mm256_fmadd_ps(x1, w1[r], a1[i][r]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++) {
            float s = mm2_hsum(_mm256_add_ps(a0[i][r], a1[i][r]));
            for (int t = l; t < k; t++)
                s += mm2_at(x, (size_t)i * ldx + t, xt) * mm2_at(w, (size_t)(j + r) * k + t, dt);
            out[(size_t)i * ldo + j + r] = s;
        }
}

/* Rows of x against W rows [j, j + NR): four rows at a time for one W row (decode, one
 * prefetched stream per thread), else two. */
AI void mm2_rows_m(float *out, int ldo, const void *x, dtype xt, int ldx, const void *w, dtype dt,
                   int k, int m, int j, const int NR, const int PF) {
    int i = 0;
#define MM2_AT(I)                                                                                  \
    out + (size_t)(I)*ldo, ldo, (const char *)x + (size_t)(I)*ldx *(xt == DTYPE_F32 ? 4 : 2)
    if (NR == 1) {
        for (; i + 4 <= m; i += 4) mm2_tile(MM2_AT(i), xt, ldx, w, dt, k, j, 4, 1, PF);
        if (m - i == 3) mm2_tile(MM2_AT(i), xt, ldx, w, dt, k, j, 3, 1, PF);
    }
    for (; i + 2 <= m; i += 2) mm2_tile(MM2_AT(i), xt, ldx, w, dt, k, j, 2, NR, PF);
    if (i < m) mm2_tile(MM2_AT(i), xt, ldx, w, dt, k, j, 1, NR, PF);
#undef MM2_AT
}

AI void mm2_matmul(float *restrict out, int ldo, const void *restrict x, dtype xt, int ldx,
                   const void *restrict w, dtype dt, int k, int m, int n0, int n1) {
    if (m < 8) { /* decode: the weight stream bounds it */
        for (int j = n0; j < n1; j++) mm2_rows_m(out, ldo, x, xt, ldx, w, dt, k, m, j, 1, 1);
        return;
    }
    int j = n0;
    for (; j + 2 <= n1; j += 2) mm2_rows_m(out, ldo, x, xt, ldx, w, dt, k, m, j, 2, 0);
    if (j < n1) mm2_rows_m(out, ldo, x, xt, ldx, w, dt, k, m, j, 1, 0);
}

/* l1d is unused on AVX2: four x rows at most per W row, so m < 8 streams regardless. */
void cpu_matmul_f32_avx2(float *restrict out, int ldo, const float *restrict x,
                         const void *restrict w, dtype dt, int k, int m, int n0, int n1, int l1d) {
    (void)l1d;
    /* one instantiation per weight dtype so the widening is resolved at compile time */
    if (dt == DTYPE_BF16) mm2_matmul(out, ldo, x, DTYPE_F32, k, w, DTYPE_BF16, k, m, n0, n1);
    else if (dt == DTYPE_F16) mm2_matmul(out, ldo, x, DTYPE_F32, k, w, DTYPE_F16, k, m, n0, n1);
    else mm2_matmul(out, ldo, x, DTYPE_F32, k, w, DTYPE_F32, k, m, n0, n1);
}

/* ---- BF16 W against x rounded to bf16 (cpu_matmul_bf16_fn) ---- */

/* A 32-bit lane of 16 loaded bf16 holds elements 2l (low half) and 2l + 1 (high half), so a
 * shift widens the even ones and a mask the odd ones: one load and two single-uop ALU ops
 * per 16 elements, no shuffle. */
AI __m256i mm2b_ld(const uint16_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
AI __m256 mm2b_even(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
AI __m256 mm2b_odd(__m256i v) {
    return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)));
}

/* One phase of the 16-element block at l in mm2b_tile: the even or odd elements (HALF:
 * mm2b_even or mm2b_odd) of the NR W rows into wv, then against those of each x row. A
 * macro, not a function: as a function, inlined, GCC allocated the tile's registers
 * differently (the same sums, another schedule). */
#define MM2B_PHASE(HALF)                                                                           \
    do {                                                                                           \
        _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) wv[r] =                               \
            HALF(mm2b_ld(wj + r * rs + l));                                                        \
        _Pragma("GCC unroll 4") for (int i = 0; i < MR; i++) {                                     \
            __m256 xv = HALF(mm2b_ld(x + (size_t)i * ldx + l));                                    \
            _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) acc[i][r] =                       \
                _mm256_fmadd_ps(xv, wv[r], acc[i][r]);                                             \
        }                                                                                          \
    } while (0)

/* MR rows of xb (ldx apart) against the NR W rows j, j + js, ..., j + (NR - 1)·js, one
 * accumulator per output fed the even, then the odd elements of each 16-element block.
 * Each phase holds NR widened W vectors and one x vector beside the MR·NR accumulators
 * (MR·NR <= 8: at 12, GCC spilled accumulators to the stack). */
AI void mm2b_tile(float *out, int ldo, const uint16_t *x, int ldx, const uint16_t *w, int k, int j,
                  int js, const int MR, const int NR, const int PF) {
    __m256 acc[4][4];
    const uint16_t *wj = w + (size_t)j * k;
    const size_t rs = (size_t)js * k;
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) acc[i][r] = _mm256_setzero_ps();
    int l = 0;
    for (; l + 16 <= k; l += 16) {
        __m256 wv[4];
        if (PF && (l & 31) == 0)
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                _mm_prefetch((const char *)(wj + r * rs + l + k), _MM_HINT_T1);
        MM2B_PHASE(mm2b_even);
        MM2B_PHASE(mm2b_odd);
    }
#undef MM2B_PHASE
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            float s = mm2_hsum(acc[i][r]);
            for (int t = l; t < k; t++)
                s += dtype_bf16_to_f32(x[(size_t)i * ldx + t]) * dtype_bf16_to_f32(wj[r * rs + t]);
            out[(size_t)i * ldo + j + r * js] = s;
        }
}

/* Every row of xb against the NR W rows from j, js apart, two rows at a time (2 × 4 and
 * 3 × 3 tiles ran alike; 4 divides the pool's 16-row task ranges). With PF, the first tile
 * prefetches the row after each of its W rows into L2 (see mm2b_matmul). */
AI void mm2b_cols(float *out, int ldo, const uint16_t *x, int ldx, const uint16_t *w, int k, int m,
                  int j, int js, const int NR, const int PF) {
    int i = 0;
#define MM2B_AT(I) out + (size_t)(I)*ldo, ldo, x + (size_t)(I)*ldx, ldx, w, k, j, js
    if (PF && m >= 4) {
        mm2b_tile(MM2B_AT(0), 2, NR, 1);
        i = 2;
    }
    for (; i + 2 <= m; i += 2) mm2b_tile(MM2B_AT(i), 2, NR, 0);
    if (i < m) mm2b_tile(MM2B_AT(i), 1, NR, 0);
#undef MM2B_AT
}

/* W rows [n0, n1) against every row of xb, four W rows per tile. A decode batch (SPREAD)
 * streams W from memory once: it cuts the range into four contiguous parts and a tile takes
 * one row from each, so each of its rows is the next of one long sequential stream. Four
 * neighbour rows side by side ran 30% below the old one-row stream at k = 1024 (two 2 KiB
 * streams per 4 KiB page, which the hardware prefetchers track badly); four long streams
 * ran ~30% above it on one thread, and software prefetch only slowed them (m = 1,
 * tools/bench_cpu_matmul.c). From 4 x rows the tiles after the first compute from cache
 * while nothing reads memory, so the first one prefetches each stream's next row into L2.
 * Prefill reads each W tile from memory once per block of x rows and from cache for every
 * row pair after the first: neighbour rows serve there. */
AI void mm2b_matmul(float *restrict out, int ldo, const uint16_t *restrict x, int ldx,
                    const uint16_t *restrict w, int k, int m, int n0, int n1, const int SPREAD) {
    enum { NR = 4 };
    int j = n0, js = SPREAD ? (n1 - n0) / NR : 0;
    if (js > 1) {
        for (int q = 0; q < js; q++) mm2b_cols(out, ldo, x, ldx, w, k, m, j + q, js, NR, 1);
        j += NR * js;
    }
    for (; j + NR <= n1; j += NR) mm2b_cols(out, ldo, x, ldx, w, k, m, j, 1, NR, 0);
    switch (n1 - j) {
    case 3: mm2b_cols(out, ldo, x, ldx, w, k, m, j, 1, 3, 0); break;
    case 2: mm2b_cols(out, ldo, x, ldx, w, k, m, j, 1, 2, 0); break;
    case 1: mm2b_cols(out, ldo, x, ldx, w, k, m, j, 1, 1, 0); break;
    default: break;
    }
}

/* Two instantiations, not one with a run-time flag: inlined together, the prefill tiles lost
 * 5-10% to the decode ones' code (bench_cpu_matmul -i avx2, m = 16 and 64). */
static __attribute__((noinline)) void mm2b_spread(float *out, int ldo, const uint16_t *x, int ldx,
                                                  const uint16_t *w, int k, int m, int n0, int n1) {
    mm2b_matmul(out, ldo, x, ldx, w, k, m, n0, n1, 1);
}

static __attribute__((noinline)) void mm2b_neighbours(float *out, int ldo, const uint16_t *x,
                                                      int ldx, const uint16_t *w, int k, int m,
                                                      int n0, int n1) {
    mm2b_matmul(out, ldo, x, ldx, w, k, m, n0, n1, 0);
}

/* l1d is unused: the loop order depends only on m and k. Decode batches (m < 16) spread;
 * so do batches of up to 31 rows whose W rows are under 4 KiB (k < 2048), where the
 * neighbour rows' shared pages cost more than a 16-31 row block hides (6144x1024 at m = 24:
 * 150 -> 182 GFLOP/s; at m = 32 and more the two orders ran alike, or neighbours ahead). */
void cpu_matmul_bf16_avx2(float *restrict out, int ldo, const uint16_t *restrict xb, int ldx,
                          const uint16_t *restrict w, int k, int m, int n0, int n1, int l1d) {
    (void)l1d;
    if (m < 16 || (m < 32 && k < 2048)) mm2b_spread(out, ldo, xb, ldx, w, k, m, n0, n1);
    else mm2b_neighbours(out, ldo, xb, ldx, w, k, m, n0, n1);
}

/* Round to nearest even, subnormal inputs to zero (cpu_pack_bf16_one): the integer form of
 * dtype_f32_to_bf16, eight lanes at a time. */
void cpu_pack_bf16_avx2(uint16_t *restrict out, const float *restrict x, int n) {
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    const __m256i absm = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i expm = _mm256_set1_epi32(0x7f800000), sign = _mm256_set1_epi32((int)0x80000000u);
    const __m256i qnan = _mm256_set1_epi32(0x400000);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i));
        __m256i a = _mm256_and_si256(u, absm);
        __m256i is_nan = _mm256_cmpgt_epi32(a, inf);
        __m256i is_sub = _mm256_cmpeq_epi32(_mm256_and_si256(u, expm), _mm256_setzero_si256());
        __m256i r = _mm256_add_epi32(
            u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
        r = _mm256_blendv_epi8(r, _mm256_or_si256(u, qnan), is_nan);
        r = _mm256_blendv_epi8(r, _mm256_and_si256(u, sign), is_sub);
        r = _mm256_srli_epi32(r, 16);
        __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128((__m128i *)(out + i), p);
    }
    for (; i < n; i++) out[i] = cpu_pack_bf16_one(x[i]);
}
