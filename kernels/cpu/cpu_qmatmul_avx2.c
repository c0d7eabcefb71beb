/* cpu_qmatmul_avx2.c - the quantized-weight matmul and x quantization on AVX2 (built with
 * the Makefile's ISA_AVX2 flags). Same bits as cpu_qmatmul_ref: see cpu_qmatmul.h.
 *
 * Products: vpmaddubsw multiplies unsigned by signed bytes, so a signed W (Q8_0, Q4_0 minus
 * 8, Q5_0 minus 16) goes in as |w| against x carrying w's sign (vpsignb), or, at decode of
 * Q4_0 / Q5_0, unsigned as stored with x's lane sums added (cpu_qrows_lane_sums); no pair sum
 * can saturate (128 · 127 · 2 < 2^15, and x is never -128). Unsigned nibbles (Q4_K, Q6_K's 6
 * bits) go in directly. vpmaddwd then either adds pairs (Q8_0, Q4_0: the lane sums of 4
 * products the order fixes) or applies the sub-block scales.
 *
 * Loop order: one W row at a time against up to 4 x rows at decode, so a decode step reads
 * W as two sequential streams (qm_visit), prefetched ahead; against 8 at prefill, so each W
 * block is loaded and unpacked (nibbles, scales) once per 8 rows (the driver hands over 8
 * rows per call). The 8-row tiles keep more accumulators than the 16 ymm registers hold: the
 * compiler spills some, which costs loads and stores but no arithmetic. */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_qmatmul_isa.h"

void cpu_quantize_x_avx2(int8_t *restrict q, float *restrict d, const float *restrict x, int k,
                         int blk) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    /* vpackss works per 128-bit lane: this puts the four 8-value groups back in order */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int b = 0; b < k / blk; b++) {
        const float *xb = x + (size_t)b * blk;
        int8_t *qb = q + (size_t)b * blk;
        __m256 mx = _mm256_setzero_ps();
        for (int e = 0; e < blk; e += 8)
            mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_loadu_ps(xb + e), absm));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        if (!(amax >= 1e-30f)) {
            d[b] = 0.0f;
            memset(qb, 0, (size_t)blk);
            continue;
        }
        float db = amax / 127.0f;
        d[b] = db;
        const __m256 id = _mm256_set1_ps(1.0f / db);
        for (int e = 0; e < blk; e += 32) {
            __m256i v0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + e), id));
            __m256i v1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + e + 8), id));
            __m256i v2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + e + 16), id));
            __m256i v3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + e + 24), id));
            __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
            _mm256_storeu_si256((__m256i *)(qb + e), _mm256_permutevar8x32_epi32(p, order));
        }
    }
}

/* ---- Q8_0 and Q4_0 ---- */

/* Block b of R rows into acc (the even or the odd accumulators), s[r] the product d_w · d_x
 * of row r's block in every lane. */
AI void q2_block32_s(__m256 *acc, const int8_t *const *xq, const __m256 *s, const void *w, dtype dt,
                     int b, const int R) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i wv = qm_w32(w, dt, b), aw = _mm256_abs_epi8(wv);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        __m256i sx = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(xq[r] + 32 * b)), wv);
        __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones);
        acc[r] = _mm256_fmadd_ps(s[r], _mm256_cvtepi32_ps(p), acc[r]);
    }
}

/* The same for Q4_0 / Q5_0 with x's lane sums (c[r], cpu_qrows_lane_sums): the weights go in
 * unsigned, as they are stored, and each lane adds its sum, where q2_block32_s takes |w| and
 * moves w's sign onto x (the same integer sums). */
AI void q2_block32_u(__m256 *acc, const int8_t *const *xq, const int32_t *const *c, const __m256 *s,
                     const void *w, dtype dt, int b, const int R) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i u = qm_u32(w, dt, b);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        __m256i xv = _mm256_loadu_si256((const __m256i *)(xq[r] + 32 * b));
        __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), ones);
        p = _mm256_add_epi32(p, _mm256_loadu_si256((const __m256i *)(c[r] + 8 * b)));
        acc[r] = _mm256_fmadd_ps(s[r], _mm256_cvtepi32_ps(p), acc[r]);
    }
}

AI void q2_block32(__m256 *acc, const int8_t *const *xq, const float *const *xd, const void *w,
                   dtype dt, int b, const int R) {
    __m256 dw = _mm256_set1_ps(qm_d32(w, dt, b)), s[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) s[r] = _mm256_mul_ps(dw, _mm256_broadcast_ss(xd[r] + b));
    q2_block32_s(acc, xq, s, w, dt, b, R);
}

AI void q2_tile32(float *out, int ldo, const cpu_qrows *x, int i0, const void *w, dtype dt, int nb,
                  const int R, const int PF) {
    const size_t bsz = qm_bytes32(dt);
    __m256 acc0[8], acc1[8];
    qm_xrows xr;
    qm_xrows_at(&xr, x, i0, R);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();
    int b = 0;
    /* Decode: the scale products of 8 blocks at once (qm_d8), each block's broadcast by one
     * permute. */
    for (; PF && b + 8 <= nb; b += 8) {
        __m256 d8 = qm_d8(w, dt, b), s8[8];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) s8[r] = _mm256_mul_ps(d8, _mm256_loadu_ps(xr.d[r] + b));
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            __m256 s[8];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                s[r] = _mm256_permutevar8x32_ps(s8[r], _mm256_set1_epi32(i));
            if (i % 2 == 0) _mm_prefetch((const char *)w + (b + i) * bsz + QM_PF, _MM_HINT_T0);
            if (dt != DTYPE_Q8_0 && xr.c[0])
                q2_block32_u(i % 2 ? acc1 : acc0, xr.q, xr.c, s, w, dt, b + i, R);
            else q2_block32_s(i % 2 ? acc1 : acc0, xr.q, s, w, dt, b + i, R);
        }
    }
    for (; b + 2 <= nb; b += 2) {
        if (PF) _mm_prefetch((const char *)w + b * bsz + QM_PF, _MM_HINT_T0);
        q2_block32(acc0, xr.q, xr.d, w, dt, b, R);
        q2_block32(acc1, xr.q, xr.d, w, dt, b + 1, R);
    }
    if (b < nb) q2_block32(acc0, xr.q, xr.d, w, dt, b, R);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) out[(size_t)r * ldo] = qm_hsum8(_mm256_add_ps(acc0[r], acc1[r]));
}

/* ---- Q4_K ---- */

/* vpshufb controls that broadcast 16-bit lane j of each 128-bit half. */
static const uint8_t q2_bcast16[8][32] __attribute__((aligned(32))) = {
#define Q2_B(j)                                                                                    \
    {                                                                                              \
        2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1,  \
            2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j,         \
            2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1,     \
            2 * j, 2 * j + 1, 2 * j, 2 * j + 1                                                     \
    }
    Q2_B(0), Q2_B(1), Q2_B(2), Q2_B(3), Q2_B(4), Q2_B(5), Q2_B(6), Q2_B(7),
#undef Q2_B
};

AI void q2_tile_q4k(float *out, int ldo, const cpu_qrows *x, int i0, const quant_block_q4_k *w,
                    int nb, const int R, const int PF) {
    const __m256i m4 = _mm256_set1_epi8(15);
    /* m0 m0 m1 m1 ... m7 m7: each min against the two 16-value sums of its sub-block */
    const __m128i dup_m = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    __m256 acc[8];
    qm_xrows xr;
    qm_ktile_begin(&xr, acc, x, i0, R);
    for (int b = 0; b < nb; b++) {
        const quant_block_q4_k *wb = qm_block_pf(w + b, sizeof *w, PF);
        __m128i sm8 = qm_q4k_scales(wb->scales);
        __m256i sc2 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm8)); /* sc0..7 twice */
        __m256i mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm8, dup_m));
        __m256i sumi[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) sumi[r] = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i qv = _mm256_loadu_si256((const __m256i *)(wb->qs + 32 * c));
            __m256i lo = _mm256_and_si256(qv, m4),
                    hi = _mm256_and_si256(_mm256_srli_epi16(qv, 4), m4);
            __m256i sl =
                _mm256_shuffle_epi8(sc2, _mm256_load_si256((const __m256i *)q2_bcast16[2 * c]));
            __m256i sh =
                _mm256_shuffle_epi8(sc2, _mm256_load_si256((const __m256i *)q2_bcast16[2 * c + 1]));
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const int8_t *xc = xr.q[r] + 256 * b + 64 * c;
                __m256i pl = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)xc)), sl);
                __m256i ph = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xc + 32))), sh);
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(pl, ph));
            }
        }
        __m256 d = _mm256_set1_ps(_cvtsh_ss(wb->d)), dmin = _mm256_set1_ps(_cvtsh_ss(wb->dmin));
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m256i mt =
                _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xr.s[r] + 16 * b)), mins);
            __m256 dx = _mm256_broadcast_ss(xr.d[r] + b);
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dx, d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
            acc[r] = _mm256_fnmadd_ps(_mm256_mul_ps(dx, dmin), _mm256_cvtepi32_ps(mt), acc[r]);
        }
    }
    qm_ktile_end(out, ldo, acc, R);
}

/* ---- Q6_K ---- */

/* vpshufb controls picking scales a = 8h + 2g and a + 1, eight bytes each (half h, group g). */
static const uint8_t q2_q6k_pair[8][16] __attribute__((aligned(16))) = {
#define Q2_P(a)                                                                                    \
    { a, a, a, a, a, a, a, a, a + 1, a + 1, a + 1, a + 1, a + 1, a + 1, a + 1, a + 1 }
    Q2_P(0), Q2_P(2), Q2_P(4), Q2_P(6), Q2_P(8), Q2_P(10), Q2_P(12), Q2_P(14),
#undef Q2_P
};

AI void q2_tile_q6k(float *out, int ldo, const cpu_qrows *x, int i0, const quant_block_q6_k *w,
                    int nb, const int R, const int PF) {
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3), m30 = _mm256_set1_epi8(0x30);
    __m256 acc[8];
    qm_xrows xr;
    qm_ktile_begin(&xr, acc, x, i0, R);
    for (int b = 0; b < nb; b++) {
        const quant_block_q6_k *wb = qm_block_pf(w + b, sizeof *w, PF);
        __m128i sc8 = _mm_loadu_si128((const __m128i *)wb->scales);
        __m256i sumi[8];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) sumi[r] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i ql0 = _mm256_loadu_si256((const __m256i *)(wb->ql + 64 * h));
            __m256i ql1 = _mm256_loadu_si256((const __m256i *)(wb->ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(wb->qh + 32 * h));
            __m256i qh2 = _mm256_srli_epi16(qh, 2);
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                /* elements 128h + 32g + l: low nibble from ql, bits 2g, 2g + 1 of qh on top */
                __m256i q;
                if (g == 0)
                    q = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                                        _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
                else if (g == 1)
                    q = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                        _mm256_slli_epi16(_mm256_and_si256(qh2, m3), 4));
                else if (g == 2)
                    q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                        _mm256_and_si256(qh, m30));
                else
                    q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                        _mm256_and_si256(qh2, m30));
                __m256i s = _mm256_cvtepi8_epi16(
                    _mm_shuffle_epi8(sc8, _mm_load_si128((const __m128i *)q2_q6k_pair[4 * h + g])));
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    const int8_t *xg = xr.q[r] + 256 * b + 128 * h + 32 * g;
                    __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)xg));
                    sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(p, s));
                }
            }
        }
        __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        __m256 d = _mm256_set1_ps(_cvtsh_ss(wb->d));
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            /* the −32 of every 6-bit value: −32 · Σ_j sc_j · (sum of x over sub-block j) */
            __m256i corr =
                _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xr.s[r] + 16 * b)), sc16);
            __m256i it = _mm256_sub_epi32(sumi[r], _mm256_slli_epi32(corr, 5));
            __m256 a = _mm256_mul_ps(_mm256_broadcast_ss(xr.d[r] + b), d);
            acc[r] = _mm256_fmadd_ps(a, _mm256_cvtepi32_ps(it), acc[r]);
        }
    }
    qm_ktile_end(out, ldo, acc, R);
}

#define QM_TILE32 q2_tile32
#define QM_TILE_Q4K q2_tile_q4k
#define QM_TILE_Q6K q2_tile_q6k
#define QM_PREFILL_ROWS 8
#define QM_ENTRY cpu_qmatmul_avx2
#include "kernels/cpu/cpu_qmatmul_isa.h"
