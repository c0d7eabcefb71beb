/* detok.h - streaming detokenizer with stop strings and reasoning split.
 *
 * Turns generated ids into text chunks as they arrive: never emits a partial UTF-8
 * character, holds back any suffix that could be the start of a stop string (stop
 * strings are never emitted), and routes text between the thinking delimiters
 * (<think> ... </think>) to the reasoning channel when enabled. The concatenation of
 * all emitted chunks equals decode(all ids) up to the first stop string.
 * Thread: one owner (the engine or the request's connection). */
#ifndef STRATA_DETOK_H
#define STRATA_DETOK_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/text/tokenizer.h"

typedef struct detok detok;

typedef struct detok_opts {
    int skip_special; /* drop special added tokens from the text */
    int n_stop;
    const char *const *stop;     /* stop strings, copied at create */
    int split_reasoning;         /* text inside <think>...</think> goes to reasoning */
    int start_in_reasoning;      /* the prompt already opened <think> */
    const char *reasoning_open;  /* delimiters; NULL: "<think>" / "</think>". A special */
    const char *reasoning_close; /* token spelling one is kept even with skip_special */
} detok_opts;

/* Output of one push: slices valid until the next call on the same detok. */
typedef struct detok_out {
    const char *text; /* new content text */
    size_t text_len;
    const char *reasoning; /* new reasoning text */
    size_t reasoning_len;
    int stopped; /* a stop string matched: no further output */
} detok_out;

/* t is borrowed and must outlive the detok. Caller frees with detok_free. Stop strings
 * and delimiters must be non-empty valid UTF-8 (else STRATA_EINVALID). */
int detok_create(detok **out, const tokenizer *t, const detok_opts *o, strata_err *err);
void detok_free(detok *d);

/* Feeds one generated id. An id outside the vocabulary is STRATA_ERANGE. After a stop
 * string matched, further ids produce no output. */
int detok_push(detok *d, int32_t id, detok_out *out, strata_err *err);
/* End of generation: flushes held-back text (an incomplete UTF-8 tail becomes
 * U+FFFD as in HF decode). */
int detok_finish(detok *d, detok_out *out, strata_err *err);

#endif
