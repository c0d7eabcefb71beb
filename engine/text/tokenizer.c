/* tokenizer.c - load a checkpoint's tokenizer and run HF's encode / decode pipelines
 * (spec section 1): added-token split -> normalizer -> pre-tokenizer -> BPE ->
 * post-processor, and ids -> token strings -> decoder chain. A directory with only
 * tokenizer.model goes through libsentencepiece (engine/text/spm.h) instead. */
#include "engine/text/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/spm.h"
#include "engine/text/tok_internal.h"
#include "engine/base/utf8.h"

/* ---- loading -------------------------------------------------------------------------- */

static int read_file(const char *path, char **data, size_t *len, strata_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return strata_err_set(err,
                              errno == ENOENT   ? STRATA_ENOTFOUND
                              : errno == ENOMEM ? STRATA_ENOMEM
                                                : STRATA_EIO,
                              "%s: %s", path, strerror(errno));
    strbuf b = {0};
    char chunk[1 << 16];
    size_t n;
    int r = 0;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if ((r = strbuf_add(&b, chunk, n))) break;
    if (!r && ferror(f)) r = strata_err_set(err, STRATA_EIO, "%s: read error", path);
    else if (r) strata_err_set(err, r, "%s: out of memory", path);
    fclose(f);
    if (r) {
        strbuf_free(&b);
        return r;
    }
    if (!b.p && strbuf_add(&b, "", 0)) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    *data = b.p;
    *len = b.len;
    return 0;
}

/* jansson reports a failed allocation inside a string or number as a syntax error, so
 * errno (ENOMEM from the failed malloc) decides too; callers clear errno first. */
static int json_error(strata_err *err, const json_error_t *je, const char *file) {
    if (json_error_code(je) == json_error_out_of_memory || errno == ENOMEM)
        return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", file);
    return strata_err_set(err, STRATA_EFORMAT, "%s: line %d column %d: %s", file, je->line,
                          je->column, je->text);
}

const char *tok_token_str(const tokenizer *t, int32_t id, size_t *len) {
    const tok_added_token *a = tok_added_by_id(&t->added, id);
    if (a && a->normalized && a->ncontent) { /* HF id_to_token gives the normalized form */
        *len = a->nlen;
        return a->ncontent;
    }
    if (a) {
        *len = a->len;
        return a->content;
    }
    return tok_bpe_piece(&t->bpe, id, len);
}

static int32_t token_to_id(const tokenizer *t, const char *s, size_t n) {
    if (t->sp) return spm_piece_to_id(t->sp, s);
    int32_t id = tok_map_get(&t->added.by_content, s, n);
    return id >= 0 ? id : tok_map_get(&t->bpe.vocab, s, n);
}

/* bos_token / eos_token: a string or an AddedToken object {"content": ...}. */
static int config_token(const json_t *cfg, const char *key, char **out) {
    const json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v)) return 0;
    /* malloc, not strdup: ASan's strdup allocates past the failure hook of
     * tests/unit/test_tokenizer_alloc.c */
    size_t n = strlen(json_string_value(v)) + 1;
    if (!(*out = malloc(n))) return STRATA_ENOMEM;
    memcpy(*out, json_string_value(v), n);
    return 0;
}

static int load_config(tokenizer *t, const char *cfg_text, size_t cfg_len, strata_err *err) {
    t->bos_id = t->eos_id = -1;
    t->add_bos = t->sp && spm_bos_id(t->sp) >= 0;
    if (cfg_text) {
        json_error_t je;
        errno = 0;
        json_t *cfg = json_loadb(cfg_text, cfg_len, JSON_ALLOW_NUL, &je);
        if (!cfg) return json_error(err, &je, "tokenizer_config.json");
        if (!json_is_object(cfg)) {
            json_decref(cfg);
            return strata_err_set(err, STRATA_EFORMAT, "tokenizer_config.json: not an object");
        }
        int r = config_token(cfg, "bos_token", &t->bos);
        if (!r) r = config_token(cfg, "eos_token", &t->eos);
        const json_t *v;
        if ((v = json_object_get(cfg, "clean_up_tokenization_spaces")))
            t->cleanup = json_is_true(v);
        if ((v = json_object_get(cfg, "add_bos_token")) && json_is_boolean(v))
            t->add_bos = json_is_true(v);
        if ((v = json_object_get(cfg, "add_eos_token")) && json_is_boolean(v))
            t->add_eos = json_is_true(v);
        json_decref(cfg);
        if (r) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    if (t->bos) t->bos_id = token_to_id(t, t->bos, strlen(t->bos));
    if (t->eos) t->eos_id = token_to_id(t, t->eos, strlen(t->eos));
    if (t->sp && !t->bos) t->bos_id = spm_bos_id(t->sp);
    if (t->sp && !t->eos) t->eos_id = spm_eos_id(t->sp);
    return 0;
}

static int load_step(tok_step *s, const json_t *root, const char *key, int kind, strata_err *err) {
    const json_t *j = json_object_get(root, key);
    if (!j || json_is_null(j)) return 0;
    return tok_json_step(s, j, kind, err);
}

/* Normalizes the content of normalized:true added tokens for the second trie. */
static int normalize_added(tokenizer *t, strata_err *err) {
    OnigRegion *rg = tok_region_new();
    if (!rg) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    int r = 0;
    for (size_t i = 0; i < t->added.n && !r; i++) {
        tok_added_token *a = &t->added.tok[i];
        if (!a->normalized) continue;
        strbuf b = {0};
        if (t->norm.type) r = tok_normalize(&t->norm, a->content, a->len, &b, rg, err);
        else r = strbuf_add(&b, a->content, a->len);
        if (!r && !b.p) r = strbuf_add(&b, "", 0);
        if (r) {
            if (r == STRATA_ENOMEM) strata_err_set(err, r, "added tokens: out of memory");
            strbuf_free(&b);
            break;
        }
        a->ncontent = b.p;
        a->nlen = b.len;
    }
    onig_region_free(rg, 1);
    return r;
}

/* TemplateProcessing ids must name tokens, or encode would emit undecodable ids. */
static int check_template(const tokenizer *t, const tok_step *s, strata_err *err) {
    for (int i = 0; i < s->n_sub; i++)
        if (check_template(t, &s->sub[i], err)) return STRATA_EFORMAT;
    size_t n;
    for (size_t i = 0; i < s->n_tmpl; i++)
        if (s->tmpl[i] >= 0 && (s->tmpl[i] >= t->n_ids || !tok_token_str(t, s->tmpl[i], &n)))
            return strata_err_set(err, STRATA_EFORMAT,
                                  "post_processor: special token id %d is not in "
                                  "the vocabulary",
                                  s->tmpl[i]);
    return 0;
}

int tok_load_root(tokenizer *t, const json_t *root, strata_err *err) {
    if (!json_is_object(root)) return strata_err_set(err, STRATA_EFORMAT, "not a JSON object");
    const json_t *v = json_object_get(root, "truncation");
    if (v && !json_is_null(v))
        return strata_err_set(err, STRATA_EUNSUPPORTED, "truncation is not supported");
    v = json_object_get(root, "padding");
    if (v && !json_is_null(v))
        return strata_err_set(err, STRATA_EUNSUPPORTED, "padding is not supported");
    int r = tok_json_bpe(&t->bpe, json_object_get(root, "model"), err);
    if (!r) r = load_step(&t->norm, root, "normalizer", TOK_KIND_NORMALIZER, err);
    if (!r) r = load_step(&t->pretok, root, "pre_tokenizer", TOK_KIND_PRETOK, err);
    if (!r) r = load_step(&t->dec, root, "decoder", TOK_KIND_DECODER, err);
    if (!r) r = load_step(&t->post, root, "post_processor", TOK_KIND_POST, err);
    if (!r) r = tok_json_added(&t->added, json_object_get(root, "added_tokens"), &t->bpe, err);
    if (!r) r = normalize_added(t, err);
    if (!r) r = tok_added_build(&t->added, err);
    if (r) return r;
    t->n_ids = t->bpe.n_ids;
    for (size_t i = 0; i < t->added.n; i++)
        if (t->added.tok[i].id >= t->n_ids) t->n_ids = t->added.tok[i].id + 1;
    t->special = calloc((size_t)t->n_ids + 1, 1);
    if (!t->special) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    for (size_t i = 0; i < t->added.n; i++)
        if (t->added.tok[i].special) t->special[t->added.tok[i].id] = 1;
    return check_template(t, &t->post, err);
}

int tok_load_json(tokenizer **out, const char *json, size_t len, const char *config,
                  size_t config_len, strata_err *err) {
    tokenizer *t = calloc(1, sizeof *t);
    json_t *root = NULL;
    int r;
    if (!t) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    json_error_t je;
    errno = 0;
    root = json_loadb(json, len, JSON_ALLOW_NUL, &je);
    if (!root) {
        r = json_error(err, &je, "tokenizer.json");
        goto fail;
    }
    if ((r = tok_load_root(t, root, err))) {
        strata_err_wrap(err, "tokenizer.json: ");
        goto fail;
    }
    json_decref(root);
    root = NULL;
    if ((r = load_config(t, config, config_len, err))) goto fail;
    *out = t;
    return 0;
fail:
    json_decref(root);
    tok_free(t);
    return r;
}

int tok_load(tokenizer **out, const char *dir, strata_err *err) {
    char path[4096], cpath[4096];
    char *json = NULL, *cfg = NULL;
    size_t len = 0, cfg_len = 0;
    tokenizer *t = NULL;
    int r;
    snprintf(cpath, sizeof cpath, "%s/tokenizer_config.json", dir);
    r = read_file(cpath, &cfg, &cfg_len, err);
    if (r && r != STRATA_ENOTFOUND) goto fail;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    r = read_file(path, &json, &len, err);
    if (!r) {
        r = tok_load_json(&t, json, len, cfg, cfg_len, err);
        if (r) strata_err_wrap(err, "%s: ", dir);
        goto done;
    }
    if (r != STRATA_ENOTFOUND) goto fail;
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    if (!(t = calloc(1, sizeof *t))) {
        r = strata_err_set(err, STRATA_ENOMEM, "out of memory");
        goto fail;
    }
    r = spm_load(&t->sp, path, err);
    if (r == STRATA_ENOTFOUND) {
        r = strata_err_set(err, STRATA_ENOTFOUND, "%s: neither tokenizer.json nor tokenizer.model",
                           dir);
        goto fail;
    }
    if (r || (r = load_config(t, cfg, cfg_len, err))) goto fail;
done:
    free(json);
    free(cfg);
    if (!r) *out = t;
    return r;
fail:
    free(json);
    free(cfg);
    tok_free(t);
    return r;
}

void tok_free(tokenizer *t) {
    if (!t) return;
    spm_free(t->sp);
    tok_bpe_free(&t->bpe);
    tok_added_free(&t->added);
    tok_step_free(&t->norm);
    tok_step_free(&t->pretok);
    tok_step_free(&t->dec);
    tok_step_free(&t->post);
    free(t->special);
    free(t->bos);
    free(t->eos);
    free(t);
}

/* ---- encode --------------------------------------------------------------------------- */

typedef struct enc_ws {
    OnigRegion *rg;
    strbuf clean, norm;
    tok_span *spans, *sub;
    size_t n_spans, cap_spans, n_sub, cap_sub;
    tok_pieces pa, pb;
    tok_bpe_ws bws;
    tok_ids ids;
} enc_ws;

static int encode_text(const tokenizer *t, enc_ws *w, const char *s, size_t n, int at_start,
                       strata_err *err) {
    int r;
    if (t->norm.type) {
        if ((r = tok_normalize(&t->norm, s, n, &w->norm, w->rg, err))) return r;
        s = w->norm.p ? w->norm.p : "";
        n = w->norm.len;
    }
    w->n_sub = 0;
    if (t->added.norm.n_nodes > 1) {
        if (tok_added_split(&t->added, &t->added.norm, s, n, &w->sub, &w->n_sub, &w->cap_sub))
            return STRATA_ENOMEM;
    } else if (n) {
        if (!w->cap_sub) {
            if (!(w->sub = malloc(16 * sizeof *w->sub))) return STRATA_ENOMEM;
            w->cap_sub = 16;
        }
        w->sub[w->n_sub++] = (tok_span){0, n, -1};
    }
    for (size_t i = 0; i < w->n_sub; i++) {
        tok_span sp = w->sub[i];
        if (sp.idx >= 0) {
            if (tok_ids_push(&w->ids, sp.idx)) return STRATA_ENOMEM;
            continue;
        }
        tok_pieces *cur = &w->pa, *tmp = &w->pb;
        tok_pieces_clear(cur);
        if (tok_pieces_add(cur, s + sp.start, sp.end - sp.start, at_start && sp.start == 0))
            return STRATA_ENOMEM;
        if (t->pretok.type && (r = tok_pretokenize(&t->pretok, &cur, &tmp, w->rg, err))) return r;
        for (size_t k = 0; k < cur->n; k++)
            if (tok_bpe_encode_word(&t->bpe, &w->bws, cur->text.p + cur->off[k], cur->len[k],
                                    &w->ids))
                return STRATA_ENOMEM;
    }
    return 0;
}

static int post_process(const tok_step *s, tok_ids *ids) {
    if (s->type == TOK_STEP_SEQUENCE) {
        for (int i = 0; i < s->n_sub; i++)
            if (post_process(&s->sub[i], ids)) return STRATA_ENOMEM;
        return 0;
    }
    if (s->type != TOK_STEP_TEMPLATE) return 0; /* ByteLevel: offsets only */
    tok_ids out = {0};
    for (size_t i = 0; i < s->n_tmpl; i++) {
        if (s->tmpl[i] >= 0) {
            if (tok_ids_push(&out, s->tmpl[i])) goto nomem;
            continue;
        }
        for (size_t k = 0; k < ids->len; k++)
            if (tok_ids_push(&out, ids->p[k])) goto nomem;
    }
    tok_ids_free(ids);
    *ids = out;
    return 0;
nomem:
    tok_ids_free(&out);
    return STRATA_ENOMEM;
}

static int encode_spm(const tokenizer *t, const char *text, size_t len, int add_special,
                      int32_t **ids, size_t *n_ids, strata_err *err) {
    int32_t *raw = NULL;
    size_t n = 0;
    int r = spm_encode(t->sp, text, len, &raw, &n, err);
    if (r) return r;
    int bos = add_special && t->add_bos && t->bos_id >= 0,
        eos = add_special && t->add_eos && t->eos_id >= 0;
    int32_t *v = malloc((n + 2) * sizeof *v);
    if (!v) {
        free(raw);
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    size_t k = 0;
    if (bos) v[k++] = t->bos_id;
    if (n) memcpy(v + k, raw, n * sizeof *v);
    k += n;
    if (eos) v[k++] = t->eos_id;
    free(raw);
    *ids = v;
    *n_ids = k;
    return 0;
}

int tok_encode(const tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids,
               size_t *n_ids, strata_err *err) {
    if (!text && len) return strata_err_set(err, STRATA_EINVALID, "tok_encode: NULL text");
    if (!text) text = "";
    enc_ws w = {0};
    int r = 0;
    if (!unicode_utf8_valid(text, len)) {
        if ((r = unicode_utf8_lossy(&w.clean, text, len))) goto fail;
        text = w.clean.p;
        len = w.clean.len;
    }
    if (t->sp) {
        r = encode_spm(t, text, len, add_special, ids, n_ids, err);
        strbuf_free(&w.clean);
        return r;
    }
    if (!(w.rg = tok_region_new())) {
        r = STRATA_ENOMEM;
        goto fail;
    }
    if ((r = tok_added_split(&t->added, &t->added.raw, text, len, &w.spans, &w.n_spans,
                             &w.cap_spans)))
        goto fail;
    for (size_t i = 0; i < w.n_spans && !r; i++) {
        tok_span sp = w.spans[i];
        if (sp.idx >= 0) r = tok_ids_push(&w.ids, sp.idx);
        else r = encode_text(t, &w, text + sp.start, sp.end - sp.start, sp.start == 0, err);
    }
    if (!r && add_special && t->post.type) r = post_process(&t->post, &w.ids);
    if (!r && !w.ids.p) r = tok_ids_push(&w.ids, 0), w.ids.len = 0;
fail:
    if (r == STRATA_ENOMEM) strata_err_set(err, r, "tok_encode: out of memory");
    if (!r) {
        *ids = w.ids.p;
        *n_ids = w.ids.len;
        w.ids.p = NULL;
    }
    if (w.rg) onig_region_free(w.rg, 1);
    strbuf_free(&w.clean);
    strbuf_free(&w.norm);
    free(w.spans);
    free(w.sub);
    tok_pieces_free(&w.pa);
    tok_pieces_free(&w.pb);
    tok_bpe_ws_free(&w.bws);
    tok_ids_free(&w.ids);
    return r;
}

/* ---- decode --------------------------------------------------------------------------- */

/* transformers' clean_up_tokenization: these literal replacements, in this order. */
static int cleanup_spaces(strbuf *b) {
    static const char *from[] = {" .",   " ?",  " !",  " ,",   " ' ",
                                 " n't", " 'm", " 's", " 've", " 're"};
    static const char *to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
    for (size_t k = 0; k < sizeof from / sizeof *from; k++) {
        size_t fl = strlen(from[k]), tl = strlen(to[k]), w = 0;
        for (size_t i = 0; i < b->len;) {
            if (i + fl <= b->len && !memcmp(b->p + i, from[k], fl)) {
                memcpy(b->p + w, to[k], tl); /* tl < fl: never overtakes the read position */
                w += tl;
                i += fl;
            } else b->p[w++] = b->p[i++];
        }
        b->len = w;
        b->p[w] = 0;
    }
    return 0;
}

static void strs_reset(tok_strs *l) {
    l->n = 0;
    l->text.len = 0;
}

/* tokenizer.model: specials skipped here, the rest decoded by libsentencepiece into the
 * shim's buffers of ws, then copied into ws->out. */
static int decode_spm(const tokenizer *t, const int32_t *ids, size_t n_ids, int skip_special,
                      tok_decode_ws *ws, strata_err *err) {
    ws->keep.len = 0;
    for (size_t i = 0; i < n_ids; i++)
        if ((!skip_special || !tok_is_special(t, ids[i])) && tok_ids_push(&ws->keep, ids[i]))
            return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    const char *s;
    size_t n;
    int r = spm_decode_ws(t->sp, ws->keep.p, ws->keep.len, &ws->sp, &s, &n, err);
    if (r) return r;
    if (strbuf_add(&ws->out, s, n))
        return strata_err_set(err, STRATA_ENOMEM, "sentencepiece decode: out of memory");
    return 0;
}

int tok_decode_into(const tokenizer *t, const int32_t *ids, size_t n_ids, int skip_special,
                    tok_decode_ws *ws, strata_err *err) {
    ws->out.len = 0;
    if (ws->out.p) ws->out.p[0] = 0;
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= tok_vocab_size(t) ||
            (!t->sp && !tok_token_str(t, ids[i], &(size_t){0})))
            return strata_err_set(err, STRATA_ERANGE,
                                  "token id %d at position %zu is not in the vocabulary", ids[i],
                                  i);
    int r = 0;
    if (t->sp) {
        r = decode_spm(t, ids, n_ids, skip_special, ws, err);
        goto done;
    }
    tok_strs *cur = &ws->a, *tmp = &ws->b;
    strs_reset(cur);
    strs_reset(tmp);
    for (size_t i = 0; i < n_ids && !r; i++) {
        if (skip_special && t->special[ids[i]]) continue;
        size_t n;
        const char *s = tok_token_str(t, ids[i], &n);
        r = tok_strs_add(cur, s, n);
    }
    if (!r && t->dec.type) {
        if (!ws->rg && !(ws->rg = tok_region_new())) r = STRATA_ENOMEM;
        if (!r) r = tok_decode_chain(&t->dec, &cur, &tmp, ws, err);
    }
    for (size_t i = 0; i < cur->n && !r; i++) {
        if (!t->dec.type && i)
            r = strbuf_add(&ws->out, " ", 1); /* HF: no decoder joins with spaces */
        if (!r) r = strbuf_add(&ws->out, cur->text.p + cur->off[i], cur->len[i]);
    }
    if (!r && !ws->out.p) r = strbuf_add(&ws->out, "", 0);
    if (!r && t->cleanup) r = cleanup_spaces(&ws->out);
    if (r == STRATA_ENOMEM) strata_err_set(err, r, "tok_decode: out of memory");
done:
    if (r) {
        ws->out.len = 0;
        if (ws->out.p) ws->out.p[0] = 0;
    }
    return r;
}

void tok_decode_ws_free(tok_decode_ws *ws) {
    strbuf_free(&ws->out);
    tok_strs_free(&ws->a);
    tok_strs_free(&ws->b);
    strbuf_free(&ws->bytes);
    strbuf_free(&ws->tmp);
    if (ws->rg) onig_region_free(ws->rg, 1);
    tok_ids_free(&ws->keep);
    spm_ws_free(ws->sp);
    memset(ws, 0, sizeof *ws);
}

/* One-shot decode: a fresh workspace whose output buffer becomes the caller's. */
int tok_decode(const tokenizer *t, const int32_t *ids, size_t n_ids, int skip_special, char **text,
               size_t *len, strata_err *err) {
    tok_decode_ws ws = {0};
    int r = tok_decode_into(t, ids, n_ids, skip_special, &ws, err);
    if (!r) {
        *text = ws.out.p;
        *len = ws.out.len;
        ws.out.p = NULL;
    }
    tok_decode_ws_free(&ws);
    return r;
}

/* ---- accessors ------------------------------------------------------------------------ */

int tok_vocab_size(const tokenizer *t) { return t->sp ? spm_vocab_size(t->sp) : t->n_ids; }

int32_t tok_piece_to_id(const tokenizer *t, const char *piece) {
    return token_to_id(t, piece, strlen(piece));
}

const char *tok_id_to_piece(const tokenizer *t, int32_t id) {
    if (t->sp) return spm_id_to_piece(t->sp, id);
    size_t n;
    return tok_token_str(t, id, &n); /* strings are stored NUL-terminated */
}

int tok_is_special(const tokenizer *t, int32_t id) {
    if (t->sp) return id >= 0 && (id == t->bos_id || id == t->eos_id);
    return id >= 0 && id < t->n_ids && t->special[id];
}

int32_t tok_bos_id(const tokenizer *t) { return t->bos_id; }
int32_t tok_eos_id(const tokenizer *t) { return t->eos_id; }
const char *tok_bos_token(const tokenizer *t) { return t->bos; }
const char *tok_eos_token(const tokenizer *t) { return t->eos; }
