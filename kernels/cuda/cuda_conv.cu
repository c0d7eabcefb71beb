/* cuda_conv.cu - causal depthwise conv1d over time with a carried window (DeltaNet's and
 * Mamba2's short conv), then silu when act != 0.
 *
 * Decode steps (every sequence at most CONV_STEP_MAX tokens) take one kernel, conv_step: a
 * thread owns a (channel, sequence), computes its few outputs and then shifts its window,
 * both channel-local, so nothing orders it against other threads. Longer steps take two
 * kernels. conv_out computes every (token, channel) output independently - each reads
 * its K inputs, from x or, before the sequence's first token of this step, from the
 * slot's window - so a long prefill is as parallel as a decode is wide (a per-channel
 * sequential scan would take ~1 µs per token of latency). conv_window then rewrites each
 * window to the last K-1 inputs; one thread owns a channel's rows and walks them in
 * ascending order, exactly as the CPU reference does, so the in-place shift is safe.
 * Stream order puts conv_window after every read of the old window. */
#include "kernels/cuda/cuda_internal.cuh"

__global__ void conv_out(float *__restrict__ out, const float *__restrict__ x, int ld_x,
                         const void *__restrict__ w, int wdt, const void *__restrict__ bias,
                         int bdt, const float *__restrict__ state, const int32_t *tok_seq,
                         const int32_t *start, const int32_t *slot, int m, int C, int K, int act) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int W = K - 1;
    for (int t = blockIdx.y; t < m; t += gridDim.y) { /* t: token of the step */
        int s = tok_seq[t], t0 = start[s];
        int lt = t - t0; /* position inside this step's run of the sequence */
        const float *st = state + (size_t)slot[s] * W * C;
        float acc = bias ? cuda_wget(bias, bdt, c) : 0.0f;
        for (int j = 0; j < K; j++) {
            int src = lt - W + j; /* < 0: the row comes from the window */
            float xv = src < 0 ? st[(size_t)(W + src) * C + c] : x[(size_t)(t0 + src) * ld_x + c];
            acc += cuda_wget(w, wdt, (size_t)c * K + j) * xv;
        }
        out[(size_t)t * C + c] = act ? acc / (1.0f + expf(-acc)) : acc;
    }
}

enum { CONV_STEP_MAX = 4 };

__global__ void conv_step(float *__restrict__ out, const float *__restrict__ x, int ld_x,
                          const void *__restrict__ w, int wdt, const void *__restrict__ bias,
                          int bdt, float *__restrict__ state, const int32_t *start,
                          const int32_t *len, const int32_t *slot, int C, int K, int act) {
    cuda_pdl_trigger(); /* the GEMV after it may launch (cuda_launch_pdl) */
    const int c = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y, W = K - 1;
    if (c >= C) return;
    const int t0 = start[s], n = len[s];
    float *st = state + (size_t)slot[s] * W * C;
    const float b0 = bias ? cuda_wget(bias, bdt, c) : 0.0f;
    for (int lt = 0; lt < n; lt++) {
        float acc = b0;
        for (int j = 0; j < K; j++) { /* row lt - W + j of [window; x] */
            int src = lt - W + j;
            float xv = src < 0 ? st[(size_t)(W + src) * C + c] : x[(size_t)(t0 + src) * ld_x + c];
            acc += cuda_wget(w, wdt, (size_t)c * K + j) * xv;
        }
        out[(size_t)(t0 + lt) * C + c] = act ? acc / (1.0f + expf(-acc)) : acc;
    }
    /* the window becomes the last W rows of [window; x], ascending as conv_window does */
    for (int r = 0; r < W; r++)
        st[(size_t)r * C + c] =
            n + r < W ? st[(size_t)(n + r) * C + c] : x[(size_t)(t0 + n + r - W) * ld_x + c];
}

__global__ void conv_window(float *state, const float *__restrict__ x, int ld_x,
                            const int32_t *start, const int32_t *len, const int32_t *slot, int C,
                            int K) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int s = blockIdx.y, W = K - 1;
    if (c >= C) return;
    int t0 = start[s], n = len[s];
    float *st = state + (size_t)slot[s] * W * C;
    for (int r = 0; r < W; r++) {
        int src = n + r; /* index into [window (W rows); x (n rows)] */
        st[(size_t)r * C + c] =
            src < W ? st[(size_t)src * C + c] : x[(size_t)(t0 + src - W) * ld_x + c];
    }
}

void cuda_conv1d(backend *b, float *out, const float *x, int ld_x, const bk_weight *w,
                 const bk_weight *bias, float *state, const bk_batch *bt, int C, int K, int act) {
    cuda_impl *c = cuda_impl_of(b);
    const cuda_bdev *d = (const cuda_bdev *)bt->dev;
    int m = bt->n_tokens;
    const void *bd = bias ? bias->data : NULL;
    int max_len = 0; /* from the host side of the batch; part of the graph signature */
    for (int s = 0; s < bt->n_seqs; s++) max_len = bt->len[s] > max_len ? bt->len[s] : max_len;
    const int one = max_len <= CONV_STEP_MAX;
    if (m <= 0 || C <= 0 || K <= 0 ||
        !cuda_enter(c, CUDA_OP_CONV1D, (const void *)out, (const void *)x, ld_x, w->data, bd,
                    (const void *)state, m, bt->n_seqs, C, K, act, one))
        return;
    if (one) {
        dim3 g1((unsigned)((C + 127) / 128), (unsigned)bt->n_seqs);
        conv_step<<<g1, 128, 0, c->stream>>>(out, x, ld_x, w->data, (int)w->dt, bd,
                                             bias ? (int)bias->dt : 0, state, d->start, d->len,
                                             d->slot, C, K, act);
        cuda_check_launch(c, "conv1d step");
        return;
    }
    dim3 grid((unsigned)((C + 127) / 128), (unsigned)(m < 65535 ? m : 65535));
    conv_out<<<grid, 128, 0, c->stream>>>(out, x, ld_x, w->data, (int)w->dt, bd,
                                          bias ? (int)bias->dt : 0, state, d->tok_seq, d->start,
                                          d->slot, m, C, K, act);
    cuda_check_launch(c, "conv1d");
    if (K > 1) {
        dim3 g2((unsigned)((C + 127) / 128), (unsigned)bt->n_seqs);
        conv_window<<<g2, 128, 0, c->stream>>>(state, x, ld_x, d->start, d->len, d->slot, C, K);
        cuda_check_launch(c, "conv1d window");
    }
}
