/* cpu_membw.c - the roofline probes: streaming read bandwidth of this machine, and the
 * bandwidth one matmul shape reaches, both on the backend's own pool and kernels.
 *
 * For benchmarks and the bench command only; they allocate, so never call them from the
 * step loop. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "engine/base/clock.h"
#include "engine/base/quant.h"
#include "kernels/cpu/cpu_internal.h"

/* Memory of the kind decode reads: weights (models/load/wsrc.c) and big caches (cpu_alloc)
 * are 2 MiB aligned and asked for transparent huge pages, so the probes are too; with
 * 4 KiB pages the same stream pays TLB misses that decode does not. Caller frees. */
static void *cpu_membw_alloc(size_t bytes) {
    size_t huge = (size_t)2 << 20;
    void *p = NULL;
    if (posix_memalign(&p, huge, bytes) != 0) return NULL;
    madvise(p, bytes & ~(huge - 1), MADV_HUGEPAGE);
    return p;
}

typedef struct {
    const float *buf;
    size_t n;
    int n_tasks;
    cpu_sum_fn sum;
    float partial[256]; /* one per task, so the reads cannot be optimised away */
} cpu_membw_job;

static void cpu_membw_task(void *ctx, int task, int worker) {
    (void)worker;
    cpu_membw_job *j = ctx;
    size_t lo = j->n * (size_t)task / (size_t)j->n_tasks,
           hi = j->n * (size_t)(task + 1) / (size_t)j->n_tasks;
    j->partial[task] = j->sum(j->buf + lo, hi - lo);
}

double cpu_membw_read_gbs(backend *b, size_t bytes) {
    cpu_impl *c = cpu_impl_of(b);
    size_t n = bytes / sizeof(float);
    float *buf = NULL;
    if (n == 0 || !(buf = cpu_membw_alloc(n * sizeof(float)))) return 0.0;
    /* Write every page first so the reads hit real memory, not the shared zero page. */
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
    /* Timed in 32 MiB windows (one pool run each, one contiguous range per thread, as a
     * matmul splits W), best window of three passes: a window is long next to a pool
     * wake-up (~1 ms vs ~10-20 us) and, visited in order through a buffer far larger than
     * the last-level cache, never cached; the best one is the least disturbed by other
     * processes, which makes it comparable to cpu_membw_matmul_time's best call. */
    size_t win = ((size_t)32 << 20) / sizeof(float);
    if (win > n) win = n;
    cpu_membw_job j = {.n = win, .n_tasks = b->threads, .sum = c->k->sum};
    if (j.n_tasks > 256) j.n_tasks = 256;
    double best = 0.0;
    volatile float sink = 0.0f;
    for (int pass = 0; pass < 3; pass++) {
        for (size_t off = 0; off + win <= n; off += win) {
            j.buf = buf + off;
            double t0 = strata_now();
            cpu_pool_run(c->pool, cpu_membw_task, &j, j.n_tasks);
            double gbs = (double)(win * sizeof(float)) / (strata_now() - t0) * 1e-9;
            if (gbs > best) best = gbs;
            sink += j.partial[0];
        }
    }
    (void)sink;
    free(buf);
    return best;
}

static int cpu_membw_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int cpu_membw_matmul_time(backend *b, int n, int k, dtype dt, int m, int reps, size_t span,
                          double *best, double *median, strata_err *err) {
    size_t rb = dtype_row_bytes(dt, k);
    void *w = NULL, *tmpl = NULL;
    float *x = NULL, *out = NULL;
    double *t = NULL;
    int rc = 0, quant = dtype_block_elems(dt) > 1;
    if (n <= 0 || k <= 0 || m <= 0 || reps <= 0 || rb == 0 ||
        (!quant && dt != DTYPE_BF16 && dt != DTYPE_F16 && dt != DTYPE_F32)) {
        return strata_err_set(err, STRATA_EINVALID, "matmul bench: bad shape %dx%d m=%d %s", n, k,
                              m, dtype_name(dt));
    }
    /* Enough distinct copies of W to exceed any last-level cache (512 MiB together), used
     * in turn: decode streams every weight from memory once per token, and a single small
     * W called in a loop would be served from L3 instead. A model's weights span gigabytes,
     * and on this project's VMs W read from a span of 6 GiB streams slower than from 512 MiB
     * (BENCHMARKS.md, 2026-12-05, evening), so the span can be set to a model's. */
    size_t wbytes = (rb * (size_t)n + 63) & ~(size_t)63;
    size_t copies = (span ? span : (size_t)512 << 20) / wbytes + 1;
    enum { TMPL_ROWS = 64 };
    w = cpu_membw_alloc(copies * wbytes);
    x = malloc((size_t)m * k * sizeof(float));
    out = malloc((size_t)m * n * sizeof(float));
    t = malloc((size_t)reps * sizeof *t);
    tmpl = quant ? malloc(rb * TMPL_ROWS + (size_t)k * sizeof(float)) : NULL;
    if (!w || !x || !out || !t || (quant && !tmpl)) {
        rc = strata_err_set(err, STRATA_ENOMEM, "matmul bench: out of memory for %zu x %dx%d",
                            copies, n, k);
        goto fail;
    }
    /* Small values of both signs (a cheap LCG: the values do not matter, only that pages
     * are real and nothing is a denormal). A block type tiles a few rows made by the
     * reference quantizer, which is too slow to run on 512 MiB. */
    uint32_t s = 12345;
    if (quant) {
        float *row = (float *)((char *)tmpl + rb * TMPL_ROWS);
        for (int r = 0; r < TMPL_ROWS; r++) {
            for (int i = 0; i < k; i++) {
                s = s * 1664525u + 1013904223u;
                row[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.1f;
            }
            quant_quantize_row((char *)tmpl + rb * (size_t)r, row, dt, k);
        }
        for (size_t c = 0; c < copies; c++)
            for (int r = 0; r < n; r++)
                memcpy((char *)w + c * wbytes + rb * (size_t)r,
                       (char *)tmpl + rb * (size_t)(r % TMPL_ROWS), rb);
    }
    for (size_t c = 0; c < copies && !quant; c++) {
        char *wc = (char *)w + c * wbytes;
        for (size_t i = 0; i < (size_t)n * k; i++) {
            s = s * 1664525u + 1013904223u;
            float v = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.1f;
            if (dt == DTYPE_BF16) ((uint16_t *)wc)[i] = dtype_f32_to_bf16(v);
            else if (dt == DTYPE_F16) ((uint16_t *)wc)[i] = dtype_f32_to_f16(v);
            else ((float *)wc)[i] = v;
        }
    }
    for (size_t i = 0; i < (size_t)m * k; i++) x[i] = (float)(i % 13) * 0.01f;
    bk_weight wt = {.data = w, .dt = dt, .ndim = 2, .shape = {n, k}};
    b->ops->matmul(b, out, x, &wt, m); /* warm-up: page tables, worker wake-up */
    /* The fastest call is the one least disturbed by other processes on a shared machine,
     * what the hardware can do; the median is what a decode step meets, call after call. */
    for (int r = 0; r < reps; r++) {
        wt.data = (char *)w + (size_t)((r + 1) % copies) * wbytes;
        double t0 = strata_now();
        b->ops->matmul(b, out, x, &wt, m);
        t[r] = strata_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cpu_membw_cmp_double);
    *best = t[0];
    if (median) *median = t[reps / 2];
fail:
    free(t);
    free(tmpl);
    free(out);
    free(x);
    free(w);
    return rc;
}
