/* test_constrain.c - engine/constrain: the JSON recognizer against jansson, the token mask
 * against a token-by-token brute force, and a decoder with arbitrary preferences that must
 * always end in an object jansson reads.
 *
 * The recognizer: every prefix of a random valid object document is accepted byte by byte
 * and the whole is complete; on random mutations of them, what jansson accepts (within the
 * grammar's documented limits) is accepted, what the recognizer accepts jansson accepts, and
 * wherever the recognizer stops, what it had accepted still completes into a document
 * jansson reads (so it never accepts a byte that leads nowhere). The vocabulary: every
 * token's bytes are what tok_decode gives for it (byte-level tokenizers) or adds after an
 * anchor (metaspace / sentencepiece / byte fallback). Tokenizers: the HTTP fixture's (512
 * ids), the demo model's (4096), and the vendored real Qwen3.5 (248k) and synthetic
 * metaspace / sentencepiece ones (tests/data/tokenizers). Allocation failures in build and
 * create come back as STRATA_ENOMEM without leaks; mask and accept allocate nothing. */
#define ALLOC_HOOK_WITH_ASAN
#include "tests/alloc_hook.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/utf8.h"
#include "engine/constrain/constrain.h"
#include "engine/constrain/constrain_internal.h"
#include "engine/text/tokenizer.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* only the unpacking is used here */
#include "tests/data/tokenizers/tok_fixture.h"
#pragma GCC diagnostic pop
#include "tests/test.h"
#include "tests/test_rng.h"

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static uint32_t rnd(uint32_t n) { return test_rng_below(&rng_state, n); }

/* ---- documents ------------------------------------------------------------------------ */

typedef struct doc {
    char p[1 << 16];
    size_t n;
} doc;

static void put(doc *d, const char *s, size_t n) {
    if (d->n + n > sizeof d->p) n = sizeof d->p - d->n;
    memcpy(d->p + d->n, s, n);
    d->n += n;
}
static void puts_(doc *d, const char *s) { put(d, s, strlen(s)); }
static void putc_(doc *d, char c) { put(d, &c, 1); }

static void gen_ws(doc *d) {
    int n = rnd(4) ? (int)rnd(3) : (int)rnd(JSON_PDA_MAX_WS + 1);
    for (int i = 0; i < n; i++) putc_(d, " \t\n\r"[rnd(4)]);
}

static void gen_hex4(doc *d, unsigned v) {
    char h[5];
    snprintf(h, sizeof h, rnd(2) ? "%04X" : "%04x", v);
    puts_(d, h);
}

static void gen_string(doc *d) {
    putc_(d, '"');
    int n = (int)rnd(rnd(8) ? 8 : 40);
    for (int i = 0; i < n; i++) {
        char u[4];
        switch (rnd(8)) {
        case 0: {
            static const char *esc[] = {"\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t"};
            puts_(d, esc[rnd(8)]);
            break;
        }
        case 1: {
            unsigned v = 1 + rnd(0xFFFE);
            if (v >= 0xD800 && v < 0xE000) v -= 0x800;
            puts_(d, "\\u");
            gen_hex4(d, v);
            break;
        }
        case 2:
            puts_(d, "\\u");
            gen_hex4(d, 0xD800 + rnd(0x400));
            puts_(d, "\\u");
            gen_hex4(d, 0xDC00 + rnd(0x400));
            break;
        case 3: {
            static const uint32_t lo[] = {0x80, 0x800, 0xE000, 0x10000};
            static const uint32_t hi[] = {0x7FF, 0xD7FF, 0xFFFF, 0x10FFFF};
            int k = (int)rnd(4);
            put(d, u, (size_t)unicode_utf8_encode(lo[k] + rnd(hi[k] - lo[k] + 1), u));
            break;
        }
        default: {
            char c = (char)(0x20 + rnd(0x60));
            if (c == '"' || c == '\\') c = 'q';
            putc_(d, c);
        }
        }
    }
    putc_(d, '"');
}

static void gen_digits(doc *d, int n, int first_nonzero) {
    for (int i = 0; i < n; i++) putc_(d, (char)((i == 0 && first_nonzero ? '1' : '0') + rnd(9)));
}

static void gen_number(doc *d) {
    if (rnd(2)) putc_(d, '-');
    if (rnd(4) == 0) putc_(d, '0');
    else gen_digits(d, 1 + (int)rnd(rnd(4) ? 4 : JSON_PDA_MAX_INT_DIGITS), 1);
    if (rnd(3) == 0) {
        putc_(d, '.');
        gen_digits(d, 1 + (int)rnd(rnd(4) ? 4 : 30), 0);
    }
    if (rnd(3) == 0) {
        putc_(d, "eE"[rnd(2)]);
        if (rnd(2)) putc_(d, "+-"[rnd(2)]);
        gen_digits(d, 1 + (int)rnd(JSON_PDA_MAX_EXP_DIGITS), 0);
    }
}

static void gen_value(doc *d, int depth, int max_depth);

static void gen_container(doc *d, int object, int depth, int max_depth) {
    putc_(d, object ? '{' : '[');
    int n = depth >= max_depth ? 0 : (int)rnd(5);
    for (int i = 0; i < n; i++) {
        gen_ws(d);
        if (i) putc_(d, ','), gen_ws(d);
        if (object) {
            gen_string(d);
            gen_ws(d);
            putc_(d, ':');
            gen_ws(d);
        }
        gen_value(d, depth + 1, max_depth);
    }
    gen_ws(d);
    putc_(d, object ? '}' : ']');
}

static void gen_value(doc *d, int depth, int max_depth) {
    switch (rnd(depth < max_depth ? 9 : 6)) {
    case 0:
    case 1: gen_string(d); break;
    case 2:
    case 3: gen_number(d); break;
    case 4: puts_(d, rnd(2) ? "true" : "false"); break;
    case 5: puts_(d, "null"); break;
    default: gen_container(d, rnd(2), depth, max_depth);
    }
}

/* A random object document within the grammar's limits. */
static void gen_doc(doc *d) {
    d->n = 0;
    gen_ws(d);
    gen_container(d, 1, 1, rnd(8) ? 1 + (int)rnd(5) : JSON_PDA_MAX_DEPTH);
}

/* 1 when jansson reads s[0..n) as an object. */
static int jansson_object(const char *s, size_t n) {
    json_error_t e;
    json_t *j = json_loadb(s, n, JSON_DECODE_ANY, &e);
    int ok = j && json_is_object(j);
    json_decref(j);
    return ok;
}

/* For a document jansson reads: 1 when it also keeps the limits the grammar adds to RFC
 * 8259 (object at the top, nothing after it, nesting, whitespace runs, number digits). */
static int within_limits(const char *s, size_t n) {
    size_t i = 0;
    int depth = 0, ws = 0, seen = 0;
    while (i < n) {
        uint8_t c = (uint8_t)s[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            if (++ws > JSON_PDA_MAX_WS || (seen && !depth)) return 0;
            i++;
            continue;
        }
        ws = 0;
        if (!seen && c != '{') return 0;
        seen = 1;
        if (c == '"') {
            for (i++; s[i] != '"'; i++) i += s[i] == '\\';
            i++;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            int dig = 0, exp = 0, part = 0; /* 0 integer, 1 fraction, 2 exponent */
            for (i += c == '-'; i < n && strchr("0123456789.eE+-", s[i]); i++) {
                if (s[i] == 'e' || s[i] == 'E') part = 2;
                else if (s[i] == '.') part = 1;
                else if (s[i] >= '0' && s[i] <= '9') dig += part == 0, exp += part == 2;
            }
            if (dig > JSON_PDA_MAX_INT_DIGITS || exp > JSON_PDA_MAX_EXP_DIGITS) return 0;
        } else {
            depth += c == '{' || c == '[';
            depth -= c == '}' || c == ']';
            if (depth > JSON_PDA_MAX_DEPTH) return 0;
            i++;
        }
    }
    return 1;
}

/* The bytes the greedy completion tries, in order: the quote (which ends a string, or
 * starts an empty one that the next quote ends) and the closers first, then what each
 * open lexical position needs (escape and UTF-8 bytes, literal letters). */
static const char completion_bytes[] = "\"}]:01\\uDrealsn{\x80\x90\xA0";

/* Appends to d a way to finish the document from s (every closer it needs). 0 when the
 * state completes, -1 when it gets stuck (a state no document continues). */
static int complete(json_pda s, doc *d) {
    for (int step = 0; step < 4096; step++) {
        if (s.mode == JSON_PDA_DONE) return 0;
        const char *b = completion_bytes;
        for (; *b; b++) {
            json_pda t = s;
            if (!json_pda_feed(&t, (const uint8_t *)b, 1)) {
                s = t;
                putc_(d, *b);
                break;
            }
        }
        if (!*b) return -1;
    }
    return -1;
}

/* Feeds s[0..n) a byte at a time: the count accepted before the first refusal. */
static size_t feed_bytes(json_pda *st, const char *s, size_t n) {
    size_t i = 0;
    while (i < n && !json_pda_feed(st, (const uint8_t *)s + i, 1)) i++;
    return i;
}

static void test_valid_documents(void) {
    static doc d;
    int checked = 0;
    for (int k = 0; k < 3000; k++) {
        gen_doc(&d);
        if (!jansson_object(d.p, d.n) || !within_limits(d.p, d.n)) {
            CHECK_MSG(0, "generator made a document outside the grammar: %.*s", (int)d.n, d.p);
            continue;
        }
        json_pda s;
        json_pda_init(&s);
        size_t i = 0;
        for (; i < d.n; i++) {
            if (s.mode == JSON_PDA_DONE || json_pda_feed(&s, (const uint8_t *)d.p + i, 1)) break;
        }
        CHECK_MSG(i == d.n && s.mode == JSON_PDA_DONE, "refused at %zu of %.*s", i, (int)d.n, d.p);
        CHECK(json_pda_feed(&s, (const uint8_t *)" ", 1) == -1);
        checked++;
    }
    CHECK(checked == 3000);
}

static void mutate(doc *d) {
    static const char alphabet[] = "{}[]\":,\\/ \t\n\r-+.0123456789eEtruefalsnbu\x01\x7f\x80\xbf"
                                   "\xc0\xc2\xe0\xed\xf0\xf4\xf5\xff";
    int edits = 1 + (int)rnd(3);
    for (int e = 0; e < edits && d->n; e++) {
        size_t at = rnd((uint32_t)d->n);
        char c = alphabet[rnd(sizeof alphabet - 1)];
        switch (rnd(5)) {
        case 0: d->p[at] = c; break;
        case 1:
            if (d->n < sizeof d->p) {
                memmove(d->p + at + 1, d->p + at, d->n - at);
                d->p[at] = c;
                d->n++;
            }
            break;
        case 2:
            memmove(d->p + at, d->p + at + 1, d->n - at - 1);
            d->n--;
            break;
        case 3: d->n = at; break;
        default: {
            size_t len = 1 + rnd(8);
            if (at + len <= d->n && d->n + len <= sizeof d->p) {
                memmove(d->p + at + len, d->p + at, d->n - at);
                d->n += len;
            }
        }
        }
    }
}

/* What jansson accepts within the limits is accepted; what the recognizer completes
 * jansson accepts; where the recognizer stops, what it accepted still completes. */
static void check_against_jansson(const char *s, size_t n, int *agree_ok, int *agree_bad) {
    json_pda st;
    json_pda_init(&st);
    size_t got = feed_bytes(&st, s, n);
    int ours = got == n && st.mode == JSON_PDA_DONE;
    int theirs = jansson_object(s, n);
    if (ours) CHECK_MSG(theirs, "accepted, jansson refuses: %.*s", (int)n, s);
    if (theirs && within_limits(s, n))
        CHECK_MSG(ours, "jansson accepts, refused at %zu: %.*s", got, (int)n, s);
    if (!ours) {
        static doc c;
        c.n = 0;
        put(&c, s, got);
        CHECK_MSG(!complete(st, &c) && jansson_object(c.p, c.n) && within_limits(c.p, c.n),
                  "accepted prefix leads nowhere: %.*s", (int)c.n, c.p);
    }
    *agree_ok += ours;
    *agree_bad += !ours;
}

static void test_mutations(void) {
    static doc d;
    int ok = 0, bad = 0;
    for (int k = 0; k < 40000; k++) {
        gen_doc(&d);
        if (d.n > 2000) continue;
        mutate(&d);
        check_against_jansson(d.p, d.n, &ok, &bad);
    }
    CHECK(ok > 1000 && bad > 1000); /* both sides were exercised */
}

/* The limits and the corners of the RFC, one at a time. want: 2 complete, 1 accepted but
 * not complete, 0 refused at some byte. */
static void test_corners(void) {
    static const struct {
        const char *s;
        int want;
    } cases[] = {
        {"{}", 2},
        {"  {\"a\" : [ ] }", 2},
        {"{} ", 0}, /* nothing after the object, whitespace included */
        {"{}{}", 0},
        {"[]", 0},
        {"\"x\"", 0},
        {"1", 0},
        {"{\"a\":-0.0e+00}", 2},
        {"{\"a\":01}", 0},
        {"{\"a\":1.}", 0},
        {"{\"a\":.5}", 0},
        {"{\"a\":+1}", 0},
        {"{\"a\":-}", 0},
        {"{\"a\":1e}", 0},
        {"{\"a\":123456789012345678}", 2},
        {"{\"a\":1234567890123456789}", 0},
        {"{\"a\":1.5e99}", 2},
        {"{\"a\":1e100}", 0},
        {"{\"a\":tru}", 0},
        {"{\"a\":nul", 1},
        {"{\"a\":\"\\u0000\"}", 0},
        {"{\"a\":\"\\u0001\\u00e9\\uFFFF\"}", 2},
        {"{\"a\":\"\\ud83d\\ude00\"}", 2},
        {"{\"a\":\"\\ud83d\"}", 0},
        {"{\"a\":\"\\ude00\"}", 0},
        {"{\"a\":\"\\ud83d\\u0041\"}", 0},
        {"{\"a\":\"\\x\"}", 0},
        {"{\"a\":\"\x01\"}", 0},
        {"{\"a\":\"\x7f\"}", 2},
        {"{\"a\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}", 2},
        {"{\"a\":\"\xc0\xaf\"}", 0},         /* overlong */
        {"{\"a\":\"\xe0\x80\xaf\"}", 0},     /* overlong */
        {"{\"a\":\"\xed\xa0\x80\"}", 0},     /* a surrogate */
        {"{\"a\":\"\xf4\x90\x80\x80\"}", 0}, /* past U+10FFFF */
        {"{\"a\":\"\xe2\x82", 1},
        {"{\"a\" 1}", 0},
        {"{\"a\":1,}", 0},
        {"{,}", 0},
        {"{\"a\":[1,]}", 0},
        {"{\"a\":[1 2]}", 0},
        {"{\"a\":[}", 0},
        {"{\"a\":{]}", 0},
        {"{1:2}", 0},
        {"{\"a\":[1,{\"b\":null}],\"c\":true}", 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *s = cases[k].s;
        json_pda st;
        json_pda_init(&st);
        size_t got = feed_bytes(&st, s, strlen(s));
        int res = got < strlen(s) ? 0 : st.mode == JSON_PDA_DONE ? 2 : 1;
        CHECK_MSG(res == cases[k].want, "%s: %d, want %d", s, res, cases[k].want);
    }
    /* nesting: 64 containers fit, a 65th does not */
    static doc d;
    d.n = 0;
    puts_(&d, "{\"k\":");
    for (int i = 1; i < JSON_PDA_MAX_DEPTH; i++) putc_(&d, '[');
    json_pda st;
    json_pda_init(&st);
    CHECK(feed_bytes(&st, d.p, d.n) == d.n && st.depth == JSON_PDA_MAX_DEPTH);
    CHECK(json_pda_feed(&st, (const uint8_t *)"[", 1) == -1);
    CHECK(json_pda_feed(&st, (const uint8_t *)"{", 1) == -1);
    CHECK(json_pda_feed(&st, (const uint8_t *)"1", 1) == 0);
    /* whitespace: a run of JSON_PDA_MAX_WS fits, one more does not; a token resets it */
    json_pda_init(&st);
    for (int i = 0; i < JSON_PDA_MAX_WS; i++) CHECK(!json_pda_feed(&st, (const uint8_t *)"\n", 1));
    CHECK(json_pda_feed(&st, (const uint8_t *)" ", 1) == -1);
    CHECK(!json_pda_feed(&st, (const uint8_t *)"{", 1));
    CHECK(!json_pda_feed(&st, (const uint8_t *)" ", 1));
}

/* ---- the vocabulary and the mask -------------------------------------------------------- */

typedef struct tk {
    const char *name;
    tokenizer *t;
    constrain_vocab *v;
    int n_ids;
    tokfx_dir dir;
    int unpacked;
} tk;

/* Loads a tokenizer from a directory in the tree, or (a bare name) a vendored one of
 * tests/data/tokenizers. */
static int tk_load(tk *k, const char *name, const char *dir, int extra_rows) {
    memset(k, 0, sizeof *k);
    k->name = name;
    strata_err err;
    if (!strchr(dir, '/')) {
        if (tokfx_unpack(&k->dir, dir)) return -1;
        k->unpacked = 1;
        dir = k->dir.path;
    }
    if (tok_load(&k->t, dir, &err)) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        return -1;
    }
    k->n_ids = tok_vocab_size(k->t) + extra_rows;
    if (constrain_vocab_build(&k->v, k->t, k->n_ids, &err)) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        return -1;
    }
    return 0;
}

static void tk_free(tk *k) {
    constrain_vocab_free(k->v);
    tok_free(k->t);
    if (k->unpacked) tokfx_cleanup(&k->dir);
}

/* The mask from the trie walk equals feeding every token's bytes to a copy of the state. */
static int mask_matches(const constrain_vocab *v, const json_pda *s, uint8_t *allow, int n) {
    static json_pda states[1 << 16];
    memset(allow, 0, (size_t)n);
    int count = json_pda_mask_walk(s, v, states, allow, n), brute = 0, bad = 0;
    for (int id = 0; id < n; id++) {
        json_pda t = *s;
        int fits =
            id < v->n_ids && v->len[id] && !json_pda_feed(&t, v->bytes + v->off[id], v->len[id]);
        brute += fits;
        if (fits != allow[id] && bad++ < 3)
            fprintf(stderr, "  token %d (%.*s): walk %d, brute force %d\n", id,
                    id < v->n_ids ? (int)v->len[id] : 0,
                    id < v->n_ids ? (const char *)v->bytes + v->off[id] : "", allow[id], fits);
    }
    return !bad && count == brute;
}

/* States a generation passes through: every byte prefix of random documents (a sample of
 * them for a large vocabulary), plus the states at the limits. */
static void test_mask_brute_force(const tk *k, int n_docs, int stride) {
    int n = k->n_ids + 7, tried = 0, good = 0;
    uint8_t *allow = malloc((size_t)n);
    static doc d;
    for (int i = 0; i < n_docs; i++) {
        gen_doc(&d);
        if (d.n > 400) continue;
        json_pda s;
        json_pda_init(&s);
        for (size_t at = 0; at <= d.n; at++) {
            if (at % (size_t)stride == (size_t)i % (size_t)stride) {
                tried++;
                good += mask_matches(k->v, &s, allow, n);
                /* fewer rows than the vocabulary: the walk leaves the others alone */
                good += mask_matches(k->v, &s, allow, k->n_ids / 2) - 1;
            }
            if (at < d.n) CHECK(!json_pda_feed(&s, (const uint8_t *)d.p + at, 1));
        }
    }
    static const char *edges[] = {
        "{\"a\":123456789012345678",
        "{\"a\":1e99",
        "{\"a\":\"\\ud800",
        "{\"a\":\"\\ud800\\u",
        "{\"a\":\"\\u000",
        "{\"a\":\"\xf0",
        "{\"a\":\"\xe0",
        "{\"a\":\"\xed",
        "{\"a\":\"\xf4",
        "{\"a\":f",
        "{\"a\":-",
    };
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++) {
        json_pda s;
        json_pda_init(&s);
        CHECK(!json_pda_feed(&s, (const uint8_t *)edges[e], strlen(edges[e])));
        tried++;
        good += mask_matches(k->v, &s, allow, n);
    }
    json_pda s;
    json_pda_init(&s);
    for (int i = 0; i < JSON_PDA_MAX_WS - 1; i++) json_pda_feed(&s, (const uint8_t *)" ", 1);
    tried++;
    good += mask_matches(k->v, &s, allow, n);
    /* the deepest nesting, before and after a value */
    json_pda_init(&s);
    CHECK(!json_pda_feed(&s, (const uint8_t *)"{\"k\":", 5));
    for (int i = 1; i < JSON_PDA_MAX_DEPTH; i++) json_pda_feed(&s, (const uint8_t *)"[", 1);
    tried += 2;
    good += mask_matches(k->v, &s, allow, n);
    CHECK(!json_pda_feed(&s, (const uint8_t *)"1", 1));
    good += mask_matches(k->v, &s, allow, n);
    CHECK_MSG(good == tried, "%s: %d of %d masks differ from the brute force", k->name,
              tried - good, tried);
    free(allow);
}

/* The longest allowed token whose bytes start the completion of the state, else -1. */
static int32_t finishing_token(const constrain_vocab *v, const json_pda *s, const uint8_t *allow,
                               int n) {
    static doc c;
    c.n = 0;
    if (complete(*s, &c)) return -1;
    int32_t best = -1;
    for (int id = 0; id < n; id++)
        if (allow[id] && v->len[id] <= c.n && !memcmp(v->bytes + v->off[id], c.p, v->len[id]) &&
            (best < 0 || v->len[id] > v->len[best]))
            best = id;
    return best;
}

/* A model with arbitrary preferences: for a random number of steps it picks any allowed
 * token at random, then heads for the end (the longest allowed token on a way to close the
 * document). Whatever it picks, the output is an object jansson reads, it ends exactly when
 * constrain_complete says 2, and it decodes to the bytes the grammar saw. */
static void test_random_decoder(const tk *k, int runs, int bytelevel) {
    int n = k->n_ids, finished = 0, deadends = 0, refusals = 0;
    uint8_t *allow = malloc((size_t)n);
    int32_t *ids = malloc(sizeof(int32_t) * 8193);
    /* a metaspace / sentencepiece decoder drops the first token's leading space: decode
     * after an anchor letter, as the vocabulary's bytes were found */
    int32_t anchor = bytelevel ? -1 : tok_piece_to_id(k->t, "a");
    static doc out;
    strata_err err;
    for (int run = 0; run < runs; run++) {
        constrain *c;
        if (constrain_json_object(&c, k->v, &err)) {
            CHECK(0);
            break;
        }
        int wander = (int)rnd(run % 4 ? 200 : 1500), n_ids = 0, done = 0;
        out.n = 0;
        if (anchor >= 0) ids[n_ids++] = anchor, putc_(&out, 'a');
        for (int step = 0; step < 8000 && !done; step++) {
            int count = constrain_mask(c, allow, n);
            if (constrain_complete(c) == 2) {
                CHECK_EQ_INT(count, 0);
                done = 1;
                break;
            }
            if (!count) {
                deadends++;
                break;
            }
            if (step % 16 == 0) {
                CHECK(mask_matches(k->v, &c->state, allow, n));
                for (int id = 0; id < n; id++)
                    if (allow[id] && tok_is_special(k->t, id)) CHECK_MSG(0, "special %d", id);
            }
            /* a refused token leaves the state as it was */
            for (int tries = 0; tries < 8; tries++) {
                int32_t id = (int32_t)rnd((uint32_t)n + 8) - 4;
                if (id >= 0 && id < n && allow[id]) continue;
                json_pda before = c->state;
                CHECK(constrain_accept(c, id) == -1);
                CHECK(!memcmp(&before, &c->state, sizeof before));
                refusals++;
                break;
            }
            int32_t pick = -1;
            if (step >= wander) pick = finishing_token(k->v, &c->state, allow, n);
            if (pick < 0) {
                int r = (int)rnd((uint32_t)count);
                for (pick = 0; !allow[pick] || r--; pick++) {
                }
            }
            CHECK(constrain_accept(c, pick) == 0);
            put(&out, (const char *)k->v->bytes + k->v->off[pick], k->v->len[pick]);
            if (n_ids < 8193) ids[n_ids++] = pick;
        }
        finished += done;
        size_t skip = anchor >= 0;
        CHECK_MSG(done && jansson_object(out.p + skip, out.n - skip), "%s run %d: %.*s", k->name,
                  run, (int)out.n, out.p);
        char *text;
        size_t len;
        if (done && !tok_decode(k->t, ids, (size_t)n_ids, 0, &text, &len, &err)) {
            CHECK_MSG(len == out.n && !memcmp(text, out.p, len), "%s run %d: decode differs",
                      k->name, run);
            free(text);
        }
        constrain_free(c);
    }
    CHECK_MSG(finished == runs && !deadends, "%s: %d of %d finished, %d dead ends", k->name,
              finished, runs, deadends);
    CHECK(refusals > 0);
    free(ids);
    free(allow);
}

/* Specials and ids past the tokenizer never fit, and no fitting token is empty; every
 * other token's bytes are its decode (byte-level: alone; others: after an anchor letter,
 * which keeps the leading space a metaspace decoder drops from the first token, checked on
 * random runs of tokens whose bytes join into valid UTF-8). */
static void test_token_bytes(const tk *k, int bytelevel) {
    const constrain_vocab *v = k->v;
    strata_err err;
    int n_tok = tok_vocab_size(k->t), bad = 0, checked = 0, fitting = 0;
    for (int32_t id = 0; id < k->n_ids; id++) {
        if (id >= n_tok || tok_is_special(k->t, id)) {
            CHECK_MSG(!v->len[id], "%s: token %d fits", k->name, id);
            continue;
        }
        fitting += v->len[id] > 0;
        const char *b = (const char *)v->bytes + v->off[id];
        if (!bytelevel || !v->len[id] || !unicode_utf8_valid(b, v->len[id])) continue;
        char *text;
        size_t len;
        if (tok_decode(k->t, &id, 1, 0, &text, &len, &err)) continue;
        checked++;
        if ((len != v->len[id] || memcmp(text, b, len)) && bad++ < 3)
            fprintf(stderr, "  %s token %d: bytes %.*s, decode %s\n", k->name, id, (int)v->len[id],
                    b, text);
        free(text);
    }
    CHECK(fitting > n_tok * 9 / 10 && (!bytelevel || checked * 2 > fitting));
    if (!bytelevel) {
        int32_t ids[8];
        char *anchor_text, *text;
        size_t alen, len;
        ids[0] = tok_piece_to_id(k->t, "a");
        CHECK(ids[0] >= 0 && !tok_decode(k->t, ids, 1, 0, &anchor_text, &alen, &err));
        static doc want;
        for (int r = 0; r < 3000; r++) {
            int n = 2 + (int)rnd(6);
            want.n = 0;
            put(&want, anchor_text, alen);
            for (int i = 1; i < n; i++) {
                do ids[i] = (int32_t)rnd((uint32_t)k->n_ids);
                while (!v->len[ids[i]]);
                put(&want, (const char *)v->bytes + v->off[ids[i]], v->len[ids[i]]);
            }
            if (!unicode_utf8_valid(want.p, want.n) ||
                tok_decode(k->t, ids, (size_t)n, 0, &text, &len, &err))
                continue;
            checked++;
            if ((len != want.n || memcmp(text, want.p, len)) && bad++ < 3)
                fprintf(stderr, "  %s: bytes %.*s, decode %s\n", k->name, (int)want.n, want.p,
                        text);
            free(text);
        }
        free(anchor_text);
    }
    CHECK_MSG(!bad && (bytelevel || checked > 1000), "%s: %d of %d differ", k->name, bad, checked);
}

/* Build and create under a failing n-th allocation: STRATA_ENOMEM with a message, nothing
 * leaked, or (recovered) the same vocabulary. Every n up to ALLOC_RUNS allocation calls,
 * beyond that (a decoder-based vocabulary decodes every token) a stride through them all.
 * Mask and accept allocate nothing. */
#define ALLOC_RUNS 400
static void test_alloc_failures(const tk *k) {
    if (!alloc_hook_on()) return;
    constrain_vocab *v0;
    strata_err err0;
    alloc_hook_start_scope(0, ALLOC_HOOK_EXE);
    CHECK(!constrain_vocab_build(&v0, k->t, k->n_ids, &err0));
    long total = alloc_hook_allocs();
    alloc_hook_stop();
    constrain_vocab_free(v0);
    long stride = total > ALLOC_RUNS ? total / ALLOC_RUNS : 1;
    int fails = 0;
    for (long n = 1;; n += n < stride ? 1 : stride) {
        constrain_vocab *v = NULL;
        constrain *c = NULL;
        strata_err err = {0};
        alloc_hook_start_scope(n, ALLOC_HOOK_EXE);
        int r = constrain_vocab_build(&v, k->t, k->n_ids, &err);
        if (!r) r = constrain_json_object(&c, v, &err);
        int same = !r && v->n_sorted == k->v->n_sorted &&
                   !memcmp(v->len, k->v->len, sizeof *v->len * (size_t)k->n_ids);
        constrain_free(c);
        constrain_vocab_free(v);
        int failed = alloc_hook_failed();
        long live = alloc_hook_live();
        alloc_hook_stop();
        CHECK_MSG(live == 0, "%s: allocation %ld failed, %ld blocks leaked", k->name, n, live);
        if (!failed) {
            CHECK(same);
            break;
        }
        fails++;
        CHECK_MSG(same || (r == STRATA_ENOMEM && err.msg[0]), "%s: allocation %ld: %d %s", k->name,
                  n, r, err.msg);
    }
    CHECK(fails > 3);
    constrain *c;
    strata_err err;
    uint8_t *allow = malloc((size_t)k->n_ids);
    CHECK(!constrain_json_object(&c, k->v, &err));
    alloc_hook_start(0);
    for (int step = 0; step < 50; step++) {
        int count = constrain_mask(c, allow, k->n_ids);
        int32_t id = 0;
        while (id < k->n_ids && !allow[id]) id++;
        if (!count || constrain_accept(c, id)) break;
    }
    long allocs = alloc_hook_allocs();
    alloc_hook_stop();
    CHECK_EQ_INT(allocs, 0);
    constrain_free(c);
    free(allow);
}

/* An empty vocabulary (no rows) works: nothing ever fits. */
static void test_empty_vocab(const tk *k) {
    constrain_vocab *v;
    constrain *c;
    strata_err err;
    uint8_t allow[4] = {1, 1, 1, 1};
    CHECK(!constrain_vocab_build(&v, k->t, 0, &err));
    CHECK(!constrain_json_object(&c, v, &err));
    CHECK_EQ_INT(constrain_mask(c, allow, 4), 0);
    CHECK(!allow[0] && !allow[3]);
    CHECK(constrain_accept(c, 0) == -1 && constrain_complete(c) == 0);
    constrain_free(c);
    constrain_vocab_free(v);
    CHECK(constrain_vocab_build(&v, k->t, -1, &err) == STRATA_EINVALID);
}

static void run_tokenizer(const char *name, const char *dir, int extra_rows, int bytelevel,
                          int docs, int stride, int runs) {
    tk k;
    if (tk_load(&k, name, dir, extra_rows)) {
        CHECK_MSG(0, "%s: could not load", name);
        return;
    }
    int before = test_failures;
    test_token_bytes(&k, bytelevel);
    if (docs) test_mask_brute_force(&k, docs, stride);
    if (runs) test_random_decoder(&k, runs, bytelevel);
    if (k.n_ids < 5000) test_alloc_failures(&k);
    if (k.n_ids < 5000) test_empty_vocab(&k);
    fprintf(stderr, "  %-48s %s\n", name, test_failures == before ? "ok" : "FAILED");
    tk_free(&k);
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    RUN(test_corners);
    RUN(test_valid_documents);
    RUN(test_mutations);
    run_tokenizer("http fixture (512)", "tests/http/fixtures", 5, 1, 200, 1, 300);
    run_tokenizer("demo model (4096)", "models/demo", 0, 1, 50, 1, 200);
    run_tokenizer("qwen35 (248k)", "qwen35", 243, 1, 30, 8, 8);
    run_tokenizer("synth_meta", "synth_meta", 0, 0, 100, 1, 0);
    run_tokenizer("synth_sp", "synth_sp", 0, 0, 100, 1, 100);
    TEST_DONE();
}
