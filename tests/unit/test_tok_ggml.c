/* test_tok_ggml.c - engine/text/tok_ggml.c and server/model_text.c: a tokenizer and chat
 * template from a GGUF file's metadata.
 *
 * The GGUF files (tests/data/tokenizers/NAME/vocab.gguf.zst) were written by llama.cpp's
 * own converter from the same tokenizer files the conformance fixtures were made from
 * (tools/gguf_vocab.py), so the GGUF tokenizer must reproduce HF's fixtures exactly and
 * agree with the tokenizer.json tokenizer on every accessor, the special flag of the
 * tokens that only look special aside (see looks_special). gemma3's file is the Gemma 3
 * tokenizer written as Gemma 4's converter writes ("gemma4": most added tokens NORMAL), so
 * it checks the recovery of Gemma's added tokens. Refusals use hand-made tok_ggml key
 * sets. STRATA_TEST_QUICK=1 checks every 10th fixture case. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/load/gguf.h"
#include "server/serve.h"
#include "tests/data/tokenizers/tok_fixture.h"
#include "tests/test.h"
#include "tests/tokfx_walk.h"
#include "tests/test_file.h"

static int quick;

/* Unpacks NAME/vocab.gguf.zst into dir/vocab.gguf. */
static int unpack_gguf(const char *name, const char *dir, char *path, size_t len) {
    char cmd[1200];
    snprintf(path, len, "%s/vocab.gguf", dir);
    snprintf(cmd, sizeof cmd, "zstd -dqf --long=27 tests/data/tokenizers/%s/vocab.gguf.zst -o '%s'",
             name, path);
    return system(cmd);
}

/* The converter makes CONTROL tokens of the ones that look special (<|...|>) too, and the
 * GGUF keeps no other flag, so those may be special here and not in the checkpoint. */
static int looks_special(const char *s) {
    size_t n = s ? strlen(s) : 0;
    return n > 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>");
}

/* 1 when ids hold a token whose special flag differs from the reference tokenizer's:
 * a skip_special decode of them may differ, for the reason above. */
static int flag_differs(const tokenizer *t, const tokenizer *ref, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (tok_is_special(t, ids[i]) != tok_is_special(ref, ids[i])) return 1;
    return 0;
}

/* Every fixture case: encode (with and without specials) and decode (with and without
 * skipping) byte for byte as HF does, but for the skip_special decodes flag_differs
 * excuses (counted; under a tenth of the cases: the fixtures' random id lists hit the six
 * tokens of Qwen3.5 often). */
static void check_fixtures(const char *name, const tokenizer *t, const tokenizer *ref) {
    tokfx_walk w = tokfx_walk_open(name, quick);
    tokfx_case c;
    int n = 0, bad = 0, excused = 0;
    strata_err err = {0};
    while (tokfx_walk_next(&w, &c) > 0) {
        int ok = 1;
        if (c.kind == 'E') {
            tokfx_encoded e = tokfx_encode(t, &c, &err);
            ok = tokfx_encoded_match(&e, &c);
            tokfx_encoded_free(&e);
        }
        for (int skip = 0; skip < 2 && ok; skip++) {
            char *text = NULL;
            size_t len = 0;
            const int32_t *ids = c.kind == 'E' ? c.ids_sp : c.ids;
            size_t nid = c.kind == 'E' ? c.n_ids_sp : c.n_ids;
            if (skip && flag_differs(t, ref, ids, nid)) {
                excused++;
                break;
            }
            ok = !tok_decode(t, ids, nid, skip, &text, &len, &err) &&
                 len == (skip ? c.dec_skip_len : c.dec_len) &&
                 !memcmp(text, skip ? c.dec_skip : c.dec, len);
            free(text);
        }
        if (!ok && bad++ < 5)
            fprintf(stderr, "  %s: case %d (%c) differs: %.*s\n", name, n, c.kind,
                    (int)(c.text_len > 60 ? 60 : c.text_len), c.text ? c.text : "");
        n++;
    }
    tokfx_walk_close(&w);
    CHECK_MSG(bad == 0, "%s: %d of %d cases differ", name, bad, n);
    CHECK_MSG(n > 100 && excused * 10 < n, "%s: %d cases, %d excused", name, n, excused);
}

/* The same accessors as the tokenizer.json tokenizer of the same checkpoint; a special
 * flag may differ only where excused says so of the piece. */
static void check_same(const tokenizer *g, const tokenizer *j,
                       int (*excused)(const char *piece, int g_special)) {
    CHECK_EQ_INT(tok_vocab_size(g), tok_vocab_size(j));
    CHECK_EQ_INT(tok_bos_id(g), tok_bos_id(j));
    CHECK_EQ_INT(tok_eos_id(g), tok_eos_id(j));
    int n = tok_vocab_size(j), diff = 0;
    for (int i = 0; i < n; i++) {
        const char *a = tok_id_to_piece(g, i), *b = tok_id_to_piece(j, i);
        int flag = tok_is_special(g, i) != tok_is_special(j, i);
        if ((!a != !b) || (a && strcmp(a, b)) || (flag && !excused(a, tok_is_special(g, i))))
            if (diff++ < 3) fprintf(stderr, "  id %d: %s / %s\n", i, a ? a : "-", b ? b : "-");
    }
    CHECK_MSG(diff == 0, "%d ids differ", diff);
}

static int qwen_excused(const char *piece, int g_special) {
    return g_special && looks_special(piece);
}

/* Pieces whose special flag a gemma4 GGUF cannot carry: Gemma 3's <eos> and
 * <start_of_turn> are special in HF but NORMAL in the file (no key names them), and
 * <mask> is CONTROL in the file but not special in HF. */
static int gemma_excused(const char *piece, int g_special) {
    (void)g_special;
    return piece && (!strcmp(piece, "<eos>") || !strcmp(piece, "<start_of_turn>") ||
                     !strcmp(piece, "<mask>"));
}

/* NAME's tokenizer files unpacked into d, its vocab.gguf beside them at path, opened as g,
 * and the tokenizers of both: tg from the GGUF's keys, tj from tokenizer.json. */
static void open_both(const char *name, tokfx_dir *d, char *path, size_t len, gguf **g,
                      tokenizer **tg, tokenizer **tj) {
    strata_err err = {0};
    CHECK(!tokfx_unpack(d, name));
    CHECK(!unpack_gguf(name, d->path, path, len));
    CHECK_MSG(!gguf_open(g, path, &err), "%s", err.msg);
    CHECK_MSG(*g && !model_text_gguf_tokenizer(tg, *g, &err), "%s", err.msg);
    CHECK_MSG(!tok_load(tj, d->path, &err), "%s", err.msg);
}

/* ct's rendering of one user message "hi" with the generation prompt (malloc'ed). */
static char *render_hi(const chat_template *ct) {
    strata_err err = {0};
    json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": \"hi\"}]", 0, NULL);
    char *out = NULL;
    CHECK_MSG(!chat_template_render(ct, msgs, NULL, 1, NULL, &out, &err), "%s", err.msg);
    json_decref(msgs);
    return out;
}

static void test_qwen35(void) {
    tokfx_dir d;
    char path[600];
    strata_err err = {0};
    gguf *g = NULL;
    tokenizer *tg = NULL, *tj = NULL;
    open_both("qwen35", &d, path, sizeof path, &g, &tg, &tj);
    if (tg && tj) {
        check_same(tg, tj, qwen_excused);
        check_fixtures("qwen35", tg, tj);
    }
    /* The template is the one the converter read, with the GGUF's eos as eos_token. */
    chat_template *ct = NULL;
    CHECK_MSG(g && !model_text_gguf_template(&ct, g, tg, &err), "%s", err.msg);
    char *want = test_file_read("tests/data/chat_templates/real/qwen35.jinja", NULL);
    CHECK(want && ct && !strcmp(chat_template_source(ct), want));
    CHECK(ct && chat_template_eos(ct) && !strcmp(chat_template_eos(ct), "<|im_end|>"));
    chat_template_free(ct);
    gguf_close(g);

    /* model_text_open on the .gguf path: tokenizer.json beside it wins; without it the
     * GGUF's keys are used. Both give the same tokenizer here. The tokenizer_config.json
     * beside it holds no template, so the GGUF's is used (docs/gguf.md, "Where from"). */
    tokenizer *t = NULL;
    ct = NULL;
    CHECK_MSG(!model_text_open(path, &t, &ct, &err), "%s", err.msg);
    CHECK(t && ct && want && !strcmp(chat_template_source(ct), want));
    chat_template_free(ct);
    ct = NULL;
    tok_free(t);
    tokfx_cleanup(&d); /* removes the tokenizer files, leaves vocab.gguf */
    CHECK(!unpack_gguf("qwen35", d.path, path, sizeof path));
    t = NULL;
    CHECK_MSG(!model_text_open(path, &t, &ct, &err), "%s", err.msg);
    CHECK(t && ct);
    if (t && tj) check_same(t, tj, qwen_excused);
    if (ct) {
        char *out = render_hi(ct);
        CHECK(out && strstr(out, "<|im_start|>user\nhi<|im_end|>"));
        free(out);
    }
    chat_template_free(ct);
    tok_free(t);
    free(want);
    unlink(path);
    rmdir(d.path);
    tok_free(tg);
    tok_free(tj);
}

/* Gemma 3's tokenizer as a gemma4 GGUF: the fixtures as HF encodes them, the template the
 * converter read, and model_text_open on the file alone. */
static void test_gemma4(void) {
    tokfx_dir d;
    char path[600];
    strata_err err = {0};
    gguf *g = NULL;
    tokenizer *tg = NULL, *tj = NULL;
    open_both("gemma3", &d, path, sizeof path, &g, &tg, &tj);
    if (tg && tj) {
        check_same(tg, tj, gemma_excused);
        check_fixtures("gemma3", tg, tj);
        int32_t *ids = NULL;
        size_t n = 0; /* spec 4.3's examples, BOS from tokenizer.ggml.add_bos_token */
        CHECK(!tok_encode(tg, "<b>bold</b>", 11, 1, &ids, &n, &err) && n == 4 && ids[0] == 2 &&
              ids[1] == 200 && ids[2] == 15640 && ids[3] == 209);
        free(ids);
        ids = NULL;
        CHECK(!tok_encode(tg, "x      y", 8, 1, &ids, &n, &err) && n == 4 && ids[2] == 142);
        free(ids);
    }
    tokfx_cleanup(&d);
    gguf_close(g);
    tokenizer *t = NULL;
    chat_template *ct = NULL;
    CHECK_MSG(!model_text_open(path, &t, &ct, &err), "%s", err.msg);
    if (ct) {
        char *out = render_hi(ct);
        CHECK(out && !strcmp(out, "<bos><start_of_turn>user\nhi<end_of_turn>\n"
                                  "<start_of_turn>model\n"));
        free(out);
    }
    chat_template_free(ct);
    tok_free(t);
    unlink(path);
    rmdir(d.path);
    tok_free(tg);
    tok_free(tj);
}

/* A tiny gemma4 vocabulary: "<x>" (no merge makes it) and "\n\n" are added tokens, "ab"
 * is not (a merge makes it), so "abc" is BPE's a + bc where an added "ab" would win. */
static const tok_ggml_str g4_toks[] = {{"<unk>", 5}, {"a", 1},   {"b", 1},           {"c", 1},
                                       {"ab", 2},    {"bc", 2},  {"<x>", 3},         {"\n", 1},
                                       {"\n\n", 2},  {"<s>", 3}, {"\xe2\x96\x81", 3}};
static const int32_t g4_types[] = {2, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1};
static const tok_ggml_str g4_merges[] = {{"b c", 3}, {"a b", 3}};

static void test_gemma4_tiny(void) {
    tok_ggml v = {.file = "tiny.gguf",
                  .model = {"gemma4", 6},
                  .tokens = g4_toks,
                  .n_tokens = 11,
                  .token_type = g4_types,
                  .n_token_type = 11,
                  .merges = g4_merges,
                  .n_merges = 2,
                  .bos_id = 9,
                  .eos_id = -1,
                  .unk_id = 0,
                  .add_bos = -1,
                  .add_eos = -1};
    strata_err err = {0};
    tokenizer *t = NULL;
    CHECK_MSG(!tok_load_ggml(&t, &v, &err), "%s", err.msg);
    if (!t) return;
    int32_t *ids = NULL;
    size_t n = 0; /* BOS by default (gemma4), <x> and \n\n split out, a + bc, unk fused */
    CHECK(!tok_encode(t, "abc<x>\n\nzz", 10, 1, &ids, &n, &err) && n == 6 && ids[0] == 9 &&
          ids[1] == 1 && ids[2] == 5 && ids[3] == 6 && ids[4] == 8 && ids[5] == 0);
    free(ids);
    char *text = NULL;
    size_t len = 0;
    static const int32_t dec[] = {1, 10, 6};
    CHECK(!tok_decode(t, dec, 3, 0, &text, &len, &err) && len == 5 && !memcmp(text, "a <x>", 5));
    free(text);
    CHECK(tok_is_special(t, 9) && tok_is_special(t, 0) && !tok_is_special(t, 6));
    tok_free(t);
}

/* A tiny byte-level vocabulary: "a", "b", "ab", and a control token. */
static const tok_ggml_str toks[] = {{"a", 1}, {"b", 1}, {"ab", 2}, {"<s>", 3}};
static const int32_t types[] = {1, 1, 1, 3};
static const tok_ggml_str merges[] = {{"a b", 3}};

static tok_ggml tiny(void) {
    return (tok_ggml){.file = "tiny.gguf",
                      .model = {"gpt2", 4},
                      .pre = {"qwen35", 6},
                      .tokens = toks,
                      .n_tokens = 4,
                      .token_type = types,
                      .n_token_type = 4,
                      .merges = merges,
                      .n_merges = 1,
                      .bos_id = 3,
                      .eos_id = -1,
                      .unk_id = -1,
                      .add_bos = -1,
                      .add_eos = -1};
}

static void refused(const tok_ggml *v, int code, const char *key) {
    strata_err err = {0};
    tokenizer *t = NULL;
    CHECK_EQ_INT(tok_load_ggml(&t, v, &err), code);
    CHECK(t == NULL);
    CHECK_MSG(strstr(err.msg, "tiny.gguf") && strstr(err.msg, key), "%s (want %s)", err.msg, key);
}

static void test_tiny_and_refusals(void) {
    tok_ggml v = tiny();
    strata_err err = {0};
    tokenizer *t = NULL;
    CHECK_MSG(!tok_load_ggml(&t, &v, &err), "%s", err.msg);
    if (t) {
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK(!tok_encode(t, "ab<s>", 5, 0, &ids, &n, &err) && n == 2 && ids[0] == 2 &&
              ids[1] == 3);
        free(ids);
        CHECK(tok_is_special(t, 3) && !tok_is_special(t, 2) && tok_bos_id(t) == 3);
        tok_free(t);
    }
    v.add_bos = 1; /* BOS added by add_special through a TemplateProcessing */
    t = NULL;
    CHECK_MSG(!tok_load_ggml(&t, &v, &err), "%s", err.msg);
    if (t) {
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK(!tok_encode(t, "ab", 2, 1, &ids, &n, &err) && n == 2 && ids[0] == 3 && ids[1] == 2);
        free(ids);
        tok_free(t);
    }

    v = tiny(), v.tokens = NULL, v.n_tokens = 0;
    refused(&v, STRATA_EFORMAT, "tokenizer.ggml.tokens");
    v = tiny(), v.n_token_type = 3;
    refused(&v, STRATA_EFORMAT, "tokenizer.ggml.token_type");
    static const tok_ggml_str bad_merge[] = {{"a c", 3}};
    v = tiny(), v.merges = bad_merge;
    refused(&v, STRATA_EFORMAT, "tokenizer.ggml.merges[0]");
    static const tok_ggml_str no_space[] = {{"ab", 2}};
    v = tiny(), v.merges = no_space;
    refused(&v, STRATA_EFORMAT, "tokenizer.ggml.merges[0]");
    v = tiny(), v.merges = NULL;
    refused(&v, STRATA_EFORMAT, "tokenizer.ggml.merges");
    v = tiny(), v.model = (tok_ggml_str){"llama", 5};
    refused(&v, STRATA_EUNSUPPORTED, "tokenizer.ggml.model");
    v = tiny(), v.unk_id = 7;
    refused(&v, STRATA_EFORMAT, "tokenizer.ggml.unknown_token_id");
    v = tiny(), v.model = (tok_ggml_str){NULL, 0};
    refused(&v, STRATA_EFORMAT, "tokenizer.ggml.model");
    v = tiny(), v.pre = (tok_ggml_str){"llama-bpe", 9};
    refused(&v, STRATA_EUNSUPPORTED, "tokenizer.ggml.pre");
    v = tiny(), v.pre = (tok_ggml_str){NULL, 0};
    refused(&v, STRATA_EFORMAT, "tokenizer.ggml.pre");
    v = tiny(), v.bos_id = 9;
    refused(&v, STRATA_EFORMAT, "tokenizer.ggml.bos_token_id");
    static const int32_t bad_types[] = {1, 1, 9, 3};
    v = tiny(), v.token_type = bad_types;
    refused(&v, STRATA_EFORMAT, "tokenizer.ggml.token_type[2]");
    v = tiny(), v.bos_id = -1, v.add_bos = 1;
    refused(&v, STRATA_EFORMAT, "tokenizer.ggml.add_bos_token");
    static const tok_ggml_str bad_utf8[] = {{"a", 1}, {"\xff", 1}, {"ab", 2}, {"<s>", 3}};
    v = tiny(), v.tokens = bad_utf8;
    refused(&v, STRATA_EFORMAT, "tokenizer.ggml.tokens[1] is not valid UTF-8");
}

/* tests/data/gguf/tok_qwen35.gguf (tools/gen_gguf_fixtures.py, written by the gguf
 * package's GGUFWriter): a small byte-level vocabulary through model_text_open, alone in
 * its directory, so tokenizer and template both come from its keys. */
static void test_small_file(void) {
    char dir[] = "/tmp/strata-tok-ggml.XXXXXX", path[600];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/tiny.gguf", dir);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "cp tests/data/gguf/tok_qwen35.gguf '%s'", path);
    CHECK(system(cmd) == 0);
    strata_err err = {0};
    tokenizer *t = NULL;
    chat_template *ct = NULL;
    CHECK_MSG(!model_text_open(path, &t, &ct, &err), "%s", err.msg);
    if (t) {
        int32_t *ids = NULL;
        size_t n = 0;
        /* hello, " world", <|im_end|> (CONTROL), ab; [PAD0] (UNUSED) is not in the vocab */
        CHECK(!tok_encode(t, "hello world<|im_end|>ab", 23, 1, &ids, &n, &err) && n == 4 &&
              ids[0] == 259 && ids[1] == 264 && ids[2] == 268 && ids[3] == 265);
        free(ids);
        CHECK(tok_is_special(t, 268) && !tok_is_special(t, 269) &&
              tok_piece_to_id(t, "[PAD0]") < 0);
        CHECK_EQ_INT(tok_bos_id(t), 266);
        CHECK_EQ_INT(tok_eos_id(t), 268);
    }
    CHECK(ct && chat_template_eos(ct) && !strcmp(chat_template_eos(ct), "<|im_end|>"));
    chat_template_free(ct);
    tok_free(t);
    /* without a template argument nothing but the tokenizer is read */
    t = NULL;
    CHECK_MSG(!model_text_open(path, &t, NULL, &err), "%s", err.msg);
    tok_free(t);
    unlink(path);
    rmdir(dir);
}

/* A GGUF without tokenizer keys: no tokenizer, not an error of the file. */
static void test_no_tokenizer(void) {
    strata_err err = {0};
    gguf *g = NULL;
    tokenizer *t = NULL;
    CHECK_MSG(!gguf_open(&g, "tests/data/gguf/tiny.gguf", &err), "%s", err.msg);
    CHECK_EQ_INT(model_text_gguf_tokenizer(&t, g, &err), STRATA_ENOTFOUND);
    CHECK(t == NULL && strstr(err.msg, "tokenizer.ggml.model"));
    gguf_close(g);
}

int main(void) {
    quick = tokfx_walk_quick();
    RUN(test_tiny_and_refusals);
    RUN(test_no_tokenizer);
    RUN(test_small_file);
    RUN(test_qwen35);
    RUN(test_gemma4_tiny);
    RUN(test_gemma4);
    TEST_DONE();
}
