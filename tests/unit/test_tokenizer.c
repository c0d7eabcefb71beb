/* test_tokenizer.c - engine/text/tokenizer.c against HF tokenizers on real tokenizer files.
 *
 * Fixtures (tests/data/tokenizers/NAME/fixtures.tsv.zst, made by
 * tools/tok_conformance/gen.py with the Rust library) hold, for every corpus string, the
 * ids with and without special tokens and the decode with and without skipping, plus
 * decodes of random id sequences. Every case must match byte for byte.
 * STRATA_TEST_QUICK=1 checks every 10th case (for sanitizer builds). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include "engine/text/tokenizer.h"
#include "engine/unicode/nfc.h"
#include "tests/test.h"
#include "tests/tokfx_walk.h"
#include "tests/data/tokenizers/tok_fixture.h"

static int quick;

static int ids_equal(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (!na || !memcmp(a, b, na * sizeof *a));
}

static void print_ids(const char *what, const int32_t *v, size_t n) {
    fprintf(stderr, "    %s [", what);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, i ? ",%d" : "%d", v[i]);
    fprintf(stderr, "%s] (%zu)\n", n > 40 ? ",..." : "", n);
}

/* Runs one fixture file: every case must match; at least min_cases encode cases. */
static void check_fixtures(const char *name, const tokenizer *t, int min_cases) {
    tokfx_walk w = tokfx_walk_open(name, quick);
    tokfx_case c;
    int n_enc = 0, n_dec = 0, bad = 0;
    strata_err err = {0};
    while (tokfx_walk_next(&w, &c) > 0) {
        char *text = NULL;
        size_t len = 0;
        int ok = 1;
        if (c.kind == 'E') {
            n_enc++;
            tokfx_encoded e = tokfx_encode(t, &c, &err);
            ok = e.rc == 0;
            if (ok && !tokfx_encoded_match(&e, &c)) {
                if (bad < 8) {
                    fprintf(stderr, "  %s: encode mismatch for %.*s\n", name,
                            (int)(c.text_len > 80 ? 80 : c.text_len), c.text);
                    print_ids("want", c.ids, c.n_ids);
                    print_ids("got ", e.plain, e.n_plain);
                    print_ids("want+sp", c.ids_sp, c.n_ids_sp);
                    print_ids("got+sp ", e.sp, e.n_sp);
                }
                ok = 0;
            }
            tokfx_encoded_free(&e);
        } else n_dec++;
        for (int skip = 0; skip < 2 && ok; skip++) {
            const int32_t *ids = c.kind == 'E' ? c.ids_sp : c.ids;
            size_t n = c.kind == 'E' ? c.n_ids_sp : c.n_ids;
            const char *want = skip ? c.dec_skip : c.dec;
            size_t wlen = skip ? c.dec_skip_len : c.dec_len;
            if (tok_decode(t, ids, n, skip, &text, &len, &err)) {
                fprintf(stderr, "  %s: decode error: %s\n", name, err.msg);
                ok = 0;
            } else if (len != wlen || memcmp(text, want, len)) {
                if (bad < 8)
                    fprintf(stderr,
                            "  %s: decode(skip=%d) mismatch:\n    want %.*s\n    got  %.*s\n", name,
                            skip, (int)wlen, want, (int)len, text);
                ok = 0;
            }
            free(text);
            text = NULL;
        }
        bad += !ok;
    }
    tokfx_walk_close(&w);
    fprintf(stderr, "  %s: %d encode + %d decode cases, %d mismatched\n", name, n_enc, n_dec, bad);
    CHECK_MSG(n_enc >= (quick ? min_cases / 10 : min_cases), "%s: only %d encode cases", name,
              n_enc);
    CHECK_EQ_INT(bad, 0);
}

/* ---- concurrency: tokenizer.h promises any thread may encode at once --------------- */

#define MT_TEXTS 300
typedef struct mt_job {
    const tokenizer *t;
    char **texts;
    int32_t **want;
    size_t *n_want;
    int bad;
} mt_job;

static void *mt_worker(void *arg) {
    mt_job *j = arg;
    strata_err err;
    for (int rep = 0; rep < 3; rep++)
        for (int i = 0; i < MT_TEXTS; i++) {
            int32_t *ids;
            size_t n;
            if (tok_encode(j->t, j->texts[i], strlen(j->texts[i]), 0, &ids, &n, &err) ||
                !ids_equal(ids, n, j->want[i], j->n_want[i]))
                j->bad++;
            else free(ids);
        }
    return NULL;
}

static void check_threads(const tokenizer *t) {
    static const char *parts[] = {"Hello",     " world",  " naïve", " 日本語", "😀",
                                  " 123",      "'s",      "\n",     "  ",      "<|im_end|>",
                                  "e\xCC\x81", " Straße", " кошка"};
    char *texts[MT_TEXTS];
    int32_t *want[MT_TEXTS];
    size_t n_want[MT_TEXTS];
    unsigned seed = 7;
    strata_err err;
    for (int i = 0; i < MT_TEXTS; i++) {
        texts[i] = calloc(1, 512);
        for (int k = 0; k < 1 + i % 20; k++) {
            seed = seed * 1103515245u + 12345u;
            strcat(texts[i], parts[(seed >> 16) % (sizeof parts / sizeof *parts)]);
        }
        CHECK(!tok_encode(t, texts[i], strlen(texts[i]), 0, &want[i], &n_want[i], &err));
    }
    mt_job jobs[4];
    pthread_t th[4];
    for (int k = 0; k < 4; k++) {
        jobs[k] = (mt_job){t, texts, want, n_want, 0};
        pthread_create(&th[k], NULL, mt_worker, &jobs[k]);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        CHECK_EQ_INT(jobs[k].bad, 0);
    }
    for (int i = 0; i < MT_TEXTS; i++) {
        free(texts[i]);
        free(want[i]);
    }
}

static tokenizer *load(const char *name, tokfx_dir *dir) {
    strata_err err = {0};
    tokenizer *t = NULL;
    CHECK_MSG(!tokfx_unpack(dir, name), "cannot unpack %s", name);
    int r = tok_load(&t, dir->path, &err);
    CHECK_MSG(r == 0, "%s: %s", name, err.msg);
    return t;
}

static void test_qwen3(void) {
    tokfx_dir dir;
    tokenizer *t = load("qwen3", &dir);
    if (!t) return;
    CHECK_EQ_INT(tok_vocab_size(t), 151669);
    CHECK_EQ_INT(tok_eos_id(t), 151645);
    CHECK_EQ_INT(tok_bos_id(t), -1);
    CHECK(tok_bos_token(t) == NULL);
    CHECK(!strcmp(tok_eos_token(t), "<|im_end|>"));
    CHECK_EQ_INT(tok_piece_to_id(t, "<think>"), 151667);
    CHECK_EQ_INT(tok_piece_to_id(t, "Hello"), 9707);
    CHECK_EQ_INT(tok_piece_to_id(t, "no such piece"), -1);
    CHECK(tok_is_special(t, 151645));
    CHECK(!tok_is_special(t, 151667)); /* <think> is added but not special */
    CHECK(!strcmp(tok_id_to_piece(t, 1879), "\xC4\xA0world")); /* "Ġworld" */
    CHECK(tok_id_to_piece(t, 999999) == NULL);
    /* spec 4.1 examples */
    static const int32_t hello[] = {9707, 1879, 0};
    int32_t *ids;
    size_t n;
    strata_err err;
    CHECK(!tok_encode(t, "Hello world!", 12, 1, &ids, &n, &err) && ids_equal(ids, n, hello, 3));
    free(ids);
    check_fixtures("qwen3", t, 3000);
    check_threads(t);
    tok_free(t);
    tokfx_cleanup(&dir);
}

static void test_gemma3(void) {
    tokfx_dir dir;
    tokenizer *t = load("gemma3", &dir);
    if (!t) return;
    CHECK_EQ_INT(tok_vocab_size(t), 262145);
    CHECK_EQ_INT(tok_bos_id(t), 2);
    CHECK_EQ_INT(tok_eos_id(t), 106);
    CHECK(tok_is_special(t, 262144));
    CHECK(!tok_is_special(t, 107)); /* "\n" is added, not special */
    static const int32_t six[] = {2, 236781, 142, 236762};
    int32_t *ids;
    size_t n;
    strata_err err;
    CHECK(!tok_encode(t, "x      y", 8, 1, &ids, &n, &err) && ids_equal(ids, n, six, 4));
    free(ids);
    check_fixtures("gemma3", t, 3000);
    tok_free(t);
    tokfx_cleanup(&dir);
}

static void test_qwen35(void) {
    tokfx_dir dir;
    tokenizer *t = load("qwen35", &dir);
    if (!t) return;
    CHECK_EQ_INT(tok_vocab_size(t), 248077);
    CHECK_EQ_INT(tok_eos_id(t), 248046);
    CHECK_EQ_INT(tok_piece_to_id(t, "<think>"), 248068);
    check_fixtures("qwen35", t, 3000);
    tok_free(t);
    tokfx_cleanup(&dir);
}

/* Trained here by gen.py to cover what the real files do not: Prepend/Replace
 * normalizers + byte fallback + Llama decoder with Strip; Metaspace pre-tokenizer and
 * decoder with unk; Split behaviours + ByteLevel regex/prefix space + legacy merges +
 * ignore_merges; added tokens with lstrip/rstrip/single_word/normalized. */
static void test_synthetic(void) {
    static const char *names[] = {"synth_sp", "synth_meta", "synth_split"};
    for (int i = 0; i < 3; i++) {
        tokfx_dir dir;
        tokenizer *t = load(names[i], &dir);
        if (!t) continue;
        check_fixtures(names[i], t, 2000);
        tok_free(t);
        tokfx_cleanup(&dir);
    }
}

/* A directory with only tokenizer.model goes through sentencepiece (engine/text/spm.h);
 * add_special prepends BOS as transformers' sentencepiece tokenizers do by default. */
static void test_sentencepiece(void) {
    tokfx_dir dir;
    tokenizer *t = load("spm_tiny", &dir);
    if (!t) return;
    CHECK_EQ_INT(tok_bos_id(t), 1);
    CHECK_EQ_INT(tok_eos_id(t), 2);
    CHECK_EQ_INT(tok_vocab_size(t), 1000);
    CHECK(tok_is_special(t, 1) && !tok_is_special(t, 100));
    CHECK(tok_id_to_piece(t, 1) && !strcmp(tok_id_to_piece(t, 1), "<s>"));
    CHECK_EQ_INT(tok_piece_to_id(t, "</s>"), 2);
    check_fixtures("spm_tiny", t, 500);
    tok_free(t);
    tokfx_cleanup(&dir);
}

/* engine/unicode/nfc.c against HF's NFC normalizer (Unicode 9.0 data) on every code
 * point NFC can touch plus random mixes; the quick check must never claim a change-free
 * string that NFC would change. */
static void test_nfc(void) {
    FILE *f = popen("zstd -dc tests/data/tokenizers/nfc.tsv.zst", "r");
    CHECK(f != NULL);
    if (!f) return;
    char *line = NULL, *in = NULL, *want = NULL, *out = NULL;
    size_t cap = 0, cin = 0, cwant = 0, cout = 0, nin, nwant, nout;
    int n = 0, bad = 0;
    ssize_t k;
    while ((k = getline(&line, &cap, f)) > 0) {
        char *tab = strchr(line, '\t');
        if (!tab) continue;
        if (line[k - 1] == '\n') line[--k] = 0;
        tokfx_hex(&in, &cin, &nin, line, (size_t)(tab - line));
        tokfx_hex(&want, &cwant, &nwant, tab + 1, strlen(tab + 1));
        n++;
        int quick_ok = !unicode_nfc_is_quick(in, nin) || (nin == nwant && !memcmp(in, want, nin));
        if (unicode_nfc(&out, &nout, &cout, in, nin) || nout != nwant || memcmp(out, want, nout) ||
            !quick_ok) {
            if (bad++ < 5) fprintf(stderr, "  nfc mismatch for %s (quick ok %d)\n", line, quick_ok);
        }
    }
    pclose(f);
    free(line);
    free(in);
    free(want);
    free(out);
    fprintf(stderr, "  nfc: %d cases, %d mismatched\n", n, bad);
    CHECK(n > 50000);
    CHECK_EQ_INT(bad, 0);
}

static int load_str(const char *json, strata_err *err) {
    tokenizer *t = NULL;
    int r = tok_load_json(&t, json, strlen(json), NULL, 0, err);
    tok_free(t);
    return r;
}

/* Loading fails cleanly (code + message, no leak under ASan) on bad input. */
static void test_errors(void) {
    strata_err err = {0};
    const char *model =
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}";
    char buf[1024];
    snprintf(buf, sizeof buf, "{%s}", model);
    CHECK_MSG(load_str(buf, &err) == 0, "%s", err.msg);

    snprintf(buf, sizeof buf, "{\"normalizer\":{\"type\":\"Lowercase\"},%s}", model);
    CHECK_EQ_INT(load_str(buf, &err), STRATA_EUNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "Lowercase") && strstr(err.msg, "normalizer"), "%s", err.msg);
    snprintf(buf, sizeof buf,
             "{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":"
             "[{\"type\":\"Whitespace\"}]},%s}",
             model);
    CHECK_EQ_INT(load_str(buf, &err), STRATA_EUNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "Whitespace"), "%s", err.msg);
    snprintf(buf, sizeof buf, "{\"decoder\":{\"type\":\"WordPiece\"},%s}", model);
    CHECK_EQ_INT(load_str(buf, &err), STRATA_EUNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "WordPiece"), "%s", err.msg);
    snprintf(buf, sizeof buf, "{\"post_processor\":{\"type\":\"RobertaProcessing\"},%s}", model);
    CHECK_EQ_INT(load_str(buf, &err), STRATA_EUNSUPPORTED);
    CHECK_EQ_INT(load_str("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", &err),
                 STRATA_EUNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "Unigram"), "%s", err.msg);
    CHECK_EQ_INT(load_str("{\"model\":{\"type\":\"BPE\",\"dropout\":0.1,\"vocab\":{}}}", &err),
                 STRATA_EUNSUPPORTED);

    CHECK_EQ_INT(load_str("{\"model\": {", &err), STRATA_EFORMAT);
    CHECK_MSG(strstr(err.msg, "tokenizer.json"), "%s", err.msg);
    CHECK_EQ_INT(load_str("[1,2]", &err), STRATA_EFORMAT);
    CHECK_EQ_INT(load_str("{}", &err), STRATA_EFORMAT);
    CHECK_EQ_INT(
        load_str("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b\"]}}", &err),
        STRATA_EFORMAT); /* merge part missing from the vocab */
    CHECK_MSG(strstr(err.msg, "merge 1"), "%s", err.msg);
    CHECK_EQ_INT(load_str("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-3}}}", &err),
                 STRATA_EFORMAT);
    CHECK_EQ_INT(load_str("{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},"
                          "\"behavior\":\"Isolated\"},\"model\":{\"type\":\"BPE\",\"vocab\":{}}}",
                          &err),
                 STRATA_EFORMAT); /* bad regex */

    tokenizer *t = NULL;
    CHECK_EQ_INT(tok_load(&t, "/nonexistent/strata-model", &err), STRATA_ENOTFOUND);
    CHECK(t == NULL);
    CHECK_MSG(strstr(err.msg, "/nonexistent/strata-model"), "%s", err.msg);

    /* Decoding an unknown id is an error naming it; encoding invalid UTF-8 is not. */
    snprintf(buf, sizeof buf, "{%s}", model);
    CHECK(!tok_load_json(&t, buf, strlen(buf), "{\"bos_token\": {\"content\": \"ab\"}}", 32, &err));
    if (!t) return;
    CHECK_EQ_INT(tok_bos_id(t), 2);
    int32_t bad[] = {1, 7};
    char *text;
    size_t len;
    CHECK_EQ_INT(tok_decode(t, bad, 2, 0, &text, &len, &err), STRATA_ERANGE);
    CHECK_MSG(strstr(err.msg, "7"), "%s", err.msg);
    int32_t *ids;
    size_t n;
    CHECK(!tok_encode(t, "ab\xff", 3, 0, &ids, &n, &err));
    free(ids);
    tok_free(t);
}

int main(void) {
    quick = tokfx_walk_quick();
    RUN(test_qwen3);
    RUN(test_gemma3);
    RUN(test_qwen35);
    RUN(test_synthetic);
    RUN(test_sentencepiece);
    RUN(test_nfc);
    RUN(test_errors);
    TEST_DONE();
}
