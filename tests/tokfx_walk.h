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

#include "tests/data/tokenizers/tok_fixture.h"
#include "tests/test.h"

static inline int tokfx_walk_quick(void) {
    return getenv("STRATA_TEST_QUICK") && atoi(getenv("STRATA_TEST_QUICK"));
}

typedef struct tokfx_walk {
    tokfx_reader rd;
    int open, quick, seen;
} tokfx_walk;

static inline void tokfx_walk_open(tokfx_walk *w, const char *name, int quick) {
    char path[512];
    snprintf(path, sizeof path, "tests/data/tokenizers/%s/fixtures.tsv.zst", name);
    w->open = !tokfx_open(&w->rd, path);
    w->quick = quick;
    w->seen = 0;
    CHECK_MSG(w->open, "cannot read %s", path);
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

#endif
