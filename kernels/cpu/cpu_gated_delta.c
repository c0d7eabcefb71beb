/* cpu_gated_delta.c - the gated delta rule (Qwen3.5 spec §5.2.7) on the CPU.
 *
 * Every run, long or short, uses the recurrence token by token: it is exact (the chunked
 * form of §7.1 equals it only up to rounding), costs O(T·dk·dv) per head like the chunked
 * form's state updates, and its per-token work is two passes over one head's state
 * (64 KiB at dk = dv = 128, resident in L1/L2), vectorised over dv by the ISA kernel
 * delta_step. Work items are (sequence, value head) pairs: each owns its state. */
#include <assert.h>
#include <math.h>

#include "kernels/cpu/cpu_internal.h"

/* Plain-math token step for one head: S = e^g·S; d = beta(v − Sᵀk); S += k ⊗ d; o = Sᵀq. */
static void cpu_delta_token_ref(float *S, float *o, const float *q, const float *k, const float *v,
                                float g, float beta, int dk, int dv) {
    float decay = expf(g);
    for (size_t i = 0; i < (size_t)dk * dv; i++) S[i] *= decay;
    for (int j = 0; j < dv; j++) {
        float kv = 0.0f;
        for (int i = 0; i < dk; i++) kv += S[(size_t)i * dv + j] * k[i];
        float d = beta * (v[j] - kv);
        for (int i = 0; i < dk; i++) S[(size_t)i * dv + j] += k[i] * d;
    }
    for (int j = 0; j < dv; j++) {
        float acc = 0.0f;
        for (int i = 0; i < dk; i++) acc += S[(size_t)i * dv + j] * q[i];
        o[j] = acc;
    }
}

typedef struct {
    float *out, *state;
    const float *q, *k, *v, *g, *beta;
    const bk_batch *bt;
    int ld_qk, ld_v, Hk, Hv, dk, dv;
    const cpu_kernels *kern; /* NULL: the reference token step */
} cpu_delta_job;

static void cpu_delta_item(void *ctx, int item, int worker) {
    (void)worker;
    const cpu_delta_job *j = ctx;
    int s = item / j->Hv, h = item % j->Hv, hk = h / (j->Hv / j->Hk);
    const bk_batch *bt = j->bt;
    size_t hs = (size_t)j->dk * j->dv;
    float *S = j->state + ((size_t)bt->slot[s] * j->Hv + h) * hs;
    for (int t = bt->start[s]; t < bt->start[s] + bt->len[s]; t++) {
        const float *q = j->q + (size_t)t * j->ld_qk + (size_t)hk * j->dk;
        const float *k = j->k + (size_t)t * j->ld_qk + (size_t)hk * j->dk;
        const float *v = j->v + (size_t)t * j->ld_v + (size_t)h * j->dv;
        float *o = j->out + ((size_t)t * j->Hv + h) * j->dv;
        float g = j->g[(size_t)t * j->Hv + h], beta = j->beta[(size_t)t * j->Hv + h];
        if (j->kern) j->kern->delta_step(S, o, q, k, v, expf(g), beta, j->dk, j->dv);
        else cpu_delta_token_ref(S, o, q, k, v, g, beta, j->dk, j->dv);
    }
}

void cpu_gated_delta_ref(float *out, const float *q, const float *k, int ld_qk, const float *v,
                         int ld_v, const float *g, const float *beta, float *state,
                         const bk_batch *bt, int Hk, int Hv, int dk, int dv) {
    cpu_delta_job j = {out, state, q, k, v, g, beta, bt, ld_qk, ld_v, Hk, Hv, dk, dv, NULL};
    for (int it = 0; it < bt->n_seqs * Hv; it++) cpu_delta_item(&j, it, 0);
}

void cpu_gated_delta(backend *b, float *out, const float *q, const float *k, int ld_qk,
                     const float *v, int ld_v, const float *g, const float *beta, float *state,
                     const bk_batch *bt, int Hk, int Hv, int dk, int dv) {
    assert(Hk > 0 && Hv % Hk == 0);
    cpu_delta_job j = {
        out, state, q, k, v, g, beta, bt, ld_qk, ld_v, Hk, Hv, dk, dv, cpu_impl_of(b)->k};
    int items = bt->n_seqs * Hv;
    /* Items are pulled one at a time, so unequal sequence lengths still balance. */
    int n = cpu_backend_task_count(
        b, items, (int64_t)4 * dk * dv * (bt->n_tokens / (bt->n_seqs ? bt->n_seqs : 1) + 1));
    if (n == 1) {
        for (int it = 0; it < items; it++) cpu_delta_item(&j, it, 0);
        return;
    }
    cpu_pool_run(cpu_impl_of(b)->pool, cpu_delta_item, &j, items);
}
