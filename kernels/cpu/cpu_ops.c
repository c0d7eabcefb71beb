/* cpu_ops.c - the CPU backend's row and elementwise ops: embed, the norms, add, the
 * gated activations, split/gather, RoPE and the DeltaNet gates.
 *
 * Each op is its scalar reference (`cpu_<op>_ref`, the math of kernels/backend.h) plus a
 * vtable entry that cuts the rows into ranges and runs the reference on each range on the
 * pool. These ops move little memory, so plain C is enough, except where a libm expf per
 * element would cost more than the memory traffic (silu, sigmoid): those call the ISA
 * table's vector versions. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

static inline float cpu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float cpu_silu(float x) { return x / (1.0f + expf(-x)); }
/* torch.nn.functional.softplus with beta 1, threshold 20. */
static inline float cpu_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* ---- references ---- */

void cpu_ops_embed_ref(float *out, const bk_weight *table, const int32_t *ids, int m) {
    int64_t n = table->shape[1];
    if (dtype_block_elems(table->dt) > 1) { /* a quantized table: whole rows of blocks */
        size_t rb = dtype_row_bytes(table->dt, n);
        for (int i = 0; i < m; i++)
            quant_dequantize_row(out + i * n, (const char *)table->data + (size_t)ids[i] * rb,
                                 table->dt, n);
        return;
    }
    for (int i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            out[i * n + j] = cpu_weight_at(table, (size_t)(ids[i] * n + j));
}

enum { CPU_NORM_CHUNK = 256 }; /* gains widened per pass, on the stack */

/* g[0 .. n) = the gains of elements j0 .. j0 + n: w, 1 + w, or 1 (BK_NORM_NONE). One loop per
 * storage type: with the type switch inside the element loop, widening the gains cost more
 * than the norm's arithmetic. */
static void cpu_norm_gains(float *g, const bk_weight *w, int mode, int j0, int n) {
    if (mode != BK_NORM_PLAIN && mode != BK_NORM_ONE_PLUS) {
        for (int j = 0; j < n; j++) g[j] = 1.0f;
        return;
    }
    if (w->dt == DTYPE_F32) {
        const float *f = (const float *)w->data + j0;
        for (int j = 0; j < n; j++) g[j] = f[j];
    } else if (w->dt == DTYPE_BF16) {
        const uint16_t *h = (const uint16_t *)w->data + j0;
        for (int j = 0; j < n; j++) g[j] = dtype_bf16_to_f32(h[j]);
    } else {
        for (int j = 0; j < n; j++) g[j] = cpu_weight_at(w, (size_t)(j0 + j));
    }
    if (mode == BK_NORM_ONE_PLUS)
        for (int j = 0; j < n; j++) g[j] = 1.0f + g[j];
}

/* o = x · r · g, or o = add + x · r · g (each element in that order; o may be add or x). */
static void cpu_norm_row(float *o, const float *add, const float *xr, float r, const bk_weight *w,
                         int mode, int n) {
    float g[CPU_NORM_CHUNK];
    for (int j0 = 0; j0 < n; j0 += CPU_NORM_CHUNK) {
        int nn = n - j0 < CPU_NORM_CHUNK ? n - j0 : CPU_NORM_CHUNK;
        cpu_norm_gains(g, w, mode, j0, nn);
        if (add)
            for (int j = 0; j < nn; j++) o[j0 + j] = add[j0 + j] + xr[j0 + j] * r * g[j];
        else
            for (int j = 0; j < nn; j++) o[j0 + j] = xr[j0 + j] * r * g[j];
    }
}

void cpu_ops_rmsnorm_ref(float *out, const float *x, const bk_weight *w, int m, int n, int ld,
                         float eps, int mode) {
    for (int i = 0; i < m; i++) {
        const float *xr = x + (size_t)i * ld;
        float *o = out + (size_t)i * ld;
        float ss = 0.0f;
        for (int j = 0; j < n; j++) ss += xr[j] * xr[j];
        float r = 1.0f / sqrtf(ss / (float)n + eps);
        cpu_norm_row(o, NULL, xr, r, w, mode, n);
    }
}

/* One row of cpu_ops_rmsnorm_ref's arithmetic, in its order: o = x · r · g. */
static float cpu_norm_scale(const float *xr, int n, float eps) {
    float ss = 0.0f;
    for (int j = 0; j < n; j++) ss += xr[j] * xr[j];
    return 1.0f / sqrtf(ss / (float)n + eps);
}

void cpu_ops_residual_ref(float *x, float *xn, const float *delta, const bk_weight *dnorm,
                          int dmode, const bk_weight *s, const bk_weight *nw, int nmode, int m,
                          int n, float eps) {
    for (int i = 0; i < m; i++) {
        float *xr = x + (size_t)i * n;
        const float *dr = delta + (size_t)i * n;
        if (dnorm) {
            float r = cpu_norm_scale(dr, n, eps);
            cpu_norm_row(xr, xr, dr, r, dnorm, dmode, n);
        } else {
            for (int j = 0; j < n; j++) xr[j] = xr[j] + dr[j];
        }
        if (s) { /* as the scale op: x · (1 · s[0]) */
            float f = 1.0f * cpu_weight_at(s, 0);
            for (int j = 0; j < n; j++) xr[j] *= f;
        }
        if (!xn) continue;
        float r = cpu_norm_scale(xr, n, eps);
        float *o = xn + (size_t)i * n;
        cpu_norm_row(o, NULL, xr, r, nw, nmode, n);
    }
}

void cpu_ops_rmsnorm_gated_ref(float *out, const float *x, const float *z, const bk_weight *w,
                               int m, int n, float eps) {
    for (int i = 0; i < m; i++) {
        const float *xr = x + (size_t)i * n, *zr = z + (size_t)i * n;
        float *o = out + (size_t)i * n;
        float ss = 0.0f;
        for (int j = 0; j < n; j++) ss += xr[j] * xr[j];
        float r = 1.0f / sqrtf(ss / (float)n + eps);
        for (int j = 0; j < n; j++) o[j] = xr[j] * r * cpu_weight_at(w, j) * cpu_silu(zr[j]);
    }
}

static void cpu_l2norm_rows(float *x, int lo, int hi, int n, int ld, int gpr, float eps,
                            float scale) {
    for (int i = lo; i < hi; i++) {
        float *xr = x + (size_t)(i / gpr) * ld + (size_t)(i % gpr) * n;
        float ss = 0.0f;
        for (int j = 0; j < n; j++) ss += xr[j] * xr[j];
        float r = scale / sqrtf(ss + eps);
        for (int j = 0; j < n; j++) xr[j] *= r;
    }
}

void cpu_ops_l2norm_ref(float *x, int m, int n, int ld, int gpr, float eps, float scale) {
    cpu_l2norm_rows(x, 0, m, n, ld, gpr, eps, scale);
}

void cpu_ops_add_ref(float *out, const float *a, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + x[i];
}

void cpu_ops_silu_mul_ref(float *out, const float *gate, const float *up, int m, int n) {
    for (size_t i = 0; i < (size_t)m * n; i++) out[i] = cpu_silu(gate[i]) * up[i];
}

void cpu_ops_sigmoid_mul_ref(float *x, const float *gate, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] *= cpu_sigmoid(gate[i]);
}

void cpu_ops_split_halves_ref(float *a, float *g, const float *in, int rows, int half) {
    for (int r = 0; r < rows; r++) {
        memcpy(a + (size_t)r * half, in + (size_t)r * 2 * half, (size_t)half * sizeof(float));
        memcpy(g + (size_t)r * half, in + (size_t)r * 2 * half + half,
               (size_t)half * sizeof(float));
    }
}

void cpu_ops_gather_rows_ref(float *out, const float *x, const int32_t *rows, int n, int width) {
    for (int i = 0; i < n; i++)
        memmove(out + (size_t)i * width, x + (size_t)rows[i] * width,
                (size_t)width * sizeof(float));
}

/* Angles are f32 products pos · inv_freq, as torch computes them before cos/sin. */
void cpu_ops_rope_ref(float *x, const bk_batch *bt, const float *inv_freq, int heads, int hd,
                      int rot, int ld) {
    int half = rot / 2;
    for (int i = 0; i < bt->n_tokens; i++) {
        float pos = (float)bt->tok_pos[i];
        for (int j = 0; j < half; j++) {
            float a = pos * inv_freq[j], c = cosf(a), s = sinf(a);
            for (int h = 0; h < heads; h++) {
                float *xh = x + (size_t)i * ld + (size_t)h * hd;
                float x0 = xh[j], x1 = xh[j + half];
                xh[j] = x0 * c - x1 * s;
                xh[j + half] = x1 * c + x0 * s;
            }
        }
    }
}

void cpu_ops_gdn_gates_ref(float *g, float *beta, const float *a, const float *bb,
                           const bk_weight *A_log, const bk_weight *dt_bias, int m, int Hv) {
    for (int t = 0; t < m; t++)
        for (int h = 0; h < Hv; h++) {
            size_t i = (size_t)t * Hv + h;
            g[i] = -expf(cpu_weight_at(A_log, h)) * cpu_softplus(a[i] + cpu_weight_at(dt_bias, h));
            beta[i] = cpu_sigmoid(bb[i]);
        }
}

/* ---- parallel entries: split rows (or elements) into ranges, run the reference ---- */

typedef struct {
    int op;
    float *out, *x2;
    const float *x, *y;
    const bk_weight *w, *w2, *w3;
    const int32_t *ids;
    const bk_batch *bt;
    size_t n_items; /* rows or elements being split */
    int n, ld, mode, mode2, heads, hd, rot, width;
    float eps, scale;
    int n_tasks;
    const cpu_kernels *k;
} cpu_ops_job;

/* rmsnorm_gated on rows [0, m) with the ISA's vector silu: o = x̂·w, then o = silu(z)·o. */
static void cpu_rmsnorm_gated_fast(const cpu_kernels *k, float *out, const float *x, const float *z,
                                   const bk_weight *w, int m, int n, float eps) {
    for (int i = 0; i < m; i++) {
        const float *xr = x + (size_t)i * n;
        float *o = out + (size_t)i * n;
        float ss = 0.0f;
        for (int j = 0; j < n; j++) ss += xr[j] * xr[j];
        float r = 1.0f / sqrtf(ss / (float)n + eps);
        cpu_norm_row(o, NULL, xr, r, w, BK_NORM_PLAIN, n);
        k->silu_mul(o, z + (size_t)i * n, o, (size_t)n);
    }
}

enum {
    CPU_OP_EMBED,
    CPU_OP_RMSNORM,
    CPU_OP_RMSNORM_GATED,
    CPU_OP_RESIDUAL,
    CPU_OP_L2NORM,
    CPU_OP_ADD,
    CPU_OP_SILU_MUL,
    CPU_OP_SIGMOID_MUL,
    CPU_OP_SPLIT,
    CPU_OP_GATHER,
    CPU_OP_GATES
};

static void cpu_ops_task(void *ctx, int task, int worker) {
    (void)worker;
    const cpu_ops_job *j = ctx;
    size_t lo = j->n_items * (size_t)task / (size_t)j->n_tasks;
    size_t hi = j->n_items * (size_t)(task + 1) / (size_t)j->n_tasks;
    int nr = (int)(hi - lo);
    switch (j->op) {
    case CPU_OP_EMBED: cpu_ops_embed_ref(j->out + lo * j->n, j->w, j->ids + lo, nr); break;
    case CPU_OP_RMSNORM:
        cpu_ops_rmsnorm_ref(j->out + lo * j->ld, j->x + lo * j->ld, j->w, nr, j->n, j->ld, j->eps,
                            j->mode);
        break;
    case CPU_OP_RMSNORM_GATED:
        cpu_rmsnorm_gated_fast(j->k, j->out + lo * j->n, j->x + lo * j->n, j->y + lo * j->n, j->w,
                               nr, j->n, j->eps);
        break;
    case CPU_OP_RESIDUAL:
        cpu_ops_residual_ref(j->out + lo * j->n, j->x2 ? j->x2 + lo * j->n : NULL, j->x + lo * j->n,
                             j->w, j->mode, j->w3, j->w2, j->mode2, nr, j->n, j->eps);
        break;
    case CPU_OP_L2NORM:
        cpu_l2norm_rows(j->out, (int)lo, (int)hi, j->n, j->ld, j->width, j->eps, j->scale);
        break;
    case CPU_OP_ADD: cpu_ops_add_ref(j->out + lo, j->x + lo, j->y + lo, hi - lo); break;
    case CPU_OP_SILU_MUL:
        j->k->silu_mul(j->out + lo * j->n, j->x + lo * j->n, j->y + lo * j->n, (size_t)nr * j->n);
        break;
    case CPU_OP_SIGMOID_MUL: j->k->sigmoid_mul(j->out + lo, j->x + lo, hi - lo); break;
    case CPU_OP_SPLIT:
        cpu_ops_split_halves_ref(j->out + lo * j->n, j->x2 + lo * j->n, j->x + lo * 2 * j->n, nr,
                                 j->n);
        break;
    case CPU_OP_GATHER:
        cpu_ops_gather_rows_ref(j->out + lo * j->width, j->x, j->ids + lo, nr, j->width);
        break;
    case CPU_OP_GATES:
        cpu_ops_gdn_gates_ref(j->out + lo * j->n, j->x2 + lo * j->n, j->x + lo * j->n,
                              j->y + lo * j->n, j->w, j->w2, nr, j->n);
        break;
    }
}

static void cpu_ops_run(backend *b, cpu_ops_job *j, int64_t cost_per_item) {
    if (j->n_items == 0) return;
    j->k = cpu_impl_of(b)->k;
    j->n_tasks = cpu_backend_task_count(b, (int64_t)j->n_items, cost_per_item);
    cpu_pool_run(cpu_impl_of(b)->pool, cpu_ops_task, j, j->n_tasks);
}

void cpu_ops_embed(backend *b, float *out, const bk_weight *table, const int32_t *ids, int m) {
    cpu_ops_job j = {.op = CPU_OP_EMBED,
                     .out = out,
                     .w = table,
                     .ids = ids,
                     .n_items = (size_t)m,
                     .n = (int)table->shape[1]};
    cpu_ops_run(b, &j, j.n);
}

void cpu_ops_rmsnorm(backend *b, float *out, const float *x, const bk_weight *w, int m, int n,
                     int ld, float eps, int mode) {
    cpu_ops_job j = {.op = CPU_OP_RMSNORM,
                     .out = out,
                     .x = x,
                     .w = w,
                     .n_items = (size_t)m,
                     .n = n,
                     .ld = ld,
                     .eps = eps,
                     .mode = mode};
    cpu_ops_run(b, &j, 4 * (int64_t)n);
}

void cpu_ops_rmsnorm_gated(backend *b, float *out, const float *x, const float *z,
                           const bk_weight *w, int m, int n, float eps) {
    cpu_ops_job j = {.op = CPU_OP_RMSNORM_GATED,
                     .out = out,
                     .x = x,
                     .y = z,
                     .w = w,
                     .n_items = (size_t)m,
                     .n = n,
                     .eps = eps};
    cpu_ops_run(b, &j, 20 * (int64_t)n);
}

void cpu_ops_residual(backend *b, float *x, float *xn, const float *delta, const bk_weight *dnorm,
                      int dmode, const bk_weight *s, const bk_weight *nw, int nmode, int m, int n,
                      float eps) {
    cpu_ops_job j = {.op = CPU_OP_RESIDUAL,
                     .out = x,
                     .x2 = xn,
                     .x = delta,
                     .w = dnorm,
                     .mode = dmode,
                     .w3 = s,
                     .w2 = nw,
                     .mode2 = nmode,
                     .n_items = (size_t)m,
                     .n = n,
                     .eps = eps};
    cpu_ops_run(b, &j, 8 * (int64_t)n);
}

void cpu_ops_l2norm(backend *b, float *x, int m, int n, int ld, int gpr, float eps, float scale) {
    cpu_ops_job j = {.op = CPU_OP_L2NORM,
                     .out = x,
                     .n_items = (size_t)m,
                     .n = n,
                     .ld = ld,
                     .width = gpr,
                     .eps = eps,
                     .scale = scale};
    cpu_ops_run(b, &j, 4 * (int64_t)n);
}

void cpu_ops_add(backend *b, float *out, const float *a, const float *x, size_t n) {
    cpu_ops_job j = {.op = CPU_OP_ADD, .out = out, .x = a, .y = x, .n_items = n};
    cpu_ops_run(b, &j, 1);
}

void cpu_ops_silu_mul(backend *b, float *out, const float *gate, const float *up, int m, int n) {
    cpu_ops_job j = {
        .op = CPU_OP_SILU_MUL, .out = out, .x = gate, .y = up, .n_items = (size_t)m, .n = n};
    cpu_ops_run(b, &j, 20 * (int64_t)n);
}

void cpu_ops_sigmoid_mul(backend *b, float *x, const float *gate, size_t n) {
    cpu_ops_job j = {.op = CPU_OP_SIGMOID_MUL, .out = x, .x = gate, .n_items = n};
    cpu_ops_run(b, &j, 20);
}

void cpu_ops_split_halves(backend *b, float *a, float *g, const float *in, int rows, int half) {
    cpu_ops_job j = {
        .op = CPU_OP_SPLIT, .out = a, .x2 = g, .x = in, .n_items = (size_t)rows, .n = half};
    cpu_ops_run(b, &j, 2 * (int64_t)half);
}

void cpu_ops_gather_rows(backend *b, float *out, const float *x, const int32_t *rows, int n,
                         int width) {
    /* One task: out may overlap x (a row gathered onto itself), and a serial copy in
     * index order is what a caller relying on that would expect. */
    (void)b;
    cpu_ops_gather_rows_ref(out, x, rows, n, width);
}

void cpu_ops_gdn_gates(backend *b, float *g, float *beta, const float *a, const float *bb,
                       const bk_weight *A_log, const bk_weight *dt_bias, int m, int Hv) {
    cpu_ops_job j = {.op = CPU_OP_GATES,
                     .out = g,
                     .x2 = beta,
                     .x = a,
                     .y = bb,
                     .w = A_log,
                     .w2 = dt_bias,
                     .n_items = (size_t)m,
                     .n = Hv};
    cpu_ops_run(b, &j, 40 * (int64_t)Hv);
}

typedef struct {
    float *x;
    const bk_batch *bt;
    const float *inv_freq;
    int heads, hd, rot, ld, n_tasks;
} cpu_rope_job;

static void cpu_rope_task(void *ctx, int task, int worker) {
    (void)worker;
    const cpu_rope_job *j = ctx;
    int lo, hi;
    cpu_split_range(j->bt->n_tokens, j->n_tasks, task, 1, &lo, &hi);
    /* A sub-batch view of tokens [lo, hi): the reference only reads n_tokens and tok_pos. */
    bk_batch sub = *j->bt;
    sub.n_tokens = hi - lo;
    sub.tok_pos = j->bt->tok_pos + lo;
    cpu_ops_rope_ref(j->x + (size_t)lo * j->ld, &sub, j->inv_freq, j->heads, j->hd, j->rot, j->ld);
}

void cpu_ops_rope(backend *b, float *x, const bk_batch *bt, const float *inv_freq, int heads,
                  int hd, int rot, int ld) {
    cpu_rope_job j = {x, bt, inv_freq, heads, hd, rot, ld, 0};
    j.n_tasks = cpu_backend_task_count(b, bt->n_tokens, (int64_t)rot * (heads * 3 + 20));
    cpu_pool_run(cpu_impl_of(b)->pool, cpu_rope_task, &j, j.n_tasks);
}
