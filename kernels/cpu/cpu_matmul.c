/* cpu_matmul.c - out[m, n] = x[m, k] · Wᵀ on the CPU: the reference and the threaded driver.
 *
 * The weight stays in its checkpoint dtype and is read in place (it is mmapped checkpoint
 * data); the ISA kernels widen BF16 / F16 to f32 in registers and accumulate with f32 FMA.
 * Activations are never rounded to bf16, so an F32 weight gives f32 math and a BF16 weight
 * gives exactly the products of the widened values: only the summation order differs from
 * the reference.
 *
 * Work split: tasks own a range of output features (W rows), so each weight byte is read
 * by one thread once per m-block. Decode (m small) is a pure weight stream; prefill walks
 * x in blocks sized to stay in L2 so each weight tile is reused from L1 by every row of
 * the block. When W has few rows (the DeltaNet a/b projections), tasks also split m. */
#include "kernels/cpu/cpu_internal.h"

void cpu_matmul_ref(float *out, const float *x, const bk_weight *w, int m) {
    int n = (int)w->shape[0], k = (int)w->shape[1];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = 0.0f;
            for (int l = 0; l < k; l++)
                s += x[(size_t)i * k + l] * cpu_weight_at(w, (size_t)j * k + l);
            out[(size_t)i * n + j] = s;
        }
}

typedef struct {
    float *out;
    const float *x;
    const void *w;
    dtype dt;
    int m, n, k;
    int n_split, m_split; /* tasks = n_split · m_split */
    int m_block;          /* rows of x per pass over a weight range */
    cpu_matmul_fn fn;
} cpu_matmul_job;

static void cpu_matmul_task(void *ctx, int task, int worker) {
    (void)worker;
    const cpu_matmul_job *j = ctx;
    int n0, n1, m0, m1;
    /* 16-row alignment keeps every task's W range whole cache lines for common k. */
    cpu_split_range(j->n, j->n_split, task % j->n_split, 16, &n0, &n1);
    cpu_split_range(j->m, j->m_split, task / j->n_split, 4, &m0, &m1);
    if (n0 >= n1) return;
    for (int i = m0; i < m1; i += j->m_block) {
        int mb = m1 - i < j->m_block ? m1 - i : j->m_block;
        j->fn(j->out + (size_t)i * j->n, j->n, j->x + (size_t)i * j->k, j->w, j->dt, j->k, mb, n0,
              n1);
    }
}

void cpu_matmul(backend *b, float *out, const float *x, const bk_weight *w, int m) {
    cpu_impl *c = cpu_impl_of(b);
    cpu_matmul_job j = {.out = out,
                        .x = x,
                        .w = w->data,
                        .dt = w->dt,
                        .m = m,
                        .n = (int)w->shape[0],
                        .k = (int)w->shape[1],
                        .fn = c->k->matmul};
    if (m <= 0 || j.n <= 0) return;
    /* A block of x rows of at most ~384 KiB stays in L2 while a weight tile sweeps it;
     * never under 8 rows, so a decode batch (m < 8) is one pass over W. */
    int mb = (int)((384 * 1024) / ((int64_t)j.k * 4));
    mb = mb < 8 ? 8 : mb > 256 ? 256 : mb & ~3;
    j.m_block = mb;
    int want = cpu_backend_task_count(b, (int64_t)j.n * m, (int64_t)j.k * 2);
    int n_units = (j.n + 15) / 16;
    j.n_split = want < n_units ? want : n_units;
    j.m_split = 1;
    if (j.n_split < want && m >= 8) {
        int m_units = (m + 3) / 4, ms = (want + j.n_split - 1) / j.n_split;
        j.m_split = ms < m_units ? ms : m_units;
    }
    cpu_pool_run(c->pool, cpu_matmul_task, &j, j.n_split * j.m_split);
}
