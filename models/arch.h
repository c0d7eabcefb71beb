/* arch.h - what an architecture file implements, and the helpers it gets.
 *
 * models/<arch>.c parses its config, binds its weights through a weight source
 * (a checkpoint or dummy weights; the model cannot tell which), allocates its caches
 * and runs its forward against kernels/backend.h. Its struct starts with an arch_model:
 * arch_open runs the file's parse, bind and alloc steps in the order every model shares,
 * and close, reset_slot and state_parts are the shared arch_close, arch_reset_slot and
 * arch_state_parts. models/model.c picks the arch from config.json's model_type and owns
 * the weight source. */
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
    kv_pool *pool;      /* the paged kv pool, sized by arch_cache_paged (owned by model.c) */
} model_arch_ctx;

/* One part of a slot's recurrent state: bytes at base + slot · bytes (backend memory). */
typedef struct arch_state_part {
    void *base;
    size_t bytes;
} arch_state_part;
#define ARCH_STATE_MAX 256 /* parts a model may have (two per layer) */

/* An architecture file defines one, its fields initialised in this order. */
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

/* ---- config helpers: every error names the field (models/model_config.c) ---- */
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
/* tie_word_embeddings into *tied: text_config (tc, named where) wins, then the top level,
 * then def (real files set both). */
int cfg_tied(json_t *root, json_t *tc, const char *where, int def, int *tied, strata_err *err);
/* layer_types, when tc has it: n_layer strings, each "full_attention" (full[i] = 1) or
 * other (0). Sets *found (0: absent or null, full untouched). */
int cfg_layer_types(json_t *tc, const char *where, int n_layer, const char *other,
                    unsigned char *full, int *found, strata_err *err);
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
/* The sizes of a decoder's config (into members vocab, h, inter, n_layer and H of T), with
 * the ranges every architecture here accepts. */
#define CFG_DECODER_SIZES(T)                                                                       \
    CFG_INT(T, vocab, "vocab_size", 1, 1 << 24), CFG_INT(T, h, "hidden_size", 1, 1 << 16),         \
        CFG_INT(T, inter, "intermediate_size", 1, 1 << 18),                                        \
        CFG_INT(T, n_layer, "num_hidden_layers", 1, 1024),                                         \
        CFG_INT(T, H, "num_attention_heads", 1, 1024)
/* Reads every row of fields[0..n) from obj into dst. optional: the required rows take
 * their default too (fields of a mixer the model does not have). */
int cfg_read(json_t *obj, const char *where, const cfg_field *fields, size_t n, void *dst,
             int optional, strata_err *err);
#define CFG_READ(obj, where, table, dst, optional, err)                                            \
    cfg_read(obj, where, table, sizeof(table) / sizeof((table)[0]), dst, optional, err)
/* A field table and its length, for cfg_check_keys_tables. */
typedef struct cfg_table {
    const cfg_field *rows;
    size_t n;
} cfg_table;
#define CFG_TABLE(table)                                                                           \
    { table, sizeof(table) / sizeof((table)[0]) }
/* cfg_check_keys, with the keys of the tables and transformers' generic
 * PretrainedConfig keys counted as known. */
int cfg_check_keys_tables(json_t *obj, const char *where, const cfg_table *tables, size_t n_tables,
                          const char *const *known, const char *const *ignored, strata_err *err);

/* eos ids from an int or list field into info (dedup, up to 8); each must be an
 * integer in [0, vocab). */
int cfg_eos(json_t *val, const char *where, int vocab, model_info *info, strata_err *err);

/* The object holding a model's text fields: config.json's text_config when there is one
 * (it must be an object), else config.json itself; *where names it for messages. */
int cfg_text_config(json_t *root, json_t **tc, const char **where, strata_err *err);

/* ---- what every model shares (models/model_util.c) ---- */

/* The logits head: the final norm, the head matmul and (softcap > 0) the softcap, only on
 * the rows whose logits are wanted, chunk rows at a time through xo [chunk, h] and
 * lg [chunk, vocab], downloaded or sampled as out says (model.h). */
typedef struct arch_head {
    bk_weight norm; /* [h] the final norm */
    bk_weight w;    /* [vocab, h] lm_head.weight, or the embedding when tied */
    int norm_mode;  /* BK_NORM_* */
    float eps;
    float softcap; /* 0: none */
    int h, vocab;
    int chunk; /* set by arch_head_init */
    float *xo, *lg;
} arch_head;

/* What a layer keeps between steps: a kv cache (attention: paged on ctx->pool, or a ring of
 * cap rows a slot) or a recurrent state (gated DeltaNet, Mamba2: the conv window, the last
 * K-1 pre-conv rows, and the state S, f32 a slot, outside the pool); neither leaves it
 * empty. */
typedef struct arch_cache {
    bk_kv kv;           /* [slots, cap, width] or paged (kv.block > 0) */
    float *conv, *S;    /* [slots, conv_n], [slots, s_n] */
    size_t conv_n, s_n; /* floats a slot */
} arch_cache;

typedef struct arch_steps arch_steps;

#define ARCH_BUFS_MAX 32 /* activation buffers a model may have (ARCH_ALLOC) */
#define ARCH_HOST_MAX 16 /* host arrays a model may have (arch_host_new) */

/* The first member of every model's struct: what arch_open, the bind, alloc and forward
 * helpers below and the shared model_arch entries work on. What a model allocates through
 * them is kept here, so that arch_close frees it all whatever open reached. */
typedef struct arch_model {
    const arch_steps *steps;
    backend *b;
    int n_layer;                 /* set by the parse step (arch_layers_new) */
    int max_pos;                 /* likewise: the context by default */
    int slots, ctx, step_tokens; /* what the model runs with: --max-seqs, --ctx-size (lowered
                                    to what the kv pool holds), the step budget */
    dtype kv_dt;                 /* of every kv cache: set by the alloc step (arch_kv_dtype) */
    bk_weight embed;             /* [vocab, h] (arch_bind_embed) */
    arch_head head;              /* (arch_head_bind, arch_head_init) */
    arch_cache *cache;           /* [n_layer] */
    int64_t weight_bytes;        /* what a decode step reads of the weights: every bound
                                    layer weight and the head, plus what the bind step adds */
    float *bufs[ARCH_BUFS_MAX];  /* ARCH_ALLOC's, backend memory */
    int n_bufs;
    void *host[ARCH_HOST_MAX]; /* arch_host_new's */
    int n_host;
} arch_model;

/* arch_steps.flags */
enum {
    ARCH_TEXT_CONFIG = 1, /* the family nests its text fields in config.json's text_config */
    ARCH_EOS_TOP = 2,     /* config.json's top-level eos_token_id counts beside a text_config */
};

/* A model file's own steps, which arch_open runs in this order on the model's struct. */
struct arch_steps {
    const char *arch; /* ARCH_NAME, for messages and model_info.arch */
    size_t size;      /* of the model's struct */
    int flags;        /* ARCH_* above */
    /* config.json into the model's config, from tc, the object holding the text fields
     * (text_config with ARCH_TEXT_CONFIG when the file has one, else config.json itself),
     * named where for messages; ends with arch_layers_new */
    int (*parse)(void *m, const model_arch_ctx *ctx, json_t *tc, const char *where,
                 strata_err *err);
    /* every weight; slots, ctx and step_tokens are set */
    int (*bind)(void *m, const model_arch_ctx *ctx, strata_err *err);
    /* kv_dt, the caches and the scratch; may set fields of info only it knows */
    int (*alloc)(void *m, const model_arch_ctx *ctx, model_info *info, strata_err *err);
    /* releases what the model's own steps hold beyond what arch_close frees (backend
     * memory from ARCH_ALLOC and the head, caches, host arrays); NULL: nothing */
    void (*release)(void *m);
};

/* model_arch.open of every model, on s: allocates the zeroed struct, runs parse, sizes the
 * model (slots default 1, context max_pos, 512 tokens a step, unless the options set them),
 * then bind and alloc, and reports arch, vocab, the sizes, the eos ids
 * (generation_config.json, then config.json's text_config, then its top level where there
 * is no text_config or with ARCH_EOS_TOP), weight_bytes, and what decode touches a token of
 * the caches: kv_bytes_per_token (the k and v rows of every kv cache) and state_bytes
 * (every recurrent state, read and written). On failure everything is freed (arch_close). */
int arch_open(void **impl, const arch_steps *s, const model_arch_ctx *ctx, model_info *info,
              strata_err *err);
/* model_arch.close, reset_slot and state_parts of every model. reset_slot zeroes the slot's
 * recurrent states (a new sequence starts from none); kv rows are written before a query
 * can see them, so they stay. state_parts lists, per layer, a ring's k and v or the conv
 * window then S, while both of a layer fit in max. */
void arch_close(void *impl);
void arch_reset_slot(void *impl, int slot);
int arch_state_parts(void *impl, arch_state_part *out, int max);

/* A zeroed host array of n elements of size bytes that lives until arch_close (the
 * config's per-layer arrays, the layers, host staging); NULL with STRATA_ENOMEM when there
 * is no memory. */
void *arch_host_new(arch_model *am, size_t n, size_t size, strata_err *err);

/* The end of a parse step: the model has n_layer layers (size bytes each: their zeroed
 * array is returned, NULL with the error when there is no memory) and runs with a context of
 * max_pos unless the options say otherwise. */
void *arch_layers_new(arch_model *am, int n_layer, int max_pos, size_t size, strata_err *err);

/* ---- bind step ---- */

/* Binds "prefix + name" (printf style) with an expected shape. */
int arch_bind(const model_arch_ctx *ctx, bk_weight *w, int optional, int ndim, const int64_t *shape,
              strata_err *err, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* Binds the embedding table [vocab, h] under the first of the n candidate names
 * {prefix, name} that the checkpoint has. The last candidate is required, so a table found
 * under none is reported by that name, and dummy weights (which hold only the required
 * tensors) take it. *prefix is the candidate's prefix, the one the other names take. */
int arch_bind_embed(const model_arch_ctx *ctx, arch_model *am, int vocab, int h,
                    const char *const (*names)[2], int n, const char **prefix, strata_err *err);
/* Binds the final norm "<prefix><norm>" [h], then the head [vocab, h]: the embedding when
 * tied, else "lm_head.weight" (no prefix). */
int arch_head_bind(const model_arch_ctx *ctx, arch_model *am, int tied, const char *prefix,
                   const char *norm, int vocab, int h, strata_err *err);
/* In a bind loop with ctx, err, the name prefix p, layer index i, layer L and the model m:
 * binds the required tensor "<p>layers.<i>.<name>" of the shape listed after the name (its
 * dims, outermost first, as the spec's tensor tables write them) into L->w and counts it in
 * weight_bytes, or returns the error. */
#define ARCH_BIND_LAYER(w, name, ...)                                                              \
    do {                                                                                           \
        const int64_t shape_[] = {__VA_ARGS__};                                                    \
        if (arch_bind(ctx, &L->w, 0, (int)(sizeof shape_ / sizeof shape_[0]), shape_, err,         \
                      "%slayers.%d." name, p, i))                                                  \
            return err->code;                                                                      \
        m->base.weight_bytes += arch_weight_bytes(&L->w);                                          \
    } while (0)
/* Bytes of a bound weight (0 when unbound). */
int64_t arch_weight_bytes(const bk_weight *w);

/* ---- alloc step ---- */

/* Backend memory for n floats into *out, kept in am->bufs; the error names what. */
int arch_alloc(arch_model *am, float **out, size_t n, const char *what, strata_err *err);
/* In an alloc step with err and the model m defined: returns on failure. */
#define ARCH_ALLOC(ptr, n)                                                                         \
    do {                                                                                           \
        if (arch_alloc(&m->base, &(ptr), (size_t)(n), #ptr, err)) return err->code;                \
    } while (0)
/* Likewise, an activation [step_tokens, width] into each of the float pointers listed
 * (&m->x, &m->xn, ...), in order. */
#define ARCH_ALLOC_ROWS(width, ...)                                                                \
    do {                                                                                           \
        float **const rows_[] = {__VA_ARGS__};                                                     \
        for (size_t r_ = 0; r_ < sizeof rows_ / sizeof rows_[0]; r_++)                             \
            if (arch_alloc(&m->base, rows_[r_], (size_t)m->base.step_tokens * (size_t)(width),     \
                           #__VA_ARGS__, err))                                                     \
                return err->code;                                                                  \
    } while (0)
/* The kv cache dtype: opts->kv_cache when set, else (auto) BF16 for 16-bit weights on a
 * backend with memory of its own (decode there is bound by the bytes read, and a bf16
 * model's kv is bf16 in the reference too), F32 otherwise (the CPU keeps the f32
 * reference's kv exactly). The backend computes in it from then on
 * (backend_compute_dtype). */
dtype arch_kv_dtype(const model_arch_ctx *ctx, dtype weights);
/* The head's norm mode and eps, its softcap, and a chunk as wide as a decode step of every
 * slot (at least 16, at most step_tokens) with its two buffers. */
int arch_head_init(arch_model *am, int norm_mode, float eps, float softcap, strata_err *err);
/* Layer i's recurrent state, conv_n + s_n floats a slot. */
int arch_cache_recurrent(arch_model *am, int i, size_t conv_n, size_t s_n, strata_err *err);
/* Layer i's kv as a ring of cap rows of width values a slot, in kv_dt. */
int arch_cache_ring(arch_model *am, int i, int cap, int width, strata_err *err);
/* The paged kv caches: those the alloc step has declared (cache[i].kv.dt and width set, no
 * memory yet). Sizes ctx->pool for them (2·width values a position each) from
 * opts->kv_memory, else an auto budget: on a backend with memory of its own, gpu_util of it
 * less what it holds already, opts->reserve_bytes and 256 MiB for the engine; on the CPU,
 * what every slot at full context would need, at most a quarter of physical memory
 * (untouched pages of the pool cost nothing there). Lowers am->ctx to what the pool holds
 * when one sequence could outgrow it, then puts each declared kv on the pool's blocks. No
 * pool when none is declared. Call it after the weights and activations are in backend
 * memory. */
int arch_cache_paged(const model_arch_ctx *ctx, arch_model *am, strata_err *err);

/* ---- forward ---- */

/* Starts a step: checks that the model can run it (at most step_tokens tokens, every
 * sequence inside ctx), then the backend's batch_prepare. */
int arch_batch_prepare(arch_model *am, bk_batch *bt, strata_err *err);
/* The step's token embeddings into out [T, table cols]: o->embed of the host ids, or, when
 * fed is set (model_out.fed), embed_fed, where a negative id is its slot's fed id. */
void arch_embed(backend *b, float *out, const bk_weight *table, const int32_t *tokens,
                const int32_t *fed, const bk_batch *bt);
/* The gated MLP of a layer (Qwen3.5, Gemma 4): out = down(act(gate·x) ⊙ up·x). */
typedef struct arch_glu {
    bk_weight gate, up; /* [I, h] */
    bk_weight down;     /* [h, I] */
} arch_glu;
/* x [T, h] -> out [T, h]; g and u [T, I] hold gate·x and up·x (overwritten). */
void arch_glu_forward(backend *b, float *out, float *g, float *u, const float *x, const arch_glu *w,
                      int T, int act);
/* The head on the rows of x [T, h] whose logits are wanted. */
void arch_logits(arch_model *am, const float *x, const int32_t *out_rows, int n_out,
                 model_out *out);

#endif
