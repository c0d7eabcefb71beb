/* cuda_qmatmul.cu - out[m, n] = x[m, k] · Wᵀ for W in llama.cpp's block formats (Q8_0, Q4_0, Q5_0,
 * Q4_K, Q6_K: cuda_quant.cuh), x in f32, at any m; the matmul, matmul_n (several weights of
 * one x in one launch) and lm_head of a quantized model. Q8_0 and Q4_K go to the faster
 * cuda_qgemv.cu where it takes the shape (whole launches: a shape never mixes the two, so
 * a row's bits do not depend on m); this form is the rest: not tuned, decode-first,
 * correct at every m, and the CPU backend's batch invariance kept.
 *
 * x stays f32 and the weights are decoded in registers (issue 20: "dequantize in registers,
 * f32 accumulate"), not quantized to int8 for dp4a as llama.cpp's mmvq and our CPU kernels
 * do: the product is then the dequantized weights' f32 product (kernels/backend.h), which
 * the op test holds to the f32 matmul of the dequantized matrix at f32 rounding, and a
 * quantized model on the GPU is no further from its f32 twin than the weights make it.
 *
 * A warp owns a row of W and walks it in tiles of 32 units, one unit a lane: a block of 32
 * (Q8_0, Q4_0, Q5_0) or a quarter block of 64 elements (Q4_K: one 32-byte chunk of qs and its two
 * sub-blocks; Q6_K: 16 of the 32 columns of a 128-element half, four 16-value sub-blocks).
 * The tile's bytes, contiguous in the row, come in with coalesced 16-byte evict-first loads
 * into the warp's slice of shared memory (Q8_0 / Q4_0 / Q5_0 / Q6_K blocks are only 2-byte aligned,
 * so a lane cannot load its own block 16 bytes at a time), and each lane decodes its unit
 * from there: the quants become exact f32 integers, their products with x are summed per
 * sub-block, and the sub-block's scale (and Q4_K's min times the sum of x) is applied once
 * per sum, as llama.cpp's dequantize-mul-mat-vec kernels do. A row's bytes are read once
 * for the m rows of x of its launch.
 *
 * Batch invariance: every row of x takes the same arithmetic whatever m is (the launch runs
 * rows of x in groups of at most 8, grid.y, each row in its own accumulator, explicit fmaf
 * so no contraction differs between instantiations; the warp sum's order is fixed), so a
 * row's result does not depend on m or on the other rows, as on the CPU. Prefill (m > 8)
 * reads W once per 8 rows: correct, not fast. */
#include "kernels/cuda/cuda_quant.cuh"

enum {
    QM_THREADS = 256,
    QM_WARPS = QM_THREADS / 32,
    QM_MAX_M = 8,                               /* rows of x per block (grid.y groups) */
    QM_TILE_BYTES = 32 * CQ_Q6_K / 4,           /* the largest tile: 8 Q6_K blocks */
    QM_CHUNKS = (QM_TILE_BYTES + 15 + 15) / 16, /* its 16-byte loads, from an aligned start */
    QM_MAX_GY = 65535                           /* grid.y */
};

/* ---- the layout of a row: units and their bytes ---- */

template <int DT> struct qm_fmt;
template <> struct qm_fmt<DTYPE_Q8_0> {
    enum { UE = 32, UB = CQ_Q8_0, UPB = 1 }; /* elements a unit, bytes a block, units a block */
};
template <> struct qm_fmt<DTYPE_Q4_0> {
    enum { UE = 32, UB = CQ_Q4_0, UPB = 1 };
};
template <> struct qm_fmt<DTYPE_Q5_0> {
    enum { UE = 32, UB = CQ_Q5_0, UPB = 1 };
};
template <> struct qm_fmt<DTYPE_Q4_K> {
    enum { UE = 64, UB = CQ_Q4_K, UPB = 4 };
};
template <> struct qm_fmt<DTYPE_Q6_K> {
    enum { UE = 64, UB = CQ_Q6_K, UPB = 4 };
};

/* Byte offset of unit u's block from the row start (a tile always starts on a block). */
template <int DT> __device__ __forceinline__ size_t qm_block_off(int u) {
    return (size_t)(u / qm_fmt<DT>::UPB) * qm_fmt<DT>::UB;
}

/* Σ q[e]·x[e] over N elements, in element order. */
template <int N> __device__ __forceinline__ float qm_dot(const float *q, const float *xv) {
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < N; e++) s = fmaf(q[e], xv[e], s);
    return s;
}
template <int N> __device__ __forceinline__ float qm_sum(const float *xv) {
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < N; e++) s += xv[e];
    return s;
}

/* ---- one unit against the rows of x: acc[t] += W_unit · x_t[unit's elements] ----
 * b: the unit's block in shared memory (2-byte aligned); u: the unit's index in the row;
 * x: row 0 of this launch's group, rows k floats apart; rows t >= mr are not there. */
template <int DT, int M> struct qm_unit;

/* A 32-element unit whose quants q are decoded: acc[t] += d · Σ q·x_t. */
template <int M>
__device__ __forceinline__ void qm_apply32(const float *q, float d, int u, const float *x, int k,
                                           int mr, int vec, float *acc) {
    float xv[32];
#pragma unroll
    for (int t = 0; t < M; t++) {
        if (t >= mr) break;
        cuda_q_ldx<32>(x + (size_t)t * k + 32 * (size_t)u, vec, xv);
        acc[t] = fmaf(d, qm_dot<32>(q, xv), acc[t]);
    }
}

/* Q4_0 / Q5_0 quants from 16 nibble bytes at w (2-byte aligned) and the fifth bits qh (0 for
 * Q4_0), minus bias: bytes 2i, 2i + 1 hold elements 2i, 2i + 1 low and + 16 high. */
__device__ __forceinline__ void qm_nibbles(const uint8_t *w, unsigned qh, int bias, float *q) {
    const unsigned short *w16 = (const unsigned short *)w;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        unsigned v = w16[i], n[4] = {v & 15u, (v >> 8) & 15u, (v >> 4) & 15u, v >> 12};
        const int e[4] = {2 * i, 2 * i + 1, 2 * i + 16, 2 * i + 17};
#pragma unroll
        for (int j = 0; j < 4; j++)
            q[e[j]] = (float)((int)(n[j] | ((qh >> e[j]) & 1u) << 4) - bias);
    }
}

template <int M> struct qm_unit<DTYPE_Q8_0, M> {
    static __device__ __forceinline__ void run(const uint8_t *b, int u, const float *x, int k,
                                               int mr, int vec, float *acc) {
        const unsigned short *w = (const unsigned short *)(b + 2);
        float q[32];
#pragma unroll
        for (int i = 0; i < 16; i++) {
            unsigned v = w[i];
            q[2 * i] = (float)(int8_t)(v & 0xffu), q[2 * i + 1] = (float)(int8_t)(v >> 8);
        }
        qm_apply32<M>(q, cuda_q_f16(b), u, x, k, mr, vec, acc);
    }
};

template <int M> struct qm_unit<DTYPE_Q4_0, M> {
    static __device__ __forceinline__ void run(const uint8_t *b, int u, const float *x, int k,
                                               int mr, int vec, float *acc) {
        float q[32];
        qm_nibbles(b + 2, 0u, 8, q);
        qm_apply32<M>(q, cuda_q_f16(b), u, x, k, mr, vec, acc);
    }
};

template <int M> struct qm_unit<DTYPE_Q5_0, M> {
    static __device__ __forceinline__ void run(const uint8_t *b, int u, const float *x, int k,
                                               int mr, int vec, float *acc) {
        float q[32];
        qm_nibbles(b + CQ_Q5_0_QS, cuda_q5_0_qh(b), 16, q);
        qm_apply32<M>(q, cuda_q_f16(b), u, x, k, mr, vec, acc);
    }
};

/* Q4_K unit (block u / 4, chunk c = u % 4): sub-block 2c in the low nibbles of the chunk's 32
 * bytes, 2c + 1 in the high ones; x = d·sc·q − dmin·m, so per sub-block
 * d·sc·Σ q·x − dmin·m·Σ x. */
template <int M> struct qm_unit<DTYPE_Q4_K, M> {
    static __device__ __forceinline__ void run(const uint8_t *b, int u, const float *x, int k,
                                               int mr, int vec, float *acc) {
        const int c = u & 3;
        const unsigned short *w = (const unsigned short *)(b + CQ_Q4_K_QS + 32 * c);
        float lo[32], hi[32], xv[32];
#pragma unroll
        for (int i = 0; i < 16; i++) {
            unsigned v = w[i];
            lo[2 * i] = (float)(v & 15u), lo[2 * i + 1] = (float)((v >> 8) & 15u);
            hi[2 * i] = (float)((v >> 4) & 15u), hi[2 * i + 1] = (float)(v >> 12);
        }
        int sc0, m0, sc1, m1;
        cuda_q4_k_scale(b + CQ_Q4_K_SC, 2 * c, &sc0, &m0);
        cuda_q4_k_scale(b + CQ_Q4_K_SC, 2 * c + 1, &sc1, &m1);
        const float d = cuda_q_f16(b), dmin = cuda_q_f16(b + 2);
        const float d0 = d * (float)sc0, n0 = -(dmin * (float)m0);
        const float d1 = d * (float)sc1, n1 = -(dmin * (float)m1);
#pragma unroll
        for (int t = 0; t < M; t++) {
            if (t >= mr) break;
            const float *xr = x + (size_t)t * k + 64 * (size_t)u;
            cuda_q_ldx<32>(xr, vec, xv);
            acc[t] = fmaf(d0, qm_dot<32>(lo, xv), acc[t]);
            acc[t] = fmaf(n0, qm_sum<32>(xv), acc[t]);
            cuda_q_ldx<32>(xr + 32, vec, xv);
            acc[t] = fmaf(d1, qm_dot<32>(hi, xv), acc[t]);
            acc[t] = fmaf(n1, qm_sum<32>(xv), acc[t]);
        }
    }
};

/* Q6_K unit (block u / 4, half h = (u / 2) % 2, columns 16·lq .. 16·lq + 15 with lq = u % 2):
 * element 128h + 32g + l (g < 4) has its low 4 bits in ql[64h + 32(g & 1) + l] (high nibble
 * for g >= 2) and its top 2 in bits 2g of qh[32h + l]; sub-block 8h + 2g + lq's int8 scale. */
template <int M> struct qm_unit<DTYPE_Q6_K, M> {
    static __device__ __forceinline__ void run(const uint8_t *b, int u, const float *x, int k,
                                               int mr, int vec, float *acc) {
        const int h = (u >> 1) & 1, lq = u & 1;
        const unsigned short *l0 = (const unsigned short *)(b + 64 * h + 16 * lq);
        const unsigned short *l1 = (const unsigned short *)(b + 64 * h + 32 + 16 * lq);
        const unsigned short *qh = (const unsigned short *)(b + CQ_Q6_K_QH + 32 * h + 16 * lq);
        float q[4][16], xv[16], ds[4];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            unsigned a = l0[i], c = l1[i], e = qh[i];
#pragma unroll
            for (int p = 0; p < 2; p++) { /* byte p of each: column 2i + p */
                unsigned va = (a >> (8 * p)) & 255u, vc = (c >> (8 * p)) & 255u;
                unsigned ve = (e >> (8 * p)) & 255u;
                q[0][2 * i + p] = (float)((int)((va & 15u) | ((ve & 3u) << 4)) - 32);
                q[1][2 * i + p] = (float)((int)((vc & 15u) | (((ve >> 2) & 3u) << 4)) - 32);
                q[2][2 * i + p] = (float)((int)((va >> 4) | (((ve >> 4) & 3u) << 4)) - 32);
                q[3][2 * i + p] = (float)((int)((vc >> 4) | ((ve >> 6) << 4)) - 32);
            }
        }
        const float d = cuda_q_f16(b + CQ_Q6_K_D);
#pragma unroll
        for (int g = 0; g < 4; g++) ds[g] = d * (float)(int8_t)b[CQ_Q6_K_SC + 8 * h + 2 * g + lq];
        const size_t e0 = 256 * (size_t)(u >> 2) + 128 * h + 16 * lq;
#pragma unroll
        for (int t = 0; t < M; t++) {
            if (t >= mr) break;
#pragma unroll
            for (int g = 0; g < 4; g++) {
                cuda_q_ldx<16>(x + (size_t)t * k + e0 + 32 * g, vec, xv);
                acc[t] = fmaf(ds[g], qm_dot<16>(q[g], xv), acc[t]);
            }
        }
    }
};

/* ---- the kernel ---- */

/* Rows of W a warp each (QM_WARPS a block) against rows blockIdx.y·M .. + M of x (m in all).
 * vec: x 16-byte aligned. Every weight starts 16-byte aligned (weight_prepare), so the
 * aligned-down start of a tile stays inside its allocation, and the padding weight_prepare
 * adds keeps the aligned-up end of the last row inside it too. */
template <int DT, int M>
__global__ void __launch_bounds__(QM_THREADS)
    qm_gemv(cuda_segs sg, const float *__restrict__ x, int m, int k, int vec) {
    typedef qm_fmt<DT> F;
    __shared__ uint4 tile[QM_WARPS][QM_CHUNKS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int grow = blockIdx.x * QM_WARPS + warp;
    if (grow >= sg.end[sg.n_seg - 1]) return; /* the whole warp: no warp op is left unmatched */
    int j = 0;
    while (j + 1 < sg.n_seg && grow >= sg.end[j]) j++;
    const int start = j ? sg.end[j - 1] : 0, n = sg.end[j] - start, row = grow - start;
    const int r0 = blockIdx.y * M, mr = m - r0 < M ? m - r0 : M;
    const int nu = k / F::UE;
    const uint8_t *wr = (const uint8_t *)sg.w[j] + (size_t)row * (size_t)(nu / F::UPB) * F::UB;
    x += (size_t)r0 * k;
    float acc[M];
#pragma unroll
    for (int t = 0; t < M; t++) acc[t] = 0.0f;
    for (int u0 = 0; u0 < nu; u0 += 32) {
        const int cnt = nu - u0 < 32 ? nu - u0 : 32; /* a whole number of blocks */
        const uint8_t *src = wr + qm_block_off<DT>(u0);
        const uintptr_t at = (uintptr_t)src & ~(uintptr_t)15;
        const int head = (int)((uintptr_t)src - at);
        const int nc = (int)((head + qm_block_off<DT>(cnt) + 15) >> 4);
        for (int i = lane; i < nc; i += 32) tile[warp][i] = __ldcs((const uint4 *)at + i);
        __syncwarp();
        if (lane < cnt)
            qm_unit<DT, M>::run((const uint8_t *)tile[warp] + head + qm_block_off<DT>(lane),
                                u0 + lane, x, k, mr, vec, acc);
        __syncwarp(); /* the tile is rewritten next */
    }
#pragma unroll
    for (int t = 0; t < M; t++) acc[t] = cuda_warp_sum(acc[t]);
    if (lane == 0)
#pragma unroll
        for (int t = 0; t < M; t++)
            if (t < mr) sg.out[j][(size_t)(r0 + t) * n + row] = acc[t];
}

/* ---- launcher ---- */

template <int DT>
static void qm_launch(cuda_impl *c, const cuda_segs &sg, const float *x, int m, int k) {
    dim3 grid((unsigned)((sg.end[sg.n_seg - 1] + QM_WARPS - 1) / QM_WARPS), 1);
    int vec = (uintptr_t)x % 16 == 0;
    /* M rounded up to 1, 2, 4, 8: rows past m are skipped, so a row's arithmetic is the same */
#define QM_CASE(M_)                                                                                \
    grid.y = (unsigned)((m + M_ - 1) / M_);                                                        \
    qm_gemv<DT, M_><<<grid, QM_THREADS, 0, c->stream>>>(sg, x, m, k, vec);
    if (m <= 1) {
        QM_CASE(1)
    } else if (m <= 2) {
        QM_CASE(2)
    } else if (m <= 4) {
        QM_CASE(4)
    } else {
        QM_CASE(8)
    }
#undef QM_CASE
}

/* out[j] = x · w[j]ᵀ for j < n_w, the weights of one block dtype and k (whole blocks; the
 * callers, cuda_matmul and cuda_matmul_n, have checked that and entered the op). */
void cuda_qmatmul(cuda_impl *c, float *const *out, const float *x, const bk_weight *const *w,
                  int n_w, int m) {
    const int k = (int)w[0]->shape[1];
    cuda_segs sg = {};
    int bad = n_w < 1 || n_w > BK_MATMUL_MAX || m > QM_MAX_M * QM_MAX_GY;
    for (int j = 0, end = 0; !bad && j < n_w; j++) {
        end += (int)w[j]->shape[0];
        sg.w[j] = w[j]->data, sg.out[j] = out[j], sg.end[j] = end;
        bad |= (uintptr_t)w[j]->data % 16 != 0 || w[j]->dt != w[0]->dt;
    }
    sg.n_seg = n_w;
    if (bad || k % dtype_block_elems(w[0]->dt)) { /* weight_prepare and the callers exclude it */
        cuda_fail(c, "qmatmul", cudaErrorInvalidValue);
        return;
    }
    if (cuda_qgemv(c, sg, w[0]->dt, x, m, k) == 0) return;
    switch (w[0]->dt) {
    case DTYPE_Q8_0: qm_launch<DTYPE_Q8_0>(c, sg, x, m, k); break;
    case DTYPE_Q4_0: qm_launch<DTYPE_Q4_0>(c, sg, x, m, k); break;
    case DTYPE_Q5_0: qm_launch<DTYPE_Q5_0>(c, sg, x, m, k); break;
    case DTYPE_Q4_K: qm_launch<DTYPE_Q4_K>(c, sg, x, m, k); break;
    default: qm_launch<DTYPE_Q6_K>(c, sg, x, m, k); break;
    }
    cuda_check_launch(c, "qmatmul");
}
