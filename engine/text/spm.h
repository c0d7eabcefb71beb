/* spm.h - a SentencePiece model (tokenizer.model) behind a C interface.
 *
 * A thin shim over libsentencepiece for checkpoints that ship only tokenizer.model;
 * tokenizer.c decides when to use it. Encoding and decoding are exactly
 * sentencepiece's (no BOS/EOS added, no extra options). No C++ exception crosses this
 * interface: failures come back as STRATA_E* codes with the message in err.
 * Thread: spm_load/spm_free on one thread; the rest from any thread concurrently. */
#ifndef STRATA_SPM_H
#define STRATA_SPM_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spm spm;

/* Loads a serialized ModelProto from path. STRATA_ENOTFOUND when the file is missing,
 * STRATA_EFORMAT when it is not a sentencepiece model. Caller frees with spm_free. */
int spm_load(spm **out, const char *path, strata_err *err);
void spm_free(spm *s); /* accepts NULL */

/* Encodes len bytes of UTF-8 text (need not be NUL-terminated). *ids is malloc'ed
 * (never NULL on success, even when *n is 0); caller frees with free(). */
int spm_encode(const spm *s, const char *text, size_t len, int32_t **ids, size_t *n,
               strata_err *err);

/* Decodes n ids; an id outside [0, vocab size) is STRATA_ERANGE naming it. *text is
 * malloc'ed and NUL-terminated, *len its length; caller frees with free(). */
int spm_decode(const spm *s, const int32_t *ids, size_t n, char **text, size_t *len,
               strata_err *err);

/* Buffers one caller reuses across spm_decode_ws calls (the ids handed to
 * libsentencepiece and the text it writes), grown to their high-water mark and kept.
 * Made by the first spm_decode_ws on *w == NULL; one thread at a time; free with
 * spm_ws_free (accepts NULL). */
typedef struct spm_ws spm_ws;
void spm_ws_free(spm_ws *w);

/* spm_decode into *w: *text (NUL-terminated, *len bytes) stays valid until the next call
 * with *w. Once *w has grown only libsentencepiece's own work allocates: its Decode
 * builds a SentencePieceText proto (a message and strings per piece) on every call, a
 * few allocation calls per id (about 150 for a 64-id window of spm_tiny; measured by
 * tests/unit/test_decode_alloc.c), which no public entry point of it avoids. */
int spm_decode_ws(const spm *s, const int32_t *ids, size_t n, spm_ws **w, const char **text,
                  size_t *len, strata_err *err);

int spm_vocab_size(const spm *s);
/* The raw piece ("\xe2\x96\x81the", "<0x0A>"), owned by s; NULL for an out-of-range id. */
const char *spm_id_to_piece(const spm *s, int32_t id);
/* -1 when piece is not in the vocabulary (sentencepiece itself would answer unk_id). */
int32_t spm_piece_to_id(const spm *s, const char *piece);
/* -1 when the model defines none. */
int32_t spm_bos_id(const spm *s);
int32_t spm_eos_id(const spm *s);

#ifdef __cplusplus
}
#endif

#endif
