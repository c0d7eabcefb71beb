/* cpu_mamba.h - the CPU backend's Nemotron-H ops (shared/spec/nemotron_h.md): relu² and
 * the gate-first grouped RMSNorm (kernels/cpu/cpu_mamba.c), and the Mamba2 SSD scan
 * (kernels/cpu/cpu_ssd.c, with per-ISA token steps in cpu_ssd_avx2.c / cpu_ssd_avx512.c).
 *
 * Each op is a scalar reference that reads like the math of kernels/backend.h plus the
 * vtable entry that splits the work over the pool. Not for use outside kernels/cpu and
 * its tests. */
#ifndef STRATA_CPU_MAMBA_H
#define STRATA_CPU_MAMBA_H

#include <stddef.h>

#include "kernels/backend.h"

/* ---- scalar references: the math of kernels/backend.h, single-threaded ---- */
void cpu_mamba_relu2_ref(float *x, size_t n);
void cpu_mamba_rmsnorm_gated_grouped_ref(float *out, const float *x, const float *z,
                                         const bk_weight *w, int m, int width, int group,
                                         float eps);
void cpu_ssd_ref(float *y, const float *x, int ld_x, const float *B, const float *C, int ld_bc,
                 const float *dt, int ld_dt, const bk_weight *A_log, const bk_weight *dt_bias,
                 const bk_weight *D, float *state, const bk_batch *bt, int H, int P, int N, int G,
                 float dt_min);

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

/* ---- vtable entries ---- */
void cpu_mamba_relu2(backend *b, float *x, size_t n);
void cpu_mamba_rmsnorm_gated_grouped(backend *b, float *out, const float *x, const float *z,
                                     const bk_weight *w, int m, int width, int group, float eps);
void cpu_ssd(backend *b, float *y, const float *x, int ld_x, const float *B, const float *C,
             int ld_bc, const float *dt, int ld_dt, const bk_weight *A_log,
             const bk_weight *dt_bias, const bk_weight *D, float *state, const bk_batch *bt, int H,
             int P, int N, int G, float dt_min);

#endif
