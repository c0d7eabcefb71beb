/* constrain.h - constrained decoding: which tokens may come next so that the output stays
 * a prefix of something a grammar accepts, token by token over the real vocabulary.
 *
 * A constrain_vocab holds every token's bytes (what it adds to the output text) once per
 * tokenizer, arranged so a mask costs far less than a walk of the whole vocabulary; a
 * constrain is one sequence's position in its grammar: one JSON object (response_format
 * json_object, a hand-written recognizer) or any context-free grammar written in llama.cpp's
 * GBNF (JSON schemas, regular expressions, choices and tool calls are compiled to it by
 * their callers). Bytes are the unit, so a token
 * that spans grammar terminals, or splits a UTF-8 character, is judged by exactly what it
 * appends. Thread: a vocab is read-only after build (shared by every sequence); a constrain
 * belongs to one sequence, used by one thread at a time. */
#ifndef STRATA_CONSTRAIN_H
#define STRATA_CONSTRAIN_H

#include <stdint.h>

#include "engine/base/err.h"
#include "engine/base/strbuf.h"
#include "engine/text/tokenizer.h"

typedef struct constrain_vocab constrain_vocab;
typedef struct constrain constrain;

/* The bytes of tokens [0, n_ids) of t (n_ids: the model's vocabulary rows, which may exceed
 * the tokenizer's: ids past it never fit). Special tokens fit no grammar (the engine
 * allows the end-of-sequence ids itself where the grammar may end) unless it was made with
 * CONSTRAIN_SPECIALS; tokens that append nothing or whose bytes the decoder hides never
 * do. About 0.3 s for a 250k vocabulary.
 * Errors: STRATA_EINVALID (n_ids < 0), STRATA_ENOMEM. Caller frees with
 * constrain_vocab_free. */
int constrain_vocab_build(constrain_vocab **out, const tokenizer *t, int n_ids, strata_err *err);
void constrain_vocab_free(constrain_vocab *v); /* accepts NULL */

/* A sequence's grammar: one JSON object (JSON as RFC 8259, nesting at most 64 deep),
 * whitespace before it, nothing after it (the end of the sequence is the only way on). So
 * that a model cannot pad forever or write what jansson refuses, whitespace runs, number
 * digits, \u0000 and lone surrogate escapes are limited (engine/constrain/json_pda.c says
 * how). v is borrowed for c's life. */
int constrain_json_object(constrain **out, const constrain_vocab *v, strata_err *err);
void constrain_free(constrain *c); /* accepts NULL */

/* A sequence's grammar from GBNF text (len bytes): its rule start (NULL: "root", which the
 * text must define either way) is the whole output. The grammar's tables grow as the output
 * goes on and are rebuilt past 64 MB. Errors: the grammar's (STRATA_EINVALID naming the
 * line or rule, engine/constrain/grammar.h), STRATA_ENOMEM. */
int constrain_grammar(constrain **out, const constrain_vocab *v, const char *gbnf, size_t len,
                      const char *start, strata_err *err);
/* As constrain_grammar, with flags: CONSTRAIN_SPECIALS lets a special token (an added
 * token the vocab keeps apart, such as Gemma 4's <|tool_call> and <|"|>) fit where its
 * whole text (its added-token content) fits the grammar, and constrain_accept of it feeds
 * that text. For call syntaxes written with such tokens; the detokenizer must then keep
 * them in the output (no skip_special) so that what follows reads the same text. The
 * end-of-sequence and stop ids among them are the engine's to exclude. */
#define CONSTRAIN_SPECIALS 1
int constrain_grammar_ex(constrain **out, const constrain_vocab *v, const char *gbnf, size_t len,
                         const char *start, int flags, strata_err *err);
/* The same checks without a vocabulary: 0 when constrain_grammar would accept the text. */
int constrain_grammar_check(const char *gbnf, size_t len, strata_err *err);

/* allow[i] = 1 for every token i < n whose bytes keep the output a prefix of the grammar's
 * language, else 0 (ids past the vocabulary's rows included). Returns how many are allowed,
 * or -1 when a grammar's tables could not grow (out of memory; allow all 0). The JSON
 * recognizer allocates nothing; a grammar fills its tables on first use of a state. */
int constrain_mask(constrain *c, uint8_t *allow, int n);
/* Moves past token id: 0, or -1 when its bytes do not fit (the state is then unchanged). */
int constrain_accept(constrain *c, int32_t id);
/* 1 when the output so far is a whole sentence of the grammar (the end may come, or more),
 * 2 when nothing but the end may come (the object closed), else 0. */
int constrain_complete(const constrain *c);

/* ---- grammar text ---------------------------------------------------------------------- */

/* Appends to out GBNF rules (llama.cpp's grammar format, engine/constrain/gbnf.c) whose
 * rule `name` matches exactly the strings the regular expression re (len bytes) matches as
 * a whole (as Python's re.fullmatch does; ^ and $ at its ends are accepted and change
 * nothing). Helper rules are named name-1, name-2, ... The syntax is the subset JSON
 * Schema's "pattern" and vLLM's guided_regex use in practice (regex_gbnf.c lists it);
 * anything else (lookaround, backreferences, anchors inside) is STRATA_EUNSUPPORTED, a
 * malformed expression STRATA_EINVALID, each with a message naming the offset. On error
 * out may hold a partial rule: discard it. */
int constrain_regex_gbnf(const char *re, size_t len, const char *name, strbuf *out,
                         strata_err *err);

#endif
