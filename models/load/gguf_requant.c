/* gguf_requant.c - `strata quantize IN.gguf OUT.gguf`: a GGUF file (llama.cpp's or strata's)
 * written again with its matrices in --type, what llama-quantize does. Every key is copied
 * but general.file_type (set for --type) and general.alignment (the writer's own); every
 * tensor keeps its name and shape. A matrix (gguf_matrix) takes --type as a checkpoint's does
 * (gq_matrix_type: strata's on-load rule; Q4_K falls back to Q5_0 where rows are not whole
 * 256-blocks, a matrix is kept where they are not whole blocks at all, Gemma 4's per-layer
 * table is kept); everything else is kept as stored. A kept tensor is copied byte for byte;
 * a converted one is dequantized row by row (engine/base/quant.h) and quantized again by
 * gguf_quant.c's writer. Quantizing an already quantized tensor into another block type
 * compounds two roundings, so like llama-quantize it needs allow_requantize (dequantizing
 * to f32 / f16 / bf16 does not). A tensor of a type strata does not read is an error naming
 * it, since its rows can be neither converted nor sized. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/load/gguf_quant_internal.h"

int gq_open_gguf(gq_plan *p, strata_err *err) {
    p->m.dir = p->m.o->in;
    snprintf(p->m.cfg_path, sizeof p->m.cfg_path, "%s", p->m.o->in);
    return gguf_open(&p->g, p->m.o->in, err);
}

/* Whether a GGUF tensor is one of the matrices strata binds as 2-D weights: the file's other
 * 2-D tensors are vectors the converter reshaped (ssm_a, ssm_d, Nemotron-H's grouped
 * ssm_norm) or the squeezed conv, which strata binds as 1-D / 3-D and never quantizes. The
 * same exclusions as llama-quantize's for these names. */
static int gguf_matrix(const gguf_tensor *g) {
    size_t n = strlen(g->name);
    return g->ndim == 2 && n > 7 && !strcmp(g->name + n - 7, ".weight") &&
           !strstr(g->name, "_norm.weight") && !strstr(g->name, "ssm_conv1d");
}

/* What a tensor of the input becomes (see the top of the file). */
static int plan_one(gq_plan *p, gq_tensor *t, strata_err *err) {
    const gguf_tensor *g = t->gt;
    dtype q = p->m.o->type, keep = gguf_ggml_dtype(g->type);
    if (keep == DTYPE_COUNT)
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s: tensor %s is %s, a type strata does not read (F32, F16, BF16, "
                              "Q8_0, Q4_0, Q5_0, Q4_K, Q6_K)",
                              p->m.o->in, g->name, gguf_ggml_name(g->type));
    t->from = keep;
    t->to = gguf_matrix(g) ? gq_matrix_type(q, g->name, g->shape, keep) : keep;
    if (t->to != keep && dtype_block_elems(keep) > 1 && dtype_block_elems(t->to) > 1 &&
        !p->m.o->allow_requantize)
        return strata_err_set(err, STRATA_EINVALID,
                              "%s: tensor %s is %s already; quantizing it again to %s compounds "
                              "two roundings (--allow-requantize to do it anyway)",
                              p->m.o->in, g->name, dtype_name(keep), dtype_name(t->to));
    return 0;
}

int gq_plan_gguf(gq_plan *p, strata_err *err) {
    int n = gguf_tensor_count(p->g);
    if (!(p->t = calloc((size_t)n + 1, sizeof *p->t)))
        return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", p->m.o->in);
    for (int i = 0; i < n; i++) {
        gq_tensor *t = &p->t[p->n];
        const gguf_tensor *g = gguf_tensor_at(p->g, i);
        t->gt = g;
        snprintf(t->gn.gg, sizeof t->gn.gg, "%s", g->name);
        t->ndim = g->ndim ? g->ndim : 1;
        for (int d = 0; d < g->ndim; d++) t->shape[d] = g->shape[d];
        if (!g->ndim) t->shape[0] = 1;
        t->cols = g->ne[0] ? g->ne[0] : 1;
        t->rows = g->n_elements / t->cols;
        if (plan_one(p, t, err)) return err->code;
        p->n++;
    }
    return 0;
}

int gq_meta_gguf(gguf_write *w, const gq_plan *p, strata_err *err) {
    for (int i = 0; i < gguf_kv_count(p->g); i++) {
        const gguf_kv *kv = gguf_kv_at(p->g, i);
        if (!strcmp(kv->key, "general.alignment") || !strcmp(kv->key, "general.file_type"))
            continue;
        if (gguf_write_kv(w, kv, err)) return err->code;
    }
    return gguf_write_u32(w, "general.file_type", gq_file_type(p->m.o->type), err);
}
