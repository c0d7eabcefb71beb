/* golden_util.h - reading tests/golden/<name>/golden.json fixtures and comparing
 * logits the way a failing test should report them: per case, the worst position,
 * values side by side, absolute and relative error (style.md §20). Test-only. */
#ifndef STRATA_GOLDEN_UTIL_H
#define STRATA_GOLDEN_UTIL_H

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test.h"

typedef struct golden_case {
    int32_t *prompt;
    int n;
    float *logits;   /* [n, vocab] */
    int32_t *greedy; /* transformers' greedy continuation, n_greedy ids */
    int n_greedy;
} golden_case;

typedef struct golden_set {
    int vocab;
    int is_bf16;
    int n_cases;
    golden_case cases[16];
    json_t *meta;
} golden_set;

static int32_t *golden_ids(json_t *arr, int *n) {
    *n = (int)json_array_size(arr);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(*n ? *n : 1));
    for (int i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
    return v;
}

static void golden_free(golden_set *g) {
    for (int i = 0; i < g->n_cases; i++) {
        free(g->cases[i].prompt);
        free(g->cases[i].logits);
        free(g->cases[i].greedy);
    }
    json_decref(g->meta);
    memset(g, 0, sizeof *g);
}

static int golden_load(const char *dir, golden_set *g) {
    char path[512];
    memset(g, 0, sizeof *g);
    snprintf(path, sizeof path, "%s/golden.json", dir);
    json_error_t je;
    g->meta = json_load_file(path, 0, &je);
    if (!g->meta) return -1;
    g->vocab = (int)json_integer_value(json_object_get(g->meta, "vocab"));
    const char *dt = json_string_value(json_object_get(g->meta, "dtype"));
    g->is_bf16 = dt && !strcmp(dt, "bfloat16");
    json_t *cases = json_object_get(g->meta, "cases");
    for (size_t i = 0; i < json_array_size(cases) && g->n_cases < 16; i++) {
        json_t *c = json_array_get(cases, i);
        golden_case *gc = &g->cases[g->n_cases++];
        gc->prompt = golden_ids(json_object_get(c, "prompt"), &gc->n);
        if (json_object_get(c, "greedy"))
            gc->greedy = golden_ids(json_object_get(c, "greedy"), &gc->n_greedy);
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(c, "logits")));
        size_t want = (size_t)gc->n * (size_t)g->vocab;
        gc->logits = malloc(sizeof(float) * want);
        FILE *f = fopen(path, "rb");
        size_t got = f ? fread(gc->logits, sizeof(float), want, f) : 0;
        if (f) fclose(f);
        if (got != want) {
            golden_free(g);
            return -1;
        }
    }
    return g->n_cases ? 0 : -1;
}

static int golden_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static float golden_top2_gap(const float *x, int n) {
    float a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (x[i] > a) {
            b = a;
            a = x[i];
        } else if (x[i] > b) {
            b = x[i];
        }
    }
    return a - b;
}

/* For a fixture whose reference logits are too rounded to compare (bf16): at every
 * position where the reference's top-2 gap is at least min_gap, so that rounding cannot
 * have chosen its token, got [n, vocab] must choose the same token. One check a case. */
__attribute__((unused)) static void golden_check_clear_greedy(const char *name, const float *got,
                                                              const golden_case *gc, int vocab,
                                                              float min_gap) {
    int agree = 0, judged = 0;
    for (int p = 0; p < gc->n; p++) {
        const float *want = gc->logits + (size_t)p * vocab;
        if (golden_top2_gap(want, vocab) < min_gap) continue;
        judged++;
        agree += golden_argmax(got + (size_t)p * vocab, vocab) == golden_argmax(want, vocab);
    }
    CHECK_MSG(agree == judged, "%s: greedy differs at %d of %d clear positions", name,
              judged - agree, judged);
}

/* Passes when max |got - want| <= rel_tol · max |want| over the case. */
static void golden_compare(const char *name, const char *what, const float *got, const float *want,
                           int n, int vocab, double rel_tol) {
    double scale = 0, worst = 0;
    size_t at = 0, total = (size_t)n * (size_t)vocab;
    for (size_t i = 0; i < total; i++) {
        double w = fabs(want[i]), d = fabs((double)got[i] - want[i]);
        if (w > scale) scale = w;
        if (!(d <= worst)) { /* also catches NaN */
            worst = isnan(d) ? INFINITY : d;
            at = i;
        }
    }
    int ok = worst <= rel_tol * (scale > 1 ? scale : 1);
    CHECK_MSG(
        ok, "%s %s (%d positions): max |diff| %.3g at position %zu, token %zu (rel %.3g, tol %.3g)",
        name, what, n, worst, at / (size_t)vocab, at % (size_t)vocab,
        worst / (scale > 1 ? scale : 1), rel_tol);
    if (!ok) {
        size_t row = at / (size_t)vocab * (size_t)vocab;
        fprintf(stderr, "    got : ");
        for (int i = 0; i < 6 && i < vocab; i++) fprintf(stderr, "%10.5f ", got[row + (size_t)i]);
        fprintf(stderr, "\n    want: ");
        for (int i = 0; i < 6 && i < vocab; i++) fprintf(stderr, "%10.5f ", want[row + (size_t)i]);
        fprintf(stderr, "\n");
    }
}

#endif
