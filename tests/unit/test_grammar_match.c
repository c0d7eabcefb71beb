/* test_grammar_match.c - engine/constrain/grammar_match.c: the lazily built DFA against the
 * Earley oracle (tests/unit/grammar_oracle.h), and its mask walk against feeding every
 * token of real vocabularies one by one.
 *
 * The DFA: on grammars that exercise every element (bytes, classes with non-ASCII ranges,
 * star loops, nullable and right-recursive rules, deep nesting), random walks that pick any
 * byte the DFA allows must stay prefixes of the oracle's language, every byte the DFA
 * refuses must make a non-prefix, and "may end here" must be the oracle's "accepts". The
 * mask: the trie walk, with and without the string fast path, equals the brute force on
 * the demo model's vocabulary and on Qwen3.5's 248k. Compaction keeps the position. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/constrain/constrain.h"
#include "engine/constrain/constrain_internal.h"
#include "engine/text/tokenizer.h"
#include "tests/test.h"
#include "tests/test_rng.h"
#include "tests/unit/grammar_oracle.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "tests/data/tokenizers/tok_fixture.h"
#pragma GCC diagnostic pop

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(uint32_t n) { return test_rng_below(&rng_state, n); }

static const char *const GRAMMARS[] = {
    /* JSON, the way the schema compiler writes it */
    "root ::= ws value ws\n"
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( member ( ws \",\" ws member )* )? ws \"}\"\n"
    "member ::= string ws \":\" ws value\n"
    "array ::= \"[\" ws ( value ( ws \",\" ws value )* )? ws \"]\"\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrt] )* \"\\\"\"\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,5} ) ( \".\" [0-9]+ )?\n"
    "ws ::= [ \\n]{0,2}\n",
    /* arithmetic, nested parentheses */
    "root ::= expr\nexpr ::= term ( [-+] term )*\nterm ::= factor ( [*/] factor )*\n"
    "factor ::= [0-9]+ | \"(\" expr \")\"\n",
    /* non-ASCII classes and literals */
    "root ::= greet \" \" name \"!\"?\ngreet ::= \"héllo\" | \"привет\" | \"こんにちは\"\n"
    "name ::= [а-яА-Я]+ | [一-龥]{1,3} | [😀-🙏]\n",
    /* a star loop of any text up to a closing tag, then a choice */
    "root ::= \"<t>\" body \"</t>\" ( \"a\" | \"bb\" | )\nbody ::= [^<]*\n",
    /* nullable rules and alternatives of several lengths */
    "root ::= a b c\na ::= \"x\"* | \"y\"\nb ::= | \"z\" b\nc ::= \"q\"?\n",
    /* any character, a bounded count */
    "root ::= .{2,4} \";\"\n",
};

static grammar *parse(const char *text) {
    grammar *g = NULL;
    strata_err err = {0};
    if (grammar_parse(&g, text, strlen(text), &err)) {
        fprintf(stderr, "grammar: %s\n", err.msg);
        return NULL;
    }
    return g;
}

/* Random walks: every byte the DFA takes keeps an oracle prefix; every byte it refuses
 * does not; "complete" agrees with the oracle's acceptance. */
static void test_walks_against_oracle(void) {
    for (size_t gi = 0; gi < sizeof GRAMMARS / sizeof GRAMMARS[0]; gi++) {
        grammar *g = parse(GRAMMARS[gi]);
        CHECK_MSG(g != NULL, "grammar %zu", gi);
        if (!g) continue;
        gmatch *m;
        CHECK(!gmatch_create(&m, g));
        int bad = 0;
        for (int run = 0; run < 12 && !bad; run++) {
            uint8_t s[64];
            size_t n = 0;
            uint32_t set = gmatch_start(m);
            CHECK(set != 0 && set != UINT32_MAX);
            while (n < sizeof s - 1 && !bad) {
                int comp = gmatch_complete(m, set);
                if ((comp > 0) != grammar_oracle_accepts(g, s, n)) bad = 1;
                uint8_t ok[256];
                int n_ok = 0;
                for (int b = 0; b < 256; b++) {
                    s[n] = (uint8_t)b;
                    uint32_t t = gmatch_feed(m, set, s + n, 1);
                    ok[n_ok] = (uint8_t)b;
                    n_ok += t != 0;
                    /* the oracle is slow: check every refused byte on short strings only */
                    if ((t != 0 || n < 6) && (t != 0) != grammar_oracle_prefix(g, s, n + 1)) {
                        fprintf(stderr, "  grammar %zu: prefix %.*s + byte 0x%02x: dfa %d\n", gi,
                                (int)n, s, b, t != 0);
                        bad = 1;
                        break;
                    }
                }
                if (comp == 2) CHECK(n_ok == 0);
                if (!n_ok || bad || (comp && rnd(4) == 0)) break;
                s[n] = ok[rnd((uint32_t)n_ok)];
                set = gmatch_feed(m, set, s + n, 1);
                n++;
            }
        }
        CHECK_MSG(!bad, "grammar %zu", gi);
        gmatch_free(m);
        grammar_free(g);
    }
}

/* The DFA's tables rebuilt mid-sentence: the same continuation is accepted. */
static void test_compaction(void) {
    grammar *g = parse(GRAMMARS[0]);
    gmatch *m;
    if (!g || gmatch_create(&m, g)) {
        CHECK(0);
        return;
    }
    const char *doc = "{\"a\": [1, {\"b\": \"x\\n\"}, -0.5], \"c\": null}";
    size_t cut = 14;
    uint32_t set = gmatch_feed(m, gmatch_start(m), (const uint8_t *)doc, cut);
    CHECK(set != 0);
    set = gmatch_compact(&m, set);
    CHECK(set != 0 && set != UINT32_MAX);
    set = gmatch_feed(m, set, (const uint8_t *)doc + cut, strlen(doc) - cut);
    CHECK(set != 0 && gmatch_complete(m, set) == 1);
    gmatch_free(m);
    grammar_free(g);
}

/* ---- masks over real vocabularies ------------------------------------------------------- */

static int mask_matches(gmatch *m, uint32_t set, const constrain_vocab *v, const uint8_t *bits,
                        uint8_t *allow, int n) {
    static uint32_t states[1 << 16];
    memset(allow, 0, (size_t)n);
    int count = gmatch_mask_walk(m, set, v, bits, states, allow, n), brute = 0, bad = 0;
    for (int id = 0; id < n; id++) {
        int fits = id < v->n_ids && v->len[id] &&
                   gmatch_feed(m, set, v->bytes + v->off[id], v->len[id]) != 0;
        brute += fits;
        if (fits != allow[id] && bad++ < 3)
            fprintf(stderr, "  token %d (%.*s): walk %d, brute force %d\n", id, (int)v->len[id],
                    (const char *)v->bytes + v->off[id], allow[id], fits);
    }
    return !bad && count == brute;
}

static void masks_on(const char *name, const char *dir) {
    tokfx_dir tmp;
    int unpacked = 0;
    if (!strchr(dir, '/')) {
        if (tokfx_unpack(&tmp, dir)) {
            CHECK_MSG(0, "%s: unpack", name);
            return;
        }
        unpacked = 1, dir = tmp.path;
    }
    tokenizer *t = NULL;
    constrain_vocab *v = NULL;
    strata_err err;
    if (tok_load(&t, dir, &err) || constrain_vocab_build(&v, t, tok_vocab_size(t), &err)) {
        CHECK_MSG(0, "%s: %s", name, err.msg);
        tok_free(t);
        if (unpacked) tokfx_cleanup(&tmp);
        return;
    }
    int n = v->n_ids, bad = 0, states = 0;
    uint8_t *allow = malloc((size_t)n), *bits = malloc((size_t)v->n_nodes + 1);
    for (size_t gi = 0; gi < sizeof GRAMMARS / sizeof GRAMMARS[0] && allow && bits; gi++) {
        grammar *g = parse(GRAMMARS[gi]);
        gmatch *m;
        if (!g || gmatch_create(&m, g)) {
            CHECK(0);
            grammar_free(g);
            continue;
        }
        int fast = gmatch_fast_bits(m, v, bits);
        if (gi == 0 || gi == 3) CHECK_MSG(fast, "grammar %zu has a string loop", gi);
        /* states along a walk that takes random allowed tokens */
        uint32_t set = gmatch_start(m);
        for (int step = 0; step < 10 && set && !bad; step++) {
            states++;
            if (!mask_matches(m, set, v, fast ? bits : NULL, allow, n)) bad = 1;
            if (fast && !mask_matches(m, set, v, NULL, allow, n)) bad = 1;
            int k = 0;
            for (int id = 0; id < n; id++) k += allow[id];
            if (!k) break;
            int pick = (int)rnd((uint32_t)k);
            for (int id = 0; id < n; id++)
                if (allow[id] && pick-- == 0) {
                    set = gmatch_feed(m, set, v->bytes + v->off[id], v->len[id]);
                    break;
                }
        }
        CHECK_MSG(!bad, "%s: grammar %zu", name, gi);
        gmatch_free(m);
        grammar_free(g);
    }
    fprintf(stderr, "  %-48s %d states\n", name, states);
    free(allow);
    free(bits);
    constrain_vocab_free(v);
    tok_free(t);
    if (unpacked) tokfx_cleanup(&tmp);
}

static void test_masks(void) {
    masks_on("demo model (4096)", "models/demo");
    masks_on("qwen35 (248k)", "qwen35");
}

/* The public calls: a start rule other than root, completion, refusal, bad grammars. */
static void test_constrain_api(void) {
    tokenizer *t = NULL;
    constrain_vocab *v = NULL;
    strata_err err;
    if (tok_load(&t, "models/demo", &err) ||
        constrain_vocab_build(&v, t, tok_vocab_size(t), &err)) {
        CHECK_MSG(0, "%s", err.msg);
        tok_free(t);
        return;
    }
    const char *g = "root ::= \"yes\" | \"no\"\nother ::= \"maybe\" root?\n";
    constrain *c = NULL;
    CHECK(!constrain_grammar(&c, v, g, strlen(g), NULL, &err));
    uint8_t *allow = malloc((size_t)v->n_ids);
    int k = constrain_mask(c, allow, v->n_ids);
    CHECK(k > 0);
    for (int id = 0; id < v->n_ids; id++)
        if (allow[id]) {
            /* every allowed token is a prefix of yes or no */
            int pre = v->len[id] <= 3 && (!memcmp(v->bytes + v->off[id], "yes", v->len[id]) ||
                                          !memcmp(v->bytes + v->off[id], "no", v->len[id]));
            CHECK_MSG(pre, "token %d", id);
        }
    CHECK(constrain_complete(c) == 0);
    constrain_free(c);
    CHECK(!constrain_grammar(&c, v, g, strlen(g), "other", &err));
    CHECK(constrain_complete(c) == 0);
    constrain_free(c);
    CHECK(constrain_grammar(&c, v, g, strlen(g), "missing", &err) == STRATA_EINVALID);
    CHECK(strstr(err.msg, "missing") != NULL);
    CHECK(constrain_grammar(&c, v, "root ::= x", 10, NULL, &err) == STRATA_EINVALID);
    CHECK(constrain_grammar_check("root ::= \"a\"", 12, &err) == 0);
    CHECK(constrain_grammar_check("root ::= (", 10, &err) == STRATA_EINVALID);
    free(allow);
    constrain_vocab_free(v);
    tok_free(t);
}

int main(void) {
    RUN(test_walks_against_oracle);
    RUN(test_compaction);
    RUN(test_constrain_api);
    RUN(test_masks);
    TEST_DONE();
}
