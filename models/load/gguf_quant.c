/* gguf_quant.c - `strata quantize`: a safetensors checkpoint (or a GGUF file, gguf_requant.c)
 * written as a GGUF file that llama.cpp and strata's own GGUF loader read. Each checkpoint
 * tensor strata binds is found in gguf_names.c's table (the names and transforms gguf_wsrc.c
 * undoes) and written with the converter's transform applied: qwen35's norms as 1 + w, A_log
 * as A = -exp(A_log), vectors reshaped, Nemotron-H's q / k rows in llama's rope order,
 * Qwen3.5's V heads tiled when Hk != Hv. Matrices take the block type wsrc_quant_target gives --quantization, so a file
 * written here holds exactly the weights strata quantizes on load (llama.cpp's reference
 * quantizers, quant_quantize_row); the rest is F32, or kept as stored where the rule keeps a
 * matrix. Tensors stream through in chunks of rows (threads split a chunk), so memory stays at
 * a few chunks whatever the model's size. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/quant.h"
#include "models/load/gguf_quant_internal.h"
#include "models/load/safetensors.h"

#define GQ_MAX_THREADS 64
#define GQ_CHUNK_BYTES ((size_t)32 << 20) /* output bytes per chunk */

/* Element i of F32, F16 or BF16 data. */
static float float_value(const void *data, dtype dt, size_t i) {
    if (dt == DTYPE_BF16) return dtype_bf16_to_f32(((const uint16_t *)data)[i]);
    if (dt == DTYPE_F16) return dtype_f16_to_f32(((const uint16_t *)data)[i]);
    float v;
    memcpy(&v, (const char *)data + 4 * i, 4);
    return v;
}

/* A = -exp(x), nudged by an ulp or two where needed so that the loader's log(-A) gives x back
 * exactly: the file then carries the checkpoint's A_log bit for bit through strata. */
static float neg_exp(float x) {
    float a = -expf(x);
    for (int k = 0; k < 4 && logf(-a) != x; k++) {
        float up = nextafterf(a, -INFINITY), dn = nextafterf(a, 0.0f);
        if (logf(-up) == x) return up;
        if (logf(-dn) == x) return dn;
        a = logf(-a) < x ? up : dn;
    }
    return logf(-a) == x ? a : -expf(x);
}

/* The HF row GGUF row g is made from (the inverses of gguf_wsrc.c's permutations). */
static int64_t src_row(const gq_plan *p, const gq_tensor *t, int64_t g) {
    if (t->gn.xf & GGUF_XF_QK_PERM) {
        /* GGUF row h·D + 2i + j holds HF row h·D + j·D/2 + i */
        int64_t h = g / p->D, u = g % p->D;
        return h * p->D + (u % 2) * (p->D / 2) + u / 2;
    }
    if (!(t->gn.xf & GGUF_XF_VROWS) || !t->tiled || g < t->r0) return g;
    /* tiled V head s_t = v·Hk + k holds HF head k·(Hv/Hk) + v */
    int64_t st = (g - t->r0) / t->hs, e = (g - t->r0) % t->hs;
    int64_t k = st % p->Hk, v = st / p->Hk;
    return t->r0 + (k * (p->Hv / p->Hk) + v) * t->hs + e;
}

/* GGUF row g of t as f32, transforms applied, into row[cols]. */
static void build_row(const gq_plan *p, const gq_tensor *t, int64_t g, float *row) {
    if (t->gt) {
        const char *src = (const char *)t->gt->data + (size_t)g * dtype_row_bytes(t->from, t->cols);
        if (dtype_block_elems(t->from) > 1) quant_dequantize_row(row, src, t->from, t->cols);
        else
            for (int64_t c = 0; c < t->cols; c++) row[c] = float_value(src, t->from, (size_t)c);
        return;
    }
    if (!t->st) {
        row[0] = p->rope[g];
        return;
    }
    size_t base = (size_t)src_row(p, t, g) * (size_t)t->cols;
    int vcols = (t->gn.xf & GGUF_XF_VCOLS) && t->tiled;
    for (int64_t c = 0; c < t->cols; c++) {
        int64_t sc = c;
        if (vcols) { /* column groups of dv tiled as the V heads are */
            int64_t grp = c / p->dv, e = c % p->dv, k = grp % p->Hk, v = grp / p->Hk;
            sc = (k * (p->Hv / p->Hk) + v) * p->dv + e;
        }
        float x = float_value(t->st->data, t->st->dt, base + (size_t)sc);
        if (t->gn.xf & GGUF_XF_PLUS1) x += 1.0f;
        if (t->gn.xf & GGUF_XF_NEG_EXP) x = neg_exp(x);
        row[c] = x;
    }
}

typedef struct gq_job {
    const gq_plan *p;
    const gq_tensor *t;
    char *dst; /* the chunk's output */
    int64_t g0, g1, chunk0;
    int rc;
} gq_job;

static void *run_rows(void *arg) {
    gq_job *j = arg;
    const gq_tensor *t = j->t;
    size_t rb = dtype_row_bytes(t->to, t->cols);
    float *row = malloc(sizeof(float) * (size_t)t->cols);
    if (!row) {
        j->rc = -1;
        return NULL;
    }
    for (int64_t g = j->g0; g < j->g1; g++) {
        char *d = j->dst + (size_t)(g - j->chunk0) * rb;
        if (t->gt && t->to == t->from) { /* kept: the stored bytes */
            memcpy(d, (const char *)t->gt->data + (size_t)g * rb, rb);
            continue;
        }
        build_row(j->p, t, g, row);
        if (dtype_block_elems(t->to) > 1) {
            if (quant_quantize_row(d, row, t->to, t->cols)) j->rc = -1;
        } else {
            for (int64_t c = 0; c < t->cols; c++) {
                if (t->to == DTYPE_F32) memcpy(d + 4 * c, &row[c], 4);
                else {
                    uint16_t h =
                        t->to == DTYPE_BF16 ? dtype_f32_to_bf16(row[c]) : dtype_f32_to_f16(row[c]);
                    memcpy(d + 2 * c, &h, 2);
                }
            }
        }
    }
    free(row);
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Streams every tensor's rows through the threads to w. */
static int write_data(gq_plan *p, gguf_write *w, strata_err *err) {
    int nt = p->m.o->threads > 0 ? p->m.o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nt < 1) nt = 1;
    if (nt > GQ_MAX_THREADS) nt = GQ_MAX_THREADS;
    char *buf = NULL;
    size_t cap = 0;
    int rc = 0;
    double t0 = now_s(), shown = t0;
    uint64_t done = 0, total = 0;
    for (size_t i = 0; i < p->n; i++)
        total += dtype_row_bytes(p->t[i].to, p->t[i].cols) * p->t[i].rows;
    for (size_t i = 0; i < p->n && !rc; i++) {
        const gq_tensor *t = &p->t[i];
        size_t rb = dtype_row_bytes(t->to, t->cols);
        int64_t per = (int64_t)(GQ_CHUNK_BYTES / rb);
        if (per < 1) per = 1;
        if (per > t->rows) per = t->rows;
        if ((size_t)per * rb > cap) {
            free(buf);
            cap = (size_t)per * rb;
            if (!(buf = malloc(cap))) {
                rc = strata_err_set(err, STRATA_ENOMEM, "%s: no memory for %s (%zu MiB)",
                                    p->m.o->out, t->gn.gg, cap >> 20);
                break;
            }
        }
        for (int64_t c0 = 0; c0 < t->rows && !rc; c0 += per) {
            int64_t c1 = c0 + per < t->rows ? c0 + per : t->rows, n = c1 - c0;
            /* small chunks on one thread: starting threads would cost more than the rows */
            int use = (size_t)n * rb < ((size_t)1 << 18) ? 1 : nt;
            if (use > n) use = (int)n;
            gq_job jobs[GQ_MAX_THREADS];
            pthread_t th[GQ_MAX_THREADS];
            int started[GQ_MAX_THREADS] = {0};
            for (int k = 0; k < use; k++) {
                jobs[k] = (gq_job){p, t, buf, c0 + n * k / use, c0 + n * (k + 1) / use, c0, 0};
                if (k > 0 && pthread_create(&th[k], NULL, run_rows, &jobs[k]) == 0) started[k] = 1;
            }
            run_rows(&jobs[0]);
            for (int k = 1; k < use; k++) {
                if (started[k]) pthread_join(th[k], NULL);
                else run_rows(&jobs[k]);
            }
            for (int k = 0; k < use; k++)
                if (jobs[k].rc)
                    rc = strata_err_set(err, STRATA_ENOMEM, "%s: cannot quantize %s to %s",
                                        p->m.o->out, t->gn.gg, dtype_name(t->to));
            if (!rc) rc = gguf_write_data(w, buf, (size_t)n * rb, err);
            done += (uint64_t)n * rb;
            if (!rc && p->m.o->note && now_s() - shown >= 1.0) {
                char line[160];
                shown = now_s();
                snprintf(line, sizeof line,
                         "strata: quantize: %zu/%zu tensors, %llu/%llu MiB (%.0f s)", i + 1, p->n,
                         (unsigned long long)(done >> 20), (unsigned long long)(total >> 20),
                         shown - t0);
                p->m.o->note(p->m.o->note_ctx, 1, line);
            }
        }
    }
    free(buf);
    return rc;
}

/* What t becomes: a matrix takes gq_matrix_type; everything else is F32, as llama.cpp
 * stores vectors. */
dtype gq_matrix_type(dtype q, const char *gg, const int64_t *shape, dtype stored) {
    if (dtype_block_elems(q) <= 1) return q;
    /* Gemma 4's per-layer table is bound to host memory (ARCH_BIND_HOST), never quantized */
    int flags = !strcmp(gg, "per_layer_token_embd.weight") ? ARCH_BIND_HOST : 0;
    dtype to = wsrc_quant_target(q, 2, shape, flags);
    return to == DTYPE_COUNT ? stored : to;
}

static int plan_type(gq_plan *p, gq_tensor *t, strata_err *err) {
    const st_tensor *st = t->st;
    /* a tiled ssm_out whose V-head columns are not whole blocks (Q4_K at head_v_dim 128)
     * stays tiled in strata's loader too (gguf_wsrc_v_tiled) */
    t->to = st->ndim != 2 ? DTYPE_F32 : gq_matrix_type(p->m.o->type, t->gn.gg, st->shape, st->dt);
    (void)err;
    return 0;
}

/* The GGUF dims of t (the converter's squeeze and reshapes), outermost first. */
static int plan_shape(gq_plan *p, gq_tensor *t, strata_err *err) {
    const st_tensor *st = t->st;
    t->ndim = 0;
    if (!(t->gn.xf & GGUF_XF_RESHAPE)) {
        if (st->ndim > GGUF_MAX_DIMS || st->ndim < 1)
            return strata_err_set(err, STRATA_EUNSUPPORTED, "%s: tensor %s has %d dims", st->file,
                                  st->name, st->ndim);
        t->ndim = st->ndim;
        memcpy(t->shape, st->shape, sizeof(int64_t) * (size_t)st->ndim);
        return 0;
    }
    int64_t n = t->rows * t->cols;
    const char *gg = strrchr(t->gn.gg, '.') ? t->gn.gg : t->gn.gg;
    if (strstr(gg, "ssm_conv1d")) { /* [C, 1, K] squeezed */
        for (int i = 0; i < st->ndim; i++)
            if (st->shape[i] != 1) t->shape[t->ndim++] = st->shape[i];
    } else if (strstr(gg, "ssm_norm")) { /* Mamba2's gated norm per group: [G, n / G] */
        long long G;
        if (gq_cfg_int(&p->m, "n_groups|mamba_n_groups|mamba_num_groups", 1, 8, &G, err))
            return err->code;
        if (G < 1 || n % G)
            return strata_err_set(err, STRATA_EFORMAT, "%s: tensor %s (%lld) is not %lld groups",
                                  st->file, st->name, (long long)n, G);
        t->ndim = 2;
        t->shape[0] = G;
        t->shape[1] = n / G;
    } else { /* Mamba2's per-head vectors: [mH, 1] */
        t->ndim = 2;
        t->shape[0] = n;
        t->shape[1] = 1;
    }
    if (t->ndim == 0) t->shape[t->ndim++] = 1;
    return 0;
}

/* The V-head permutation's extent for a qwen35 tensor (gguf_wsrc.c's gw_vperm). */
static int plan_vrows(gq_plan *p, gq_tensor *t, strata_err *err) {
    t->r0 = (t->gn.vpart == GGUF_V_QKV || t->gn.vpart == GGUF_V_CONV) ? 2 * p->Hk * p->dk : 0;
    t->hs = t->gn.vpart == GGUF_V_HEAD1 ? 1 : p->dv;
    if ((t->gn.xf & GGUF_XF_VROWS) && t->r0 + p->Hv * t->hs != t->rows)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: tensor %s has %lld rows, the linear-attention config implies "
                              "%lld",
                              t->st->file, t->st->name, (long long)t->rows,
                              (long long)(t->r0 + p->Hv * t->hs));
    if ((t->gn.xf & GGUF_XF_VCOLS) && t->cols != p->Hv * p->dv)
        return strata_err_set(err, STRATA_EFORMAT, "%s: tensor %s has %lld columns, not Hv x dv",
                              t->st->file, t->st->name, (long long)t->cols);
    return 0;
}

static int plan_tensors(gq_plan *p, strata_err *err) {
    int n_st = st_count(p->st), skipped = 0;
    if (!(p->t = calloc((size_t)n_st + 1, sizeof *p->t)))
        return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", p->m.dir);
    if (p->n_rope) { /* generated: Gemma 4's rope_freqs */
        gq_tensor *t = &p->t[p->n++];
        snprintf(t->gn.gg, sizeof t->gn.gg, "rope_freqs.weight");
        t->to = DTYPE_F32;
        t->ndim = 1;
        t->shape[0] = t->rows = p->n_rope;
        t->cols = 1;
    }
    for (int i = 0; i < n_st; i++) {
        const st_tensor *st = st_get(p->st, i);
        gq_tensor *t = &p->t[p->n];
        memset(t, 0, sizeof *t);
        t->st = st;
        if (gguf_names_find(p->m.arch, st->name, &t->gn) ||
            (p->m.tied && !strcmp(t->gn.gg, "output.weight"))) {
            skipped++;
            continue;
        }
        if (st->dt != DTYPE_F32 && st->dt != DTYPE_F16 && st->dt != DTYPE_BF16)
            return strata_err_set(err, STRATA_EUNSUPPORTED,
                                  "%s: tensor %s has dtype %s (BF16, F16 or F32 expected)",
                                  st->file, st->name, dtype_name(st->dt));
        int64_t n = 1;
        for (int d = 0; d < st->ndim; d++) n *= st->shape[d];
        t->rows = st->ndim ? st->shape[0] : 1;
        t->cols = t->rows ? n / t->rows : 0;
        t->tiled = !strcmp(p->m.arch, "qwen35") && p->Hk != p->Hv &&
                   (t->gn.xf & (GGUF_XF_VROWS | GGUF_XF_VCOLS));
        if (t->tiled && plan_vrows(p, t, err)) return err->code;
        if ((t->gn.xf & GGUF_XF_QK_PERM) && (p->D < 2 || p->D % 2 || t->rows % p->D))
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: tensor %s: %lld rows are not whole heads of head_dim %lld",
                                  st->file, st->name, (long long)t->rows, (long long)p->D);
        if (plan_type(p, t, err) || plan_shape(p, t, err)) return err->code;
        p->n++;
    }
    if (skipped)
        gq_note(&p->m,
                "%s: %d tensors left out (no llama.cpp name: vision tower, MTP head, a tied "
                "lm_head)",
                p->m.dir, skipped);
    return 0;
}

/* config.json's model_type -> general.architecture */
static const struct {
    const char *model_type, *arch;
} gq_archs[] = {
    {"qwen3_5", "qwen35"},     {"qwen3_5_text", "qwen35"},   {"gemma4", "gemma4"},
    {"gemma4_text", "gemma4"}, {"nemotron_h", "nemotron_h"},
};

static int open_model(gq_plan *p, const gguf_quant_opts *o, strata_err *err) {
    gq_model *m = &p->m;
    json_error_t je;
    char gp[4300];
    m->o = o;
    m->dir = o->in;
    snprintf(m->cfg_path, sizeof m->cfg_path, "%s/config.json", o->in);
    if (access(m->cfg_path, R_OK))
        return strata_err_set(err, STRATA_ENOTFOUND, "%s: not a model directory (no config.json)",
                              o->in);
    if (!(m->root = json_load_file(m->cfg_path, 0, &je)) || !json_is_object(m->root))
        return strata_err_set(err, STRATA_EFORMAT, "%s:%d: %s", m->cfg_path, je.line,
                              m->root ? "not a JSON object" : je.text);
    json_t *tc = json_object_get(m->root, "text_config");
    m->tc = json_is_object(tc) ? tc : m->root;
    snprintf(gp, sizeof gp, "%s/generation_config.json", o->in);
    m->gen = json_load_file(gp, 0, &je); /* optional */
    const char *mt = json_string_value(json_object_get(m->root, "model_type"));
    for (size_t i = 0; mt && i < sizeof gq_archs / sizeof gq_archs[0]; i++)
        if (!strcmp(mt, gq_archs[i].model_type)) m->arch = gq_archs[i].arch;
    if (!m->arch)
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s: model_type \"%s\" has no GGUF writer (qwen3_5, gemma4, "
                              "nemotron_h)",
                              m->cfg_path, mt ? mt : "(missing)");
    json_t *tie = json_object_get(m->tc, "tie_word_embeddings");
    if (!tie) tie = json_object_get(m->root, "tie_word_embeddings");
    m->tied = tie ? json_is_true(tie) : strcmp(m->arch, "nemotron_h") != 0;
    long long hk = 0, hv = 0, dk = 0, dv = 0, d = 0;
    if (gq_cfg_int(m, "vocab_size", 0, 0, &m->vocab, err) ||
        (!strcmp(m->arch, "qwen35") && (gq_cfg_int(m, "linear_num_key_heads", 0, 0, &hk, err) ||
                                        gq_cfg_int(m, "linear_num_value_heads", 0, 0, &hv, err) ||
                                        gq_cfg_int(m, "linear_key_head_dim", 0, 0, &dk, err) ||
                                        gq_cfg_int(m, "linear_value_head_dim", 0, 0, &dv, err))) ||
        gq_cfg_int(m, "head_dim|attention_head_dim", 1, 0, &d, err))
        return err->code;
    if (hk && (hv % hk || !dv))
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: linear_num_value_heads %lld is not a multiple of "
                              "linear_num_key_heads %lld",
                              m->cfg_path, hv, hk);
    p->Hk = hk;
    p->Hv = hv;
    p->dk = dk;
    p->dv = dv;
    p->D = d;
    if (gq_rope_freqs(m, p->rope, (int)(sizeof p->rope / sizeof p->rope[0]), &p->n_rope, err))
        return err->code;
    return st_open(&p->st, o->in, err);
}

int gguf_quantize(const gguf_quant_opts *o, strata_err *err) {
    gq_plan p;
    gguf_write *w = NULL;
    int rc;
    memset(&p, 0, sizeof p);
    if (o->type != DTYPE_Q8_0 && o->type != DTYPE_Q4_K && o->type != DTYPE_F32 &&
        o->type != DTYPE_F16 && o->type != DTYPE_BF16) {
        rc = strata_err_set(err, STRATA_EINVALID, "--type %s: allowed q8_0, q4_k, bf16, f16, f32",
                            dtype_name(o->type));
        goto out;
    }
    if (gguf_model_is_gguf(o->in)) {
        p.m.o = o;
        if ((rc = gq_open_gguf(&p, err)) || (rc = gq_plan_gguf(&p, err)) ||
            (rc = gguf_write_create(&w, o->out, err)) || (rc = gq_meta_gguf(w, &p, err)))
            goto out;
    } else if ((rc = open_model(&p, o, err)) || (rc = plan_tensors(&p, err)) ||
               (rc = gguf_write_create(&w, o->out, err)) || (rc = gq_meta(w, &p.m, err)) ||
               (rc = gq_text(w, &p.m, err))) {
        goto out;
    }
    for (size_t i = 0; i < p.n; i++)
        if ((rc = gguf_write_tensor(w, p.t[i].gn.gg, gguf_dtype_ggml(p.t[i].to), p.t[i].ndim,
                                    p.t[i].shape, err)))
            goto out;
    if ((rc = gguf_write_begin(w, err)) || (rc = write_data(&p, w, err)) ||
        (rc = gguf_write_finish(w, err)))
        goto out;
    gq_note(&p.m, "strata: wrote %s: %zu tensors (%s)", o->out, p.n, dtype_name(o->type));
out:
    gguf_write_destroy(w); /* removes the .tmp unless finished */
    free(p.t);
    st_close(p.st);
    gguf_close(p.g);
    json_decref(p.m.root);
    json_decref(p.m.gen);
    return rc;
}
