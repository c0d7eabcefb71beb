/* cuda_deltanet_chunk.cu - the gated delta rule of a long prompt run in chunks of GC tokens
 * with its products on bf16 tensor cores (perf-anchors §6.2, flash-linear-attention's
 * chunk_gated_delta_rule): the fused gdn op (l2norms and gates included) for sequences of
 * at least GC_MIN tokens, when the model computes in bf16 (backend.h compute_dtype).
 *
 * Within a chunk, with G_t the gates summed up to token t, S0 the state entering it and
 * every exponent G_t - G_i <= 0 (nothing overflows):
 *   A = strict_lower(β_t·exp(G_t - G_i)·k_t·k_i),  T = (I + A)⁻¹,
 *   U = T·diag(β)·V - T·diag(β·exp(G))·K·S0          (the recurrence's β(v - Sᵀk), all rows),
 *   O = diag(exp(G))·Q·S0 + lower(exp(G_t - G_i)·q_t·k_i)·U,
 *   S = exp(G_last)·S0 + Kᵀ·diag(exp(G_last - G))·U.
 * One block owns a (sequence, value head, GC_DVT columns of S) and walks the chunks in
 * order; columns of S are independent, so the blocks of a head need not talk. T is solved
 * in f32 on the CUDA cores (a 16 x 16 diagonal block per thread column, then the three
 * off-diagonal levels); every product runs through wmma with bf16 inputs and f32 sums,
 * as the reference's chunk kernel rounds q, k, v and T to the model's bf16. S stays f32 in
 * shared memory for the whole run, and a bf16 copy of it feeds the products. Pad rows past
 * the run (β = 0, g = 0, zero q, k, v) leave U, O and S unchanged. */
#include "kernels/cuda/cuda_wmma.cuh"

enum {
    GC = 64,      /* tokens a chunk */
    GC_WARPS = 8, /* 256 threads */
    GC_THREADS = 32 * GC_WARPS,
    GC_DK = 128,        /* largest dk (Qwen3.5: 128) */
    GC_DVT = 64,        /* columns of S a block owns */
    GC_LDK = GC_DK + 8, /* bf16 rows of dk (the pad spreads shared-memory banks) */
    GC_LDC = GC + 8,    /* bf16 rows of 64 */
    GC_LDF = GC + 4,    /* f32 rows of 64 */
    GC_MIN = 16         /* shorter runs take the recurrent kernel */
};

typedef cw_bf16 bf16;

typedef struct gdc_args {
    float *out;
    const float *q, *k, *v, *a, *bb;
    int ld_qk, ld_v;
    const void *A_log, *dt_bias;
    int adt, bdt;
    float q_scale;
    float *state;
    const int32_t *start, *len, *slot;
    int Hk, Hv, dk, dv;
    int vmap; /* BK_VHEAD_*: the key head of a value head */
} gdc_args;

/* The shared memory of a block, carved in this order; every buffer is a multiple of 32
 * bytes, so each starts 32-byte aligned as wmma needs. */
struct gdc_smem {
    bf16 *kb, *qb, *wb;                    /* [GC][GC_LDK]: k, q, -W */
    bf16 *vb, *tgb, *tbb, *aqb, *ub, *ubs; /* [GC][GC_LDC] */
    float *r1, *r2;                        /* [GC][GC_LDF]: A / QKᵀ / O and T / U */
    float *S;                              /* [GC_DK][GC_LDF] */
    bf16 *sb;                              /* [GC_DK][GC_LDC] */
    float *lev;                            /* [3][16][16] */
    float *wt;                             /* [GC_WARPS][16][16] */
    float *gc, *beta, *gam;                /* [GC] */
};

static constexpr size_t GC_SMEM = 3 * sizeof(bf16) * GC * GC_LDK + 6 * sizeof(bf16) * GC * GC_LDC +
                                  2 * sizeof(float) * GC * GC_LDF + sizeof(float) * GC_DK * GC_LDF +
                                  sizeof(bf16) * GC_DK * GC_LDC +
                                  sizeof(float) * (3 * 256 + GC_WARPS * 256 + 3 * GC);

__device__ static gdc_smem gdc_carve(unsigned char *p) {
    gdc_smem m;
    bf16 **b16[] = {&m.kb, &m.qb, &m.wb};
    for (bf16 **x : b16) *x = cw_carve<bf16>(p, GC * GC_LDK);
    bf16 **c16[] = {&m.vb, &m.tgb, &m.tbb, &m.aqb, &m.ub, &m.ubs};
    for (bf16 **x : c16) *x = cw_carve<bf16>(p, GC * GC_LDC);
    m.r1 = cw_carve<float>(p, GC * GC_LDF);
    m.r2 = cw_carve<float>(p, GC * GC_LDF);
    m.S = cw_carve<float>(p, GC_DK * GC_LDF);
    m.sb = cw_carve<bf16>(p, GC_DK * GC_LDC);
    m.lev = (float *)p;
    m.wt = m.lev + 3 * 256;
    m.gc = m.wt + GC_WARPS * 256;
    m.beta = m.gc + GC;
    m.gam = m.beta + GC;
    return m;
}

/* Stages chunk rows [c0, c0 + nc) of the run: q and k l2-normalised (q scaled) into bf16,
 * v's columns of this block, the gates and β; rows past nc are zero. */
__device__ static void gdc_stage(const gdc_args &a, const gdc_smem &m, int t0, int nc, int h,
                                 int hk, int j0, int nvt) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int rr = warp; rr < 2 * GC; rr += GC_WARPS) { /* a warp a row */
        const int t = rr % GC;
        const bool isq = rr < GC;
        bf16 *dst = (isq ? m.qb : m.kb) + (size_t)t * GC_LDK;
        const float *src = (isq ? a.q : a.k) + (size_t)(t0 + t) * a.ld_qk + (size_t)hk * a.dk;
        float ss = 0.0f;
        if (t < nc)
            for (int i = lane; i < a.dk; i += 32) ss += src[i] * src[i];
        ss = cuda_warp_sum(ss);
        const float r = (isq ? a.q_scale : 1.0f) / sqrtf(ss + 1e-6f);
        for (int i = lane; i < a.dk; i += 32) dst[i] = __float2bfloat16(t < nc ? src[i] * r : 0.0f);
    }
    for (int e = threadIdx.x; e < GC * GC_DVT; e += GC_THREADS) {
        const int t = e / GC_DVT, c = e % GC_DVT;
        float x =
            t < nc && c < nvt ? a.v[(size_t)(t0 + t) * a.ld_v + (size_t)h * a.dv + j0 + c] : 0.0f;
        m.vb[t * GC_LDC + c] = __float2bfloat16(x);
    }
    if (threadIdx.x < GC) {
        const int t = threadIdx.x;
        float gv = 0.0f, bv = 0.0f;
        if (t < nc) { /* gdn_gates */
            size_t gi = (size_t)(t0 + t) * a.Hv + h;
            gv = -expf(cuda_wget(a.A_log, a.adt, h)) *
                 cuda_softplus(a.a[gi] + cuda_wget(a.dt_bias, a.bdt, h));
            bv = cuda_sigmoid(a.bb[gi]);
        }
        m.gc[t] = gv;
        m.beta[t] = bv;
    }
}

/* T = (I + A)⁻¹ of the strictly lower A in r1, into r2 (f32). A 16 x 16 diagonal block's
 * inverse is found a column per thread by forward substitution; the blocks below it by
 * levels, T_ij = -T_ii · Σ_{k=j}^{i-1} A_ik·T_kj, each level needing the one before. */
__device__ static void gdc_solve(const gdc_smem &m) {
    const float *A = m.r1;
    float *T = m.r2;
    for (int e = threadIdx.x; e < GC * GC; e += GC_THREADS) { /* above the diagonal blocks */
        const int t = e / GC, i = e % GC;
        if (t / 16 < i / 16) T[t * GC_LDF + i] = 0.0f;
    }
    if (threadIdx.x < GC) {
        const int blk = threadIdx.x / 16, c = threadIdx.x % 16, o = blk * 16;
        float col[16];
        for (int t = 0; t < 16; t++) {
            float s = t == c ? 1.0f : 0.0f;
            if (t > c) {
                for (int j = c; j < t; j++) s -= A[(o + t) * GC_LDF + o + j] * col[j];
            }
            col[t] = s;
            T[(o + t) * GC_LDF + o + c] = s;
        }
    }
    __syncthreads();
    for (int L = 1; L < 4; L++) {
        const int pairs = 4 - L;
        for (int e = threadIdx.x; e < pairs * 256; e += GC_THREADS) {
            const int p = e / 256, r = (e % 256) / 16, c = e % 16, i = p + L, j = p;
            float s = 0.0f;
            for (int kk = j * 16; kk < i * 16; kk++)
                s += A[(i * 16 + r) * GC_LDF + kk] * T[kk * GC_LDF + j * 16 + c];
            m.lev[p * 256 + r * 16 + c] = s;
        }
        __syncthreads();
        for (int e = threadIdx.x; e < pairs * 256; e += GC_THREADS) {
            const int p = e / 256, r = (e % 256) / 16, c = e % 16, i = p + L, j = p;
            float s = 0.0f;
            for (int x = 0; x < 16; x++)
                s += T[(i * 16 + r) * GC_LDF + i * 16 + x] * m.lev[p * 256 + x * 16 + c];
            T[(i * 16 + r) * GC_LDF + j * 16 + c] = -s;
        }
        __syncthreads();
    }
}

__global__ void __launch_bounds__(GC_THREADS) gdc_seq(gdc_args a) {
    extern __shared__ __align__(128) uint4 gdc_raw[];
    const gdc_smem m = gdc_carve((unsigned char *)gdc_raw);
    const int s = blockIdx.x / a.Hv, h = blockIdx.x % a.Hv;
    const int hk = a.vmap == BK_VHEAD_TILED ? h % a.Hk : h / (a.Hv / a.Hk);
    const int n = a.len[s], t0 = a.start[s];
    if (n < GC_MIN) return; /* the recurrent kernel's (cuda_deltanet.cu) */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int j0 = blockIdx.y * GC_DVT, nvt = min(GC_DVT, a.dv - j0), nkt = a.dk / 16;
    const int nct = nvt / 16;
    float *Sg = a.state + ((size_t)a.slot[s] * a.Hv + h) * (size_t)a.dk * a.dv;
    for (int e = threadIdx.x; e < a.dk * GC_DVT; e += GC_THREADS) {
        const int r = e / GC_DVT, c = e % GC_DVT;
        const float x = c < nvt ? Sg[(size_t)r * a.dv + j0 + c] : 0.0f;
        m.S[r * GC_LDF + c] = x;
        m.sb[r * GC_LDC + c] = __float2bfloat16(x);
    }
    float *wt = m.wt + warp * 256;
    for (int c0 = 0; c0 < n; c0 += GC) {
        const int nc = min(GC, n - c0);
        __syncthreads(); /* the previous chunk is done with every buffer */
        gdc_stage(a, m, t0 + c0, nc, h, hk, j0, nvt);
        __syncthreads();
        if (threadIdx.x == 0) /* gates summed over the chunk */
            for (int t = 1; t < GC; t++) m.gc[t] += m.gc[t - 1];
        for (int job = warp; job < 10; job += GC_WARPS) { /* K·Kᵀ on and below the diagonal */
            cw_acc acc;
            cw_load(acc, NULL, 0);
            cw_tri_abt(m.r1, GC_LDF, acc, m.kb, m.kb, GC_LDK, nkt, job);
        }
        __syncthreads();
        for (int e = threadIdx.x; e < GC * GC; e += GC_THREADS) {
            const int t = e / GC, i = e % GC;
            float *x = &m.r1[t * GC_LDF + i];
            *x = i < t ? m.beta[t] * expf(m.gc[t] - m.gc[i]) * *x : 0.0f;
        }
        if (threadIdx.x < GC) m.gam[threadIdx.x] = expf(m.gc[threadIdx.x]);
        __syncthreads();
        gdc_solve(m);
        for (int e = threadIdx.x; e < GC * GC; e += GC_THREADS) {
            const int t = e / GC, i = e % GC;
            const float x = m.r2[t * GC_LDF + i] * m.beta[i];
            m.tbb[t * GC_LDC + i] = __float2bfloat16(x);
            m.tgb[t * GC_LDC + i] = __float2bfloat16(x * m.gam[i]);
        }
        __syncthreads();
        /* W = T·diag(β·exp(G))·K (kept negated), U' = T·diag(β)·V, Q·Kᵀ; T is lower, so
         * row tile rt sums k tiles 0..rt only. */
        const int nw = 4 * nkt, nu = 4 * nct;
        for (int job = warp; job < nw + nu + 10; job += GC_WARPS) {
            cw_acc acc;
            cw_load(acc, NULL, 0);
            if (job < nw) {
                const int rt = job / nkt, ct = job % nkt;
                cw_mma<cw_row, cw_row>(acc, m.tgb + rt * 16 * GC_LDC, GC_LDC, 16, m.kb + ct * 16,
                                       GC_LDK, 16 * GC_LDK, rt + 1);
                cw_store(wt, acc, 16); /* through the warp's tile: wmma stores f32 only */
                __syncwarp();
                for (int e = lane; e < 256; e += 32)
                    m.wb[(rt * 16 + e / 16) * GC_LDK + ct * 16 + e % 16] = __float2bfloat16(-wt[e]);
                __syncwarp();
            } else if (job < nw + nu) {
                const int rt = (job - nw) / nct, ct = (job - nw) % nct;
                cw_mma<cw_row, cw_row>(acc, m.tbb + rt * 16 * GC_LDC, GC_LDC, 16, m.vb + ct * 16,
                                       GC_LDC, 16 * GC_LDC, rt + 1);
                cw_store(m.r2 + rt * 16 * GC_LDF + ct * 16, acc, GC_LDF);
            } else {
                cw_tri_abt(m.r1, GC_LDF, acc, m.qb, m.kb, GC_LDK, nkt, job - nw - nu);
            }
        }
        __syncthreads();
        for (int e = threadIdx.x; e < GC * GC; e += GC_THREADS) {
            const int t = e / GC, i = e % GC;
            const float x = i <= t ? expf(m.gc[t] - m.gc[i]) * m.r1[t * GC_LDF + i] : 0.0f;
            m.aqb[t * GC_LDC + i] = __float2bfloat16(x);
        }
        __syncthreads();
        /* U = U' - W·S0 into r2, Q·S0 into r1 */
        for (int job = warp; job < 8 * nct; job += GC_WARPS) {
            const bool isu = job < 4 * nct;
            const int rt = (job % (4 * nct)) / nct, ct = job % nct;
            float *dst = (isu ? m.r2 : m.r1) + rt * 16 * GC_LDF + ct * 16;
            cw_acc acc;
            cw_load(acc, isu ? dst : NULL, GC_LDF);
            cw_mma<cw_row, cw_row>(acc, (isu ? m.wb : m.qb) + rt * 16 * GC_LDK, GC_LDK, 16,
                                   m.sb + ct * 16, GC_LDC, 16 * GC_LDC, nkt);
            cw_store(dst, acc, GC_LDF);
        }
        __syncthreads();
        const float glast = m.gc[GC - 1], dlast = expf(glast);
        for (int e = threadIdx.x; e < GC * GC_DVT; e += GC_THREADS) {
            const int t = e / GC_DVT, c = e % GC_DVT;
            m.r1[t * GC_LDF + c] *= m.gam[t];
            const float u = m.r2[t * GC_LDF + c];
            m.ub[t * GC_LDC + c] = __float2bfloat16(u);
            m.ubs[t * GC_LDC + c] = __float2bfloat16(u * expf(glast - m.gc[t]));
        }
        for (int e = threadIdx.x; e < a.dk * GC_DVT; e += GC_THREADS)
            m.S[(e / GC_DVT) * GC_LDF + e % GC_DVT] *= dlast;
        __syncthreads();
        /* O += lower(exp(G_t - G_i)·Q·Kᵀ)·U;  S += Kᵀ·diag(exp(G_last - G))·U */
        for (int job = warp; job < 4 * nct + nkt * nct; job += GC_WARPS) {
            cw_acc acc;
            float *dst;
            if (job < 4 * nct) {
                const int rt = job / nct, ct = job % nct;
                dst = m.r1 + rt * 16 * GC_LDF + ct * 16;
                cw_load(acc, dst, GC_LDF);
                cw_mma<cw_row, cw_row>(acc, m.aqb + rt * 16 * GC_LDC, GC_LDC, 16, m.ub + ct * 16,
                                       GC_LDC, 16 * GC_LDC, rt + 1);
            } else { /* Kᵀ: element (i, t) at kb[t][i], a column-major read of kb */
                dst = cw_atb_add(acc, m.S, GC_LDF, m.kb, GC_LDK, m.ubs, GC_LDC, nct, job - 4 * nct);
            }
            cw_store(dst, acc, GC_LDF);
        }
        __syncthreads();
        for (int e = threadIdx.x; e < nc * GC_DVT; e += GC_THREADS) {
            const int t = e / GC_DVT, c = e % GC_DVT;
            if (c < nvt)
                a.out[((size_t)(t0 + c0 + t) * a.Hv + h) * a.dv + j0 + c] = m.r1[t * GC_LDF + c];
        }
        for (int e = threadIdx.x; e < a.dk * GC_DVT; e += GC_THREADS) {
            const int r = e / GC_DVT, c = e % GC_DVT;
            m.sb[r * GC_LDC + c] = __float2bfloat16(m.S[r * GC_LDF + c]);
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < a.dk * GC_DVT; e += GC_THREADS) {
        const int r = e / GC_DVT, c = e % GC_DVT;
        if (c < nvt) Sg[(size_t)r * a.dv + j0 + c] = m.S[r * GC_LDF + c];
    }
}

int cuda_gdc_min(const cuda_impl *c, const bk_batch *bt, int dk, int dv) {
    if (c->cdt != DTYPE_BF16 || dk % 16 || dk > GC_DK || dv % 16) return INT_MAX;
    for (int s = 0; s < bt->n_seqs; s++)
        if (bt->len[s] >= GC_MIN) return GC_MIN;
    return INT_MAX;
}

void cuda_gdc(cuda_impl *c, float *out, const float *q, const float *k, int ld_qk, const float *v,
              int ld_v, const float *a, const float *bb, const bk_weight *A_log,
              const bk_weight *dt_bias, float *state, const bk_batch *bt, int Hk, int Hv, int dk,
              int dv, float q_scale, int vmap) {
    const cuda_bdev *d = (const cuda_bdev *)bt->dev;
    gdc_args g = {out,
                  q,
                  k,
                  v,
                  a,
                  bb,
                  ld_qk,
                  ld_v,
                  A_log->data,
                  dt_bias->data,
                  (int)A_log->dt,
                  (int)dt_bias->dt,
                  q_scale,
                  state,
                  d->start,
                  d->len,
                  d->slot,
                  Hk,
                  Hv,
                  dk,
                  dv,
                  vmap};
    if (cw_smem_optin(c, gdc_seq, GC_SMEM, "gdn (chunked)")) return;
    dim3 grid((unsigned)(bt->n_seqs * Hv), (unsigned)((dv + GC_DVT - 1) / GC_DVT));
    gdc_seq<<<grid, GC_THREADS, GC_SMEM, c->stream>>>(g);
    cuda_check_launch(c, "gdn (chunked)");
}
