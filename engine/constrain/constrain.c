/* constrain.c - one sequence's position in its grammar, and the calls the engine makes on
 * it each step: the mask of tokens that may come next, the move past the token picked, and
 * whether the output may end. The grammar is json_pda.c's JSON recognizer or a GBNF
 * grammar run by grammar_match.c; the vocabulary and its trie are constrain_vocab.c's. */
#include <stdlib.h>
#include <string.h>

#include "engine/constrain/constrain.h"
#include "engine/constrain/constrain_internal.h"

/* A grammar's tables past this many bytes are rebuilt from the current position before
 * the next mask: they only cache, and a long generation through a big grammar keeps
 * adding to them. */
#define CONSTRAIN_MAX_TABLES ((size_t)64 << 20)

int constrain_json_object(constrain **out, const constrain_vocab *v, strata_err *err) {
    constrain *c = calloc(1, sizeof *c);
    if (c) c->walk = malloc(((size_t)v->max_len + 1) * sizeof *c->walk);
    if (!c || !c->walk) {
        free(c);
        return strata_err_set(err, STRATA_ENOMEM, "constrain: out of memory");
    }
    c->v = v;
    json_pda_init(&c->state);
    *out = c;
    return 0;
}

int constrain_grammar(constrain **out, const constrain_vocab *v, const char *gbnf, size_t len,
                      const char *start, strata_err *err) {
    return constrain_grammar_ex(out, v, gbnf, len, start, 0, err);
}

int constrain_grammar_ex(constrain **out, const constrain_vocab *v, const char *gbnf, size_t len,
                         const char *start, int flags, strata_err *err) {
    grammar *g;
    int rc = grammar_parse(&g, gbnf, len, err);
    if (rc) return rc;
    if (start) {
        uint32_t r = 0;
        while (r < g->n_rules && strcmp(g->names[r], start)) r++;
        if (r == g->n_rules) {
            grammar_free(g);
            return strata_err_set(err, STRATA_EINVALID, "grammar: no rule named %.100s", start);
        }
        g->root = r;
    }
    constrain *c = calloc(1, sizeof *c);
    if (!c) goto nomem;
    c->v = v;
    c->g = g;
    c->specials = (flags & CONSTRAIN_SPECIALS) != 0;
    c->gwalk = malloc(((size_t)v->max_len + 1) * sizeof *c->gwalk);
    c->bits = malloc((size_t)v->n_nodes + 1);
    if (!c->gwalk || !c->bits || gmatch_create(&c->gm, g)) goto nomem;
    if (!gmatch_fast_bits(c->gm, v, c->bits)) {
        free(c->bits);
        c->bits = NULL;
    }
    c->set = gmatch_start(c->gm);
    if (c->set == UINT32_MAX) goto nomem;
    if (!c->set) {
        constrain_free(c);
        return strata_err_set(err, STRATA_EINVALID, "grammar: the root rule matches nothing");
    }
    *out = c;
    return 0;
nomem:
    if (c) constrain_free(c);
    else grammar_free(g);
    return strata_err_set(err, STRATA_ENOMEM, "constrain: out of memory");
}

int constrain_grammar_check(const char *gbnf, size_t len, strata_err *err) {
    grammar *g;
    int rc = grammar_parse(&g, gbnf, len, err);
    if (!rc) grammar_free(g);
    return rc;
}

void constrain_free(constrain *c) {
    if (!c) return;
    free(c->walk);
    gmatch_free(c->gm);
    grammar_free(c->g);
    free(c->bits);
    free(c->gwalk);
    free(c);
}

/* Adds to allow the special tokens whose whole text fits: count plus those, or -1. */
static int mask_specials(constrain *c, uint8_t *allow, int n, int count) {
    const constrain_vocab *v = c->v;
    for (int k = 0; k < v->n_specials && v->spec_id[k] < n; k++) {
        uint32_t s = gmatch_feed(c->gm, c->set, v->spec_bytes + v->spec_off[k], v->spec_len[k]);
        if (s == UINT32_MAX) return -1;
        if (s && !allow[v->spec_id[k]]) allow[v->spec_id[k]] = 1, count++;
    }
    return count;
}

/* The index of special token id in v->spec_id, or -1. */
static int special_index(const constrain_vocab *v, int32_t id) {
    int lo = 0, hi = v->n_specials;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (v->spec_id[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < v->n_specials && v->spec_id[lo] == id ? lo : -1;
}

int constrain_mask(constrain *c, uint8_t *allow, int n) {
    if (n <= 0) return 0;
    memset(allow, 0, (size_t)n);
    if (!c->g) return json_pda_mask_walk(&c->state, c->v, c->walk, allow, n);
    if (gmatch_size(c->gm) > CONSTRAIN_MAX_TABLES) {
        uint32_t s = gmatch_compact(&c->gm, c->set);
        if (s == UINT32_MAX) return -1;
        c->set = s;
    }
    int k = gmatch_mask_walk(c->gm, c->set, c->v, c->bits, c->gwalk, allow, n);
    if (k >= 0 && c->specials) k = mask_specials(c, allow, n, k);
    if (k < 0) memset(allow, 0, (size_t)n);
    return k;
}

int constrain_accept(constrain *c, int32_t id) {
    const constrain_vocab *v = c->v;
    if (id < 0 || id >= v->n_ids) return -1;
    const uint8_t *b = v->bytes + v->off[id];
    uint32_t len = v->len[id];
    int k = !len && c->specials ? special_index(v, id) : -1;
    if (k >= 0) b = v->spec_bytes + v->spec_off[k], len = v->spec_len[k];
    if (!len) return -1;
    if (!c->g) return json_pda_feed(&c->state, b, len);
    uint32_t s = gmatch_feed(c->gm, c->set, b, len);
    if (!s || s == UINT32_MAX) return -1;
    c->set = s;
    return 0;
}

int constrain_complete(const constrain *c) {
    if (c->g) return gmatch_complete(c->gm, c->set);
    return c->state.mode == JSON_PDA_DONE ? 2 : 0;
}
