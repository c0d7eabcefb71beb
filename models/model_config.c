/* model_config.c - config.json fields read from a table: one row per field says where
 * it goes, its type, range and default, or the one value an architecture supports.
 * An architecture file lists its fields; this reader checks them all the same way, and
 * every error names the file section and the field. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/arch.h"

/* The first alias of keys ("a|b|c") present and not null, else the first one. */
static const char *cfg_pick(json_t *obj, const char *keys, char *buf, size_t len) {
    for (const char *k = keys; *k;) {
        size_t n = strcspn(k, "|");
        snprintf(buf, len, "%.*s", (int)n, k);
        json_t *v = json_object_get(obj, buf);
        if (v && !json_is_null(v)) return buf;
        k += n + (k[n] == '|');
    }
    snprintf(buf, len, "%.*s", (int)strcspn(keys, "|"), keys);
    return buf;
}

static int cfg_read_one(json_t *obj, const char *where, const cfg_field *f, void *dst, int optional,
                        strata_err *err) {
    char key[64];
    cfg_pick(obj, f->keys, key, sizeof key);
    int has_def = !f->required || optional;
    char *p = (char *)dst + f->off;
    switch (f->type) {
    case CFG_T_INT: {
        long long v;
        if (cfg_int(obj, where, key, has_def, (long long)f->def, (long long)f->lo, (long long)f->hi,
                    &v, err))
            return err->code;
        *(int *)p = (int)v;
        return 0;
    }
    case CFG_T_FLOAT:
    case CFG_T_DOUBLE: {
        double v;
        if (cfg_real(obj, where, key, has_def, f->def, &v, err)) return err->code;
        if (v < f->lo || v > f->hi)
            return strata_err_set(err, STRATA_ERANGE, "%s: field \"%s\" = %g is outside [%g, %g]",
                                  where, key, v, f->lo, f->hi);
        if (f->type == CFG_T_FLOAT) *(float *)p = (float)v;
        else *(double *)p = v;
        return 0;
    }
    case CFG_T_BOOL:
        return cfg_bool(obj, where, key, 1, (int)f->def, (int *)p, err) ? err->code : 0;
    case CFG_T_ONLY_STR: {
        const char *s;
        if (cfg_str(obj, where, key, f->only, &s, err)) return err->code;
        if (strcmp(s, f->only))
            return strata_err_set(err, STRATA_EUNSUPPORTED, "%s: %s \"%s\" is not supported (%s)",
                                  where, key, s, f->only);
        return 0;
    }
    case CFG_T_ONLY_FALSE: {
        int on;
        if (cfg_bool(obj, where, key, 1, 0, &on, err)) return err->code;
        if (on)
            return strata_err_set(err, STRATA_EUNSUPPORTED, "%s: %s true is not supported", where,
                                  key);
        return 0;
    }
    }
    return strata_err_set(err, STRATA_EINVALID, "%s: bad table row for \"%s\"", where, f->keys);
}

int cfg_read(json_t *obj, const char *where, const cfg_field *fields, size_t n, void *dst,
             int optional, strata_err *err) {
    for (size_t i = 0; i < n; i++)
        if (cfg_read_one(obj, where, &fields[i], dst, optional, err)) return err->code;
    return 0;
}

/* Keys every transformers PretrainedConfig may write that change nothing of a text
 * forward (bookkeeping, training and export switches): accepted by every architecture. */
static const char *const cfg_pretrained_keys[] = {
    "architectures",
    "attention_dropout",
    "dtype",
    "torch_dtype",
    "initializer_range",
    "use_cache",
    "transformers_version",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "use_return_dict",
    "id2label",
    "label2id",
    "problem_type",
    "chunk_size_feed_forward",
    "is_encoder_decoder",
    "tokenizer_class",
    "decoder_start_token_id",
    "sep_token_id",
    "task_specific_params",
    "finetuning_task",
    "tf_legacy_loss",
    "pruned_heads",
    "cross_attention_hidden_size",
    "add_cross_attention",
    "is_decoder",
    "prefix",
    "_name_or_path",
    "quantization_config",
    "base_config_key",
    NULL,
};

static int in_list(const char *key, const char *const *list) {
    for (; list && *list; list++)
        if (!strcmp(key, *list)) return 1;
    return 0;
}

/* key is one of the "a|b" aliases of a table row */
static int in_tables(const char *key, const cfg_field *const *tables, const size_t *sizes,
                     size_t n_tables) {
    size_t kl = strlen(key);
    for (size_t t = 0; t < n_tables; t++)
        for (size_t i = 0; i < sizes[t]; i++)
            for (const char *s = tables[t][i].keys; *s;) {
                size_t l = strcspn(s, "|");
                if (l == kl && !memcmp(s, key, l)) return 1;
                s += l + (s[l] == '|');
            }
    return 0;
}

static int check_keys(json_t *obj, const char *where, const cfg_field *const *tables,
                      const size_t *sizes, size_t n_tables, const char *const *known,
                      const char *const *ignored, const char *const *generic, strata_err *err) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        (void)v;
        if (!in_list(key, known) && !in_list(key, ignored) && !in_list(key, generic) &&
            !in_tables(key, tables, sizes, n_tables))
            return strata_err_set(err, STRATA_EUNSUPPORTED,
                                  "%s: unknown field \"%s\" (this build does not know what it "
                                  "changes, so it refuses to guess)",
                                  where, key);
    }
    return 0;
}

int cfg_check_keys(json_t *obj, const char *where, const char *const *known,
                   const char *const *ignored, strata_err *err) {
    return check_keys(obj, where, NULL, NULL, 0, known, ignored, NULL, err);
}

int cfg_check_keys_tables(json_t *obj, const char *where, const cfg_field *const *tables,
                          const size_t *sizes, size_t n_tables, const char *const *known,
                          const char *const *ignored, strata_err *err) {
    return check_keys(obj, where, tables, sizes, n_tables, known, ignored, cfg_pretrained_keys,
                      err);
}
