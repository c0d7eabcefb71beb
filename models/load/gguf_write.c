/* gguf_write.c - the GGUF v3 writer of gguf_write.h. The metadata is serialized into a buffer
 * as it is added (a tokenizer's few megabytes), the tensor infos are kept as a list, and
 * gguf_write_begin writes both with the offsets the declared sizes imply; after that only
 * tensor bytes flow, through stdio's buffer, so memory does not grow with the model. The file
 * is built as path.tmp and renamed at the end: a reader never sees half a model at path. */
#include "models/load/gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/strbuf.h"

#define GW_ALIGN GGUF_DEFAULT_ALIGNMENT

typedef struct gw_tensor {
    char *name;
    int type, ndim;
    int64_t ne[GGUF_MAX_DIMS]; /* innermost first */
    uint64_t nbytes, offset;
} gw_tensor;

struct gguf_write {
    char *path, *tmp;
    strbuf kv;     /* the serialized key-value pairs */
    uint64_t n_kv; /* how many */
    char **keys;   /* [n_kv] for the uniqueness check */
    gw_tensor *t;  /* [n_t] in data order */
    size_t n_t, cap_t, cap_keys;
    FILE *f;    /* path.tmp once begun */
    size_t cur; /* the tensor being written */
    uint64_t cur_done, data_end;
    int begun, finished;
};

static int gw_nomem(const gguf_write *w, strata_err *err) {
    return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory writing the GGUF header", w->path);
}

static int gw_io(const gguf_write *w, strata_err *err) {
    return strata_err_set(err, STRATA_EIO, "%s: cannot write: %s", w->tmp,
                          strerror(errno ? errno : EIO));
}

/* Little-endian integers of the header (every target strata builds for is little-endian; the
 * values are copied byte by byte so that holds by construction). */
static int put_le(strbuf *b, uint64_t v, int bytes) {
    unsigned char c[8];
    for (int i = 0; i < bytes; i++) c[i] = (unsigned char)(v >> (8 * i));
    return strbuf_add(b, c, (size_t)bytes);
}

static int put_str(strbuf *b, const char *s, size_t len) {
    return put_le(b, len, 8) || strbuf_add(b, s, len);
}

/* The key and its type; refuses a second use of a key and any key after begin. */
static int gw_key(gguf_write *w, const char *key, int type, strata_err *err) {
    if (w->begun)
        return strata_err_set(err, STRATA_ESTATE, "%s: key '%s' added after the header", w->path,
                              key);
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key))
            return strata_err_set(err, STRATA_EINVALID, "%s: key '%s' written twice", w->path, key);
    if (w->n_kv == w->cap_keys) {
        size_t nc = w->cap_keys ? 2 * w->cap_keys : 32;
        char **nk = realloc(w->keys, nc * sizeof *nk);
        if (!nk) return gw_nomem(w, err);
        w->keys = nk;
        w->cap_keys = nc;
    }
    if (!(w->keys[w->n_kv] = strdup(key))) return gw_nomem(w, err);
    w->n_kv++;
    return put_str(&w->kv, key, strlen(key)) || put_le(&w->kv, (uint64_t)type, 4) ? gw_nomem(w, err)
                                                                                  : 0;
}

static int gw_scalar(gguf_write *w, const char *key, int type, uint64_t bits, int bytes,
                     strata_err *err) {
    if (gw_key(w, key, type, err)) return err->code;
    return put_le(&w->kv, bits, bytes) ? gw_nomem(w, err) : 0;
}

int gguf_write_u32(gguf_write *w, const char *key, uint32_t v, strata_err *err) {
    return gw_scalar(w, key, GGUF_VT_U32, v, 4, err);
}
int gguf_write_i32(gguf_write *w, const char *key, int32_t v, strata_err *err) {
    return gw_scalar(w, key, GGUF_VT_I32, (uint32_t)v, 4, err);
}
int gguf_write_f32(gguf_write *w, const char *key, float v, strata_err *err) {
    uint32_t u;
    memcpy(&u, &v, 4);
    return gw_scalar(w, key, GGUF_VT_F32, u, 4, err);
}
int gguf_write_bool(gguf_write *w, const char *key, int v, strata_err *err) {
    return gw_scalar(w, key, GGUF_VT_BOOL, v != 0, 1, err);
}
int gguf_write_str(gguf_write *w, const char *key, const char *s, size_t len, strata_err *err) {
    if (gw_key(w, key, GGUF_VT_STRING, err)) return err->code;
    return put_str(&w->kv, s, len) ? gw_nomem(w, err) : 0;
}

/* Element sizes of the array types gguf_write_arr takes (0: not one). */
static int vt_bytes(int type) {
    switch (type) {
#define GW_VT_CASE(n, num, bytes, s)                                                               \
    case num: return bytes;
        GGUF_VT_LIST(GW_VT_CASE)
#undef GW_VT_CASE
    default: return 0;
    }
}

int gguf_write_arr(gguf_write *w, const char *key, int type, const void *data, uint64_t n,
                   strata_err *err) {
    int es = vt_bytes(type);
    if (es <= 0 || type == GGUF_VT_STRING || type == GGUF_VT_ARRAY)
        return strata_err_set(err, STRATA_EINVALID, "%s: key '%s': arrays of type %d", w->path, key,
                              type);
    if (gw_key(w, key, GGUF_VT_ARRAY, err)) return err->code;
    return put_le(&w->kv, (uint64_t)type, 4) || put_le(&w->kv, n, 8) ||
                   strbuf_add(&w->kv, data, (size_t)n * (size_t)es)
               ? gw_nomem(w, err)
               : 0;
}

int gguf_write_strs(gguf_write *w, const char *key, const char *const *s, const size_t *len,
                    uint64_t n, strata_err *err) {
    if (gw_key(w, key, GGUF_VT_ARRAY, err)) return err->code;
    if (put_le(&w->kv, GGUF_VT_STRING, 4) || put_le(&w->kv, n, 8)) return gw_nomem(w, err);
    for (uint64_t i = 0; i < n; i++)
        if (put_str(&w->kv, s[i], len ? len[i] : strlen(s[i]))) return gw_nomem(w, err);
    return 0;
}

int gguf_write_kv(gguf_write *w, const gguf_kv *kv, strata_err *err) {
    int arr = kv->type == GGUF_VT_ARRAY, es = vt_bytes(kv->elem_type);
    if (kv->elem_type != GGUF_VT_STRING && (es <= 0 || kv->elem_type == GGUF_VT_ARRAY))
        return strata_err_set(err, STRATA_EINVALID, "%s: key '%s': values of type %d", w->path,
                              kv->key, kv->elem_type);
    if (gw_key(w, kv->key, kv->type, err)) return err->code;
    int bad = arr && (put_le(&w->kv, (uint64_t)kv->elem_type, 4) || put_le(&w->kv, kv->n, 8));
    if (kv->elem_type == GGUF_VT_STRING)
        for (uint64_t i = 0; i < kv->n && !bad; i++)
            bad = put_str(&w->kv, kv->str[i].ptr, (size_t)kv->str[i].len);
    else if (!bad) bad = strbuf_add(&w->kv, kv->raw, (size_t)kv->n * (size_t)es);
    return bad ? gw_nomem(w, err) : 0;
}

int gguf_write_tensor(gguf_write *w, const char *name, int type, int ndim, const int64_t *shape,
                      strata_err *err) {
    uint32_t blk = gguf_ggml_block(type), bb = gguf_ggml_block_bytes(type);
    if (w->begun)
        return strata_err_set(err, STRATA_ESTATE, "%s: tensor %s added after the header", w->path,
                              name);
    if (!blk || ndim < 1 || ndim > GGUF_MAX_DIMS || shape[ndim - 1] % blk)
        return strata_err_set(err, STRATA_EINVALID,
                              "%s: tensor %s: %d dims of type %s (rows must be whole blocks)",
                              w->path, name, ndim, blk ? gguf_ggml_name(type) : "?");
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name))
            return strata_err_set(err, STRATA_EINVALID, "%s: tensor %s written twice", w->path,
                                  name);
    if (w->n_t == w->cap_t) {
        size_t nc = w->cap_t ? 2 * w->cap_t : 64;
        gw_tensor *nt = realloc(w->t, nc * sizeof *nt);
        if (!nt) return gw_nomem(w, err);
        w->t = nt;
        w->cap_t = nc;
    }
    gw_tensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        t->ne[i] = shape[ndim - 1 - i];
        if (shape[i] < 1)
            return strata_err_set(err, STRATA_EINVALID, "%s: tensor %s: dim %d is %lld", w->path,
                                  name, i, (long long)shape[i]);
        n *= (uint64_t)shape[i];
    }
    if (!(t->name = strdup(name))) return gw_nomem(w, err);
    t->type = type;
    t->ndim = ndim;
    t->nbytes = n / blk * bb;
    w->n_t++;
    return 0;
}

static uint64_t pad_to(uint64_t v) { return (v + GW_ALIGN - 1) / GW_ALIGN * GW_ALIGN; }

static int write_zeros(gguf_write *w, uint64_t n, strata_err *err) {
    static const char z[GW_ALIGN];
    return n && fwrite(z, 1, (size_t)n, w->f) != n ? gw_io(w, err) : 0;
}

int gguf_write_begin(gguf_write *w, strata_err *err) {
    strbuf h = {0};
    int rc = 0;
    if (w->begun) return strata_err_set(err, STRATA_ESTATE, "%s: header written twice", w->path);
    /* general.alignment is llama.cpp's default; written so a reader need not assume it */
    if (gguf_write_u32(w, "general.alignment", GW_ALIGN, err)) return err->code;
    w->begun = 1;
    uint64_t off = 0;
    int fail = put_le(&h, 0x46554747u, 4) || put_le(&h, 3, 4) || put_le(&h, w->n_t, 8) ||
               put_le(&h, w->n_kv, 8) || strbuf_add(&h, w->kv.p ? w->kv.p : "", w->kv.len);
    for (size_t i = 0; i < w->n_t && !fail; i++) {
        gw_tensor *t = &w->t[i];
        t->offset = off;
        off = pad_to(off + t->nbytes);
        fail = put_str(&h, t->name, strlen(t->name)) || put_le(&h, (uint64_t)t->ndim, 4);
        for (int d = 0; d < t->ndim && !fail; d++) fail = put_le(&h, (uint64_t)t->ne[d], 8);
        fail = fail || put_le(&h, (uint64_t)t->type, 4) || put_le(&h, t->offset, 8);
    }
    if (fail) {
        strbuf_free(&h);
        return gw_nomem(w, err);
    }
    w->data_end = off;
    strbuf_free(&w->kv); /* no longer needed: the header holds it */
    errno = 0;
    if (!(w->f = fopen(w->tmp, "wb"))) {
        rc = strata_err_set(err, STRATA_EIO, "%s: cannot create: %s", w->tmp, strerror(errno));
    } else {
        setvbuf(w->f, NULL, _IOFBF, (size_t)1 << 20);
        if (fwrite(h.p, 1, h.len, w->f) != h.len) rc = gw_io(w, err);
        else rc = write_zeros(w, pad_to(h.len) - h.len, err);
    }
    strbuf_free(&h);
    return rc;
}

int gguf_write_data(gguf_write *w, const void *data, size_t len, strata_err *err) {
    const char *p = data;
    if (!w->f) return strata_err_set(err, STRATA_ESTATE, "%s: data before the header", w->path);
    while (len) {
        if (w->cur >= w->n_t)
            return strata_err_set(err, STRATA_EINVALID, "%s: more data than the tensors declared",
                                  w->path);
        gw_tensor *t = &w->t[w->cur];
        uint64_t left = t->nbytes - w->cur_done, n = len < left ? len : left;
        errno = 0;
        if (fwrite(p, 1, (size_t)n, w->f) != n) return gw_io(w, err);
        p += n;
        len -= (size_t)n;
        w->cur_done += n;
        if (w->cur_done == t->nbytes) {
            /* the last tensor is padded too: llama.cpp checks the data section's size */
            if (write_zeros(w, pad_to(t->nbytes) - t->nbytes, err)) return err->code;
            w->cur++;
            w->cur_done = 0;
        }
    }
    return 0;
}

int gguf_write_finish(gguf_write *w, strata_err *err) {
    if (!w->f || w->cur != w->n_t)
        return strata_err_set(err, STRATA_ESTATE, "%s: tensor %s was not written in full", w->path,
                              w->cur < w->n_t ? w->t[w->cur].name : "(header)");
    errno = 0;
    int bad = fflush(w->f) != 0 || ferror(w->f);
    if (fclose(w->f) != 0) bad = 1;
    w->f = NULL;
    if (bad) return gw_io(w, err);
    if (rename(w->tmp, w->path) != 0)
        return strata_err_set(err, STRATA_EIO, "%s: cannot rename %s to it: %s", w->path, w->tmp,
                              strerror(errno));
    w->finished = 1;
    return 0;
}

int gguf_write_create(gguf_write **out, const char *path, strata_err *err) {
    gguf_write *w = calloc(1, sizeof *w);
    size_t n = strlen(path);
    if (!w || !(w->path = strdup(path)) || !(w->tmp = malloc(n + 5))) {
        gguf_write_destroy(w);
        return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", path);
    }
    memcpy(w->tmp, path, n);
    memcpy(w->tmp + n, ".tmp", 5);
    *out = w;
    return 0;
}

void gguf_write_destroy(gguf_write *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    if (w->begun && !w->finished && w->tmp) remove(w->tmp);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    strbuf_free(&w->kv);
    free(w->tmp);
    free(w->path);
    free(w);
}
