/* cpu_attention.c - the kv-cache write and causal GQA attention on the CPU.
 *
 * The reference is the textbook three passes (max, sum, weighted sum) recomputing the
 * scores, so it needs no scratch. The backend entry runs one (token, query head) per work
 * item with an online softmax over blocks of CPU_ATT_BLOCK keys: scores of a block live on
 * the stack, the running output in a stack row of D floats, so nothing is allocated and
 * no buffer is sized by the context length. */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

enum {
    CPU_ATT_BLOCK = 64,  /* keys scored before the running output is rescaled */
    CPU_ATT_MAX_D = 1024 /* largest head dim the stack accumulator holds (Gemma 4: 512) */
};

void cpu_attention_kv_store_ref(float *kc, float *vc, const float *k, const float *v,
                                const bk_batch *bt, int kvw, int cap) {
    for (int i = 0; i < bt->n_tokens; i++) {
        size_t row = (size_t)bt->slot[bt->tok_seq[i]] * cap + (size_t)(bt->tok_pos[i] % cap);
        memcpy(kc + row * kvw, k + (size_t)i * kvw, (size_t)kvw * sizeof(float));
        memcpy(vc + row * kvw, v + (size_t)i * kvw, (size_t)kvw * sizeof(float));
    }
}

/* Score of query row q against cached position p (softcap applied). */
static float cpu_att_score(const float *q, const float *kc, size_t slot_row0, int p, int cap,
                           int KV, int kvh, int D, float scale, float softcap) {
    const float *kr = kc + (slot_row0 + (size_t)(p % cap)) * KV * D + (size_t)kvh * D;
    float s = 0.0f;
    for (int d = 0; d < D; d++) s += q[d] * kr[d];
    s *= scale;
    if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
    return s;
}

void cpu_attention_ref(float *out, const float *q, const float *kc, const float *vc,
                       const bk_batch *bt, int H, int KV, int D, int cap, float scale, int window,
                       float softcap) {
    int group = H / KV;
    for (int i = 0; i < bt->n_tokens; i++) {
        int p = bt->tok_pos[i];
        int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
        size_t row0 = (size_t)bt->slot[bt->tok_seq[i]] * cap;
        for (int h = 0; h < H; h++) {
            const float *qh = q + ((size_t)i * H + h) * D;
            float *oh = out + ((size_t)i * H + h) * D;
            int kvh = h / group;
            float mx = -INFINITY, sum = 0.0f;
            for (int t = lo; t <= p; t++) {
                float s = cpu_att_score(qh, kc, row0, t, cap, KV, kvh, D, scale, softcap);
                mx = s > mx ? s : mx;
            }
            for (int t = lo; t <= p; t++)
                sum += expf(cpu_att_score(qh, kc, row0, t, cap, KV, kvh, D, scale, softcap) - mx);
            for (int d = 0; d < D; d++) oh[d] = 0.0f;
            for (int t = lo; t <= p; t++) {
                float w =
                    expf(cpu_att_score(qh, kc, row0, t, cap, KV, kvh, D, scale, softcap) - mx) /
                    sum;
                const float *vr = vc + (row0 + (size_t)(t % cap)) * KV * D + (size_t)kvh * D;
                for (int d = 0; d < D; d++) oh[d] += w * vr[d];
            }
        }
    }
}

void cpu_attention_kv_store(backend *b, float *kc, float *vc, const float *k, const float *v,
                            const bk_batch *bt, int kvw, int cap) {
    (void)b; /* a copy of m rows: memory speed on one thread already */
    cpu_attention_kv_store_ref(kc, vc, k, v, bt, kvw, cap);
}

typedef struct {
    float *out;
    const float *q, *kc, *vc;
    const bk_batch *bt;
    int H, KV, D, cap, window, n_tasks;
    float scale, softcap;
    const cpu_kernels *k;
} cpu_att_job;

/* One query head of one token: online softmax (running max mx, running sum l, output acc
 * rescaled by exp(old max − new max) whenever a block raises the max). */
static void cpu_att_one(const cpu_att_job *j, int i, int h) {
    const bk_batch *bt = j->bt;
    int D = j->D, kvh = h / (j->H / j->KV), p = bt->tok_pos[i];
    int lo = j->window > 0 && p - j->window + 1 > 0 ? p - j->window + 1 : 0;
    size_t row0 = (size_t)bt->slot[bt->tok_seq[i]] * j->cap, stride = (size_t)j->KV * D;
    const float *qh = j->q + ((size_t)i * j->H + h) * D;
    const float *kbase = j->kc + (size_t)kvh * D, *vbase = j->vc + (size_t)kvh * D;
    float acc[CPU_ATT_MAX_D], sc[CPU_ATT_BLOCK];
    float mx = -INFINITY, l = 0.0f;
    memset(acc, 0, (size_t)D * sizeof(float));
    for (int t0 = lo; t0 <= p; t0 += CPU_ATT_BLOCK) {
        int nb = p + 1 - t0 < CPU_ATT_BLOCK ? p + 1 - t0 : CPU_ATT_BLOCK;
        float bmax = -INFINITY;
        for (int t = 0; t < nb; t++) {
            const float *kr = kbase + (row0 + (size_t)((t0 + t) % j->cap)) * stride;
            float s = j->k->dot(qh, kr, D) * j->scale;
            if (j->softcap > 0.0f) s = j->softcap * tanhf(s / j->softcap);
            sc[t] = s;
            bmax = s > bmax ? s : bmax;
        }
        float nmx = bmax > mx ? bmax : mx;
        float c = expf(mx - nmx); /* 0 on the first block (mx = -inf) */
        l = l * c + j->k->exp_sum(sc, sc, nmx, nb);
        for (int t = 0; t < nb; t++) {
            const float *vr = vbase + (row0 + (size_t)((t0 + t) % j->cap)) * stride;
            j->k->axpby(acc, vr, sc[t], t == 0 ? c : 1.0f, D);
        }
        mx = nmx;
    }
    float *oh = j->out + ((size_t)i * j->H + h) * D;
    float r = 1.0f / l;
    for (int d = 0; d < D; d++) oh[d] = acc[d] * r;
}

static void cpu_att_task(void *ctx, int task, int worker) {
    (void)worker;
    const cpu_att_job *j = ctx;
    int lo, hi;
    cpu_split_range(j->bt->n_tokens * j->H, j->n_tasks, task, 1, &lo, &hi);
    for (int it = lo; it < hi; it++) cpu_att_one(j, it / j->H, it % j->H);
}

void cpu_attention(backend *b, float *out, const float *q, const float *kc, const float *vc,
                   const bk_batch *bt, int H, int KV, int D, int cap, float scale, int window,
                   float softcap) {
    assert(H % KV == 0);
    if (D > CPU_ATT_MAX_D) { /* no model we know has such heads: correct, slow */
        cpu_attention_ref(out, q, kc, vc, bt, H, KV, D, cap, scale, window, softcap);
        return;
    }
    cpu_att_job j = {.out = out,
                     .q = q,
                     .kc = kc,
                     .vc = vc,
                     .bt = bt,
                     .H = H,
                     .KV = KV,
                     .D = D,
                     .cap = cap,
                     .window = window,
                     .scale = scale,
                     .softcap = softcap,
                     .k = cpu_impl_of(b)->k};
    int items = bt->n_tokens * H;
    /* Cost grows with the positions seen; the last token's position bounds it. */
    int64_t span = bt->n_tokens ? bt->tok_pos[bt->n_tokens - 1] + 1 : 1;
    if (window > 0 && span > window) span = window;
    j.n_tasks = cpu_backend_task_count(b, items, span * D * 4);
    cpu_pool_run(cpu_impl_of(b)->pool, cpu_att_task, &j, j.n_tasks);
}
