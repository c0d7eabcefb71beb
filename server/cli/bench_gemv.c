/* bench_gemv.c - the per-shape GEMV benchmark of `strata bench --gemv` (bench_gemv.h).
 *
 * The recorder's table is a copy of the backend's with matmul and matmul_n replaced by
 * wrappers that note the weight and call the backend's own; the wrappers find the recorder
 * from the table b->ops points at (it is the recorder's first member). A shape is timed by
 * repeating the matmul until 20 ms have passed (at least 3 times), a one-float download
 * after the last call waiting for the device. */
#include "server/cli/bench_gemv.h"

#include <stdio.h>
#include <stdlib.h>

#include "engine/base/clock.h"

enum { GEMV_SHAPES_MAX = 64 };

struct bench_gemv {
    backend_ops ops; /* first: b->ops points here while recording */
    const backend_ops *own;
    backend *b;
    const bk_weight *w[GEMV_SHAPES_MAX]; /* one weight of each distinct (n, k, dtype) */
    int n;
};

static bench_gemv *gemv_of(const backend *b) { return (bench_gemv *)(void *)b->ops; }

static void gemv_note(bench_gemv *g, const bk_weight *w) {
    for (int i = 0; i < g->n; i++)
        if (g->w[i]->shape[0] == w->shape[0] && g->w[i]->shape[1] == w->shape[1] &&
            g->w[i]->dt == w->dt)
            return;
    if (g->n < GEMV_SHAPES_MAX) g->w[g->n++] = w;
}

static void gemv_matmul(backend *b, float *out, const float *x, const bk_weight *w, int m) {
    bench_gemv *g = gemv_of(b);
    gemv_note(g, w);
    g->own->matmul(b, out, x, w, m);
}

static void gemv_matmul_n(backend *b, float *const *out, const float *x, const bk_weight *const *w,
                          int n_w, int m) {
    bench_gemv *g = gemv_of(b);
    for (int j = 0; j < n_w; j++) gemv_note(g, w[j]);
    g->own->matmul_n(b, out, x, w, n_w, m);
}

bench_gemv *bench_gemv_start(backend *b) {
    bench_gemv *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->own = b->ops;
    g->ops = *b->ops;
    g->ops.matmul = gemv_matmul;
    g->ops.matmul_n = gemv_matmul_n;
    g->b = b;
    b->ops = &g->ops;
    return g;
}

void bench_gemv_stop(bench_gemv *g) {
    if (g && g->b->ops == &g->ops) g->b->ops = g->own;
}

/* Seconds per matmul of w at m rows; < 0 when the buffers cannot be had. */
static double gemv_time(backend *b, const bk_weight *w, int m) {
    const backend_ops *o = b->ops;
    size_t n = (size_t)w->shape[0], k = (size_t)w->shape[1];
    float *x = o->alloc(b, sizeof(float) * (size_t)m * k);
    float *y = o->alloc(b, sizeof(float) * (size_t)m * n);
    double t = -1;
    if (x && y) {
        float sink;
        o->matmul(b, y, x, w, m);
        o->download(b, &sink, y, sizeof sink);
        int reps = 0;
        double t0 = strata_now(), now = t0;
        while (reps < 3 || now - t0 < 0.02) {
            o->matmul(b, y, x, w, m);
            if (++reps % 8 == 0 || reps < 3) now = strata_now();
            if (reps >= 10000) break;
        }
        o->download(b, &sink, y, sizeof sink);
        t = (strata_now() - t0) / reps;
    }
    if (x) o->free(b, x);
    if (y) o->free(b, y);
    return t;
}

void bench_gemv_report(bench_gemv *g, double copy_gbs) {
    static const int ms[2] = {1, 8};
    for (int i = 0; i < g->n; i++) {
        const bk_weight *w = g->w[i];
        double bytes = (double)w->shape[0] * (double)dtype_row_bytes(w->dt, w->shape[1]);
        printf("gemv             [%lld x %lld] %s:", (long long)w->shape[0], (long long)w->shape[1],
               dtype_name(w->dt));
        for (int j = 0; j < 2; j++) {
            double t = gemv_time(g->b, w, ms[j]);
            if (t < 0) {
                printf(" m %d: no memory;", ms[j]);
                continue;
            }
            double gbs = bytes / t / 1e9;
            printf(" m %d %.1f us %.0f GB/s (%.2f)%s", ms[j], t * 1e6, gbs,
                   copy_gbs > 0 ? gbs / copy_gbs : 0, j ? "" : ",");
        }
        printf("\n");
    }
    if (g->n == GEMV_SHAPES_MAX) printf("gemv             (only the first %d shapes)\n", g->n);
}

void bench_gemv_free(bench_gemv *g) {
    bench_gemv_stop(g);
    free(g);
}
