/* model_util.c - what the architecture files share: the open / close recipe every model
 * follows (arch_open runs a model's own parse, bind and alloc steps), the pieces of those
 * steps that are the same in every model (binding the embedding and head, activation
 * buffers, kv caches and recurrent state), and the forward's common steps (the batch
 * check, the embedding, the gated MLP, the head). Config reading is model_config.c. */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "models/arch.h"

/* ---- open, close and the slot state ---- */

/* arch, vocab, the sizes and the eos ids into info (see arch_open). */
static int arch_info(const model_arch_ctx *ctx, const arch_model *am, int top_too, model_info *info,
                     strata_err *err) {
    const int vocab = am->head.vocab;
    json_t *tc = json_object_get(ctx->config, "text_config");
    if ((ctx->gen_config && cfg_eos(json_object_get(ctx->gen_config, "eos_token_id"),
                                    "generation_config.json", vocab, info, err)) ||
        (tc && cfg_eos(json_object_get(tc, "eos_token_id"), "config.json text_config", vocab, info,
                       err)) ||
        ((!tc || top_too) &&
         cfg_eos(json_object_get(ctx->config, "eos_token_id"), "config.json", vocab, info, err)))
        return err->code;
    info->arch = am->steps->arch;
    info->vocab = vocab;
    info->ctx_size = am->ctx;
    info->max_seqs = am->slots;
    info->step_tokens = am->step_tokens;
    return 0;
}

/* What decode touches a token: the k and v rows of every kv cache, every recurrent state
 * read and written. */
static void cache_info(const arch_model *am, model_info *info) {
    for (int i = 0; i < am->n_layer; i++) {
        const arch_cache *c = &am->cache[i];
        if (c->kv.k) info->kv_bytes_per_token += 2LL * c->kv.width * (int64_t)dtype_size(c->kv.dt);
        if (c->conv)
            info->state_bytes += 2 * (int64_t)(c->conv_n + c->s_n) * (int64_t)sizeof(float);
    }
}

int arch_open(void **impl, const arch_steps *s, const model_arch_ctx *ctx, model_info *info,
              strata_err *err) {
    arch_model *am = calloc(1, s->size);
    if (!am) return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", s->arch);
    am->steps = s;
    am->b = ctx->b;
    const model_opts *o = ctx->opts;
    json_t *tc = ctx->config;
    const char *where = "config.json";
    if ((s->flags & ARCH_TEXT_CONFIG && cfg_text_config(ctx->config, &tc, &where, err)) ||
        s->parse(am, ctx, tc, where, err))
        goto fail;
    assert(am->cache); /* the parse step ends with arch_layers_new */
    am->slots = o->max_seqs > 0 ? o->max_seqs : 1;
    am->ctx = o->ctx_size > 0 ? o->ctx_size : am->max_pos;
    am->step_tokens = o->step_tokens > 0 ? o->step_tokens : 512;
    if (s->bind(am, ctx, err) || s->alloc(am, ctx, info, err) ||
        arch_info(ctx, am, s->flags & ARCH_EOS_TOP, info, err))
        goto fail;
    info->weight_bytes = am->weight_bytes;
    cache_info(am, info);
    *impl = am;
    return 0;
fail:
    arch_close(am);
    return err->code ? err->code : STRATA_EINVALID;
}

static void kv_free(backend *b, bk_kv *kv) {
    if (kv->k) b->ops->free(b, kv->k);
    if (kv->v) b->ops->free(b, kv->v);
    kv->k = kv->v = NULL;
}

void arch_close(void *impl) {
    arch_model *am = impl;
    if (!am) return;
    backend *b = am->b;
    if (am->steps->release) am->steps->release(am);
    for (int i = 0; i < am->n_bufs; i++) b->ops->free(b, am->bufs[i]);
    if (am->head.xo) b->ops->free(b, am->head.xo);
    if (am->head.lg) b->ops->free(b, am->head.lg);
    for (int i = 0; am->cache && i < am->n_layer; i++) {
        arch_cache *c = &am->cache[i];
        kv_free(b, &c->kv);
        if (c->conv) b->ops->free(b, c->conv);
        if (c->S) b->ops->free(b, c->S);
    }
    for (int i = 0; i < am->n_host; i++) free(am->host[i]);
    free(am);
}

void arch_reset_slot(void *impl, int slot) {
    const arch_model *am = impl;
    backend *b = am->b;
    for (int i = 0; i < am->n_layer; i++) {
        const arch_cache *c = &am->cache[i];
        if (!c->conv) continue;
        b->ops->zero(b, c->conv + (size_t)slot * c->conv_n, c->conv_n * sizeof(float));
        b->ops->zero(b, c->S + (size_t)slot * c->s_n, c->s_n * sizeof(float));
    }
}

int arch_state_parts(void *impl, arch_state_part *out, int max) {
    const arch_model *am = impl;
    int k = 0;
    for (int i = 0; i < am->n_layer && k + 2 <= max; i++) {
        const arch_cache *c = &am->cache[i];
        if (c->kv.k && !c->kv.block) { /* a ring: its rows are the slot's alone */
            size_t bytes = (size_t)c->kv.cap * (size_t)c->kv.width * dtype_size(c->kv.dt);
            out[k++] = (arch_state_part){c->kv.k, bytes};
            out[k++] = (arch_state_part){c->kv.v, bytes};
        } else if (c->conv) {
            out[k++] = (arch_state_part){c->conv, c->conv_n * sizeof(float)};
            out[k++] = (arch_state_part){c->S, c->s_n * sizeof(float)};
        }
    }
    return k;
}

void *arch_host_new(arch_model *am, size_t n, size_t size, strata_err *err) {
    /* a fixed list: more arrays than it holds is a bug of the model file */
    assert(am->n_host < ARCH_HOST_MAX);
    void *p = am->n_host < ARCH_HOST_MAX ? calloc(n ? n : 1, size) : NULL;
    if (!p) {
        strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", am->steps->arch);
        return NULL;
    }
    am->host[am->n_host++] = p;
    return p;
}

void *arch_layers_new(arch_model *am, int n_layer, int max_pos, size_t size, strata_err *err) {
    am->n_layer = n_layer;
    am->max_pos = max_pos;
    if (!(am->cache = arch_host_new(am, (size_t)n_layer, sizeof *am->cache, err))) return NULL;
    return arch_host_new(am, (size_t)n_layer, size, err);
}

/* ---- bind step ---- */

int arch_bind(const model_arch_ctx *ctx, bk_weight *w, int optional, int ndim, const int64_t *shape,
              strata_err *err, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return ctx->src->bind(ctx->src, name, ndim, shape, optional, w, err);
}

int arch_bind_embed(const model_arch_ctx *ctx, arch_model *am, int vocab, int h,
                    const char *const (*names)[2], int n, const char **prefix, strata_err *err) {
    int64_t shape[2] = {vocab, h};
    for (int i = 0; i < n; i++) {
        int rc = arch_bind(ctx, &am->embed, i + 1 < n ? ARCH_BIND_OPTIONAL : 0, 2, shape, err,
                           "%s%s", names[i][0], names[i][1]);
        if (rc < 0) return rc;
        if (rc == 0) {
            *prefix = names[i][0];
            return 0;
        }
    }
    return strata_err_set(err, STRATA_EINVALID, "%s: no name for the embedding", am->steps->arch);
}

int arch_head_bind(const model_arch_ctx *ctx, arch_model *am, int tied, const char *prefix,
                   const char *norm, int vocab, int h, strata_err *err) {
    arch_head *hd = &am->head;
    int64_t hv[1] = {h}, es[2] = {vocab, h};
    if (arch_bind(ctx, &hd->norm, 0, 1, hv, err, "%s%s", prefix, norm)) return err->code;
    if (tied) hd->w = am->embed;
    else if (arch_bind(ctx, &hd->w, 0, 2, es, err, "lm_head.weight")) return err->code;
    hd->h = h;
    hd->vocab = vocab;
    /* the tied embedding counts as the head: decode reads all of it there */
    am->weight_bytes += arch_weight_bytes(&hd->norm) + arch_weight_bytes(&hd->w);
    return 0;
}

int64_t arch_weight_bytes(const bk_weight *w) {
    if (!w->data) return 0;
    /* rows of the last dimension: a block type has no size per element */
    int64_t rows = 1, width = w->ndim > 0 ? w->shape[w->ndim - 1] : 1;
    for (int i = 0; i + 1 < w->ndim; i++) rows *= w->shape[i];
    return rows * (int64_t)dtype_row_bytes(w->dt, width);
}

/* ---- alloc step ---- */

/* Backend memory for n floats; the error names arch and what. */
static int alloc_floats(backend *b, float **out, size_t n, const char *arch, const char *what,
                        strata_err *err) {
    if ((*out = b->ops->alloc(b, n * sizeof(float)))) return 0;
    return strata_err_set(err, STRATA_ENOMEM, "%s: cannot allocate %s (%zu MiB)", arch, what,
                          n * sizeof(float) >> 20);
}

int arch_alloc(arch_model *am, float **out, size_t n, const char *what, strata_err *err) {
    /* a fixed list: more buffers than it holds is a bug of the model file */
    assert(am->n_bufs < ARCH_BUFS_MAX);
    if (am->n_bufs == ARCH_BUFS_MAX)
        return strata_err_set(err, STRATA_EINVALID, "%s: more than %d activation buffers",
                              am->steps->arch, ARCH_BUFS_MAX);
    if (alloc_floats(am->b, out, n, am->steps->arch, what, err)) return err->code;
    am->bufs[am->n_bufs++] = *out;
    return 0;
}

dtype arch_kv_dtype(const model_arch_ctx *ctx, dtype weights) {
    dtype dt = DTYPE_F32;
    backend_mem m;
    int sixteen = weights == DTYPE_BF16 || weights == DTYPE_F16;
    if (ctx->opts->kv_cache == MODEL_KV_F32) dt = DTYPE_F32;
    else if (ctx->opts->kv_cache == MODEL_KV_BF16) dt = DTYPE_BF16;
    else if (sixteen && backend_memory(ctx->b, &m) == 0) dt = DTYPE_BF16;
    backend_compute_dtype(ctx->b, dt);
    return dt;
}

int arch_head_init(arch_model *am, int norm_mode, float eps, float softcap, strata_err *err) {
    arch_head *hd = &am->head;
    hd->norm_mode = norm_mode;
    hd->eps = eps;
    hd->softcap = softcap;
    hd->chunk = am->slots > 16 ? am->slots : 16;
    if (hd->chunk > am->step_tokens) hd->chunk = am->step_tokens;
    if (alloc_floats(am->b, &hd->xo, (size_t)hd->chunk * hd->h, am->steps->arch, "head.xo", err) ||
        alloc_floats(am->b, &hd->lg, (size_t)hd->chunk * hd->vocab, am->steps->arch, "head.lg",
                     err))
        return err->code;
    return 0;
}

int arch_cache_recurrent(arch_model *am, int i, size_t conv_n, size_t s_n, strata_err *err) {
    arch_cache *c = &am->cache[i];
    const char *arch = am->steps->arch;
    c->conv_n = conv_n;
    c->s_n = s_n;
    if (alloc_floats(am->b, &c->conv, (size_t)am->slots * conv_n, arch, "conv_state", err) ||
        alloc_floats(am->b, &c->S, (size_t)am->slots * s_n, arch, "S", err))
        return err->code;
    return 0;
}

/* Both halves of a kv cache of slots x cap rows of width values in dt. */
static int kv_alloc(backend *b, bk_kv *kv, dtype dt, int slots, int cap, int width,
                    const char *arch, strata_err *err) {
    size_t bytes = (size_t)slots * (size_t)cap * (size_t)width * dtype_size(dt);
    *kv = (bk_kv){.dt = dt, .cap = cap, .width = width};
    kv->k = b->ops->alloc(b, bytes);
    kv->v = kv->k ? b->ops->alloc(b, bytes) : NULL;
    if (kv->v) return 0;
    kv_free(b, kv);
    return strata_err_set(err, STRATA_ENOMEM, "%s: cannot allocate a kv cache (2 x %zu MiB)", arch,
                          bytes >> 20);
}

/* Sizes ctx->pool for pos_bytes a position (arch_cache_paged). */
static int kv_pool_size(const model_arch_ctx *ctx, int64_t pos_bytes, int slots, int *ctx_size,
                        const char *arch, strata_err *err) {
    const model_opts *o = ctx->opts;
    int block = o->kv_block > 0 ? o->kv_block : 16;
    if (block & (block - 1))
        return strata_err_set(err, STRATA_EINVALID,
                              "%s: kv block of %d positions: a power of "
                              "two is needed",
                              arch, block);
    int64_t block_bytes = pos_bytes * block, budget = o->kv_memory;
    if (budget <= 0) {
        backend_mem bm;
        int64_t full = block_bytes * (((int64_t)*ctx_size + block - 1) / block) * slots;
        if (backend_memory(ctx->b, &bm) == 0) {
            double util = o->gpu_util > 0 ? o->gpu_util : 0.9;
            budget = (int64_t)(util * (double)bm.total) - (int64_t)bm.used - o->reserve_bytes -
                     ((int64_t)256 << 20);
            if (budget > full) budget = full;
        } else {
            long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
            int64_t quarter = pages > 0 && psz > 0 ? (int64_t)pages * psz / 4 : (int64_t)1 << 30;
            budget = full < quarter ? full : quarter;
        }
    }
    int64_t n = budget / block_bytes;
    if (n < 1)
        return strata_err_set(err, STRATA_ENOMEM,
                              "%s: a kv pool of %lld bytes holds no block of %d positions "
                              "(%lld bytes; --kv-cache-memory)",
                              arch, (long long)budget, block, (long long)block_bytes);
    if (n > (1 << 30)) n = 1 << 30;
    if (n * block < *ctx_size) *ctx_size = (int)(n * block);
    if (kv_pool_init(ctx->pool, block, (int)n, slots, *ctx_size, err)) return err->code;
    ctx->pool->block_bytes = block_bytes;
    return 0;
}

int arch_cache_ring(arch_model *am, int i, int cap, int width, strata_err *err) {
    return kv_alloc(am->b, &am->cache[i].kv, am->kv_dt, am->slots, cap, width, am->steps->arch,
                    err);
}

/* A kv cache waiting for its memory on the pool (arch_cache_paged). */
static int kv_declared(const bk_kv *kv) { return kv->width > 0 && !kv->k; }

int arch_cache_paged(const model_arch_ctx *ctx, arch_model *am, strata_err *err) {
    int64_t pos_bytes = 0;
    for (int i = 0; i < am->n_layer; i++) {
        const bk_kv *kv = &am->cache[i].kv;
        if (kv_declared(kv)) pos_bytes += 2 * (int64_t)kv->width * (int64_t)dtype_size(kv->dt);
    }
    if (!pos_bytes) return 0;
    if (kv_pool_size(ctx, pos_bytes, am->slots, &am->ctx, am->steps->arch, err)) return err->code;
    const kv_pool *p = ctx->pool;
    for (int i = 0; i < am->n_layer; i++) {
        bk_kv *kv = &am->cache[i].kv;
        if (!kv_declared(kv)) continue;
        if (kv_alloc(ctx->b, kv, kv->dt, p->n_blocks, p->block, kv->width, am->steps->arch, err))
            return err->code;
        kv->block = p->block;
        kv->cap = 0;
    }
    return 0;
}

/* ---- forward ---- */

int arch_batch_prepare(arch_model *am, bk_batch *bt, strata_err *err) {
    const char *arch = am->steps->arch;
    if (bt->n_tokens > am->step_tokens)
        return strata_err_set(err, STRATA_ERANGE, "%s: %d tokens in one step exceed max %d", arch,
                              bt->n_tokens, am->step_tokens);
    for (int s = 0; s < bt->n_seqs; s++)
        if (bt->pos0[s] + bt->len[s] > am->ctx)
            return strata_err_set(err, STRATA_ERANGE,
                                  "%s: sequence in slot %d reaches position %d, past the context "
                                  "size %d",
                                  arch, bt->slot[s], bt->pos0[s] + bt->len[s], am->ctx);
    return am->b->ops->batch_prepare(am->b, bt, err);
}

void arch_embed(backend *b, float *out, const bk_weight *table, const int32_t *tokens,
                const int32_t *fed, const bk_batch *bt) {
    if (fed) b->ops->embed_fed(b, out, table, tokens, fed, bt, bt->n_tokens);
    else b->ops->embed(b, out, table, tokens, bt->n_tokens);
}

void arch_glu_forward(backend *b, float *out, float *g, float *u, const float *x, const arch_glu *w,
                      int T, int act) {
    float *gu[] = {g, u};
    const bk_weight *ws[] = {&w->gate, &w->up};
    b->ops->matmul_n(b, gu, x, ws, 2, T);
    b->ops->matmul_glu(b, out, g, u, &w->down, T, act);
}

/* One chunk of rows through the head into hd->lg. */
static void arch_head_rows(backend *b, const arch_head *hd, const float *x, const int32_t *rows,
                           int n) {
    const backend_ops *o = b->ops;
    o->gather_rows(b, hd->xo, x, rows, n, hd->h);
    o->rmsnorm(b, hd->xo, hd->xo, &hd->norm, n, hd->h, hd->h, hd->eps, hd->norm_mode);
    o->matmul(b, hd->lg, hd->xo, &hd->w, n);
    if (hd->softcap > 0) o->softcap(b, hd->lg, hd->softcap, (size_t)n * hd->vocab);
}

void arch_logits(arch_model *am, const float *x, const int32_t *out_rows, int n_out,
                 model_out *out) {
    backend *b = am->b;
    const arch_head *hd = &am->head;
    const int ns = out->n_sample;
    for (int r = ns; r < n_out; r += hd->chunk) {
        int n = n_out - r < hd->chunk ? n_out - r : hd->chunk;
        arch_head_rows(b, hd, x, out_rows + r, n);
        b->ops->download(b, out->logits + (size_t)r * hd->vocab, hd->lg,
                         (size_t)n * hd->vocab * sizeof(float));
    }
    /* sampled last, so the last chunk's processed rows stay in lg for the host */
    for (int r = 0; r < ns; r += hd->chunk) {
        int n = ns - r < hd->chunk ? ns - r : hd->chunk;
        arch_head_rows(b, hd, x, out_rows + r, n);
        b->ops->sample(b, out->res + r, hd->lg, out->req + r, n, hd->vocab);
    }
    out->sampled_rows = ns && ns <= hd->chunk ? hd->lg : NULL;
}
