/* grammar_oracle.h - a plain Earley recognizer over grammar.h's elements, for tests only: the
 * reference the parser's output and the byte-level matcher are checked against.
 *
 * It reads bytes: GK_BYTE matches one byte, GK_CLASS one whole UTF-8 character of the class
 * (invalid UTF-8 never matches), GK_STAR any number of them, GK_RULE any alternative of the
 * rule. Empty completions are handled by remembering, per set, the rules completed without
 * reading (so an item that asks for one later still advances). Items are deduplicated
 * through a hash table per set, but completion scans the whole origin set: simple over fast,
 * for inputs of a few KB. Aborts when out of memory (it is a test). */
#ifndef STRATA_GRAMMAR_ORACLE_H
#define STRATA_GRAMMAR_ORACLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/utf8.h"
#include "engine/constrain/grammar.h"

typedef struct grammar_oracle_item {
    uint32_t pos;    /* index in elems of the next element (GK_END: complete) */
    uint32_t origin; /* the set the alternative started in */
    uint32_t rule;
} grammar_oracle_item;

typedef struct grammar_oracle_set {
    grammar_oracle_item *v;
    size_t n, cap;
    uint32_t *slot; /* [n_slot] open addressing: index in v + 1, 0 empty */
    size_t n_slot;
} grammar_oracle_set;

static inline int grammar_oracle_in_class(const grammar *g, uint32_t k, uint32_t cp) {
    for (uint32_t i = g->class_off[k]; i < g->class_off[k + 1]; i++)
        if (g->ranges[2 * i] <= cp && cp <= g->ranges[2 * i + 1]) return 1;
    return 0;
}

/* The length of the whole valid character at s[0..n) of class k, or 0 when there is none. */
static inline int grammar_oracle_scan(const grammar *g, uint32_t k, const uint8_t *s, size_t n) {
    if (!n) return 0;
    int len = unicode_utf8_check(s, n);
    if (len <= 0) return 0;
    uint32_t cp = unicode_utf8_decode(s, &len);
    return grammar_oracle_in_class(g, k, cp) ? len : 0;
}

/* Where item (pos, origin) is in set's table, or the empty slot where it goes (an element
 * belongs to one rule, so pos and origin name the item). */
static inline uint32_t *grammar_oracle_slot(const grammar_oracle_set *set, uint32_t pos,
                                            uint32_t origin) {
    size_t i = ((size_t)pos * 2654435761u + origin * 40503u) & (set->n_slot - 1);
    for (;; i = (i + 1) & (set->n_slot - 1)) {
        uint32_t k = set->slot[i];
        if (!k || (set->v[k - 1].pos == pos && set->v[k - 1].origin == origin))
            return &set->slot[i];
    }
}

static inline void grammar_oracle_add(grammar_oracle_set *set, uint32_t pos, uint32_t origin,
                                      uint32_t rule) {
    if (2 * (set->n + 1) > set->n_slot) { /* grow the table, then the items */
        grammar_oracle_set bigger = *set;
        bigger.n_slot = set->n_slot ? 2 * set->n_slot : 64;
        bigger.slot = calloc(bigger.n_slot, sizeof *bigger.slot);
        if (!bigger.slot) abort();
        for (size_t i = 0; i < set->n; i++)
            *grammar_oracle_slot(&bigger, set->v[i].pos, set->v[i].origin) = (uint32_t)i + 1;
        free(set->slot);
        *set = bigger;
        set->cap = set->n_slot / 2;
        set->v = realloc(set->v, set->cap * sizeof *set->v);
        if (!set->v) abort();
    }
    uint32_t *slot = grammar_oracle_slot(set, pos, origin);
    if (*slot) return;
    set->v[set->n++] = (grammar_oracle_item){pos, origin, rule};
    *slot = (uint32_t)set->n;
}

/* Processes set i: predictions, completions, scans into later sets. */
static inline void grammar_oracle_step(const grammar *g, grammar_oracle_set *sets, uint8_t *empty,
                                       const uint8_t *s, size_t n, size_t i) {
    memset(empty, 0, g->n_rules);
    for (size_t j = 0; j < sets[i].n; j++) {
        grammar_oracle_item it = sets[i].v[j];
        gram_elem e = g->elems[it.pos];
        int len;
        switch (e.kind) {
        case GK_END:
            if (it.origin == i) empty[it.rule] = 1;
            for (size_t k = 0; k < sets[it.origin].n; k++) {
                grammar_oracle_item w = sets[it.origin].v[k];
                gram_elem we = g->elems[w.pos];
                if (we.kind == GK_RULE && we.arg == it.rule)
                    grammar_oracle_add(&sets[i], w.pos + 1, w.origin, w.rule);
            }
            break;
        case GK_RULE:
            for (uint32_t a = g->rules[e.arg]; a < g->rules[e.arg + 1]; a++)
                grammar_oracle_add(&sets[i], g->alts[a], (uint32_t)i, e.arg);
            if (empty[e.arg]) grammar_oracle_add(&sets[i], it.pos + 1, it.origin, it.rule);
            break;
        case GK_BYTE:
            if (i < n && s[i] == e.arg)
                grammar_oracle_add(&sets[i + 1], it.pos + 1, it.origin, it.rule);
            break;
        case GK_CLASS:
            if ((len = grammar_oracle_scan(g, e.arg, s + i, n - i)))
                grammar_oracle_add(&sets[i + (size_t)len], it.pos + 1, it.origin, it.rule);
            break;
        case GK_STAR:
            grammar_oracle_add(&sets[i], it.pos + 1, it.origin, it.rule);
            if ((len = grammar_oracle_scan(g, e.arg, s + i, n - i)))
                grammar_oracle_add(&sets[i + (size_t)len], it.pos, it.origin, it.rule);
            break;
        }
    }
}

/* The Earley sets 0..n of s; caller frees with grammar_oracle_free. */
static inline grammar_oracle_set *grammar_oracle_run(const grammar *g, const uint8_t *s, size_t n) {
    grammar_oracle_set *sets = calloc(n + 1, sizeof *sets);
    uint8_t *empty = malloc(g->n_rules + 1);
    if (!sets || !empty) abort();
    for (uint32_t a = g->rules[g->root]; a < g->rules[g->root + 1]; a++)
        grammar_oracle_add(&sets[0], g->alts[a], 0, g->root);
    for (size_t i = 0; i <= n; i++) grammar_oracle_step(g, sets, empty, s, n, i);
    free(empty);
    return sets;
}

static inline void grammar_oracle_free(grammar_oracle_set *sets, size_t n) {
    for (size_t i = 0; i <= n; i++) free(sets[i].v), free(sets[i].slot);
    free(sets);
}

/* 1 when s[0..n) is a sentence of g's root rule. */
static inline int grammar_oracle_accepts(const grammar *g, const uint8_t *s, size_t n) {
    grammar_oracle_set *sets = grammar_oracle_run(g, s, n);
    int ok = 0;
    for (size_t j = 0; j < sets[n].n && !ok; j++) {
        grammar_oracle_item it = sets[n].v[j];
        ok = it.rule == g->root && it.origin == 0 && g->elems[it.pos].kind == GK_END;
    }
    grammar_oracle_free(sets, n);
    return ok;
}

/* The code points whose UTF-8 starts with the valid incomplete s[0..n): [*lo, *hi] (UTF-8
 * keeps order, so they are one interval): complete s with the smallest, then the largest,
 * continuation bytes that keep it valid. */
static inline void grammar_oracle_span(const uint8_t *s, size_t n, uint32_t *lo, uint32_t *hi) {
    size_t len = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : 2;
    for (int top = 0; top < 2; top++) {
        uint8_t b[4];
        memcpy(b, s, n);
        for (size_t i = n; i < len; i++)
            for (int c = top ? 0xBF : 0x80;; c += top ? -1 : 1) {
                b[i] = (uint8_t)c;
                if (unicode_utf8_check(b, i + 1) >= 0) break;
            }
        int k;
        *(top ? hi : lo) = unicode_utf8_decode(b, &k);
    }
}

/* 1 when s[0..n) is a prefix of some sentence of g (the parser made every rule productive, so
 * every item Earley holds leads to one). A string ending inside a UTF-8 character is one when
 * a class expected where that character starts holds a code point it can become. */
static inline int grammar_oracle_prefix(const grammar *g, const uint8_t *s, size_t n) {
    grammar_oracle_set *sets = grammar_oracle_run(g, s, n);
    int ok = sets[n].n > 0;
    for (size_t i = n > 3 ? n - 3 : 0; i < n && !ok; i++) {
        if (unicode_utf8_check(s + i, n - i) != 0) continue;
        uint32_t lo, hi;
        grammar_oracle_span(s + i, n - i, &lo, &hi);
        for (size_t j = 0; j < sets[i].n && !ok; j++) {
            gram_elem e = g->elems[sets[i].v[j].pos];
            if (e.kind != GK_CLASS && e.kind != GK_STAR) continue;
            for (uint32_t r = g->class_off[e.arg]; r < g->class_off[e.arg + 1] && !ok; r++)
                ok = g->ranges[2 * r] <= hi && lo <= g->ranges[2 * r + 1];
        }
    }
    grammar_oracle_free(sets, n);
    return ok;
}

#endif
