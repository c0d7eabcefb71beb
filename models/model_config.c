/* model_config.c - config.json fields: typed reads of one field, and fields read from a
 * table: one row per field says where it goes, its type, range and default, or the one
 * value an architecture supports. An architecture file lists its fields; this reader
 * checks them all the same way, and every error names the file section and the field. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/arch.h"

/* The kinds of scalar field cfg_scalar checks. */
enum { CFG_K_INT, CFG_K_REAL, CFG_K_BOOL };

/* 1 with *v set when the field has a value of the kind (an integer: also a real with no
 * fraction, as Python writes 4.0); 0 when it is absent or null and has a default; an error
 * naming the field when it has none or the value is of another kind. */
static int cfg_scalar(json_t *obj, const char *where, const char *key, int has_def, int kind,
                      json_t **v, strata_err *err) {
    static const char *const want[] = {"an integer", "a number", "true or false"};
    *v = obj ? json_object_get(obj, key) : NULL;
    if (!*v || json_is_null(*v)) {
        if (has_def) return 0;
        return strata_err_set(err, STRATA_EFORMAT, "%s: missing field \"%s\"", where, key);
    }
    double r = json_is_real(*v) ? json_real_value(*v) : 0;
    int ok = kind == CFG_K_BOOL ? json_is_boolean(*v)
             : kind == CFG_K_REAL
                 ? json_is_number(*v)
                 : json_is_integer(*v) || (json_is_real(*v) && r == floor(r) && fabs(r) < 9e15);
    if (!ok)
        return strata_err_set(err, STRATA_EFORMAT, "%s: field \"%s\" must be %s", where, key,
                              want[kind]);
    if (kind == CFG_K_REAL && !isfinite(json_number_value(*v)))
        return strata_err_set(err, STRATA_ERANGE, "%s: field \"%s\" is not finite", where, key);
    return 1;
}

int cfg_int(json_t *obj, const char *where, const char *key, int has_def, long long def,
            long long lo, long long hi, long long *out, strata_err *err) {
    json_t *v;
    int r = cfg_scalar(obj, where, key, has_def, CFG_K_INT, &v, err);
    if (r < 0) return r;
    long long x = !r                   ? def
                  : json_is_integer(v) ? json_integer_value(v)
                                       : (long long)json_real_value(v);
    if (r && (x < lo || x > hi))
        return strata_err_set(err, STRATA_ERANGE, "%s: field \"%s\" = %lld is outside [%lld, %lld]",
                              where, key, x, lo, hi);
    *out = x;
    return 0;
}

/* A number or a boolean (as 0 / 1) field into *out, def when absent. */
static int cfg_value(json_t *obj, const char *where, const char *key, int has_def, int kind,
                     double def, double *out, strata_err *err) {
    json_t *v;
    int r = cfg_scalar(obj, where, key, has_def, kind, &v, err);
    if (r < 0) return r;
    *out = !r ? def : kind == CFG_K_BOOL ? json_is_true(v) : json_number_value(v);
    return 0;
}

int cfg_real(json_t *obj, const char *where, const char *key, int has_def, double def, double *out,
             strata_err *err) {
    return cfg_value(obj, where, key, has_def, CFG_K_REAL, def, out, err);
}

int cfg_bool(json_t *obj, const char *where, const char *key, int has_def, int def, int *out,
             strata_err *err) {
    double v;
    if (cfg_value(obj, where, key, has_def, CFG_K_BOOL, def, &v, err)) return err->code;
    *out = v != 0;
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

int cfg_tied(json_t *root, json_t *tc, const char *where, int def, int *tied, strata_err *err) {
    if (cfg_bool(root, "config.json", "tie_word_embeddings", 1, def, tied, err)) return err->code;
    if (tc != root && cfg_bool(tc, where, "tie_word_embeddings", 1, *tied, tied, err))
        return err->code;
    return 0;
}

int cfg_layer_types(json_t *tc, const char *where, int n_layer, const char *other,
                    unsigned char *full, int *found, strata_err *err) {
    json_t *lt = json_object_get(tc, "layer_types");
    *found = lt && !json_is_null(lt);
    if (!*found) return 0;
    if (!json_is_array(lt) || (int)json_array_size(lt) != n_layer)
        return strata_err_set(err, STRATA_EFORMAT, "%s: layer_types must list %d layer types",
                              where, n_layer);
    for (int i = 0; i < n_layer; i++) {
        const char *s = json_string_value(json_array_get(lt, (size_t)i));
        if (s && !strcmp(s, "full_attention")) full[i] = 1;
        else if (!s || strcmp(s, other))
            return strata_err_set(err, STRATA_EUNSUPPORTED,
                                  "%s: layer_types[%d] = \"%s\" is not supported", where, i,
                                  s ? s : "(not a string)");
    }
    return 0;
}

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
static int in_tables(const char *key, const cfg_table *tables, size_t n_tables) {
    size_t kl = strlen(key);
    for (size_t t = 0; t < n_tables; t++)
        for (size_t i = 0; i < tables[t].n; i++)
            for (const char *s = tables[t].rows[i].keys; *s;) {
                size_t l = strcspn(s, "|");
                if (l == kl && !memcmp(s, key, l)) return 1;
                s += l + (s[l] == '|');
            }
    return 0;
}

static int check_keys(json_t *obj, const char *where, const cfg_table *tables, size_t n_tables,
                      const char *const *known, const char *const *ignored,
                      const char *const *generic, strata_err *err) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        (void)v;
        if (!in_list(key, known) && !in_list(key, ignored) && !in_list(key, generic) &&
            !in_tables(key, tables, n_tables))
            return strata_err_set(err, STRATA_EUNSUPPORTED,
                                  "%s: unknown field \"%s\" (this build does not know what it "
                                  "changes, so it refuses to guess)",
                                  where, key);
    }
    return 0;
}

int cfg_check_keys(json_t *obj, const char *where, const char *const *known,
                   const char *const *ignored, strata_err *err) {
    return check_keys(obj, where, NULL, 0, known, ignored, NULL, err);
}

int cfg_check_keys_tables(json_t *obj, const char *where, const cfg_table *tables, size_t n_tables,
                          const char *const *known, const char *const *ignored, strata_err *err) {
    return check_keys(obj, where, tables, n_tables, known, ignored, cfg_pretrained_keys, err);
}
