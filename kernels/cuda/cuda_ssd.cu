/* cuda_ssd.cu - Mamba2 selective state space (SSD), decode and prefill (Nemotron-H).
 *
 * Per (sequence, head) the f32 state S [P, N] is held in registers for the whole step.
 * Rows p of S are independent: S[p,:] = a·S[p,:] + Δ·x[p]·B and y[p] = S[p,:]·C + D·x[p].
 * A block owns SSD_WARPS·SSD_RP rows; a warp holds SSD_RP rows with the N columns spread
 * over its lanes (coalesced loads of S, B and C), and y[p] is one warp reduction - no
 * barrier per token. Tokens come in chunks of SSD_CH whose B, C (shared by the heads of a
 * group), x, Δ and decay are staged in shared memory together. This is the recurrent form
 * of perf-anchors §6.3's step kernel, used for prefill too (the chunked SSD scan is the
 * faster prefill to write next, README.md); S is read and written once per step. */
#include "kernels/cuda/cuda_internal.cuh"

enum {
    SSD_WARPS = 4,
    SSD_THREADS = 32 * SSD_WARPS,
    SSD_RP = 4,
    SSD_CH = 8,
    SSD_ROWS = SSD_WARPS * SSD_RP
};

/* Δ and the decay of token t, head h (backend.h ssd). */
#define SSD_GATE(a, t, h, delta, decay)                                                            \
    do {                                                                                           \
        float dl_ = cuda_softplus((a).dt[(size_t)(t) * (a).ld_dt + (h)] +                          \
                                  cuda_wget((a).dt_bias, (a).bdt, (h)));                           \
        if ((a).dt_min > 0.0f) dl_ = fmaxf(dl_, (a).dt_min);                                       \
        (delta) = dl_;                                                                             \
        (decay) = expf(dl_ * -expf(cuda_wget((a).A_log, (a).adt, (h))));                           \
    } while (0)

template <int NPL> __global__ void __launch_bounds__(SSD_THREADS) ssd_seq(ssd_args a) {
    cuda_pdl_trigger();          /* the GEMV after it may launch (cuda_launch_pdl) */
    constexpr int NR = 32 * NPL; /* columns covered, >= N */
    __shared__ float bsm[SSD_CH][NR], csm[SSD_CH][NR], xsm[SSD_CH][SSD_ROWS];
    __shared__ float dsm[SSD_CH], esm[SSD_CH];
    const int s = blockIdx.x / a.H, h = blockIdx.x % a.H, grp = h / (a.H / a.G);
    if (a.len[s] >= a.long_from) return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int p0 = blockIdx.y * SSD_ROWS, pw = warp * SSD_RP;
    const float Dh = cuda_wget(a.D, a.ddt, h);
    float *S = a.state + ((size_t)a.slot[s] * a.H + h) * (size_t)a.P * a.N;
    float st[SSD_RP][NPL];
#pragma unroll
    for (int r = 0; r < SSD_RP; r++)
#pragma unroll
        for (int nn = 0; nn < NPL; nn++) {
            int p = p0 + pw + r, n = lane + 32 * nn;
            st[r][nn] = p < a.P && n < a.N ? S[(size_t)p * a.N + n] : 0.0f;
        }
    const int t0 = a.start[s], len = a.len[s];
    for (int c0 = 0; c0 < len; c0 += SSD_CH) {
        const int nc = len - c0 < SSD_CH ? len - c0 : SSD_CH;
        __syncthreads(); /* the previous chunk is no longer read */
        for (int e = threadIdx.x; e < SSD_CH * NR; e += SSD_THREADS) {
            int tt = e / NR, n = e % NR;
            float bv = 0.0f, cv = 0.0f;
            if (tt < nc && n < a.N) {
                size_t off = (size_t)(t0 + c0 + tt) * a.ld_bc + (size_t)grp * a.N + n;
                bv = a.B[off];
                cv = a.C[off];
            }
            bsm[tt][n] = bv;
            csm[tt][n] = cv;
        }
        for (int e = threadIdx.x; e < SSD_CH * SSD_ROWS; e += SSD_THREADS) {
            int tt = e / SSD_ROWS, pr = e % SSD_ROWS, p = p0 + pr;
            xsm[tt][pr] = tt < nc && p < a.P
                              ? a.x[(size_t)(t0 + c0 + tt) * a.ld_x + (size_t)h * a.P + p]
                              : 0.0f;
        }
        if ((int)threadIdx.x < nc)
            SSD_GATE(a, t0 + c0 + (int)threadIdx.x, h, dsm[threadIdx.x], esm[threadIdx.x]);
        __syncthreads();
        for (int tt = 0; tt < nc; tt++) {
            const float dl = dsm[tt], dec = esm[tt];
            const size_t yrow = ((size_t)(t0 + c0 + tt) * a.H + h) * a.P;
#pragma unroll
            for (int r = 0; r < SSD_RP; r++) {
                const float xp = xsm[tt][pw + r], dx = dl * xp;
                float yp = 0.0f;
#pragma unroll
                for (int nn = 0; nn < NPL; nn++) {
                    st[r][nn] = dec * st[r][nn] + dx * bsm[tt][lane + 32 * nn];
                    yp += st[r][nn] * csm[tt][lane + 32 * nn];
                }
                yp = cuda_warp_sum(yp);
                int p = p0 + pw + r;
                if (lane == 0 && p < a.P) a.y[yrow + p] = yp + Dh * xp;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < SSD_RP; r++)
#pragma unroll
        for (int nn = 0; nn < NPL; nn++) {
            int p = p0 + pw + r, n = lane + 32 * nn;
            if (p < a.P && n < a.N) S[(size_t)p * a.N + n] = st[r][nn];
        }
}

/* Any N: one thread per row p, the state stays in global memory (slow, correct). */
__global__ void ssd_generic(ssd_args a) {
    const int s = blockIdx.x / a.H, h = blockIdx.x % a.H, grp = h / (a.H / a.G);
    const int p = blockIdx.y * blockDim.x + threadIdx.x;
    if (p >= a.P || a.len[s] >= a.long_from) return;
    const float Dh = cuda_wget(a.D, a.ddt, h);
    float *S = a.state + ((size_t)a.slot[s] * a.H + h) * (size_t)a.P * a.N + (size_t)p * a.N;
    for (int t = a.start[s]; t < a.start[s] + a.len[s]; t++) {
        float dl, dec;
        SSD_GATE(a, t, h, dl, dec);
        const float xp = a.x[(size_t)t * a.ld_x + (size_t)h * a.P + p], dx = dl * xp;
        const float *Bt = a.B + (size_t)t * a.ld_bc + (size_t)grp * a.N;
        const float *Ct = a.C + (size_t)t * a.ld_bc + (size_t)grp * a.N;
        float yp = 0.0f;
        for (int n = 0; n < a.N; n++) {
            S[n] = dec * S[n] + dx * Bt[n];
            yp += S[n] * Ct[n];
        }
        a.y[((size_t)t * a.H + h) * a.P + p] = yp + Dh * xp;
    }
}

void cuda_ssd(backend *b, float *y, const float *x, int ld_x, const float *B, const float *C,
              int ld_bc, const float *dt, int ld_dt, const bk_weight *A_log,
              const bk_weight *dt_bias, const bk_weight *D, float *state, const bk_batch *bt, int H,
              int P, int N, int G, float dt_min) {
    cuda_impl *c = cuda_impl_of(b);
    const cuda_bdev *d = (const cuda_bdev *)bt->dev;
    int ns = bt->n_seqs;
    if (ns <= 0 || H <= 0 || P <= 0 || N <= 0 ||
        !cuda_enter(c, CUDA_OP_SSD, (const void *)y, (const void *)x, ld_x, (const void *)B,
                    (const void *)C, ld_bc, (const void *)dt, ld_dt, A_log->data, dt_bias->data,
                    D->data, (const void *)state, ns, H, P, N, G, dt_min))
        return;
    if (G <= 0 || H % G) {
        cuda_fail(c, "ssd", cudaErrorInvalidValue);
        return;
    }
    ssd_args a = {y,
                  x,
                  B,
                  C,
                  dt,
                  ld_x,
                  ld_bc,
                  ld_dt,
                  A_log->data,
                  dt_bias->data,
                  D->data,
                  (int)A_log->dt,
                  (int)dt_bias->dt,
                  (int)D->dt,
                  state,
                  d->start,
                  d->len,
                  d->slot,
                  H,
                  P,
                  N,
                  G,
                  dt_min,
                  cuda_ssc_min(c, bt, P, N)};
    /* a bf16 model's long runs take the chunked kernel (cuda_ssd_chunk.cu), the rest this
     * one; each sequence gets one of the two whatever shares its step */
    if (a.long_from != INT_MAX) cuda_ssc(c, &a, ns);
    int short_runs = 0;
    for (int s = 0; s < ns; s++) short_runs += bt->len[s] < a.long_from;
    if (!short_runs) return;
    dim3 grid((unsigned)(ns * H), (unsigned)((P + SSD_ROWS - 1) / SSD_ROWS));
    if (N <= 128) ssd_seq<4><<<grid, SSD_THREADS, 0, c->stream>>>(a);
    else if (N <= 256) ssd_seq<8><<<grid, SSD_THREADS, 0, c->stream>>>(a);
    else
        ssd_generic<<<dim3((unsigned)(ns * H), (unsigned)((P + 127) / 128)), 128, 0, c->stream>>>(
            a);
    cuda_check_launch(c, "ssd");
}
