/* gguf_wsrc.c - the weight source of a GGUF file: binds the Hugging Face names the model files
 * ask for to llama.cpp's tensors (gguf_names.c) and hands them on in place, quantized blocks
 * included, through the same --quantization / --dtype / backend preparation as a checkpoint
 * (wsrc_take). What the converter changed is undone into buffers of the wsrc, and only there:
 * qwen35's norms stored as 1 + w (minus 1 in f32: exact for w of f32's range, since 1 + w was
 * itself rounded), A stored as -exp(A_log) (log(-A) in f32), squeezed and reshaped vectors
 * (same bytes), Qwen3.5's tiled V heads when Hk != Hv and Nemotron-H's rope permutation of q
 * and k rows. Rows move whole, so a quantized matrix is permuted back block for block; the
 * one move that cuts through blocks, ssm_out's columns in groups of head_v_dim, works on a
 * quantized file only when head_v_dim is a whole number of blocks (Q8_0's 32 on every
 * Qwen3.5; not Q4_K's 256 with head_v_dim 128). Where it does not (gguf_wsrc_v_tiled), every
 * V-indexed tensor stays in the file's tiled order, nothing of it moves, and the config says
 * so (strata_linear_v_tiled): the model runs the delta rule with the tiled head mapping. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/load/gguf_model.h"

struct gguf_wsrc {
    model_wsrc iface;
    const gguf *g;
    wsrc *w;
    char arch[32];
    int Hk, Hv, dk, dv; /* qwen35 linear attention (ssm.group_count, time_step_rank, ...) */
    int keep_tiled;     /* qwen35: the V heads stay tiled (gguf_wsrc_v_tiled) */
};

static void gw_shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t u = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && u < len; i++)
        u += (size_t)snprintf(buf + u, len - u, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (u < len) snprintf(buf + u, len - u, "]");
}

static float gw_get(const void *p, dtype dt, size_t i) {
    if (dt == DTYPE_BF16) return dtype_bf16_to_f32(((const uint16_t *)p)[i]);
    if (dt == DTYPE_F16) return dtype_f16_to_f32(((const uint16_t *)p)[i]);
    float v;
    memcpy(&v, (const char *)p + 4 * i, 4);
    return v;
}

/* The row of the GGUF tensor that strata's row r is, for the permutations of gguf_model.h. */
typedef struct gw_perm {
    int kind;          /* GGUF_XF_VROWS or GGUF_XF_QK_PERM */
    int64_t r0, hs;    /* VROWS: the V part starts at row r0, hs rows a head */
    int64_t Hk, ratio; /* VROWS: K heads, V heads per K head */
    int64_t D;         /* QK_PERM: head dim */
} gw_perm;

static int64_t gw_src_row(const gw_perm *p, int64_t r) {
    if (p->kind == GGUF_XF_QK_PERM) {
        /* llama's permute: GGUF row h·D + 2i + j holds HF row h·D + j·D/2 + i */
        int64_t h = r / p->D, w = r % p->D, half = p->D / 2;
        return h * p->D + 2 * (w % half) + w / half;
    }
    if (r < p->r0) return r;
    /* HF keeps V head s = k·ratio + v (grouped by K head k); the converter tiled it to
     * v·Hk + k */
    int64_t s = (r - p->r0) / p->hs, e = (r - p->r0) % p->hs;
    int64_t k = s / p->ratio, v = s % p->ratio;
    return p->r0 + (v * p->Hk + k) * p->hs + e;
}

/* The tensor's values as f32 in a new wsrc buffer, PLUS1 / NEG_EXP undone. */
static int gw_to_f32(gguf_wsrc *s, const gguf_tensor *t, dtype dt, int xf, const char *name,
                     float **out, strata_err *err) {
    const char *file = gguf_path(s->g);
    if (dtype_block_elems(dt) > 1)
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s: tensor %s (%s) is %s; strata reads it only as F32, F16 or BF16",
                              file, t->name, name, dtype_name(dt));
    size_t n = (size_t)t->n_elements;
    float *f = wsrc_alloc(s->w, n * sizeof *f);
    if (!f) return strata_err_set(err, STRATA_ENOMEM, "%s: no memory for %s", file, t->name);
    for (size_t i = 0; i < n; i++) {
        float v = gw_get(t->data, dt, i);
        if (xf & GGUF_XF_PLUS1) v -= 1.0f;
        if (xf & GGUF_XF_NEG_EXP) {
            if (!(v < 0))
                return strata_err_set(err, STRATA_EFORMAT,
                                      "%s: tensor %s[%zu] = %g: A = -exp(A_log) must be negative",
                                      file, t->name, i, v);
            v = logf(-v);
        }
        f[i] = v;
    }
    *out = f;
    return 0;
}

/* Rows of src moved back to HF order into a new wsrc buffer. */
static int gw_permute_rows(gguf_wsrc *s, const gguf_tensor *t, const void *src, size_t row_bytes,
                           int64_t rows, const gw_perm *p, void **out, strata_err *err) {
    char *d = wsrc_alloc(s->w, row_bytes * (size_t)rows);
    if (!d)
        return strata_err_set(err, STRATA_ENOMEM, "%s: no memory for %s", gguf_path(s->g), t->name);
    for (int64_t r = 0; r < rows; r++)
        memcpy(d + (size_t)r * row_bytes, (const char *)src + (size_t)gw_src_row(p, r) * row_bytes,
               row_bytes);
    *out = d;
    return 0;
}

/* out_proj's columns, in groups of dv, back to HF order; a block type only when dv is a whole
 * number of its blocks (else gguf_wsrc_v_tiled kept the file's order and this is not called:
 * the error below is for a caller that forgot). */
static int gw_permute_cols(gguf_wsrc *s, const gguf_tensor *t, const void *src, dtype dt,
                           int64_t rows, int64_t cols, const char *name, void **out,
                           strata_err *err) {
    int64_t blk = dtype_block_elems(dt);
    if (s->dv % blk || cols != (int64_t)s->Hv * s->dv)
        return strata_err_set(
            err, STRATA_EUNSUPPORTED,
            "%s: tensor %s (%s) is %s: its V-head columns (groups of %d, tiled by the converter "
            "for Hk %d != Hv %d) are not whole %lld-element blocks and cannot be put back in "
            "order",
            gguf_path(s->g), t->name, name, dtype_name(dt), s->dv, s->Hk, s->Hv, (long long)blk);
    size_t row_bytes = dtype_row_bytes(dt, cols), grp = dtype_row_bytes(dt, s->dv);
    char *d = wsrc_alloc(s->w, row_bytes * (size_t)rows);
    if (!d)
        return strata_err_set(err, STRATA_ENOMEM, "%s: no memory for %s", gguf_path(s->g), t->name);
    gw_perm p = {GGUF_XF_VROWS, 0, 1, s->Hk, s->Hv / s->Hk, 0};
    for (int64_t r = 0; r < rows; r++)
        for (int64_t h = 0; h < s->Hv; h++)
            memcpy(d + (size_t)r * row_bytes + (size_t)h * grp,
                   (const char *)src + (size_t)r * row_bytes + (size_t)gw_src_row(&p, h) * grp,
                   grp);
    *out = d;
    return 0;
}

/* The V-head row permutation of a qwen35 tensor with rows rows. */
static int gw_vperm(const gguf_wsrc *s, const gguf_tensor *t, int vpart, int64_t rows, gw_perm *p,
                    strata_err *err) {
    int64_t qk = 2LL * s->Hk * s->dk;
    *p = (gw_perm){GGUF_XF_VROWS, 0, 1, s->Hk, s->Hv / s->Hk, 0};
    if (vpart == GGUF_V_QKV || vpart == GGUF_V_CONV) p->r0 = qk;
    if (vpart != GGUF_V_HEAD1) p->hs = s->dv;
    if (p->r0 + (int64_t)s->Hv * p->hs != rows)
        return strata_err_set(
            err, STRATA_EFORMAT, "%s: tensor %s has %lld rows, the ssm metadata implies %lld",
            gguf_path(s->g), t->name, (long long)rows, (long long)(p->r0 + (int64_t)s->Hv * p->hs));
    return 0;
}

static int gw_bind(model_wsrc *iface, const char *name, int ndim, const int64_t *shape,
                   int optional, bk_weight *out, strata_err *err) {
    gguf_wsrc *s = iface->impl;
    const char *file = gguf_path(s->g);
    gguf_name gn;
    const gguf_tensor *t = NULL;
    if (gguf_names_find(s->arch, name, &gn) == 0) t = gguf_find_tensor(s->g, gn.gg);
    if (!t) {
        if (optional & ARCH_BIND_OPTIONAL) return 1;
        if (gguf_names_find(s->arch, name, &gn))
            return strata_err_set(err, STRATA_ENOTFOUND,
                                  "%s: %s has no tensor for %s (no name mapped)", file, s->arch,
                                  name);
        return strata_err_set(err, STRATA_ENOTFOUND, "%s: tensor %s is missing (strata's %s)", file,
                              gn.gg, name);
    }
    dtype dt = gguf_ggml_dtype(t->type);
    if (dt == DTYPE_COUNT)
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s: tensor %s has ggml type %s (strata reads F32, F16, BF16, Q8_0, "
                              "Q4_0, Q5_0, Q4_K and Q6_K)",
                              file, t->name, gguf_ggml_name(t->type));
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    int ok = (gn.xf & GGUF_XF_RESHAPE) ? t->n_elements == n : t->ndim == ndim;
    for (int i = 0; ok && !(gn.xf & GGUF_XF_RESHAPE) && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (!ok) {
        char want[96], got[96];
        gw_shape_str(want, sizeof want, ndim, shape);
        gw_shape_str(got, sizeof got, t->ndim, t->shape);
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: tensor %s has shape %s, the metadata implies %s (strata's %s)",
                              file, t->name, got, want, name);
    }
    bk_weight wt = {0};
    wt.dt = dt;
    wt.data = t->data;
    wt.ndim = ndim;
    memcpy(wt.shape, shape, sizeof(int64_t) * (size_t)ndim);
    /* rows: the outermost dim (or each element of a vector); cols: the rest */
    int64_t rows = ndim ? shape[0] : 1, cols = rows ? n / rows : 0;
    int tiled = !strcmp(s->arch, "qwen35") && s->Hk != s->Hv && !s->keep_tiled;
    if (gn.xf & (GGUF_XF_PLUS1 | GGUF_XF_NEG_EXP)) {
        float *f = NULL;
        if (gw_to_f32(s, t, dt, gn.xf, name, &f, err)) return err->code;
        wt.dt = DTYPE_F32;
        wt.data = f;
    }
    if ((gn.xf & GGUF_XF_VROWS) && tiled) {
        gw_perm p;
        void *d = NULL;
        if (gw_vperm(s, t, gn.vpart, rows, &p, err) ||
            gw_permute_rows(s, t, wt.data, dtype_row_bytes(wt.dt, cols), rows, &p, &d, err))
            return err->code;
        wt.data = d;
    }
    if ((gn.xf & GGUF_XF_VCOLS) && tiled) {
        void *d = NULL;
        if (gw_permute_cols(s, t, wt.data, wt.dt, rows, cols, name, &d, err)) return err->code;
        wt.data = d;
    }
    if (gn.xf & GGUF_XF_QK_PERM) {
        /* the head dim: the rows of a head, from key_length (head_count differs for q and k) */
        uint32_t D;
        void *d = NULL;
        char key[64];
        snprintf(key, sizeof key, "%s.attention.key_length", s->arch);
        if (gguf_get_u32(s->g, key, &D, err)) return err->code;
        if (D < 2 || D % 2 || rows % D)
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: tensor %s: %lld rows are not whole heads of %s = %u", file,
                                  t->name, (long long)rows, key, D);
        gw_perm p = {GGUF_XF_QK_PERM, 0, 1, 1, 1, D};
        if (gw_permute_rows(s, t, wt.data, dtype_row_bytes(wt.dt, cols), rows, &p, &d, err))
            return err->code;
        wt.data = d;
    }
    return wsrc_take(s->w, file, name, &wt, optional, out, err);
}

/* One of the linear-attention sizes of a qwen35 file, > 0. */
static int gw_size(const gguf *g, const char *key, int *out, strata_err *err) {
    uint32_t v;
    if (gguf_get_u32(g, key, &v, err)) return err->code;
    if (v < 1 || v > 1 << 20)
        return strata_err_set(err, STRATA_ERANGE, "%s: key '%s' = %u is out of range", gguf_path(g),
                              key, v);
    *out = (int)v;
    return 0;
}

/* The linear-attention head counts and sizes of a qwen35 file. */
static int gw_qwen35_sizes(const gguf *g, int *Hk, int *Hv, int *dk, int *dv, strata_err *err) {
    int inner;
    if (gw_size(g, "qwen35.ssm.group_count", Hk, err) ||
        gw_size(g, "qwen35.ssm.time_step_rank", Hv, err) ||
        gw_size(g, "qwen35.ssm.state_size", dk, err) ||
        gw_size(g, "qwen35.ssm.inner_size", &inner, err))
        return err->code;
    if (*Hv % *Hk || inner % *Hv)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: qwen35.ssm.time_step_rank %d is not a multiple of group_count "
                              "%d, or inner_size %d of it",
                              gguf_path(g), *Hv, *Hk, inner);
    *dv = inner / *Hv;
    return 0;
}

int gguf_wsrc_v_tiled(const gguf *g, int *tiled, strata_err *err) {
    gguf_str a;
    int Hk, Hv, dk, dv, keep = 0;
    uint32_t n;
    if (gguf_get_str(g, "general.architecture", &a, err)) return err->code;
    if (a.len != 6 || memcmp(a.ptr, "qwen35", 6)) {
        *tiled = 0;
        return 0;
    }
    if (gw_qwen35_sizes(g, &Hk, &Hv, &dk, &dv, err) ||
        gguf_get_u32(g, "qwen35.block_count", &n, err))
        return err->code;
    /* the tests' switch (docs/gguf.md): the tiled path on a file that could be un-tiled */
    const char *force = getenv("STRATA_GGUF_V_TILED");
    if (force && *force && strcmp(force, "0") && strcmp(force, "1"))
        return strata_err_set(err, STRATA_EINVALID, "STRATA_GGUF_V_TILED=%s: expected 0 or 1",
                              force);
    if (Hk != Hv) keep = force && !strcmp(force, "1");
    for (uint32_t l = 0; l < n && Hk != Hv && !keep; l++) {
        char hf[64];
        gguf_name gn;
        snprintf(hf, sizeof hf, "layers.%u.linear_attn.out_proj.weight", l);
        if (gguf_names_find("qwen35", hf, &gn)) continue;
        assert(gn.xf & GGUF_XF_VCOLS);
        const gguf_tensor *t = gguf_find_tensor(g, gn.gg); /* absent on full-attention layers */
        dtype dt = t ? gguf_ggml_dtype(t->type) : DTYPE_COUNT;
        keep = dt != DTYPE_COUNT && dv % dtype_block_elems(dt) != 0;
    }
    *tiled = keep;
    return 0;
}

int gguf_wsrc_create(gguf_wsrc **out, const gguf *g, wsrc *w, strata_err *err) {
    gguf_str a;
    if (gguf_get_str(g, "general.architecture", &a, err)) return err->code;
    gguf_wsrc *s = calloc(1, sizeof *s);
    if (!s) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    s->iface.bind = gw_bind;
    s->iface.impl = s;
    s->g = g;
    s->w = w;
    snprintf(s->arch, sizeof s->arch, "%.*s", (int)(a.len < 31 ? a.len : 31), a.ptr);
    if (!strcmp(s->arch, "qwen35") && (gw_qwen35_sizes(g, &s->Hk, &s->Hv, &s->dk, &s->dv, err) ||
                                       gguf_wsrc_v_tiled(g, &s->keep_tiled, err)))
        goto fail;
    *out = s;
    return 0;
fail:
    free(s);
    return err->code;
}

void gguf_wsrc_destroy(gguf_wsrc *s) { free(s); }

model_wsrc *gguf_wsrc_iface(gguf_wsrc *s) { return &s->iface; }
