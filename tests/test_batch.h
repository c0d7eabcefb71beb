/* test_batch.h - a step's bk_batch over a test's own fixed arrays, laid out by the
 * engine's batch_buf_add (engine/batch.c), so the tests build steps as the engine does.
 * Used by tests/cpu_test_util.h and the CUDA op test. Test-only. */
#ifndef STRATA_TEST_BATCH_H
#define STRATA_TEST_BATCH_H

#include <stdlib.h>

#include "engine/batch.h"

/* The arrays a step of n_seqs sequences needs (max_seqs / max_tokens long); sequence s
 * has len[s] tokens from position pos0[s] in slot[s]. Aborts when they do not fit: a bug
 * of the test itself. */
typedef struct test_batch_arrays {
    int32_t *slot, *start, *len, *pos0, *tok_pos, *tok_seq;
    int max_tokens, max_seqs;
} test_batch_arrays;

static inline bk_batch test_batch_fill(test_batch_arrays a, int n_seqs, const int *len,
                                       const int *pos0, const int *slot) {
    batch_buf bb = {.slot = a.slot,
                    .start = a.start,
                    .len = a.len,
                    .pos0 = a.pos0,
                    .tok_pos = a.tok_pos,
                    .tok_seq = a.tok_seq,
                    .step_tokens = a.max_tokens,
                    .max_seqs = a.max_seqs};
    batch_buf_clear(&bb);
    for (int s = 0; s < n_seqs; s++)
        if (batch_buf_add(&bb, slot[s], pos0[s], len[s]) < 0) abort();
    return bb.bt;
}

/* The arrays of a struct with fixed-size slot .. tok_seq members, as both tests have. */
#define TEST_BATCH_ARRAYS(t)                                                                       \
    ((test_batch_arrays){(t)->slot, (t)->start, (t)->len, (t)->pos0, (t)->tok_pos, (t)->tok_seq,   \
                         (int)(sizeof(t)->tok_pos / sizeof(t)->tok_pos[0]),                        \
                         (int)(sizeof(t)->slot / sizeof(t)->slot[0])})

#endif
