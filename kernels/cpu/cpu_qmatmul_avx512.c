/* cpu_qmatmul_avx512.c - the quantized-weight matmul on AVX-512 with VNNI (built with the
 * Makefile's ISA_AVX512 flags). Same bits as cpu_qmatmul_ref: see cpu_qmatmul.h.
 *
 * The scheme of cpu_qmatmul_avx2.c on 64-byte vectors: Q8_0 / Q4_0 / Q5_0 take two blocks per
 * vector, whose lanes 0-7 and 8-15 are exactly the even and odd accumulators of the
 * summation order, and vpdpbusd sums each lane's four products in one instruction (|w|
 * against x with w's sign, as AVX-512 has no vpsignb: x is negated under w's sign mask; at
 * decode, Q4_0 / Q5_0 weights go in unsigned as stored, each lane starting at x's lane sum).
 * Q4_K and Q6_K take 64 values per vector and fold the sub-block scales in with vpdpwssd.
 * x is quantized by the AVX2 kernel (once per call, not a hot loop).
 *
 * Prefill tiles take 8 x rows per W row, as on AVX2: the 32 vector registers hold the 8
 * accumulators, and unpacking a W block (its nibbles, scales, sign mask) costs as much as
 * its products with 2-4 rows, so spreading it over 8 rather than 4 is worth 1.2-1.3x at
 * m = 128 (BENCHMARKS.md, Intel AVX-512 rows). */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_qmatmul_isa.h"

/* ---- Q8_0 and Q4_0 ---- */

/* Blocks b and b + 1 of Q4_0 / Q5_0 as 64 nibbles in element order. */
AI __m512i q5_nibbles64(const void *w, dtype dt, int b) {
    const uint8_t *qs0, *qs1;
    if (dt == DTYPE_Q4_0) {
        qs0 = ((const quant_block_q4_0 *)w)[b].qs;
        qs1 = ((const quant_block_q4_0 *)w)[b + 1].qs;
    } else {
        qs0 = ((const quant_block_q5_0 *)w)[b].qs;
        qs1 = ((const quant_block_q5_0 *)w)[b + 1].qs;
    }
    /* [qs0 qs0 qs1 qs1] by two broadcast loads, the second and fourth 128 bits shifted by 4:
     * each block's low nibbles, then its high */
    __m512i u =
        _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)qs0)),
                                    0xff00, _mm_loadu_si128((const __m128i *)qs1));
    const __m512i by = _mm512_setr_epi64(0, 0, 0x0004000400040004, 0x0004000400040004, 0, 0,
                                         0x0004000400040004, 0x0004000400040004);
    return _mm512_and_si512(_mm512_srlv_epi16(u, by), _mm512_set1_epi8(15));
}

/* Of Q5_0 blocks b and b + 1, the byte mask of the elements whose fifth bit is set: qh's bit e
 * is element e's. */
AI __mmask64 q5_fifth64(const void *w, int b) {
    uint32_t h0, h1;
    memcpy(&h0, ((const quant_block_q5_0 *)w)[b].qh, sizeof h0);
    memcpy(&h1, ((const quant_block_q5_0 *)w)[b + 1].qh, sizeof h1);
    return (__mmask64)h0 | (__mmask64)h1 << 32;
}

/* Blocks b and b + 1 as 64 int8 weights in element order (Q4_0: nibbles minus 8; Q5_0:
 * nibbles plus 16 times the fifth bits, minus 16: the elements without it lose 16). */
AI __m512i q5_w64(const void *w, dtype dt, int b) {
    if (dt == DTYPE_Q8_0)
        return _mm512_inserti64x4(_mm512_castsi256_si512(qm_w32(w, dt, b)), qm_w32(w, dt, b + 1),
                                  1);
    __m512i u = q5_nibbles64(w, dt, b);
    if (dt == DTYPE_Q4_0) return _mm512_sub_epi8(u, _mm512_set1_epi8(8));
    return _mm512_mask_sub_epi8(u, ~q5_fifth64(w, b), u, _mm512_set1_epi8(16));
}

/* Blocks b and b + 1 of Q4_0 / Q5_0 against R x rows with their lane sums (c[r], from
 * cpu_qrows_lane_sums): the weights stay unsigned (nibble, plus 16 where Q5_0's fifth bit is
 * set) and each lane starts at c's value, so vpdpbusd takes them as they are, where q5_pair32_s
 * takes |w| and moves w's sign onto x (the same integer sums). */
AI void q5_pair32_u(__m512 *acc, const int8_t *const *xq, const int32_t *const *c, const __m512 *s,
                    const void *w, dtype dt, int b, const int R) {
    __m512i u = q5_nibbles64(w, dt, b);
    if (dt == DTYPE_Q5_0) u = _mm512_mask_add_epi8(u, q5_fifth64(w, b), u, _mm512_set1_epi8(16));
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        __m512i p = _mm512_dpbusd_epi32(_mm512_loadu_si512(c[r] + 8 * b), u,
                                        _mm512_loadu_si512(xq[r] + 32 * b));
        acc[r] = _mm512_fmadd_ps(s[r], _mm512_cvtepi32_ps(p), acc[r]);
    }
}

/* Blocks b (lanes 0-7) and b + 1 (lanes 8-15) of R rows, s[r] the products d_w · d_x of the
 * two blocks in those lanes. */
AI void q5_pair32_s(__m512 *acc, const int8_t *const *xq, const __m512 *s, const void *w, dtype dt,
                    int b, const int R) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i wv = q5_w64(w, dt, b), aw = _mm512_abs_epi8(wv);
    __mmask64 neg = _mm512_movepi8_mask(wv);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        __m512i xv = _mm512_loadu_si512(xq[r] + 32 * b);
        __m512i p = _mm512_dpbusd_epi32(zero, aw, _mm512_mask_sub_epi8(xv, neg, zero, xv));
        acc[r] = _mm512_fmadd_ps(s[r], _mm512_cvtepi32_ps(p), acc[r]);
    }
}

AI void q5_pair32(__m512 *acc, const int8_t *const *xq, const float *const *xd, const void *w,
                  dtype dt, int b, const int R) {
    const __m512i two = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512 dw = _mm512_insertf32x8(_mm512_set1_ps(qm_d32(w, dt, b)),
                                   _mm256_set1_ps(qm_d32(w, dt, b + 1)), 1);
    __m512 s[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        double dd;
        memcpy(&dd, xd[r] + b, sizeof dd); /* d_x of blocks b and b + 1 */
        __m512 dx =
            _mm512_permutexvar_ps(two, _mm512_castps128_ps512(_mm_castpd_ps(_mm_set_sd(dd))));
        s[r] = _mm512_mul_ps(dw, dx);
    }
    q5_pair32_s(acc, xq, s, w, dt, b, R);
}

/* The last block when the count is odd: an even block, so lanes 0-7. */
AI void q5_last32(__m512 *acc, const int8_t *const *xq, const float *const *xd, const void *w,
                  dtype dt, int b, const int R) {
    __m256i v = qm_w32(w, dt, b);
    __m256i aw = _mm256_abs_epi8(v);
    __mmask32 neg = _mm256_movepi8_mask(v);
    __m256 dw = _mm256_set1_ps(qm_d32(w, dt, b));
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        __m256i xv = _mm256_loadu_si256((const __m256i *)(xq[r] + 32 * b));
        __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw,
                                        _mm256_mask_sub_epi8(xv, neg, _mm256_setzero_si256(), xv));
        __m256 s = _mm256_mul_ps(dw, _mm256_set1_ps(xd[r][b]));
        __m256 lo = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(p), _mm512_castps512_ps256(acc[r]));
        acc[r] = _mm512_insertf32x8(acc[r], lo, 0);
    }
}

AI void q5_tile32_in(float *out, int ldo, const cpu_qrows *x, int i0, const void *w, dtype dt,
                     int nb, const int R, const int PF, __m512 *acc) {
    const size_t bsz = qm_bytes32(dt);
    qm_xrows xr;
    qm_xrows_at(&xr, x, i0, R);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    int b = 0;
    /* Decode: the scale products of 8 blocks at once (one conversion, one product per row),
     * each pair's lanes taken out by one permute; the products are the same as q5_pair32's. */
    for (; PF && b + 8 <= nb; b += 8) {
        __m256 d8 = qm_d8(w, dt, b);
        __m512 s8[8];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            s8[r] = _mm512_castps256_ps512(_mm256_mul_ps(d8, _mm256_loadu_ps(xr.d[r] + b)));
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const __m512i sel = _mm512_setr_epi32(2 * q, 2 * q, 2 * q, 2 * q, 2 * q, 2 * q, 2 * q,
                                                  2 * q, 2 * q + 1, 2 * q + 1, 2 * q + 1, 2 * q + 1,
                                                  2 * q + 1, 2 * q + 1, 2 * q + 1, 2 * q + 1);
            __m512 s[8];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) s[r] = _mm512_permutexvar_ps(sel, s8[r]);
            _mm_prefetch((const char *)w + (b + 2 * q) * bsz + QM_PF, _MM_HINT_T0);
            if (dt != DTYPE_Q8_0 && xr.c[0]) q5_pair32_u(acc, xr.q, xr.c, s, w, dt, b + 2 * q, R);
            else q5_pair32_s(acc, xr.q, s, w, dt, b + 2 * q, R);
        }
    }
    for (; b + 2 <= nb; b += 2) {
        if (PF) _mm_prefetch((const char *)w + b * bsz + QM_PF, _MM_HINT_T0);
        q5_pair32(acc, xr.q, xr.d, w, dt, b, R);
    }
    if (b < nb) q5_last32(acc, xr.q, xr.d, w, dt, b, R);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        out[(size_t)r * ldo] = qm_hsum8(
            _mm256_add_ps(_mm512_castps512_ps256(acc[r]), _mm512_extractf32x8_ps(acc[r], 1)));
}

/* Prefill: W rows j and j + 1 against R x rows. Shared by two W rows, x goes in as the
 * unsigned operand, x + 128 (x ^ 0x80), and each W row's signed bytes as they are, so the
 * sign handling is one xor per x row instead of a masked negate per (x row, W row) pair; the
 * 128 · Σw this adds to every lane is taken off by starting the lane at −128 · Σw (one
 * vpdpbusd per W block pair, shared by the R rows). Integer sums are exact, so the lanes are
 * the same as q5_pair32's, and so are the scales and the fma. */
AI void q5_wpair(__m512i *wv, __m512i *negc, __m512 *dw, const void *w, dtype dt, int b) {
    *wv = q5_w64(w, dt, b);
    *negc =
        _mm512_sub_epi32(_mm512_setzero_si512(),
                         _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(-128), *wv));
    *dw = _mm512_insertf32x8(_mm512_set1_ps(qm_d32(w, dt, b)), _mm256_set1_ps(qm_d32(w, dt, b + 1)),
                             1);
}

AI void q5_tile32_2w(float *out, int ldo, const cpu_qrows *x, int i0, const void *w0,
                     const void *w1, dtype dt, int nb, const int R) {
    const __m512i flip = _mm512_set1_epi8(-128);
    const __m512i two = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512 acc0[8], acc1[8];
    qm_xrows xr;
    qm_xrows_at(&xr, x, i0, R);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m512i wv0, wv1, nc0, nc1;
        __m512 dw0, dw1;
        q5_wpair(&wv0, &nc0, &dw0, w0, dt, b);
        q5_wpair(&wv1, &nc1, &dw1, w1, dt, b);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512i xu = _mm512_xor_si512(_mm512_loadu_si512(xr.q[r] + 32 * b), flip);
            double dd;
            memcpy(&dd, xr.d[r] + b, sizeof dd);
            __m512 dx =
                _mm512_permutexvar_ps(two, _mm512_castps128_ps512(_mm_castpd_ps(_mm_set_sd(dd))));
            __m512i p0 = _mm512_dpbusd_epi32(nc0, xu, wv0), p1 = _mm512_dpbusd_epi32(nc1, xu, wv1);
            acc0[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw0, dx), _mm512_cvtepi32_ps(p0), acc0[r]);
            acc1[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw1, dx), _mm512_cvtepi32_ps(p1), acc1[r]);
        }
    }
    if (b < nb) {
        q5_last32(acc0, xr.q, xr.d, w0, dt, b, R);
        q5_last32(acc1, xr.q, xr.d, w1, dt, b, R);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        out[(size_t)r * ldo] = qm_hsum8(
            _mm256_add_ps(_mm512_castps512_ps256(acc0[r]), _mm512_extractf32x8_ps(acc0[r], 1)));
        out[(size_t)r * ldo + 1] = qm_hsum8(
            _mm256_add_ps(_mm512_castps512_ps256(acc1[r]), _mm512_extractf32x8_ps(acc1[r], 1)));
    }
}

/* ---- Q4_K ---- */

/* vpermw indices for the 64 bytes of nibbles at qs + 64h: their low nibbles are elements
 * 128h + [0,32) (sub-block 4h, int16 lanes 0-15) and 128h + [64,96) (4h + 2, lanes 16-31),
 * their high nibbles 128h + [32,64) (4h + 1) and 128h + [96,128) (4h + 3). */
#define Q5_I16(a) a, a, a, a, a, a, a, a
static const uint16_t q5_q4k_idx[4][32] __attribute__((aligned(64))) = {
    {Q5_I16(0), Q5_I16(0), Q5_I16(2), Q5_I16(2)},
    {Q5_I16(1), Q5_I16(1), Q5_I16(3), Q5_I16(3)},
    {Q5_I16(4), Q5_I16(4), Q5_I16(6), Q5_I16(6)},
    {Q5_I16(5), Q5_I16(5), Q5_I16(7), Q5_I16(7)},
};
/* Q6_K: scales 8h + 4p .. 8h + 4p + 3, eight int16 lanes each (half h, vector p). */
static const uint16_t q5_q6k_idx[4][32] __attribute__((aligned(64))) = {
    {Q5_I16(0), Q5_I16(1), Q5_I16(2), Q5_I16(3)},
    {Q5_I16(4), Q5_I16(5), Q5_I16(6), Q5_I16(7)},
    {Q5_I16(8), Q5_I16(9), Q5_I16(10), Q5_I16(11)},
    {Q5_I16(12), Q5_I16(13), Q5_I16(14), Q5_I16(15)},
};
#undef Q5_I16

/* The 8 canonical lanes of a 16-lane integer sum over 64-value groups: lanes t and t + 8
 * hold the same element positions of two sub-blocks (exact integer adds). */
AI __m256i q5_fold(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

/* Prefill tiles of 8 x rows keep rows 2i and 2i + 1 in one 512-bit accumulator (lanes 0-7
 * and 8-15, acc2), so the per-block scale steps (fold, convert, scale, fma) take one
 * instruction for two rows: they were as many instructions as the block's products, and
 * 512-bit FP runs on two ports where 256-bit runs on one while 512-bit integer work is in
 * flight (BENCHMARKS.md, Intel AVX-512 rows). Each lane sees the operations of a 256-bit
 * accumulator in the same order, so the bits are the same. */
AI __m512i q5_fold2(__m512i u, __m512i v) { /* [q5_fold(u), q5_fold(v)] */
    return _mm512_add_epi32(_mm512_mask_blend_epi64(0xf0, u, v),
                            _mm512_shuffle_i64x2(u, v, _MM_SHUFFLE(1, 0, 3, 2)));
}

AI __m512 q5_dx2(const qm_xrows *xr, int r, int b) { /* [d_x of row r, of row r + 1] */
    return _mm512_mask_broadcastss_ps(_mm512_set1_ps(xr->d[r][b]), 0xff00,
                                      _mm_load_ss(xr->d[r + 1] + b));
}

AI __m512i q5_xs2(const qm_xrows *xr, int r, int b) { /* the 16-value sums of rows r, r + 1 */
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(xr->s[r] + 16 * b))),
        _mm256_loadu_si256((const __m256i *)(xr->s[r + 1] + 16 * b)), 1);
}

/* A K-quant tile's begin and end: R == 8 on the paired accumulators, otherwise one per row. */
AI void q5_ktile_begin(qm_xrows *xr, __m256 *acc, __m512 *acc2, const cpu_qrows *x, int i0,
                       const int R) {
    qm_ktile_begin(xr, acc, x, i0, R);
    if (R == 8)
        for (int i = 0; i < 4; i++) acc2[i] = _mm512_setzero_ps();
}

AI void q5_ktile_end(float *out, int ldo, const __m256 *acc, const __m512 *acc2, const int R) {
    if (R != 8) {
        qm_ktile_end(out, ldo, acc, R);
        return;
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        out[(size_t)(2 * i) * ldo] = qm_hsum8(_mm512_castps512_ps256(acc2[i]));
        out[(size_t)(2 * i + 1) * ldo] = qm_hsum8(_mm512_extractf32x8_ps(acc2[i], 1));
    }
}

AI void q5_tile_q4k_in(float *out, int ldo, const cpu_qrows *x, int i0, const quant_block_q4_k *w,
                       int nb, const int R, const int PF, __m256 *acc, __m512 *acc2,
                       __m512i *sumi) {
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m128i dup_m = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    qm_xrows xr;
    q5_ktile_begin(&xr, acc, acc2, x, i0, R);
    for (int b = 0; b < nb; b++) {
        const quant_block_q4_k *wb = qm_block_pf(w + b, sizeof *w, PF);
        __m128i sm8 = qm_q4k_scales(wb->scales);
        __m512i sm16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(sm8));
        __m256i mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm8, dup_m));
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) sumi[r] = _mm512_setzero_si512();
            /* x in cpu_qrows_q4k_swap's layout: its 64 bytes at 128h meet the low nibbles, at
         * 128h + 64 the high ones. A dpwssd lane t (t + 8) sums the same element positions
         * (64c + 4t .. 4t + 3 and 64c + 32 + 4t ..) as in element order, in exact integers. */
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i v = _mm512_loadu_si512(wb->qs + 64 * h);
            __m512i lo = _mm512_and_si512(v, m4),
                    hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            __m512i slo = _mm512_permutexvar_epi16(_mm512_load_si512(q5_q4k_idx[2 * h]), sm16);
            __m512i shi = _mm512_permutexvar_epi16(_mm512_load_si512(q5_q4k_idx[2 * h + 1]), sm16);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const int8_t *xh = xr.q[r] + 256 * b + 128 * h;
                __m512i plo = _mm512_maddubs_epi16(lo, _mm512_loadu_si512(xh));
                __m512i phi = _mm512_maddubs_epi16(hi, _mm512_loadu_si512(xh + 64));
                sumi[r] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(sumi[r], plo, slo), phi, shi);
            }
        }
        if (R == 8) {
            __m512 d = _mm512_set1_ps(_cvtsh_ss(wb->d)), dmin = _mm512_set1_ps(_cvtsh_ss(wb->dmin));
            __m512i mins2 = _mm512_broadcast_i64x4(mins);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                __m512i mt = _mm512_madd_epi16(q5_xs2(&xr, 2 * i, b), mins2);
                __m512 dx = q5_dx2(&xr, 2 * i, b);
                __m512 it = _mm512_cvtepi32_ps(q5_fold2(sumi[2 * i], sumi[2 * i + 1]));
                acc2[i] = _mm512_fmadd_ps(_mm512_mul_ps(dx, d), it, acc2[i]);
                acc2[i] =
                    _mm512_fnmadd_ps(_mm512_mul_ps(dx, dmin), _mm512_cvtepi32_ps(mt), acc2[i]);
            }
            continue;
        }
        __m256 d = _mm256_set1_ps(_cvtsh_ss(wb->d)), dmin = _mm256_set1_ps(_cvtsh_ss(wb->dmin));
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m256i mt =
                _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xr.s[r] + 16 * b)), mins);
            __m256 dx = _mm256_broadcast_ss(xr.d[r] + b);
            acc[r] =
                _mm256_fmadd_ps(_mm256_mul_ps(dx, d), _mm256_cvtepi32_ps(q5_fold(sumi[r])), acc[r]);
            acc[r] = _mm256_fnmadd_ps(_mm256_mul_ps(dx, dmin), _mm256_cvtepi32_ps(mt), acc[r]);
        }
    }
    q5_ktile_end(out, ldo, acc, acc2, R);
}

/* ---- Q6_K ---- */

AI void q5_tile_q6k_in(float *out, int ldo, const cpu_qrows *x, int i0, const quant_block_q6_k *w,
                       int nb, const int R, const int PF, __m256 *acc, __m512 *acc2,
                       __m512i *sumi) {
    const __m512i m4 = _mm512_set1_epi8(15), m3 = _mm512_set1_epi8(3), m30 = _mm512_set1_epi8(0x30);
    qm_xrows xr;
    q5_ktile_begin(&xr, acc, acc2, x, i0, R);
    for (int b = 0; b < nb; b++) {
        const quant_block_q6_k *wb = qm_block_pf(w + b, sizeof *w, PF);
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wb->scales));
        __m512i sc512 = _mm512_castsi256_si512(sc16);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) sumi[r] = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            __m512i ql = _mm512_loadu_si512(wb->ql + 64 * h);
            __m256i qh = _mm256_loadu_si256((const __m256i *)(wb->qh + 32 * h));
            /* [qh | qh >> 2]: bits 0-1 then 2-3 for elements 0-63, bits 4-5 then 6-7 (after
             * >> 4, as & 0x30) for elements 64-127 */
            __m512i qha =
                _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
            __m512i q01 = _mm512_or_si512(_mm512_and_si512(ql, m4),
                                          _mm512_slli_epi16(_mm512_and_si512(qha, m3), 4));
            __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                          _mm512_and_si512(qha, m30));
            __m512i s01 = _mm512_permutexvar_epi16(_mm512_load_si512(q5_q6k_idx[2 * h]), sc512);
            __m512i s23 = _mm512_permutexvar_epi16(_mm512_load_si512(q5_q6k_idx[2 * h + 1]), sc512);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const int8_t *xh = xr.q[r] + 256 * b + 128 * h;
                __m512i p01 = _mm512_maddubs_epi16(q01, _mm512_loadu_si512(xh));
                __m512i p23 = _mm512_maddubs_epi16(q23, _mm512_loadu_si512(xh + 64));
                sumi[r] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(sumi[r], p01, s01), p23, s23);
            }
        }
        if (R == 8) {
            __m512 d = _mm512_set1_ps(_cvtsh_ss(wb->d));
            __m512i sc2 = _mm512_broadcast_i64x4(sc16);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                __m512i corr = _mm512_madd_epi16(q5_xs2(&xr, 2 * i, b), sc2);
                __m512i it = _mm512_sub_epi32(q5_fold2(sumi[2 * i], sumi[2 * i + 1]),
                                              _mm512_slli_epi32(corr, 5));
                __m512 a = _mm512_mul_ps(q5_dx2(&xr, 2 * i, b), d);
                acc2[i] = _mm512_fmadd_ps(a, _mm512_cvtepi32_ps(it), acc2[i]);
            }
            continue;
        }
        __m256 d = _mm256_set1_ps(_cvtsh_ss(wb->d));
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            /* the −32 of every 6-bit value: −32 · Σ_j sc_j · (sum of x over sub-block j) */
            __m256i corr =
                _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xr.s[r] + 16 * b)), sc16);
            __m256i it = _mm256_sub_epi32(q5_fold(sumi[r]), _mm256_slli_epi32(corr, 5));
            __m256 a = _mm256_mul_ps(_mm256_broadcast_ss(xr.d[r] + b), d);
            acc[r] = _mm256_fmadd_ps(a, _mm256_cvtepi32_ps(it), acc[r]);
        }
    }
    q5_ktile_end(out, ldo, acc, acc2, R);
}

/* The tiles' accumulators belong to these wrappers: 4 for decode and the short tails, 8 for
 * the prefill tiles. Sized to the tile, the decode loop keeps the register allocation of a
 * 4-row build (with 8-row arrays in every tile, the K-quant decode of a GGUF file streamed
 * from its mmap ran 10-20% slower). */
AI void q5_tile32(float *out, int ldo, const cpu_qrows *x, int i0, const void *w, dtype dt, int nb,
                  const int R, const int PF) {
    if (R > 4) {
        __m512 acc[8];
        q5_tile32_in(out, ldo, x, i0, w, dt, nb, R, PF, acc);
    } else {
        __m512 acc[4];
        q5_tile32_in(out, ldo, x, i0, w, dt, nb, R, PF, acc);
    }
}

#define Q5_TILE_K(NAME, BLOCK)                                                                     \
    AI void q5_tile_##NAME(float *out, int ldo, const cpu_qrows *x, int i0, const BLOCK *w,        \
                           int nb, const int R, const int PF) {                                    \
        if (R > 4) {                                                                               \
            __m256 acc[8];                                                                         \
            __m512 acc2[4];                                                                        \
            __m512i sumi[8];                                                                       \
            q5_tile_##NAME##_in(out, ldo, x, i0, w, nb, R, PF, acc, acc2, sumi);                   \
        } else {                                                                                   \
            __m256 acc[4];                                                                         \
            __m512i sumi[4];                                                                       \
            q5_tile_##NAME##_in(out, ldo, x, i0, w, nb, R, PF, acc, NULL, sumi);                   \
        }                                                                                          \
    }
Q5_TILE_K(q4k, quant_block_q4_k)
Q5_TILE_K(q6k, quant_block_q6_k)
#undef Q5_TILE_K

#define QM_TILE32 q5_tile32
#define QM_TILE32_2W q5_tile32_2w
#define QM_TILE_Q4K q5_tile_q4k
#define QM_TILE_Q6K q5_tile_q6k
#define QM_PREFILL_ROWS 8
#define QM_ENTRY cpu_qmatmul_avx512
#include "kernels/cpu/cpu_qmatmul_isa.h"
