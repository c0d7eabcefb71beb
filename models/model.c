/* model.c - opens a model by directory, GGUF file or preset name and guards its forward.
 *
 * Reads config.json (or a preset's, or the one a GGUF file's metadata stands for), picks the
 * architecture by model_type, maps the checkpoint (or makes dummy weights) and hands both to
 * models/<arch>.c. Every input
 * of model_forward is validated here, once, so architectures can trust it. */
#include "models/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "models/load/gguf_model.h"
#include "models/load/safetensors.h"
#include "models/load/wsrc.h"
#include "models/arch.h"

struct model {
    const model_arch *arch;
    void *impl;
    model_info info;
    st_model *st;
    gguf *gg;        /* a GGUF file's mapping (--model FILE.gguf), else NULL */
    gguf_wsrc *gsrc; /* its weight source, over src */
    wsrc *src;
    backend *b;
    json_t *config, *gen_config;
    unsigned char *slot_busy; /* [max_seqs] scratch for the distinct-slot check */
    kv_pool pool;             /* the paged kv blocks (n_blocks 0: no paged layer) */
    arch_state_part state[ARCH_STATE_MAX];
    int n_state;
};

static int read_json(const char *path, json_t **out, int optional, strata_err *err) {
    json_error_t je;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (optional) {
            *out = NULL;
            return 0;
        }
        return strata_err_set(err, STRATA_ENOTFOUND, "%s: no such file", path);
    }
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        return strata_err_set(err, STRATA_EFORMAT, "%s:%d:%d: %s", path, je.line, je.column,
                              je.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return strata_err_set(err, STRATA_EFORMAT, "%s: top level must be a JSON object", path);
    }
    *out = j;
    return 0;
}

void model_close(model *m) {
    if (!m) return;
    if (m->impl) m->arch->close(m->impl);
    gguf_wsrc_destroy(m->gsrc);
    wsrc_destroy(m->src);
    st_close(m->st);
    gguf_close(m->gg);
    json_decref(m->config);
    json_decref(m->gen_config);
    free(m->slot_busy);
    kv_pool_deinit(&m->pool);
    free(m);
}

backend *model_backend(const model *m) { return m->b; }

int model_open(model **out, const model_opts *opts, backend *b, strata_err *err) {
    model *m = calloc(1, sizeof *m);
    char path[4096];
    if (!m) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    m->b = b;
    const char *preset = opts->load_dummy ? arch_preset_config(opts->path) : NULL;
    const char *cfg_name = "config.json";
    if (!preset && !opts->load_dummy && gguf_model_is_gguf(opts->path)) {
        /* a GGUF file: its metadata stands for both JSON files */
        cfg_name = "metadata";
        if (gguf_open(&m->gg, opts->path, err) ||
            gguf_model_config(m->gg, &m->config, &m->gen_config, err))
            goto fail;
    } else if (preset) {
        json_error_t je;
        m->config = json_loads(preset, 0, &je);
        if (!m->config) {
            strata_err_set(err, STRATA_EFORMAT, "preset %s: %s", opts->path, je.text);
            goto fail;
        }
    } else {
        struct stat sb;
        if (stat(opts->path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            char names[512];
            arch_preset_names(names, sizeof names);
            strata_err_set(err, STRATA_ENOTFOUND, "%s: not a model directory%s%s", opts->path,
                           opts->load_dummy ? " nor a preset; presets: " : "",
                           opts->load_dummy ? names : "");
            goto fail;
        }
        snprintf(path, sizeof path, "%s/config.json", opts->path);
        if (read_json(path, &m->config, 0, err)) goto fail;
        snprintf(path, sizeof path, "%s/generation_config.json", opts->path);
        if (read_json(path, &m->gen_config, 1, err)) goto fail;
    }
    const char *mt = json_string_value(json_object_get(m->config, "model_type"));
    m->arch = arch_find(mt);
    if (!m->arch) {
        strata_err_set(err, STRATA_EUNSUPPORTED, "%s/%s: model_type \"%s\" is not supported",
                       opts->path, cfg_name, mt ? mt : "(missing)");
        goto fail;
    }
    if (!opts->load_dummy && !m->gg && st_open(&m->st, opts->path, err)) goto fail;
    if (wsrc_create(&m->src, m->st, opts->path, opts->weight_dtype, opts->seed, b, err)) goto fail;
    /* the CUDA backend uploads every weight anyway; the CPU one streams them where they lie */
    wsrc_copy_mapped(m->src, !opts->weights_mmap && !strcmp(backend_name(b), "cpu"));
    if (dtype_block_elems(opts->quant) > 1 &&
        wsrc_quantize(m->src, opts->quant, opts->quant_as_f32, err))
        goto fail;
    if (m->gg && gguf_wsrc_create(&m->gsrc, m->gg, m->src, err)) goto fail;
    model_arch_ctx ctx = {b,
                          m->gsrc ? gguf_wsrc_iface(m->gsrc) : wsrc_iface(m->src),
                          opts,
                          m->config,
                          m->gen_config,
                          &m->pool};
    if (m->arch->open(&m->impl, &ctx, &m->info, err)) {
        m->impl = NULL;
        goto fail;
    }
    wsrc_report(m->src);
    m->info.kv_block = m->pool.block;
    m->info.kv_blocks = m->pool.n_blocks;
    m->info.kv_block_bytes = m->pool.block_bytes;
    m->n_state = m->arch->state_parts(m->impl, m->state, ARCH_STATE_MAX);
    for (int i = 0; i < m->n_state; i++) m->info.slot_state_bytes += (int64_t)m->state[i].bytes;
    m->slot_busy = calloc((size_t)m->info.max_seqs, 1);
    if (!m->slot_busy) {
        strata_err_set(err, STRATA_ENOMEM, "out of memory");
        goto fail;
    }
    *out = m;
    return 0;
fail:
    model_close(m);
    return err->code ? err->code : STRATA_EINVALID;
}

const model_info *model_get_info(const model *m) { return &m->info; }

void model_reset_slot(model *m, int slot) {
    if (slot < 0 || slot >= m->info.max_seqs) return;
    model_release_slot(m, slot);
    m->arch->reset_slot(m->impl, slot);
}

void model_release_slot(model *m, int slot) {
    if (m->pool.n_blocks && slot >= 0 && slot < m->info.max_seqs) kv_pool_release(&m->pool, slot);
}

int model_kv_free(const model *m) { return m->pool.n_free; }
int model_kv_used(const model *m) { return kv_pool_used(&m->pool); }
int model_kv_held(const model *m) { return kv_pool_held(&m->pool); }
int model_kv_peak(const model *m) { return (int)m->pool.peak_used; }

int model_kv_need(const model *m, int slot, int end) {
    return m->pool.n_blocks ? kv_pool_need(&m->pool, slot, end) : 0;
}

int model_kv_table(const model *m, int slot, const int32_t **ids) {
    if (!m->pool.n_blocks) {
        *ids = NULL;
        return 0;
    }
    return kv_pool_table(&m->pool, slot, ids);
}

void model_kv_attach(model *m, int slot, const int32_t *ids, int n) {
    if (m->pool.n_blocks) kv_pool_attach(&m->pool, slot, ids, n);
}

void model_kv_ref(model *m, int32_t id) { kv_pool_ref(&m->pool, id); }
void model_kv_unref(model *m, int32_t id) { kv_pool_unref(&m->pool, id); }
int model_kv_refs(const model *m, int32_t id) { return m->pool.refs[id]; }

int model_kv_step_width(const model *m, int end) {
    return m->pool.n_blocks ? kv_pool_step_width(&m->pool, end) : 0;
}

void model_state_save(model *m, int slot, void *dst) {
    char *d = dst;
    for (int i = 0; i < m->n_state; i++) {
        const arch_state_part *p = &m->state[i];
        m->b->ops->copy(m->b, d, (const char *)p->base + (size_t)slot * p->bytes, p->bytes);
        d += p->bytes;
    }
}

void model_state_load(model *m, int slot, const void *src) {
    const char *s = src;
    for (int i = 0; i < m->n_state; i++) {
        const arch_state_part *p = &m->state[i];
        m->b->ops->copy(m->b, (char *)p->base + (size_t)slot * p->bytes, s, p->bytes);
        s += p->bytes;
    }
}

/* Takes the blocks the step's sequences reach and lays out their table rows in bt. */
static int model_kv_prepare(model *m, bk_batch *bt, strata_err *err) {
    kv_pool *p = &m->pool;
    int end = 0;
    for (int s = 0; s < bt->n_seqs; s++) {
        int e = bt->pos0[s] + bt->len[s];
        if (kv_pool_reserve(p, bt->slot[s], e, err)) return err->code;
        end = e > end ? e : end;
    }
    int w = kv_pool_step_width(p, end);
    for (int s = 0; s < bt->n_seqs; s++) {
        const int32_t *ids;
        int n = kv_pool_table(p, bt->slot[s], &ids);
        int32_t *row = p->step + (size_t)s * w;
        if (n > w) n = w;
        memcpy(row, ids, (size_t)n * sizeof *row);
        memset(row + n, 0, (size_t)(w - n) * sizeof *row); /* never read: a valid id anyway */
    }
    bt->blk = p->step;
    bt->blk_w = w;
    return 0;
}

/* The batch must be what backend.h promises the ops: contiguous sequences in
 * distinct slots, positions in order, ids inside the vocabulary. */
static int check_batch(model *m, const bk_batch *bt, const int32_t *tokens, const int32_t *out_rows,
                       int n_out, int fed, strata_err *err) {
    const model_info *in = &m->info;
    if (bt->n_tokens <= 0 || bt->n_tokens > in->step_tokens || bt->n_seqs <= 0 ||
        bt->n_seqs > in->max_seqs)
        return strata_err_set(err, STRATA_EINVALID,
                              "step of %d tokens in %d sequences (max %d, %d)", bt->n_tokens,
                              bt->n_seqs, in->step_tokens, in->max_seqs);
    memset(m->slot_busy, 0, (size_t)in->max_seqs);
    int next = 0;
    for (int s = 0; s < bt->n_seqs; s++) {
        int slot = bt->slot[s];
        if (slot < 0 || slot >= in->max_seqs || m->slot_busy[slot])
            return strata_err_set(err, STRATA_EINVALID, "sequence %d: slot %d invalid or repeated",
                                  s, slot);
        m->slot_busy[slot] = 1;
        if (bt->start[s] != next || bt->len[s] <= 0 || bt->pos0[s] < 0)
            return strata_err_set(err, STRATA_EINVALID, "sequence %d: tokens not contiguous", s);
        if (bt->pos0[s] + bt->len[s] > in->ctx_size)
            return strata_err_set(err, STRATA_ERANGE,
                                  "sequence in slot %d would reach position %d, past the context "
                                  "size %d",
                                  slot, bt->pos0[s] + bt->len[s], in->ctx_size);
        for (int i = 0; i < bt->len[s]; i++)
            if (bt->tok_seq[next + i] != s || bt->tok_pos[next + i] != bt->pos0[s] + i)
                return strata_err_set(err, STRATA_EINVALID, "token %d: layout disagrees", next + i);
        next += bt->len[s];
    }
    if (next != bt->n_tokens)
        return strata_err_set(err, STRATA_EINVALID, "sequences cover %d of %d tokens", next,
                              bt->n_tokens);
    for (int i = 0; i < bt->n_tokens; i++)
        if ((tokens[i] < 0 && !fed) || tokens[i] >= in->vocab)
            return strata_err_set(err, STRATA_ERANGE,
                                  "token id %d is outside the vocabulary [0, %d)", tokens[i],
                                  in->vocab);
    for (int i = 0; i < n_out; i++)
        if (out_rows[i] < 0 || out_rows[i] >= bt->n_tokens)
            return strata_err_set(err, STRATA_EINVALID, "logit row %d is not a token of the step",
                                  out_rows[i]);
    return 0;
}

int model_kv_cache_parse(const char *s) {
    if (!s || !strcmp(s, "auto")) return MODEL_KV_AUTO;
    if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) return MODEL_KV_BF16;
    if (!strcmp(s, "f32") || !strcmp(s, "float32")) return MODEL_KV_F32;
    return -1;
}

int model_quant_parse(const char *s, dtype *out) {
    if (!s || !strcasecmp(s, "none")) *out = DTYPE_F32;
    else if (!strcasecmp(s, "q8_0")) *out = DTYPE_Q8_0;
    else if (!strcasecmp(s, "q4_k")) *out = DTYPE_Q4_K;
    else return -1;
    return 0;
}

int model_forward(model *m, bk_batch *bt, const int32_t *tokens, const int32_t *out_rows, int n_out,
                  float *logits, strata_err *err) {
    model_out out = {.logits = logits};
    return model_forward_to(m, bt, tokens, out_rows, n_out, &out, err);
}

int model_forward_to(model *m, bk_batch *bt, const int32_t *tokens, const int32_t *out_rows,
                     int n_out, model_out *out, strata_err *err) {
    if (out->fed && (m->info.host_ids || !m->b->ops->embed_fed))
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "forward: this model (or the %s backend) takes no ids fed on the "
                              "device",
                              backend_name(m->b));
    if (check_batch(m, bt, tokens, out_rows, n_out, out->fed != NULL, err)) return err->code;
    if (out->n_sample < 0 || out->n_sample > n_out || (out->n_sample && (!out->req || !out->res)))
        return strata_err_set(err, STRATA_EINVALID, "forward: %d sampled rows of %d", out->n_sample,
                              n_out);
    if (out->n_sample && !m->b->ops->sample)
        return strata_err_set(err, STRATA_EUNSUPPORTED, "%s backend: no device sampler",
                              backend_name(m->b));
    out->sampled_rows = NULL;
    bt->blk = NULL;
    bt->blk_w = 0;
    if (m->pool.n_blocks && model_kv_prepare(m, bt, err)) return err->code;
    return m->arch->forward(m->impl, bt, tokens, out_rows, n_out, out, err);
}
