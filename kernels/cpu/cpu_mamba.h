/* cpu_mamba.h - the CPU backend's Nemotron-H ops (shared/spec/nemotron_h.md): relu² and
 * the gate-first grouped RMSNorm (kernels/cpu/cpu_mamba.c), and the Mamba2 SSD scan
 * (kernels/cpu/cpu_ssd.c, with per-ISA token steps in cpu_ssd_avx2.c / cpu_ssd_avx512.c,
 * and its chunked form in cpu_ssd_chunk.c).
 *
 * Each op is a scalar reference that reads like the math of kernels/backend.h plus the
 * vtable entry that splits the work over the pool. Not for use outside kernels/cpu and
 * its tests. */
#ifndef STRATA_CPU_MAMBA_H
#define STRATA_CPU_MAMBA_H

#include <limits.h>
#include <math.h>
#include <stddef.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_tile.h"

/* ---- scalar references: the math of kernels/backend.h, single-threaded ---- */
void cpu_mamba_relu2_ref(float *x, size_t n);
void cpu_mamba_rmsnorm_gated_grouped_ref(float *out, const float *x, const float *z,
                                         const bk_weight *w, int m, int width, int group,
                                         float eps);
void cpu_ssd_ref(float *y, const float *x, int ld_x, const float *B, const float *C, int ld_bc,
                 const float *dt, int ld_dt, const bk_weight *A_log, const bk_weight *dt_bias,
                 const bk_weight *D, float *state, const bk_batch *bt, int H, int P, int N, int G,
                 float dt_min);

/* Δ = softplus(v) as torch computes it (threshold 20: v itself above), then the optional
 * floor: transformers' time_step_min in its prefill (spec §11.1), off when dt_min <= 0. */
static inline float cpu_ssd_delta(float v, float dt_min) {
    float d = v > 20.0f ? v : log1pf(expf(v));
    return dt_min > 0.0f && d < dt_min ? dt_min : d;
}

/* One SSD token for one head, state S [P, N] in place:
 *   S[p, n] = a·S[p, n] + (dt·x[p])·B[n];  y[p] = Σ_n S[p, n]·C[n] + d·x[p].
 * The ISA variants fuse the multiply-adds, so they equal the scalar one to f32 rounding. */
typedef void (*cpu_ssd_token_fn)(float *restrict S, float *restrict y, const float *restrict x,
                                 const float *restrict B, const float *restrict C, float a,
                                 float dt, float d, int P, int N);
void cpu_ssd_token_scalar(float *restrict S, float *restrict y, const float *restrict x,
                          const float *restrict B, const float *restrict C, float a, float dt,
                          float d, int P, int N);
void cpu_ssd_avx2_token(float *restrict S, float *restrict y, const float *restrict x,
                        const float *restrict B, const float *restrict C, float a, float dt,
                        float d, int P, int N);
void cpu_ssd_avx512_token(float *restrict S, float *restrict y, const float *restrict x,
                          const float *restrict B, const float *restrict C, float a, float dt,
                          float d, int P, int N);
/* T tokens of one head at once: token t reads x at t·ld_x, B and C at t·ld_bc, its decay
 * a and dt from decay[t] and delta[t], and writes y at t·ld_y; the state stays in
 * registers across the tokens. Equals T calls of the ISA's token step bit for bit. Returns
 * 0 (and does nothing) for a state width it has no path for. */
typedef int (*cpu_ssd_span_fn)(float *restrict S, float *restrict y, int ld_y,
                               const float *restrict x, int ld_x, const float *restrict B,
                               const float *restrict C, int ld_bc, const float *restrict decay,
                               const float *restrict delta, float d, int P, int N, int T);
/* AVX-512's span: N = 128 only. */
int cpu_ssd_avx512_span(float *restrict S, float *restrict y, int ld_y, const float *restrict x,
                        int ld_x, const float *restrict B, const float *restrict C, int ld_bc,
                        const float *restrict decay, const float *restrict delta, float d, int P,
                        int N, int T);

/* ---- the chunked SSD (cpu_ssd_chunk.c) ---- */
/* Tokens per chunk (cpu_ssd_chunk.c says why 32). */
#define CPU_SSD_CHUNK 32
/* Runs this long or longer take the chunked form in the ssd op, shorter ones and decode
 * the recurrence. INT_MAX: every run is the recurrence (cpu_ssd.c says why). */
#define CPU_SSD_CHUNK_MIN INT_MAX
/* 1 when a group's tiles at P, N fit the per-thread scratch (CPU_TILE_SCRATCH_FLOATS). */
int cpu_ssd_chunk_fits(int P, int N);
/* T tokens of nh consecutive heads that share one B/C group, of one sequence, in chunks:
 * head h's state is state + h·P·N ([P, N], updated); token t reads head h's x at
 * t·ld_x + h·P and dt_raw at t·ld_dt + h, the group's B and C at t·ld_bc, and writes y at
 * t·ld_y + h·P. A (= −exp(A_log)), bias (dt_bias) and d (D) are [nh]. ws is the calling
 * worker's scratch; P, N must fit. Equals the recurrence (cpu_ssd_ref) to f32 rounding. */
void cpu_ssd_chunk_group(float *restrict state, float *restrict y, int ld_y,
                         const float *restrict x, int ld_x, const float *restrict B,
                         const float *restrict C, int ld_bc, const float *restrict dt, int ld_dt,
                         const float *restrict A, const float *restrict bias,
                         const float *restrict d, float dt_min, int nh, int T, int P, int N,
                         float *restrict ws, cpu_tile_gemm_fn gemm);
/* The ssd op with runs of chunk_min tokens or more in the chunked form (INT_MAX: the
 * recurrence for all, 1: chunked for all), for tests and benchmarks. b NULL: the reference,
 * cpu_ssd_ref (scalar token steps on the calling thread). */
void cpu_ssd_run(backend *b, float *y, const float *x, int ld_x, const float *B, const float *C,
                 int ld_bc, const float *dt, int ld_dt, const bk_weight *A_log,
                 const bk_weight *dt_bias, const bk_weight *D, float *state, const bk_batch *bt,
                 int H, int P, int N, int G, float dt_min, int chunk_min);

/* ---- vtable entries ---- */
void cpu_mamba_relu2(backend *b, float *x, size_t n);
void cpu_mamba_rmsnorm_gated_grouped(backend *b, float *out, const float *x, const float *z,
                                     const bk_weight *w, int m, int width, int group, float eps);
void cpu_ssd(backend *b, float *y, const float *x, int ld_x, const float *B, const float *C,
             int ld_bc, const float *dt, int ld_dt, const bk_weight *A_log,
             const bk_weight *dt_bias, const bk_weight *D, float *state, const bk_batch *bt, int H,
             int P, int N, int G, float dt_min);

#endif
