/* cpu_mamba.c - the CPU backend's Nemotron-H row ops: relu² (the MLP activation, spec
 * §8) and the gate-first grouped RMSNorm that closes each Mamba2 mixer (spec §6.6).
 *
 * Each op is its scalar reference plus a vtable entry that splits rows (or elements) over
 * the pool. Both move little memory next to the matmuls around them, so plain C is
 * enough, except the gate's silu: a libm expf per element would cost more than the memory
 * traffic, so the entry uses the ISA table's vector silu. The SSD scan is in cpu_ssd.c. */
#include <math.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_mamba.h"

/* ---- references ---- */

void cpu_mamba_relu2_ref(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float r = x[i] > 0.0f ? x[i] : 0.0f;
        x[i] = r * r;
    }
}

/* v = x · silu(z) in f32 (gate first, norm_before_gate false); each contiguous group of
 * `group` channels is normalised by its own rms; out = v̂ · w (Zamba2RMSNormGated). */
void cpu_mamba_rmsnorm_gated_grouped_ref(float *out, const float *x, const float *z,
                                         const bk_weight *w, int m, int width, int group,
                                         float eps) {
    for (int i = 0; i < m; i++) {
        const float *xr = x + (size_t)i * width, *zr = z + (size_t)i * width;
        float *o = out + (size_t)i * width;
        for (int j = 0; j < width; j++) o[j] = xr[j] * (zr[j] / (1.0f + expf(-zr[j])));
        for (int g0 = 0; g0 < width; g0 += group) {
            float ss = 0.0f;
            for (int j = g0; j < g0 + group; j++) ss += o[j] * o[j];
            float r = 1.0f / sqrtf(ss / (float)group + eps);
            for (int j = g0; j < g0 + group; j++) o[j] = o[j] * r * cpu_weight_at(w, (size_t)j);
        }
    }
}

/* ---- parallel entries ---- */

enum { CPU_MAMBA_RELU2, CPU_MAMBA_NORM };

typedef struct {
    int op;
    float *out;
    const float *x, *z;
    const bk_weight *w;
    size_t n_items; /* elements (relu2) or rows (norm) */
    int width, group, n_tasks;
    float eps;
    const cpu_kernels *k;
} cpu_mamba_job;

/* The reference's sums, with the gate through the ISA's vector silu. */
static void cpu_mamba_norm_fast(const cpu_kernels *k, float *out, const float *x, const float *z,
                                const bk_weight *w, int m, int width, int group, float eps) {
    for (int i = 0; i < m; i++) {
        float *o = out + (size_t)i * width;
        k->silu_mul(o, z + (size_t)i * width, x + (size_t)i * width, (size_t)width);
        for (int g0 = 0; g0 < width; g0 += group) {
            float ss = 0.0f;
            for (int j = g0; j < g0 + group; j++) ss += o[j] * o[j];
            float r = 1.0f / sqrtf(ss / (float)group + eps);
            for (int j = g0; j < g0 + group; j++) o[j] = o[j] * r * cpu_weight_at(w, (size_t)j);
        }
    }
}

static void cpu_mamba_task(void *ctx, int task, int worker) {
    (void)worker;
    const cpu_mamba_job *j = ctx;
    size_t lo = j->n_items * (size_t)task / (size_t)j->n_tasks;
    size_t hi = j->n_items * (size_t)(task + 1) / (size_t)j->n_tasks;
    if (j->op == CPU_MAMBA_RELU2) {
        cpu_mamba_relu2_ref(j->out + lo, hi - lo);
    } else {
        size_t off = lo * (size_t)j->width;
        cpu_mamba_norm_fast(j->k, j->out + off, j->x + off, j->z + off, j->w, (int)(hi - lo),
                            j->width, j->group, j->eps);
    }
}

static void cpu_mamba_run(backend *b, cpu_mamba_job *j, int64_t cost_per_item) {
    if (j->n_items == 0) return;
    j->k = cpu_impl_of(b)->k;
    j->n_tasks = cpu_backend_task_count(b, (int64_t)j->n_items, cost_per_item);
    cpu_pool_run(cpu_impl_of(b)->pool, cpu_mamba_task, j, j->n_tasks);
}

void cpu_mamba_relu2(backend *b, float *x, size_t n) {
    cpu_mamba_job j = {.op = CPU_MAMBA_RELU2, .out = x, .n_items = n};
    cpu_mamba_run(b, &j, 1);
}

void cpu_mamba_rmsnorm_gated_grouped(backend *b, float *out, const float *x, const float *z,
                                     const bk_weight *w, int m, int width, int group, float eps) {
    cpu_mamba_job j = {.op = CPU_MAMBA_NORM,
                       .out = out,
                       .x = x,
                       .z = z,
                       .w = w,
                       .n_items = (size_t)m,
                       .width = width,
                       .group = group,
                       .eps = eps};
    cpu_mamba_run(b, &j, 24 * (int64_t)width);
}
