/* batch.c - the step's token layout. */
#include "engine/batch.h"

#include <stdlib.h>
#include <string.h>

int batch_buf_init(batch_buf *b, int step_tokens, int max_seqs, strata_err *err) {
    memset(b, 0, sizeof *b);
    b->step_tokens = step_tokens;
    b->max_seqs = max_seqs;
    b->slot = calloc((size_t)max_seqs, 4);
    b->start = calloc((size_t)max_seqs, 4);
    b->len = calloc((size_t)max_seqs, 4);
    b->pos0 = calloc((size_t)max_seqs, 4);
    b->tok_pos = calloc((size_t)step_tokens, 4);
    b->tok_seq = calloc((size_t)step_tokens, 4);
    if (!b->slot || !b->start || !b->len || !b->pos0 || !b->tok_pos || !b->tok_seq) {
        batch_buf_deinit(b);
        return strata_err_set(err, STRATA_ENOMEM, "batch: out of memory");
    }
    batch_buf_clear(b);
    return 0;
}

void batch_buf_deinit(batch_buf *b) {
    free(b->slot);
    free(b->start);
    free(b->len);
    free(b->pos0);
    free(b->tok_pos);
    free(b->tok_seq);
    memset(b, 0, sizeof *b);
}

void batch_buf_clear(batch_buf *b) {
    b->bt = (bk_batch){.slot = b->slot,
                       .start = b->start,
                       .len = b->len,
                       .pos0 = b->pos0,
                       .tok_pos = b->tok_pos,
                       .tok_seq = b->tok_seq};
}

int batch_buf_add(batch_buf *b, int slot, int pos0, int len) {
    bk_batch *bt = &b->bt;
    if (len <= 0 || bt->n_seqs >= b->max_seqs || bt->n_tokens + len > b->step_tokens) return -1;
    int s = bt->n_seqs++, first = bt->n_tokens;
    b->slot[s] = slot;
    b->start[s] = first;
    b->len[s] = len;
    b->pos0[s] = pos0;
    for (int i = 0; i < len; i++) {
        b->tok_pos[first + i] = pos0 + i;
        b->tok_seq[first + i] = s;
    }
    bt->n_tokens += len;
    return first;
}
