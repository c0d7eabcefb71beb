/* wsrc.c - binds a model's weights by name, checking each against the shape the
 * config implies. Checkpoint tensors are used in place (mmap, no copy) unless a
 * --dtype conversion or --quantization is asked for; dummy weights are generated here. */
#include "models/load/wsrc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/quant.h"

typedef struct owned {
    struct owned *next;
    void *data;
    size_t bytes;
} owned;

struct wsrc {
    model_wsrc iface;
    const st_model *st;
    const char *what; /* checkpoint path or preset name, for messages */
    dtype want;
    uint64_t rng;
    backend *b;
    owned *bufs;
    size_t owned_bytes;
    bk_weight *prepared; /* copies of the weights handed to the backend, released at destroy */
    size_t n_prepared, cap_prepared;
    dtype quant;                 /* --quantization target; DTYPE_COUNT: none */
    int quant_f32;               /* store quantized weights dequantized as F32 (tests' reference) */
    int n_quant, n_q5_0, n_kept; /* 2-D weights quantized (Q5_0 of them) / kept */
    size_t q_before, q_after, kept_bytes;
    int progress_shown;      /* a progress line is open on stderr */
    double q_start, q_shown; /* seconds (CLOCK_MONOTONIC) when wsrc_quantize was called and
                                of the last progress line */
    int copy_mapped;         /* wsrc_copy_mapped: matrices read in place are copied in */
    int n_copied;
    size_t copied_bytes;
};

/* Weight buffers are 2 MiB aligned and asked for transparent huge pages: decode
 * streams every weight once per token, and with 4 KiB pages the TLB misses cost about
 * half the read bandwidth on this class of machine. */
static void *alloc_huge(size_t bytes) {
    size_t huge = (size_t)2 << 20;
    void *p = NULL;
    if (bytes < huge) return malloc(bytes ? bytes : 1);
    if (posix_memalign(&p, huge, bytes) != 0) return NULL;
    madvise(p, bytes & ~(huge - 1), MADV_HUGEPAGE);
    return p;
}

static void *wsrc_own(wsrc *w, size_t bytes) {
    owned *o = malloc(sizeof *o);
    void *p = alloc_huge(bytes);
    if (!o || !p) {
        free(o);
        free(p);
        return NULL;
    }
    o->data = p;
    o->bytes = bytes;
    o->next = w->bufs;
    w->bufs = o;
    w->owned_bytes += bytes;
    return p;
}

static uint64_t rng_next(uint64_t *s) { /* xorshift64*: fast, enough for dummy weights */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* Uniform in [-a, a) for matrices; 1-D tensors (norms, A_log, biases) get small
 * values so dummy activations stay finite through many layers. Only the first
 * DUMMY_BLOCK values are drawn; the rest repeat them from random offsets, so making
 * gigabytes of dummy weights costs memcpy time, not generator time. */
#define DUMMY_BLOCK ((size_t)1 << 18)
static void fill_dummy(void *data, dtype dt, size_t n, float a, uint64_t *s) {
    size_t es = dtype_size(dt), head = n < DUMMY_BLOCK ? n : DUMMY_BLOCK;
    for (size_t i = 0; i < head;) {
        uint64_t r = rng_next(s);
        for (int k = 0; k < 4 && i < n; k++, i++) {
            float v = ((float)((r >> (16 * k)) & 0xffff) / 32768.0f - 1.0f) * a;
            if (dt == DTYPE_BF16) ((uint16_t *)data)[i] = dtype_f32_to_bf16(v);
            else if (dt == DTYPE_F16) ((uint16_t *)data)[i] = dtype_f32_to_f16(v);
            else ((float *)data)[i] = v;
        }
    }
    for (size_t i = head; i < n;) {
        size_t off = (size_t)(rng_next(s) % (DUMMY_BLOCK / 2)), len = DUMMY_BLOCK - off;
        if (len > n - i) len = n - i;
        memcpy((char *)data + i * es, (const char *)data + off * es, len * es);
        i += len;
    }
}

static int convert(void *dst, dtype to, const void *src, dtype from, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v;
        if (from == DTYPE_BF16) v = dtype_bf16_to_f32(((const uint16_t *)src)[i]);
        else if (from == DTYPE_F16) v = dtype_f16_to_f32(((const uint16_t *)src)[i]);
        else memcpy(&v, (const char *)src + 4 * i, 4);
        if (to == DTYPE_BF16) ((uint16_t *)dst)[i] = dtype_f32_to_bf16(v);
        else if (to == DTYPE_F16) ((uint16_t *)dst)[i] = dtype_f32_to_f16(v);
        else memcpy((char *)dst + 4 * i, &v, 4);
    }
    return 0;
}

static int shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t u = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && u < len; i++)
        u += (size_t)snprintf(buf + u, len - u, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (u < len) snprintf(buf + u, len - u, "]");
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

dtype wsrc_quant_target(dtype q, int ndim, const int64_t *shape, int flags) {
    if (ndim != 2 || (flags & (ARCH_BIND_HOST | ARCH_BIND_KEEP))) return DTYPE_COUNT;
    int64_t k = shape[1];
    if (dtype_block_elems(q) <= 1 || k <= 0) return DTYPE_COUNT;
    if (k % dtype_block_elems(q) == 0) return q;
    if (q == DTYPE_Q4_K && k % dtype_block_elems(DTYPE_Q5_0) == 0) return DTYPE_Q5_0;
    return DTYPE_COUNT;
}

/* Rows [r0, r1) of one matrix: each row to f32, quantized with the reference quantizer
 * (and dequantized again for the f32 reference). Rows are independent, so the threads
 * split a matrix by rows and the result does not depend on how many there are. */
typedef struct qjob {
    void *dst;
    const void *src;
    dtype from, to;
    int as_f32;
    int64_t k, r0, r1;
    int rc;
} qjob;

static void *quant_rows(void *arg) {
    qjob *j = arg;
    size_t es = dtype_size(j->from), qb = dtype_row_bytes(j->to, j->k);
    float *row = malloc(sizeof(float) * (size_t)j->k);
    void *blk = j->as_f32 ? malloc(qb) : NULL;
    if (!row || (j->as_f32 && !blk)) {
        j->rc = -1;
        goto out;
    }
    for (int64_t r = j->r0; r < j->r1; r++) {
        convert(row, DTYPE_F32, (const char *)j->src + (size_t)r * (size_t)j->k * es, j->from,
                (size_t)j->k);
        if (j->as_f32) {
            float *o = (float *)j->dst + (size_t)r * (size_t)j->k;
            if (quant_quantize_row(blk, row, j->to, j->k) ||
                quant_dequantize_row(o, blk, j->to, j->k))
                j->rc = -1;
        } else if (quant_quantize_row((char *)j->dst + (size_t)r * qb, row, j->to, j->k)) {
            j->rc = -1;
        }
    }
out:
    free(row);
    free(blk);
    return NULL;
}

/* Quantizes the [n, k] matrix src (dtype from) into dst: on up to 16 threads (the CPU
 * backend's count, else the cores: a GPU backend's count says nothing of the host, and the
 * CUDA backend's 1 made Qwen3.5-2B's Q4_K load outlast a minute on a 16-core host) when it
 * is large enough to pay for them. */
static int quant_matrix(wsrc *w, void *dst, dtype to, const void *src, dtype from, int64_t n,
                        int64_t k) {
    enum { MAX_THREADS = 16 };
    int on_host = w->b && !strcmp(backend_name(w->b), "cpu") && w->b->threads > 0;
    long cores = on_host ? w->b->threads : sysconf(_SC_NPROCESSORS_ONLN);
    int64_t nt = cores < 1 ? 1 : cores > MAX_THREADS ? MAX_THREADS : cores;
    if (n * k < ((int64_t)1 << 18)) nt = 1; /* a small matrix: threads cost more than they save */
    if (nt > n) nt = n;
    qjob jobs[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    int started[MAX_THREADS] = {0}, rc = 0;
    for (int64_t t = 0; t < nt; t++) {
        jobs[t] = (qjob){dst, src, from, to, w->quant_f32, k, n * t / nt, n * (t + 1) / nt, 0};
        /* the first slice runs here; a thread that cannot start runs its slice here too */
        if (t > 0 && pthread_create(&th[t], NULL, quant_rows, &jobs[t]) == 0) started[t] = 1;
    }
    quant_rows(&jobs[0]);
    for (int64_t t = 1; t < nt; t++) {
        if (started[t]) pthread_join(th[t], NULL);
        else quant_rows(&jobs[t]);
    }
    for (int64_t t = 0; t < nt; t++) rc |= jobs[t].rc;
    return rc;
}

/* A progress line for large models, at most once a second, on a terminal only (a log file
 * gets the summary of wsrc_report). */
static void quant_progress(wsrc *w) {
    double t = now_s();
    if (t - w->q_shown < 1.0 || !isatty(STDERR_FILENO)) return;
    w->q_shown = t;
    w->progress_shown = 1;
    fprintf(stderr, "\rstrata: quantizing to %s: %d tensors, %zu MiB -> %zu MiB (%.0f s)",
            dtype_name(w->quant), w->n_quant, w->q_before >> 20, w->q_after >> 20, t - w->q_start);
}

/* Replaces *wt (n elements of shape [shape[0], k], data in host memory) by its quantization
 * to the dtype the rule gives it, or counts it as kept. */
static int quant_weight(wsrc *w, bk_weight *wt, const char *name, int flags, strata_err *err) {
    if (w->quant == DTYPE_COUNT) return 0;
    dtype to = wsrc_quant_target(w->quant, wt->ndim, wt->shape, flags);
    int64_t n = wt->shape[0], k = wt->ndim == 2 ? wt->shape[1] : 0;
    size_t src_bytes = (size_t)n * (size_t)k * dtype_size(wt->dt);
    if (to == DTYPE_COUNT) {
        if (wt->ndim == 2) {
            w->n_kept++;
            w->kept_bytes += src_bytes;
        }
        return 0;
    }
    size_t bytes =
        w->quant_f32 ? (size_t)n * (size_t)k * sizeof(float) : (size_t)n * dtype_row_bytes(to, k);
    void *p = wsrc_own(w, bytes);
    if (!p)
        return strata_err_set(err, STRATA_ENOMEM, "%s: no memory to quantize %s to %s (%zu MiB)",
                              w->what, name, dtype_name(to), bytes >> 20);
    if (quant_matrix(w, p, to, wt->data, wt->dt, n, k))
        return strata_err_set(err, STRATA_ENOMEM, "%s: no memory to quantize %s to %s", w->what,
                              name, dtype_name(to));
    w->n_quant++;
    w->n_q5_0 += to == DTYPE_Q5_0 && w->quant != DTYPE_Q5_0;
    w->q_before += src_bytes;
    w->q_after += bytes;
    wt->dt = w->quant_f32 ? DTYPE_F32 : to;
    wt->data = p;
    quant_progress(w);
    return 0;
}

/* --quantization, then --dtype, on a weight of a plain dtype found in host memory (file names
 * it in messages); a block-typed weight (a quantized GGUF tensor) stays as it is. */
static int wsrc_convert_dtype(wsrc *w, const char *file, const char *name, bk_weight *wt, int flags,
                              strata_err *err) {
    if (dtype_block_elems(wt->dt) > 1) return 0;
    const void *stored = wt->data;
    size_t n = 1;
    for (int i = 0; i < wt->ndim; i++) n *= (size_t)wt->shape[i];
    /* Quantized straight from the stored values (no detour through --dtype); what the
     * rule keeps goes on to the --dtype conversion like any weight. */
    if (w->quant != DTYPE_COUNT && quant_weight(w, wt, name, flags, err)) return err->code;
    /* 1-D tensors stay as stored (any of the three is read by every op). */
    if (wt->data == stored && w->want != DTYPE_COUNT && w->want != wt->dt && wt->ndim > 1) {
        void *p = wsrc_own(w, n * dtype_size(w->want));
        if (!p)
            return strata_err_set(err, STRATA_ENOMEM, "%s: no memory to convert %s to %s", file,
                                  name, dtype_name(w->want));
        convert(p, w->want, wt->data, wt->dt, n);
        wt->dt = w->want;
        wt->data = p;
    }
    return 0;
}

static int wsrc_owns(const wsrc *w, const void *p) {
    for (const owned *o = w->bufs; o; o = o->next)
        if ((const char *)p >= (const char *)o->data &&
            (const char *)p < (const char *)o->data + o->bytes)
            return 1;
    return 0;
}

/* With wsrc_copy_mapped: a matrix still read in place from the checkpoint's mapping moves
 * into memory of its own (huge pages from 2 MiB). Host-bound weights (read a row at a time)
 * stay. */
static int wsrc_copy_in(wsrc *w, const char *file, const char *name, bk_weight *wt, int flags,
                        strata_err *err) {
    if (!w->copy_mapped || (flags & ARCH_BIND_HOST) || wt->ndim < 2 || wsrc_owns(w, wt->data))
        return 0;
    size_t bytes = dtype_row_bytes(wt->dt, wt->shape[wt->ndim - 1]);
    for (int i = 0; i < wt->ndim - 1; i++) bytes *= (size_t)wt->shape[i];
    void *p = wsrc_own(w, bytes);
    if (!p)
        return strata_err_set(err, STRATA_ENOMEM,
                              "%s: no memory to copy %s in (%zu MiB); --mmap reads the weights "
                              "in place",
                              file, name, bytes >> 20);
    memcpy(p, wt->data, bytes);
    wt->data = p;
    w->n_copied++;
    w->copied_bytes += bytes;
    return 0;
}

static int wsrc_convert(wsrc *w, const char *file, const char *name, bk_weight *wt, int flags,
                        strata_err *err) {
    if (wsrc_convert_dtype(w, file, name, wt, flags, err)) return err->code;
    return wsrc_copy_in(w, file, name, wt, flags, err);
}

void wsrc_copy_mapped(wsrc *w, int on) { w->copy_mapped = on; }

/* Hands wt to the backend (weight_prepare) unless ARCH_BIND_HOST, and keeps a copy to release
 * at destroy; *out is the prepared weight. */
static int wsrc_prepare(wsrc *w, const char *name, bk_weight *wt, int flags, bk_weight *out,
                        strata_err *err) {
    if (flags & ARCH_BIND_HOST) { /* stays where it is: the model reads it on the host */
        *out = *wt;
        return 0;
    }
    if (w->n_prepared == w->cap_prepared) {
        size_t nc = w->cap_prepared ? 2 * w->cap_prepared : 64;
        bk_weight *np = realloc(w->prepared, nc * sizeof *np);
        if (!np) return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", w->what);
        w->prepared = np;
        w->cap_prepared = nc;
    }
    if (w->b->ops->weight_prepare(w->b, wt, err)) return strata_err_wrap(err, "%s: ", name);
    *out = *wt;
    w->prepared[w->n_prepared++] = *wt;
    return 0;
}

static int wsrc_bind(model_wsrc *iface, const char *name, int ndim, const int64_t *shape,
                     int optional, bk_weight *out, strata_err *err) {
    wsrc *w = iface->impl;
    bk_weight wt = {0};
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    wt.ndim = ndim;
    memcpy(wt.shape, shape, sizeof(int64_t) * (size_t)ndim);
    if (!w->st) {
        /* dummy models have exactly the required tensors */
        if (optional & ARCH_BIND_OPTIONAL) return 1;
        wt.dt = w->want == DTYPE_COUNT ? DTYPE_BF16 : w->want;
        /* a weight to be quantized is drawn into a scratch buffer: only the quantized copy
         * stays (the same draws either way, so the values match the unquantized model's) */
        int scratch = wsrc_quant_target(w->quant, ndim, shape, optional) != DTYPE_COUNT;
        void *p = scratch ? malloc(n * dtype_size(wt.dt)) : wsrc_own(w, n * dtype_size(wt.dt));
        if (!p)
            return strata_err_set(err, STRATA_ENOMEM, "%s: no memory for dummy tensor %s (%zu MiB)",
                                  w->what, name, (n * dtype_size(wt.dt)) >> 20);
        fill_dummy(p, wt.dt, n, ndim == 1 ? 0.1f : 0.05f, &w->rng);
        wt.data = p;
        int rc = w->quant != DTYPE_COUNT ? quant_weight(w, &wt, name, optional, err) : 0;
        if (scratch) free(p);
        if (rc) return rc;
    } else {
        const st_tensor *t = st_find(w->st, name);
        if (!t) {
            if (optional & ARCH_BIND_OPTIONAL) return 1;
            return strata_err_set(err, STRATA_ENOTFOUND, "%s: tensor %s is missing", w->what, name);
        }
        int ok = t->ndim == ndim;
        for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
        if (!ok) {
            char want[96], got[96];
            shape_str(want, sizeof want, ndim, shape);
            shape_str(got, sizeof got, t->ndim, t->shape);
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: tensor %s has shape %s, the config implies %s", t->file,
                                  name, got, want);
        }
        if (t->dt != DTYPE_BF16 && t->dt != DTYPE_F16 && t->dt != DTYPE_F32)
            return strata_err_set(err, STRATA_EUNSUPPORTED,
                                  "%s: tensor %s has dtype %s (BF16, F16 or F32 expected)", t->file,
                                  name, dtype_name(t->dt));
        wt.dt = t->dt;
        wt.data = t->data;
        if (wsrc_convert(w, t->file, name, &wt, optional, err)) return err->code;
    }
    return wsrc_prepare(w, name, &wt, optional, out, err);
}

int wsrc_take(wsrc *w, const char *file, const char *name, bk_weight *wt, int flags, bk_weight *out,
              strata_err *err) {
    if (wsrc_convert(w, file, name, wt, flags, err)) return err->code;
    if (wsrc_prepare(w, name, wt, flags, out, err)) return strata_err_wrap(err, "%s: ", file);
    return 0;
}

void *wsrc_alloc(wsrc *w, size_t bytes) { return wsrc_own(w, bytes); }

int wsrc_create(wsrc **out, const st_model *st, const char *what, dtype want, uint64_t seed,
                backend *b, strata_err *err) {
    wsrc *w = calloc(1, sizeof *w);
    if (!w) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    w->iface.bind = wsrc_bind;
    w->iface.impl = w;
    w->st = st;
    w->what = what;
    w->want = want;
    w->rng = seed ? seed : 0x9e3779b97f4a7c15ULL;
    w->b = b;
    w->quant = DTYPE_COUNT;
    *out = w;
    return 0;
}

int wsrc_quantize(wsrc *w, dtype q, int as_f32, strata_err *err) {
    if (q != DTYPE_Q8_0 && q != DTYPE_Q4_K)
        return strata_err_set(err, STRATA_EINVALID, "--quantization %s: allowed q8_0, q4_k",
                              dtype_name(q));
    /* Refused before a byte is converted: a backend without the kernels would otherwise fail
     * at its first weight_prepare, after minutes of quantizing a large model. */
    static const int ops[] = {BK_OP_MATMUL, BK_OP_MATMUL_N, BK_OP_MATMUL_GLU, BK_OP_MATMUL_GNORM,
                              BK_OP_EMBED};
    for (size_t i = 0; !as_f32 && i < sizeof ops / sizeof ops[0]; i++)
        for (int fb = 0; fb < 1 + (q == DTYPE_Q4_K); fb++) {
            dtype d = fb ? DTYPE_Q5_0 : q;
            if (!backend_supports(w->b, ops[i], d))
                return strata_err_set(err, STRATA_EUNSUPPORTED,
                                      "--quantization %s: the %s backend has no kernels for %s "
                                      "weights (use --device cpu)",
                                      q == DTYPE_Q8_0 ? "q8_0" : "q4_k", backend_name(w->b),
                                      dtype_name(d));
        }
    w->quant = q;
    w->quant_f32 = as_f32;
    w->q_start = w->q_shown = now_s();
    return 0;
}

void wsrc_report(const wsrc *w) {
    if (w->quant == DTYPE_COUNT) return;
    if (w->progress_shown) fputc('\n', stderr); /* ends the progress line */
    char fb[64] = "", kept[128] = "";
    if (w->n_q5_0)
        snprintf(fb, sizeof fb, " (%d of them Q5_0: rows a multiple of 32, not 256)", w->n_q5_0);
    if (w->n_kept)
        snprintf(kept, sizeof kept,
                 "; %d 2-D weights kept as they were (%.1f MiB: rows not a whole number of "
                 "blocks, or read on the host)",
                 w->n_kept, (double)w->kept_bytes / 1048576.0);
    fprintf(stderr, "strata: quantized %d matrices to %s%s%s: %.1f MiB -> %.1f MiB in %.1f s%s\n",
            w->n_quant, dtype_name(w->quant), fb, w->quant_f32 ? " (stored dequantized, F32)" : "",
            (double)w->q_before / 1048576.0, (double)w->q_after / 1048576.0, now_s() - w->q_start,
            kept);
}

void wsrc_destroy(wsrc *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_prepared; i++)
        if (w->b->ops->weight_release) w->b->ops->weight_release(w->b, &w->prepared[i]);
    free(w->prepared);
    for (owned *o = w->bufs, *next; o; o = next) {
        next = o->next;
        free(o->data);
        free(o);
    }
    free(w);
}

model_wsrc *wsrc_iface(wsrc *w) { return &w->iface; }
size_t wsrc_owned_bytes(const wsrc *w) { return w->owned_bytes; }
