/* cpu_profile.c - where a CPU forward's time goes, op by op (backend_ops.profile).
 *
 * A CPU op has finished when its call returns (the pool's workers are joined inside it),
 * so an op's time is the host clock around its call. While profiling is on, b->ops points
 * at a copy of the backend's table whose compute slots are wrappers that time the call of
 * the backend's own op; the wrappers find the profile from that table (its first member).
 * A forward's times restart at its batch_prepare, as the CUDA backend's do. Two clock reads
 * per op are ~50 ns beside ops of microseconds, but this is a benchmark's tool (strata bench
 * --profile), never the serving path's. */
#include <stdlib.h>

#include "engine/base/clock.h"
#include "kernels/cpu/cpu_internal.h"

/* The kinds timed, named as the CUDA backend names its ops. */
#define CPU_PROF_KINDS(X)                                                                          \
    X(COPY)                                                                                        \
    X(ZERO)                                                                                        \
    X(EMBED)                                                                                       \
    X(RMSNORM)                                                                                     \
    X(RMSNORM_GATED)                                                                               \
    X(RESIDUAL)                                                                                    \
    X(L2NORM)                                                                                      \
    X(ADD)                                                                                         \
    X(SILU_MUL)                                                                                    \
    X(SIGMOID_MUL)                                                                                 \
    X(SPLIT_HALVES)                                                                                \
    X(GATHER_ROWS)                                                                                 \
    X(MATMUL)                                                                                      \
    X(MATMUL_N)                                                                                    \
    X(MATMUL_GLU)                                                                                  \
    X(MATMUL_GNORM)                                                                                \
    X(ROPE)                                                                                        \
    X(KV_STORE)                                                                                    \
    X(ATTENTION)                                                                                   \
    X(ATTN_PREP)                                                                                   \
    X(CONV1D)                                                                                      \
    X(GDN_GATES)                                                                                   \
    X(GATED_DELTA)                                                                                 \
    X(GDN)                                                                                         \
    X(GELU_TANH_MUL)                                                                               \
    X(SCALE)                                                                                       \
    X(SOFTCAP)                                                                                     \
    X(RELU2)                                                                                       \
    X(RMSNORM_GATED_GROUPED)                                                                       \
    X(SSD)

enum {
#define CPU_PROF_ENUM(k) CPU_PROF_##k,
    CPU_PROF_KINDS(CPU_PROF_ENUM)
#undef CPU_PROF_ENUM
        CPU_PROF_COUNT
};

static const char *const cpu_prof_names[CPU_PROF_COUNT] = {
#define CPU_PROF_NAME(k) #k,
    CPU_PROF_KINDS(CPU_PROF_NAME)
#undef CPU_PROF_NAME
};

struct cpu_prof {
    backend_ops ops; /* first: b->ops points here while profiling */
    const backend_ops *own;
    int count[CPU_PROF_COUNT];
    double sec[CPU_PROF_COUNT];
};

static cpu_prof *prof_of(const backend *b) { return (cpu_prof *)(void *)b->ops; }

/* Times one call of the backend's own slot `call` as kind k. */
#define PROF_TIMED(b, k, call)                                                                     \
    do {                                                                                           \
        cpu_prof *p_ = prof_of(b);                                                                 \
        double t0_ = strata_now();                                                                 \
        p_->own->call;                                                                             \
        p_->sec[CPU_PROF_##k] += strata_now() - t0_;                                               \
        p_->count[CPU_PROF_##k]++;                                                                 \
    } while (0)

static int prof_batch_prepare(backend *b, bk_batch *bt, strata_err *err) {
    cpu_prof *p = prof_of(b);
    memset(p->count, 0, sizeof p->count);
    memset(p->sec, 0, sizeof p->sec);
    return p->own->batch_prepare(b, bt, err);
}

static void prof_copy(backend *b, void *dst, const void *src, size_t bytes) {
    PROF_TIMED(b, COPY, copy(b, dst, src, bytes));
}

static void prof_zero(backend *b, void *dst, size_t bytes) {
    PROF_TIMED(b, ZERO, zero(b, dst, bytes));
}

static void prof_embed(backend *b, float *out, const bk_weight *table, const int32_t *ids, int m) {
    PROF_TIMED(b, EMBED, embed(b, out, table, ids, m));
}

static void prof_rmsnorm(backend *b, float *out, const float *x, const bk_weight *w, int m, int n,
                         int ld, float eps, int mode) {
    PROF_TIMED(b, RMSNORM, rmsnorm(b, out, x, w, m, n, ld, eps, mode));
}

static void prof_rmsnorm_gated(backend *b, float *out, const float *x, const float *z,
                               const bk_weight *w, int m, int n, float eps) {
    PROF_TIMED(b, RMSNORM_GATED, rmsnorm_gated(b, out, x, z, w, m, n, eps));
}

static void prof_residual(backend *b, float *x, float *xn, const float *delta,
                          const bk_weight *dnorm, int dmode, const bk_weight *s,
                          const bk_weight *nw, int nmode, int m, int n, float eps) {
    PROF_TIMED(b, RESIDUAL, residual(b, x, xn, delta, dnorm, dmode, s, nw, nmode, m, n, eps));
}

static void prof_l2norm(backend *b, float *x, int m, int n, int ld, int gpr, float eps,
                        float scale) {
    PROF_TIMED(b, L2NORM, l2norm(b, x, m, n, ld, gpr, eps, scale));
}

static void prof_add(backend *b, float *out, const float *a, const float *x, size_t n) {
    PROF_TIMED(b, ADD, add(b, out, a, x, n));
}

static void prof_silu_mul(backend *b, float *out, const float *gate, const float *up, int m,
                          int n) {
    PROF_TIMED(b, SILU_MUL, silu_mul(b, out, gate, up, m, n));
}

static void prof_sigmoid_mul(backend *b, float *x, const float *gate, size_t n) {
    PROF_TIMED(b, SIGMOID_MUL, sigmoid_mul(b, x, gate, n));
}

static void prof_split_halves(backend *b, float *a, float *g, const float *in, int rows, int half) {
    PROF_TIMED(b, SPLIT_HALVES, split_halves(b, a, g, in, rows, half));
}

static void prof_gather_rows(backend *b, float *out, const float *x, const int32_t *rows, int n,
                             int width) {
    PROF_TIMED(b, GATHER_ROWS, gather_rows(b, out, x, rows, n, width));
}

static void prof_matmul(backend *b, float *out, const float *x, const bk_weight *w, int m) {
    PROF_TIMED(b, MATMUL, matmul(b, out, x, w, m));
}

static void prof_matmul_n(backend *b, float *const *out, const float *x, const bk_weight *const *w,
                          int n_w, int m) {
    PROF_TIMED(b, MATMUL_N, matmul_n(b, out, x, w, n_w, m));
}

static void prof_matmul_glu(backend *b, float *out, float *g, float *u, const bk_weight *w, int m,
                            int act) {
    PROF_TIMED(b, MATMUL_GLU, matmul_glu(b, out, g, u, w, m, act));
}

static void prof_matmul_gnorm(backend *b, float *out, float *x, const float *z, const bk_weight *nw,
                              int group, float eps, int mode, const bk_weight *w, int m) {
    PROF_TIMED(b, MATMUL_GNORM, matmul_gnorm(b, out, x, z, nw, group, eps, mode, w, m));
}

static void prof_rope(backend *b, float *x, const bk_batch *bt, const float *inv_freq, int heads,
                      int hd, int rot, int ld) {
    PROF_TIMED(b, ROPE, rope(b, x, bt, inv_freq, heads, hd, rot, ld));
}

static void prof_kv_store(backend *b, const bk_kv *kv, const float *k, const float *v,
                          const bk_batch *bt) {
    PROF_TIMED(b, KV_STORE, kv_store(b, kv, k, v, bt));
}

static void prof_attention(backend *b, float *out, const float *q, const bk_kv *kv,
                           const bk_batch *bt, int H, int KV, int D, float scale, int window,
                           float softcap) {
    PROF_TIMED(b, ATTENTION, attention(b, out, q, kv, bt, H, KV, D, scale, window, softcap));
}

static void prof_attn_prep(backend *b, float *q, float *gate, const float *qg, float *k, float *v,
                           const bk_kv *kv, const bk_batch *bt, const bk_qkv_prep *pp) {
    PROF_TIMED(b, ATTN_PREP, attn_prep(b, q, gate, qg, k, v, kv, bt, pp));
}

static void prof_conv1d(backend *b, float *out, const float *x, int ld_x, const bk_weight *w,
                        const bk_weight *bias, float *state, const bk_batch *bt, int C, int K,
                        int act) {
    PROF_TIMED(b, CONV1D, conv1d(b, out, x, ld_x, w, bias, state, bt, C, K, act));
}

static void prof_gdn_gates(backend *b, float *g, float *beta, const float *a, const float *bb,
                           const bk_weight *A_log, const bk_weight *dt_bias, int m, int Hv) {
    PROF_TIMED(b, GDN_GATES, gdn_gates(b, g, beta, a, bb, A_log, dt_bias, m, Hv));
}

static void prof_gated_delta(backend *b, float *out, const float *q, const float *k, int ld_qk,
                             const float *v, int ld_v, const float *g, const float *beta,
                             float *state, const bk_batch *bt, int Hk, int Hv, int dk, int dv,
                             int vmap) {
    PROF_TIMED(b, GATED_DELTA,
               gated_delta(b, out, q, k, ld_qk, v, ld_v, g, beta, state, bt, Hk, Hv, dk, dv, vmap));
}

static void prof_gdn(backend *b, float *out, float *q, float *k, int ld_qk, const float *v,
                     int ld_v, const float *a, const float *bb, const bk_weight *A_log,
                     const bk_weight *dt_bias, float *g, float *beta, float *state,
                     const bk_batch *bt, int Hk, int Hv, int dk, int dv, float q_scale, int vmap) {
    PROF_TIMED(b, GDN,
               gdn(b, out, q, k, ld_qk, v, ld_v, a, bb, A_log, dt_bias, g, beta, state, bt, Hk, Hv,
                   dk, dv, q_scale, vmap));
}

static void prof_gelu_tanh_mul(backend *b, float *out, const float *gate, const float *up, int m,
                               int n) {
    PROF_TIMED(b, GELU_TANH_MUL, gelu_tanh_mul(b, out, gate, up, m, n));
}

static void prof_scale(backend *b, float *x, float alpha, const bk_weight *s, size_t n) {
    PROF_TIMED(b, SCALE, scale(b, x, alpha, s, n));
}

static void prof_softcap(backend *b, float *x, float cap, size_t n) {
    PROF_TIMED(b, SOFTCAP, softcap(b, x, cap, n));
}

static void prof_relu2(backend *b, float *x, size_t n) { PROF_TIMED(b, RELU2, relu2(b, x, n)); }

static void prof_rmsnorm_gated_grouped(backend *b, float *out, const float *x, const float *z,
                                       const bk_weight *w, int m, int width, int group, float eps) {
    PROF_TIMED(b, RMSNORM_GATED_GROUPED,
               rmsnorm_gated_grouped(b, out, x, z, w, m, width, group, eps));
}

static void prof_ssd(backend *b, float *y, const float *x, int ld_x, const float *B, const float *C,
                     int ld_bc, const float *dt, int ld_dt, const bk_weight *A_log,
                     const bk_weight *dt_bias, const bk_weight *D, float *state, const bk_batch *bt,
                     int H, int P, int N, int G, float dt_min) {
    PROF_TIMED(b, SSD,
               ssd(b, y, x, ld_x, B, C, ld_bc, dt, ld_dt, A_log, dt_bias, D, state, bt, H, P, N, G,
                   dt_min));
}

void cpu_profile(backend *b, int on) {
    cpu_impl *c = cpu_impl_of(b);
    if (!on == !c->prof) return;
    if (!on) {
        b->ops = c->prof->own;
        free(c->prof);
        c->prof = NULL;
        return;
    }
    cpu_prof *p = calloc(1, sizeof *p);
    if (!p) return; /* profile_read then says nothing was timed */
    p->own = b->ops;
    p->ops = *b->ops;
    p->ops.batch_prepare = prof_batch_prepare;
    p->ops.copy = prof_copy;
    p->ops.zero = prof_zero;
    p->ops.embed = prof_embed;
    p->ops.rmsnorm = prof_rmsnorm;
    p->ops.rmsnorm_gated = prof_rmsnorm_gated;
    p->ops.residual = prof_residual;
    p->ops.l2norm = prof_l2norm;
    p->ops.add = prof_add;
    p->ops.silu_mul = prof_silu_mul;
    p->ops.sigmoid_mul = prof_sigmoid_mul;
    p->ops.split_halves = prof_split_halves;
    p->ops.gather_rows = prof_gather_rows;
    p->ops.matmul = prof_matmul;
    p->ops.matmul_n = prof_matmul_n;
    p->ops.matmul_glu = prof_matmul_glu;
    p->ops.matmul_gnorm = prof_matmul_gnorm;
    p->ops.rope = prof_rope;
    p->ops.kv_store = prof_kv_store;
    p->ops.attention = prof_attention;
    p->ops.attn_prep = prof_attn_prep;
    p->ops.conv1d = prof_conv1d;
    p->ops.gdn_gates = prof_gdn_gates;
    p->ops.gated_delta = prof_gated_delta;
    p->ops.gdn = prof_gdn;
    p->ops.gelu_tanh_mul = prof_gelu_tanh_mul;
    p->ops.scale = prof_scale;
    p->ops.softcap = prof_softcap;
    p->ops.relu2 = prof_relu2;
    p->ops.rmsnorm_gated_grouped = prof_rmsnorm_gated_grouped;
    p->ops.ssd = prof_ssd;
    c->prof = p;
    b->ops = &p->ops;
}

int cpu_profile_read(backend *b, bk_op_time *out, int max) {
    cpu_prof *p = cpu_impl_of(b)->prof;
    if (!p || max <= 0) return -1;
    int count[CPU_PROF_COUNT];
    memcpy(count, p->count, sizeof count);
    int n = 0;
    for (;;) { /* the kinds by time, most first */
        int best = -1;
        for (int k = 0; k < CPU_PROF_COUNT; k++)
            if (count[k] && (best < 0 || p->sec[k] > p->sec[best])) best = k;
        if (best < 0 || n == max) break;
        out[n++] = (bk_op_time){cpu_prof_names[best], count[best], p->sec[best] * 1e3};
        count[best] = 0;
    }
    return n ? n : -1;
}
