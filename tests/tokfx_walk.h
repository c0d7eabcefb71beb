/* tokfx_walk.h - walking a tokenizer's conformance fixture
 * (tests/data/tokenizers/NAME/fixtures.tsv.zst, tests/data/tokenizers/tok_fixture.h) the
 * way the tokenizer tests do: a fixture that cannot be read fails the test, and a quick run
 * (STRATA_TEST_QUICK=1, for sanitizer builds) checks every 10th case. Shared by
 * tests/unit/test_tokenizer.c, test_tok_ggml.c and test_detok.c. Test-only. */
#ifndef STRATA_TOKFX_WALK_H
#define STRATA_TOKFX_WALK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer.h"
#include "tests/data/tokenizers/tok_fixture.h"
#include "tests/test.h"

static inline int tokfx_walk_quick(void) {
    return getenv("STRATA_TEST_QUICK") && atoi(getenv("STRATA_TEST_QUICK"));
}

typedef struct tokfx_walk {
    tokfx_reader rd;
    int open, quick, seen;
} tokfx_walk;

static inline tokfx_walk tokfx_walk_open(const char *name, int quick) {
    tokfx_walk w = {.quick = quick};
    char path[512];
    snprintf(path, sizeof path, "tests/data/tokenizers/%s/fixtures.tsv.zst", name);
    w.open = !tokfx_open(&w.rd, path);
    CHECK_MSG(w.open, "cannot read %s", path);
    return w;
}

/* The next case to check into c: 1, or 0 at the end, -1 on a malformed line. */
static inline int tokfx_walk_next(tokfx_walk *w, tokfx_case *c) {
    memset(c, 0, sizeof *c); /* gcc cannot see that a 1 always comes with a case */
    int rc = 0;
    while (w->open && (rc = tokfx_next(&w->rd, c)) > 0)
        if (!w->quick || w->seen++ % 10 == 0) return 1;
    return rc;
}

static inline void tokfx_walk_close(tokfx_walk *w) { tokfx_close(&w->rd); }

/* An 'E' case's text encoded both ways the fixture holds: without special tokens (plain)
 * and with them (sp); rc is 0 when both encodes worked. */
typedef struct tokfx_encoded {
    int32_t *plain, *sp;
    size_t n_plain, n_sp;
    int rc;
} tokfx_encoded;

static inline tokfx_encoded tokfx_encode(const tokenizer *t, const tokfx_case *c, strata_err *err) {
    tokfx_encoded e = {0};
    int rc_plain = tok_encode(t, c->text, c->text_len, 0, &e.plain, &e.n_plain, err);
    int rc_sp = tok_encode(t, c->text, c->text_len, 1, &e.sp, &e.n_sp, err);
    e.rc = rc_plain ? rc_plain : rc_sp;
    return e;
}

/* 1 when both encodes worked and gave the fixture's ids. */
static inline int tokfx_encoded_match(const tokfx_encoded *e, const tokfx_case *c) {
    return !e->rc && e->n_plain == c->n_ids && e->n_sp == c->n_ids_sp &&
           (!e->n_plain || !memcmp(e->plain, c->ids, e->n_plain * sizeof *e->plain)) &&
           (!e->n_sp || !memcmp(e->sp, c->ids_sp, e->n_sp * sizeof *e->sp));
}

static inline void tokfx_encoded_free(tokfx_encoded *e) {
    free(e->plain);
    free(e->sp);
}

#endif
