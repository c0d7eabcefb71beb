/* cpu_internal.h - what the CPU backend's files share: the per-ISA kernel table, the
 * backend's private state and the scalar reference ops.
 *
 * Each op has a plain-C reference `cpu_<file>_<op>_ref` (cpu_ops_rmsnorm_ref,
 * cpu_attention_ref, ...) that reads like the math in kernels/backend.h; the backend's
 * vtable entries split the work over the pool and call either the reference or the
 * kernels of the ISA picked once at create (style.md §17). Not for use outside
 * kernels/cpu and its tests. */
#ifndef STRATA_CPU_INTERNAL_H
#define STRATA_CPU_INTERNAL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_pool.h"
#include "kernels/cpu/cpu_qmatmul.h"
#include "kernels/cpu/cpu_tile.h"

/* Matmul kernel: out[i, j] = Σ_l x[i, l] · W[j, l] for i < m, n0 <= j < n1, with out rows
 * ldo floats apart, x rows k floats apart and W [*, k] of dtype dt (BF16, F16 or F32).
 * l1d: bytes of the L1 data cache (cpu_impl.l1d); a kernel
 * may use it to pick its loop order, never to change how an output is summed: like the
 * BF16 kernels below, it must sum a given (i, j) the same way whatever m, n0 and n1 are. */
typedef void (*cpu_matmul_fn)(float *restrict out, int ldo, const float *restrict x,
                              const void *restrict w, dtype dt, int k, int m, int n0, int n1,
                              int l1d);
/* BF16-weight matmul kernel: out[i, j] = Σ_l xb[i, l] · W[j, l] for i < m, n0 <= j < n1,
 * where xb is x rounded by the pack kernel, rows ldx elements apart (ldx a multiple of 32,
 * zeros from k to ldx). Each kernel must sum a given (i, j) the same way whatever m, n0
 * and n1 are: that is what keeps a sequence's logits the same alone and in a batch. */
typedef void (*cpu_matmul_bf16_fn)(float *restrict out, int ldo, const uint16_t *restrict xb,
                                   int ldx, const uint16_t *restrict w, int k, int m, int n0,
                                   int n1, int l1d);
/* out[i] = bf16(x[i]) as cpu_pack_bf16_one rounds, for i < n. */
typedef void (*cpu_pack_bf16_fn)(uint16_t *restrict out, const float *restrict x, int n);
/* Sum of n floats (the bandwidth probe's streaming read). */
typedef float (*cpu_sum_fn)(const float *restrict x, size_t n);
/* One gated-delta token for one head, state s [dk, dv] in place (see cpu_gated_delta.c):
 * s = e·s; d = beta·(v − sᵀk); s += k ⊗ d; out = sᵀq. */
typedef void (*cpu_delta_step_fn)(float *restrict s, float *restrict out, const float *restrict q,
                                  const float *restrict k, const float *restrict v, float decay,
                                  float beta, int dk, int dv);
/* Dot product of n floats. */
typedef float (*cpu_dot_fn)(const float *restrict a, const float *restrict b, int n);
/* y[i] = y[i] · c + a · x[i] for i < n (the attention accumulator update). */
typedef void (*cpu_axpby_fn)(float *restrict y, const float *restrict x, float a, float c, int n);
/* out[r] = dot(a, b[r], n) for r < 4, each bit for bit the ISA's dot: four rows' chains side by
 * side, so a short dot's latency is hidden behind the others'. Optional (NULL: four dots). */
typedef void (*cpu_dot4_fn)(const float *restrict a, const float *const *b, int n, float out[4]);
/* axpby(y, x[0], a[0], c, n) then axpby(y, x[r], a[r], 1, n) for r = 1 .. 3, bit for bit, in one
 * pass over y. Optional (NULL: four axpbys). */
typedef void (*cpu_axpy4_fn)(float *restrict y, const float *const *x, const float *a, float c,
                             int n);
/* out[i] = silu(g[i]) · u[i], or silu(g[i]) when u is NULL; out may alias g or u. */
typedef void (*cpu_silu_mul_fn)(float *out, const float *g, const float *u, size_t n);
/* x[i] = x[i] · sigmoid(g[i]). */
typedef void (*cpu_sigmoid_mul_fn)(float *x, const float *g, size_t n);
/* y[i] = exp(x[i] − shift); y may alias x. Returns Σ y[i] (the softmax denominator). */
typedef float (*cpu_exp_sum_fn)(float *y, const float *x, float shift, int n);

typedef struct cpu_kernels {
    const char *name;
    cpu_matmul_fn matmul;
    cpu_matmul_bf16_fn matmul_bf16;
    cpu_pack_bf16_fn pack_bf16;
    cpu_sum_fn sum;
    cpu_delta_step_fn delta_step;
    cpu_dot_fn dot;
    cpu_axpby_fn axpby;
    cpu_dot4_fn dot4;   /* optional */
    cpu_axpy4_fn axpy4; /* optional */
    cpu_silu_mul_fn silu_mul;
    cpu_sigmoid_mul_fn sigmoid_mul;
    cpu_exp_sum_fn exp_sum;
    cpu_quantize_x_fn quantize_x; /* x of a matmul against block-typed W (cpu_qmatmul.h) */
    int q4k_swap_x;               /* qmatmul takes Q4_K's x as cpu_qrows_q4k_swap lays it out */
    int lane_sums;                /* qmatmul's Q4_0 / Q5_0 decode takes x's lane sums */
    cpu_qmatmul_fn qmatmul;
} cpu_kernels;

/* The per-ISA tables; each lives in its own file built with that ISA's flags. */
extern const cpu_kernels cpu_kernels_scalar;
extern const cpu_kernels cpu_kernels_avx2;
extern const cpu_kernels cpu_kernels_avx512;
void cpu_matmul_f32_avx512(float *restrict out, int ldo, const float *restrict x,
                           const void *restrict w, dtype dt, int k, int m, int n0, int n1, int l1d);
void cpu_matmul_f32_avx2(float *restrict out, int ldo, const float *restrict x,
                         const void *restrict w, dtype dt, int k, int m, int n0, int n1, int l1d);
void cpu_matmul_bf16_avx2(float *restrict out, int ldo, const uint16_t *restrict xb, int ldx,
                          const uint16_t *restrict w, int k, int m, int n0, int n1, int l1d);
void cpu_matmul_bf16_avx512(float *restrict out, int ldo, const uint16_t *restrict xb, int ldx,
                            const uint16_t *restrict w, int k, int m, int n0, int n1, int l1d);
void cpu_pack_bf16_avx2(uint16_t *restrict out, const float *restrict x, int n);
void cpu_pack_bf16_avx512(uint16_t *restrict out, const float *restrict x, int n);

/* Bytes of the scratch that holds x rounded to bf16 for BF16 matmuls, allocated with the
 * backend: 4 MiB holds 167 rows of the widest k we serve (Nemotron's 12544-wide down
 * projection), so any decode batch; a larger m runs in row blocks. */
#define CPU_XB_BYTES ((size_t)4 << 20)

/* Floats of per-thread scratch for the chunked scans (cpu_gated_delta_chunk.c,
 * cpu_ssd_chunk.c): 512 KiB, where a 32-token chunk's tiles take 172 KiB at
 * dk = dv = 128 (456 KiB at 256) and 100 KiB at the 4B's SSD head. A run whose tiles would
 * not fit uses the recurrence. Pages nobody touches cost no memory. */
#define CPU_TILE_SCRATCH_FLOATS ((size_t)1 << 17)

typedef struct cpu_prof cpu_prof; /* cpu_profile.c */

typedef struct cpu_impl {
    cpu_pool *pool;
    const cpu_kernels *k; /* picked once at create */
    uint16_t *xb;         /* CPU_XB_BYTES: x packed to bf16 for the matmul in flight */
    float *tile;          /* [threads, CPU_TILE_SCRATCH_FLOATS]: row w is pool worker w's */
    int l1d;              /* bytes of the L1 data cache (the matmuls' loop order) */
    cpu_prof *prof;       /* while profiling: the timing table b->ops points at */
} cpu_impl;

static inline cpu_impl *cpu_impl_of(backend *b) { return (cpu_impl *)b->impl; }

/* Element i of a weight as f32 (BF16 / F16 / F32, a block type's dequantized value;
 * anything else reads 0). */
static inline float cpu_weight_at(const bk_weight *w, size_t i) {
    switch (w->dt) {
    case DTYPE_F32: return ((const float *)w->data)[i];
    case DTYPE_BF16: return dtype_bf16_to_f32(((const uint16_t *)w->data)[i]);
    case DTYPE_F16: return dtype_f16_to_f32(((const uint16_t *)w->data)[i]);
    default: return quant_value_at(w->data, w->dt, i);
    }
}

/* How BF16 matmuls round x: to nearest even, NaN kept quiet, and a subnormal input read
 * as a zero of its sign (as vcvtneps2bf16 does, so every ISA packs the same bits). */
static inline uint16_t cpu_pack_bf16_one(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);
    return dtype_f32_to_bf16(f);
}

/* Splits [0, n) into n_tasks near-equal ranges and returns range t as [*lo, *hi),
 * with boundaries rounded to multiples of align (align >= 1). */
static inline void cpu_split_range(int n, int n_tasks, int t, int align, int *lo, int *hi) {
    int units = (n + align - 1) / align;
    int a = (int)((int64_t)units * t / n_tasks), c = (int)((int64_t)units * (t + 1) / n_tasks);
    *lo = a * align < n ? a * align : n;
    *hi = c * align < n ? c * align : n;
}

/* Task count for `work` units of roughly `unit_cost` scalar operations each: 1 when the
 * whole job is too small to be worth waking workers, else a few tasks per thread. */
int cpu_backend_task_count(backend *b, int64_t work, int64_t unit_cost);

/* The tasks of a matmul of n W rows against m x rows of width k: *n_split ranges of W rows
 * (in 16-row units), each cut into *m_split ranges of x rows (4-row units) when W alone
 * gives fewer tasks than the pool wants and m is a prefill's. Task t takes W range
 * t % n_split and x range t / n_split (cpu_split_range). */
static inline void cpu_matmul_tasks(backend *b, int n, int m, int k, int *n_split, int *m_split) {
    int want = cpu_backend_task_count(b, (int64_t)n * m, (int64_t)k * 2);
    int n_units = (n + 15) / 16;
    *n_split = want < n_units ? want : n_units;
    *m_split = 1;
    if (*n_split < want && m >= 8) {
        int m_units = (m + 3) / 4, ms = (want + *n_split - 1) / *n_split;
        *m_split = ms < m_units ? ms : m_units;
    }
}

/* ---- scalar references (the math of backend.h, single-threaded) ---- */
void cpu_ops_embed_ref(float *out, const bk_weight *table, const int32_t *ids, int m);
void cpu_ops_rmsnorm_ref(float *out, const float *x, const bk_weight *w, int m, int n, int ld,
                         float eps, int mode);
void cpu_ops_rmsnorm_gated_ref(float *out, const float *x, const float *z, const bk_weight *w,
                               int m, int n, float eps);
void cpu_ops_l2norm_ref(float *x, int m, int n, int ld, int gpr, float eps, float scale);
void cpu_ops_add_ref(float *out, const float *a, const float *x, size_t n);
void cpu_ops_residual_ref(float *x, float *xn, const float *delta, const bk_weight *dnorm,
                          int dmode, const bk_weight *s, const bk_weight *nw, int nmode, int m,
                          int n, float eps);
void cpu_ops_silu_mul_ref(float *out, const float *gate, const float *up, int m, int n);
void cpu_ops_sigmoid_mul_ref(float *x, const float *gate, size_t n);
void cpu_ops_split_halves_ref(float *a, float *g, const float *in, int rows, int half);
void cpu_ops_gather_rows_ref(float *out, const float *x, const int32_t *rows, int n, int width);
void cpu_matmul_ref(float *out, const float *x, const bk_weight *w, int m);
/* Row stride of packed x for a BF16 matmul of width k, or 0 when a row would not fit the
 * scratch (then x stays f32, as for other dtypes). */
int cpu_matmul_bf16_ldx(int k);
void cpu_ops_rope_ref(float *x, const bk_batch *bt, const float *inv_freq, int heads, int hd,
                      int rot, int ld);
void cpu_attention_kv_store_ref(const bk_kv *kv, const float *k, const float *v,
                                const bk_batch *bt);
void cpu_attention_ref(float *out, const float *q, const bk_kv *kv, const bk_batch *bt, int H,
                       int KV, int D, float scale, int window, float softcap);
void cpu_conv1d_ref(float *out, const float *x, int ld_x, const bk_weight *w, const bk_weight *bias,
                    float *state, const bk_batch *bt, int C, int K, int act);
void cpu_ops_gdn_gates_ref(float *g, float *beta, const float *a, const float *bb,
                           const bk_weight *A_log, const bk_weight *dt_bias, int m, int Hv);
void cpu_gated_delta_ref(float *out, const float *q, const float *k, int ld_qk, const float *v,
                         int ld_v, const float *g, const float *beta, float *state,
                         const bk_batch *bt, int Hk, int Hv, int dk, int dv, int vmap);

/* ---- the chunked gated delta rule (cpu_gated_delta_chunk.c) ---- */
/* Tokens per chunk: 32, not the reference's 64 (spec §7.1; the size changes only rounding).
 * The intra-chunk terms (K Kᵀ, Q Kᵀ, the solve, P Ũ) cost about C·(dk + dv) multiply-adds
 * per token beside the 3·dk·dv of the state products: 10k of 59k at 32, 20k of 69k at 64,
 * and 32 measured faster (tools/bench_cpu_mixers.c). */
#define CPU_GATED_DELTA_CHUNK 32
/* Runs this long or longer take the chunked form in the gated_delta op, shorter ones and
 * decode the recurrence. INT_MAX: every run is the recurrence (cpu_gated_delta.c says why). */
#define CPU_GATED_DELTA_CHUNK_MIN INT_MAX
/* The gated_delta op with runs of chunk_min tokens or more in the chunked form (INT_MAX:
 * the recurrence for all, 1: chunked for all), for tests and benchmarks. b NULL: the
 * reference, cpu_gated_delta_ref (scalar token steps on the calling thread). */
void cpu_gated_delta_run(backend *b, float *out, const float *q, const float *k, int ld_qk,
                         const float *v, int ld_v, const float *g, const float *beta, float *state,
                         const bk_batch *bt, int Hk, int Hv, int dk, int dv, int vmap,
                         int chunk_min);
/* 1 when one head's tiles at dk, dv fit CPU_TILE_SCRATCH_FLOATS. */
int cpu_gated_delta_chunk_fits(int dk, int dv);
/* T tokens of one (sequence, value head) in chunks, from and into state [dk, dv]: token t
 * reads q, k at t·ld_qk, v at t·ld_v, g, beta at t·ld_gb and writes out at t·ld_out. ws is
 * the calling worker's scratch (CPU_TILE_SCRATCH_FLOATS); dk, dv must fit. Equals the
 * recurrence to f32 rounding. */
void cpu_gated_delta_chunk_head(float *restrict state, float *restrict out, int ld_out,
                                const float *restrict q, const float *restrict k, int ld_qk,
                                const float *restrict v, int ld_v, const float *restrict g,
                                const float *restrict beta, int ld_gb, int T, int dk, int dv,
                                float *restrict ws, cpu_tile_gemm_fn gemm);

/* ---- the backend's vtable entries, defined next to their reference ---- */
/* cpu_profile.c: backend_ops.profile / profile_read (host-clock times per kind of op) */
void cpu_profile(backend *b, int on);
int cpu_profile_read(backend *b, bk_op_time *out, int max);

void cpu_ops_embed(backend *b, float *out, const bk_weight *table, const int32_t *ids, int m);
void cpu_ops_rmsnorm(backend *b, float *out, const float *x, const bk_weight *w, int m, int n,
                     int ld, float eps, int mode);
void cpu_ops_rmsnorm_gated(backend *b, float *out, const float *x, const float *z,
                           const bk_weight *w, int m, int n, float eps);
void cpu_ops_residual(backend *b, float *x, float *xn, const float *delta, const bk_weight *dnorm,
                      int dmode, const bk_weight *s, const bk_weight *nw, int nmode, int m, int n,
                      float eps);
void cpu_ops_l2norm(backend *b, float *x, int m, int n, int ld, int gpr, float eps, float scale);
void cpu_ops_add(backend *b, float *out, const float *a, const float *x, size_t n);
void cpu_ops_silu_mul(backend *b, float *out, const float *gate, const float *up, int m, int n);
void cpu_ops_sigmoid_mul(backend *b, float *x, const float *gate, size_t n);
void cpu_ops_split_halves(backend *b, float *a, float *g, const float *in, int rows, int half);
void cpu_ops_gather_rows(backend *b, float *out, const float *x, const int32_t *rows, int n,
                         int width);
void cpu_matmul(backend *b, float *out, const float *x, const bk_weight *w, int m);
/* cpu_matmul for a W of a block type (cpu_qmatmul.c). */
void cpu_qmatmul(backend *b, float *out, const float *x, const bk_weight *w, int m);
/* Elements per row (k) a block-typed W may have: its quantized x row must fit the scratch. */
int cpu_qmatmul_max_k(void);
/* cpu_fused.c */
void cpu_fused_matmul_glu(backend *b, float *out, float *g, float *u, const bk_weight *w, int m,
                          int act);
void cpu_fused_matmul_gnorm(backend *b, float *out, float *x, const float *z, const bk_weight *nw,
                            int group, float eps, int mode, const bk_weight *w, int m);
void cpu_fused_attn_prep(backend *b, float *q, float *gate, const float *qg, float *k, float *v,
                         const bk_kv *kv, const bk_batch *bt, const bk_qkv_prep *p);
void cpu_fused_gdn(backend *b, float *out, float *q, float *k, int ld_qk, const float *v, int ld_v,
                   const float *a, const float *bb, const bk_weight *A_log,
                   const bk_weight *dt_bias, float *g, float *beta, float *state,
                   const bk_batch *bt, int Hk, int Hv, int dk, int dv, float q_scale, int vmap);
void cpu_matmul_n(backend *b, float *const *out, const float *x, const bk_weight *const *w, int n_w,
                  int m);
void cpu_ops_rope(backend *b, float *x, const bk_batch *bt, const float *inv_freq, int heads,
                  int hd, int rot, int ld);
void cpu_attention_kv_store(backend *b, const bk_kv *kv, const float *k, const float *v,
                            const bk_batch *bt);
void cpu_attention(backend *b, float *out, const float *q, const bk_kv *kv, const bk_batch *bt,
                   int H, int KV, int D, float scale, int window, float softcap);
void cpu_conv1d(backend *b, float *out, const float *x, int ld_x, const bk_weight *w,
                const bk_weight *bias, float *state, const bk_batch *bt, int C, int K, int act);
void cpu_ops_gdn_gates(backend *b, float *g, float *beta, const float *a, const float *bb,
                       const bk_weight *A_log, const bk_weight *dt_bias, int m, int Hv);
void cpu_gated_delta(backend *b, float *out, const float *q, const float *k, int ld_qk,
                     const float *v, int ld_v, const float *g, const float *beta, float *state,
                     const bk_batch *bt, int Hk, int Hv, int dk, int dv, int vmap);

#endif
