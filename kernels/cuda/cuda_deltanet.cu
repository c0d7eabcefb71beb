/* cuda_deltanet.cu - the gated delta rule (Qwen3.5 spec §5.2.7), decode and prefill.
 *
 * Per (sequence, value head) the f32 state S [dk, dv] (row-major, the layout backend.h
 * fixes) is held in registers for the whole step: a block owns 32 columns of S, lane j a
 * column, and its 4 warps split the dk rows (RPT each). Columns are independent, so the
 * only cross-thread work per token is two reductions over the rows (Sᵀk before the update,
 * Sᵀq after), done through shared memory with two barriers. Tokens are taken in chunks of
 * GD_CH whose q, k rows (shared by all columns), gates and v values are staged together, so
 * the per-token path touches no global memory but the output. This is the recurrent form
 * (perf-anchors §6.1) used for prefill too: exact to f32 rounding, O(T·dk·dv), no tensor
 * cores; the chunked WY form (§6.2) is the faster prefill to write next (README.md).
 * S is read once and written once per step: 2·dk·dv·4 bytes per head. The fused op (gdn)
 * runs the same kernel with the q / k l2norm and the gates done as each chunk is staged.
 * vmap (backend.h BK_VHEAD_*) only picks the key head a block stages. */
#include "kernels/cuda/cuda_internal.cuh"

enum { GD_WARPS = 4, GD_THREADS = 32 * GD_WARPS, GD_CH = 8 };

/* The gates and norms the fused op (gdn) computes as it stages a chunk, instead of reading
 * them from the gdn_gates and l2norm kernels' outputs. */
struct gd_fuse {
    const float *a, *bb;
    const void *A_log, *dt_bias;
    int adt, bdt;
    float q_scale;
    int long_from; /* sequences of this many tokens or more are cuda_gdc's */
};

template <int RPT, bool FUSE>
__global__ void __launch_bounds__(GD_THREADS)
    gd_seq(float *__restrict__ out, const float *__restrict__ q, const float *__restrict__ k,
           int ld_qk, const float *__restrict__ v, int ld_v, const float *__restrict__ g,
           const float *__restrict__ beta, float *__restrict__ state, const int32_t *start,
           const int32_t *len, const int32_t *slot, int Hk, int Hv, int dk, int dv, int vmap,
           gd_fuse fu) {
    cuda_pdl_trigger();               /* the GEMV after it may launch (cuda_launch_pdl) */
    constexpr int R = GD_WARPS * RPT; /* rows covered, >= dk */
    __shared__ float qs[GD_CH][R], ks[GD_CH][R], vs[GD_CH][32], gs[GD_CH], bs[GD_CH];
    __shared__ float red[2][GD_WARPS][32];
    const int s = blockIdx.x / Hv, h = blockIdx.x % Hv;
    const int hk = vmap == BK_VHEAD_TILED ? h % Hk : h / (Hv / Hk);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, i0 = warp * RPT;
    const int j = blockIdx.y * 32 + lane;
    const bool jv = j < dv;
    if (len[s] >= fu.long_from) return;
    float *S = state + ((size_t)slot[s] * Hv + h) * (size_t)dk * dv;
    float st[RPT];
#pragma unroll
    for (int r = 0; r < RPT; r++) st[r] = jv && i0 + r < dk ? S[(size_t)(i0 + r) * dv + j] : 0.0f;
    const int t0 = start[s], n = len[s];
    for (int c0 = 0; c0 < n; c0 += GD_CH) {
        const int nc = n - c0 < GD_CH ? n - c0 : GD_CH;
        __syncthreads(); /* the previous chunk's rows are no longer read */
        for (int e = threadIdx.x; e < GD_CH * R; e += GD_THREADS) {
            int tt = e / R, ii = e % R;
            float qv = 0.0f, kv = 0.0f;
            if (tt < nc && ii < dk) {
                size_t off = (size_t)(t0 + c0 + tt) * ld_qk + (size_t)hk * dk + ii;
                qv = q[off];
                kv = k[off];
            }
            qs[tt][ii] = qv;
            ks[tt][ii] = kv;
        }
        for (int e = threadIdx.x; e < GD_CH * 32; e += GD_THREADS) {
            int tt = e / 32, jj = blockIdx.y * 32 + e % 32;
            vs[tt][e % 32] =
                tt < nc && jj < dv ? v[(size_t)(t0 + c0 + tt) * ld_v + (size_t)h * dv + jj] : 0.0f;
        }
        if ((int)threadIdx.x < nc) {
            size_t gi = (size_t)(t0 + c0 + threadIdx.x) * Hv + h;
            if (FUSE) { /* gdn_gates */
                float gv = -expf(cuda_wget(fu.A_log, fu.adt, h)) *
                           cuda_softplus(fu.a[gi] + cuda_wget(fu.dt_bias, fu.bdt, h));
                gs[threadIdx.x] = expf(gv);
                bs[threadIdx.x] = cuda_sigmoid(fu.bb[gi]);
            } else {
                gs[threadIdx.x] = expf(g[gi]);
                bs[threadIdx.x] = beta[gi];
            }
        }
        __syncthreads();
        if (FUSE) { /* l2norm of the staged q and k rows, a warp a row */
            for (int rr = warp; rr < 2 * nc; rr += GD_WARPS) {
                float *row = rr < nc ? qs[rr] : ks[rr - nc];
                float ss = 0.0f;
                for (int i = lane; i < dk; i += 32) ss += row[i] * row[i];
                ss = cuda_warp_sum(ss);
                const float r = (rr < nc ? fu.q_scale : 1.0f) / sqrtf(ss + 1e-6f);
                for (int i = lane; i < dk; i += 32) row[i] *= r;
            }
            __syncthreads();
        }
#pragma unroll 1
        for (int tt = 0; tt < nc; tt++) { /* nc is uniform over the block */
            const float dec = gs[tt];
            float kvp = 0.0f;
#pragma unroll
            for (int r = 0; r < RPT; r++) {
                st[r] *= dec;
                kvp += st[r] * ks[tt][i0 + r];
            }
            red[0][warp][lane] = kvp;
            __syncthreads();
            float kvs = 0.0f;
#pragma unroll
            for (int w = 0; w < GD_WARPS; w++) kvs += red[0][w][lane];
            const float d = bs[tt] * (vs[tt][lane] - kvs);
            float op = 0.0f;
#pragma unroll
            for (int r = 0; r < RPT; r++) {
                st[r] += ks[tt][i0 + r] * d;
                op += st[r] * qs[tt][i0 + r];
            }
            red[1][warp][lane] = op;
            __syncthreads();
            if (warp == 0 && jv) {
                float o = 0.0f;
#pragma unroll
                for (int w = 0; w < GD_WARPS; w++) o += red[1][w][lane];
                out[((size_t)(t0 + c0 + tt) * Hv + h) * dv + j] = o;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < RPT; r++)
        if (jv && i0 + r < dk) S[(size_t)(i0 + r) * dv + j] = st[r];
}

/* Any dk: one thread per column, the state stays in global memory (slow, correct). */
__global__ void gd_generic(float *__restrict__ out, const float *__restrict__ q,
                           const float *__restrict__ k, int ld_qk, const float *__restrict__ v,
                           int ld_v, const float *__restrict__ g, const float *__restrict__ beta,
                           float *__restrict__ state, const int32_t *start, const int32_t *len,
                           const int32_t *slot, int Hk, int Hv, int dk, int dv, int vmap) {
    const int s = blockIdx.x / Hv, h = blockIdx.x % Hv;
    const int hk = vmap == BK_VHEAD_TILED ? h % Hk : h / (Hv / Hk);
    const int j = blockIdx.y * blockDim.x + threadIdx.x;
    if (j >= dv) return;
    float *S = state + ((size_t)slot[s] * Hv + h) * (size_t)dk * dv;
    for (int t = start[s]; t < start[s] + len[s]; t++) {
        const float *qt = q + (size_t)t * ld_qk + (size_t)hk * dk;
        const float *kt = k + (size_t)t * ld_qk + (size_t)hk * dk;
        float dec = expf(g[(size_t)t * Hv + h]), kv = 0.0f, o = 0.0f;
        for (int i = 0; i < dk; i++) {
            S[(size_t)i * dv + j] *= dec;
            kv += S[(size_t)i * dv + j] * kt[i];
        }
        float d = beta[(size_t)t * Hv + h] * (v[(size_t)t * ld_v + (size_t)h * dv + j] - kv);
        for (int i = 0; i < dk; i++) {
            S[(size_t)i * dv + j] += kt[i] * d;
            o += S[(size_t)i * dv + j] * qt[i];
        }
        out[((size_t)t * Hv + h) * dv + j] = o;
    }
}

void cuda_gated_delta(backend *b, float *out, const float *q, const float *k, int ld_qk,
                      const float *v, int ld_v, const float *g, const float *beta, float *state,
                      const bk_batch *bt, int Hk, int Hv, int dk, int dv, int vmap) {
    cuda_impl *c = cuda_impl_of(b);
    const cuda_bdev *d = (const cuda_bdev *)bt->dev;
    int ns = bt->n_seqs;
    if (ns <= 0 || Hv <= 0 || dk <= 0 || dv <= 0 ||
        !cuda_enter(c, CUDA_OP_DELTA, (const void *)out, (const void *)q, (const void *)k, ld_qk,
                    (const void *)v, ld_v, (const void *)g, (const void *)beta, (const void *)state,
                    ns, Hk, Hv, dk, dv, vmap))
        return;
    if (Hk <= 0 || Hv % Hk) {
        cuda_fail(c, "gated_delta", cudaErrorInvalidValue);
        return;
    }
    dim3 grid((unsigned)(ns * Hv), (unsigned)((dv + 31) / 32));
    gd_fuse none = {};
    none.long_from = INT_MAX;
#define GD_ARGS                                                                                    \
    out, q, k, ld_qk, v, ld_v, g, beta, state, d->start, d->len, d->slot, Hk, Hv, dk, dv, vmap
    if (dk <= 32) gd_seq<8, false><<<grid, GD_THREADS, 0, c->stream>>>(GD_ARGS, none);
    else if (dk <= 64) gd_seq<16, false><<<grid, GD_THREADS, 0, c->stream>>>(GD_ARGS, none);
    else if (dk <= 128) gd_seq<32, false><<<grid, GD_THREADS, 0, c->stream>>>(GD_ARGS, none);
    else if (dk <= 256) gd_seq<64, false><<<grid, GD_THREADS, 0, c->stream>>>(GD_ARGS, none);
    else {
        dim3 g2((unsigned)(ns * Hv), (unsigned)((dv + 127) / 128));
        gd_generic<<<g2, 128, 0, c->stream>>>(GD_ARGS);
    }
#undef GD_ARGS
    cuda_check_launch(c, "gated_delta");
}

/* The fused op: l2norm and gates computed as each chunk is staged, one kernel where the
 * unfused ops take four; dk past the register-held state takes the four. */
void cuda_gdn(backend *b, float *out, float *q, float *k, int ld_qk, const float *v, int ld_v,
              const float *a, const float *bb, const bk_weight *A_log, const bk_weight *dt_bias,
              float *g, float *beta, float *state, const bk_batch *bt, int Hk, int Hv, int dk,
              int dv, float q_scale, int vmap) {
    cuda_impl *c = cuda_impl_of(b);
    const cuda_bdev *d = (const cuda_bdev *)bt->dev;
    int ns = bt->n_seqs, m = bt->n_tokens;
    if (dk > 256 || Hk <= 0 || Hv % Hk) {
        cuda_l2norm(b, q, m * Hk, dk, ld_qk, Hk, 1e-6f, q_scale);
        cuda_l2norm(b, k, m * Hk, dk, ld_qk, Hk, 1e-6f, 1.0f);
        cuda_gdn_gates(b, g, beta, a, bb, A_log, dt_bias, m, Hv);
        cuda_gated_delta(b, out, q, k, ld_qk, v, ld_v, g, beta, state, bt, Hk, Hv, dk, dv, vmap);
        return;
    }
    if (ns <= 0 || Hv <= 0 || dk <= 0 || dv <= 0 ||
        !cuda_enter(c, CUDA_OP_GDN, (const void *)out, (const void *)q, (const void *)k, ld_qk,
                    (const void *)v, ld_v, (const void *)a, (const void *)bb, A_log->data,
                    dt_bias->data, (const void *)state, ns, Hk, Hv, dk, dv, q_scale, vmap))
        return;
    /* a bf16 model's long runs take the chunked kernel (cuda_deltanet_chunk.cu), the rest
     * this one; each sequence gets one of the two whatever shares its step */
    const int long_from = cuda_gdc_min(c, bt, dk, dv);
    if (long_from != INT_MAX)
        cuda_gdc(c, out, q, k, ld_qk, v, ld_v, a, bb, A_log, dt_bias, state, bt, Hk, Hv, dk, dv,
                 q_scale, vmap);
    int short_runs = 0;
    for (int s = 0; s < ns; s++) short_runs += bt->len[s] < long_from;
    if (!short_runs) return;
    dim3 grid((unsigned)(ns * Hv), (unsigned)((dv + 31) / 32));
    gd_fuse fu = {a,       bb,       A_log->data, dt_bias->data, (int)A_log->dt, (int)dt_bias->dt,
                  q_scale, long_from};
    const float *none = NULL;
#define GD_ARGS                                                                                    \
    out, q, k, ld_qk, v, ld_v, none, none, state, d->start, d->len, d->slot, Hk, Hv, dk, dv, vmap, \
        fu
    if (dk <= 32) gd_seq<8, true><<<grid, GD_THREADS, 0, c->stream>>>(GD_ARGS);
    else if (dk <= 64) gd_seq<16, true><<<grid, GD_THREADS, 0, c->stream>>>(GD_ARGS);
    else if (dk <= 128) gd_seq<32, true><<<grid, GD_THREADS, 0, c->stream>>>(GD_ARGS);
    else gd_seq<64, true><<<grid, GD_THREADS, 0, c->stream>>>(GD_ARGS);
#undef GD_ARGS
    cuda_check_launch(c, "gdn");
}
