/* cpu_gated_delta.c - the gated delta rule (Qwen3.5 spec §5.2.7) on the CPU.
 *
 * The op runs every run, long or short, as the recurrence token by token, so a sequence's
 * outputs and state are the same bits whether its prompt came in one step, in pieces or
 * one token at a time, alone or batched, computed or restored from the prefix cache: the
 * golden tests hold those at tolerance 0 (README, Numerics). The chunked form
 * (cpu_gated_delta_chunk.c) is faster on this op at prefill lengths (BENCHMARKS.md,
 * "Chunked recurrences on the CPU"), but it equals the recurrence only to rounding, and
 * its rounding depends on where a run starts and ends, so turning it on would give those
 * identities up for 1-2% of a prefill (the op is a small part of it next to the
 * projections). Runs of CPU_GATED_DELTA_CHUNK_MIN tokens or more would take it (INT_MAX:
 * none); cpu_gated_delta_run picks the form per call for tests, benchmarks and as the
 * reference of a GPU chunked kernel.
 *
 * The recurrence's per-token work is two passes over one head's state (64 KiB at
 * dk = dv = 128, resident in L1/L2), vectorised over dv by the ISA kernel delta_step. Work
 * items are (sequence, value head) pairs: each owns its state. The V-to-K head mapping
 * (BK_VHEAD_*) only picks the q, k a head reads, so a head's arithmetic is the same in
 * either order. */
#include <assert.h>
#include <limits.h>
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
    int vmap;                /* BK_VHEAD_*: the key head of a value head */
    const cpu_kernels *kern; /* NULL: the reference token step */
    int chunk_min;           /* runs of at least this many tokens take the chunked form */
    float *tile;             /* the pool's per-worker scratch (cpu_impl.tile) */
    cpu_tile_gemm_fn gemm;
} cpu_delta_job;

static void cpu_delta_item(void *ctx, int item, int worker) {
    const cpu_delta_job *j = ctx;
    int s = item / j->Hv, h = item % j->Hv;
    int hk = j->vmap == BK_VHEAD_TILED ? h % j->Hk : h / (j->Hv / j->Hk);
    const bk_batch *bt = j->bt;
    size_t hs = (size_t)j->dk * j->dv;
    float *S = j->state + ((size_t)bt->slot[s] * j->Hv + h) * hs;
    if (j->kern && bt->len[s] >= j->chunk_min) {
        size_t t0 = (size_t)bt->start[s];
        cpu_gated_delta_chunk_head(
            S, j->out + (t0 * j->Hv + h) * j->dv, j->Hv * j->dv,
            j->q + t0 * j->ld_qk + (size_t)hk * j->dk, j->k + t0 * j->ld_qk + (size_t)hk * j->dk,
            j->ld_qk, j->v + t0 * j->ld_v + (size_t)h * j->dv, j->ld_v, j->g + t0 * j->Hv + h,
            j->beta + t0 * j->Hv + h, j->Hv, bt->len[s], j->dk, j->dv,
            j->tile + (size_t)worker * CPU_TILE_SCRATCH_FLOATS, j->gemm);
        return;
    }
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

void cpu_gated_delta_run(backend *b, float *out, const float *q, const float *k, int ld_qk,
                         const float *v, int ld_v, const float *g, const float *beta, float *state,
                         const bk_batch *bt, int Hk, int Hv, int dk, int dv, int vmap,
                         int chunk_min) {
    assert(Hk > 0 && Hv % Hk == 0);
    if (!cpu_gated_delta_chunk_fits(dk, dv)) chunk_min = INT_MAX;
    cpu_delta_job j = {.out = out,
                       .state = state,
                       .q = q,
                       .k = k,
                       .v = v,
                       .g = g,
                       .beta = beta,
                       .bt = bt,
                       .ld_qk = ld_qk,
                       .ld_v = ld_v,
                       .Hk = Hk,
                       .Hv = Hv,
                       .dk = dk,
                       .dv = dv,
                       .vmap = vmap,
                       .kern = b ? cpu_impl_of(b)->k : NULL,
                       .chunk_min = b ? chunk_min : INT_MAX,
                       .tile = b ? cpu_impl_of(b)->tile : NULL,
                       .gemm = b ? cpu_tile_gemm_of(b) : NULL};
    int items = bt->n_seqs * Hv;
    /* Items are pulled one at a time, so unequal sequence lengths still balance. */
    int n = !b ? 1
               : cpu_backend_task_count(b, items,
                                        (int64_t)4 * dk * dv *
                                            (bt->n_tokens / (bt->n_seqs ? bt->n_seqs : 1) + 1));
    if (n == 1) {
        for (int it = 0; it < items; it++) cpu_delta_item(&j, it, 0);
        return;
    }
    cpu_pool_run(cpu_impl_of(b)->pool, cpu_delta_item, &j, items);
}

void cpu_gated_delta(backend *b, float *out, const float *q, const float *k, int ld_qk,
                     const float *v, int ld_v, const float *g, const float *beta, float *state,
                     const bk_batch *bt, int Hk, int Hv, int dk, int dv, int vmap) {
    cpu_gated_delta_run(b, out, q, k, ld_qk, v, ld_v, g, beta, state, bt, Hk, Hv, dk, dv, vmap,
                        CPU_GATED_DELTA_CHUNK_MIN);
}

void cpu_gated_delta_ref(float *out, const float *q, const float *k, int ld_qk, const float *v,
                         int ld_v, const float *g, const float *beta, float *state,
                         const bk_batch *bt, int Hk, int Hv, int dk, int dv, int vmap) {
    cpu_gated_delta_run(NULL, out, q, k, ld_qk, v, ld_v, g, beta, state, bt, Hk, Hv, dk, dv, vmap,
                        INT_MAX);
}
