/* schema_gbnf_internal.h - internal to the JSON Schema compiler: what its three files share.
 * Other rooms call server/schema_gbnf.h. Which file holds what:
 *  - schema_gbnf.c: the entry points and the walk over schema keywords (sg_schema), $ref
 *    targets, enum/const, anyOf/oneOf/allOf; errors, JSON pointer paths and rule writing.
 *  - schema_gbnf_value.c: the GBNF text helpers (sg_put*), the shared rules written once per
 *    walk (SG_PRIMS, sg_any), strings (lengths, pattern, format) and numbers (ranges).
 *  - schema_gbnf_object.c: objects and arrays.
 * The sg_put* helpers return nothing: a failed append sets sg.oom, which sg_written checks
 * where rules are written. A function that compiles a part of the schema appends one GBNF
 * element to term and returns 1, 0 when no finite text matches it, or a negative STRATA_E*
 * code (sg.err set, naming the path). */
#ifndef STRATA_SCHEMA_GBNF_INTERNAL_H
#define STRATA_SCHEMA_GBNF_INTERNAL_H

#include <jansson.h>
#include <stddef.h>

#include "engine/base/err.h"
#include "engine/base/strbuf.h"

#define SG_MAX_DEPTH 64                 /* schema nesting */
#define SG_MAX_OUT (1u << 20)           /* grammar bytes */
#define SG_MAX_ITEMS 100                /* minItems / maxItems: each is an expanded repetition */
#define SG_MAX_LEN 1000                 /* minLength / maxLength: the parser's largest {m,n} */
#define SG_MAX_REFS 1024                /* distinct $ref targets */
#define SG_ANY_DEPTH 16                 /* nesting inside a free-form value */
#define SG_INT_MAX 999999999999999999LL /* 18 digits: jansson reads it as an int64 */
#define SG_PATH_MAX 512

/* Shared rules, written once per walk on first use; '@' stands for the grammar's name. */
enum {
    P_WS,
    P_U4,
    P_ESC,
    P_STR,
    P_CHR,
    P_FRAC,
    P_EXP,
    P_NUM,
    P_INT,
    P_DATE,
    P_TIME,
    P_DT,
    P_UUID,
    P_LABEL,
    P_EMAIL,
    P_SCALAR,
    P_COUNT
};

/* One $ref target: its rule, and whether it matches any finite text. */
typedef struct sg_target {
    const json_t *target; /* borrowed from the schema */
    int open, done;       /* this walk: being compiled / compiled */
    int prod;             /* matches some finite text (the last answer found) */
    int read_open;        /* prod was read while open this walk */
    int containers;       /* objects and arrays entered when it was opened */
} sg_target;

typedef struct sg {
    const json_t *root;
    const char *name;
    strbuf out; /* this walk's rules */
    strata_err *err;
    sg_target *refs;
    int n_refs, cap_refs;
    int n_aux;      /* helper rules name-1, name-2, ... so far */
    int depth;      /* schemas entered */
    int containers; /* objects and arrays entered */
    int changed;    /* a $ref's answer read while open changed: walk again */
    int oom;
    unsigned prims; /* SG_PRIMS written this walk */
    int any;        /* the any-value rules written this walk */
    char path[SG_PATH_MAX];
    size_t path_len;
} sg;

/* ---- schema_gbnf.c ---- */

/* Sets c->err to "json_schema: <what> at <path>"; returns code. */
int sg_fail(sg *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int sg_nomem(sg *c); /* STRATA_ENOMEM */

/* The path named in messages: push a segment (or a segment and an index), pop back to the
 * length push returned. */
size_t sg_push(sg *c, const char *seg);
size_t sg_push_i(sg *c, const char *seg, size_t i);
void sg_pop(sg *c, size_t at);

/* 0, or the error for out of memory or the grammar grown past SG_MAX_OUT. */
int sg_written(sg *c);
/* Writes a fresh helper rule `<name>-<k> ::= body`, appends its name to term; as sg_written. */
int sg_rule(sg *c, strbuf *term, const strbuf *body);

/* A non-negative integer keyword of s: def when absent. */
int sg_count(sg *c, const json_t *s, const char *key, long long def, long long *out);

/* Appends one GBNF element matching the instances of s (a subschema) to term. */
int sg_schema(sg *c, const json_t *s, strbuf *term);

/* ---- schema_gbnf_value.c ---- */

void sg_put(sg *c, strbuf *b, const char *s);
void sg_putf(sg *c, strbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void sg_put_lit(sg *c, strbuf *b, const char *s, size_t n);  /* a GBNF literal of UTF-8 text */
void sg_put_jstr(sg *c, strbuf *b, const char *s, size_t n); /* a JSON string, as jansson */
void sg_put_json(sg *c, strbuf *b, const json_t *v);         /* v as compact JSON */
void sg_put_rep(sg *c, strbuf *b, long lo, long hi);         /* {lo,hi}; hi < 0: unbounded */

/* Appends the name of shared rule id (a P_* value) to b, writing the rule on first use. */
void sg_prim(sg *c, strbuf *b, int id);
/* Any JSON value: returns 1 or an error. */
int sg_any(sg *c, strbuf *term);

int sg_string(sg *c, const json_t *s, strbuf *term);
int sg_numeric(sg *c, const json_t *s, int integer, strbuf *term); /* integer: type integer */

/* ---- schema_gbnf_object.c ---- */

int sg_object(sg *c, const json_t *s, strbuf *term);
int sg_array(sg *c, const json_t *s, strbuf *term);

#endif
