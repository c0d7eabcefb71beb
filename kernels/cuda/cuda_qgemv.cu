/* cuda_qgemv.cu - out[m, n] = x[m, k] · Wᵀ for W in Q8_0 or Q4_K, at any m: the GEMV that
 * quantized decode runs on (cuda_qmatmul.cu keeps Q4_0, Q5_0, Q6_K and the shapes this
 * one refuses).
 *
 * The first form (a warp a row, its blocks staged through shared memory, x read from L1
 * for every weight) ran Qwen3.5-2B's shapes at 0.12 (Q8_0) and 0.08 (Q4_K) of the H200's
 * copy bandwidth, slower than bf16 at twice the bytes: it issued one round of loads at a
 * time and spent its instructions on x and on int-to-float conversions. Here, as in the
 * bf16 GEMV (cuda_matmul.cu), a resident grid walks the rows and the next row's loads are
 * in flight while the current one is summed; what changes is the unit a lane owns:
 *
 *  - an item is 32 weights: a Q8_0 block (34 bytes, 2-byte aligned, so the lane loads the
 *    three 16-byte chunks that hold it and shifts it out of them), or one 16-byte chunk of
 *    a Q4_K block's quants (low nibbles: 16 weights of sub-block 2c, high: the same places
 *    of 2c + 1) with the block's 16-byte header (d, dmin, the packed scales), which the 8
 *    lanes of one block load together;
 *  - lane l of part p owns items p·ipw + l, + 32, ... of every row, the same columns in
 *    every row, so at m <= 2 its x (at most 64 floats) is loaded once into registers and
 *    only weights stream (larger m read x from L1 as they go);
 *  - quants become floats by building 2^23 + q in the mantissa (a byte permute) and
 *    subtracting 2^23 (exact), not by the int-to-float unit, which is 16 a clock per SM.
 *
 * Measured on the H200 (BENCHMARKS.md): Qwen3.5-2B's Q8_0 decode 264 -> 482 tok/s, the
 * GEMVs at m = 1 0.14-0.51 of the copy bandwidth (Q4_K 0.09-0.32), so still short of bf16's.
 * Tried and measured slower (cf11083, reverted): the weights through a ring of asynchronous
 * copies in shared memory, 7-8 rows in flight a warp (~120 KB an SM), 2B Q8_0 decode 482 ->
 * 343 tok/s; so the bytes in flight are not what holds this kernel back. m > 2 reads x per
 * lane from L1 at a 128-byte stride (32 lines a load): 0.02-0.03 of the bandwidth at m = 8.
 *
 * Arithmetic (fixed, so a row's result is the same at every m and in every launch): per
 * item, Q8_0: d · Σ q·x (32 fmaf in element order); Q4_K: d·sc · Σ q·x − dmin·mn · Σ x per
 * 16-weight half (fmaf, then the sums in order); a lane adds its items in order, then the
 * warp (cuda_warp_sum) and the parts (in part order). The split wpr depends on the shape
 * and the device alone. The op test holds the result to the f32 product of the
 * dequantized weights (tests/device/cuda_ops_quant.c, TOL_QMM) and a row to its m = 1
 * bits inside every batch. */
#include "kernels/cuda/cuda_quant.cuh"

enum {
    QV_THREADS = 256,
    QV_WARPS = QV_THREADS / 32,
    QV_IE = 32,     /* weights an item */
    QV_XR_MAX = 64, /* floats of x a lane keeps in registers */
    QV_NJ = 4       /* items a lane of a row, at most (x from L1) */
};

struct qv_segs {
    const void *w[BK_MATMUL_MAX];
    float *out[BK_MATMUL_MAX];
    int end[BK_MATMUL_MAX];
    int n_seg;
};

struct qv_row {
    const void *w;
    float *out;
    int row, n;
};

/* The weight launch row grow falls in (row >= n: past the last); fixed indices, so the
 * parameters are not copied to a stack frame. */
__device__ __forceinline__ qv_row qv_find(const qv_segs &sg, int grow) {
    qv_row r = {sg.w[0], sg.out[0], grow, sg.end[0]};
#pragma unroll
    for (int j = 1; j < BK_MATMUL_MAX; j++)
        if (j < sg.n_seg && grow >= sg.end[j - 1])
            r = {sg.w[j], sg.out[j], grow - sg.end[j - 1], sg.end[j] - sg.end[j - 1]};
    return r;
}

/* The float of quant byte e of w, plus bias: 2^23 + byte - (2^23 + bias), exact. */
__device__ __forceinline__ float qv_byte(uint32_t w, int e, float bias) {
    return __int_as_float((int)__byte_perm(w, 0x4B000000u, 0x7540u | (unsigned)e)) - bias;
}

/* 16 floats of x from xp (16-byte aligned when vec). */
__device__ __forceinline__ void qv_ldx16(const float *__restrict__ xp, int vec, float *f) {
    if (vec) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float4 v = __ldg((const float4 *)xp + e);
            f[4 * e] = v.x, f[4 * e + 1] = v.y, f[4 * e + 2] = v.z, f[4 * e + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int e = 0; e < 16; e++) f[e] = __ldg(xp + e);
    }
}

template <int DT> struct qv_fmt;

/* Q8_0: item i is block i of the row; its 32 quants as floats and d. */
template <> struct qv_fmt<DTYPE_Q8_0> {
    enum { L = 3, NC = 1 }; /* 16-byte loads an item, coefficients */
    static __host__ __device__ size_t row_bytes(int k) { return (size_t)(k / 32) * CQ_Q8_0; }
    /* the x of half h (16 floats) of item i */
    static __device__ __forceinline__ int xoff(int i, int h) { return 32 * i + 16 * h; }
    static __device__ __forceinline__ void load(const uint8_t *row, int i, uint4 *u) {
        const uint4 *a = (const uint4 *)((uintptr_t)(row + (size_t)i * CQ_Q8_0) & ~(uintptr_t)15);
#pragma unroll
        for (int c = 0; c < L; c++) u[c] = __ldcs(a + c);
    }
    /* The block starts s = addr % 16 bytes into u (s even): the words rotated by s / 4, then
     * each quant word shifted out of a pair (by 16 bits, or by 32: the second word whole,
     * as __funnelshift_rc clamps). */
    static __device__ __forceinline__ void decode(const uint4 *u, const uint8_t *row, int i,
                                                  float *q, float *cf) {
        const int s = (int)((uintptr_t)(row + (size_t)i * CQ_Q8_0) & 15), a = s >> 2;
        const unsigned sh = 8u * (unsigned)(s & 3);
        const uint32_t w[12] = {u[0].x, u[0].y, u[0].z, u[0].w, u[1].x, u[1].y,
                                u[1].z, u[1].w, u[2].x, u[2].y, u[2].z, u[2].w};
        uint32_t t2[10], v[9];
#pragma unroll
        for (int j = 0; j < 10; j++) t2[j] = (a & 2) ? w[j + 2] : w[j];
#pragma unroll
        for (int j = 0; j < 9; j++) v[j] = (a & 1) ? t2[j + 1] : t2[j];
        cf[0] = __half2float(__ushort_as_half((unsigned short)((v[0] >> sh) & 0xffffu)));
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const uint32_t q4 = __funnelshift_rc(v[j], v[j + 1], 16u + sh) ^ 0x80808080u;
#pragma unroll
            for (int e = 0; e < 4; e++) q[4 * j + e] = qv_byte(q4, e, 8388736.0f); /* 2^23+128 */
        }
    }
    /* acc += d · Σ q·x */
    static __device__ __forceinline__ float apply(const float *q, const float *cf, const float *xv,
                                                  float acc) {
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < 32; e++) s = fmaf(q[e], xv[e], s);
        return fmaf(cf[0], s, acc);
    }
};

/* Q4_K: item i is quant chunk i % 8 of block i / 8 (u[0] the block's header, u[1] the
 * chunk). Chunk q holds bytes 16·(q & 1) .. + 15 of the 32 of group c = q / 2: low nibbles
 * are sub-block 2c (q[0..15]), high ones 2c + 1 (q[16..31]). */
template <> struct qv_fmt<DTYPE_Q4_K> {
    enum { L = 2, NC = 4 };
    static __host__ __device__ size_t row_bytes(int k) { return (size_t)(k / 256) * CQ_Q4_K; }
    static __device__ __forceinline__ int xoff(int i, int h) {
        return 256 * (i >> 3) + 64 * ((i & 7) >> 1) + 16 * (i & 1) + 32 * h;
    }
    static __device__ __forceinline__ void load(const uint8_t *row, int i, uint4 *u) {
        const uint4 *b = (const uint4 *)(row + (size_t)(i >> 3) * CQ_Q4_K);
        u[0] = __ldg(b);                /* shared by the block's 8 lanes */
        u[1] = __ldcs(b + 1 + (i & 7)); /* CQ_Q4_K_QS = 16 */
    }
    /* Sub-block j's 6-bit scale and min (cuda_q4_k_scale) from the header's words: the 12
     * scale bytes are words y, z, w; j < 4 reads byte j of y (scale) and z (min), j >= 4
     * byte j - 4 of w and the top bits of y and z. */
    static __device__ __forceinline__ void scale(const uint4 &h, int j, float *sc, float *mn) {
        const unsigned b = 8u * (unsigned)(j & 3);
        const unsigned y = (h.y >> b) & 255u, z = (h.z >> b) & 255u, w = (h.w >> b) & 255u;
        *sc = (float)(j < 4 ? y & 63u : (w & 15u) | (y >> 6) << 4);
        *mn = (float)(j < 4 ? z & 63u : (w >> 4) | (z >> 6) << 4);
    }
    /* cf: d·sc and −dmin·mn of the two sub-blocks (exact products: 11 by 6 bits) */
    static __device__ __forceinline__ void decode(const uint4 *u, const uint8_t *row, int i,
                                                  float *q, float *cf) {
        (void)row;
        const int c = (i & 7) >> 1;
        float sc0, mn0, sc1, mn1;
        scale(u[0], 2 * c, &sc0, &mn0);
        scale(u[0], 2 * c + 1, &sc1, &mn1);
        const float d = __half2float(__ushort_as_half((unsigned short)(u[0].x & 0xffffu)));
        const float dm = __half2float(__ushort_as_half((unsigned short)(u[0].x >> 16)));
        cf[0] = d * sc0, cf[1] = -(dm * mn0), cf[2] = d * sc1, cf[3] = -(dm * mn1);
        const uint32_t qw[4] = {u[1].x, u[1].y, u[1].z, u[1].w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint32_t lo = qw[j] & 0x0f0f0f0fu, hi = (qw[j] >> 4) & 0x0f0f0f0fu;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                q[4 * j + e] = qv_byte(lo, e, 8388608.0f);
                q[16 + 4 * j + e] = qv_byte(hi, e, 8388608.0f);
            }
        }
    }
    /* acc += d·sc0 · Σ q·x − dmin·mn0 · Σ x over the first half, then the second's */
    static __device__ __forceinline__ float apply(const float *q, const float *cf, const float *xv,
                                                  float acc) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float s = 0.0f, sx = 0.0f;
#pragma unroll
            for (int e = 0; e < 16; e++)
                s = fmaf(q[16 * h + e], xv[16 * h + e], s), sx += xv[16 * h + e];
            acc = fmaf(cf[2 * h], s, acc);
            acc = fmaf(cf[2 * h + 1], sx, acc);
        }
        return acc;
    }
};

/* M rows of x (blockIdx.y's group of m) against every row of the launch. A row belongs to
 * wpr warps of a block (parts of ipw = k / 32 / wpr items each); a block takes row groups
 * blockIdx.x, + gridDim.x, ... (groups of QV_WARPS / wpr rows) and has the next row's
 * loads in flight while it sums the current one. XR: x in registers, loaded once (the
 * caller picks it where M · 32 · ceil(ipw / 32) <= QV_XR_MAX). */
template <int DT, int M, bool XR>
__global__ void __launch_bounds__(QV_THREADS, 1)
    qv_gemv(qv_segs sg, const float *__restrict__ x, int m, int k, int wpr, int groups, int vec) {
    typedef qv_fmt<DT> F;
    constexpr int NJ = XR ? QV_XR_MAX / (M * QV_IE) : QV_NJ;
    __shared__ float red[QV_WARPS][M];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int part = warp % wpr, slot = warp / wpr, rpg = QV_WARPS / wpr;
    const int ipw = k / QV_IE / wpr, i0 = part * ipw + lane;
    const int r0 = blockIdx.y * M, mr = m - r0 < M ? m - r0 : M;
    const size_t rb = F::row_bytes(k);
    x += (size_t)r0 * k;
    const int steps =
        (int)blockIdx.x < groups ? (groups - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    float xr[XR ? NJ : 1][M][32] = {};
    if (XR)
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int t = 0; t < M; t++)
                if (t < mr && lane + 32 * j < ipw) {
                    const int i = i0 + 32 * j;
                    qv_ldx16(x + (size_t)t * k + F::xoff(i, 0), vec, xr[XR ? j : 0][t]);
                    qv_ldx16(x + (size_t)t * k + F::xoff(i, 1), vec, xr[XR ? j : 0][t] + 16);
                }
    auto issue = [&](uint4(*u)[F::L], int s) {
        qv_row r = qv_find(sg, ((int)blockIdx.x + s * (int)gridDim.x) * rpg + slot);
        const uint8_t *wr = (const uint8_t *)r.w + (size_t)r.row * rb;
#pragma unroll
        for (int j = 0; j < NJ; j++)
            if (r.row < r.n && lane + 32 * j < ipw) F::load(wr, i0 + 32 * j, u[j]);
        return r;
    };
    auto consume = [&](const uint4(*u)[F::L], const qv_row &r) {
        float acc[M];
#pragma unroll
        for (int t = 0; t < M; t++) acc[t] = 0.0f;
        const uint8_t *wr = (const uint8_t *)r.w + (size_t)r.row * rb;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            if (!(r.row < r.n && lane + 32 * j < ipw)) continue;
            const int i = i0 + 32 * j;
            float q[32], cf[F::NC];
            F::decode(u[j], wr, i, q, cf);
#pragma unroll
            for (int t = 0; t < M; t++) {
                if (t >= mr) break;
                if (XR) {
                    acc[t] = F::apply(q, cf, xr[XR ? j : 0][t], acc[t]);
                } else {
                    float xv[32];
                    qv_ldx16(x + (size_t)t * k + F::xoff(i, 0), vec, xv);
                    qv_ldx16(x + (size_t)t * k + F::xoff(i, 1), vec, xv + 16);
                    acc[t] = F::apply(q, cf, xv, acc[t]);
                }
            }
        }
#pragma unroll
        for (int t = 0; t < M; t++) acc[t] = cuda_warp_sum(acc[t]);
        if (wpr == 1) {
            if (lane == 0 && r.row < r.n)
#pragma unroll
                for (int t = 0; t < M; t++)
                    if (t < mr) r.out[(size_t)(r0 + t) * r.n + r.row] = acc[t];
            return;
        }
        if (lane == 0)
#pragma unroll
            for (int t = 0; t < M; t++) red[warp][t] = acc[t];
        __syncthreads();
        if (part == 0 && lane == 0 && r.row < r.n)
#pragma unroll
            for (int t = 0; t < M; t++) {
                float v = 0.0f;
                for (int q = 0; q < wpr; q++) v += red[warp + q][t];
                if (t < mr) r.out[(size_t)(r0 + t) * r.n + r.row] = v;
            }
        __syncthreads(); /* red is refilled by the next row */
    };
    uint4 ua[NJ][F::L], ub[NJ][F::L];
    qv_row ra = {}, rb2 = {};
    if (steps > 0) ra = issue(ua, 0);
    /* two buffers, unrolled by two so neither is copied while its loads are in flight */
    for (int s = 0; s < steps; s += 2) {
        if (s + 1 < steps) rb2 = issue(ub, s + 1);
        consume(ua, ra);
        if (s + 2 < steps) ra = issue(ua, s + 2);
        if (s + 1 < steps) consume(ub, rb2);
    }
}

/* Warps a row: enough that a part is at most 64 items (x in registers at m = 1), more
 * while the rows are too few to give every SM's warps one and a part keeps 32 items; a
 * power of two that divides the items. A function of the shape and the device alone, never
 * of m (batch invariance). 0: not this kernel's shape. */
static int qv_wpr(const cuda_impl *c, int n, int items) {
    int wpr = 1;
    while (wpr < QV_WARPS && items % (2 * wpr) == 0 &&
           (items / wpr > QV_XR_MAX / QV_IE * 32 ||
            ((int64_t)n * wpr < 2LL * QV_WARPS * c->n_sm && items / (2 * wpr) >= 32)))
        wpr *= 2;
    return items % wpr == 0 && items / wpr <= 32 * QV_NJ ? wpr : 0;
}

template <int DT, int M, bool XR>
static void qv_go(cuda_impl *c, const qv_segs &sg, const float *x, int m, int k, int wpr) {
    const int n = sg.end[sg.n_seg - 1], rpg = QV_WARPS / wpr, groups = (n + rpg - 1) / rpg;
    /* one block an SM stays resident (launch bounds; 140-232 registers a thread) */
    dim3 grid((unsigned)(groups < c->n_sm ? groups : c->n_sm), (unsigned)((m + M - 1) / M));
    qv_gemv<DT, M, XR>
        <<<grid, QV_THREADS, 0, c->stream>>>(sg, x, m, k, wpr, groups, (uintptr_t)x % 16 == 0);
}

template <int DT>
static void qv_launch(cuda_impl *c, const qv_segs &sg, const float *x, int m, int k, int wpr) {
    const int ipw = k / QV_IE / wpr;
    if (m <= 1 && ipw <= QV_XR_MAX / QV_IE * 32) qv_go<DT, 1, true>(c, sg, x, m, k, wpr);
    else if (m <= 2 && ipw <= QV_XR_MAX / (2 * QV_IE) * 32) qv_go<DT, 2, true>(c, sg, x, m, k, wpr);
    else if (m <= 2) qv_go<DT, 2, false>(c, sg, x, m, k, wpr);
    else if (m <= 4) qv_go<DT, 4, false>(c, sg, x, m, k, wpr);
    else qv_go<DT, 8, false>(c, sg, x, m, k, wpr);
}

int cuda_qgemv(cuda_impl *c, float *const *out, const float *x, const bk_weight *const *w, int n_w,
               int m) {
    const int dt = w[0]->dt, k = (int)w[0]->shape[1];
    if ((dt != DTYPE_Q8_0 && dt != DTYPE_Q4_K) || k % dtype_block_elems((dtype)dt) || n_w < 1 ||
        n_w > BK_MATMUL_MAX || (m + 7) / 8 > 65535)
        return -1;
    qv_segs sg = {};
    for (int j = 0, end = 0; j < n_w; j++) {
        if (w[j]->dt != dt || (int)w[j]->shape[1] != k || (uintptr_t)w[j]->data % 16) return -1;
        end += (int)w[j]->shape[0];
        sg.w[j] = w[j]->data, sg.out[j] = out[j], sg.end[j] = end;
    }
    sg.n_seg = n_w;
    const int wpr = qv_wpr(c, sg.end[n_w - 1], k / QV_IE);
    if (!wpr) return -1;
    if (dt == DTYPE_Q8_0) qv_launch<DTYPE_Q8_0>(c, sg, x, m, k, wpr);
    else qv_launch<DTYPE_Q4_K>(c, sg, x, m, k, wpr);
    cuda_check_launch(c, "qmatmul gemv");
    return 0;
}
