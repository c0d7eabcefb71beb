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
 *    only weights stream (larger m stage x in shared memory once a block);
 *  - quants become floats by building 2^23 + q in the mantissa (a byte permute) and
 *    subtracting 2^23 (exact), not by the int-to-float unit, which is 16 a clock per SM.
 *
 * Measured on the H200 (BENCHMARKS.md): Qwen3.5-2B's Q8_0 decode 264 -> 482 tok/s, the
 * GEMVs at m = 1 0.14-0.51 of the copy bandwidth (Q4_K 0.09-0.32), so still short of bf16's.
 * Tried and measured slower (cf11083, reverted): the weights through a ring of asynchronous
 * copies in shared memory, 7-8 rows in flight a warp (~120 KB an SM), 2B Q8_0 decode 482 ->
 * 343 tok/s; so the bytes in flight are not what holds this kernel back. Instructions per
 * weight byte line up with the fractions (bf16 ~1.1 -> 0.56-1.03, Q8_0 ~4 -> 0.14-0.51,
 * Q4_K ~7 -> 0.09-0.32): the next form is __dp4a on x quantized to int8 per 32 values, as
 * the CPU backend computes quantized matmuls. m > 2 read x per
 * lane from L1 at a 128-byte stride (32 lines a load): 0.02-0.03 of the bandwidth at m = 8;
 * so now x is staged in shared memory there (padded against bank conflicts; 4 or 2 rows a
 * launch where 8 do not fit, W then read more than once): not yet timed on a GPU.
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
    QV_IE = 32,            /* weights an item */
    QV_XR_MAX = 64,        /* floats of x a lane keeps in registers */
    QV_NJ = 2,             /* items a lane of a row, at most */
    QV_XS_MAX = 200 * 1024 /* bytes of x a block stages in shared memory (m > 2) */
};

/* Floats of one staged x row: 4 floats of padding after every 32, so the lanes of a
 * quarter warp, whose items start 32 floats apart, read 16-byte pieces from 8 different
 * bank groups (36 l mod 32 = 4 l) instead of one. */
__host__ __device__ constexpr int qv_xs_row(int k) { return k + 4 * (k / 32); }
__host__ __device__ constexpr int qv_xs_at(int e) { return e + 4 * (e >> 5); }
static size_t qv_xs_bytes(int M, int k) { return sizeof(float) * (size_t)M * qv_xs_row(k); }

/* The float of quant byte e of w, plus bias: 2^23 + byte - (2^23 + bias), exact. */
__device__ __forceinline__ float qv_byte(uint32_t w, int e, float bias) {
    return __int_as_float((int)__byte_perm(w, 0x4B000000u, 0x7540u | (unsigned)e)) - bias;
}

/* 16 floats of staged x (shared memory: plain loads, never __ldg's global path) */
__device__ __forceinline__ void qv_lds16(const float *xs, float *f) {
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const float4 v = ((const float4 *)xs)[e];
        f[4 * e] = v.x, f[4 * e + 1] = v.y, f[4 * e + 2] = v.z, f[4 * e + 3] = v.w;
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
 * caller picks it where M · 32 · ceil(ipw / 32) <= QV_XR_MAX); else the block's M rows of
 * x staged in shared memory once (the caller picks M so that they fit in QV_XS_MAX). Where
 * x comes from, and M, change no sum. */
template <int DT, int M, bool XR>
__global__ void __launch_bounds__(QV_THREADS, 1)
    qv_gemv(cuda_segs sg, const float *__restrict__ x, int m, int k, int wpr, int groups, int vec) {
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
    extern __shared__ float4 qv_xs4[];    /* float4: the 16-byte reads need its alignment */
    float *const qv_xs = (float *)qv_xs4; /* [M][qv_xs_row(k)] unless XR */
    float xr[XR ? NJ : 1][M][32] = {};
    auto issue = [&](uint4(*u)[F::L], int s) {
        cuda_seg_row r = cuda_seg_find(sg, ((int)blockIdx.x + s * (int)gridDim.x) * rpg + slot);
        const uint8_t *wr = (const uint8_t *)r.w + (size_t)r.row * rb;
#pragma unroll
        for (int j = 0; j < NJ; j++)
            if (r.row < r.n && lane + 32 * j < ipw) F::load(wr, i0 + 32 * j, u[j]);
        return r;
    };
    auto consume = [&](const uint4(*u)[F::L], const cuda_seg_row &r) {
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
                } else { /* 16 floats never cross a padded group of 32 */
                    float xv[32];
                    const float *xt = qv_xs + (size_t)t * qv_xs_row(k);
                    qv_lds16(xt + qv_xs_at(F::xoff(i, 0)), xv);
                    qv_lds16(xt + qv_xs_at(F::xoff(i, 1)), xv + 16);
                    acc[t] = F::apply(q, cf, xv, acc[t]);
                }
            }
        }
        cuda_gemv_store<M>(red, acc, r, warp, lane, part, wpr, r0, mr);
    };
    uint4 ua[NJ][F::L], ub[NJ][F::L];
    cuda_seg_row ra = {}, rb2 = {};
    cuda_pdl_trigger();
    if (steps > 0) ra = issue(ua, 0);
    cuda_pdl_wait(); /* the first weights are on their way; x is the kernel ahead's */
    if (XR)          /* x after the first loads too; the sums are the same */
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int t = 0; t < M; t++)
                if (t < mr && lane + 32 * j < ipw) {
                    const int i = i0 + 32 * j;
                    cuda_q_ldx<16>(x + (size_t)t * k + F::xoff(i, 0), vec, xr[XR ? j : 0][t]);
                    cuda_q_ldx<16>(x + (size_t)t * k + F::xoff(i, 1), vec, xr[XR ? j : 0][t] + 16);
                }
    if (!XR) { /* after the first loads are under way; x is the same for every row */
        for (int e = threadIdx.x; e < mr * k; e += QV_THREADS)
            qv_xs[(size_t)(e / k) * qv_xs_row(k) + qv_xs_at(e % k)] = x[e];
        __syncthreads();
    }
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
static void qv_go(cuda_impl *c, const cuda_segs &sg, const float *x, int m, int k, int wpr) {
    const int n = sg.end[sg.n_seg - 1], rpg = QV_WARPS / wpr, groups = (n + rpg - 1) / rpg;
    const int most = 65535 * M; /* rows of x a launch: grid.y */
    const size_t xb = XR ? 0 : qv_xs_bytes(M, k);
    cuda_segs part = sg;
    for (int r0 = 0; r0 < m; r0 += most) {
        const int rows = m - r0 < most ? m - r0 : most;
        for (int j = 0; j < sg.n_seg; j++)
            part.out[j] = sg.out[j] + (size_t)r0 * (sg.end[j] - (j ? sg.end[j - 1] : 0));
        /* one block an SM stays resident (launch bounds; 140-232 registers a thread) */
        dim3 grid((unsigned)(groups < c->n_sm ? groups : c->n_sm), (unsigned)((rows + M - 1) / M));
        const float *xr = x + (size_t)r0 * k;
        cuda_launch_pdl(c, "qmatmul gemv", qv_gemv<DT, M, XR>, grid, QV_THREADS, xb, part, xr, rows,
                        k, wpr, groups, (int)((uintptr_t)xr % 16 == 0));
    }
}

/* Opts the kernels that stage x in to QV_XS_MAX bytes of shared memory, once at create
 * (not inside a graph capture). */
template <int DT> static cudaError_t qv_optin(void) {
    const cudaFuncAttribute a = cudaFuncAttributeMaxDynamicSharedMemorySize;
    cudaError_t e = cudaFuncSetAttribute(qv_gemv<DT, 2, false>, a, QV_XS_MAX);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(qv_gemv<DT, 4, false>, a, QV_XS_MAX);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(qv_gemv<DT, 8, false>, a, QV_XS_MAX);
    return e;
}
cudaError_t cuda_qgemv_setup(void) {
    cudaError_t e = qv_optin<DTYPE_Q8_0>();
    return e == cudaSuccess ? qv_optin<DTYPE_Q4_K>() : e;
}

/* M: 1 or 2 with x in registers where a part's items allow, else the largest of 8, 4, 2
 * (at most m) whose x rows fit the staging (cuda_qgemv refuses shapes where none does). */
template <int DT>
static void qv_launch(cuda_impl *c, const cuda_segs &sg, const float *x, int m, int k, int wpr) {
    const int ipw = k / QV_IE / wpr;
    if (m <= 1) qv_go<DT, 1, true>(c, sg, x, m, k, wpr); /* ipw <= 64: qv_wpr */
    else if (m <= 2 && ipw <= QV_XR_MAX / (2 * QV_IE) * 32) qv_go<DT, 2, true>(c, sg, x, m, k, wpr);
    else if (m > 4 && qv_xs_bytes(8, k) <= QV_XS_MAX) qv_go<DT, 8, false>(c, sg, x, m, k, wpr);
    else if (m > 2 && qv_xs_bytes(4, k) <= QV_XS_MAX) qv_go<DT, 4, false>(c, sg, x, m, k, wpr);
    else qv_go<DT, 2, false>(c, sg, x, m, k, wpr);
}

int cuda_qgemv(cuda_impl *c, const cuda_segs &sg, int dt, const float *x, int m, int k) {
    if (dt != DTYPE_Q8_0 && dt != DTYPE_Q4_K) return -1;
    const int wpr = qv_wpr(c, sg.end[sg.n_seg - 1], k / QV_IE);
    /* two staged rows must fit (m 2 past x in registers): else the other kernel, at every m
     * (a shape never mixes the two) */
    if (!wpr || qv_xs_bytes(2, k) > QV_XS_MAX) return -1;
    if (dt == DTYPE_Q8_0) qv_launch<DTYPE_Q8_0>(c, sg, x, m, k, wpr);
    else qv_launch<DTYPE_Q4_K>(c, sg, x, m, k, wpr);
    cuda_check_launch(c, "qmatmul gemv");
    return 0;
}
