/* cpu_conv1d.c - causal depthwise conv1d over time with a carried window (DeltaNet's
 * short conv, Qwen3.5 spec §5.2.2 and §7; Mamba2's conv later).
 *
 * Channels are independent, so the entry splits C into ranges and runs the reference on
 * each: every range reads and rewrites only its own columns of x, out and the window. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

/* The channel range [c0, c1) of the op; C is the full row width of out and the window. */
static void cpu_conv1d_range(float *out, const float *x, int ld_x, const bk_weight *w,
                             const bk_weight *bias, float *state, const bk_batch *bt, int C, int K,
                             int act, int c0, int c1) {
    int W = K - 1; /* window rows per slot */
    for (int s = 0; s < bt->n_seqs; s++) {
        int t0 = bt->start[s], len = bt->len[s];
        float *st = state + (size_t)bt->slot[s] * W * C; /* [K-1, C], oldest first */
        for (int t = 0; t < len; t++) {
            for (int c = c0; c < c1; c++) {
                float acc = bias ? cpu_weight_at(bias, c) : 0.0f;
                for (int j = 0; j < K; j++) {
                    int src = t - W + j; /* < 0: the row comes from the window */
                    float xv =
                        src < 0 ? st[(size_t)(W + src) * C + c] : x[(size_t)(t0 + src) * ld_x + c];
                    acc += cpu_weight_at(w, (size_t)c * K + j) * xv;
                }
                out[(size_t)(t0 + t) * C + c] = act ? acc / (1.0f + expf(-acc)) : acc;
            }
        }
        /* New window = last K-1 rows of [old window; x rows]. Ascending r reads row
         * len + r >= r of the old window before anything at or above it is rewritten. */
        for (int r = 0; r < W; r++) {
            int src = len + r; /* index into [window (W rows); x (len rows)] */
            for (int c = c0; c < c1; c++)
                st[(size_t)r * C + c] =
                    src < W ? st[(size_t)src * C + c] : x[(size_t)(t0 + src - W) * ld_x + c];
        }
    }
}

void cpu_conv1d_ref(float *out, const float *x, int ld_x, const bk_weight *w, const bk_weight *bias,
                    float *state, const bk_batch *bt, int C, int K, int act) {
    cpu_conv1d_range(out, x, ld_x, w, bias, state, bt, C, K, act, 0, C);
}

enum {
    CPU_CONV_CHUNK = 64, /* channels whose f32 weights sit in a stack tile */
    CPU_CONV_MAX_K = 8   /* longest kernel the tile holds (DeltaNet and Mamba2 use 4) */
};

/* o[c] += w[c] · x[c]; restrict and a constant count for full chunks let the compiler
 * vectorise it. */
static void cpu_conv_madd(float *restrict o, const float *restrict w, const float *restrict x,
                          int n) {
    if (n == CPU_CONV_CHUNK) {
        for (int c = 0; c < CPU_CONV_CHUNK; c++) o[c] += w[c] * x[c];
    } else {
        for (int c = 0; c < n; c++) o[c] += w[c] * x[c];
    }
}

/* wt[j][c] = w[cc + c, j] for nc channels, as f32. One loop per storage type: with the type
 * switch inside the element loop (cpu_weight_at), this transpose was most of a decode
 * step's conv1d. */
static void cpu_conv_widen(float wt[][CPU_CONV_CHUNK], const bk_weight *w, int cc, int nc, int K) {
    size_t o = (size_t)cc * K;
    if (w->dt == DTYPE_F32) {
        const float *f = (const float *)w->data + o;
        for (int c = 0; c < nc; c++)
            for (int j = 0; j < K; j++) wt[j][c] = f[c * K + j];
    } else if (w->dt == DTYPE_BF16) {
        const uint16_t *h = (const uint16_t *)w->data + o;
        for (int c = 0; c < nc; c++)
            for (int j = 0; j < K; j++) wt[j][c] = dtype_bf16_to_f32(h[c * K + j]);
    } else {
        for (int c = 0; c < nc; c++)
            for (int j = 0; j < K; j++) wt[j][c] = cpu_weight_at(w, o + (size_t)c * K + j);
    }
}

/* The same sums as cpu_conv1d_range, in the same order (bias, then taps oldest first), with
 * the weights widened once per chunk of channels and rows swept whole; silu comes from the
 * ISA table. */
static void cpu_conv1d_fast(const cpu_kernels *kern, float *out, const float *x, int ld_x,
                            const bk_weight *w, const bk_weight *bias, float *state,
                            const bk_batch *bt, int C, int K, int act, int c0, int c1) {
    int W = K - 1;
    float wt[CPU_CONV_MAX_K][CPU_CONV_CHUNK], bs[CPU_CONV_CHUNK];
    for (int cc = c0; cc < c1; cc += CPU_CONV_CHUNK) {
        int nc = c1 - cc < CPU_CONV_CHUNK ? c1 - cc : CPU_CONV_CHUNK;
        cpu_conv_widen(wt, w, cc, nc, K);
        for (int c = 0; c < nc; c++) bs[c] = bias ? cpu_weight_at(bias, cc + c) : 0.0f;
        for (int s = 0; s < bt->n_seqs; s++) {
            int t0 = bt->start[s], len = bt->len[s];
            float *st = state + (size_t)bt->slot[s] * W * C;
            for (int t = 0; t < len; t++) {
                float *o = out + (size_t)(t0 + t) * C + cc;
                memcpy(o, bs, (size_t)nc * sizeof(float));
                for (int j = 0; j < K; j++) {
                    int src = t - W + j;
                    const float *xr = src < 0 ? st + (size_t)(W + src) * C + cc
                                              : x + (size_t)(t0 + src) * ld_x + cc;
                    cpu_conv_madd(o, wt[j], xr, nc);
                }
                if (act) kern->silu_mul(o, o, NULL, (size_t)nc);
            }
            for (int r = 0; r < W; r++) { /* window update, as in cpu_conv1d_range */
                int src = len + r;
                const float *from =
                    src < W ? st + (size_t)src * C + cc : x + (size_t)(t0 + src - W) * ld_x + cc;
                memmove(st + (size_t)r * C + cc, from, (size_t)nc * sizeof(float));
            }
        }
    }
}

typedef struct {
    float *out, *state;
    const float *x;
    const bk_weight *w, *bias;
    const bk_batch *bt;
    int ld_x, C, K, act, n_tasks;
    const cpu_kernels *kern;
} cpu_conv_job;

static void cpu_conv_task(void *ctx, int task, int worker) {
    (void)worker;
    const cpu_conv_job *j = ctx;
    int c0, c1;
    /* 16 channels = one cache line of f32 per row: tasks never share a line. */
    cpu_split_range(j->C, j->n_tasks, task, 16, &c0, &c1);
    if (c0 >= c1) return;
    if (j->K <= CPU_CONV_MAX_K)
        cpu_conv1d_fast(j->kern, j->out, j->x, j->ld_x, j->w, j->bias, j->state, j->bt, j->C, j->K,
                        j->act, c0, c1);
    else
        cpu_conv1d_range(j->out, j->x, j->ld_x, j->w, j->bias, j->state, j->bt, j->C, j->K, j->act,
                         c0, c1);
}

void cpu_conv1d(backend *b, float *out, const float *x, int ld_x, const bk_weight *w,
                const bk_weight *bias, float *state, const bk_batch *bt, int C, int K, int act) {
    cpu_conv_job j = {out, state, x, w, bias, bt, ld_x, C, K, act, 0, cpu_impl_of(b)->k};
    j.n_tasks = cpu_backend_task_count(b, (C + 15) / 16, (int64_t)16 * bt->n_tokens * (K * 2 + 20));
    cpu_pool_run(cpu_impl_of(b)->pool, cpu_conv_task, &j, j.n_tasks);
}
