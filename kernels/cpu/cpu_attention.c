/* cpu_attention.c - the kv-cache write and causal GQA attention on the CPU.
 *
 * The reference is the textbook three passes (max, sum, weighted sum) recomputing the
 * scores, so it needs no scratch. The backend entry runs one token and some query heads of
 * one kv head per work item (all of the group at prefill, so each cached row is read once for
 * them; fewer at decode, to keep the threads busy), each head with an online softmax over
 * blocks of CPU_ATT_BLOCK keys: scores of a block live on the stack, the running output in a
 * stack row of D floats per head, so nothing is allocated and no buffer is sized by the
 * context length. A BF16 cache holds k and v rounded to bf16; its
 * rows are widened to f32 as they are read, so the arithmetic is the F32 cache's. */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

enum {
    CPU_ATT_BLOCK = 64,   /* keys scored before the running output is rescaled */
    CPU_ATT_MAX_D = 1024, /* largest head dim the stack accumulator holds (Gemma 4: 512) */
    CPU_ATT_GROUP = 8     /* query heads of one kv head a work item takes at most */
};

/* Row `row` of one half of kv, as f32: in place for an F32 cache, else converted into buf. */
static const float *cpu_kv_row(const bk_kv *kv, const void *half, size_t row, float *buf) {
    size_t w = (size_t)kv->width;
    if (kv->dt == DTYPE_F32) return (const float *)half + row * w;
    const uint16_t *r = (const uint16_t *)half + row * w;
    for (size_t d = 0; d < w; d++) buf[d] = dtype_bf16_to_f32(r[d]);
    return buf;
}

static void cpu_kv_put(const bk_kv *kv, void *half, size_t row, const float *src) {
    size_t w = (size_t)kv->width;
    if (kv->dt == DTYPE_F32) {
        memcpy((float *)half + row * w, src, w * sizeof(float));
        return;
    }
    uint16_t *r = (uint16_t *)half + row * w;
    for (size_t d = 0; d < w; d++) r[d] = dtype_f32_to_bf16(src[d]);
}

void cpu_attention_kv_store_ref(const bk_kv *kv, const float *k, const float *v,
                                const bk_batch *bt) {
    size_t w = (size_t)kv->width;
    for (int i = 0; i < bt->n_tokens; i++) {
        size_t row = bk_kv_row(kv, bt, bt->tok_seq[i], bt->tok_pos[i]);
        cpu_kv_put(kv, kv->k, row, k + (size_t)i * w);
        cpu_kv_put(kv, kv->v, row, v + (size_t)i * w);
    }
}

/* Element d of head kvh of cached row `row` of one half, as f32. */
static float cpu_kv_at(const bk_kv *kv, const void *half, size_t row, int kvh, int D, int d) {
    size_t i = row * (size_t)kv->width + (size_t)kvh * D + (size_t)d;
    return kv->dt == DTYPE_F32 ? ((const float *)half)[i]
                               : dtype_bf16_to_f32(((const uint16_t *)half)[i]);
}

/* Score of query row q against cached position p of sequence seq (softcap applied). */
static float cpu_att_score(const float *q, const bk_kv *kv, const bk_batch *bt, int seq, int p,
                           int kvh, int D, float scale, float softcap) {
    size_t row = bk_kv_row(kv, bt, seq, p);
    float s = 0.0f;
    for (int d = 0; d < D; d++) s += q[d] * cpu_kv_at(kv, kv->k, row, kvh, D, d);
    s *= scale;
    if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
    return s;
}

void cpu_attention_ref(float *out, const float *q, const bk_kv *kv, const bk_batch *bt, int H,
                       int KV, int D, float scale, int window, float softcap) {
    int group = H / KV;
    for (int i = 0; i < bt->n_tokens; i++) {
        int p = bt->tok_pos[i];
        int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
        int seq = bt->tok_seq[i];
        for (int h = 0; h < H; h++) {
            const float *qh = q + ((size_t)i * H + h) * D;
            float *oh = out + ((size_t)i * H + h) * D;
            int kvh = h / group;
            float mx = -INFINITY, sum = 0.0f;
            for (int t = lo; t <= p; t++) {
                float s = cpu_att_score(qh, kv, bt, seq, t, kvh, D, scale, softcap);
                mx = s > mx ? s : mx;
            }
            for (int t = lo; t <= p; t++)
                sum += expf(cpu_att_score(qh, kv, bt, seq, t, kvh, D, scale, softcap) - mx);
            for (int d = 0; d < D; d++) oh[d] = 0.0f;
            for (int t = lo; t <= p; t++) {
                float w =
                    expf(cpu_att_score(qh, kv, bt, seq, t, kvh, D, scale, softcap) - mx) / sum;
                size_t row = bk_kv_row(kv, bt, seq, t);
                for (int d = 0; d < D; d++) oh[d] += w * cpu_kv_at(kv, kv->v, row, kvh, D, d);
            }
        }
    }
}

void cpu_attention_kv_store(backend *b, const bk_kv *kv, const float *k, const float *v,
                            const bk_batch *bt) {
    (void)b; /* a copy of m rows: memory speed on one thread already */
    cpu_attention_kv_store_ref(kv, k, v, bt);
}

typedef struct {
    float *out;
    const float *q;
    const bk_kv *kv;
    const bk_batch *bt;
    int H, KV, D, window, n_tasks;
    int heads; /* query heads per work item: a divisor of H / KV, at most CPU_ATT_GROUP */
    float scale, softcap;
    const cpu_kernels *k;
} cpu_att_job;

/* The cache row of kv head kvh at position p of sequence seq, in units of one head's D. */
static size_t cpu_att_row(const cpu_att_job *j, int seq, int p, int kvh) {
    return bk_kv_row(j->kv, j->bt, seq, p) * j->KV + (size_t)kvh;
}

/* Query heads h0 .. h0 + n - 1 of token i, which share one kv head: each with its own online
 * softmax (running max mx, running sum l, output acc rescaled by exp(old max − new max)
 * whenever a block raises the max), while every cached k and v row is read (and widened)
 * once for all n. Each head's arithmetic is the one-head loop's, in the same order, so the
 * grouping, which follows the batch size, never changes a bit. */
static void cpu_att_heads(const cpu_att_job *j, int i, int h0, int n) {
    const bk_batch *bt = j->bt;
    const bk_kv *kv = j->kv;
    int D = j->D, kvh = h0 / (j->H / j->KV), p = bt->tok_pos[i];
    int lo = j->window > 0 && p - j->window + 1 > 0 ? p - j->window + 1 : 0, seq = bt->tok_seq[i];
    const float *q = j->q + ((size_t)i * j->H + h0) * D;
    /* A BF16 cache's head row is widened into kr / vr first (exact), then the same dot and
     * axpby run as on an F32 cache: only the head's D values, not the whole row. */
    bk_kv head = *kv;
    head.width = D;
    float acc[CPU_ATT_GROUP][CPU_ATT_MAX_D], sc[CPU_ATT_GROUP][CPU_ATT_BLOCK];
    float kbuf[4][CPU_ATT_MAX_D], vbuf[4][CPU_ATT_MAX_D];
    float mx[CPU_ATT_GROUP], l[CPU_ATT_GROUP], c[CPU_ATT_GROUP], nmx[CPU_ATT_GROUP];
    for (int g = 0; g < n; g++) {
        mx[g] = -INFINITY;
        l[g] = 0.0f;
        memset(acc[g], 0, (size_t)D * sizeof(float));
    }
    for (int t0 = lo; t0 <= p; t0 += CPU_ATT_BLOCK) {
        int nb = p + 1 - t0 < CPU_ATT_BLOCK ? p + 1 - t0 : CPU_ATT_BLOCK;
        for (int g = 0; g < n; g++) nmx[g] = mx[g];
        for (int t = 0; t < nb; t += 4) { /* keys four at a time: one pass of q per four */
            int nt = nb - t < 4 ? nb - t : 4;
            const float *kr[4];
            for (int u = 0; u < nt; u++)
                kr[u] = cpu_kv_row(&head, kv->k, cpu_att_row(j, seq, t0 + t + u, kvh), kbuf[u]);
            for (int g = 0; g < n; g++) {
                float d4[4];
                const float *qg = q + (size_t)g * D;
                if (nt == 4 && j->k->dot4) j->k->dot4(qg, kr, D, d4);
                else
                    for (int u = 0; u < nt; u++) d4[u] = j->k->dot(qg, kr[u], D);
                for (int u = 0; u < nt; u++) {
                    float s = d4[u] * j->scale;
                    if (j->softcap > 0.0f) s = j->softcap * tanhf(s / j->softcap);
                    sc[g][t + u] = s;
                    nmx[g] = s > nmx[g] ? s : nmx[g];
                }
            }
        }
        for (int g = 0; g < n; g++) {
            c[g] = expf(mx[g] - nmx[g]); /* 0 on the first block (mx = -inf) */
            l[g] = l[g] * c[g] + j->k->exp_sum(sc[g], sc[g], nmx[g], nb);
            mx[g] = nmx[g];
        }
        for (int t = 0; t < nb; t += 4) { /* one pass of each accumulator per four keys */
            int nt = nb - t < 4 ? nb - t : 4;
            const float *vr[4];
            for (int u = 0; u < nt; u++)
                vr[u] = cpu_kv_row(&head, kv->v, cpu_att_row(j, seq, t0 + t + u, kvh), vbuf[u]);
            for (int g = 0; g < n; g++) {
                if (nt == 4 && j->k->axpy4) {
                    j->k->axpy4(acc[g], vr, sc[g] + t, t == 0 ? c[g] : 1.0f, D);
                    continue;
                }
                for (int u = 0; u < nt; u++)
                    j->k->axpby(acc[g], vr[u], sc[g][t + u], t + u == 0 ? c[g] : 1.0f, D);
            }
        }
    }
    for (int g = 0; g < n; g++) {
        float *oh = j->out + ((size_t)i * j->H + h0 + g) * D;
        float r = 1.0f / l[g];
        for (int d = 0; d < D; d++) oh[d] = acc[g][d] * r;
    }
}

static void cpu_att_task(void *ctx, int task, int worker) {
    (void)worker;
    const cpu_att_job *j = ctx;
    int per_token = j->H / j->heads, lo, hi;
    cpu_split_range(j->bt->n_tokens * per_token, j->n_tasks, task, 1, &lo, &hi);
    for (int it = lo; it < hi; it++)
        cpu_att_heads(j, it / per_token, it % per_token * j->heads, j->heads);
}

/* Query heads per work item: as many of a kv head's group as CPU_ATT_GROUP allows (each
 * cached row read once for all of them), fewer when that would leave a pool thread without an
 * item (a decode step's few tokens). A decode's items are equal work, so one each is enough:
 * two each made every thread read the whole cache twice (Gemma 4's one kv head). */
static int cpu_att_heads_per_item(int H, int KV, int n_tokens, int threads) {
    int group = H / KV, best = 1;
    for (int d = 1; d <= group && d <= CPU_ATT_GROUP; d++)
        if (group % d == 0 && (d == 1 || (int64_t)n_tokens * (H / d) >= (int64_t)threads)) best = d;
    return best;
}

void cpu_attention(backend *b, float *out, const float *q, const bk_kv *kv, const bk_batch *bt,
                   int H, int KV, int D, float scale, int window, float softcap) {
    assert(H % KV == 0 && kv->width == KV * D);
    if (D > CPU_ATT_MAX_D) { /* no model we know has such heads: correct, slow */
        cpu_attention_ref(out, q, kv, bt, H, KV, D, scale, window, softcap);
        return;
    }
    cpu_att_job j = {.out = out,
                     .q = q,
                     .kv = kv,
                     .bt = bt,
                     .H = H,
                     .KV = KV,
                     .D = D,
                     .window = window,
                     .scale = scale,
                     .softcap = softcap,
                     .k = cpu_impl_of(b)->k};
    j.heads = cpu_att_heads_per_item(H, KV, bt->n_tokens, b->threads);
    int items = bt->n_tokens * (H / j.heads);
    /* Cost grows with the positions seen; the last token's position bounds it. */
    int64_t span = bt->n_tokens ? bt->tok_pos[bt->n_tokens - 1] + 1 : 1;
    if (window > 0 && span > window) span = window;
    j.n_tasks = cpu_backend_task_count(b, items, span * D * 4 * j.heads);
    cpu_pool_run(cpu_impl_of(b)->pool, cpu_att_task, &j, j.n_tasks);
}
