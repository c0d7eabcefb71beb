/* gbnf_text.h - writing GBNF grammar text (llama.cpp's format, engine/constrain/gbnf.c):
 * the pieces the server's grammar writers share (forced tool calls, choices, reasoning). */
#ifndef STRATA_GBNF_TEXT_H
#define STRATA_GBNF_TEXT_H

#include <stddef.h>

#include "engine/base/strbuf.h"

/* Appends s[0..n) as a GBNF string literal: quoted, with ", \ and control bytes escaped
 * (other bytes, UTF-8 included, as they are). 0 or STRATA_ENOMEM. */
int gbnf_literal(strbuf *out, const char *s, size_t n);

/* Appends the rule `name ::= ...` matching any text that does not contain end, followed by
 * end: what a model writes up to a closing tag. The text may not hold end's first byte
 * right before end (a one-byte blind spot that keeps the rule simple and unambiguous). */
int gbnf_until(strbuf *out, const char *name, const char *end);

#endif
