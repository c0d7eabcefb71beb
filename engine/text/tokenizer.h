/* tokenizer.h - text <-> token ids, byte-identical to Hugging Face tokenizers.
 *
 * Loads a checkpoint directory's tokenizer.json (+ tokenizer_config.json), or its
 * tokenizer.model through libsentencepiece when that is all it ships, or a GGUF file's
 * tokenizer.ggml.* keys (tok_load_ggml). Read-only after load: any thread may encode /
 * decode concurrently. */
#ifndef STRATA_TOKENIZER_H
#define STRATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"

typedef struct tokenizer tokenizer;

/* dir holds tokenizer.json or tokenizer.model. Caller frees with tok_free. */
int tok_load(tokenizer **out, const char *dir, strata_err *err);
/* The same from the bytes of a tokenizer.json and, optionally (NULL), of a
 * tokenizer_config.json. Errors: STRATA_EFORMAT (malformed), STRATA_EUNSUPPORTED (a
 * component type outside the supported subset, named in the message). */
int tok_load_json(tokenizer **out, const char *json, size_t len, const char *config,
                  size_t config_len, strata_err *err);
void tok_free(tokenizer *t);

/* A GGUF file's tokenizer.ggml.* keys as plain arrays, all borrowed. The tokenizer room
 * does not read GGUF files (models/load/gguf.h does); its caller copies the keys in.
 * Strings are bytes with a length, not NUL-terminated. */
typedef struct tok_ggml_str {
    const char *p;
    size_t len;
} tok_ggml_str;

typedef struct tok_ggml {
    const char *file;           /* named in messages */
    tok_ggml_str model, pre;    /* tokenizer.ggml.model / .pre; p NULL when absent */
    const tok_ggml_str *tokens; /* tokenizer.ggml.tokens [n_tokens]; NULL when absent */
    size_t n_tokens;
    const int32_t *token_type; /* tokenizer.ggml.token_type [n_token_type]; NULL: absent */
    size_t n_token_type;
    const tok_ggml_str *merges; /* tokenizer.ggml.merges [n_merges] "a b"; NULL: absent */
    size_t n_merges;
    int64_t bos_id, eos_id, unk_id; /* tokenizer.ggml.*_token_id; -1 when absent */
    int add_bos, add_eos;           /* tokenizer.ggml.add_{bos,eos}_token; -1 when absent */
} tok_ggml;

/* A tokenizer from GGUF metadata, encoding and decoding as the Hugging Face
 * tokenizer.json the converter read: tokenizer.ggml.model "gpt2" (byte-level BPE), with
 * the pre-tokenizer tokenizer.ggml.pre names (qwen35, qwen2, tekken, gpt-2), or "gemma4"
 * (Gemma's raw-UTF-8 BPE with byte fallback; its added tokens recovered from the
 * vocabulary, see tok_ggml.c). The one difference: the special flag follows the token
 * types (CONTROL counts as special, also where the checkpoint does not flag it, and a
 * recovered Gemma token is special only when a bos / eos / unk key names it). Errors name
 * v->file and the key: STRATA_EFORMAT (a missing or inconsistent key), STRATA_EUNSUPPORTED
 * (another model or pre name). Caller frees with tok_free. */
int tok_load_ggml(tokenizer **out, const tok_ggml *v, strata_err *err);

/* Encodes len bytes of text (need not be NUL-terminated). HF can only be given valid
 * text, so each maximal invalid UTF-8 subpart is first replaced by U+FFFD (as Python's
 * bytes.decode("utf-8", "replace") does). add_special: run the post-processor (BOS/EOS of TemplateProcessing).
 * *ids is malloc'ed, caller frees. */
int tok_encode(const tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids,
               size_t *n_ids, strata_err *err);

/* Decodes ids to text (malloc'ed, NUL-terminated, caller frees); skip_special drops
 * added tokens flagged special. Unknown ids are an error naming the id. */
int tok_decode(const tokenizer *t, const int32_t *ids, size_t n_ids, int skip_special, char **text,
               size_t *len, strata_err *err);

int tok_vocab_size(const tokenizer *t);                         /* highest id + 1 */
int32_t tok_piece_to_id(const tokenizer *t, const char *piece); /* -1 when absent */
const char *tok_id_to_piece(const tokenizer *t, int32_t id);    /* raw vocab string; NULL if none */
int tok_is_special(const tokenizer *t, int32_t id);             /* added token with special:true */
/* From tokenizer_config.json (-1 when unset). */
int32_t tok_bos_id(const tokenizer *t);
int32_t tok_eos_id(const tokenizer *t);
const char *tok_bos_token(const tokenizer *t); /* NULL when unset */
const char *tok_eos_token(const tokenizer *t);

#endif
