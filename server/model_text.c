/* model_text.c - a model's tokenizer and chat template, wherever the model keeps them: a
 * checkpoint directory's files, or for a .gguf file the files beside it when there are,
 * else the GGUF's own tokenizer.ggml.* keys and tokenizer.chat_template.
 *
 * This is the one place that reads GGUF metadata for text: engine/text and
 * engine/template do not include the GGUF reader (models/load), so the keys are copied
 * into tok_ggml's plain arrays here and the template source is handed over as a string. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/load/gguf.h"
#include "server/serve.h"

static int has_file(const char *dir, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return !access(p, R_OK);
}

int model_text_is_gguf(const char *path) {
    struct stat st;
    return path && !stat(path, &st) && S_ISREG(st.st_mode);
}

/* The directory a .gguf file is in ("." for a bare name). */
static void parent_dir(char *out, size_t len, const char *file) {
    const char *slash = strrchr(file, '/');
    if (!slash) snprintf(out, len, ".");
    else if (slash == file) snprintf(out, len, "/");
    else snprintf(out, len, "%.*s", (int)(slash - file), file);
}

/* An optional integer key: -1 when absent. */
static int opt_id(const gguf *g, const char *key, int64_t *out, strata_err *err) {
    int32_t v;
    int r = gguf_get_i32(g, key, &v, err);
    if (!r) *out = v;
    else if (r == STRATA_ENOTFOUND) *out = -1;
    return r == STRATA_ENOTFOUND ? 0 : r;
}

static int opt_bool(const gguf *g, const char *key, int *out, strata_err *err) {
    int r = gguf_get_bool(g, key, out, err);
    if (r == STRATA_ENOTFOUND) *out = -1;
    return r == STRATA_ENOTFOUND ? 0 : r;
}

/* A string array as tok_ggml_str[] (malloc'ed; caller frees); NULL, 0 when absent. */
static int opt_strs(const gguf *g, const char *key, tok_ggml_str **out, size_t *n,
                    strata_err *err) {
    const gguf_str *s;
    uint64_t cnt;
    int r = gguf_get_strs(g, key, &s, &cnt, err);
    if (r == STRATA_ENOTFOUND) return 0;
    if (r) return r;
    if (!(*out = malloc((cnt ? cnt : 1) * sizeof **out)))
        return strata_err_set(err, STRATA_ENOMEM, "%s: %s: out of memory", gguf_path(g), key);
    for (uint64_t i = 0; i < cnt; i++) (*out)[i] = (tok_ggml_str){s[i].ptr, (size_t)s[i].len};
    *n = (size_t)cnt;
    return 0;
}

/* tokenizer.ggml.token_type as int32 (malloc'ed); a value outside int32 becomes 0, which
 * tok_load_ggml refuses as an unknown type. */
static int opt_types(const gguf *g, int32_t **out, size_t *n, strata_err *err) {
    const char *key = "tokenizer.ggml.token_type";
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv) return 0;
    if (kv->type != GGUF_VT_ARRAY)
        return strata_err_set(err, STRATA_EFORMAT, "%s: %s is not an array", gguf_path(g), key);
    if (!(*out = malloc((kv->n ? kv->n : 1) * sizeof **out)))
        return strata_err_set(err, STRATA_ENOMEM, "%s: %s: out of memory", gguf_path(g), key);
    for (uint64_t i = 0; i < kv->n; i++) {
        int64_t v;
        if (gguf_kv_int(kv, i, &v))
            return strata_err_set(err, STRATA_EFORMAT, "%s: %s is not an integer array",
                                  gguf_path(g), key);
        (*out)[i] = v < INT32_MIN || v > INT32_MAX ? 0 : (int32_t)v;
    }
    *n = (size_t)kv->n;
    return 0;
}

static int opt_str(const gguf *g, const char *key, tok_ggml_str *out, strata_err *err) {
    gguf_str s;
    int r = gguf_get_str(g, key, &s, err);
    if (!r) *out = (tok_ggml_str){s.ptr, (size_t)s.len};
    return r == STRATA_ENOTFOUND ? 0 : r;
}

int model_text_gguf_tokenizer(tokenizer **out, const gguf *g, strata_err *err) {
    tok_ggml v = {.file = gguf_path(g)};
    tok_ggml_str *tokens = NULL, *merges = NULL;
    int32_t *types = NULL;
    int r;
    if (!gguf_find_kv(g, "tokenizer.ggml.model"))
        return strata_err_set(err, STRATA_ENOTFOUND, "%s: no tokenizer (tokenizer.ggml.model)",
                              gguf_path(g));
    if ((r = opt_str(g, "tokenizer.ggml.model", &v.model, err)) ||
        (r = opt_str(g, "tokenizer.ggml.pre", &v.pre, err)) ||
        (r = opt_strs(g, "tokenizer.ggml.tokens", &tokens, &v.n_tokens, err)) ||
        (r = opt_types(g, &types, &v.n_token_type, err)) ||
        (r = opt_strs(g, "tokenizer.ggml.merges", &merges, &v.n_merges, err)) ||
        (r = opt_id(g, "tokenizer.ggml.bos_token_id", &v.bos_id, err)) ||
        (r = opt_id(g, "tokenizer.ggml.eos_token_id", &v.eos_id, err)) ||
        (r = opt_id(g, "tokenizer.ggml.unknown_token_id", &v.unk_id, err)) ||
        (r = opt_bool(g, "tokenizer.ggml.add_bos_token", &v.add_bos, err)) ||
        (r = opt_bool(g, "tokenizer.ggml.add_eos_token", &v.add_eos, err)))
        goto done;
    v.tokens = tokens;
    v.token_type = types;
    v.merges = merges;
    r = tok_load_ggml(out, &v, err);
done:
    free(tokens);
    free(types);
    free(merges);
    return r;
}

int model_text_gguf_template(chat_template **out, const gguf *g, const tokenizer *tok,
                             strata_err *err) {
    gguf_str s;
    int r = gguf_get_str(g, "tokenizer.chat_template", &s, err);
    if (r == STRATA_ENOTFOUND)
        return strata_err_set(err, STRATA_ENOTFOUND, "%s: no tokenizer.chat_template",
                              gguf_path(g));
    if (r) return r;
    r = chat_template_parse_ex(out, s.ptr, (size_t)s.len, tok ? tok_bos_token(tok) : NULL,
                               tok ? tok_eos_token(tok) : NULL, NULL, err);
    if (r) strata_err_wrap(err, "%s: tokenizer.chat_template: ", gguf_path(g));
    return r;
}

int model_text_open(const char *model, tokenizer **tok, chat_template **tmpl, strata_err *err) {
    char dir[4096];
    gguf *g = NULL;
    tokenizer *t = NULL;
    chat_template *ct = NULL;
    int gg = model_text_is_gguf(model), r;
    if (gg) parent_dir(dir, sizeof dir, model);
    else snprintf(dir, sizeof dir, "%s", model);
    /* files beside a .gguf win over its metadata: they are what the converter read */
    int tok_files = has_file(dir, "tokenizer.json") || has_file(dir, "tokenizer.model");
    if (!gg && !tok_files) {
        r = strata_err_set(err, STRATA_ENOTFOUND, "%s: no tokenizer.json or tokenizer.model", dir);
        goto fail;
    }
    if (!tok_files && (r = gguf_open(&g, model, err))) goto fail;
    if ((r = tok_files ? tok_load(&t, dir, err) : model_text_gguf_tokenizer(&t, g, err))) goto fail;
    if (tmpl) {
        int tmpl_files =
            has_file(dir, "chat_template.jinja") || has_file(dir, "tokenizer_config.json");
        r = !gg || tmpl_files ? chat_template_load(&ct, dir, err) : STRATA_ENOTFOUND;
        /* a tokenizer_config.json beside the file that holds no template leaves the GGUF's */
        if (r == STRATA_ENOTFOUND && gg && (g || !(r = gguf_open(&g, model, err))))
            r = model_text_gguf_template(&ct, g, t, err);
        if (r == STRATA_ENOTFOUND) r = 0; /* no template: the caller says what that turns off */
        if (r) goto fail;
        *tmpl = ct;
    }
    gguf_close(g);
    *tok = t;
    return 0;
fail:
    chat_template_free(ct);
    tok_free(t);
    gguf_close(g);
    return r;
}
