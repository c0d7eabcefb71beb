/* model_util.c - typed reads of config.json fields with messages naming the field. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "models/arch.h"

/* 1 with *v set when the field has a value; 0 when it is absent or null and has a default;
 * an error when it has none. */
static int cfg_present(json_t *obj, const char *where, const char *key, int has_def, json_t **v,
                       strata_err *err) {
    *v = obj ? json_object_get(obj, key) : NULL;
    if (*v && !json_is_null(*v)) return 1;
    if (has_def) return 0;
    return strata_err_set(err, STRATA_EFORMAT, "%s: missing field \"%s\"", where, key);
}

int cfg_int(json_t *obj, const char *where, const char *key, int has_def, long long def,
            long long lo, long long hi, long long *out, strata_err *err) {
    json_t *v;
    int r = cfg_present(obj, where, key, has_def, &v, err);
    if (r <= 0) {
        if (!r) *out = def;
        return r;
    }
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9e15) {
        x = (long long)json_real_value(v);
    } else {
        return strata_err_set(err, STRATA_EFORMAT, "%s: field \"%s\" must be an integer", where,
                              key);
    }
    if (x < lo || x > hi)
        return strata_err_set(err, STRATA_ERANGE, "%s: field \"%s\" = %lld is outside [%lld, %lld]",
                              where, key, x, lo, hi);
    *out = x;
    return 0;
}

int cfg_real(json_t *obj, const char *where, const char *key, int has_def, double def, double *out,
             strata_err *err) {
    json_t *v;
    int r = cfg_present(obj, where, key, has_def, &v, err);
    if (r <= 0) {
        if (!r) *out = def;
        return r;
    }
    if (!json_is_number(v))
        return strata_err_set(err, STRATA_EFORMAT, "%s: field \"%s\" must be a number", where, key);
    *out = json_number_value(v);
    if (!isfinite(*out))
        return strata_err_set(err, STRATA_ERANGE, "%s: field \"%s\" is not finite", where, key);
    return 0;
}

int cfg_bool(json_t *obj, const char *where, const char *key, int has_def, int def, int *out,
             strata_err *err) {
    json_t *v;
    int r = cfg_present(obj, where, key, has_def, &v, err);
    if (r <= 0) {
        if (!r) *out = def;
        return r;
    }
    if (!json_is_boolean(v))
        return strata_err_set(err, STRATA_EFORMAT, "%s: field \"%s\" must be true or false", where,
                              key);
    *out = json_is_true(v);
    return 0;
}

int cfg_str(json_t *obj, const char *where, const char *key, const char *def, const char **out,
            strata_err *err) {
    json_t *v = obj ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_string(v))
        return strata_err_set(err, STRATA_EFORMAT, "%s: field \"%s\" must be a string", where, key);
    *out = json_string_value(v);
    return 0;
}

static void eos_add(model_info *info, long long id) {
    for (int i = 0; i < info->n_eos; i++)
        if (info->eos[i] == id) return;
    if (info->n_eos < (int)(sizeof info->eos / sizeof info->eos[0]))
        info->eos[info->n_eos++] = (int32_t)id;
}

static int eos_one(json_t *v, const char *where, size_t i, int is_list, int vocab, model_info *info,
                   strata_err *err) {
    char name[40];
    snprintf(name, sizeof name, is_list ? "eos_token_id[%zu]" : "eos_token_id", i);
    if (!json_is_integer(v))
        return strata_err_set(err, STRATA_EFORMAT, "%s: %s must be an integer", where, name);
    long long id = json_integer_value(v);
    if (id < 0 || id >= vocab)
        return strata_err_set(err, STRATA_ERANGE, "%s: %s = %lld is outside the vocabulary [0, %d)",
                              where, name, id, vocab);
    eos_add(info, id);
    return 0;
}

int cfg_eos(json_t *val, const char *where, int vocab, model_info *info, strata_err *err) {
    if (!val || json_is_null(val)) return 0;
    if (!json_is_array(val)) return eos_one(val, where, 0, 0, vocab, info, err);
    size_t i;
    json_t *e;
    json_array_foreach(val, i, e)
        if (eos_one(e, where, i, 1, vocab, info, err)) return err->code;
    return 0;
}

int cfg_text_config(json_t *root, json_t **tc, const char **where, strata_err *err) {
    *tc = json_object_get(root, "text_config");
    *where = "config.json";
    if (!*tc) {
        *tc = root;
        return 0;
    }
    *where = "config.json text_config";
    if (json_is_object(*tc)) return 0;
    return strata_err_set(err, STRATA_EFORMAT, "config.json: text_config must be an object");
}

void arch_sizes(const model_arch_ctx *ctx, int max_pos, int *slots, int *ctx_size,
                int *step_tokens) {
    const model_opts *o = ctx->opts;
    *slots = o->max_seqs > 0 ? o->max_seqs : 1;
    *ctx_size = o->ctx_size > 0 ? o->ctx_size : max_pos;
    *step_tokens = o->step_tokens > 0 ? o->step_tokens : 512;
}

int arch_info(const model_arch_ctx *ctx, const char *arch, int vocab, int slots, int ctx_size,
              int step_tokens, int top_too, model_info *info, strata_err *err) {
    json_t *tc = json_object_get(ctx->config, "text_config");
    if ((ctx->gen_config && cfg_eos(json_object_get(ctx->gen_config, "eos_token_id"),
                                    "generation_config.json", vocab, info, err)) ||
        (tc && cfg_eos(json_object_get(tc, "eos_token_id"), "config.json text_config", vocab, info,
                       err)) ||
        ((!tc || top_too) &&
         cfg_eos(json_object_get(ctx->config, "eos_token_id"), "config.json", vocab, info, err)))
        return err->code;
    info->arch = arch;
    info->vocab = vocab;
    info->ctx_size = ctx_size;
    info->max_seqs = slots;
    info->step_tokens = step_tokens;
    return 0;
}

int arch_bind(const model_arch_ctx *ctx, bk_weight *w, int optional, int ndim, const int64_t *shape,
              strata_err *err, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return ctx->src->bind(ctx->src, name, ndim, shape, optional, w, err);
}

int64_t arch_weight_bytes(const bk_weight *w) {
    if (!w->data) return 0;
    int64_t n = 1;
    for (int i = 0; i < w->ndim; i++) n *= w->shape[i];
    return n * (int64_t)dtype_size(w->dt);
}

int64_t arch_weights_bytes(const bk_weight *const *ws, size_t n) {
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++) sum += arch_weight_bytes(ws[i]);
    return sum;
}

void *arch_layers_new(const char *arch, int n, size_t size, strata_err *err) {
    void *p = calloc((size_t)(n > 0 ? n : 1), size);
    if (!p) strata_err_set(err, STRATA_ENOMEM, "%s: out of memory for %d layers", arch, n);
    return p;
}

int arch_alloc(backend *b, float **out, size_t n, const char *arch, const char *what,
               strata_err *err) {
    if ((*out = b->ops->alloc(b, n * sizeof(float)))) return 0;
    return strata_err_set(err, STRATA_ENOMEM, "%s: cannot allocate %s (%zu MiB)", arch, what,
                          n * sizeof(float) >> 20);
}

dtype arch_kv_dtype(const model_arch_ctx *ctx, dtype weights) {
    if (ctx->opts->kv_cache == MODEL_KV_F32) return DTYPE_F32;
    if (ctx->opts->kv_cache == MODEL_KV_BF16) return DTYPE_BF16;
    backend_mem m;
    int sixteen = weights == DTYPE_BF16 || weights == DTYPE_F16;
    return sixteen && backend_memory(ctx->b, &m) == 0 ? DTYPE_BF16 : DTYPE_F32;
}

int arch_kv_alloc(backend *b, bk_kv *kv, dtype dt, int slots, int cap, int width, const char *arch,
                  strata_err *err) {
    size_t bytes = (size_t)slots * (size_t)cap * (size_t)width * dtype_size(dt);
    *kv = (bk_kv){.dt = dt, .cap = cap, .width = width};
    kv->k = b->ops->alloc(b, bytes);
    kv->v = kv->k ? b->ops->alloc(b, bytes) : NULL;
    if (kv->v) return 0;
    arch_kv_free(b, kv);
    return strata_err_set(err, STRATA_ENOMEM, "%s: cannot allocate a kv cache (2 x %zu MiB)", arch,
                          bytes >> 20);
}

void arch_kv_free(backend *b, bk_kv *kv) {
    if (kv->k) b->ops->free(b, kv->k);
    if (kv->v) b->ops->free(b, kv->v);
    kv->k = kv->v = NULL;
}

int arch_kv_pool(const model_arch_ctx *ctx, int64_t pos_bytes, int slots, int *ctx_size,
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

int arch_kv_alloc_paged(const model_arch_ctx *ctx, bk_kv *kv, dtype dt, int width, const char *arch,
                        strata_err *err) {
    const kv_pool *p = ctx->pool;
    if (arch_kv_alloc(ctx->b, kv, dt, p->n_blocks, p->block, width, arch, err)) return err->code;
    kv->block = p->block;
    kv->cap = 0;
    return 0;
}

int arch_check_batch(const char *arch, const bk_batch *bt, int step_tokens, int ctx,
                     strata_err *err) {
    if (bt->n_tokens > step_tokens)
        return strata_err_set(err, STRATA_ERANGE, "%s: %d tokens in one step exceed max %d", arch,
                              bt->n_tokens, step_tokens);
    for (int s = 0; s < bt->n_seqs; s++)
        if (bt->pos0[s] + bt->len[s] > ctx)
            return strata_err_set(err, STRATA_ERANGE,
                                  "%s: sequence in slot %d reaches position %d, past the context "
                                  "size %d",
                                  arch, bt->slot[s], bt->pos0[s] + bt->len[s], ctx);
    return 0;
}

int arch_head_init(backend *b, arch_head *hd, const char *arch, int slots, int step_tokens,
                   strata_err *err) {
    hd->chunk = slots > 16 ? slots : 16;
    if (hd->chunk > step_tokens) hd->chunk = step_tokens;
    if (arch_alloc(b, &hd->xo, (size_t)hd->chunk * hd->h, arch, "head.xo", err) ||
        arch_alloc(b, &hd->lg, (size_t)hd->chunk * hd->vocab, arch, "head.lg", err))
        return err->code;
    return 0;
}

void arch_head_free(backend *b, arch_head *hd) {
    if (hd->xo) b->ops->free(b, hd->xo);
    if (hd->lg) b->ops->free(b, hd->lg);
    hd->xo = hd->lg = NULL;
}

/* One chunk of rows through the head into hd->lg. */
static void arch_head_rows(backend *b, const arch_head *hd, const float *x, const int32_t *rows,
                           int n) {
    const backend_ops *o = b->ops;
    o->gather_rows(b, hd->xo, x, rows, n, hd->h);
    o->rmsnorm(b, hd->xo, hd->xo, hd->norm, n, hd->h, hd->h, hd->eps, hd->norm_mode);
    o->matmul(b, hd->lg, hd->xo, hd->head, n);
    if (hd->softcap > 0) o->softcap(b, hd->lg, hd->softcap, (size_t)n * hd->vocab);
}

void arch_logits(backend *b, const arch_head *hd, const float *x, const int32_t *out_rows,
                 int n_out, model_out *out) {
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

void arch_embed(backend *b, float *out, const bk_weight *table, const int32_t *tokens,
                const int32_t *fed, const bk_batch *bt) {
    if (fed) b->ops->embed_fed(b, out, table, tokens, fed, bt, bt->n_tokens);
    else b->ops->embed(b, out, table, tokens, bt->n_tokens);
}
