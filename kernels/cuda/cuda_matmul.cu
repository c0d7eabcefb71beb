/* cuda_matmul.cu - out[m, n] = x[m, k] · Wᵀ with W [n, k] in BF16, F16 or F32 (the block
 * formats go to cuda_qmatmul.cu from the entry points here).
 *
 * m <= 8 (decode, small batches): mm_gemv streams W once for all m rows of x (perf-anchors
 * §6.5): a resident grid walks the rows, lanes issue 16-byte loads with the evict-first
 * hint so the activations stay in L2, a batch of eight in flight (four above m = 4, where
 * x takes the registers) while the previous batch is summed, f32 FMA, warp-shuffle
 * reduction. No tensor cores: at m <= 8 the kernel is bandwidth-bound.
 *
 * m > 8 (prefill): cuBLAS. F32 weights: an f32 GEMM (CUBLAS_COMPUTE_32F, no TF32). F16
 * weights: a plain tiled f32 kernel. BF16 weights, at any m: a BF16 weight meets x rounded
 * to bf16 (kernels/backend.h; mm_round_x, the rule of the CPU backend's
 * cpu_pack_bf16_one), so prefill and decode multiply the same values: at m <= 2 each GEMV
 * block rounds x into shared memory itself (matmul_glu: the activation too), at larger m
 * mm_to_bf16 rounds it once into the act16 scratch, which the GEMV (16-byte loads of 8
 * values) or a cuBLAS bf16 GEMM with f32 accumulation reads; staging M·k values in every
 * block would read more than the weights there. All scratch is fixed at create; larger m
 * runs in row chunks. */
#include "kernels/cuda/cuda_norm.cuh"
#include "kernels/cuda/cuda_quant.cuh"

enum { MM_GEMV_MAX_M = 8, MM_THREADS = 256, MM_WARPS = MM_THREADS / 32 };

/* ---- weight element access by dtype (DT = the dtype enum value) ---- */
template <int DT> struct mm_w;
template <> struct mm_w<DTYPE_F32> {
    enum { VE = 4, SZ = 4 };
    static __device__ __forceinline__ void unpack(uint4 u, float *f) {
        f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y);
        f[2] = __uint_as_float(u.z), f[3] = __uint_as_float(u.w);
    }
    static __device__ __forceinline__ float get(const void *p, size_t i) {
        return ((const float *)p)[i];
    }
};
template <> struct mm_w<DTYPE_BF16> {
    enum { VE = 8, SZ = 2 };
    static __device__ __forceinline__ void unpack(uint4 u, float *f) {
        const uint32_t v[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) { /* little-endian: the low half is the first element */
            f[2 * i] = __uint_as_float(v[i] << 16);
            f[2 * i + 1] = __uint_as_float(v[i] & 0xffff0000u);
        }
    }
    static __device__ __forceinline__ float get(const void *p, size_t i) {
        return __uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16);
    }
};
template <> struct mm_w<DTYPE_F16> {
    enum { VE = 8, SZ = 2 };
    static __device__ __forceinline__ void unpack(uint4 u, float *f) {
        const uint32_t v[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[2 * i] = __half2float(__ushort_as_half((unsigned short)(v[i] & 0xffffu)));
            f[2 * i + 1] = __half2float(__ushort_as_half((unsigned short)(v[i] >> 16)));
        }
    }
    static __device__ __forceinline__ float get(const void *p, size_t i) {
        return __half2float(((const __half *)p)[i]);
    }
};

/* x as a BF16 matmul reads it: rounded to nearest even, subnormals to a signed zero. */
__device__ __forceinline__ float mm_round_x(float v) {
    if ((__float_as_uint(v) & 0x7f800000u) == 0)
        return __uint_as_float(__float_as_uint(v) & 0x80000000u);
    return __bfloat162float(__float2bfloat16_rn(v));
}

/* ---- kernels ---- */

/* xb = x rounded as mm_round_x does, for the GEMV and the bf16 GEMM. */
__global__ void mm_to_bf16(__nv_bfloat16 *__restrict__ xb, const float *__restrict__ x, size_t n) {
    cuda_pdl_trigger(); /* the GEMV after it may launch */
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        xb[i] = __float2bfloat16_rn(mm_round_x(x[i]));
}

/* The gated activation matmul_glu multiplies by W (BK_ACT_*), the formulas of the
 * elementwise ops it replaces (cuda_elementwise.cu). */
enum { MM_NO_ACT = -1, MM_GNORM = -2 };

/* matmul_gnorm's norm (MM_GNORM): the gate z, gains nw, groups of `group` (at most
 * MM_GNORM_GROUPS of them in the rows a block norms), gate_first (BK_GNORM_GROUPED) or not. */
enum { MM_GNORM_GROUPS = 64 };
struct mm_gn {
    const void *nw;
    int nwdt, group, gate_first;
    float eps;
};
__device__ __forceinline__ float mm_act(int act, float g, float u) {
    switch (act) {
    case BK_ACT_SILU: return cuda_silu(g) * u;
    case BK_ACT_GELU_TANH: {
        const float k = 0.7978845608028654f;
        return 0.5f * g * (1.0f + tanhf(k * (g + 0.044715f * g * g * g))) * u;
    }
    case BK_ACT_SIGMOID: return u * cuda_sigmoid(g);
    default: {
        float v = fmaxf(g, 0.0f);
        return v * v;
    }
    }
}

/* xb = act(g, u) rounded as mm_round_x does: the bf16 x of matmul_glu at m > 2. */
__global__ void mm_act_bf16(__nv_bfloat16 *__restrict__ xb, const float *__restrict__ g,
                            const float *__restrict__ u, int act, size_t n) {
    cuda_pdl_trigger(); /* the GEMV after it may launch */
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        xb[i] = __float2bfloat16_rn(mm_round_x(mm_act(act, g[i], u ? u[i] : 0.0f)));
}

/* 1 / rms of each group of x's first `rows` rows of k (z the gate) into rs, by the whole
 * block (MM_THREADS = NORM_BLOCK threads): a warp a group below NORM_WIDE, the block a group
 * from there on, the sums of norm_rows (cuda_norm.cu) in its order, so the values are the
 * rmsnorm_gated / rmsnorm_gated_grouped ops' own. Ends with the block synchronised. */
__device__ __forceinline__ void mm_gnorm_rms(float *rs, const float *__restrict__ x,
                                             const float *__restrict__ z, const mm_gn &gn, int k,
                                             int rows) {
    __shared__ float sm[NORM_BLOCK / 32];
    const int gpr = k / gn.group, ng = rows * gpr;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (gn.group >= NORM_WIDE) {
        for (int gi = 0; gi < ng; gi++) {
            const size_t base = (size_t)(gi / gpr) * k + (size_t)(gi % gpr) * gn.group;
            float ss = norm_row_sum<NORM_BLOCK>(
                norm_part_ss<NORM_BLOCK>(x + base, z + base, gn.group, threadIdx.x, gn.gate_first),
                sm);
            if (threadIdx.x == 0) rs[gi] = norm_inv_rms(ss, gn.group, gn.eps);
        }
    } else {
        for (int gi = warp; gi < ng; gi += MM_WARPS) {
            const size_t base = (size_t)(gi / gpr) * k + (size_t)(gi % gpr) * gn.group;
            float ss = norm_row_sum<32>(
                norm_part_ss<32>(x + base, z + base, gn.group, lane, gn.gate_first), sm);
            if (lane == 0) rs[gi] = norm_inv_rms(ss, gn.group, gn.eps);
        }
    }
    __syncthreads();
}

/* Element i of x's rows of k, normed (rs from mm_gnorm_rms) and rounded as mm_round_x. */
__device__ __forceinline__ float mm_gnorm_at(const float *rs, const float *__restrict__ x,
                                             const float *__restrict__ z, const mm_gn &gn, int k,
                                             size_t i) {
    const int t = (int)(i / (size_t)k), j = (int)(i % (size_t)k), gpr = k / gn.group;
    const int g = j / gn.group;
    const float w = cuda_wget(gn.nw, gn.nwdt, gn.gate_first ? j : j - g * gn.group);
    return mm_round_x(norm_gated(gn.gate_first, x[i], z[i], rs[t * gpr + g], w));
}

/* xb = the gated norm of x, rounded: matmul_gnorm's bf16 x at m > 2, a block a row. */
__global__ void __launch_bounds__(MM_THREADS)
    mm_gnorm_bf16(__nv_bfloat16 *__restrict__ xb, const float *__restrict__ x,
                  const float *__restrict__ z, mm_gn gn, int k) {
    cuda_pdl_trigger(); /* the GEMV after it may launch */
    __shared__ float rs[MM_GNORM_GROUPS];
    const size_t r0 = (size_t)blockIdx.x * k;
    mm_gnorm_rms(rs, x + r0, z + r0, gn, k, 1);
    for (int j = threadIdx.x; j < k; j += MM_THREADS)
        xb[r0 + j] = __float2bfloat16_rn(mm_gnorm_at(rs, x + r0, z + r0, gn, k, (size_t)j));
}

/* VE elements of x from element off, as f32, where they are not staged in shared memory:
 * for BF16 weights x rounded to bf16 already (xb, from mm_to_bf16 or mm_act_bf16: 8 values
 * in one 16-byte load); other weights read f32 x itself. */
template <int DT>
__device__ __forceinline__ void mm_load_x(const float *__restrict__ x,
                                          const uint16_t *__restrict__ xb, size_t off, float *f) {
    if (DT == DTYPE_BF16) {
        mm_w<DTYPE_BF16>::unpack(__ldg((const uint4 *)(xb + off)), f);
    } else {
#pragma unroll
        for (int e = 0; e < mm_w<DT>::VE / 4; e++) {
            float4 v = __ldg((const float4 *)(x + off) + e);
            f[4 * e] = v.x, f[4 * e + 1] = v.y, f[4 * e + 2] = v.z, f[4 * e + 3] = v.w;
        }
    }
}

/* BF16 weights at m <= 2 stage x in shared memory, rounded (and activated, matmul_glu) once
 * per block, up to this many bytes (two blocks of an SM still fit); larger x, and m > 2,
 * where every block staging M·k values would read more than the weights, take xb. */
enum { MM_STAGE_MAX = 96 * 1024 };
__host__ __device__ constexpr bool mm_stages(int dt, int m) { return dt == DTYPE_BF16 && m <= 2; }

/* The decode GEMV (16-byte aligned W, k % VE == 0): M rows of x against W, every W byte
 * read once. A row of W belongs to wpr warps of a block (few rows: split so the matrix
 * still spreads over the GPU); lane l of part p sums chunks p·32 + l, + 32·wpr, ... in that
 * order, then the warp and the parts add up in a fixed order, so a row's sum does not
 * depend on M (batch invariance) or on the grid. The grid is sized to stay resident (two
 * blocks an SM) and walks the rows: a block takes row groups g, g + gridDim.x, ...; a
 * warp's work is a stream of batches of LIF 16-byte loads a lane (a row's, or its part of
 * a long row), and the next batch is in flight while the current one is summed, across row
 * ends too, so a short row (k = 1,024: 4 loads a lane) does not leave the lane idle for a
 * round trip. ST: x staged in shared memory (see MM_STAGE_MAX), rounded there once per
 * block after the first weight loads are issued; ACT (matmul_glu, ST only): staged as
 * act(x, u). */
template <int DT, int M, int ACT, bool ST>
__global__ void __launch_bounds__(MM_THREADS, 2)
    mm_gemv(cuda_segs sg, const float *__restrict__ x, const float *__restrict__ u,
            const uint16_t *__restrict__ xb, int k, int wpr, int groups, mm_gn gn) {
    typedef mm_w<DT> W;
    constexpr int LIF = M <= 4 ? 8 : 4; /* loads a batch; fewer where x takes the registers */
    __shared__ float red[MM_WARPS][M];
    extern __shared__ uint4 mm_xs[]; /* [M·k bf16] when ST */
    const uint16_t *xs = (const uint16_t *)mm_xs;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int part = warp % wpr, slot = warp / wpr, rpg = MM_WARPS / wpr, step = 32 * wpr;
    const int nc = k / W::VE, cpl = (nc + step - 1) / step, nb = (cpl + LIF - 1) / LIF;
    const int mine =
        (int)blockIdx.x < groups ? (groups - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
    const int steps = mine * nb; /* the same for every warp of the block */
    /* Batch s of this warp: its row and the loads, predicated past the row's end. */
    auto issue = [&](uint4 *ub, int s) {
        const int g = s / nb, bi = s - g * nb;
        cuda_seg_row r = cuda_seg_find(sg, (blockIdx.x + g * gridDim.x) * rpg + slot);
        const uint4 *wr = (const uint4 *)((const char *)r.w + (size_t)r.row * k * W::SZ);
#pragma unroll
        for (int q = 0; q < LIF; q++) {
            const int i = bi * LIF + q, cc = part * 32 + lane + i * step;
            if (r.row < r.n && cc < nc) ub[q] = __ldcs(wr + cc);
        }
        return r;
    };
    float acc[M];
#pragma unroll
    for (int t = 0; t < M; t++) acc[t] = 0.0f;
    /* Sums batch s; after a row's last batch, the warp's and the parts' sums are stored. */
    auto consume = [&](const uint4 *ub, const cuda_seg_row &r, int s) {
        const int bi = s % nb;
#pragma unroll
        for (int q = 0; q < LIF; q++) {
            const int i = bi * LIF + q, cc = part * 32 + lane + i * step;
            if (!(r.row < r.n && cc < nc)) continue;
            float f[W::VE];
            W::unpack(ub[q], f);
#pragma unroll
            for (int t = 0; t < M; t++) {
                const size_t off = (size_t)t * k + (size_t)cc * W::VE;
                float xv[W::VE];
                if (ST) mm_w<DTYPE_BF16>::unpack(*(const uint4 *)(xs + off), xv);
                else mm_load_x<DT>(x, xb, off, xv);
#pragma unroll
                for (int e = 0; e < W::VE; e++) acc[t] += f[e] * xv[e];
            }
        }
        if (bi != nb - 1) return;
        cuda_gemv_store<M>(red, acc, r, warp, lane, part, wpr, 0, M);
#pragma unroll
        for (int t = 0; t < M; t++) acc[t] = 0.0f;
    };
    uint4 ua[LIF], ub[LIF];
    cuda_seg_row ra = {}, rb = {};
    cuda_pdl_trigger();
    if (steps > 0) ra = issue(ua, 0);
    cuda_pdl_wait(); /* the first weights are on their way; x is the kernel ahead's */
    if constexpr (ST && ACT == MM_GNORM) {
        __shared__ float rs[MM_GNORM_GROUPS];
        mm_gnorm_rms(rs, x, u, gn, k, M);
        uint16_t *xw = (uint16_t *)mm_xs;
        for (int i = threadIdx.x; i < M * k; i += MM_THREADS)
            xw[i] = __bfloat16_as_ushort(__float2bfloat16_rn(mm_gnorm_at(rs, x, u, gn, k, i)));
        __syncthreads();
    } else if constexpr (ST) {
        uint16_t *xw = (uint16_t *)mm_xs;
        for (int i = threadIdx.x; i < M * k; i += MM_THREADS) {
            float v = ACT == MM_NO_ACT ? x[i] : mm_act(ACT, x[i], u ? u[i] : 0.0f);
            xw[i] = __bfloat16_as_ushort(__float2bfloat16_rn(mm_round_x(v)));
        }
        __syncthreads();
    }
    /* two buffers, unrolled by two so neither is copied while its loads are in flight */
    for (int s = 0; s < steps; s += 2) {
        if (s + 1 < steps) rb = issue(ub, s + 1);
        consume(ua, ra, s);
        if (s + 2 < steps) ra = issue(ua, s + 2);
        if (s + 1 < steps) consume(ub, rb, s + 1);
    }
}

/* Any W and x (k % VE != 0, unaligned x or W): one warp a row, element by element, one x
 * row after another, so each row's sum is that of m = 1; BF16 weights read xb, or round x
 * as they read it where no xb was made (m <= 2). */
template <int DT>
__global__ void __launch_bounds__(MM_THREADS)
    mm_gemv_any(cuda_segs sg, const float *__restrict__ x, const uint16_t *__restrict__ xb, int m,
                int k) {
    const int lane = threadIdx.x & 31;
    cuda_seg_row r = cuda_seg_find(sg, blockIdx.x * MM_WARPS + (threadIdx.x >> 5));
    if (r.row >= r.n) return;
    for (int t = 0; t < m; t++) {
        float acc = 0.0f;
        for (int e = lane; e < k; e += 32) {
            const size_t i = (size_t)t * k + e;
            float xv = xb                 ? __uint_as_float((uint32_t)xb[i] << 16)
                       : DT == DTYPE_BF16 ? mm_round_x(x[i])
                                          : x[i];
            acc += mm_w<DT>::get(r.w, (size_t)r.row * k + e) * xv;
        }
        acc = cuda_warp_sum(acc);
        if (lane == 0) r.out[(size_t)t * r.n + r.row] = acc;
    }
}

/* Tiled f32 GEMM for F16 weights (and anything cuBLAS cannot take): 64 x 64 outputs per
 * block, k in steps of 16 through shared memory, 4 x 4 outputs per thread. */
template <int DT>
__global__ void __launch_bounds__(256)
    mm_tiled(float *__restrict__ out, const float *__restrict__ x, const void *__restrict__ w,
             int m, int n, int k) {
    __shared__ float xs[16][64 + 1], ws[16][64 + 1];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < k; k0 += 16) {
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int e = tid + 256 * q, r = e / 16, kk = e % 16;
            float xv = m0 + r < m && k0 + kk < k ? x[(size_t)(m0 + r) * k + k0 + kk] : 0.0f;
            xs[kk][r] = DT == DTYPE_BF16 ? mm_round_x(xv) : xv;
            ws[kk][r] =
                n0 + r < n && k0 + kk < k ? mm_w<DT>::get(w, (size_t)(n0 + r) * k + k0 + kk) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < 16; kk++) {
            float a[4], bq[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = xs[kk][ty * 4 + i], bq[i] = ws[kk][tx * 4 + i];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += a[i] * bq[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int r = m0 + ty * 4 + i, col = n0 + tx * 4 + j;
            if (r < m && col < n) out[(size_t)r * n + col] = acc[i][j];
        }
}

/* ---- launchers ---- */

/* Warps a row of W: 1, or more where the rows are too few to give every SM's resident
 * warps one, while each lane keeps at least 2 chunks to stream. A function of the shape
 * alone, never of m, so that a row's sum is the same at every m. */
static int mm_wpr(const cuda_impl *c, int n, int chunks) {
    int wpr = 1;
    while (wpr < MM_WARPS && (int64_t)n * wpr < 2LL * MM_WARPS * c->n_sm &&
           chunks >= 64 * (wpr * 2))
        wpr *= 2;
    return wpr;
}

static int mm_vec(const cuda_segs &sg, int k, int VE) {
    int vec = k % VE == 0;
    for (int j = 0; j < sg.n_seg; j++) vec &= (uintptr_t)sg.w[j] % 16 == 0;
    return vec;
}

/* One launch of mm_gemv: every row group, at most two resident blocks an SM. */
template <int DT, int M, int ACT, bool ST>
static void mm_gemv_go(cuda_impl *c, const cuda_segs &sg, const float *x, const float *u,
                       const uint16_t *xb, int k, const mm_gn &gn = mm_gn()) {
    int n = sg.end[sg.n_seg - 1], wpr = mm_wpr(c, n, k / mm_w<DT>::VE);
    int rpg = MM_WARPS / wpr, groups = (n + rpg - 1) / rpg;
    unsigned grid = (unsigned)(groups < 2 * c->n_sm ? groups : 2 * c->n_sm);
    size_t smem = ST ? sizeof(uint16_t) * (size_t)M * k : 0;
    cuda_launch_pdl(c,
                    ACT == MM_NO_ACT  ? "matmul gemv"
                    : ACT == MM_GNORM ? "matmul gnorm gemv"
                                      : "matmul glu gemv",
                    mm_gemv<DT, M, ACT, ST>, grid, MM_THREADS, smem, sg, x, u, xb, k, wpr, groups,
                    gn);
}

/* Opts the staged GEMVs in to MM_STAGE_MAX bytes of shared memory, once at create (not
 * inside a graph capture). */
template <int DT, int M, int ACT> static cudaError_t mm_optin(void) {
    return cudaFuncSetAttribute(mm_gemv<DT, M, ACT, true>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, MM_STAGE_MAX);
}
template <int M> static cudaError_t mm_optin_m(void) {
    constexpr int BF = DTYPE_BF16;
    cudaError_t e = mm_optin<BF, M, MM_NO_ACT>();
    if (e == cudaSuccess) e = mm_optin<BF, M, BK_ACT_SILU>();
    if (e == cudaSuccess) e = mm_optin<BF, M, BK_ACT_GELU_TANH>();
    if (e == cudaSuccess) e = mm_optin<BF, M, BK_ACT_SIGMOID>();
    if (e == cudaSuccess) e = mm_optin<BF, M, BK_ACT_RELU2>();
    if (e == cudaSuccess) e = mm_optin<BF, M, MM_GNORM>();
    return e;
}
cudaError_t cuda_matmul_setup(cuda_impl *c) {
    (void)c;
    cudaError_t e = mm_optin_m<1>();
    return e == cudaSuccess ? mm_optin_m<2>() : e;
}

/* The GEMV with x (or act(x, u): matmul_glu) staged per block (BF16, m <= 2, vec). */
template <int ACT>
static void mm_gemv_staged(cuda_impl *c, const cuda_segs &sg, const float *x, const float *u, int m,
                           int k, const mm_gn &gn = mm_gn()) {
    constexpr int BF = DTYPE_BF16;
    if (m == 1) mm_gemv_go<BF, 1, ACT, true>(c, sg, x, u, NULL, k, gn);
    else mm_gemv_go<BF, 2, ACT, true>(c, sg, x, u, NULL, k, gn);
}

/* x: f32 rows; xb: the same rounded to bf16 already (matmul_glu at m > 2), or NULL. */
template <int DT>
static void mm_gemv_launch(cuda_impl *c, const cuda_segs &sg, const float *x, const uint16_t *xb,
                           int m, int k) {
    const int VE = mm_w<DT>::VE;
    int stage = !xb && mm_stages(DT, m) && sizeof(uint16_t) * (size_t)m * k <= MM_STAGE_MAX;
    if (DT == DTYPE_BF16 && !xb && !stage) { /* x rounded once here, not once per W row */
        size_t e = (size_t)m * k;
        mm_to_bf16<<<cuda_blocks(e, 256, 65535), 256, 0, c->stream>>>(c->act16, x, e);
        cuda_check_launch(c, "matmul bf16 convert");
        xb = (const uint16_t *)c->act16;
    }
    const float *none = NULL;
    int vec = mm_vec(sg, k, VE) && (DT == DTYPE_BF16 || (uintptr_t)x % 16 == 0);
    if (!vec) {
        int n = sg.end[sg.n_seg - 1];
        mm_gemv_any<DT><<<(unsigned)((n + MM_WARPS - 1) / MM_WARPS), MM_THREADS, 0, c->stream>>>(
            sg, x, xb, m, k);
        cuda_check_launch(c, "matmul gemv");
        return;
    }
    if (stage) { /* BF16 only (mm_stages) */
        mm_gemv_staged<MM_NO_ACT>(c, sg, x, none, m, k);
        return;
    }
#define MM_CASE(M_)                                                                                \
    case M_: mm_gemv_go<DT, M_, MM_NO_ACT, false>(c, sg, x, none, xb, k); break;
    switch (m) {
        MM_CASE(1) MM_CASE(2) MM_CASE(3) MM_CASE(4) MM_CASE(5) MM_CASE(6) MM_CASE(7) MM_CASE(8)
    }
#undef MM_CASE
}

/* F16 weights at m > 8, and BF16 ones whose x outgrows the act16 scratch; F32 weights
 * always have cuBLAS or the GEMV. */
static void mm_tiled_launch(cuda_impl *c, float *out, const float *x, const bk_weight *w, int m,
                            int n, int k) {
    dim3 grid((unsigned)((n + 63) / 64), (unsigned)((m + 63) / 64));
    if (w->dt == DTYPE_F16)
        mm_tiled<DTYPE_F16><<<grid, 256, 0, c->stream>>>(out, x, w->data, m, n, k);
    else mm_tiled<DTYPE_BF16><<<grid, 256, 0, c->stream>>>(out, x, w->data, m, n, k);
    cuda_check_launch(c, "matmul tiled");
}

/* C[rows, n] = B[rows, k] · Wᵀ (column-major view: Cᵀ = W · Bᵀ, W seen as Aᵀ). */
static int mm_gemm(cuda_impl *c, float *C, const void *B, cudaDataType bt, const void *W,
                   cudaDataType wt, int rows, int n, int k) {
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s =
        cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, &one, W, wt, k, B, bt, k, &zero,
                     C, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) cuda_fail(c, "cuBLAS GemmEx", cudaErrorUnknown);
    return s == CUBLAS_STATUS_SUCCESS ? 0 : -1;
}

static void mm_blas_bf16(cuda_impl *c, float *out, const float *x, const void *w, int m, int n,
                         int k) {
    int mc = (int)(CUDA_ACT16_ELEMS / (size_t)k);
    if (mc > m) mc = m;
    if (mc < 1) { /* a row longer than the scratch: no model has one */
        bk_weight t = {w, DTYPE_BF16, 2, {n, k, 0, 0}};
        mm_tiled_launch(c, out, x, &t, m, n, k);
        return;
    }
    for (int r0 = 0; r0 < m; r0 += mc) {
        int rows = m - r0 < mc ? m - r0 : mc;
        size_t e = (size_t)rows * k;
        mm_to_bf16<<<cuda_blocks(e, 256, 65535), 256, 0, c->stream>>>(c->act16, x + (size_t)r0 * k,
                                                                      e);
        cuda_check_launch(c, "matmul bf16 convert");
        if (mm_gemm(c, out + (size_t)r0 * n, c->act16, CUDA_R_16BF, w, CUDA_R_16BF, rows, n, k))
            return;
    }
}

static void mm_gemv_dispatch(cuda_impl *c, dtype dt, const cuda_segs &sg, const float *x, int m,
                             int k) {
    if (dt == DTYPE_BF16) mm_gemv_launch<DTYPE_BF16>(c, sg, x, NULL, m, k);
    else if (dt == DTYPE_F16) mm_gemv_launch<DTYPE_F16>(c, sg, x, NULL, m, k);
    else mm_gemv_launch<DTYPE_F32>(c, sg, x, NULL, m, k);
}

void cuda_matmul(backend *b, float *out, const float *x, const bk_weight *w, int m) {
    cuda_impl *c = cuda_impl_of(b);
    int n = (int)w->shape[0], k = (int)w->shape[1];
    if (m <= 0 || n <= 0 ||
        !cuda_enter(c, CUDA_OP_MATMUL, (const void *)out, (const void *)x, w->data, m, n, k))
        return;
    if (cuda_is_block(w->dt)) { /* quantized: cuda_qmatmul.cu, at every m */
        cuda_qmatmul(c, &out, x, &w, 1, m);
        return;
    }
    if (m <= MM_GEMV_MAX_M) {
        cuda_segs sg = {{w->data}, {out}, {n}, 1};
        if (w->dt == DTYPE_BF16 &&
            (size_t)m * k > CUDA_ACT16_ELEMS) /* x outgrows act16: no model */
            mm_tiled_launch(c, out, x, w, m, n, k);
        else mm_gemv_dispatch(c, w->dt, sg, x, m, k);
    } else if (w->dt == DTYPE_BF16) {
        mm_blas_bf16(c, out, x, w->data, m, n, k);
    } else if (w->dt == DTYPE_F32) {
        mm_gemm(c, out, x, CUDA_R_32F, w->data, CUDA_R_32F, m, n, k);
    } else {
        mm_tiled_launch(c, out, x, w, m, n, k);
    }
}

/* One GEMV launch over every weight's rows when they can share it (decode: m <= 8, one
 * dtype and k, x within act16; BF16 x rounded once for all); otherwise one matmul each. */
void cuda_matmul_n(backend *b, float *const *out, const float *x, const bk_weight *const *w,
                   int n_w, int m) {
    cuda_impl *c = cuda_impl_of(b);
    int k = n_w > 0 ? (int)w[0]->shape[1] : 0, one = n_w > 0 && n_w <= BK_MATMUL_MAX;
    for (int j = 0; one && j < n_w; j++)
        one = w[j]->dt == w[0]->dt && (int)w[j]->shape[1] == k && w[j]->shape[0] > 0;
    int blk = one && cuda_is_block(w[0]->dt); /* one launch at any m */
    one = one && (blk || (m <= MM_GEMV_MAX_M &&
                          !(w[0]->dt == DTYPE_BF16 && (size_t)m * k > CUDA_ACT16_ELEMS)));
    if (!one) {
        for (int j = 0; j < n_w; j++) cuda_matmul(b, out[j], x, w[j], m);
        return;
    }
    if (m <= 0 ||
        !cuda_enter(c, CUDA_OP_MATMUL_N, (const void *)x, m, k, n_w, (const void *)out[0],
                    w[0]->data, n_w > 1 ? (const void *)out[1] : NULL, n_w > 1 ? w[1]->data : NULL,
                    n_w > 2 ? (const void *)out[2] : NULL, n_w > 2 ? w[2]->data : NULL,
                    n_w > 3 ? (const void *)out[3] : NULL, n_w > 3 ? w[3]->data : NULL))
        return;
    if (blk) {
        cuda_qmatmul(c, out, x, w, n_w, m);
        return;
    }
    cuda_segs sg = {};
    for (int j = 0, end = 0; j < n_w; j++) {
        end += (int)w[j]->shape[0];
        sg.w[j] = w[j]->data;
        sg.out[j] = out[j];
        sg.end[j] = end;
    }
    sg.n_seg = n_w;
    mm_gemv_dispatch(c, w[0]->dt, sg, x, m, k);
}

/* Fused where the weights are BF16 and m <= 8 (decode): at m <= 2 the GEMV computes the
 * activation into shared memory itself (one kernel), at m <= 8 one kernel writes it rounded
 * to bf16 for the GEMV (two, where the unfused ops take three). Otherwise (quantized weights
 * too) the elementwise op and the matmul, as the CPU runs them. */
void cuda_matmul_glu(backend *b, float *out, float *g, float *u, const bk_weight *w, int m,
                     int act) {
    cuda_impl *c = cuda_impl_of(b);
    int n = (int)w->shape[0], k = (int)w->shape[1];
    size_t e = (size_t)m * k;
    if (act < 0 || act >= BK_ACT_COUNT || (act != BK_ACT_RELU2 && !u)) {
        cuda_fail(c, "matmul_glu", cudaErrorInvalidValue); /* the models pass BK_ACT_* */
        return;
    }
    cuda_segs sg = {{w->data}, {out}, {n}, 1};
    int fuse = w->dt == DTYPE_BF16 && m <= MM_GEMV_MAX_M && e <= CUDA_ACT16_ELEMS &&
               mm_vec(sg, k, mm_w<DTYPE_BF16>::VE);
    int stage = fuse && mm_stages(DTYPE_BF16, m) && e * sizeof(uint16_t) <= MM_STAGE_MAX;
    if (!fuse) {
        float *a = act == BK_ACT_SIGMOID ? u : g;
        switch (act) {
        case BK_ACT_SILU: cuda_silu_mul(b, g, g, u, m, k); break;
        case BK_ACT_GELU_TANH: cuda_gelu_tanh_mul(b, g, g, u, m, k); break;
        case BK_ACT_SIGMOID: cuda_sigmoid_mul(b, u, g, e); break;
        default: cuda_relu2(b, g, e); break;
        }
        cuda_matmul(b, out, a, w, m);
        return;
    }
    if (m <= 0 || n <= 0 ||
        !cuda_enter(c, CUDA_OP_MATMUL_GLU, (const void *)out, (const void *)g, (const void *)u,
                    w->data, m, n, k, act))
        return;
    if (stage) {
        switch (act) {
        case BK_ACT_SILU: mm_gemv_staged<BK_ACT_SILU>(c, sg, g, u, m, k); break;
        case BK_ACT_GELU_TANH: mm_gemv_staged<BK_ACT_GELU_TANH>(c, sg, g, u, m, k); break;
        case BK_ACT_SIGMOID: mm_gemv_staged<BK_ACT_SIGMOID>(c, sg, g, u, m, k); break;
        default: mm_gemv_staged<BK_ACT_RELU2>(c, sg, g, u, m, k); break;
        }
        return;
    }
    mm_act_bf16<<<cuda_blocks(e, 256, 65535), 256, 0, c->stream>>>(c->act16, g, u, act, e);
    cuda_check_launch(c, "matmul glu convert");
    mm_gemv_launch<DTYPE_BF16>(c, sg, g, (const uint16_t *)c->act16, m, k);
}

/* Fused where the weights are BF16 and m <= 8, as matmul_glu: at m <= 2 the GEMV norms x
 * into shared memory itself (one kernel where the unfused ops take two), at m <= 8 one
 * kernel writes it normed and rounded for the GEMV (two, where they take three). Both take
 * the norm kernels' sums in their order (mm_gnorm_rms), so the bits are those of the
 * unfused path, which everything else takes (quantized weights, prefill). */
void cuda_matmul_gnorm(backend *b, float *out, float *x, const float *z, const bk_weight *nw,
                       int group, float eps, int mode, const bk_weight *w, int m) {
    cuda_impl *c = cuda_impl_of(b);
    int n = (int)w->shape[0], k = (int)w->shape[1];
    size_t e = (size_t)m * k;
    if (group <= 0 || k % group || (mode != BK_GNORM_HEAD && mode != BK_GNORM_GROUPED)) {
        cuda_fail(c, "matmul_gnorm", cudaErrorInvalidValue); /* the models pass whole groups */
        return;
    }
    cuda_segs sg = {{w->data}, {out}, {n}, 1};
    int fuse = w->dt == DTYPE_BF16 && m <= MM_GEMV_MAX_M && e <= CUDA_ACT16_ELEMS &&
               mm_vec(sg, k, mm_w<DTYPE_BF16>::VE);
    int stage = fuse && mm_stages(DTYPE_BF16, m) && e * sizeof(uint16_t) <= MM_STAGE_MAX;
    /* the groups' 1 / rms in shared memory: a staging block's of all m rows, a row's */
    fuse = fuse && (k / group) * (stage ? m : 1) <= MM_GNORM_GROUPS;
    if (!fuse) {
        if (mode == BK_GNORM_HEAD) cuda_rmsnorm_gated(b, x, x, z, nw, m * (k / group), group, eps);
        else cuda_rmsnorm_gated_grouped(b, x, x, z, nw, m, k, group, eps);
        cuda_matmul(b, out, x, w, m);
        return;
    }
    if (m <= 0 || n <= 0 ||
        !cuda_enter(c, CUDA_OP_MATMUL_GNORM, (const void *)out, (const void *)x, (const void *)z,
                    nw->data, group, eps, mode, w->data, m, n, k))
        return;
    mm_gn gn = {nw->data, (int)nw->dt, group, mode == BK_GNORM_GROUPED, eps};
    if (stage) {
        mm_gemv_staged<MM_GNORM>(c, sg, x, z, m, k, gn);
        return;
    }
    mm_gnorm_bf16<<<(unsigned)m, MM_THREADS, 0, c->stream>>>(c->act16, x, z, gn, k);
    cuda_check_launch(c, "matmul gnorm convert");
    mm_gemv_launch<DTYPE_BF16>(c, sg, x, (const uint16_t *)c->act16, m, k);
}
