/* cpu_qmatmul_isa.h - what the AVX2 and AVX-512 files of the quantized matmul share, included
 * by those two only (their flags give it AVX2): the x rows a tile reads, the prefetch of the
 * decode weight stream, the int8 weights of a 32-block and the scales of 8 (qm_d8), a Q4_K
 * block's scales, cpu_qmatmul_hsum8's order, a K-quant tile's start and end, and the W-row
 * loop with its dtype dispatch.
 *
 * The loop is instantiated once per including file around that file's tile kernels, named by
 * QM_TILE32, QM_TILE_Q4K and QM_TILE_Q6K (each (out, ldo, x, i0, w, [dt,] nb, R, PF)), as the
 * entry point QM_ENTRY (a cpu_qmatmul_fn): define the four (and QM_PREFILL_ROWS 8 where the
 * tiles take R up to 8, not 4; QM_TILE32_2W where a prefill tile takes two W rows of a
 * 32-element type), then include this header. */
#ifndef STRATA_CPU_QMATMUL_ISA_H
#define STRATA_CPU_QMATMUL_ISA_H

#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

#define AI static inline __attribute__((always_inline))

/* Prefetch distance of the decode weight stream, as in cpu_matmul_avx2.c. */
#define QM_PF 4096

/* The int8 values, block scales, 16-value sums and lane sums of x rows i0 .. i0 + R - 1. */
typedef struct qm_xrows {
    const int8_t *q[8];
    const float *d[8];
    const int16_t *s[8];
    const int32_t *c[8]; /* the lane sums, or NULL */
} qm_xrows;

AI void qm_xrows_at(qm_xrows *xr, const cpu_qrows *x, int i0, const int R) {
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        xr->q[r] = cpu_qrows_q(x, i0 + r);
        xr->d[r] = cpu_qrows_d(x, i0 + r);
        xr->s[r] = cpu_qrows_s(x, i0 + r);
        xr->c[r] = cpu_qrows_c(x, i0 + r);
    }
}

/* A decode step reads W once, in sequential streams (qm_visit): fetch QM_PF bytes ahead of
 * block p. */
AI void qm_prefetch_block(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + QM_PF + o, _MM_HINT_T0);
}

/* Block p of a W row (bytes long), prefetched ahead on the decode stream (PF). */
AI const void *qm_block_pf(const void *p, size_t bytes, const int PF) {
    if (PF) qm_prefetch_block(p, bytes);
    return p;
}

/* Bytes of one block of a 32-element type (Q8_0, Q4_0, Q5_0). */
AI size_t qm_bytes32(dtype dt) {
    return dt == DTYPE_Q8_0   ? sizeof(quant_block_q8_0)
           : dt == DTYPE_Q5_0 ? sizeof(quant_block_q5_0)
                              : sizeof(quant_block_q4_0);
}

/* The f16 scale of block b of a 32-element type: every such block starts with it. */
AI float qm_d32(const void *w, dtype dt, int b) {
    uint16_t d;
    memcpy(&d, (const char *)w + (size_t)b * qm_bytes32(dt), sizeof d);
    return _cvtsh_ss(d);
}

/* The f16 scales of blocks b .. b + 7 of a 32-element type as f32: a decode step converts
 * them in one instruction and forms their products with x's scales in one more, where each
 * block took a conversion and a product of its own (the products are the same). */
AI __m256 qm_d8(const void *w, dtype dt, int b) {
    const size_t st = qm_bytes32(dt);
    const char *p = (const char *)w + (size_t)b * st;
    uint16_t d[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) memcpy(&d[i], p + i * st, sizeof d[i]);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d));
}

/* Block b of Q4_0 / Q5_0 as unsigned bytes in element order, before the type's offset is taken
 * off: the nibbles, and Q5_0's fifth bits from qh as 16. */
AI __m256i qm_u32(const void *w, dtype dt, int b) {
    const __m256i m4 = _mm256_set1_epi8(15);
    if (dt == DTYPE_Q4_0) {
        __m128i raw = _mm_loadu_si128((const __m128i *)((const quant_block_q4_0 *)w)[b].qs);
        return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
    }
    const quant_block_q5_0 *q = (const quant_block_q5_0 *)w + b;
    __m128i raw = _mm_loadu_si128((const __m128i *)q->qs);
    __m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
    /* byte e of the element order gets qh's byte e / 8, and keeps 0x10 where its bit e % 8 is
     * set */
    uint32_t qh;
    memcpy(&qh, q->qh, sizeof qh);
    const __m256i spread =
        _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201);
    __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), spread);
    h = _mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit);
    return _mm256_or_si256(v, _mm256_and_si256(h, _mm256_set1_epi8(16)));
}

/* Block b's weights as int8 in element order: Q8_0 as stored, Q4_0 its nibbles minus 8, Q5_0
 * its nibbles with the fifth bits from qh, minus 16. */
AI __m256i qm_w32(const void *w, dtype dt, int b) {
    if (dt == DTYPE_Q8_0)
        return _mm256_loadu_si256((const __m256i *)((const quant_block_q8_0 *)w)[b].qs);
    return _mm256_sub_epi8(qm_u32(w, dt, b), _mm256_set1_epi8((char)cpu_q32_offset(dt)));
}

/* The 8 scales (bytes 0-7) and mins (bytes 8-15) of a Q4_K block (s = its 12 scale bytes, read
 * with the 4 after them): quant_q4_k_scales on 32-bit lanes, four sub-blocks at a time. */
AI __m128i qm_q4k_scales(const uint8_t *s) {
    __m128i v = _mm_loadu_si128((const __m128i *)s);
    __m128i lo = _mm_and_si128(v, _mm_set1_epi32(0x3f3f3f3f)); /* sc0-3, m0-3 */
    /* bytes 8-11 give the low nibbles of sc4-7 and (>> 4) of m4-7, the top 2 bits of bytes
     * 0-3 and 4-7 their high bits */
    __m128i nib = _mm_srlv_epi32(_mm_shuffle_epi32(v, 0xaa), _mm_setr_epi32(0, 4, 0, 0));
    __m128i top =
        _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(v, 6), _mm_set1_epi32(0x03030303)), 4);
    __m128i hi = _mm_or_si128(_mm_and_si128(nib, _mm_set1_epi32(0x0f0f0f0f)), top);
    return _mm_unpacklo_epi32(lo, hi);
}

/* cpu_qmatmul_hsum8's order. */
AI float qm_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* A K-quant tile (Q4_K, Q6_K) starts with its R x rows in xr and its R accumulators zeroed,
 * and ends with each accumulator's sum in out, ldo apart. */
AI void qm_ktile_begin(qm_xrows *xr, __m256 *acc, const cpu_qrows *x, int i0, const int R) {
    qm_xrows_at(xr, x, i0, R);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
}

AI void qm_ktile_end(float *out, int ldo, const __m256 *acc, const int R) {
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) out[(size_t)r * ldo] = qm_hsum8(acc[r]);
}

#endif

#ifdef QM_ENTRY
/* ---- the W-row loop, once per including file ---- */

AI void qm_tile(float *out, int ldo, const cpu_qrows *x, int i0, const void *w, dtype dt, int k,
                const int R, const int PF) {
    switch (dt) {
    case DTYPE_Q8_0:
    case DTYPE_Q4_0:
    case DTYPE_Q5_0: QM_TILE32(out, ldo, x, i0, w, dt, k / 32, R, PF); break;
    case DTYPE_Q4_K: QM_TILE_Q4K(out, ldo, x, i0, w, k / 256, R, PF); break;
    case DTYPE_Q6_K: QM_TILE_Q6K(out, ldo, x, i0, w, k / 256, R, PF); break;
    default: break;
    }
}

/* Item i of n in the decode's visiting order: the first and the second half in turn (0, h,
 * 1, h + 1, ...), so a core reads W as two streams far apart. One sequential stream keeps too
 * few of a core's reads in flight to reach the read probe (each core alone reads at about
 * half of it); a second one read 8-12% faster on most shapes measured (BENCHMARKS.md). Short
 * ranges, and prefill (PF = 0, bound by the multiplies), keep the plain order. */
AI int qm_visit(int i, int n, const int PF) {
    if (!PF || n < 8) return i;
    int half = (n + 1) / 2;
    return i & 1 ? half + i / 2 : i / 2;
}

/* One W row at a time against up to RW (4 or 8) x rows, so each W block is loaded and
 * unpacked once per RW rows. */
AI void qm_rows(float *out, int ldo, const cpu_qrows *x, const void *w, dtype dt, int k, int m,
                int n0, int n1, const int PF, const int RW) {
    size_t rb = dtype_row_bytes(dt, k);
    for (int v = 0; v < n1 - n0; v++) {
        int j = n0 + qm_visit(v, n1 - n0, PF);
        const void *wj = (const char *)w + (size_t)j * rb;
        float *oj = out + j;
        int i = 0;
        for (; i + RW <= m; i += RW) qm_tile(oj + (size_t)i * ldo, ldo, x, i, wj, dt, k, RW, PF);
        for (; i + 4 <= m; i += 4) qm_tile(oj + (size_t)i * ldo, ldo, x, i, wj, dt, k, 4, PF);
        switch (m - i) {
        case 3: qm_tile(oj + (size_t)i * ldo, ldo, x, i, wj, dt, k, 3, PF); break;
        case 2: qm_tile(oj + (size_t)i * ldo, ldo, x, i, wj, dt, k, 2, PF); break;
        case 1: qm_tile(oj + (size_t)i * ldo, ldo, x, i, wj, dt, k, 1, PF); break;
        default: break;
        }
    }
}

#ifdef QM_TILE32_2W
/* Prefill on a 32-element type where the including file has a two-W-row tile
 * (QM_TILE32_2W(out, ldo, x, i0, w0, w1, dt, nb, R)): W rows in pairs against RW x rows,
 * the rest of the rows and a last odd W row through qm_rows. */
AI void qm_rows32_2w(float *out, int ldo, const cpu_qrows *x, const void *w, dtype dt, int k, int m,
                     int n0, int n1, const int RW) {
    size_t rb = dtype_row_bytes(dt, k);
    int j = n0, mt = m - m % RW;
    for (; j + 2 <= n1; j += 2) {
        const char *wj = (const char *)w + (size_t)j * rb;
        for (int i = 0; i < mt; i += RW)
            QM_TILE32_2W(out + (size_t)i * ldo + j, ldo, x, i, wj, wj + rb, dt, k / 32, RW);
    }
    if (mt < m) {
        cpu_qrows tail = *x;
        tail.base += (size_t)mt * x->stride;
        qm_rows(out + (size_t)mt * ldo, ldo, &tail, w, dt, k, m - mt, n0, j, 0, RW);
    }
    if (j < n1) qm_rows(out, ldo, x, w, dt, k, m, j, n1, 0, RW);
}
#endif

/* Rows of the prefill tiles: 4, or 8 where the including file's tiles take 8. */
#ifndef QM_PREFILL_ROWS
#define QM_PREFILL_ROWS 4
#endif

/* Decode (m < 8, bound by the weight stream) is one inlined loop per dtype, prefetching the
 * stream; prefill has one out-of-line function per dtype with the wider tiles (two W rows at
 * a time where the file has QM_TILE32_2W), so its many tile shapes stay out of the decode
 * loop's code. The block layout is resolved at compile time in each. */
#ifdef QM_TILE32_2W
#define QM_PREFILL32(DT) qm_rows32_2w(out, ldo, x, w, DT, k, m, n0, n1, QM_PREFILL_ROWS)
#else
#define QM_PREFILL32(DT) qm_rows(out, ldo, x, w, DT, k, m, n0, n1, 0, QM_PREFILL_ROWS)
#endif
#define QM_PREFILL(NAME, BODY)                                                                     \
    static __attribute__((noinline)) void qm_prefill_##NAME(                                       \
        float *out, int ldo, const cpu_qrows *x, const void *w, int k, int m, int n0, int n1) {    \
        BODY;                                                                                      \
    }
QM_PREFILL(q8_0, QM_PREFILL32(DTYPE_Q8_0))
QM_PREFILL(q4_0, QM_PREFILL32(DTYPE_Q4_0))
QM_PREFILL(q5_0, QM_PREFILL32(DTYPE_Q5_0))
QM_PREFILL(q4_k, qm_rows(out, ldo, x, w, DTYPE_Q4_K, k, m, n0, n1, 0, QM_PREFILL_ROWS))
QM_PREFILL(q6_k, qm_rows(out, ldo, x, w, DTYPE_Q6_K, k, m, n0, n1, 0, QM_PREFILL_ROWS))
#undef QM_PREFILL
#undef QM_PREFILL32

#define QM_CASE(DT, NAME)                                                                          \
    case DT:                                                                                       \
        if (m < 8) qm_rows(out, ldo, x, w, DT, k, m, n0, n1, 1, 4);                                \
        else qm_prefill_##NAME(out, ldo, x, w, k, m, n0, n1);                                      \
        break;

void QM_ENTRY(float *restrict out, int ldo, const cpu_qrows *x, const void *restrict w, dtype dt,
              int k, int m, int n0, int n1) {
    switch (dt) {
        QM_CASE(DTYPE_Q8_0, q8_0)
        QM_CASE(DTYPE_Q4_0, q4_0)
        QM_CASE(DTYPE_Q5_0, q5_0)
        QM_CASE(DTYPE_Q4_K, q4_k)
        QM_CASE(DTYPE_Q6_K, q6_k)
    default: break;
    }
}
#undef QM_CASE
#endif
