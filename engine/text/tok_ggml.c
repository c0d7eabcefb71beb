/* tok_ggml.c - a tokenizer from a GGUF file's tokenizer.ggml.* keys.
 *
 * The keys are turned back into the tokenizer.json the converter read, and that goes
 * through the same loader as a checkpoint's file (tok_load_root). One loader means the
 * conformance suite that pins tokenizer.json to HF tokenizers also pins this path, and
 * every GGUF-specific decision is one visible mapping here: tokens -> model.vocab,
 * merges -> model.merges, CONTROL / USER_DEFINED tokens -> added_tokens, and the
 * pre-tokenizer a GGUF only names (tokenizer.ggml.pre) -> the tokenizer.json component
 * that name stands for. The regexes are HF's originals as llama.cpp's
 * src/llama-vocab.cpp quotes them in its comments, not llama.cpp's rewrites of them,
 * because Oniguruma runs the originals as HF does. The cost is one JSON tree of the
 * vocabulary, the same as reading tokenizer.json.
 *
 * Two models are read: "gpt2" (byte-level BPE: Qwen3.5, Nemotron-H) and "gemma4" (Gemma's
 * SentencePiece-style BPE on raw UTF-8 with <0xHH> byte fallback). Gemma's converter
 * writes most of Gemma's added tokens as NORMAL vocabulary, so which tokens HF splits out
 * before BPE is recovered from the vocabulary itself (gemma_added). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/utf8.h"
#include "engine/text/tok_internal.h"
#include "engine/text/tokenizer.h"

/* llama.cpp's token types (gguf-py's TokenType). */
enum { GGML_NORMAL = 1, GGML_UNKNOWN, GGML_CONTROL, GGML_USER_DEFINED, GGML_UNUSED, GGML_BYTE };

#define BYTELEVEL "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}"
#define SPLIT_BYTELEVEL(re)                                                                        \
    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": " \
    "\"" re "\"}, \"behavior\": \"Isolated\", \"invert\": false}, " BYTELEVEL "]}"

/* Gemma's components, as its tokenizer.json has them: spaces become U+2581 before BPE, the
 * Split on " " then finds none (each span between added tokens is one BPE word), and the
 * decoder undoes the U+2581 and the <0xHH> byte fallback. */
#define SPM_NORMALIZER                                                                             \
    "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\u2581\"}"
#define SPM_PRETOK                                                                                 \
    "{\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, \"behavior\": "                       \
    "\"MergedWithPrevious\", \"invert\": false}"
#define SPM_DECODER                                                                                \
    "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": "   \
    "\"\u2581\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}]}"

/* What a tokenizer.ggml.pre name (or the gemma4 model) means as tokenizer.json components. */
typedef struct ggml_pre {
    const char *name;
    int spm;            /* Gemma's raw-UTF-8 BPE (SPM_*); else byte-level */
    const char *pretok; /* pre_tokenizer */
    int cleanup;        /* clean_up_tokenization_spaces (llama.cpp's clean_spaces) */
    int ignore_merges;  /* model.ignore_merges */
    int add_bos;        /* when tokenizer.ggml.add_bos_token is absent */
} ggml_pre;

/* gpt2 models: the decoder is ByteLevel and there is no normalizer. */
static const ggml_pre gpt2_pres[] = {
    /* Qwen3.5 */
    {"qwen35", 0,
     SPLIT_BYTELEVEL(
         "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{L}\\\\p{M}]+|"
         "\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{M}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|"
         "\\\\s+(?!\\\\S)|\\\\s+"),
     0, 0, 0},
    /* Qwen2 / Qwen3 */
    {"qwen2", 0,
     SPLIT_BYTELEVEL(
         "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}|"
         " ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|"
         "\\\\s+"),
     0, 0, 0},
    /* Mistral's Tekken vocabulary, which Nemotron-H uses; llama.cpp adds BOS for it */
    {"tekken", 0,
     SPLIT_BYTELEVEL("[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]*"
                     "[\\\\p{Ll}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]+|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?"
                     "[\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]+[\\\\p{Ll}\\\\p{Lm}\\\\p{Lo}"
                     "\\\\p{M}]*|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n/]*|"
                     "\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"),
     0, 1, 1},
    /* GPT-2 itself: ByteLevel with its own regex */
    {"gpt-2", 0, "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}", 1,
     0, 0},
};

/* tokenizer.ggml.model "gemma4" has no pre key; BOS as llama.cpp and the converter add it. */
static const ggml_pre gemma4_pre = {"gemma4", 1, SPM_PRETOK, 0, 0, 1};

static int str_is(tok_ggml_str s, const char *lit) {
    return s.p && s.len == strlen(lit) && !memcmp(s.p, lit, s.len);
}

/* Adds a parsed component under key; the JSON texts above are constants, so a parse
 * failure can only be memory. */
static int set_component(json_t *root, const char *key, const char *text) {
    json_t *v = json_loads(text, 0, NULL);
    return v ? json_object_set_new(root, key, v) : STRATA_ENOMEM;
}

static int nomem(strata_err *err, const tok_ggml *v) {
    return strata_err_set(err, STRATA_ENOMEM, "%s: tokenizer: out of memory", v->file);
}

static int token_type(const tok_ggml *v, size_t i) {
    return v->token_type ? v->token_type[i] : GGML_NORMAL;
}

/* model.vocab from every token but the UNUSED ones (the converter's [PADn] fillers up to
 * the model's vocab_size, which HF's tokenizer does not have). */
static int build_vocab(json_t *vocab, const tok_ggml *v, strata_err *err) {
    for (size_t i = 0; i < v->n_tokens; i++) {
        tok_ggml_str s = v->tokens[i];
        int tt = token_type(v, i);
        if (tt < GGML_NORMAL || tt > GGML_BYTE)
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: tokenizer.ggml.token_type[%zu] is %d (llama.cpp's types are "
                                  "1-6)",
                                  v->file, i, tt);
        if (tt == GGML_UNUSED) continue;
        if (!s.len)
            return strata_err_set(err, STRATA_EFORMAT, "%s: tokenizer.ggml.tokens[%zu] is empty",
                                  v->file, i);
        /* tokenizer.json holds text, and jansson refuses other bytes where it checks */
        if (!unicode_utf8_valid(s.p, s.len))
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: tokenizer.ggml.tokens[%zu] is not valid UTF-8", v->file, i);
        if (json_object_getn(vocab, s.p, s.len)) continue; /* the first id keeps the string */
        json_t *id = json_integer((json_int_t)i);
        if (!id || json_object_setn_new_nocheck(vocab, s.p, s.len, id)) return nomem(err, v);
    }
    return 0;
}

/* The offset of the space that splits a merge, as llama.cpp finds it (from byte 1, so a
 * first piece may itself be a space); 0 when there is none. */
static size_t merge_split(tok_ggml_str m) {
    for (size_t k = 1; k < m.len; k++)
        if (m.p[k] == ' ') return k;
    return 0;
}

/* model.merges; each piece and their concatenation must be tokens, as HF requires. made
 * (when not NULL) gets a 1 at the id of every token some merge produces. */
static int build_merges(json_t *merges, const json_t *vocab, const tok_ggml *v, uint8_t *made,
                        strata_err *err) {
    strbuf cat = {0};
    int r = 0;
    for (size_t i = 0; i < v->n_merges && !r; i++) {
        tok_ggml_str m = v->merges[i];
        size_t k = merge_split(m);
        if (!k || k + 1 >= m.len) {
            r = strata_err_set(err, STRATA_EFORMAT, "%s: tokenizer.ggml.merges[%zu] is not \"a b\"",
                               v->file, i);
            break;
        }
        const char *a = m.p, *b = m.p + k + 1;
        size_t la = k, lb = m.len - k - 1;
        cat.len = 0;
        if (strbuf_add(&cat, a, la) || strbuf_add(&cat, b, lb)) {
            r = nomem(err, v);
            break;
        }
        json_t *id = json_object_getn(vocab, cat.p, cat.len);
        if (!json_object_getn(vocab, a, la) || !json_object_getn(vocab, b, lb) || !id) {
            r = strata_err_set(err, STRATA_EFORMAT,
                               "%s: tokenizer.ggml.merges[%zu] (\"%.*s\" \"%.*s\") names a token "
                               "missing from tokenizer.ggml.tokens",
                               v->file, i, (int)(la > 40 ? 40 : la), a, (int)(lb > 40 ? 40 : lb),
                               b);
            break;
        }
        if (made) made[json_integer_value(id)] = 1;
        /* "a b" as a string when the split is unambiguous, else the pair */
        json_t *e = memchr(b, ' ', lb) ? json_pack("[s#s#]", a, la, b, lb)
                                       : json_stringn_nocheck(m.p, m.len);
        if (!e || json_array_append_new(merges, e)) r = nomem(err, v);
    }
    strbuf_free(&cat);
    return r;
}

/* 1 when s is n copies (n >= min) of the UTF-8 character c. */
static int run_of(tok_ggml_str s, const char *c, size_t min) {
    size_t k = strlen(c);
    if (s.len < k * min || s.len % k) return 0;
    for (size_t i = 0; i < s.len; i += k)
        if (memcmp(s.p + i, c, k)) return 0;
    return 1;
}

/* Whether a NORMAL token of a gemma4 vocabulary was one of the checkpoint's added tokens
 * (its SentencePiece model's user-defined pieces), which HF matches on the raw text before
 * BPE. Two kinds, and on Gemma 3's tokenizer.json (6,415 added tokens) and llama.cpp's
 * Gemma 4 vocabulary these rules find exactly the added ones:
 *  - a token of more than one character that no merge produces (<start_of_turn>, <b>,
 *    <unused0>, ...): BPE can never emit it, so only the added-token pass does;
 *  - the runs of one whitespace character, which merges do produce: \n and \t 1 to 31
 *    times, U+2581 2 to 31 times (a lone U+2581 is the vocabulary's own word marker). */
static int gemma_added(tok_ggml_str s, int made) {
    if (run_of(s, "\n", 1) || run_of(s, "\t", 1) || run_of(s, "\xe2\x96\x81", 2)) return 1;
    size_t chars = 0; /* valid UTF-8 (build_vocab checked): count the lead bytes */
    for (size_t i = 0; i < s.len; i++) chars += ((uint8_t)s.p[i] & 0xC0) != 0x80;
    return !made && chars > 1;
}

/* added_tokens: CONTROL (and UNKNOWN) tokens are special, USER_DEFINED ones are not; all
 * are matched on the raw text, as llama.cpp does and as the converter's normalized:false
 * tokens are. The converter makes CONTROL of HF's special tokens and of those that look
 * special (<|...|>), so a few HF keeps in a skip_special decode are dropped here (Qwen3.5:
 * <|fim_prefix|> and five more); the GGUF does not say which. made (gemma4) adds the
 * NORMAL tokens gemma_added finds, special when a bos / eos / unk key names them. */
static int build_added(json_t *added, const tok_ggml *v, const uint8_t *made, strata_err *err) {
    for (size_t i = 0; i < v->n_tokens; i++) {
        int tt = token_type(v, i), special = tt != GGML_USER_DEFINED;
        if (tt == GGML_NORMAL && made && gemma_added(v->tokens[i], made[i]))
            special = (int64_t)i == v->bos_id || (int64_t)i == v->eos_id || (int64_t)i == v->unk_id;
        else if (tt != GGML_CONTROL && tt != GGML_USER_DEFINED && tt != GGML_UNKNOWN) continue;
        json_t *t = json_pack("{s:I, s:s#, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)i,
                              "content", v->tokens[i].p, v->tokens[i].len, "single_word", 0,
                              "lstrip", 0, "rstrip", 0, "normalized", 0, "special", special);
        if (!t || json_array_append_new(added, t)) return nomem(err, v);
    }
    return 0;
}

/* A TemplateProcessing that adds BOS / EOS, as HF's post-processor does where the
 * checkpoint's tokenizer_config says add_bos_token. */
static int build_post(json_t *root, const tok_ggml *v, int bos, int eos, strata_err *err) {
    /* the arrays are made inside the one pack, so a failure leaves nothing to free */
    json_t *post =
        json_pack("{s:s, s:[], s:{}}", "type", "TemplateProcessing", "single", "special_tokens");
    json_t *single = json_object_get(post, "single"),
           *special = json_object_get(post, "special_tokens");
    int r = !post || json_object_set_new(root, "post_processor", post);
    for (int k = 0; k < 2 && !r; k++) {
        int64_t id = k ? v->eos_id : v->bos_id;
        if (!(k ? eos : bos)) {
            if (!k)
                r = json_array_append_new(single, json_pack("{s:{s:s}}", "Sequence", "id", "A"));
            continue;
        }
        char name[24];
        snprintf(name, sizeof name, "%s", k ? "eos" : "bos");
        r = json_array_append_new(
                single, json_pack("{s:{s:s, s:i}}", "SpecialToken", "id", name, "type_id", 0)) ||
            json_object_set_new(special, name,
                                json_pack("{s:s, s:[I]}", "id", name, "ids", (json_int_t)id));
        if (!k && !r)
            r = json_array_append_new(single, json_pack("{s:{s:s}}", "Sequence", "id", "A"));
    }
    return r ? nomem(err, v) : 0;
}

static int check_id(const tok_ggml *v, int64_t id, const char *key, strata_err *err) {
    if (id < -1 || id >= (int64_t)v->n_tokens ||
        (id >= 0 && token_type(v, (size_t)id) == GGML_UNUSED))
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: tokenizer.ggml.%s is %lld, not a token of tokenizer.ggml.tokens",
                              v->file, key, (long long)id);
    return 0;
}

/* The components tokenizer.ggml.model (and, for gpt2, tokenizer.ggml.pre) name. */
static int pick_pre(const tok_ggml *v, const ggml_pre **pre, strata_err *err) {
    if (!v->model.p)
        return strata_err_set(err, STRATA_EFORMAT, "%s: no tokenizer.ggml.model", v->file);
    if (str_is(v->model, "gemma4")) {
        *pre = &gemma4_pre;
        return 0;
    }
    if (!str_is(v->model, "gpt2"))
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s: tokenizer.ggml.model \"%.*s\" is not supported (gpt2, gemma4)",
                              v->file, (int)(v->model.len > 40 ? 40 : v->model.len), v->model.p);
    *pre = NULL;
    for (size_t i = 0; i < sizeof gpt2_pres / sizeof *gpt2_pres; i++)
        if (str_is(v->pre, gpt2_pres[i].name) ||
            (!strcmp(gpt2_pres[i].name, "qwen2") && str_is(v->pre, "deepseek-r1-qwen")))
            *pre = &gpt2_pres[i];
    if (!v->pre.p)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: no tokenizer.ggml.pre (the pre-tokenizer of a gpt2 vocabulary)",
                              v->file);
    if (!*pre)
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s: tokenizer.ggml.pre \"%.*s\" is not supported (qwen35, qwen2, "
                              "tekken, gpt-2)",
                              v->file, (int)(v->pre.len > 40 ? 40 : v->pre.len), v->pre.p);
    return 0;
}

/* The keys that must be there and agree with each other. */
static int check_keys(const tok_ggml *v, const ggml_pre **pre, strata_err *err) {
    int r = pick_pre(v, pre, err);
    if (r) return r;
    if (!v->tokens || !v->n_tokens)
        return strata_err_set(err, STRATA_EFORMAT, "%s: no tokenizer.ggml.tokens", v->file);
    if (v->n_tokens >= (1u << 30))
        return strata_err_set(err, STRATA_EFORMAT, "%s: tokenizer.ggml.tokens has %zu entries",
                              v->file, v->n_tokens);
    if (v->token_type && v->n_token_type != v->n_tokens)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: tokenizer.ggml.token_type has %zu entries, "
                              "tokenizer.ggml.tokens %zu",
                              v->file, v->n_token_type, v->n_tokens);
    if (!v->merges)
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: no tokenizer.ggml.merges (a BPE vocabulary)", v->file);
    if ((r = check_id(v, v->bos_id, "bos_token_id", err)) ||
        (r = check_id(v, v->eos_id, "eos_token_id", err)))
        return r;
    return check_id(v, v->unk_id, "unknown_token_id", err);
}

/* Gemma's BPE model: byte fallback to the <0xHH> tokens, runs of unknown characters fused
 * into one unk. */
static int spm_model(json_t *model, const tok_ggml *v) {
    int r = json_object_set_new(model, "byte_fallback", json_true()) |
            json_object_set_new(model, "fuse_unk", json_true());
    if (v->unk_id >= 0)
        r |= json_object_set_new(
            model, "unk_token",
            json_stringn_nocheck(v->tokens[v->unk_id].p, v->tokens[v->unk_id].len));
    return r;
}

static int build_root(json_t **out, const tok_ggml *v, const ggml_pre *pre, int add_bos,
                      int add_eos, strata_err *err) {
    json_t *root = json_object();
    if (!root) return nomem(err, v);
    json_t *vocab = json_object(), *merges = json_array(), *added = json_array();
    json_t *model = json_pack("{s:s, s:o, s:o, s:b}", "type", "BPE", "vocab", vocab, "merges",
                              merges, "ignore_merges", pre->ignore_merges);
    uint8_t *made = pre->spm ? calloc(v->n_tokens, 1) : NULL;
    /* | not ||: each set_new takes its value even when it fails, so every one must run */
    const char *decoder = pre->spm ? SPM_DECODER : BYTELEVEL;
    int failed = json_object_set_new(root, "model", model) |
                 json_object_set_new(root, "added_tokens", added) |
                 set_component(root, "pre_tokenizer", pre->pretok) |
                 set_component(root, "decoder", decoder) |
                 (pre->spm && (!made || !model || spm_model(model, v) ||
                               set_component(root, "normalizer", SPM_NORMALIZER)));
    int r = failed ? nomem(err, v) : 0;
    if (!r) r = build_vocab(vocab, v, err);
    if (!r) r = build_merges(merges, vocab, v, made, err);
    if (!r) r = build_added(added, v, made, err);
    if (!r && (add_bos || add_eos)) r = build_post(root, v, add_bos, add_eos, err);
    free(made);
    if (r) {
        json_decref(root);
        return r;
    }
    *out = root;
    return 0;
}

static char *dup_token(const tok_ggml *v, int64_t id) {
    tok_ggml_str s = v->tokens[id];
    char *p = malloc(s.len + 1);
    if (p) {
        memcpy(p, s.p, s.len);
        p[s.len] = 0;
    }
    return p;
}

int tok_load_ggml(tokenizer **out, const tok_ggml *v, strata_err *err) {
    const ggml_pre *pre = NULL;
    json_t *root = NULL;
    tokenizer *t = NULL;
    int r = check_keys(v, &pre, err);
    if (r) return r;
    int add_bos = v->add_bos >= 0 ? v->add_bos : pre->add_bos, add_eos = v->add_eos > 0;
    if ((add_bos && v->bos_id < 0) || (add_eos && v->eos_id < 0))
        return strata_err_set(
            err, STRATA_EFORMAT,
            "%s: tokenizer.ggml.add_%s_token is set but tokenizer.ggml.%s_token_id "
            "is absent",
            v->file, add_bos && v->bos_id < 0 ? "bos" : "eos",
            add_bos && v->bos_id < 0 ? "bos" : "eos");
    if ((r = build_root(&root, v, pre, add_bos, add_eos, err))) return r;
    if (!(t = calloc(1, sizeof *t))) {
        r = nomem(err, v);
        goto fail;
    }
    errno = 0;
    if ((r = tok_load_root(t, root, err))) {
        strata_err_wrap(err, "%s: tokenizer.ggml.*: ", v->file);
        goto fail;
    }
    t->cleanup = pre->cleanup;
    t->add_bos = add_bos;
    t->add_eos = add_eos;
    t->bos_id = v->bos_id;
    t->eos_id = v->eos_id;
    if ((v->bos_id >= 0 && !(t->bos = dup_token(v, v->bos_id))) ||
        (v->eos_id >= 0 && !(t->eos = dup_token(v, v->eos_id)))) {
        r = nomem(err, v);
        goto fail;
    }
    json_decref(root);
    *out = t;
    return 0;
fail:
    json_decref(root);
    tok_free(t);
    return r;
}
