/* test_detok.c - engine/text/detok.c: streaming never splits a character, the chunks
 * concatenate to tok_decode (itself checked against HF by test_tokenizer), stop strings
 * spanning several tokens are cut and never emitted, and the reasoning split.
 * Runs on the real Qwen3 / Gemma 3 tokenizers (BYTES / PIECES modes) and on a small
 * synthetic tokenizer whose decoder forces the WINDOW mode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/detok.h"
#include "engine/base/utf8.h"
#include "tests/data/tokenizers/tok_fixture.h"
#include "tests/test.h"
#include "tests/tokfx_walk.h"
#include "tests/test_rng.h"

static int quick;
static int n_stop_checks; /* sequences on which a multi-token stop string was tried */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(uint32_t n) { return test_rng_below(&rng_state, n); }

typedef struct acc {
    char *text, *reason;
    size_t tl, rl;
    int bad_utf8, stopped;
} acc;

static void acc_add(acc *a, const detok_out *o) {
    if (!unicode_utf8_valid(o->text, o->text_len) ||
        !unicode_utf8_valid(o->reasoning, o->reasoning_len))
        a->bad_utf8++;
    a->text = realloc(a->text, a->tl + o->text_len + 1);
    memcpy(a->text + a->tl, o->text, o->text_len);
    a->tl += o->text_len;
    a->text[a->tl] = 0;
    a->reason = realloc(a->reason, a->rl + o->reasoning_len + 1);
    memcpy(a->reason + a->rl, o->reasoning, o->reasoning_len);
    a->rl += o->reasoning_len;
    a->reason[a->rl] = 0;
    a->stopped = o->stopped;
}

/* Streams ids through a detok made with opts; returns 0 when every call succeeded. */
static int stream(const tokenizer *t, const detok_opts *o, const int32_t *ids, size_t n, acc *a) {
    memset(a, 0, sizeof *a);
    detok *d;
    strata_err err;
    if (detok_create(&d, t, o, &err)) return -1;
    detok_out out;
    int r = 0;
    for (size_t i = 0; i < n && !r; i++) {
        r = detok_push(d, ids[i], &out, &err);
        if (!r) acc_add(a, &out);
    }
    if (!r && !(r = detok_finish(d, &out, &err))) acc_add(a, &out);
    detok_free(d);
    return r;
}

static void acc_free(acc *a) {
    free(a->text);
    free(a->reason);
}

/* The properties on one id sequence: plain streaming equals decode; a stop string cut
 * from the decoded text of 1..4 consecutive tokens ends the stream right before it. */
static int check_sequence(const tokenizer *t, const int32_t *ids, size_t n, int skip) {
    char *full;
    size_t flen;
    strata_err err;
    int fails = 0;
    if (tok_decode(t, ids, n, skip, &full, &flen, &err)) return 1;
    detok_opts o = {.skip_special = skip};
    acc a;
    if (stream(t, &o, ids, n, &a) || a.bad_utf8 || a.tl != flen || memcmp(a.text, full, flen) ||
        a.rl) {
        if (fails++ < 1)
            fprintf(stderr, "  stream != decode (skip %d, %zu ids): want %.*s\n  got  %.*s\n", skip,
                    n, (int)flen, full, (int)a.tl, a.text ? a.text : "");
    }
    acc_free(&a);
    if (n >= 2) {
        size_t j = rnd((uint32_t)n), k = 1 + rnd(4);
        if (j + k > n) k = n - j;
        char *piece;
        size_t plen;
        if (!tok_decode(t, ids + j, k, skip, &piece, &plen, &err)) {
            const char *hit = plen ? memmem(full, flen, piece, plen) : NULL;
            if (hit && unicode_utf8_valid(piece, plen) && !memchr(piece, 0, plen)) { /* C strings */
                const char *stops[2] = {piece, "\x01\x02never"};
                o.n_stop = 2;
                o.stop = stops;
                size_t want = (size_t)(hit - full);
                n_stop_checks++;
                if (stream(t, &o, ids, n, &a) || a.bad_utf8 || !a.stopped || a.tl != want ||
                    memcmp(a.text, full, want)) {
                    if (fails++ < 2)
                        fprintf(stderr, "  stop string %.*s: want %.*s| got %.*s| stopped %d\n",
                                (int)plen, piece, (int)want, full, (int)a.tl, a.text ? a.text : "",
                                a.stopped);
                }
                acc_free(&a);
                /* A stop string that matches partially and then fails is emitted in full. */
                char *miss = malloc(plen + 3);
                memcpy(miss, piece, plen);
                memcpy(miss + plen, "\x01\x01", 3);
                stops[0] = miss;
                if (stream(t, &o, ids, n, &a) || a.stopped || a.tl != flen ||
                    memcmp(a.text, full, flen)) {
                    if (fails++ < 2) fprintf(stderr, "  partial stop match changed the output\n");
                }
                acc_free(&a);
                free(miss);
            }
            free(piece);
        }
    }
    free(full);
    return fails;
}

static void check_tokenizer(const char *name) {
    tokfx_dir dir;
    tokenizer *t = NULL;
    strata_err err;
    CHECK(!tokfx_unpack(&dir, name));
    CHECK_MSG(!tok_load(&t, dir.path, &err), "%s", err.msg);
    if (!t) return;
    tokfx_walk w = tokfx_walk_open(name, quick);
    tokfx_case c;
    int n = 0, bad = 0;
    n_stop_checks = 0;
    while (tokfx_walk_next(&w, &c) > 0) {
        const int32_t *ids = c.kind == 'E' ? c.ids_sp : c.ids;
        size_t k = c.kind == 'E' ? c.n_ids_sp : c.n_ids;
        for (int skip = 0; skip < 2; skip++) bad += check_sequence(t, ids, k, skip) != 0;
        n++;
    }
    tokfx_walk_close(&w);
    /* Random ids, biased towards byte tokens and specials (split / invalid characters). */
    int vs = tok_vocab_size(t);
    int32_t ids[64];
    for (int s = 0; s < (quick ? 100 : 1000); s++) {
        size_t k = 1 + rnd(63);
        for (size_t i = 0; i < k; i++) {
            uint32_t r = rnd(10);
            ids[i] = r < 4 ? (int32_t)rnd(512) : (int32_t)rnd((uint32_t)vs);
            if (!tok_id_to_piece(t, ids[i])) ids[i] = 100;
        }
        for (int skip = 0; skip < 2; skip++) bad += check_sequence(t, ids, k, skip) != 0;
    }
    fprintf(stderr, "  %s: %d fixture sequences + random, %d stop-string runs, %d failed\n", name,
            n, n_stop_checks, bad);
    CHECK_EQ_INT(bad, 0);
    CHECK(n_stop_checks > (quick ? 100 : 1000));

    /* Reasoning split; on Gemma the tags are several ordinary tokens. */
    static const char text[] = "<think>\nI think 日本.\n</think>\n\nAnswer 42. STOP here";
    int32_t *enc;
    size_t ne;
    CHECK(!tok_encode(t, text, sizeof text - 1, 0, &enc, &ne, &err));
    detok_opts o = {.split_reasoning = 1};
    acc a;
    CHECK(!stream(t, &o, enc, ne, &a));
    CHECK_MSG(a.reason && !strcmp(a.reason, "\nI think 日本.\n"), "reasoning %s", a.reason);
    CHECK_MSG(a.text && !strcmp(a.text, "\n\nAnswer 42. STOP here"), "text %s", a.text);
    acc_free(&a);
    free(enc);
    /* The prompt opened <think>; a stop string in the answer ends everything. */
    static const char text2[] = "I think 日本.\n</think>\n\nAnswer 42. STOP here";
    CHECK(!tok_encode(t, text2, sizeof text2 - 1, 0, &enc, &ne, &err));
    const char *stop[] = {"STOP"};
    o.n_stop = 1;
    o.stop = stop;
    o.start_in_reasoning = 1;
    CHECK(!stream(t, &o, enc, ne, &a));
    CHECK(a.stopped && a.text && !strcmp(a.text, "\n\nAnswer 42. "));
    CHECK(a.reason && !strcmp(a.reason, "I think 日本.\n"));
    acc_free(&a);
    free(enc);

    /* Errors: bad id, bad stop strings. */
    detok *d;
    detok_out out;
    CHECK(!detok_create(&d, t, NULL, &err));
    CHECK_EQ_INT(detok_push(d, vs + 5, &out, &err), STRATA_ERANGE);
    CHECK_EQ_INT(detok_push(d, -1, &out, &err), STRATA_ERANGE);
    detok_free(d);
    const char *empty[] = {""}, *invalid[] = {"\xff"};
    detok_opts bo = {.n_stop = 1, .stop = empty};
    CHECK_EQ_INT(detok_create(&d, t, &bo, &err), STRATA_EINVALID);
    bo.stop = invalid;
    CHECK_EQ_INT(detok_create(&d, t, &bo, &err), STRATA_EINVALID);
    tok_free(t);
    tokfx_cleanup(&dir);
}

static void test_qwen3(void) { check_tokenizer("qwen3"); }
static void test_gemma3(void) { check_tokenizer("gemma3"); }

/* A Llama-style decoder (Replace, ByteFallback, Fuse, Strip) puts Strip after Fuse, so
 * the detok must fall back to its window mode; the same properties must hold. */
static void test_window_mode(void) {
    static const char json[] =
        "{\"added_tokens\":[{\"id\":0,\"content\":\"<s>\",\"special\":true,\"normalized\":false}],"
        "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":"
        "\"\u2581\"},"
        "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\u2581\"}]},"
        "\"pre_tokenizer\":null,"
        "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{"
        "\"String\":\"\u2581\"},"
        "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
        "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
        "\"post_processor\":null,"
        "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"<s>\":0,\"<0xE6>\":1,\"<"
        "0x97>\":2,"
        "\"<0xA5>\":3,\"<0xFF>\":4,\"\u2581\":5,\"a\":6,\"b\":7,\"\u2581a\":8,\"ab\":9},"
        "\"merges\":[\"\u2581 a\",\"a b\"]}}";
    tokenizer *t;
    strata_err err;
    CHECK_MSG(!tok_load_json(&t, json, sizeof json - 1, NULL, 0, &err), "%s", err.msg);
    int bad = 0;
    int32_t ids[24];
    for (int s = 0; s < 400; s++) {
        size_t k = 1 + rnd(23);
        for (size_t i = 0; i < k; i++) ids[i] = (int32_t)rnd(10);
        for (int skip = 0; skip < 2; skip++) bad += check_sequence(t, ids, k, skip) != 0;
    }
    CHECK_EQ_INT(bad, 0);
    tok_free(t);
}

int main(void) {
    quick = tokfx_walk_quick();
    RUN(test_qwen3);
    RUN(test_gemma3);
    RUN(test_window_mode);
    TEST_DONE();
}
