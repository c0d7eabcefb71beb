/* test_model.h - opening a checkpoint for a model-level test: the options every such test
 * starts from, and an open whose failure names the path. Shared by tests/golden_run.h and
 * the unit tests test_prefix_cache.c, test_decode_alloc.c, test_quant_model.c and
 * test_gguf_model.c. Test-only. */
#ifndef STRATA_TEST_MODEL_H
#define STRATA_TEST_MODEL_H

#include <stdio.h>

#include "models/model.h"

/* The checkpoint's own weight dtype; ctx 0: the checkpoint's own context. The caller sets
 * whatever else its test is about. */
static inline model_opts test_model_opts(const char *path, int max_seqs, int ctx, int step_tokens) {
    model_opts o = {.path = path,
                    .weight_dtype = DTYPE_COUNT,
                    .max_seqs = max_seqs,
                    .ctx_size = ctx,
                    .step_tokens = step_tokens};
    return o;
}

/* The model, or NULL after printing why it did not open: the caller decides whether that
 * fails its test. */
static inline model *test_model_open(backend *b, const model_opts *o) {
    model *m = NULL;
    strata_err err = {0};
    if (model_open(&m, o, b, &err)) {
        fprintf(stderr, "%s: %s\n", o->path, err.msg);
        return NULL;
    }
    return m;
}

#endif
