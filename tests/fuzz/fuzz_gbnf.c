/* fuzz_gbnf.c - the GBNF parser (engine/constrain/gbnf.c) on arbitrary text.
 *
 * Whatever the input, the parse returns 0 or STRATA_EINVALID with a message, and frees to
 * nothing (ASan checks the memory). When it parses, the grammar must be what grammar.h
 * promises (every reference in range, every alternative ended, classes sorted, disjoint,
 * non-adjacent, surrogate-free and non-empty, root named "root"), and, for grammars small
 * enough, the Earley oracle must accept a sentence generated from the grammar (steered by
 * the input bytes) and every prefix of it, and agree with itself on slices of the input
 * (a sentence is a prefix; a prefix's prefixes are prefixes). */
// fuzz-sources: engine/constrain/gbnf.c engine/base/err.c engine/base/strbuf.c
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/constrain/grammar.h"
#include "tests/unit/grammar_oracle.h"

/* The oracle is quadratic and slow on purpose: bigger grammars are only checked for their
 * structure, and the strings stay short. */
#define ORACLE_MAX_ELEMS 400
#define SENTENCE_MAX 64
#define DERIVE_MAX_STEPS 2000 /* rules entered while generating one sentence */

static void check_structure(const grammar *g) {
    if (g->root >= g->n_rules || strcmp(g->names[g->root], "root")) abort();
    if (g->rules[0] != 0 || g->rules[g->n_rules] != g->n_alts) abort();
    for (uint32_t r = 0; r < g->n_rules; r++)
        if (!g->names[r] || g->rules[r] >= g->rules[r + 1]) abort();
    for (uint32_t a = 0; a < g->n_alts; a++) {
        uint32_t end = a + 1 < g->n_alts ? g->alts[a + 1] : g->n_elems;
        if (g->alts[a] >= end || g->elems[end - 1].kind != GK_END) abort();
        for (uint32_t i = g->alts[a]; i + 1 < end; i++) {
            gram_elem e = g->elems[i];
            if (e.kind == GK_END || (e.kind == GK_BYTE && e.arg > 255) ||
                (e.kind == GK_RULE && e.arg >= g->n_rules) ||
                ((e.kind == GK_CLASS || e.kind == GK_STAR) && e.arg >= g->n_classes))
                abort();
        }
    }
    if (g->class_off[0] != 0) abort();
    for (uint32_t k = 0; k < g->n_classes; k++) {
        if (g->class_off[k] >= g->class_off[k + 1]) abort();
        for (uint32_t i = g->class_off[k]; i < g->class_off[k + 1]; i++) {
            uint32_t lo = g->ranges[2 * i], hi = g->ranges[2 * i + 1];
            if (lo > hi || hi > 0x10FFFF || (lo <= 0xDFFF && hi >= 0xD800)) abort();
            if (i > g->class_off[k] && lo <= g->ranges[2 * i - 1] + 1) abort();
        }
    }
}

/* height[r]: 1 + the least, over r's alternatives, of the greatest height they call; an
 * alternative calling only lower rules always ends. 0: not found within a few passes. */
static uint32_t *heights(const grammar *g) {
    uint32_t *h = calloc(g->n_rules + 1, sizeof *h);
    if (!h) abort();
    for (int pass = 0, changed = 1; changed && pass < 64; pass++) {
        changed = 0;
        for (uint32_t r = 0; r < g->n_rules; r++)
            for (uint32_t a = g->rules[r]; a < g->rules[r + 1]; a++) {
                uint32_t top = 0, ok = 1;
                for (const gram_elem *e = g->elems + g->alts[a]; e->kind != GK_END; e++)
                    if (e->kind == GK_RULE) {
                        ok &= h[e->arg] != 0;
                        if (h[e->arg] > top) top = h[e->arg];
                    }
                if (ok && (!h[r] || top + 1 < h[r])) h[r] = top + 1, changed = 1;
            }
    }
    return h;
}

typedef struct gen {
    const grammar *g;
    const uint32_t *h;
    const uint8_t *in;
    size_t n_in, at;
    uint8_t out[SENTENCE_MAX];
    size_t n;
    int over; /* out ran past SENTENCE_MAX, or too many steps */
    int steps;
} gen;

static uint32_t next(gen *s) { return s->n_in ? s->in[s->at++ % s->n_in] : 0; }

static void put(gen *s, const char *b, int k) {
    if (s->n + (size_t)k > SENTENCE_MAX) s->over = 1;
    else memcpy(s->out + s->n, b, (size_t)k), s->n += (size_t)k;
}

static void put_class(gen *s, uint32_t k) {
    const grammar *g = s->g;
    uint32_t i = g->class_off[k] + next(s) % (g->class_off[k + 1] - g->class_off[k]);
    uint32_t lo = g->ranges[2 * i], hi = g->ranges[2 * i + 1];
    char u[4];
    put(s, u, unicode_utf8_encode(lo + (next(s) * 7919u) % (hi - lo + 1), u));
}

/* A sentence of rule r: any alternative while depth allows, then only ones that end. */
static void derive(gen *s, uint32_t r, int depth) {
    const grammar *g = s->g;
    if (++s->steps > DERIVE_MAX_STEPS) {
        s->over = 1;
        return;
    }
    uint32_t n_alts = g->rules[r + 1] - g->rules[r], pick = next(s) % n_alts, a;
    for (uint32_t i = 0;; i++) {
        a = g->rules[r] + (pick + i) % n_alts;
        uint32_t ok = 1;
        for (const gram_elem *e = g->elems + g->alts[a]; e->kind != GK_END; e++)
            if (e->kind == GK_RULE) ok &= depth < 6 ? s->h[e->arg] != 0 : s->h[e->arg] < s->h[r];
        if (ok) break;
    }
    for (const gram_elem *e = g->elems + g->alts[a]; e->kind != GK_END && !s->over; e++) {
        char b = (char)e->arg;
        switch (e->kind) {
        case GK_BYTE: put(s, &b, 1); break;
        case GK_CLASS: put_class(s, e->arg); break;
        case GK_STAR:
            for (uint32_t k = next(s) % 3; k--;) put_class(s, e->arg);
            break;
        case GK_RULE: derive(s, e->arg, depth + 1); break;
        }
    }
}

static void check_language(const grammar *g, const uint8_t *data, size_t size) {
    uint32_t *h = heights(g);
    if (h[g->root]) {
        gen s = {.g = g, .h = h, .in = data, .n_in = size};
        derive(&s, g->root, 0);
        if (!s.over) {
            if (!grammar_oracle_accepts(g, s.out, s.n)) abort();
            for (size_t k = 0; k < s.n; k += 1 + s.n / 4)
                if (!grammar_oracle_prefix(g, s.out, k)) abort();
        }
    }
    free(h);
    for (size_t off = 0; off < size && off < 48; off += 16) { /* slices of the input */
        size_t n = size - off < 16 ? size - off : 16;
        if (grammar_oracle_accepts(g, data + off, n) && !grammar_oracle_prefix(g, data + off, n))
            abort();
        if (grammar_oracle_prefix(g, data + off, n))
            for (size_t k = n / 2; k < n; k += 3)
                if (!grammar_oracle_prefix(g, data + off, k)) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    grammar *g = NULL;
    strata_err err = {0};
    int rc = grammar_parse(&g, (const char *)data, size, &err);
    if (rc) {
        if ((rc != STRATA_EINVALID && rc != STRATA_ENOMEM) || !err.msg[0] || g) abort();
        return 0;
    }
    check_structure(g);
    if (g->n_elems <= ORACLE_MAX_ELEMS) check_language(g, data, size);
    grammar_free(g);
    return 0;
}
