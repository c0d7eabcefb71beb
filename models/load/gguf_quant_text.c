/* gguf_quant_text.c - a checkpoint's tokenizer and chat template as GGUF keys, so a quantized
 * file is self-contained. Two of llama.cpp's vocabulary models are written:
 *  - "gpt2" (byte-level BPE: Qwen3.5, Nemotron-H), the way the converter's _set_vocab_gpt2 /
 *    SpecialVocab write it: tokens by id with [PADn] UNUSED fillers up to the model's
 *    vocab_size, added tokens CONTROL when special or looking special (<|...|>) and
 *    USER_DEFINED otherwise. tokenizer.ggml.pre names the pre-tokenizer by architecture
 *    (qwen35, tekken): llama.cpp picks it by hashing the tokenizer's output in Python, which
 *    a C tool cannot do.
 *  - "gemma4" (Gemma's raw-UTF-8 BPE with byte fallback), as Gemma4Model.set_vocab writes it
 *    but for one thing: every added token keeps its kind (CONTROL when special, else
 *    USER_DEFINED) where the converter writes most of them NORMAL, so the file says what HF
 *    splits out before BPE (llama.cpp splits USER_DEFINED tokens out too); <0xHH> are BYTE.
 * Both: merges as "a b", bos / eos / unknown / padding ids from tokenizer_config.json (else
 * config.json), add_bos from tokenizer_config.json (else the post-processor).
 * engine/text/tok_ggml.c reads the keys back, and the round trip through it is the test. Any
 * other tokenizer is left out with a note: the file then has only the eos / bos ids of the
 * config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/load/gguf_quant_internal.h"

enum { TT_NORMAL = 1, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* The vocabulary model of each architecture, and for gpt2 its pre-tokenizer. */
static const struct {
    const char *arch, *model, *pre;
} text_pres[] = {
    {"qwen35", "gpt2", "qwen35"}, {"nemotron_h", "gpt2", "tekken"}, {"gemma4", "gemma4", NULL}};

typedef struct text {
    const char **tok; /* [n] borrowed from the JSON, or from pads */
    size_t *len;
    int32_t *type;
    char *pads; /* the [PADn] strings, 16 bytes each */
    size_t n;
} text;

static json_t *load_json(const gq_model *m, const char *name, strata_err *err, int *rc) {
    char p[4300];
    json_error_t je;
    snprintf(p, sizeof p, "%s/%s", m->dir, name);
    FILE *f = fopen(p, "rb");
    *rc = 0;
    if (!f) return NULL;
    fclose(f);
    json_t *j = json_load_file(p, 0, &je);
    if (!j) *rc = strata_err_set(err, STRATA_EFORMAT, "%s:%d: %s", p, je.line, je.text);
    return j;
}

/* The id of a token string (added tokens, then the vocabulary); -1 when absent. */
static long long token_id(json_t *tj, const char *s) {
    json_t *added = json_object_get(tj, "added_tokens"), *e;
    size_t i;
    json_array_foreach(added, i, e) {
        const char *c = json_string_value(json_object_get(e, "content"));
        if (c && !strcmp(c, s)) return json_integer_value(json_object_get(e, "id"));
    }
    json_t *id = json_object_get(json_object_get(json_object_get(tj, "model"), "vocab"), s);
    return json_is_integer(id) ? json_integer_value(id) : -1;
}

/* A special token's id: tokenizer_config's "<name>_token" (a string or {content}), else the
 * config's "<name>_token_id" (an int or the first of a list); -1 when neither. */
static long long special_id(const gq_model *m, json_t *tj, json_t *tc, const char *name) {
    char k[64];
    snprintf(k, sizeof k, "%s_token", name);
    json_t *v = tc ? json_object_get(tc, k) : NULL;
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (tj && json_is_string(v)) return token_id(tj, json_string_value(v));
    snprintf(k, sizeof k, "%s_token_id", name);
    json_t *srcs[] = {m->gen, m->tc, m->root};
    for (int i = 0; i < 3; i++) {
        json_t *id = srcs[i] ? json_object_get(srcs[i], k) : NULL;
        if (json_is_array(id)) id = json_array_get(id, 0);
        if (json_is_integer(id)) return json_integer_value(id);
    }
    return -1;
}

static int put_ids(gguf_write *w, const gq_model *m, json_t *tj, json_t *tcfg, strata_err *err) {
    static const char *const names[] = {"bos", "eos", "unknown", "padding"};
    static const char *const hf[] = {"bos", "eos", "unk", "pad"};
    for (int i = 0; i < 4; i++) {
        long long id = special_id(m, tj, tcfg, hf[i]);
        char k[64];
        snprintf(k, sizeof k, "tokenizer.ggml.%s_token_id", names[i]);
        if (id >= 0 && gguf_write_u32(w, k, (uint32_t)id, err)) return err->code;
    }
    return 0;
}

/* The converter's does_token_look_special, in its common form. */
static int looks_special(const char *s) {
    size_t n = strlen(s);
    return n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>");
}

/* <0xHH>: a byte-fallback token. */
static int byte_token(const char *s) {
    static const char hex[] = "0123456789abcdefABCDEF";
    return strlen(s) == 6 && !strncmp(s, "<0x", 3) && s[5] == '>' && strchr(hex, s[3]) &&
           strchr(hex, s[4]);
}

/* spm: Gemma's vocabulary (BYTE tokens; an added token's kind from its special flag alone). */
static int fill_tokens(text *t, json_t *tj, long long vocab, const gq_model *m, int spm,
                       strata_err *err) {
    json_t *vj = json_object_get(json_object_get(tj, "model"), "vocab"), *v;
    json_t *added = json_object_get(tj, "added_tokens"), *e;
    const char *key;
    size_t i;
    long long n = vocab;
    json_object_foreach(vj, key, v)
        if (json_integer_value(v) + 1 > n) n = json_integer_value(v) + 1;
    json_array_foreach(added, i, e) {
        long long id = json_integer_value(json_object_get(e, "id"));
        if (id + 1 > n) n = id + 1;
    }
    /* Nemotron-H's converter pads the token list to a multiple of 8 (Mamba2Model) */
    if (!strcmp(m->arch, "nemotron_h")) n = (n + 7) / 8 * 8;
    if (n > (1LL << 30))
        return strata_err_set(err, STRATA_EFORMAT, "%s/tokenizer.json: %lld tokens", m->dir, n);
    t->n = (size_t)n;
    t->tok = calloc(t->n, sizeof *t->tok);
    t->len = calloc(t->n, sizeof *t->len);
    t->type = calloc(t->n, sizeof *t->type);
    t->pads = calloc(t->n, 16);
    if (!t->tok || !t->len || !t->type || !t->pads)
        return strata_err_set(err, STRATA_ENOMEM, "%s/tokenizer.json: out of memory", m->dir);
    json_object_foreach(vj, key, v) {
        long long id = json_integer_value(v);
        if (id < 0) continue;
        t->tok[id] = key;
        t->type[id] = spm && byte_token(key) ? TT_BYTE : TT_NORMAL;
    }
    json_array_foreach(added, i, e) {
        long long id = json_integer_value(json_object_get(e, "id"));
        const char *c = json_string_value(json_object_get(e, "content"));
        if (id < 0 || !c) continue;
        t->tok[id] = c;
        t->type[id] = json_is_true(json_object_get(e, "special")) || (!spm && looks_special(c))
                          ? TT_CONTROL
                          : TT_USER_DEFINED;
    }
    for (size_t k = 0; k < t->n; k++) {
        if (!t->tok[k]) {
            snprintf(t->pads + 16 * k, 16, "[PAD%zu]", k);
            t->tok[k] = t->pads + 16 * k;
            t->type[k] = TT_UNUSED;
        }
        t->len[k] = strlen(t->tok[k]);
    }
    return 0;
}

/* model.merges as "a b" strings (the newer [a, b] pair form joined). */
static int put_merges(gguf_write *w, json_t *tj, const gq_model *m, strata_err *err) {
    json_t *mj = json_object_get(json_object_get(tj, "model"), "merges"), *e;
    size_t n = json_array_size(mj), i;
    char **s = calloc(n ? n : 1, sizeof *s);
    int rc = s ? 0 : strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", m->dir);
    json_array_foreach(mj, i, e) {
        if (rc) break;
        const char *a = json_string_value(e), *b = NULL;
        if (json_is_array(e)) {
            a = json_string_value(json_array_get(e, 0));
            b = json_string_value(json_array_get(e, 1));
        }
        if (!a || (json_is_array(e) && !b)) {
            rc = strata_err_set(err, STRATA_EFORMAT, "%s/tokenizer.json: model.merges[%zu]", m->dir,
                                i);
            break;
        }
        size_t la = strlen(a), lb = b ? strlen(b) : 0;
        if (!(s[i] = malloc(la + lb + 2))) {
            rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", m->dir);
            break;
        }
        memcpy(s[i], a, la);
        if (b) {
            s[i][la] = ' ';
            memcpy(s[i] + la + 1, b, lb + 1);
        } else {
            s[i][la] = 0;
        }
    }
    if (!rc) rc = gguf_write_strs(w, "tokenizer.ggml.merges", (const char *const *)s, NULL, n, err);
    for (i = 0; s && i < n; i++) free(s[i]);
    free(s);
    return rc;
}

/* Whether the post-processor adds a token before the text (HF's add_bos). */
static int post_adds_bos(json_t *tj) {
    json_t *pp = json_object_get(tj, "post_processor");
    json_t *single = json_object_get(pp, "single");
    return json_is_array(single) && json_object_get(json_array_get(single, 0), "SpecialToken");
}

/* Whether tokenizer.json is what llama.cpp's model reads: byte-level BPE for gpt2; for
 * gemma4 BPE with byte fallback and a Sequence decoder (what LlamaHfVocab accepts). */
static int vocab_fits(json_t *tj, const char *vmodel) {
    json_t *model = json_object_get(tj, "model"), *dec = json_object_get(tj, "decoder");
    const char *type = json_string_value(json_object_get(model, "type"));
    const char *dt = json_string_value(json_object_get(dec, "type"));
    if (!type || strcmp(type, "BPE") || !dt) return 0;
    if (!strcmp(vmodel, "gpt2")) return !strcmp(dt, "ByteLevel");
    return json_is_true(json_object_get(model, "byte_fallback")) && !strcmp(dt, "Sequence");
}

static int put_template(gguf_write *w, const gq_model *m, json_t *tcfg, strata_err *err) {
    char p[4300];
    snprintf(p, sizeof p, "%s/chat_template.jinja", m->dir);
    FILE *f = fopen(p, "rb");
    if (f) {
        char *buf = NULL;
        size_t len = 0, cap = 0, got;
        int rc = 0;
        do {
            if (len + 65536 > cap) {
                char *nb = realloc(buf, cap = 2 * cap + 65536);
                if (!nb) {
                    rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", p);
                    break;
                }
                buf = nb;
            }
            got = fread(buf + len, 1, cap - len, f);
            len += got;
        } while (got > 0);
        if (!rc && ferror(f)) rc = strata_err_set(err, STRATA_EIO, "%s: cannot read", p);
        fclose(f);
        if (!rc) rc = gguf_write_str(w, "tokenizer.chat_template", buf ? buf : "", len, err);
        free(buf);
        return rc;
    }
    json_t *ct = tcfg ? json_object_get(tcfg, "chat_template") : NULL, *e;
    size_t i;
    if (json_is_array(ct)) /* named templates: the default one */
        json_array_foreach(ct, i, e) {
            const char *nm = json_string_value(json_object_get(e, "name"));
            if (nm && !strcmp(nm, "default")) ct = json_object_get(e, "template");
        }
    if (!json_is_string(ct)) return 0;
    return gguf_write_str(w, "tokenizer.chat_template", json_string_value(ct),
                          json_string_length(ct), err);
}

int gq_text(gguf_write *w, const gq_model *m, strata_err *err) {
    int rc = 0;
    text t = {0};
    json_t *tj = load_json(m, "tokenizer.json", err, &rc), *tcfg = NULL;
    if (rc) return rc;
    tcfg = load_json(m, "tokenizer_config.json", err, &rc);
    if (rc) goto done;
    const char *vmodel = NULL, *pre = NULL;
    for (size_t i = 0; i < sizeof text_pres / sizeof text_pres[0]; i++)
        if (!strcmp(m->arch, text_pres[i].arch))
            vmodel = text_pres[i].model, pre = text_pres[i].pre;
    if (!tj || !vmodel || !vocab_fits(tj, vmodel)) {
        gq_note(m,
                "%s: no tokenizer written (%s): the file has the config's bos / eos ids only; "
                "keep the checkpoint's tokenizer files beside it",
                m->dir,
                !tj      ? "no tokenizer.json"
                : vmodel ? "tokenizer.json is not the BPE kind llama.cpp's model for this "
                           "architecture reads"
                         : "no tokenizer model is known for this architecture");
        rc = put_ids(w, m, NULL, NULL, err);
        if (!rc) rc = put_template(w, m, tcfg, err);
        goto done;
    }
    json_t *ab = tcfg ? json_object_get(tcfg, "add_bos_token") : NULL;
    json_t *ae = tcfg ? json_object_get(tcfg, "add_eos_token") : NULL;
    if ((rc = fill_tokens(&t, tj, m->vocab, m, !pre, err)) ||
        (rc = gguf_write_str(w, "tokenizer.ggml.model", vmodel, strlen(vmodel), err)) ||
        (pre && (rc = gguf_write_str(w, "tokenizer.ggml.pre", pre, strlen(pre), err))) ||
        (rc = gguf_write_strs(w, "tokenizer.ggml.tokens", t.tok, t.len, t.n, err)) ||
        (rc = gguf_write_arr(w, "tokenizer.ggml.token_type", GGUF_VT_I32, t.type, t.n, err)) ||
        (rc = put_merges(w, tj, m, err)) || (rc = put_ids(w, m, tj, tcfg, err)) ||
        (rc = gguf_write_bool(w, "tokenizer.ggml.add_bos_token",
                              json_is_boolean(ab) ? json_is_true(ab) : post_adds_bos(tj), err)) ||
        (json_is_boolean(ae) &&
         (rc = gguf_write_bool(w, "tokenizer.ggml.add_eos_token", json_is_true(ae), err))) ||
        (rc = put_template(w, m, tcfg, err)))
        goto done;
done:
    free(t.tok);
    free(t.len);
    free(t.type);
    free(t.pads);
    json_decref(tj);
    json_decref(tcfg);
    return rc;
}
