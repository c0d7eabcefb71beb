/* arch.h - what an architecture file implements, and the helpers it gets.
 *
 * models/<arch>.c parses its config, binds its weights through a weight source
 * (a checkpoint or dummy weights; the model cannot tell which), allocates its caches
 * and runs its forward against kernels/backend.h. models/model.c picks the arch from
 * config.json's model_type and owns the weight source. */
#ifndef STRATA_ARCH_H
#define STRATA_ARCH_H

#include <jansson.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "models/load/wsrc.h"
#include "models/model.h"

typedef struct model_arch_ctx {
    backend *b;
    model_wsrc *src;
    const model_opts *opts;
    json_t *config;      /* the whole config.json (borrowed) */
    json_t *gen_config;  /* generation_config.json or NULL (borrowed) */
} model_arch_ctx;

typedef struct model_arch {
    const char *model_type; /* config.json model_type this arch accepts */
    const char *alt_type;   /* a second accepted model_type (e.g. the text-only one) or NULL */
    /* Parses config, binds weights, allocates caches; fills info. */
    int (*open)(void **impl, const model_arch_ctx *ctx, model_info *info, strata_err *err);
    int (*forward)(void *impl, bk_batch *bt, const int32_t *tokens, const int32_t *out_rows,
                   int n_out, float *logits, strata_err *err);
    void (*reset_slot)(void *impl, int slot);
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
int cfg_real(json_t *obj, const char *where, const char *key, int has_def, double def,
             double *out, strata_err *err);
int cfg_bool(json_t *obj, const char *where, const char *key, int has_def, int def, int *out,
             strata_err *err);
/* String field; returns the borrowed string, def when missing (may be NULL). */
int cfg_str(json_t *obj, const char *where, const char *key, const char *def, const char **out,
            strata_err *err);
/* Rejects keys of obj that are in neither known list (NULL-terminated). */
int cfg_check_keys(json_t *obj, const char *where, const char *const *known,
                   const char *const *ignored, strata_err *err);
/* eos ids from an int or list field into info (dedup, up to 8); each must be an
 * integer in [0, vocab). */
int cfg_eos(json_t *val, const char *where, int vocab, model_info *info, strata_err *err);

/* Binds "prefix + name" (printf style) with an expected shape. */
int arch_bind(const model_arch_ctx *ctx, bk_weight *w, int optional, int ndim,
              const int64_t *shape, strata_err *err, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* Bytes of a bound weight (0 when unbound). */
int64_t arch_weight_bytes(const bk_weight *w);

#endif
