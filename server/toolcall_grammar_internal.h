/* toolcall_grammar_internal.h - what the forced-call grammar writers share: the XML form's
 * (toolcall_grammar.c, which also picks the writer) and Gemma 4's (toolcall_grammar_gemma.c). */
#ifndef STRATA_TOOLCALL_GRAMMAR_INTERNAL_H
#define STRATA_TOOLCALL_GRAMMAR_INTERNAL_H

#include <jansson.h>

#include "engine/base/err.h"
#include "engine/base/strbuf.h"

/* 1 when key is in the "required" array of the object schema params. */
int toolcall_grammar_required(const json_t *params, const char *key);

/* toolcall_grammar for TOOLCALL_GEMMA4 (its contract is toolcall_grammar.h's). */
int toolcall_grammar_gemma(const json_t *tools, const char *name, int single, strbuf *out,
                           strata_err *err);

#endif
