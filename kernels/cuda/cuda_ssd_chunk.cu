/* cuda_ssd_chunk.cu - Mamba2's SSD of a long prompt in its state-space-dual chunked form
 * (perf-anchors §6.3, mamba_ssm's chunk scan; Nemotron-H spec §7), its products on bf16
 * tensor cores: the ssd op for sequences of at least SC_MIN tokens when the model computes
 * in bf16 (backend.h compute_dtype).
 *
 * Within a chunk, with L_t = A·Σ_{i<=t} Δ_i (A = -exp(A_log), so every L_t - L_i <= 0 for
 * i <= t) and S0 [P, N] the state entering it:
 *   Y = diag(exp(L))·C·S0ᵀ + lower(exp(L_t - L_i)·Δ_i·C_t·B_i)·X + D·X,
 *   S = exp(L_last)·S0 + Xᵀ·diag(Δ_i·exp(L_last - L_i))·B,
 * the recurrence S = exp(Δ·A)·S + Δ·x ⊗ B, y = S·C + D·x summed in closed form. One block
 * owns a (sequence, head) and walks the chunks in order, S in f32 in shared memory and a
 * bf16 copy of it feeding the products (wmma, bf16 inputs, f32 sums). Pad rows past the run
 * (Δ = 0, zero x, B, C) change neither Y's rows that are written nor S. */
#include "kernels/cuda/cuda_wmma.cuh"

enum {
    SC = 64,      /* tokens a chunk */
    SC_WARPS = 8, /* 256 threads */
    SC_THREADS = 32 * SC_WARPS,
    SC_D = 128,        /* largest P and N (Nemotron 3 Nano 4B: P 80, N 128) */
    SC_LDB = SC_D + 8, /* bf16 rows of up to 128 */
    SC_LDF = SC_D + 4, /* f32 rows of up to 128 */
    SC_LDM = SC + 8,   /* bf16 rows of 64 */
    SC_MIN = 16        /* shorter runs take the recurrent kernel */
};

typedef cw_bf16 bf16;

/* Shared memory, carved in this order (every buffer a multiple of 32 bytes). */
struct ssc_smem {
    bf16 *bb, *cb, *xb, *xw; /* [SC][SC_LDB]: B, C (then exp(L)·C), x, Δ·exp(L_last - L)·x */
    bf16 *mb;                /* [SC][SC_LDM] */
    float *yf;               /* [SC][SC_LDF]: C·Bᵀ, then Y */
    float *S;                /* [SC_D][SC_LDF] */
    bf16 *sb;                /* [SC_D][SC_LDB] */
    float *dl, *L;           /* [SC] */
};

static constexpr size_t SC_SMEM = 4 * sizeof(bf16) * SC * SC_LDB + sizeof(bf16) * SC * SC_LDM +
                                  sizeof(float) * SC * SC_LDF + sizeof(float) * SC_D * SC_LDF +
                                  sizeof(bf16) * SC_D * SC_LDB + sizeof(float) * 2 * SC;

__device__ static ssc_smem ssc_carve(unsigned char *p) {
    ssc_smem m;
    bf16 **b16[] = {&m.bb, &m.cb, &m.xb, &m.xw};
    for (bf16 **x : b16) *x = cw_carve<bf16>(p, SC * SC_LDB);
    m.mb = cw_carve<bf16>(p, SC * SC_LDM);
    m.yf = cw_carve<float>(p, SC * SC_LDF);
    m.S = cw_carve<float>(p, SC_D * SC_LDF);
    m.sb = cw_carve<bf16>(p, SC_D * SC_LDB);
    m.dl = (float *)p;
    m.L = m.dl + SC;
    return m;
}

/* Δ of token t, head h, as the recurrent kernel computes it (backend.h ssd). */
__device__ static float ssc_delta(const ssd_args &a, int t, int h) {
    float d = cuda_softplus(a.dt[(size_t)t * a.ld_dt + h] + cuda_wget(a.dt_bias, a.bdt, h));
    return a.dt_min > 0.0f ? fmaxf(d, a.dt_min) : d;
}

__global__ void __launch_bounds__(SC_THREADS) ssc_seq(ssd_args a) {
    extern __shared__ __align__(128) uint4 ssc_raw[];
    const ssc_smem m = ssc_carve((unsigned char *)ssc_raw);
    const int s = blockIdx.x / a.H, h = blockIdx.x % a.H, grp = h / (a.H / a.G);
    const int n = a.len[s], t0 = a.start[s];
    if (n < SC_MIN) return; /* the recurrent kernel's (cuda_ssd.cu) */
    const int warp = threadIdx.x >> 5;
    const int P = a.P, N = a.N, npt = P / 16, nnt = N / 16;
    const float A = -expf(cuda_wget(a.A_log, a.adt, h)), Dh = cuda_wget(a.D, a.ddt, h);
    float *Sg = a.state + ((size_t)a.slot[s] * a.H + h) * (size_t)P * N;
    for (int e = threadIdx.x; e < P * N; e += SC_THREADS) {
        const int p = e / N, j = e % N;
        const float v = Sg[e];
        m.S[p * SC_LDF + j] = v;
        m.sb[p * SC_LDB + j] = __float2bfloat16(v);
    }
    for (int c0 = 0; c0 < n; c0 += SC) {
        const int nc = min(SC, n - c0);
        __syncthreads(); /* the previous chunk is done with every buffer */
        for (int e = threadIdx.x; e < SC * N; e += SC_THREADS) {
            const int t = e / N, j = e % N;
            const size_t off = (size_t)(t0 + c0 + t) * a.ld_bc + (size_t)grp * N + j;
            m.bb[t * SC_LDB + j] = __float2bfloat16(t < nc ? a.B[off] : 0.0f);
            m.cb[t * SC_LDB + j] = __float2bfloat16(t < nc ? a.C[off] : 0.0f);
        }
        for (int e = threadIdx.x; e < SC * P; e += SC_THREADS) {
            const int t = e / P, p = e % P;
            m.xb[t * SC_LDB + p] = __float2bfloat16(
                t < nc ? a.x[(size_t)(t0 + c0 + t) * a.ld_x + (size_t)h * P + p] : 0.0f);
        }
        if (threadIdx.x < SC) {
            const int t = threadIdx.x;
            m.dl[t] = t < nc ? ssc_delta(a, t0 + c0 + t, h) : 0.0f;
        }
        __syncthreads();
        if (threadIdx.x == 0) { /* L_t, summed over the chunk */
            float acc = 0.0f;
            for (int t = 0; t < SC; t++) m.L[t] = acc += m.dl[t] * A;
        }
        for (int job = warp; job < 10; job += SC_WARPS) { /* C·Bᵀ on and below the diagonal */
            cw_acc acc;
            cw_load(acc, NULL, 0);
            cw_tri_abt(m.yf, SC_LDF, acc, m.cb, m.bb, SC_LDB, nnt, job);
        }
        __syncthreads();
        const float Llast = m.L[SC - 1];
        for (int e = threadIdx.x; e < SC * SC; e += SC_THREADS) {
            const int t = e / SC, i = e % SC;
            const float v = i <= t ? expf(m.L[t] - m.L[i]) * m.dl[i] * m.yf[t * SC_LDF + i] : 0.0f;
            m.mb[t * SC_LDM + i] = __float2bfloat16(v);
        }
        for (int e = threadIdx.x; e < SC * N; e += SC_THREADS) {
            const int t = e / N, j = e % N;
            bf16 *c = &m.cb[t * SC_LDB + j];
            *c = __float2bfloat16(__bfloat162float(*c) * expf(m.L[t]));
        }
        for (int e = threadIdx.x; e < SC * P; e += SC_THREADS) {
            const int t = e / P, p = e % P;
            const float w = m.dl[t] * expf(Llast - m.L[t]);
            m.xw[t * SC_LDB + p] = __float2bfloat16(__bfloat162float(m.xb[t * SC_LDB + p]) * w);
        }
        const float decay = expf(Llast);
        for (int e = threadIdx.x; e < P * N; e += SC_THREADS)
            m.S[(e / N) * SC_LDF + e % N] *= decay;
        __syncthreads();
        /* Y = exp(L)·C·S0ᵀ + M·X (4 x P/16 tiles); S += Xwᵀ·B (P/16 x N/16 tiles) */
        for (int job = warp; job < 4 * npt + npt * nnt; job += SC_WARPS) {
            cw_acc acc;
            float *dst;
            if (job < 4 * npt) { /* S0ᵀ: element (n, p) at sb[p][n], a column-major read */
                const int rt = job / npt, pt = job % npt;
                dst = m.yf + rt * 16 * SC_LDF + pt * 16;
                cw_load(acc, NULL, 0);
                cw_mma<cw_row, cw_col>(acc, m.cb + rt * 16 * SC_LDB, SC_LDB, 16,
                                       m.sb + pt * 16 * SC_LDB, SC_LDB, 16, nnt);
                cw_mma<cw_row, cw_row>(acc, m.mb + rt * 16 * SC_LDM, SC_LDM, 16, m.xb + pt * 16,
                                       SC_LDB, 16 * SC_LDB, rt + 1);
            } else { /* Xwᵀ: element (p, t) at xw[t][p] */
                dst = cw_atb_add(acc, m.S, SC_LDF, m.xw, SC_LDB, m.bb, SC_LDB, nnt, job - 4 * npt);
            }
            cw_store(dst, acc, SC_LDF);
        }
        __syncthreads();
        for (int e = threadIdx.x; e < nc * P; e += SC_THREADS) {
            const int t = e / P, p = e % P;
            const float xv = a.x[(size_t)(t0 + c0 + t) * a.ld_x + (size_t)h * P + p];
            a.y[((size_t)(t0 + c0 + t) * a.H + h) * P + p] = m.yf[t * SC_LDF + p] + Dh * xv;
        }
        for (int e = threadIdx.x; e < P * N; e += SC_THREADS) {
            const int p = e / N, j = e % N;
            m.sb[p * SC_LDB + j] = __float2bfloat16(m.S[p * SC_LDF + j]);
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < P * N; e += SC_THREADS) Sg[e] = m.S[(e / N) * SC_LDF + e % N];
}

int cuda_ssc_min(const cuda_impl *c, const bk_batch *bt, int P, int N) {
    if (c->cdt != DTYPE_BF16 || P % 16 || P > SC_D || N % 16 || N > SC_D) return INT_MAX;
    for (int s = 0; s < bt->n_seqs; s++)
        if (bt->len[s] >= SC_MIN) return SC_MIN;
    return INT_MAX;
}

void cuda_ssc(cuda_impl *c, const ssd_args *a, int n_seqs) {
    if (cw_smem_optin(c, ssc_seq, SC_SMEM, "ssd (chunked)")) return;
    ssc_seq<<<(unsigned)(n_seqs * a->H), SC_THREADS, SC_SMEM, c->stream>>>(*a);
    cuda_check_launch(c, "ssd (chunked)");
}
