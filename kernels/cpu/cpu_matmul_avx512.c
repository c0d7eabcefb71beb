/* cpu_matmul_avx512.c - out = x · Wᵀ on AVX-512, for every weight dtype.
 *
 * Two kinds of inner product share one tile layout:
 *  BF16X  x rounded to bf16 by cpu_matmul.c and a BF16 W: vdpbf16ps (AVX512-BF16) takes 32
 *         exact products per instruction with no widening of W, which is what lets a batch
 *         of decode rows (m = 8) cost little more than one, and halves the x bytes a
 *         wide-k row keeps in L1;
 *  F32X   f32 x against F32 / F16 / BF16 W widened in registers (vcvtph2ps, or a shift
 *         into the high half), f32 FMA.
 * A vector of x is 64 bytes: 32 bf16 or 16 f32 elements (a "block").
 *
 * Batch invariance: every (i, j) is summed the same way by every loop below: one
 * accumulator, the blocks in order (the last one masked), then reduce. So a row's output
 * does not depend on m, on which other rows share its step, or on how the pool split n: a
 * sequence's logits are the same alone and batched, bit for bit. (Until 2026-12-04 blocks
 * alternated between two accumulators, which doubled the registers an output takes and
 * held prefill to 4 x 3 tiles: 64-79% of vdpbf16ps' rate on Zen 4, against 80-87% for the
 * 4 x 6 tiles one accumulator allows. The price is decode's: a row at m = 1 is one chain,
 * 6 clocks a 64-byte block, ~38 GB/s at 3.6 GHz, as fast as two threads' shares of the
 * bandwidth but up to 15% short of one thread's on Zen 4; BENCHMARKS.md, 2026-12-04.)
 *
 * Loop order: decode rows whose x fits in L1 beside one W row (so x's lines survive the
 * row's pass; l1d is the L1's size) read W one row at a time, one sequential prefetched
 * stream per thread, each W vector used by up to 8 x rows (at m = 8 that reached 80-95% of
 * the read probe for k <= 2560 on a 48 KiB L1; two rows side by side read at half that
 * rate in this path, though not in a bare loop, for a reason not found yet). Wider x comes
 * from L2 for every W row, so a wide decode batch takes 8 x 4 register tiles with the
 * weight stream prefetched in two steps (PF_BATCH; every W vector used by all eight rows,
 * and each x line from L2 by four W rows: 8 x 4 read 5-20% faster than 8 x 3 on Zen 4,
 * whose 32 KiB L1 holds no 8 x rows at k >= 2,048 beside the stream, though its 32
 * accumulators leave W to memory operands; at m = 1 four W rows side by side, which for a
 * 24 KiB x beat the single stream by 11-18%), and
 * prefill 4 x 6 tiles (24 accumulators, 10 loads per 24 multiplies), each loading every x
 * vector once for six W rows and every W vector once for four x rows. A prefill tile row's
 * first x tile used to wait on its six W rows from memory (24 multiplies per 384 bytes ask
 * ~58 GB/s of one thread), which held the 4 x 6 kernel to ~80% of vdpbf16ps' rate on Zen 4
 * against ~95% with W in L2; the tiles now pull the next tile row's W into L2 as they go
 * (PF_NEXT): bench_cpu_matmul -m 128, one thread, 17504x3136 186 -> 215 GFLOP/s, two
 * threads 373 -> 430. Tails use masked loads, which never touch memory past the end. */
#include <immintrin.h>

#include "kernels/cpu/cpu_internal.h"

#define AI static inline __attribute__((always_inline))

enum { MM_F32X, MM_BF16X };

/* Prefetching 4 KiB ahead raised decode by 5-40% over the hardware prefetchers alone
 * (tools/bench_cpu_matmul.c, AMD EPYC Zen 5); prefetches never fault past the end. */
#define MM_PF_BYTES 4096

/* A decode batch's tile reads eight x lines from L2 for every four W lines, so in the
 * time a line prefetched 4 KiB ahead waits in L1 ~32 KiB of x pass through it and evict
 * it: W comes from L2 early and into L1 just before use instead. bench_cpu_matmul -t 2,
 * m = 4 and 8, three alternating rounds on Zen 4: 22-31 -> 28-34 GB/s (12544x3136,
 * 9728x3136, 3136x12544, 2048x6144). A batch of 3 or more whose x stays in L1 gains too
 * (m = 8 at k = 1,024: 248320x1024 23.1 -> 34.1, 6144x1024 25.3 -> 37.1); one or two rows
 * keep the one prefetch, which read 1-6% faster there. */
#define MM_PF_FAR 8192
#define MM_PF_NEAR 512

/* What a tile prefetches: its own W rows MM_PF_BYTES ahead into L1 (decode, one row at a
 * time), far into L2 and near into L1 (a decode batch), or the next tile row's W into L2
 * (prefill; mm_next_row). */
enum { PF_STREAM, PF_BATCH, PF_NEXT };

/* Elements per x vector (block). */
AI int mm_blk(int kind) { return kind == MM_BF16X ? 32 : 16; }

/* Lanes of a block that hold the first rem elements (all of them for rem >= blk). */
AI uint32_t mm_mask(int kind, int rem) {
    int b = mm_blk(kind);
    return rem >= b ? (b == 32 ? 0xffffffffu : 0xffffu) : rem > 0 ? (1u << rem) - 1 : 0;
}

/* Bytes of one W element as the kernel reads it (BF16X always has bf16 W). */
AI int mm_wsize(int kind, dtype dt) { return kind == MM_BF16X || dt != DTYPE_F32 ? 2 : 4; }

/* The block of W at element off, as the product takes it. */
AI __m512 mm_ldw(int kind, const void *w, size_t off, dtype dt, uint32_t mk) {
    if (kind == MM_BF16X)
        return _mm512_castsi512_ps(
            _mm512_maskz_loadu_epi16((__mmask32)mk, (const uint16_t *)w + off));
    if (dt == DTYPE_BF16) {
        __m256i h = _mm256_maskz_loadu_epi16((__mmask16)mk, (const uint16_t *)w + off);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    if (dt == DTYPE_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16((__mmask16)mk, (const uint16_t *)w + off));
    return _mm512_maskz_loadu_ps((__mmask16)mk, (const float *)w + off);
}

AI __m512 mm_ldx(int kind, const void *x, size_t off, uint32_t mk) {
    if (kind == MM_BF16X)
        return _mm512_castsi512_ps(
            _mm512_maskz_loadu_epi16((__mmask32)mk, (const uint16_t *)x + off));
    return _mm512_maskz_loadu_ps((__mmask16)mk, (const float *)x + off);
}

AI __m512 mm_madd(int kind, __m512 acc, __m512 xv, __m512 wv) {
    if (kind == MM_BF16X)
        return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_castps_si512(xv),
                                (__m512bh)_mm512_castps_si512(wv));
    return _mm512_fmadd_ps(xv, wv, acc);
}

/* MR x rows (ldx elements apart) against NR W rows from j: one accumulator per output,
 * blocks in order, the last one masked. */
AI void mm_tile(int kind, float *out, int ldo, const void *x, int ldx, const void *w, dtype dt,
                int k, int j, const int MR, const int NR, const int PF, const char *next,
                const char *next2) {
    const int B = mm_blk(kind);
    const int ws = mm_wsize(kind, dt);
    const uint32_t all = mm_mask(kind, B);
    __m512 a[8][6];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 6
        for (int r = 0; r < NR; r++) a[i][r] = _mm512_setzero_ps();
    int l = 0;
    for (; l + B <= k; l += B) {
        __m512 wv[6];
#pragma GCC unroll 6
        for (int r = 0; r < NR; r++) {
            size_t off = (size_t)(j + r) * k + l;
            const char *wl = (const char *)w + off * ws;
            for (int q = 0; q < B * ws; q += 64) {
                if (PF == PF_STREAM) _mm_prefetch(wl + MM_PF_BYTES + q, _MM_HINT_T0);
                if (PF == PF_BATCH) {
                    _mm_prefetch(wl + MM_PF_FAR + q, _MM_HINT_T1);
                    _mm_prefetch(wl + MM_PF_NEAR + q, _MM_HINT_T0);
                }
            }
            wv[r] = mm_ldw(kind, w, off, dt, all);
        }
        if (PF == PF_NEXT && next) _mm_prefetch(next + (size_t)l * ws, _MM_HINT_T1);
        if (PF == PF_NEXT && next2) _mm_prefetch(next2 + (size_t)l * ws, _MM_HINT_T1);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            __m512 xv = mm_ldx(kind, x, (size_t)i * ldx + l, all);
#pragma GCC unroll 6
            for (int r = 0; r < NR; r++) a[i][r] = mm_madd(kind, a[i][r], xv, wv[r]);
        }
    }
    if (l < k) { /* a last, partial block */
        const uint32_t mk = mm_mask(kind, k - l);
#pragma GCC unroll 6
        for (int r = 0; r < NR; r++) {
            __m512 wv = mm_ldw(kind, w, (size_t)(j + r) * k + l, dt, mk);
#pragma GCC unroll 8
            for (int i = 0; i < MR; i++)
                a[i][r] = mm_madd(kind, a[i][r], mm_ldx(kind, x, (size_t)i * ldx + l, mk), wv);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 6
        for (int r = 0; r < NR; r++) out[(size_t)i * ldo + j + r] = _mm512_reduce_add_ps(a[i][r]);
}

/* Row i of x and of out. */
#define MM_ROW(I) out + (size_t)(I)*ldo, ldo, (const char *)x + (size_t)(I)*ldx *xs, ldx

/* The W row that x tile t of a tile row pulls into L2 for the next tile row (PF_NEXT): the
 * first NR x tiles take one row each, a line per k step, so the next six rows are in L2
 * when their first x tile starts instead of streaming from memory under it. */
AI const char *mm_next_row(const void *w, size_t w_row, int j, int n1, int t, const int NR,
                           const int PF) {
    return PF == PF_NEXT && t < NR && j + NR + t < n1
               ? (const char *)w + (size_t)(j + NR + t) * w_row
               : NULL;
}

/* Rows of x against W rows [j, j + NR), MR at a time (the rest 3, 2 or 1). With PF_NEXT, x
 * tile t pulls rows t and t + nt of the next tile row (nt: the x tiles of this one), so a
 * block of fewer than NR x tiles (16 rows: four) still brings all NR rows into L2. */
AI void mm_rows(int kind, float *out, int ldo, const void *x, int ldx, const void *w, dtype dt,
                int k, int m, int j, int n1, const int MR, const int NR, const int PF) {
    const int xs = kind == MM_BF16X ? 2 : 4;
    const size_t w_row = (size_t)k * mm_wsize(kind, dt);
    const int nt = (m + MR - 1) / MR;
    int i = 0, t = 0;
#define MM_NEXT(T)                                                                                 \
    mm_next_row(w, w_row, j, n1, (T), NR, PF), mm_next_row(w, w_row, j, n1, (T) + nt, NR, PF)
    for (; i + MR <= m; i += MR, t++) mm_tile(kind, MM_ROW(i), w, dt, k, j, MR, NR, PF, MM_NEXT(t));
    if (MR > 4 && m - i >= 4) {
        mm_tile(kind, MM_ROW(i), w, dt, k, j, 4, NR, PF, MM_NEXT(t));
        i += 4;
        t++;
    }
    switch (m - i) {
    case 3: mm_tile(kind, MM_ROW(i), w, dt, k, j, 3, NR, PF, MM_NEXT(t)); break;
    case 2: mm_tile(kind, MM_ROW(i), w, dt, k, j, 2, NR, PF, MM_NEXT(t)); break;
    case 1: mm_tile(kind, MM_ROW(i), w, dt, k, j, 1, NR, PF, MM_NEXT(t)); break;
    default: break;
    }
#undef MM_NEXT
}
#undef MM_ROW

/* W rows [n0, n1) in tiles of NR rows (the rest one narrower tile), each against all m
 * rows of x, MR at a time. A rest is under NR, so each case exists only where NR exceeds
 * it (no tile of MR x 5 on the decode paths, where it would never run). */
AI void mm_cols(int kind, float *out, int ldo, const void *x, int ldx, const void *w, dtype dt,
                int k, int m, int n0, int n1, const int MR, const int NR, const int PF) {
    int j = n0;
    for (; j + NR <= n1; j += NR) mm_rows(kind, out, ldo, x, ldx, w, dt, k, m, j, n1, MR, NR, PF);
    const int rest = n1 - j;
    if (NR > 5 && rest == 5) mm_rows(kind, out, ldo, x, ldx, w, dt, k, m, j, n1, MR, 5, PF);
    if (NR > 4 && rest == 4) mm_rows(kind, out, ldo, x, ldx, w, dt, k, m, j, n1, MR, 4, PF);
    if (NR > 3 && rest == 3) mm_rows(kind, out, ldo, x, ldx, w, dt, k, m, j, n1, MR, 3, PF);
    if (NR > 2 && rest == 2) mm_rows(kind, out, ldo, x, ldx, w, dt, k, m, j, n1, MR, 2, PF);
    if (NR > 1 && rest == 1) mm_rows(kind, out, ldo, x, ldx, w, dt, k, m, j, n1, MR, 1, PF);
}

AI void mm_matmul(int kind, float *out, int ldo, const void *x, int ldx, const void *w, dtype dt,
                  int k, int m, int n0, int n1, int l1d) {
    const int xs = kind == MM_BF16X ? 2 : 4;
    const size_t w_row = (size_t)k * mm_wsize(kind, dt);
    /* Decode: x stays in L1 while a W row streams past it. The budget was 5/6 of L1 for x
     * alone, which on Zen 4's 32 KiB let a 24 KiB x (m = 1 at k = 12,288-12,544) be evicted
     * by its own 24 KiB W rows: in the tiles below those read 15-18% faster on one thread
     * and 11-14% on two (bench_cpu_matmul -m 1, 3136x12544 and 1536x12288). */
    if ((size_t)m * ldx * xs + w_row <= (size_t)l1d) {
        if (m <= 2) mm_cols(kind, out, ldo, x, ldx, w, dt, k, m, n0, n1, 8, 1, PF_STREAM);
        else mm_cols(kind, out, ldo, x, ldx, w, dt, k, m, n0, n1, 8, 1, PF_BATCH);
    } else if (m < 16) /* a decode batch: still bound by the weight stream, so prefetch it */
        mm_cols(kind, out, ldo, x, ldx, w, dt, k, m, n0, n1, 8, 4, PF_BATCH);
    else mm_cols(kind, out, ldo, x, ldx, w, dt, k, m, n0, n1, 4, 6, PF_NEXT);
}

void cpu_matmul_bf16_avx512(float *restrict out, int ldo, const uint16_t *restrict xb, int ldx,
                            const uint16_t *restrict w, int k, int m, int n0, int n1, int l1d) {
    mm_matmul(MM_BF16X, out, ldo, xb, ldx, w, DTYPE_BF16, k, m, n0, n1, l1d);
}

/* One instantiation per weight dtype so the widening is resolved at compile time. BF16
 * weights come here only for a k wider than the packing scratch (no model has one). */
void cpu_matmul_f32_avx512(float *restrict out, int ldo, const float *restrict x,
                           const void *restrict w, dtype dt, int k, int m, int n0, int n1,
                           int l1d) {
    if (dt == DTYPE_F16) mm_matmul(MM_F32X, out, ldo, x, k, w, DTYPE_F16, k, m, n0, n1, l1d);
    else if (dt == DTYPE_BF16) mm_matmul(MM_F32X, out, ldo, x, k, w, DTYPE_BF16, k, m, n0, n1, l1d);
    else mm_matmul(MM_F32X, out, ldo, x, k, w, DTYPE_F32, k, m, n0, n1, l1d);
}

/* vcvtneps2bf16 rounds to nearest even and reads subnormal inputs as zero, which is the
 * rounding cpu_pack_bf16_one spells out. */
void cpu_pack_bf16_avx512(uint16_t *restrict out, const float *restrict x, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(out + i),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 mk = (__mmask16)((1u << (n - i)) - 1);
        __m256i v = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mk, x + i));
        _mm256_mask_storeu_epi16(out + i, mk, v);
    }
}
