/* tok_json.c - tokenizer.json -> the tokenizer's in-memory form.
 *
 * Only the subset of spec section 2 is accepted; any other component type fails the
 * load with a message naming it (silently ignoring one would break parity). Added-token
 * ids are assigned as HF's AddedVocabulary::add_tokens does, not read from the file. */
#include <stdlib.h>
#include <string.h>

#include "engine/text/tok_internal.h"
#include "engine/base/utf8.h"

static const char *kind_name[] = {"normalizer", "pre_tokenizer", "decoder", "post_processor"};

static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void tok_step_free(tok_step *s) {
    if (!s) return;
    tok_pattern_free(&s->pat);
    free(s->str);
    free(s->tmpl);
    for (int i = 0; i < s->n_sub; i++) tok_step_free(&s->sub[i]);
    free(s->sub);
    memset(s, 0, sizeof *s);
}

static char *dup_bytes(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* A string field (required unless def is given); copies it into *out. */
static int get_str(const json_t *j, const char *key, const char *def, char **out, size_t *n,
                   const char *ctx, strata_err *err) {
    const json_t *v = json_object_get(j, key);
    const char *s = def;
    size_t len = def ? strlen(def) : 0;
    if (v && json_is_string(v)) {
        s = json_string_value(v);
        len = json_string_length(v);
    } else if (v && !json_is_null(v))
        return strata_err_set(err, STRATA_EFORMAT, "%s: \"%s\" must be a string", ctx, key);
    if (!s) return strata_err_set(err, STRATA_EFORMAT, "%s: missing \"%s\"", ctx, key);
    if (!(*out = dup_bytes(s, len))) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    *n = len;
    return 0;
}

static int get_bool(const json_t *j, const char *key, int def, int *out, const char *ctx,
                    strata_err *err) {
    const json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v)) *out = def;
    else if (json_is_boolean(v)) *out = json_is_true(v);
    else return strata_err_set(err, STRATA_EFORMAT, "%s: \"%s\" must be a boolean", ctx, key);
    return 0;
}

/* A single-char string field as a code point (Metaspace replacement, Strip content). */
static int get_char(tok_step *s, const json_t *j, const char *key, const char *ctx,
                    strata_err *err) {
    int r = get_str(j, key, NULL, &s->str, &s->str_len, ctx, err);
    if (r) return r;
    int k = s->str_len ? unicode_utf8_check((const uint8_t *)s->str, s->str_len) : -1;
    if (k <= 0 || (size_t)k != s->str_len)
        return strata_err_set(err, STRATA_EFORMAT, "%s: \"%s\" must be one character", ctx, key);
    int l;
    s->cp = unicode_utf8_decode((const uint8_t *)s->str, &l);
    return 0;
}

static int get_pattern(tok_pattern *p, const json_t *j, const char *ctx, strata_err *err) {
    const json_t *pat = json_object_get(j, "pattern"), *v;
    if (!json_is_object(pat))
        return strata_err_set(err, STRATA_EFORMAT, "%s: missing \"pattern\"", ctx);
    if ((v = json_object_get(pat, "String")) && json_is_string(v)) p->is_regex = 0;
    else if ((v = json_object_get(pat, "Regex")) && json_is_string(v)) p->is_regex = 1;
    else return strata_err_set(err, STRATA_EFORMAT, "%s: pattern must be {String|Regex}", ctx);
    p->len = json_string_length(v);
    if (!(p->str = dup_bytes(json_string_value(v), p->len)))
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    return tok_pattern_compile(p, err);
}

static int get_prepend_scheme(tok_step *s, const json_t *j, const char *ctx, strata_err *err) {
    const json_t *v = json_object_get(j, "prepend_scheme");
    if (json_is_string(v)) {
        const char *x = json_string_value(v);
        if (!strcmp(x, "always")) s->prepend_scheme = TOK_PREPEND_ALWAYS;
        else if (!strcmp(x, "first")) s->prepend_scheme = TOK_PREPEND_FIRST;
        else if (!strcmp(x, "never")) s->prepend_scheme = TOK_PREPEND_NEVER;
        else
            return strata_err_set(err, STRATA_EFORMAT, "%s: unknown prepend_scheme \"%s\"", ctx, x);
        return 0;
    }
    /* Older files: add_prefix_space (default true) instead of prepend_scheme. */
    int aps = 1;
    int r = get_bool(j, "add_prefix_space", 1, &aps, ctx, err);
    s->prepend_scheme = aps ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
    return r;
}

static int get_sequence(tok_step *s, const json_t *j, const char *key, int kind, const char *ctx,
                        strata_err *err) {
    const json_t *arr = json_object_get(j, key);
    if (!json_is_array(arr))
        return strata_err_set(err, STRATA_EFORMAT, "%s: missing \"%s\"", ctx, key);
    size_t n = json_array_size(arr);
    if (n > 64) return strata_err_set(err, STRATA_EFORMAT, "%s: too many steps", ctx);
    s->sub = calloc(n ? n : 1, sizeof *s->sub);
    if (!s->sub) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        int r = tok_json_step(&s->sub[i], json_array_get(arr, i), kind, err);
        s->n_sub = (int)i + 1;
        if (r) return r;
    }
    return 0;
}

static int get_template(tok_step *s, const json_t *j, const char *ctx, strata_err *err) {
    const json_t *single = json_object_get(j, "single"),
                 *special = json_object_get(j, "special_tokens");
    if (!json_is_array(single))
        return strata_err_set(err, STRATA_EFORMAT, "%s: missing \"single\"", ctx);
    size_t cap = 0, i;
    const json_t *item;
    json_array_foreach(single, i, item) {
        const json_t *st = json_object_get(item, "SpecialToken"), *ids = NULL;
        if (st) {
            const char *name = json_string_value(json_object_get(st, "id"));
            ids = json_object_get(json_object_get(special, name ? name : ""), "ids");
            if (!json_is_array(ids))
                return strata_err_set(err, STRATA_EFORMAT, "%s: special token %zu has no ids", ctx,
                                      i);
        } else {
            const char *id =
                json_string_value(json_object_get(json_object_get(item, "Sequence"), "id"));
            if (!id || strcmp(id, "A"))
                return strata_err_set(err, STRATA_EFORMAT,
                                      "%s: single template item %zu must be "
                                      "a SpecialToken or Sequence A",
                                      ctx, i);
        }
        size_t add = st ? json_array_size(ids) : 1;
        if (s->n_tmpl + add > cap) {
            cap = (s->n_tmpl + add) * 2;
            int32_t *p = realloc(s->tmpl, cap * sizeof *p);
            if (!p) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
            s->tmpl = p;
        }
        if (!st) {
            s->tmpl[s->n_tmpl++] = -1;
            continue;
        }
        for (size_t k = 0; k < add; k++) {
            const json_t *v = json_array_get(ids, k);
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > INT32_MAX)
                return strata_err_set(err, STRATA_EFORMAT, "%s: bad special token id", ctx);
            s->tmpl[s->n_tmpl++] = (int32_t)json_integer_value(v);
        }
    }
    return 0;
}

int tok_json_step(tok_step *s, const json_t *j, int kind, strata_err *err) {
    memset(s, 0, sizeof *s);
    const char *ctx = kind_name[kind];
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!json_is_object(j) || !type)
        return strata_err_set(err, STRATA_EFORMAT, "%s without a \"type\"", ctx);
    int n = kind == TOK_KIND_NORMALIZER, p = kind == TOK_KIND_PRETOK, d = kind == TOK_KIND_DECODER,
        pp = kind == TOK_KIND_POST;
    if (!strcmp(type, "Sequence")) {
        s->type = TOK_STEP_SEQUENCE;
        return get_sequence(s, j,
                            n   ? "normalizers"
                            : p ? "pretokenizers"
                            : d ? "decoders"
                                : "processors",
                            kind, ctx, err);
    }
    if (n && !strcmp(type, "NFC")) return s->type = TOK_STEP_NFC, 0;
    if ((n || d) && !strcmp(type, "Replace")) {
        s->type = TOK_STEP_REPLACE;
        int r = get_pattern(&s->pat, j, ctx, err);
        return r ? r : get_str(j, "content", NULL, &s->str, &s->str_len, ctx, err);
    }
    if (n && !strcmp(type, "Prepend")) {
        s->type = TOK_STEP_PREPEND;
        return get_str(j, "prepend", NULL, &s->str, &s->str_len, ctx, err);
    }
    if (p && !strcmp(type, "Split")) {
        static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                      "Contiguous"};
        s->type = TOK_STEP_SPLIT;
        const char *b = json_string_value(json_object_get(j, "behavior"));
        s->behavior = -1;
        for (int i = 0; b && i < 5; i++)
            if (!strcmp(b, names[i])) s->behavior = i;
        if (s->behavior < 0)
            return strata_err_set(err, STRATA_EFORMAT, "Split: unknown behavior \"%s\"",
                                  b ? b : "(none)");
        int r = get_bool(j, "invert", 0, &s->invert, ctx, err);
        return r ? r : get_pattern(&s->pat, j, ctx, err);
    }
    if ((p || d || pp) && !strcmp(type, "ByteLevel")) {
        s->type = TOK_STEP_BYTELEVEL;
        int r = get_bool(j, "add_prefix_space", 1, &s->add_prefix_space, ctx, err);
        if (!r) r = get_bool(j, "use_regex", 1, &s->use_regex, ctx, err);
        if (r || !p || !s->use_regex) return r;
        s->pat.is_regex = 1;
        s->pat.len = sizeof GPT2_REGEX - 1;
        if (!(s->pat.str = dup_bytes(GPT2_REGEX, s->pat.len)))
            return strata_err_set(err, STRATA_ENOMEM, "out of memory");
        return tok_pattern_compile(&s->pat, err);
    }
    if ((p || d) && !strcmp(type, "Metaspace")) {
        s->type = TOK_STEP_METASPACE;
        int r = get_char(s, j, "replacement", ctx, err);
        if (!r) r = get_prepend_scheme(s, j, ctx, err);
        if (!r) r = get_bool(j, "split", 1, &s->split, ctx, err);
        return r;
    }
    if (d && !strcmp(type, "ByteFallback")) return s->type = TOK_STEP_BYTEFALLBACK, 0;
    if (d && !strcmp(type, "Fuse")) return s->type = TOK_STEP_FUSE, 0;
    if (d && !strcmp(type, "Strip")) {
        s->type = TOK_STEP_STRIP;
        int r = get_char(s, j, "content", ctx, err);
        const json_t *a = json_object_get(j, "start"), *b = json_object_get(j, "stop");
        if (r) return r;
        if (!json_is_integer(a) || !json_is_integer(b) || json_integer_value(a) < 0 ||
            json_integer_value(b) < 0 || json_integer_value(a) > 1 << 20 ||
            json_integer_value(b) > 1 << 20)
            return strata_err_set(err, STRATA_EFORMAT, "Strip: bad start/stop");
        s->start = (int)json_integer_value(a);
        s->stop = (int)json_integer_value(b);
        return 0;
    }
    if (pp && !strcmp(type, "TemplateProcessing")) {
        s->type = TOK_STEP_TEMPLATE;
        return get_template(s, j, ctx, err);
    }
    return strata_err_set(err, STRATA_EUNSUPPORTED, "unsupported %s type \"%s\"", ctx, type);
}

/* ---- BPE model ----------------------------------------------------------------------- */

static int empty_or_null(const json_t *v) {
    return !v || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0);
}

int tok_json_bpe(tok_bpe *b, const json_t *m, strata_err *err) {
    const char *type = json_string_value(json_object_get(m, "type"));
    const json_t *vocab = json_object_get(m, "vocab"), *merges = json_object_get(m, "merges");
    if (!json_is_object(m)) return strata_err_set(err, STRATA_EFORMAT, "missing \"model\"");
    if (!type || strcmp(type, "BPE"))
        return strata_err_set(err, STRATA_EUNSUPPORTED, "unsupported model type \"%s\"",
                              type ? type : "(none)");
    if (!json_is_object(vocab))
        return strata_err_set(err, STRATA_EFORMAT, "model: missing \"vocab\"");
    if (merges && !json_is_array(merges) && !json_is_null(merges))
        return strata_err_set(err, STRATA_EFORMAT, "model: \"merges\" must be an array");
    const json_t *dropout = json_object_get(m, "dropout");
    if (dropout && !json_is_null(dropout) &&
        !(json_is_number(dropout) && json_number_value(dropout) == 0))
        return strata_err_set(err, STRATA_EUNSUPPORTED, "model: BPE dropout is not supported");
    if (!empty_or_null(json_object_get(m, "continuing_subword_prefix")) ||
        !empty_or_null(json_object_get(m, "end_of_word_suffix")))
        return strata_err_set(
            err, STRATA_EUNSUPPORTED,
            "model: continuing_subword_prefix / end_of_word_suffix are not supported");
    int r = get_bool(m, "byte_fallback", 0, &b->byte_fallback, "model", err);
    if (!r) r = get_bool(m, "fuse_unk", 0, &b->fuse_unk, "model", err);
    if (!r) r = get_bool(m, "ignore_merges", 0, &b->ignore_merges, "model", err);
    if (r) return r;

    size_t nv = json_object_size(vocab);
    if (nv > (1u << 30)) return strata_err_set(err, STRATA_EFORMAT, "model: vocab too large");
    if (tok_map_init(&b->vocab, (uint32_t)nv))
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    const char *key;
    size_t klen;
    json_t *val;
    int64_t max_id = -1;
    json_object_keylen_foreach((json_t *)vocab, key, klen, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= (1 << 30))
            return strata_err_set(err, STRATA_EFORMAT, "model: bad id for vocab entry \"%.40s\"",
                                  key);
        int64_t id = json_integer_value(val);
        if (id > max_id) max_id = id;
        if (tok_map_put(&b->vocab, key, klen, (int32_t)id))
            return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    b->n_ids = (int32_t)(max_id + 1);
    b->id_off = malloc((size_t)(b->n_ids ? b->n_ids : 1) * sizeof *b->id_off);
    b->id_len = malloc((size_t)(b->n_ids ? b->n_ids : 1) * sizeof *b->id_len);
    if (!b->id_off || !b->id_len) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    memset(b->id_len, 0xFF, (size_t)b->n_ids * sizeof *b->id_len);
    for (uint32_t e = 0; e < b->vocab.n; e++) {
        int32_t id = b->vocab.val[e];
        b->id_off[id] = b->vocab.off[e];
        b->id_len[id] = b->vocab.klen[e];
    }

    size_t nm = merges ? json_array_size(merges) : 0, rank = 0;
    if (tok_pairmap_init(&b->merges, nm))
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    strbuf cat = {0};
    for (size_t i = 0; i < nm && !r; i++) {
        const json_t *mv = json_array_get(merges, i);
        const char *a, *c;
        size_t la, lc;
        if (json_is_string(mv)) {
            const char *s = json_string_value(mv);
            size_t n = json_string_length(mv);
            if (n >= 8 && !memcmp(s, "#version", 8)) continue;
            const char *sp = memchr(s, ' ', n);
            if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s))) {
                r = strata_err_set(err, STRATA_EFORMAT, "model: merge %zu is not \"a b\"",
                                   rank + 1);
                break;
            }
            a = s, la = (size_t)(sp - s), c = sp + 1, lc = n - la - 1;
        } else if (json_is_array(mv) && json_array_size(mv) == 2 &&
                   json_is_string(json_array_get(mv, 0)) && json_is_string(json_array_get(mv, 1))) {
            a = json_string_value(json_array_get(mv, 0)),
            la = json_string_length(json_array_get(mv, 0));
            c = json_string_value(json_array_get(mv, 1)),
            lc = json_string_length(json_array_get(mv, 1));
        } else {
            r = strata_err_set(err, STRATA_EFORMAT, "model: merge %zu is malformed", rank + 1);
            break;
        }
        int32_t ia = tok_map_get(&b->vocab, a, la), ic = tok_map_get(&b->vocab, c, lc), im;
        cat.len = 0;
        if (strbuf_add(&cat, a, la) || strbuf_add(&cat, c, lc)) {
            r = strata_err_set(err, STRATA_ENOMEM, "out of memory");
            break;
        }
        im = tok_map_get(&b->vocab, cat.p, cat.len);
        if (ia < 0 || ic < 0 || im < 0) {
            r = strata_err_set(err, STRATA_EFORMAT,
                               "model: merge %zu (\"%.*s\" \"%.*s\") uses a token "
                               "missing from the vocab",
                               rank + 1, (int)(la > 40 ? 40 : la), a, (int)(lc > 40 ? 40 : lc), c);
            break;
        }
        if (tok_pairmap_put(&b->merges, ia, ic, (uint32_t)rank, im))
            r = strata_err_set(err, STRATA_ENOMEM, "out of memory");
        rank++;
    }
    strbuf_free(&cat);
    if (r) return r;

    b->unk_id = -1;
    const json_t *unk = json_object_get(m, "unk_token");
    if (unk && !json_is_null(unk)) {
        if (!json_is_string(unk))
            return strata_err_set(err, STRATA_EFORMAT, "model: bad unk_token");
        b->unk_id = tok_map_get(&b->vocab, json_string_value(unk), json_string_length(unk));
        if (b->unk_id < 0)
            return strata_err_set(err, STRATA_EFORMAT,
                                  "model: unk_token \"%.40s\" is not in the vocab",
                                  json_string_value(unk));
    }
    return tok_bpe_build_tables(b, err);
}

/* ---- added tokens -------------------------------------------------------------------- */

int tok_json_added(tok_added *a, const json_t *arr, const tok_bpe *b, strata_err *err) {
    if (arr && !json_is_array(arr) && !json_is_null(arr))
        return strata_err_set(err, STRATA_EFORMAT, "\"added_tokens\" must be an array");
    size_t n = arr ? json_array_size(arr) : 0;
    a->tok = calloc(n ? n : 1, sizeof *a->tok);
    if (!a->tok) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    tok_map seen;
    if (tok_map_init(&seen, (uint32_t)n))
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    int64_t max_added = -1;
    int r = 0;
    for (size_t i = 0; i < n && !r; i++) {
        const json_t *t = json_array_get(arr, i);
        const json_t *content = json_object_get(t, "content");
        if (!json_is_object(t) || !json_is_string(content)) {
            r = strata_err_set(err, STRATA_EFORMAT, "added_tokens[%zu]: missing \"content\"", i);
            break;
        }
        const char *c = json_string_value(content);
        size_t len = json_string_length(content);
        int special = 0;
        if ((r = get_bool(t, "special", 0, &special, "added_tokens", err))) break;
        int32_t prev = tok_map_get(&seen, c, len);
        if (prev >= 0) { /* HF skips a token equal (by content) to one already added */
            a->tok[prev].special |= special;
            continue;
        }
        if (!len) continue;
        tok_added_token *at = &a->tok[a->n];
        at->special = special;
        if ((r = get_bool(t, "single_word", 0, &at->single_word, "added_tokens", err)) ||
            (r = get_bool(t, "lstrip", 0, &at->lstrip, "added_tokens", err)) ||
            (r = get_bool(t, "rstrip", 0, &at->rstrip, "added_tokens", err)) ||
            (r = get_bool(t, "normalized", !special, &at->normalized, "added_tokens", err)))
            break;
        if (!(at->content = dup_bytes(c, len))) {
            r = strata_err_set(err, STRATA_ENOMEM, "out of memory");
            break;
        }
        at->len = len;
        int32_t id = tok_map_get(&b->vocab, c, len);
        if (id < 0) {
            int64_t vs = (int64_t)b->vocab.n;
            id = (int32_t)(max_added < 0 ? vs : (max_added >= vs || vs == 0) ? max_added + 1 : vs);
        }
        at->id = id;
        if (id > max_added) max_added = id;
        if (tok_map_put(&seen, c, len, (int32_t)a->n))
            r = strata_err_set(err, STRATA_ENOMEM, "out of memory");
        a->n++;
    }
    tok_map_free(&seen);
    return r;
}
