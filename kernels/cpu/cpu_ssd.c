/* cpu_ssd.c - the Mamba2 selective state space scan (SSD) on the CPU: Nemotron-H spec
 * §6.4-6.5 and §9, the `ssd` op of kernels/backend.h.
 *
 * Every run, prefill or decode, uses the per-token recurrence, for the reason
 * cpu_gated_delta.c gives: it keeps a sequence's bits independent of how its tokens were
 * split into steps, which the chunked SSD (cpu_ssd_chunk.c, spec §7) cannot, and the scan
 * is a small part of a prefill: P·N multiply-adds per head and token, 3.9 MFLOP per token
 * and layer at the 4B's 96 × 80 × 128, against 2 · 79 M for in_proj + out_proj. On
 * AVX-512 the recurrence keeps a span's state rows in registers (cpu_ssd_item), which
 * brought it within 1.2x of the chunked form (one layer of the 4B, 128 tokens on 2 Zen 4
 * threads: 7.5 -> 4.7 ms, chunked 3.9; tools/bench_cpu_mixers.c). Runs of
 * CPU_SSD_CHUNK_MIN tokens or more would take the chunked form (INT_MAX: none);
 * cpu_ssd_run picks it per call for tests, benchmarks and GPU references.
 *
 * A head's state (40 KiB at P = 80, N = 128) stays in L1/L2 for a whole prefill run. Work
 * items are (sequence, head) pairs: each owns its state, so no two items write the same
 * memory; the chunked form's items are (sequence, group, part of the group's heads). The
 * token step is the ISA's (cpu_ssd_avx2.c, cpu_ssd_avx512.c), vectorised over N. */
#include <assert.h>
#include <limits.h>
#include <math.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_mamba.h"

void cpu_ssd_token_scalar(float *restrict S, float *restrict y, const float *restrict x,
                          const float *restrict B, const float *restrict C, float a, float dt,
                          float d, int P, int N) {
    for (int p = 0; p < P; p++) {
        float *Sp = S + (size_t)p * N;
        float dx = dt * x[p], acc = 0.0f;
        for (int n = 0; n < N; n++) {
            float s = a * Sp[n] + dx * B[n];
            Sp[n] = s;
            acc += s * C[n];
        }
        y[p] = acc + d * x[p];
    }
}

typedef struct {
    float *y, *state;
    const float *x, *B, *C, *dt;
    const bk_weight *A_log, *dt_bias, *D;
    const bk_batch *bt;
    int ld_x, ld_bc, ld_dt, H, P, N, G;
    float dt_min;
    cpu_ssd_token_fn step;
    cpu_ssd_span_fn span; /* the ISA's span of tokens, or NULL: token steps only */
    int chunk_min;        /* runs of at least this many tokens take the chunked form */
    int parts;            /* chunked form: work items per (sequence, group) */
    float *tile;          /* the pool's per-worker scratch (cpu_impl.tile) */
    cpu_tile_gemm_fn gemm;
} cpu_ssd_job;

/* Tokens a per-token item takes at a time: their B and C (1 KiB a token at N = 128) stay
 * in L1 while the state's rows go through them. */
#define CPU_SSD_SPAN 16

/* Item = sequence item / H, head item % H, reading group h / (H / G) (consecutive heads
 * share a group: spec §6.3, repeat_interleave). Runs of chunk_min tokens or more are the
 * chunked items' (cpu_ssd_chunk_item). On AVX-512 a span of tokens goes through the state
 * a few rows at a time, each row held in registers from the span's first token to its
 * last (a row of S_t needs only the same row of S_{t-1}): the token step's operations in
 * its order, bit for bit, without storing and reloading the state every token. */
static void cpu_ssd_item(void *ctx, int item, int worker) {
    (void)worker;
    const cpu_ssd_job *j = ctx;
    const bk_batch *bt = j->bt;
    int s = item / j->H, h = item % j->H, g = h / (j->H / j->G);
    if (bt->len[s] >= j->chunk_min) return;
    float A = -expf(cpu_weight_at(j->A_log, (size_t)h));
    float bias = cpu_weight_at(j->dt_bias, (size_t)h), d = cpu_weight_at(j->D, (size_t)h);
    float *S = j->state + ((size_t)bt->slot[s] * j->H + h) * (size_t)j->P * j->N;
    float delta[CPU_SSD_SPAN], decay[CPU_SSD_SPAN];
    for (int t0 = bt->start[s], end = bt->start[s] + bt->len[s]; t0 < end; t0 += CPU_SSD_SPAN) {
        int n = end - t0 < CPU_SSD_SPAN ? end - t0 : CPU_SSD_SPAN;
        for (int i = 0; i < n; i++) {
            delta[i] = cpu_ssd_delta(j->dt[(size_t)(t0 + i) * j->ld_dt + h] + bias, j->dt_min);
            decay[i] = expf(delta[i] * A);
        }
        const float *x = j->x + (size_t)t0 * j->ld_x + (size_t)h * j->P;
        const float *B = j->B + (size_t)t0 * j->ld_bc + (size_t)g * j->N;
        const float *C = j->C + (size_t)t0 * j->ld_bc + (size_t)g * j->N;
        float *y = j->y + ((size_t)t0 * j->H + h) * j->P;
        int ld_y = j->H * j->P;
        if (j->span &&
            j->span(S, y, ld_y, x, j->ld_x, B, C, j->ld_bc, decay, delta, d, j->P, j->N, n))
            continue;
        for (int i = 0; i < n; i++)
            j->step(S, y + (size_t)i * ld_y, x + (size_t)i * j->ld_x, B + (size_t)i * j->ld_bc,
                    C + (size_t)i * j->ld_bc, decay[i], delta[i], d, j->P, j->N);
    }
}

/* Most heads one chunked item takes (its per-head constants live on the stack). */
#define CPU_SSD_PART_HEADS 32

/* Chunked item = (sequence, group, part): part p of the group's heads split in j->parts
 * (the heads of a part share its gathered B, C and B Cᵀ). Only runs of chunk_min tokens or
 * more. */
static void cpu_ssd_chunk_item(void *ctx, int item, int worker) {
    const cpu_ssd_job *j = ctx;
    const bk_batch *bt = j->bt;
    int per_seq = j->G * j->parts, s = item / per_seq, g = item % per_seq / j->parts;
    int part = item % j->parts, hg = j->H / j->G;
    if (bt->len[s] < j->chunk_min) return;
    int h0 = g * hg + part * hg / j->parts, nh = g * hg + (part + 1) * hg / j->parts - h0;
    float A[CPU_SSD_PART_HEADS], bias[CPU_SSD_PART_HEADS], d[CPU_SSD_PART_HEADS];
    assert(nh <= CPU_SSD_PART_HEADS);
    for (int i = 0; i < nh; i++) {
        A[i] = -expf(cpu_weight_at(j->A_log, (size_t)(h0 + i)));
        bias[i] = cpu_weight_at(j->dt_bias, (size_t)(h0 + i));
        d[i] = cpu_weight_at(j->D, (size_t)(h0 + i));
    }
    size_t t0 = (size_t)bt->start[s];
    cpu_ssd_chunk_group(j->state + ((size_t)bt->slot[s] * j->H + h0) * (size_t)j->P * j->N,
                        j->y + t0 * j->H * j->P + (size_t)h0 * j->P, j->H * j->P,
                        j->x + t0 * j->ld_x + (size_t)h0 * j->P, j->ld_x,
                        j->B + t0 * j->ld_bc + (size_t)g * j->N,
                        j->C + t0 * j->ld_bc + (size_t)g * j->N, j->ld_bc,
                        j->dt + t0 * j->ld_dt + h0, j->ld_dt, A, bias, d, j->dt_min, nh, bt->len[s],
                        j->P, j->N, j->tile + (size_t)worker * CPU_TILE_SCRATCH_FLOATS, j->gemm);
}

/* The token step of the ISA the backend picked at create. */
static cpu_ssd_token_fn cpu_ssd_step_of(const backend *b) {
    switch (cpu_backend_isa(b)) {
    case CPU_ISA_AVX512: return cpu_ssd_avx512_token;
    case CPU_ISA_AVX2: return cpu_ssd_avx2_token;
    default: return cpu_ssd_token_scalar;
    }
}

void cpu_ssd_run(backend *b, float *y, const float *x, int ld_x, const float *B, const float *C,
                 int ld_bc, const float *dt, int ld_dt, const bk_weight *A_log,
                 const bk_weight *dt_bias, const bk_weight *D, float *state, const bk_batch *bt,
                 int H, int P, int N, int G, float dt_min, int chunk_min) {
    assert(G > 0 && H % G == 0);
    cpu_ssd_job j = {.y = y,
                     .state = state,
                     .x = x,
                     .B = B,
                     .C = C,
                     .dt = dt,
                     .A_log = A_log,
                     .dt_bias = dt_bias,
                     .D = D,
                     .bt = bt,
                     .ld_x = ld_x,
                     .ld_bc = ld_bc,
                     .ld_dt = ld_dt,
                     .H = H,
                     .P = P,
                     .N = N,
                     .G = G,
                     .dt_min = dt_min,
                     .step = b ? cpu_ssd_step_of(b) : cpu_ssd_token_scalar,
                     .span = b && cpu_backend_isa(b) == CPU_ISA_AVX512 ? cpu_ssd_avx512_span : NULL,
                     .chunk_min = b && cpu_ssd_chunk_fits(P, N) ? chunk_min : INT_MAX,
                     .tile = b ? cpu_impl_of(b)->tile : NULL,
                     .gemm = b ? cpu_tile_gemm_of(b) : NULL};
    int items = bt->n_seqs * H, n_long = 0;
    for (int s = 0; s < bt->n_seqs; s++) n_long += bt->len[s] >= j.chunk_min;
    /* Items are pulled one at a time, so sequences of unequal length still balance. */
    int64_t per_item = (int64_t)4 * P * N * (bt->n_tokens / (bt->n_seqs ? bt->n_seqs : 1) + 1);
    int one = !b || cpu_backend_task_count(b, items, per_item) == 1;
    if (n_long < bt->n_seqs) {
        if (one)
            for (int it = 0; it < items; it++) cpu_ssd_item(&j, it, 0);
        else cpu_pool_run(cpu_impl_of(b)->pool, cpu_ssd_item, &j, items);
    }
    if (n_long == 0) return;
    /* Split each group's heads so there are about two items per thread, but no more parts
     * than heads (each part gathers the group's B and C once per chunk). */
    int hg = H / G, want = 2 * b->threads;
    j.parts = (want + n_long * G - 1) / (n_long * G);
    if (j.parts < (hg + CPU_SSD_PART_HEADS - 1) / CPU_SSD_PART_HEADS)
        j.parts = (hg + CPU_SSD_PART_HEADS - 1) / CPU_SSD_PART_HEADS;
    if (j.parts > hg) j.parts = hg;
    int chunk_items = bt->n_seqs * G * j.parts;
    if (one)
        for (int it = 0; it < chunk_items; it++) cpu_ssd_chunk_item(&j, it, 0);
    else cpu_pool_run(cpu_impl_of(b)->pool, cpu_ssd_chunk_item, &j, chunk_items);
}

void cpu_ssd(backend *b, float *y, const float *x, int ld_x, const float *B, const float *C,
             int ld_bc, const float *dt, int ld_dt, const bk_weight *A_log,
             const bk_weight *dt_bias, const bk_weight *D, float *state, const bk_batch *bt, int H,
             int P, int N, int G, float dt_min) {
    cpu_ssd_run(b, y, x, ld_x, B, C, ld_bc, dt, ld_dt, A_log, dt_bias, D, state, bt, H, P, N, G,
                dt_min, CPU_SSD_CHUNK_MIN);
}

void cpu_ssd_ref(float *y, const float *x, int ld_x, const float *B, const float *C, int ld_bc,
                 const float *dt, int ld_dt, const bk_weight *A_log, const bk_weight *dt_bias,
                 const bk_weight *D, float *state, const bk_batch *bt, int H, int P, int N, int G,
                 float dt_min) {
    cpu_ssd_run(NULL, y, x, ld_x, B, C, ld_bc, dt, ld_dt, A_log, dt_bias, D, state, bt, H, P, N, G,
                dt_min, INT_MAX);
}
