/* arch.h - what an architecture file implements, and the helpers it gets.
 *
 * models/<arch>.c parses its config, binds its weights through a weight source
 * (a checkpoint or dummy weights; the model cannot tell which), allocates its caches
 * and runs its forward against kernels/backend.h. models/model.c picks the arch from
 * config.json's model_type and owns the weight source. */
#ifndef STRATA_ARCH_H
#define STRATA_ARCH_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "models/kv_pool.h"
#include "models/load/wsrc.h"
#include "models/model.h"

typedef struct model_arch_ctx {
    backend *b;
    model_wsrc *src;
    const model_opts *opts;
    json_t *config;     /* the whole config.json (borrowed) */
    json_t *gen_config; /* generation_config.json or NULL (borrowed) */
    kv_pool *pool;      /* the paged kv pool, sized by arch_kv_pool (owned by model.c) */
} model_arch_ctx;

/* One part of a slot's recurrent state: bytes at base + slot · bytes (backend memory). */
typedef struct arch_state_part {
    void *base;
    size_t bytes;
} arch_state_part;
#define ARCH_STATE_MAX 256 /* parts a model may have (two per layer) */

typedef struct model_arch {
    const char *model_type; /* config.json model_type this arch accepts */
    const char *alt_type;   /* a second accepted model_type (e.g. the text-only one) or NULL */
    /* Parses config, binds weights, allocates caches; fills info. */
    int (*open)(void **impl, const model_arch_ctx *ctx, model_info *info, strata_err *err);
    int (*forward)(void *impl, bk_batch *bt, const int32_t *tokens, const int32_t *out_rows,
                   int n_out, model_out *out, strata_err *err);
    void (*reset_slot)(void *impl, int slot);
    /* The parts of a slot's state outside the paged pool, in a fixed order; returns how
     * many (<= max). */
    int (*state_parts)(void *impl, arch_state_part *out, int max);
    void (*close)(void *impl);
} model_arch;

/* The registry (models/registry.c). NULL when no arch accepts model_type. */
const model_arch *arch_find(const char *model_type);
/* Built-in configs of real checkpoints for --load-format dummy (models/presets.c):
 * a config.json text, or NULL when name is not a preset. */
const char *arch_preset_config(const char *name);
/* Writes the preset names, comma separated, into buf (for messages). */
void arch_preset_names(char *buf, size_t len);

/* ---- config helpers: every error names the field (models/model_util.c) ---- */
/* Integer field; missing -> def when has_def, else an error. */
int cfg_int(json_t *obj, const char *where, const char *key, int has_def, long long def,
            long long lo, long long hi, long long *out, strata_err *err);
int cfg_real(json_t *obj, const char *where, const char *key, int has_def, double def, double *out,
             strata_err *err);
int cfg_bool(json_t *obj, const char *where, const char *key, int has_def, int def, int *out,
             strata_err *err);
/* String field; returns the borrowed string, def when missing (may be NULL). */
int cfg_str(json_t *obj, const char *where, const char *key, const char *def, const char **out,
            strata_err *err);
/* Rejects keys of obj that are in neither known list (NULL-terminated). */
int cfg_check_keys(json_t *obj, const char *where, const char *const *known,
                   const char *const *ignored, strata_err *err);
/* ---- config.json fields as tables (models/model_config.c) ----
 * A row reads one field into a member of the architecture's config struct, with its
 * type, range and default, or checks a field the architecture supports one value of.
 * keys may list aliases, "a|b|c": the first one present wins, the first one names it. */
enum { CFG_T_INT, CFG_T_FLOAT, CFG_T_DOUBLE, CFG_T_BOOL, CFG_T_ONLY_STR, CFG_T_ONLY_FALSE };
typedef struct cfg_field {
    const char *keys;
    int type;
    size_t off;         /* member offset: int (INT, BOOL), float, double */
    int required;       /* else def when absent or null */
    double def, lo, hi; /* INT, FLOAT, DOUBLE: the accepted range, inclusive */
    const char *only;   /* ONLY_STR: the one value supported, also the default */
} cfg_field;
#define CFG_INT(T, m, keys, lo, hi)                                                                \
    { keys, CFG_T_INT, offsetof(T, m), 1, 0, lo, hi, NULL }
#define CFG_INT_OR(T, m, keys, def, lo, hi)                                                        \
    { keys, CFG_T_INT, offsetof(T, m), 0, def, lo, hi, NULL }
#define CFG_FLOAT_OR(T, m, keys, def, lo, hi)                                                      \
    { keys, CFG_T_FLOAT, offsetof(T, m), 0, def, lo, hi, NULL }
#define CFG_DOUBLE_OR(T, m, keys, def, lo, hi)                                                     \
    { keys, CFG_T_DOUBLE, offsetof(T, m), 0, def, lo, hi, NULL }
#define CFG_BOOL_OR(T, m, keys, def)                                                               \
    { keys, CFG_T_BOOL, offsetof(T, m), 0, def, 0, 1, NULL }
#define CFG_ONLY_STR(keys, value)                                                                  \
    { keys, CFG_T_ONLY_STR, 0, 0, 0, 0, 0, value }
#define CFG_ONLY_FALSE(keys)                                                                       \
    { keys, CFG_T_ONLY_FALSE, 0, 0, 0, 0, 0, NULL }
/* Reads every row of fields[0..n) from obj into dst. optional: the required rows take
 * their default too (fields of a mixer the model does not have). */
int cfg_read(json_t *obj, const char *where, const cfg_field *fields, size_t n, void *dst,
             int optional, strata_err *err);
#define CFG_READ(obj, where, table, dst, optional, err)                                            \
    cfg_read(obj, where, table, sizeof(table) / sizeof((table)[0]), dst, optional, err)
/* cfg_check_keys, with the keys of the tables and transformers' generic
 * PretrainedConfig keys counted as known. */
int cfg_check_keys_tables(json_t *obj, const char *where, const cfg_field *const *tables,
                          const size_t *sizes, size_t n_tables, const char *const *known,
                          const char *const *ignored, strata_err *err);

/* eos ids from an int or list field into info (dedup, up to 8); each must be an
 * integer in [0, vocab). */
int cfg_eos(json_t *val, const char *where, int vocab, model_info *info, strata_err *err);

/* The object holding a model's text fields: config.json's text_config when there is one
 * (it must be an object), else config.json itself; *where names it for messages. */
int cfg_text_config(json_t *root, json_t **tc, const char **where, strata_err *err);

/* The sizes a model runs with: slots (default 1), context (default the model's max_pos)
 * and tokens a step (default 512), unless the options set them. */
void arch_sizes(const model_arch_ctx *ctx, int max_pos, int *slots, int *ctx_size,
                int *step_tokens);
/* What every open reports: arch, vocab, the sizes, and the eos ids of
 * generation_config.json, then config.json's text_config, then config.json's top level
 * (only where there is no text_config, unless top_too). */
int arch_info(const model_arch_ctx *ctx, const char *arch, int vocab, int slots, int ctx_size,
              int step_tokens, int top_too, model_info *info, strata_err *err);

/* ---- the pieces every forward shares (models/model_util.c) ---- */
/* Backend memory for n floats; the error names arch and what. */
int arch_alloc(backend *b, float **out, size_t n, const char *arch, const char *what,
               strata_err *err);
/* In an open function with b, err and ARCH_NAME defined: returns on failure. */
#define ARCH_ALLOC(ptr, n)                                                                         \
    do {                                                                                           \
        if (arch_alloc(b, &(ptr), (size_t)(n), ARCH_NAME, #ptr, err)) return err->code;            \
    } while (0)
/* The kv cache dtype: opts->kv_cache when set, else (auto) BF16 for 16-bit weights on a
 * backend with memory of its own (decode there is bound by the bytes read, and a bf16
 * model's kv is bf16 in the reference too), F32 otherwise (the CPU keeps the f32
 * reference's kv exactly). */
dtype arch_kv_dtype(const model_arch_ctx *ctx, dtype weights);
/* Both halves of a kv cache of slots x cap rows of width values in dt (bk_kv). */
int arch_kv_alloc(backend *b, bk_kv *kv, dtype dt, int slots, int cap, int width, const char *arch,
                  strata_err *err);
/* Sizes ctx->pool for paged layers holding pos_bytes per position in all, from
 * opts->kv_memory, else an auto budget: on a backend with memory of its own, gpu_util of
 * it less what it holds already, opts->reserve_bytes and 256 MiB for the engine; on the CPU, what every slot
 * at full context would need, at most a quarter of physical memory (untouched pages of the
 * pool cost nothing there). Lowers *ctx_size to what the pool holds when one sequence
 * could outgrow it. Call it after the weights and activations are in backend memory. */
int arch_kv_pool(const model_arch_ctx *ctx, int64_t pos_bytes, int slots, int *ctx_size,
                 const char *arch, strata_err *err);
/* A paged kv cache on ctx->pool's blocks (bk_kv.block > 0). */
int arch_kv_alloc_paged(const model_arch_ctx *ctx, bk_kv *kv, dtype dt, int width, const char *arch,
                        strata_err *err);
void arch_kv_free(backend *b, bk_kv *kv);
/* A step the model can run: at most step_tokens tokens, every sequence inside ctx. */
int arch_check_batch(const char *arch, const bk_batch *bt, int step_tokens, int ctx,
                     strata_err *err);
/* The logits head: the final norm, the head matmul and (softcap > 0) the softcap, only on
 * the rows whose logits are wanted, chunk rows at a time through xo [chunk, h] and
 * lg [chunk, vocab], downloaded or sampled as out says (model.h). A model fills the first
 * seven fields and calls arch_head_init from its alloc, arch_head_free from its close. */
typedef struct arch_head {
    const bk_weight *norm;
    int norm_mode; /* BK_NORM_* */
    float eps;
    const bk_weight *head; /* [vocab, h] */
    float softcap;         /* 0: none */
    int h, vocab;
    int chunk; /* set by arch_head_init */
    float *xo, *lg;
} arch_head;
/* A chunk as wide as a decode step of every slot (at least 16, at most step_tokens) and
 * its two buffers; in an alloc function with b, err and ARCH_NAME defined. */
int arch_head_init(backend *b, arch_head *hd, const char *arch, int slots, int step_tokens,
                   strata_err *err);
void arch_head_free(backend *b, arch_head *hd);
void arch_logits(backend *b, const arch_head *hd, const float *x, const int32_t *out_rows,
                 int n_out, model_out *out);

/* The step's token embeddings into out [T, table cols]: o->embed of the host ids, or, when
 * fed is set (model_out.fed), embed_fed, where a negative id is its slot's fed id. */
void arch_embed(backend *b, float *out, const bk_weight *table, const int32_t *tokens,
                const int32_t *fed, const bk_batch *bt);

/* In a bind loop with ctx, err, the name prefix p, layer index i and layer L: binds the
 * required tensor "<p>layers.<i>.<name>" into L->w, or returns the error. */
#define ARCH_BIND_LAYER(w, nd, shp, name)                                                          \
    do {                                                                                           \
        if (arch_bind(ctx, &L->w, 0, nd, shp, err, "%slayers.%d." name, p, i)) return err->code;   \
    } while (0)

/* Binds "prefix + name" (printf style) with an expected shape. */
int arch_bind(const model_arch_ctx *ctx, bk_weight *w, int optional, int ndim, const int64_t *shape,
              strata_err *err, const char *fmt, ...) __attribute__((format(printf, 7, 8)));

/* Bytes of a bound weight (0 when unbound); the sum over n weights. */
int64_t arch_weight_bytes(const bk_weight *w);
int64_t arch_weights_bytes(const bk_weight *const *ws, size_t n);

/* The zeroed array of a model's n layers, size bytes each; NULL with STRATA_ENOMEM naming
 * arch when there is no memory. */
void *arch_layers_new(const char *arch, int n, size_t size, strata_err *err);

#endif
