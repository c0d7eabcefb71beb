/* batch.h - builds the bk_batch of one step: sequences of contiguous tokens.
 * The arrays are allocated once at init for the step's maxima. Thread: the owner. */
#ifndef STRATA_BATCH_H
#define STRATA_BATCH_H

#include "kernels/backend.h"

typedef struct batch_buf {
    bk_batch bt; /* points at the arrays below */
    int32_t *slot, *start, *len, *pos0, *tok_pos, *tok_seq;
    int step_tokens, max_seqs;
} batch_buf;

int batch_buf_init(batch_buf *b, int step_tokens, int max_seqs, strata_err *err);
void batch_buf_deinit(batch_buf *b);
void batch_buf_clear(batch_buf *b);
/* Appends len tokens of the sequence in slot, the first at position pos0. Returns
 * the index of its first token in the step, or -1 when the step is full. */
int batch_buf_add(batch_buf *b, int slot, int pos0, int len);

#endif
