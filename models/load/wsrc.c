/* wsrc.c - binds a model's weights by name, checking each against the shape the
 * config implies. Checkpoint tensors are used in place (mmap, no copy) unless a
 * --dtype conversion is asked for; dummy weights are generated here. */
#include "models/load/wsrc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
        void *p = wsrc_own(w, n * dtype_size(wt.dt));
        if (!p)
            return strata_err_set(err, STRATA_ENOMEM, "%s: no memory for dummy tensor %s (%zu MiB)",
                                  w->what, name, (n * dtype_size(wt.dt)) >> 20);
        fill_dummy(p, wt.dt, n, ndim == 1 ? 0.1f : 0.05f, &w->rng);
        wt.data = p;
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
        /* 1-D tensors stay as stored (any of the three is read by every op). */
        if (w->want != DTYPE_COUNT && w->want != t->dt && ndim > 1) {
            void *p = wsrc_own(w, n * dtype_size(w->want));
            if (!p)
                return strata_err_set(err, STRATA_ENOMEM, "%s: no memory to convert %s to %s",
                                      t->file, name, dtype_name(w->want));
            convert(p, w->want, t->data, t->dt, n);
            wt.dt = w->want;
            wt.data = p;
        }
    }
    if (optional & ARCH_BIND_HOST) { /* stays where it is: the model reads it on the host */
        *out = wt;
        return 0;
    }
    if (w->n_prepared == w->cap_prepared) {
        size_t nc = w->cap_prepared ? 2 * w->cap_prepared : 64;
        bk_weight *np = realloc(w->prepared, nc * sizeof *np);
        if (!np) return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", w->what);
        w->prepared = np;
        w->cap_prepared = nc;
    }
    if (w->b->ops->weight_prepare(w->b, &wt, err)) return strata_err_wrap(err, "%s: ", name);
    *out = wt;
    w->prepared[w->n_prepared++] = wt;
    return 0;
}

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
    *out = w;
    return 0;
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
