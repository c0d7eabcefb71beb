/* toolcall_internal.h - what the tool-call parser's files share: the cursor a call is
 * parsed with, the two forms' parsers and the JSON pieces they write arguments with.
 *
 * A form's parser reads one call from its opening marker over the text that has arrived
 * so far and answers DONE (the call ends at the cursor), BAD (no text that may still
 * arrive makes this a call) or MORE (the text ends before that is known; never when
 * final). The answer for a text never changes when more text arrives behind it, which is
 * what makes a stream cut anywhere parse like one piece. Given name and args it also
 * writes the call (only after a first pass without them said DONE, so a call that is
 * still arriving costs no allocation); given NULL it only checks. */
#ifndef STRATA_TOOLCALL_INTERNAL_H
#define STRATA_TOOLCALL_INTERNAL_H

#include <jansson.h>
#include <stddef.h>

#include "engine/base/err.h"
#include "engine/base/strbuf.h"

/* Not 0, which the strbuf calls the parsers make return on success. */
enum { TOOLCALL_DONE = 1, TOOLCALL_MORE, TOOLCALL_BAD };

/* The longest tool or argument name we wait for: a marker followed by this much text
 * without its closing '>' / '{' / ':' is not a call, so it is not held back longer. */
#define TOOLCALL_NAME_MAX 256

typedef struct toolcall_cur {
    const char *s; /* the call's text as far as it has arrived, from its opening marker */
    size_t n, i;   /* length, read position */
    int final;     /* no more text will arrive */
    /* A parse that ran out inside an open value (an XML value, a Gemma string) leaves
     * where its search for the closing token may go on: the value starting at hint_at has
     * no closing token before hint_from. The next parse of the same call, over a longer
     * text, starts its search there, so a long value fed in small pieces costs linear
     * time, not quadratic. */
    size_t hint_at, hint_from;
} toolcall_cur;

/* The answer when the text ran out at the cursor: MORE, or BAD once final. */
static inline int toolcall_cur_out(const toolcall_cur *c) {
    return c->final ? TOOLCALL_BAD : TOOLCALL_MORE;
}

/* Where the search for the token closing the value that starts at at may begin. */
static inline size_t toolcall_cur_resume(const toolcall_cur *c, size_t at) {
    return c->hint_at == at && c->hint_from > at ? c->hint_from : at;
}

/* The text ran out before the value starting at at was closed, and no closing token
 * starts before from: records the hint, answers MORE (BAD once final). */
static inline int toolcall_cur_wait(toolcall_cur *c, size_t at, size_t from) {
    c->hint_at = at;
    c->hint_from = from;
    return toolcall_cur_out(c);
}

/* The first position at which a token of len bytes not found in s[from..n) may still
 * start once more text arrives. */
static inline size_t toolcall_cur_tail(const toolcall_cur *c, size_t from, size_t len) {
    return c->n - from < len ? from : c->n - (len - 1);
}

/* lit at the cursor: DONE (the cursor moves past it), MORE (the text ends inside a
 * prefix of it) or BAD. */
int toolcall_cur_lit(toolcall_cur *c, const char *lit);
/* Like toolcall_cur_lit but does not move: 1 there, 0 not there, -1 the text ends in a
 * prefix of it (even when final: the caller decides). */
int toolcall_cur_at(const toolcall_cur *c, size_t at, const char *lit);
void toolcall_cur_ws(toolcall_cur *c); /* skips spaces, tabs, CR and LF */

/* Reads a name up to stop (not included; the cursor ends on it): 1..TOOLCALL_NAME_MAX
 * bytes, none of them whitespace or one of <>{}[]"'=,: . DONE, MORE or BAD. */
int toolcall_cur_name(toolcall_cur *c, char stop, size_t *start, size_t *len);

/* The two forms. name and args (both or neither) receive the tool's name and the JSON
 * object text of its arguments. A negative STRATA_E* only when writing them fails. */
int toolcall_xml_parse(toolcall_cur *c, const json_t *tools, strbuf *name, strbuf *args);
int toolcall_gemma_parse(toolcall_cur *c, strbuf *name, strbuf *args);

/* JSON (RFC 8259), checked without building anything: 1 when s[0..n) is exactly one
 * value, whitespace around it allowed; nesting deeper than 128 is refused. */
int toolcall_json_valid(const char *s, size_t n);
/* 1 when s[0..n) is exactly a JSON number; *integral: it has no fraction or exponent. */
int toolcall_json_number(const char *s, size_t n, int *integral);
/* 1 when some object of the valid JSON s[0..n) has a key twice (compared as written: the
 * parsers write every key the same way). Allocates nothing. */
int toolcall_json_dup_keys(const char *s, size_t n);
/* Appends s[0..n) (UTF-8) as a JSON string literal. */
int toolcall_json_add_string(strbuf *b, const char *s, size_t n);
/* s[0..*n) without the whitespace around it: returns the new start, shortens *n. */
const char *toolcall_json_trim(const char *s, size_t *n);

#endif
