/* model_test_open.h - the options the model tests open a checkpoint with: one sequence,
 * the context and step sizes the test needs, the weights' dtype and quantization; a test
 * sets what else it varies on the options it gets back. Test-only; shared by
 * tests/unit/test_quant_model.c and test_gguf_model.c. */
#ifndef STRATA_MODEL_TEST_OPEN_H
#define STRATA_MODEL_TEST_OPEN_H

#include <stdio.h>

#include "models/model.h"

/* weight_dtype: DTYPE_COUNT keeps the stored dtypes; quant: a block dtype, or F32 for none. */
static inline model_opts model_test_opts(const char *path, dtype weight_dtype, dtype quant,
                                         int ctx_size, int step_tokens) {
    return (model_opts){.path = path,
                        .weight_dtype = weight_dtype,
                        .quant = quant,
                        .max_seqs = 1,
                        .ctx_size = ctx_size,
                        .step_tokens = step_tokens};
}

/* The model, or NULL with the reason printed. */
static inline model *model_test_open(backend *b, const model_opts *o) {
    model *m = NULL;
    strata_err err = {0};
    if (model_open(&m, o, b, &err)) fprintf(stderr, "%s: %s\n", o->path, err.msg);
    return m;
}

#endif
