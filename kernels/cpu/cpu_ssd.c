/* cpu_ssd.c - the Mamba2 selective state space scan (SSD) on the CPU: Nemotron-H spec
 * §6.4-6.5 and §9, the `ssd` op of kernels/backend.h.
 *
 * Every run, prefill or decode, uses the per-token recurrence. It is exact (the chunked
 * SSD of spec §7 equals it only to rounding), and on the CPU its cost is small next to the
 * projections around it: P·N multiply-adds per head and token, 3.9 MFLOP per token and
 * layer at the 4B's 96 × 80 × 128, against 2 · 79 M for in_proj + out_proj. A head's state
 * (40 KiB at P = 80, N = 128) stays in L1/L2 for a whole prefill run. Work items are
 * (sequence, head) pairs: each owns its state, so no two items write the same memory. The
 * token step is the ISA's (cpu_ssd_avx2.c, cpu_ssd_avx512.c), vectorised over N. */
#include <assert.h>
#include <math.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_mamba.h"

/* Δ = softplus(v) as torch computes it (threshold 20: v itself above), then the optional
 * floor: transformers' time_step_min in its prefill (spec §11.1), off when dt_min <= 0. */
static inline float cpu_ssd_delta(float v, float dt_min) {
    float d = v > 20.0f ? v : log1pf(expf(v));
    return dt_min > 0.0f && d < dt_min ? dt_min : d;
}

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
} cpu_ssd_job;

/* Item = sequence item / H, head item % H, reading group h / (H / G) (consecutive heads
 * share a group: spec §6.3, repeat_interleave). */
static void cpu_ssd_item(void *ctx, int item, int worker) {
    (void)worker;
    const cpu_ssd_job *j = ctx;
    const bk_batch *bt = j->bt;
    int s = item / j->H, h = item % j->H, g = h / (j->H / j->G);
    float A = -expf(cpu_weight_at(j->A_log, (size_t)h));
    float bias = cpu_weight_at(j->dt_bias, (size_t)h), d = cpu_weight_at(j->D, (size_t)h);
    float *S = j->state + ((size_t)bt->slot[s] * j->H + h) * (size_t)j->P * j->N;
    for (int t = bt->start[s]; t < bt->start[s] + bt->len[s]; t++) {
        float delta = cpu_ssd_delta(j->dt[(size_t)t * j->ld_dt + h] + bias, j->dt_min);
        const float *x = j->x + (size_t)t * j->ld_x + (size_t)h * j->P;
        const float *B = j->B + (size_t)t * j->ld_bc + (size_t)g * j->N;
        const float *C = j->C + (size_t)t * j->ld_bc + (size_t)g * j->N;
        float *y = j->y + ((size_t)t * j->H + h) * j->P;
        j->step(S, y, x, B, C, expf(delta * A), delta, d, j->P, j->N);
    }
}

void cpu_ssd_ref(float *y, const float *x, int ld_x, const float *B, const float *C, int ld_bc,
                 const float *dt, int ld_dt, const bk_weight *A_log, const bk_weight *dt_bias,
                 const bk_weight *D, float *state, const bk_batch *bt, int H, int P, int N, int G,
                 float dt_min) {
    cpu_ssd_job j = {y,
                     state,
                     x,
                     B,
                     C,
                     dt,
                     A_log,
                     dt_bias,
                     D,
                     bt,
                     ld_x,
                     ld_bc,
                     ld_dt,
                     H,
                     P,
                     N,
                     G,
                     dt_min,
                     cpu_ssd_token_scalar};
    for (int it = 0; it < bt->n_seqs * H; it++) cpu_ssd_item(&j, it, 0);
}

/* The token step of the ISA the backend picked at create. */
static cpu_ssd_token_fn cpu_ssd_step_of(const backend *b) {
    switch (cpu_backend_isa(b)) {
    case CPU_ISA_AVX512: return cpu_ssd_avx512_token;
    case CPU_ISA_AVX2: return cpu_ssd_avx2_token;
    default: return cpu_ssd_token_scalar;
    }
}

void cpu_ssd(backend *b, float *y, const float *x, int ld_x, const float *B, const float *C,
             int ld_bc, const float *dt, int ld_dt, const bk_weight *A_log,
             const bk_weight *dt_bias, const bk_weight *D, float *state, const bk_batch *bt, int H,
             int P, int N, int G, float dt_min) {
    assert(G > 0 && H % G == 0);
    cpu_ssd_job j = {y,     state, x, B, C, dt, A_log,  dt_bias,           D, bt, ld_x,
                     ld_bc, ld_dt, H, P, N, G,  dt_min, cpu_ssd_step_of(b)};
    int items = bt->n_seqs * H;
    /* Items are pulled one at a time, so sequences of unequal length still balance. */
    int64_t per_item = (int64_t)4 * P * N * (bt->n_tokens / (bt->n_seqs ? bt->n_seqs : 1) + 1);
    if (cpu_backend_task_count(b, items, per_item) == 1) {
        for (int it = 0; it < items; it++) cpu_ssd_item(&j, it, 0);
        return;
    }
    cpu_pool_run(cpu_impl_of(b)->pool, cpu_ssd_item, &j, items);
}
