/* schema_gbnf.c - compiles a JSON Schema into GBNF rules (server/schema_gbnf.h says exactly
 * what the grammar accepts).
 *
 * One walk over the schema writes a rule per object, array and $ref target, and the shared
 * rules (whitespace, string, number, any value) once each. Every step also answers whether
 * its part matches any finite text at all: one that cannot (a required property that recurses
 * forever, false, an empty enum) is left out of alternations and optional places, because the
 * grammar parser refuses a rule that derives nothing. A $ref met again while its target is
 * still being compiled answers with what the previous walk found, so the walk repeats until no
 * such answer changes (the least fixed point; most schemas need one walk, recursive ones two)
 * and only the last walk's text is kept. Text is appended with sticky out-of-memory tracking
 * (sg.oom), checked where rules are written, so the many small appends need no checks. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/utf8.h"
#include "engine/constrain/constrain.h"
#include "server/schema_gbnf.h"

#define SG_MAX_DEPTH 64                 /* schema nesting */
#define SG_MAX_OUT (1u << 20)           /* grammar bytes */
#define SG_MAX_ITEMS 100                /* minItems / maxItems: each is an expanded repetition */
#define SG_MAX_LEN 1000                 /* minLength / maxLength: the parser's largest {m,n} */
#define SG_MAX_REFS 1024                /* distinct $ref targets */
#define SG_ANY_DEPTH 16                 /* nesting inside a free-form value */
#define SG_INT_MAX 999999999999999999LL /* 18 digits: jansson reads it as an int64 */
#define SG_PATH_MAX 512

/* Keywords that constrain and that this compiler reads; everything else not in
 * SG_UNSUPPORTED is an annotation or unknown, and ignored. */
static const char *const SG_USED[] = {"type",
                                      "enum",
                                      "const",
                                      "properties",
                                      "required",
                                      "items",
                                      "prefixItems",
                                      "minItems",
                                      "maxItems",
                                      "additionalProperties",
                                      "anyOf",
                                      "oneOf",
                                      "allOf",
                                      "$ref",
                                      "additionalItems",
                                      "minLength",
                                      "maxLength",
                                      "pattern",
                                      "format",
                                      "minimum",
                                      "maximum",
                                      "exclusiveMinimum",
                                      "exclusiveMaximum",
                                      NULL};

static const char *const SG_UNSUPPORTED[] = {"not",
                                             "if",
                                             "then",
                                             "else",
                                             "patternProperties",
                                             "dependentRequired",
                                             "dependentSchemas",
                                             "dependencies",
                                             "multipleOf",
                                             "minProperties",
                                             "maxProperties",
                                             "contains",
                                             "minContains",
                                             "maxContains",
                                             "propertyNames",
                                             "unevaluatedProperties",
                                             "unevaluatedItems",
                                             "$dynamicRef",
                                             "$recursiveRef",
                                             "contentSchema",
                                             NULL};

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

#define SG_SC "[^\"\\\\\\x00-\\x1F]" /* a string character needing no escape */
#define SG_HX "[0-9a-fA-F]"
#define SG_ELC "[A-Za-z0-9!#\\x24\\x25&'*+/=?\\x5E_\\x60{|}\\x7E\\x2D]" /* email local part */

static const struct sg_prim {
    const char *suffix, *body;
    unsigned deps;
} SG_PRIMS[P_COUNT] = {
    [P_WS] = {"ws", "( \" \" | \"\\n\" [ \\t]{0,20} )?", 0},
    /* \u escapes: never 0000 (jansson refuses NUL) nor a lone surrogate */
    [P_U4] = {"u4",
              "[1-9a-cA-Ce-fE-F] " SG_HX "{3} | \"0\" ( [1-9a-fA-F] " SG_HX "{2} | \"0\" "
              "( [1-9a-fA-F] " SG_HX " | \"0\" [1-9a-fA-F] ) ) | [dD] [0-7] " SG_HX "{2} | "
              "[dD] [89abAB] " SG_HX "{2} \"\\\\u\" [dD] [c-fC-F] " SG_HX "{2}",
              0},
    [P_ESC] = {"esc", "\"\\\\\" ( [\"\\\\/bfnrt] | \"u\" @-u4 )", 1u << P_U4},
    /* the body is one class star between escapes: the matcher's fast path */
    [P_STR] = {"str", "\"\\\"\" " SG_SC "* ( @-esc " SG_SC "* )* \"\\\"\"", 1u << P_ESC},
    [P_CHR] = {"chr", SG_SC " | @-esc", 1u << P_ESC},
    [P_FRAC] = {"frac", "\".\" [0-9]{1,20}", 0},
    [P_EXP] = {"exp", "[eE] [-+]? [0-9]{1,2}", 0},
    [P_NUM] = {"num", "\"-\"? ( \"0\" | [1-9] [0-9]{0,17} ) @-frac? @-exp?",
               1u << P_FRAC | 1u << P_EXP},
    [P_INT] = {"int", "\"0\" | \"-\"? [1-9] [0-9]{0,17}", 0},
    /* a real calendar day (what Python's date.fromisoformat and jsonschema's format checker
     * accept): year 0001..9999, the month's days, February 29 in leap years only */
    [P_DATE] = {"date",
                "( [0-9]{2} ( \"0\" [48] | [2468] [048] | [13579] [26] ) | ( \"0\" [48] | "
                "[2468] [048] | [13579] [26] ) \"00\" ) \"-02-29\" | ( [1-9] [0-9]{3} | \"0\" "
                "( [1-9] [0-9]{2} | \"0\" ( [1-9] [0-9] | \"0\" [1-9] ) ) ) \"-\" ( \"02-\" "
                "( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) | ( \"0\" [13578] | \"1\" [02] ) "
                "\"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | ( \"0\" [469] | \"11\" ) "
                "\"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) )",
                0},
    /* no leap second: checkers that parse times refuse :60 */
    [P_TIME] = {"time",
                "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] "
                "( \".\" [0-9]{1,9} )? ( [zZ] | [-+] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] "
                "[0-9] )",
                0},
    [P_DT] = {"date-time", "@-date [tT] @-time", 1u << P_DATE | 1u << P_TIME},
    [P_UUID] = {"uuid",
                SG_HX "{8} \"-\" " SG_HX "{4} \"-\" " SG_HX "{4} \"-\" " SG_HX "{4} \"-\" " SG_HX
                      "{12}",
                0},
    [P_LABEL] = {"label", "[A-Za-z0-9] ( [A-Za-z0-9\\x2D]* [A-Za-z0-9] )?", 0},
    [P_EMAIL] = {"email", SG_ELC "+ ( \".\" " SG_ELC "+ )* \"\\x40\" @-label ( \".\" @-label )+",
                 1u << P_LABEL},
    [P_SCALAR] = {"scalar", "@-str | @-num | \"true\" | \"false\" | \"null\"",
                  1u << P_STR | 1u << P_NUM},
};

static const struct sg_format {
    const char *name;
    int prim;
} SG_FORMATS[] = {
    {"date-time", P_DT}, {"date", P_DATE}, {"time", P_TIME}, {"uuid", P_UUID}, {"email", P_EMAIL}};

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

/* ---- text ------------------------------------------------------------------------------ */

/* s NULL: a buffer that failed to grow (c->oom is set already) */
static void put(sg *c, strbuf *b, const char *s) {
    if (s && strbuf_adds(b, s)) c->oom = 1;
}

static void putf(sg *c, strbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void putf(sg *c, strbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp || strbuf_add(b, tmp, (size_t)n)) c->oom = 1;
}

/* One code point in GBNF, plain ASCII: printable characters stay, the rest are escapes (in a
 * class also the characters that mean something there). */
static void put_cp(sg *c, strbuf *b, uint32_t cp, int in_class) {
    if (cp >= 0x20 && cp < 0x7F && cp != '"' && cp != '\\' &&
        !(in_class && (cp == '[' || cp == ']' || cp == '^' || cp == '-'))) {
        if (strbuf_addc(b, (char)cp)) c->oom = 1;
    } else if (cp == '"' || cp == '\\') {
        putf(c, b, "\\%c", (char)cp);
    } else if (cp < 0x100) putf(c, b, "\\x%02X", (unsigned)cp);
    else if (cp < 0x10000) putf(c, b, "\\u%04X", (unsigned)cp);
    else putf(c, b, "\\U%08X", (unsigned)cp);
}

/* A GBNF literal for the UTF-8 text s[0..n). */
static void put_lit(sg *c, strbuf *b, const char *s, size_t n) {
    put(c, b, "\"");
    for (size_t i = 0; i < n;) {
        int len = unicode_utf8_check((const uint8_t *)s + i, n - i);
        uint32_t cp = (uint8_t)s[i];
        if (len > 0) cp = unicode_utf8_decode((const uint8_t *)s + i, &len);
        else len = 1;
        put_cp(c, b, cp, 0);
        i += (size_t)len;
    }
    put(c, b, "\"");
}

/* A JSON string as jansson writes it. */
static void put_jstr(sg *c, strbuf *b, const char *s, size_t n) {
    put(c, b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        const char *e = ch == '"'    ? "\\\""
                        : ch == '\\' ? "\\\\"
                        : ch == '\b' ? "\\b"
                        : ch == '\f' ? "\\f"
                        : ch == '\n' ? "\\n"
                        : ch == '\r' ? "\\r"
                        : ch == '\t' ? "\\t"
                                     : NULL;
        if (e) put(c, b, e);
        else if (ch < 0x20) putf(c, b, "\\u%04X", ch);
        else if (strbuf_addc(b, (char)ch)) c->oom = 1;
    }
    put(c, b, "\"");
}

/* v as compact JSON: keys in their order, reals in the shortest form that reads back. */
static void put_json(sg *c, strbuf *b, const json_t *v) {
    if (json_is_string(v)) return put_jstr(c, b, json_string_value(v), json_string_length(v));
    if (json_is_integer(v)) return putf(c, b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    if (json_is_real(v)) {
        double d = json_real_value(v);
        char tmp[40];
        for (int p = 1; p <= 17; p++) {
            snprintf(tmp, sizeof tmp, "%.*g", p, d);
            if (strtod(tmp, NULL) == d) break;
        }
        return put(c, b, tmp);
    }
    if (json_is_array(v)) {
        put(c, b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) put(c, b, ",");
            put_json(c, b, json_array_get(v, i));
        }
        return put(c, b, "]");
    }
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        int first = 1;
        put(c, b, "{");
        json_object_foreach((json_t *)v, k, x) {
            if (!first) put(c, b, ",");
            first = 0;
            put_jstr(c, b, k, strlen(k));
            put(c, b, ":");
            put_json(c, b, x);
        }
        return put(c, b, "}");
    }
    put(c, b, json_is_true(v) ? "true" : json_is_false(v) ? "false" : "null");
}

/* x{lo,hi} as a GBNF suffix (hi < 0: unbounded). */
static void put_rep(sg *c, strbuf *b, long lo, long hi) {
    if (hi < 0) {
        if (lo == 0) put(c, b, "*");
        else if (lo == 1) put(c, b, "+");
        else putf(c, b, "{%ld,}", lo);
    } else if (lo != 1 || hi != 1) {
        if (lo == hi) putf(c, b, "{%ld}", lo);
        else putf(c, b, "{%ld,%ld}", lo, hi);
    }
}

/* ---- errors and paths ------------------------------------------------------------------ */

static int sg_fail(sg *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int sg_fail(sg *c, int code, const char *fmt, ...) {
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return strata_err_set(c->err, code, "json_schema: %s at %s", what,
                          c->path_len ? c->path : "the root");
}

static int sg_nomem(sg *c) {
    return strata_err_set(c->err, STRATA_ENOMEM, "json_schema: out of memory");
}

/* Appends /seg (escaped as a JSON pointer) to the path; returns the length to pop back to. A
 * path too long for the buffer is cut: it only names places in messages. */
static size_t sg_push(sg *c, const char *seg) {
    size_t at = c->path_len, n = at;
    char *p = c->path;
    if (n + 1 < SG_PATH_MAX) p[n++] = '/';
    for (; *seg && n + 2 < SG_PATH_MAX; seg++) {
        if (*seg == '~' || *seg == '/') {
            p[n++] = '~';
            p[n++] = *seg == '~' ? '0' : '1';
        } else p[n++] = *seg;
    }
    p[n] = 0;
    c->path_len = n;
    return at;
}

static size_t sg_push_i(sg *c, const char *seg, size_t i) {
    char num[24];
    size_t at = sg_push(c, seg);
    snprintf(num, sizeof num, "%zu", i);
    sg_push(c, num);
    return at;
}

static void sg_pop(sg *c, size_t at) {
    c->path_len = at;
    c->path[at] = 0;
}

/* ---- rules ----------------------------------------------------------------------------- */

static int sg_written(sg *c) {
    if (c->oom) return sg_nomem(c);
    if (c->out.len > SG_MAX_OUT)
        return sg_fail(c, STRATA_EUNSUPPORTED, "the grammar grows past %u bytes", SG_MAX_OUT);
    return 0;
}

/* Writes `<name>-<k> ::= body` for a fresh k and appends its name to term. */
static int sg_rule(sg *c, strbuf *term, const strbuf *body) {
    int k = ++c->n_aux;
    if (body->len > SG_MAX_OUT)
        return sg_fail(c, STRATA_EUNSUPPORTED, "the grammar grows past %u bytes", SG_MAX_OUT);
    putf(c, &c->out, "%s-%d ::= ", c->name, k);
    put(c, &c->out, body->p ? body->p : "");
    put(c, &c->out, "\n");
    putf(c, term, "%s-%d", c->name, k);
    return sg_written(c);
}

static void sg_prim_write(sg *c, int id) {
    if (c->prims & 1u << id) return;
    c->prims |= 1u << id;
    for (int d = 0; d < P_COUNT; d++)
        if (SG_PRIMS[id].deps & 1u << d) sg_prim_write(c, d);
    putf(c, &c->out, "%s-%s ::= ", c->name, SG_PRIMS[id].suffix);
    for (const char *s = SG_PRIMS[id].body; *s; s++) {
        if (*s == '@') put(c, &c->out, c->name);
        else if (strbuf_addc(&c->out, *s)) c->oom = 1;
    }
    put(c, &c->out, "\n");
}

/* Appends the shared rule's name to b (writing the rule first if needed). */
static void sg_prim(sg *c, strbuf *b, int id) {
    sg_prim_write(c, id);
    putf(c, b, "%s-%s", c->name, SG_PRIMS[id].suffix);
}

/* Any JSON value (returns 1 or an error), nesting at most SG_ANY_DEPTH deep: one rule per level. */
static int sg_any(sg *c, strbuf *term) {
    if (!c->any) {
        c->any = 1;
        sg_prim_write(c, P_WS);
        sg_prim_write(c, P_SCALAR);
        const char *n = c->name;
        for (int d = 0; d < SG_ANY_DEPTH; d++)
            putf(c, &c->out,
                 "%s-any-%d ::= \"{\" %s-ws ( %s-str %s-ws \":\" %s-ws %s-any-%d ( %s-ws \",\" "
                 "%s-ws "
                 "%s-str %s-ws \":\" %s-ws %s-any-%d )* %s-ws )? \"}\" | \"[\" %s-ws ( %s-any-%d "
                 "( %s-ws \",\" %s-ws %s-any-%d )* %s-ws )? \"]\" | %s-scalar\n",
                 n, d, n, n, n, n, n, d + 1, n, n, n, n, n, n, d + 1, n, n, n, d + 1, n, n, n,
                 d + 1, n, n);
        putf(c, &c->out, "%s-any-%d ::= %s-scalar\n", c->name, SG_ANY_DEPTH, c->name);
    }
    putf(c, term, "%s-any-0", c->name);
    int rc = sg_written(c);
    return rc ? rc : 1;
}

/* ---- keywords -------------------------------------------------------------------------- */

static int sg_in(const char *const *list, const char *k) {
    for (; *list; list++)
        if (!strcmp(*list, k)) return 1;
    return 0;
}

/* Whether s (an object) has a keyword this compiler reads. */
static int sg_constrains(const json_t *s) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (sg_in(SG_USED, k)) return 1;
    }
    return 0;
}

static int sg_check_keywords(sg *c, const json_t *s) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (sg_in(SG_UNSUPPORTED, k) || (!strcmp(k, "uniqueItems") && json_is_true(v)))
            return sg_fail(c, STRATA_EUNSUPPORTED, "unsupported keyword \"%s\"", k);
    }
    return 0;
}

/* A non-negative integer keyword: def when absent. */
static int sg_count(sg *c, const json_t *s, const char *key, long long def, long long *out) {
    const json_t *v = json_object_get(s, key);
    *out = def;
    if (!v) return 0;
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
        json_real_value(v) >= 0 && json_real_value(v) < 1e15) {
        *out = (long long)json_real_value(v);
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return sg_fail(c, STRATA_EINVALID, "\"%s\" must be a non-negative integer", key);
    *out = json_integer_value(v);
    return 0;
}

static int sg_schema(sg *c, const json_t *s, strbuf *term);
static int sg_node(sg *c, const json_t *s, strbuf *term);

/* ---- $ref ------------------------------------------------------------------------------ */

/* The value the local JSON pointer ref ("#", "#/$defs/X") names in the root, or NULL. */
static const json_t *sg_resolve(const json_t *root, const char *ref) {
    const json_t *v = root;
    const char *p = ref + 1;
    char seg[256];
    while (*p) {
        if (*p++ != '/') return NULL;
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) ch = *++p == '0' ? '~' : '/';
            if (n + 1 >= sizeof seg) return NULL;
            seg[n++] = ch;
        }
        seg[n] = 0;
        if (json_is_object(v)) v = json_object_get(v, seg);
        else if (json_is_array(v) && n && strspn(seg, "0123456789") == n && n < 10)
            v = json_array_get(v, strtoul(seg, NULL, 10));
        else return NULL;
        if (!v) return NULL;
    }
    return v;
}

/* Compiles $ref target k into its rule (the root's is the grammar's name) unless done, and
 * appends the rule's name to term when it matches something. */
static int sg_ref_use(sg *c, int k, const char *ref, strbuf *term) {
    sg_target *e = &c->refs[k];
    if (e->open && e->containers == c->containers)
        return sg_fail(c, STRATA_EINVALID,
                       "$ref \"%s\" comes back to itself before any object or array", ref);
    if (e->open) e->read_open = 1;
    if (!e->open && !e->done) {
        strbuf body = {0};
        char saved[SG_PATH_MAX];
        size_t saved_len = c->path_len;
        memcpy(saved, c->path, saved_len + 1);
        snprintf(c->path, sizeof c->path, "%s", ref + 1);
        c->path_len = strlen(c->path);
        e->open = 1;
        e->containers = c->containers;
        int rc = sg_schema(c, e->target, &body);
        e = &c->refs[k]; /* the table may have moved */
        e->open = 0;
        e->done = 1;
        if (rc >= 0 && e->read_open && rc != e->prod) c->changed = 1;
        if (rc >= 0) e->prod = rc;
        if (rc > 0) {
            if (k == 0) putf(c, &c->out, "%s ::= ", c->name);
            else putf(c, &c->out, "%s-ref-%d ::= ", c->name, k);
            put(c, &c->out, body.p);
            put(c, &c->out, "\n");
            int w = sg_written(c);
            rc = w ? w : 1;
        }
        memcpy(c->path, saved, saved_len + 1);
        c->path_len = saved_len;
        strbuf_free(&body);
        if (rc <= 0) return rc;
    }
    if (!e->prod) return 0;
    if (k == 0) put(c, term, c->name);
    else putf(c, term, "%s-ref-%d", c->name, k);
    return 1;
}

static int sg_ref(sg *c, const json_t *ref, strbuf *term) {
    if (!json_is_string(ref)) return sg_fail(c, STRATA_EINVALID, "\"$ref\" must be a string");
    const char *r = json_string_value(ref);
    if (r[0] != '#')
        return sg_fail(c, STRATA_EUNSUPPORTED, "$ref \"%s\" is not a local \"#...\" pointer", r);
    const json_t *t = sg_resolve(c->root, r);
    if (!t) return sg_fail(c, STRATA_EINVALID, "$ref \"%s\" names nothing in the schema", r);
    int k = 0;
    while (k < c->n_refs && c->refs[k].target != t) k++;
    if (k == c->n_refs) {
        if (c->n_refs == SG_MAX_REFS)
            return sg_fail(c, STRATA_EUNSUPPORTED, "more than %d $ref targets", SG_MAX_REFS);
        if (c->n_refs == c->cap_refs) {
            int cap = c->cap_refs * 2;
            sg_target *p = realloc(c->refs, (size_t)cap * sizeof *p);
            if (!p) return sg_nomem(c);
            c->refs = p;
            c->cap_refs = cap;
        }
        c->refs[c->n_refs++] = (sg_target){.target = t};
    }
    return sg_ref_use(c, k, r, term);
}

/* ---- strings --------------------------------------------------------------------------- */

/* A class's code points as inclusive ranges (pairs); room for a complement's extra one. */
typedef struct sg_ranges {
    uint32_t r[2 * 258];
    int n;
} sg_ranges;

static int sg_range_cmp(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void sg_range_add(sg_ranges *set, uint32_t lo, uint32_t hi) {
    set->r[2 * set->n] = lo;
    set->r[2 * set->n + 1] = hi;
    set->n++;
}

/* Reads one GBNF character at *p (an escape or UTF-8). */
static uint32_t sg_gbnf_char(const char **p, const char *end) {
    const char *s = *p;
    if (*s != '\\' || s + 1 >= end) {
        int len = unicode_utf8_check((const uint8_t *)s, (size_t)(end - s));
        uint32_t cp = (uint8_t)*s;
        if (len > 0) cp = unicode_utf8_decode((const uint8_t *)s, &len);
        else len = 1;
        *p = s + len;
        return cp;
    }
    int digits = s[1] == 'x' ? 2 : s[1] == 'u' ? 4 : s[1] == 'U' ? 8 : 0;
    if (digits && s + 2 + digits <= end) {
        char hex[9];
        memcpy(hex, s + 2, (size_t)digits);
        hex[digits] = 0;
        *p = s + 2 + digits;
        return (uint32_t)strtoul(hex, NULL, 16);
    }
    *p = s + 2;
    return s[1] == 'n' ? '\n' : s[1] == 't' ? '\t' : s[1] == 'r' ? '\r' : (uint8_t)s[1];
}

/* A class of the regex's output, or `.`, rewritten to what may stand unescaped in a JSON
 * string: no '"', '\\', control character (nor surrogate, which UTF-8 cannot write). */
static int sg_safe_class(sg *c, strbuf *b, const char **p, const char *end) {
    static const uint32_t ok[] = {0x20, 0x21, 0x23, 0x5B, 0x5D, 0xD7FF, 0xE000, 0x10FFFF};
    sg_ranges in = {.n = 0}, set = {.n = 0};
    int neg = **p == '.'; /* any character: the complement of none */
    const char *s = *p + 1;
    if (**p == '[') {
        if (s < end && *s == '^') neg = 1, s++;
        while (s < end && *s != ']') {
            uint32_t lo = sg_gbnf_char(&s, end), hi = lo;
            if (s + 1 < end && *s == '-' && s[1] != ']') s++, hi = sg_gbnf_char(&s, end);
            if (in.n == 256) return sg_fail(c, STRATA_EUNSUPPORTED, "\"pattern\" class too large");
            sg_range_add(&in, lo, hi);
        }
        s += s < end;
    }
    *p = s;
    qsort(in.r, (size_t)in.n, 2 * sizeof(uint32_t), sg_range_cmp);
    if (neg) {
        uint32_t next = 0;
        for (int i = 0; i < in.n; i++) {
            if (in.r[2 * i] > next) sg_range_add(&set, next, in.r[2 * i] - 1);
            if (in.r[2 * i + 1] + 1 > next) next = in.r[2 * i + 1] + 1;
        }
        if (next <= 0x10FFFF) sg_range_add(&set, next, 0x10FFFF);
    } else set = in;
    int any = 0;
    put(c, b, "[");
    for (int i = 0; i < set.n; i++)
        for (int a = 0; a < 4; a++) {
            uint32_t lo = set.r[2 * i] > ok[2 * a] ? set.r[2 * i] : ok[2 * a];
            uint32_t hi = set.r[2 * i + 1] < ok[2 * a + 1] ? set.r[2 * i + 1] : ok[2 * a + 1];
            if (lo > hi) continue;
            put_cp(c, b, lo, 1);
            if (hi > lo) put(c, b, "-"), put_cp(c, b, hi, 1);
            any = 1;
        }
    put(c, b, "]");
    if (!any)
        return sg_fail(c, STRATA_EUNSUPPORTED,
                       "\"pattern\" has a class of only characters JSON must escape");
    return 0;
}

/* A literal of the regex's output, its characters written as the JSON string text for them. */
static int sg_safe_lit(sg *c, strbuf *b, const char **p, const char *end) {
    const char *s = *p + 1;
    put(c, b, "\"");
    while (s < end && *s != '"') {
        uint32_t cp = sg_gbnf_char(&s, end);
        char esc[8];
        if (cp == 0) return sg_fail(c, STRATA_EUNSUPPORTED, "\"pattern\" matches NUL");
        if (cp >= 0x20 && cp != '"' && cp != '\\') {
            put_cp(c, b, cp, 0);
            continue;
        }
        const char *short_esc = "\"\"\\\\\bb\ff\nn\rr\tt", *e = strchr(short_esc, (int)cp);
        if (e && ((e - short_esc) & 1) == 0) snprintf(esc, sizeof esc, "\\%c", e[1]);
        else snprintf(esc, sizeof esc, "\\u%04X", (unsigned)cp);
        for (const char *x = esc; *x; x++) put_cp(c, b, (uint8_t)*x, 0);
    }
    put(c, b, "\"");
    *p = s + (s < end);
    return 0;
}

/* Copies the regex compiler's rules into the grammar, its classes and literals made safe
 * inside a JSON string (schema_gbnf.h: the pattern matches the raw content). */
static int sg_safe_rules(sg *c, const strbuf *in) {
    const char *s = in->p ? in->p : "", *end = s + in->len;
    while (s < end) {
        int rc = 0;
        if (*s == '"') rc = sg_safe_lit(c, &c->out, &s, end);
        else if (*s == '[' || *s == '.') rc = sg_safe_class(c, &c->out, &s, end);
        else if (*s == '#') {
            while (s < end && *s != '\n') s++;
        } else {
            if (strbuf_addc(&c->out, *s++)) c->oom = 1;
        }
        if (rc) return rc;
    }
    return sg_written(c);
}

static int sg_pattern(sg *c, const json_t *pat, strbuf *term) {
    strbuf rules = {0};
    strata_err rerr = {0};
    char name[128];
    snprintf(name, sizeof name, "%s-%d", c->name, ++c->n_aux);
    const char *re = json_string_value(pat);
    int rc = constrain_regex_gbnf(re, json_string_length(pat), name, &rules, &rerr);
    if (rc) rc = sg_fail(c, rc, "\"pattern\" (%s)", rerr.msg);
    else rc = sg_safe_rules(c, &rules);
    strbuf_free(&rules);
    if (rc) return rc;
    putf(c, term, "( \"\\\"\" %s \"\\\"\" )", name);
    return 1;
}

static int sg_string(sg *c, const json_t *s, strbuf *term) {
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    long long lo, hi;
    int rc;
    if ((rc = sg_count(c, s, "minLength", 0, &lo)) || (rc = sg_count(c, s, "maxLength", -1, &hi)))
        return rc;
    if (pat && !json_is_string(pat))
        return sg_fail(c, STRATA_EINVALID, "\"pattern\" must be a string");
    if (fmt && !json_is_string(fmt))
        return sg_fail(c, STRATA_EINVALID, "\"format\" must be a string");
    int prim = -1;
    for (size_t i = 0; fmt && i < sizeof SG_FORMATS / sizeof *SG_FORMATS; i++)
        if (!strcmp(json_string_value(fmt), SG_FORMATS[i].name)) prim = SG_FORMATS[i].prim;
    int lens = lo > 0 || hi >= 0;
    if ((pat != NULL) + (prim >= 0) + lens > 1)
        return sg_fail(c, STRATA_EUNSUPPORTED,
                       "more than one of \"pattern\", \"format\" and minLength/maxLength");
    if (pat) return sg_pattern(c, pat, term);
    if (prim >= 0) {
        put(c, term, "( \"\\\"\" ");
        sg_prim(c, term, prim);
        put(c, term, " \"\\\"\" )");
        return 1;
    }
    if (!lens) return sg_prim(c, term, P_STR), 1;
    if (lo > SG_MAX_LEN || hi > SG_MAX_LEN)
        return sg_fail(c, STRATA_EUNSUPPORTED, "minLength/maxLength above %d", SG_MAX_LEN);
    if (hi >= 0 && lo > hi) return 0;
    put(c, term, "( \"\\\"\" ");
    if (hi != 0) {
        sg_prim(c, term, P_CHR);
        put_rep(c, term, (long)lo, (long)hi);
    }
    put(c, term, " \"\\\"\" )");
    return 1;
}

/* ---- numbers --------------------------------------------------------------------------- */

typedef struct sg_bound {
    long long v;
    int on, excl;
} sg_bound;

static const char SG_ZEROS[] = "000000000000000000", SG_NINES[] = "999999999999999999";

/* The digits of every x..y (both n digits, leading zeros allowed, x <= y), as one element. */
static void sg_digits(sg *c, strbuf *b, const char *x, const char *y, int n) {
    if (x[0] == y[0]) {
        putf(c, b, "\"%c\"", x[0]);
        if (n > 1) put(c, b, " "), sg_digits(c, b, x + 1, y + 1, n - 1);
        return;
    }
    int lo_full = !strncmp(x + 1, SG_ZEROS, (size_t)n - 1);
    int hi_full = !strncmp(y + 1, SG_NINES, (size_t)n - 1);
    char a = x[0], z = y[0];
    const char *sep = "";
    put(c, b, "( ");
    if (!lo_full) {
        putf(c, b, "\"%c\" ", a++);
        sg_digits(c, b, x + 1, SG_NINES, n - 1);
        sep = " | ";
    }
    if (!hi_full) z--;
    if (a <= z) {
        putf(c, b, "%s[%c-%c]", sep, a, z);
        if (n > 1) put(c, b, " [0-9]"), put_rep(c, b, n - 1, n - 1);
        sep = " | ";
    }
    if (!hi_full) {
        putf(c, b, "%s\"%c\" ", sep, y[0]);
        sg_digits(c, b, SG_ZEROS, y + 1, n - 1);
    }
    put(c, b, " )");
}

/* The decimal text, without leading zeros, of every integer in [lo, hi] (0 <= lo <= hi). A run
 * of whole lengths (every n-digit number) is one repetition: [1-9] [0-9]{a,b}. */
static void sg_uint_range(sg *c, strbuf *b, long long lo, long long hi) {
    char x[24], y[24];
    int nlo = snprintf(x, sizeof x, "%lld", lo), nhi = snprintf(y, sizeof y, "%lld", hi);
    long long p[20] = {1};
    for (int i = 1; i < 19; i++) p[i] = p[i - 1] * 10;
#define SG_LO(n) (lo > ((n) == 1 ? 0 : p[(n)-1]) ? lo : ((n) == 1 ? 0 : p[(n)-1]))
#define SG_HI(n) (hi < p[n] - 1 ? hi : p[n] - 1)
#define SG_WHOLE(n) (SG_HI(n) == p[n] - 1 && (SG_LO(n) == p[(n)-1] || SG_LO(n) == 0))
    put(c, b, "( ");
    for (int n = nlo; n <= nhi; n++) {
        if (n > nlo) put(c, b, " | ");
        int m = n;
        while (m <= nhi && SG_WHOLE(m)) m++;
        if (m - n >= 2) { /* lengths n..m-1, every number of each */
            if (SG_LO(n) == 0) put(c, b, "\"0\" | ");
            putf(c, b, "[1-9] [0-9]{%d,%d}", n - 1, m - 2);
            n = m - 1;
            continue;
        }
        snprintf(x, sizeof x, "%lld", SG_LO(n));
        snprintf(y, sizeof y, "%lld", SG_HI(n));
        sg_digits(c, b, x, y, n);
    }
    put(c, b, " )");
#undef SG_LO
#undef SG_HI
#undef SG_WHOLE
}

/* One alternative: sign, the integer parts [lo, hi], then the fraction kind (0: none,
 * 1: any, 2: only zeros, 3: not only zeros). */
static void sg_piece(sg *c, strbuf *alts, const char *sign, long long lo, long long hi, int frac) {
    if (lo > hi || lo > SG_INT_MAX) return;
    if (hi > SG_INT_MAX) hi = SG_INT_MAX;
    if (alts->len) put(c, alts, " | ");
    put(c, alts, sign);
    sg_uint_range(c, alts, lo, hi);
    if (frac == 1) put(c, alts, " "), sg_prim(c, alts, P_FRAC), put(c, alts, "?");
    if (frac == 2) put(c, alts, " ( \".\" \"0\"{1,20} )?");
    if (frac == 3) put(c, alts, " \".\" \"0\"{0,19} [1-9] [0-9]{0,19}");
}

/* The magnitudes w >= 0 (with sign in front) with lo <= w (lo < w) and w <= hi (w < hi):
 * integer parts strictly inside take any fraction, the bounds' own a nonzero (exclusive
 * lower) or zero (inclusive upper) one. Integers: the bounds are inclusive already. */
static void sg_side(sg *c, strbuf *alts, const char *sign, sg_bound lo, sg_bound hi, int real) {
    long long a = lo.on ? lo.v + lo.excl : 0, z = hi.on ? hi.v : SG_INT_MAX;
    if (!real) return sg_piece(c, alts, sign, a, z, 0);
    sg_piece(c, alts, sign, a, hi.on ? z - 1 : z, 1);
    if (lo.on && lo.excl && (!hi.on || lo.v < hi.v)) sg_piece(c, alts, sign, lo.v, lo.v, 3);
    if (hi.on && !hi.excl && (!lo.on || hi.v >= a)) sg_piece(c, alts, sign, hi.v, hi.v, 2);
}

/* One bound keyword. For integers it is rounded inward and made inclusive; for numbers it must
 * be an integer (kept exclusive or not). The tighter of minimum and exclusiveMinimum (maximum
 * and exclusiveMaximum) wins. Absent: *b untouched. */
static int sg_bound_read(sg *c, const json_t *s, const char *key, int upper, int excl, int integer,
                         sg_bound *b) {
    const json_t *v = json_object_get(s, key);
    if (!v || json_is_boolean(v)) return 0;
    if (!json_is_number(v)) return sg_fail(c, STRATA_EINVALID, "\"%s\" must be a number", key);
    if (json_is_true(json_object_get(s, upper ? "exclusiveMaximum" : "exclusiveMinimum")))
        excl = 1; /* draft 4: a boolean beside the bound */
    double d = json_number_value(v);
    if (d > 2e18) d = 2e18;
    if (d < -2e18) d = -2e18;
    long long x;
    if (json_is_integer(v) && d == json_number_value(v)) x = json_integer_value(v);
    else if (integer) {
        double r = upper ? floor(d) : ceil(d);
        if (excl && r == d) r += upper ? -1 : 1;
        x = (long long)r, excl = 0;
    } else if (d != floor(d)) {
        return sg_fail(c, STRATA_EUNSUPPORTED, "number bound \"%s\" that is not an integer", key);
    } else x = (long long)d;
    if (integer && excl) x += upper ? -1 : 1, excl = 0;
    if (!b->on || (upper ? x < b->v || (x == b->v && excl) : x > b->v || (x == b->v && excl)))
        *b = (sg_bound){x, 1, excl};
    return 0;
}

static int sg_numeric(sg *c, const json_t *s, int integer, strbuf *term) {
    sg_bound lo = {0}, hi = {0};
    int rc;
    if ((rc = sg_bound_read(c, s, "minimum", 0, 0, integer, &lo)) ||
        (rc = sg_bound_read(c, s, "exclusiveMinimum", 0, 1, integer, &lo)) ||
        (rc = sg_bound_read(c, s, "maximum", 1, 0, integer, &hi)) ||
        (rc = sg_bound_read(c, s, "exclusiveMaximum", 1, 1, integer, &hi)))
        return rc;
    if (!lo.on && !hi.on) return sg_prim(c, term, integer ? P_INT : P_NUM), 1;
    strbuf alts = {0};
    /* w = v on the non-negative side, w = -v on the negative one */
    if (!hi.on || hi.v > 0 || (hi.v == 0 && !hi.excl)) {
        sg_bound l = lo.on && (lo.v > 0 || (lo.v == 0 && lo.excl)) ? lo : (sg_bound){0};
        sg_side(c, &alts, "", l, hi, !integer);
    }
    if (!lo.on || lo.v < 0) {
        sg_bound h = lo.on ? (sg_bound){-lo.v, 1, lo.excl} : (sg_bound){0};
        sg_bound l = {0};
        if (hi.on && (hi.v < 0 || (hi.v == 0 && hi.excl))) l = (sg_bound){-hi.v, 1, hi.excl};
        if (integer && (!l.on || l.v < 1)) l = (sg_bound){1, 1, 0}; /* never "-0" */
        sg_side(c, &alts, "\"-\" ", l, h, !integer);
    }
    int prod = alts.len > 0;
    if (prod) put(c, term, "( "), put(c, term, alts.p), put(c, term, " )");
    strbuf_free(&alts);
    return c->oom ? sg_nomem(c) : prod;
}

/* ---- objects and arrays ---------------------------------------------------------------- */

typedef struct sg_prop {
    const char *key;
    const json_t *schema;
    int req;
    size_t off, end; /* its `"key" ws ":" ws value` in kvs */
} sg_prop;

/* The member list from prop i on (T_i): each declared member, optional ones in ( )?, then
 * any number of extra members; one rule per position so the grammar stays linear. */
static int sg_tails(sg *c, const sg_prop *p, int n, const strbuf *kvs, const char *akv, int *t) {
    strbuf body = {0}, name = {0};
    int rc = 0;
    t[n] = 0;
    for (int j = n; j >= (n ? 1 : 0) && !rc; j--) {
        strbuf_reset(&body);
        strbuf_reset(&name);
        if (j == n && !akv) continue;
        if (j == n)
            put(c, &body, "( "), sg_prim(c, &body, P_WS), put(c, &body, " \",\" "),
                sg_prim(c, &body, P_WS), putf(c, &body, " %s )*", akv);
        else {
            put(c, &body, p[j].req ? "" : "( ");
            sg_prim(c, &body, P_WS);
            put(c, &body, " \",\" ");
            sg_prim(c, &body, P_WS);
            put(c, &body, " ");
            if (strbuf_add(&body, kvs->p + p[j].off, p[j].end - p[j].off)) c->oom = 1;
            put(c, &body, p[j].req ? "" : " )?");
            if (t[j + 1]) putf(c, &body, " %s-%d", c->name, t[j + 1]);
        }
        rc = sg_rule(c, &name, &body);
        t[j] = c->n_aux;
    }
    strbuf_free(&body);
    strbuf_free(&name);
    return rc;
}

/* Compiles every property's value; unmatchable optional ones are dropped (*n shrinks), an
 * unmatchable required one makes the object unmatchable (returns 0). */
static int sg_members(sg *c, sg_prop *p, int *n, strbuf *kvs) {
    int m = 0;
    for (int j = 0; j < *n; j++) {
        size_t at = sg_push(c, p[j].req < 0 ? "required" : "properties");
        sg_push(c, p[j].key);
        size_t off = kvs->len;
        put_jstr(c, kvs, p[j].key, strlen(p[j].key));
        strbuf lit = {0};
        put_lit(c, &lit, kvs->p + off, kvs->len - off);
        kvs->len = off;
        put(c, kvs, lit.p ? lit.p : "");
        strbuf_free(&lit);
        put(c, kvs, " ");
        sg_prim(c, kvs, P_WS);
        put(c, kvs, " \":\" ");
        sg_prim(c, kvs, P_WS);
        put(c, kvs, " ");
        int rc = sg_schema(c, p[j].schema, kvs);
        sg_pop(c, at);
        if (rc < 0) return rc;
        if (!rc && p[j].req) return 0;
        if (!rc) {
            kvs->len = off;
            continue;
        }
        p[m] = p[j];
        p[m].req = p[j].req != 0;
        p[m].off = off, p[m].end = kvs->len, m++;
    }
    *n = m;
    return c->oom ? sg_nomem(c) : 1;
}

/* Collects the declared properties in order, then required names properties lacks. */
static int sg_props(sg *c, const json_t *s, const json_t *extra, sg_prop **out, int *n) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    if (props && !json_is_object(props))
        return sg_fail(c, STRATA_EINVALID, "\"properties\" must be an object");
    if (req && !json_is_array(req))
        return sg_fail(c, STRATA_EINVALID, "\"required\" must be an array of strings");
    size_t cap = json_object_size(props) + json_array_size(req);
    sg_prop *p = calloc(cap ? cap : 1, sizeof *p);
    if (!p) return sg_nomem(c);
    int k = 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)props, key, v) p[k++] = (sg_prop){.key = key, .schema = v};
    int declared = k;
    for (size_t i = 0; i < json_array_size(req); i++) {
        const json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) {
            free(p);
            return sg_fail(c, STRATA_EINVALID, "\"required\" must be an array of strings");
        }
        int j = 0;
        while (j < k && strcmp(p[j].key, json_string_value(r))) j++;
        if (j == k) p[k++] = (sg_prop){.key = json_string_value(r), .schema = extra, .req = -1};
        else if (j < declared) p[j].req = 1;
    }
    *out = p;
    *n = k;
    return 0;
}

static int sg_object_body(sg *c, const sg_prop *p, int n, const strbuf *kvs, const char *akv,
                          strbuf *term) {
    int *t = malloc(((size_t)n + 1) * sizeof *t);
    strbuf body = {0};
    if (!t) return sg_nomem(c);
    int rc = sg_tails(c, p, n, kvs, akv, t);
    int r = 0; /* the first required member: no member before it can start the list */
    while (r < n && !p[r].req) r++;
    for (int j = 0; !rc && j <= r && j < n; j++) {
        put(c, &body, j ? " | " : "");
        if (strbuf_add(&body, kvs->p + p[j].off, p[j].end - p[j].off)) c->oom = 1;
        if (t[j + 1]) putf(c, &body, " %s-%d", c->name, t[j + 1]);
    }
    if (!rc && r == n && akv) {
        put(c, &body, n ? " | " : "");
        putf(c, &body, "%s %s-%d", akv, c->name, t[n]);
    }
    if (!rc) {
        strbuf obj = {0};
        put(c, &obj, "\"{\" ");
        sg_prim(c, &obj, P_WS);
        if (body.len) {
            put(c, &obj, r < n ? " ( " : " ( ( ");
            put(c, &obj, body.p);
            put(c, &obj, " ) ");
            sg_prim(c, &obj, P_WS);
            put(c, &obj, r < n ? "" : " )?");
        }
        put(c, &obj, " \"}\"");
        rc = sg_rule(c, term, &obj);
        strbuf_free(&obj);
    }
    strbuf_free(&body);
    free(t);
    return rc ? rc : 1;
}

static int sg_object(sg *c, const json_t *s, strbuf *term) {
    const json_t *ap = json_object_get(s, "additionalProperties");
    if (!ap && !json_object_get(s, "properties") && !json_object_get(s, "required"))
        ap = json_true(); /* a free-form object (json_true is a static singleton) */
    if (ap && !json_is_boolean(ap) && !json_is_object(ap))
        return sg_fail(c, STRATA_EINVALID, "\"additionalProperties\" must be a schema");
    const json_t *extra = ap && !json_is_false(ap) ? ap : json_true();
    sg_prop *p = NULL;
    strbuf kvs = {0}, akv = {0};
    int n = 0, rc = sg_props(c, s, extra, &p, &n);
    if (rc) return rc;
    c->containers++;
    rc = sg_members(c, p, &n, &kvs);
    if (rc > 0 && ap && !json_is_false(ap)) {
        size_t at = sg_push(c, "additionalProperties");
        sg_prim(c, &akv, P_STR);
        put(c, &akv, " ");
        sg_prim(c, &akv, P_WS);
        put(c, &akv, " \":\" ");
        sg_prim(c, &akv, P_WS);
        put(c, &akv, " ");
        int x = sg_schema(c, ap, &akv);
        sg_pop(c, at);
        if (x < 0) rc = x;
        if (!x) strbuf_free(&akv);
    }
    c->containers--;
    if (rc > 0) rc = sg_object_body(c, p, n, &kvs, akv.len ? akv.p : NULL, term);
    strbuf_free(&kvs);
    strbuf_free(&akv);
    free(p);
    return rc;
}

/* The array's elements: prefix terms in pre (offsets off[0..np]), then items (NULL: none). */
static int sg_array_body(sg *c, const strbuf *pre, const size_t *off, int np, const char *item,
                         long long lo, long long hi, strbuf *term) {
    strbuf el = {0}, b = {0}, sep = {0};
    sg_prim(c, &sep, P_WS);
    put(c, &sep, " \",\" ");
    sg_prim(c, &sep, P_WS);
    put(c, &sep, " ");
    int open = 0;
    for (int i = 0; i < np; i++) {
        if (i >= lo && i > 0) put(c, &el, "( "), open++;
        if (i) put(c, &el, sep.p);
        if (strbuf_add(&el, pre->p + off[i], off[i + 1] - off[i])) c->oom = 1;
        put(c, &el, " ");
    }
    if (item && (hi < 0 || hi > np)) {
        long long kmin = lo > np ? lo - np : 0, kmax = hi < 0 ? -1 : hi - np;
        if (np == 0) {
            putf(c, &el, "%s ", item);
            kmin = kmin > 0 ? kmin - 1 : 0;
            kmax = kmax < 0 ? -1 : kmax - 1;
        }
        if (kmax != 0) {
            putf(c, &el, "( %s%s )", sep.p, item);
            put_rep(c, &el, (long)kmin, (long)kmax);
        }
    }
    while (open--) put(c, &el, ")? ");
    put(c, &b, "\"[\" ");
    sg_prim(c, &b, P_WS);
    if (el.len) {
        put(c, &b, lo == 0 ? " ( " : " ");
        put(c, &b, el.p);
        put(c, &b, " ");
        sg_prim(c, &b, P_WS);
        put(c, &b, lo == 0 ? " )?" : "");
    }
    put(c, &b, " \"]\"");
    int rc = sg_rule(c, term, &b);
    strbuf_free(&el);
    strbuf_free(&b);
    strbuf_free(&sep);
    return rc ? rc : 1;
}

static int sg_array(sg *c, const json_t *s, strbuf *term) {
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    const char *prefix_key = "prefixItems", *items_key = "items";
    if (json_is_array(items)) { /* draft 4 tuples */
        if (prefix) return sg_fail(c, STRATA_EINVALID, "both prefixItems and an items array");
        prefix = items, prefix_key = "items";
        items = json_object_get(s, "additionalItems"), items_key = "additionalItems";
    }
    if (prefix && !json_is_array(prefix))
        return sg_fail(c, STRATA_EINVALID, "\"%s\" must be an array of schemas", prefix_key);
    long long lo, hi;
    int rc;
    if ((rc = sg_count(c, s, "minItems", 0, &lo)) || (rc = sg_count(c, s, "maxItems", -1, &hi)))
        return rc;
    if (lo > SG_MAX_ITEMS || hi > SG_MAX_ITEMS)
        return sg_fail(c, STRATA_EUNSUPPORTED, "minItems/maxItems above %d", SG_MAX_ITEMS);
    size_t np = json_array_size(prefix);
    if (np > SG_MAX_ITEMS)
        return sg_fail(c, STRATA_EUNSUPPORTED, "more than %d prefixItems", SG_MAX_ITEMS);
    size_t off[SG_MAX_ITEMS + 2];
    strbuf pre = {0}, item = {0};
    int n = 0, has_item = 0;
    c->containers++;
    for (rc = 1; rc > 0 && (size_t)n < np && (hi < 0 || n < hi); n++) {
        size_t at = sg_push_i(c, prefix_key, (size_t)n);
        off[n] = pre.len;
        rc = sg_schema(c, json_array_get(prefix, (size_t)n), &pre);
        sg_pop(c, at);
    }
    if (rc == 0) n--; /* an unmatchable element ends the array before it */
    off[n] = pre.len;
    if (rc > 0 && (size_t)n == np && (hi < 0 || hi > n)) {
        size_t at = sg_push(c, items_key);
        rc = sg_schema(c, items ? items : json_true(), &item);
        sg_pop(c, at);
        has_item = rc > 0;
        if (rc == 0) rc = 1;
    }
    c->containers--;
    if (rc >= 0) {
        long long most = has_item ? hi : n;
        rc = lo > n && !has_item ? 0 : (hi >= 0 && lo > hi) || (most >= 0 && lo > most) ? 0 : 1;
        if (rc) rc = sg_array_body(c, &pre, off, n, has_item ? item.p : NULL, lo, hi, term);
    }
    strbuf_free(&pre);
    strbuf_free(&item);
    return rc;
}

/* ---- combinations ---------------------------------------------------------------------- */

static const char *const SG_TYPES[] = {"null",   "boolean", "object",  "array",
                                       "number", "string",  "integer", NULL};

static int sg_is_type(const json_t *v, const char *t) {
    if (!strcmp(t, "integer"))
        return json_is_integer(v) ||
               (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    return !strcmp(t, "null")      ? json_is_null(v)
           : !strcmp(t, "boolean") ? json_is_boolean(v)
           : !strcmp(t, "object")  ? json_is_object(v)
           : !strcmp(t, "array")   ? json_is_array(v)
           : !strcmp(t, "number")  ? json_is_number(v)
                                   : json_is_string(v);
}

/* The type names "type" lists (checked), or NULL with *n = 0 when absent. */
static int sg_type_list(sg *c, const json_t *s, const char **names, int *n) {
    const json_t *t = json_object_get(s, "type");
    *n = 0;
    if (!t) return 0;
    size_t count = json_is_array(t) ? json_array_size(t) : 1;
    if ((!json_is_string(t) && !json_is_array(t)) || count == 0 || count > 7)
        return sg_fail(c, STRATA_EINVALID, "\"type\" must be a type name or an array of them");
    for (size_t i = 0; i < count; i++) {
        const json_t *x = json_is_array(t) ? json_array_get(t, i) : t;
        if (!json_is_string(x) || !sg_in(SG_TYPES, json_string_value(x)))
            return sg_fail(c, STRATA_EINVALID, "\"type\" names no JSON Schema type");
        names[(*n)++] = json_string_value(x);
    }
    return 0;
}

/* Alternatives: "( a | b )", one without parentheses, none unmatchable. */
static int sg_alts_end(sg *c, strbuf *alts, int count, strbuf *term) {
    if (count > 1) put(c, term, "( ");
    if (count) put(c, term, alts->p);
    if (count > 1) put(c, term, " )");
    strbuf_free(alts);
    return c->oom ? sg_nomem(c) : count > 0;
}

static int sg_enum(sg *c, const json_t *s, strbuf *term) {
    const json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const");
    if (e && !json_is_array(e)) return sg_fail(c, STRATA_EINVALID, "\"enum\" must be an array");
    const char *types[8];
    int nt, rc = sg_type_list(c, s, types, &nt), count = 0;
    if (rc) return rc;
    strbuf alts = {0}, text = {0};
    size_t n = k ? 1 : json_array_size(e);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = k ? k : json_array_get(e, i);
        int ok = nt == 0;
        for (int t = 0; t < nt; t++) ok |= sg_is_type(v, types[t]);
        if (k && e) {
            int in = 0;
            for (size_t j = 0; j < json_array_size(e); j++)
                in |= json_equal(v, json_array_get(e, j));
            ok &= in;
        }
        if (!ok) continue;
        strbuf_reset(&text);
        put_json(c, &text, v);
        if (count++) put(c, &alts, " | ");
        put_lit(c, &alts, text.p ? text.p : "", text.len);
    }
    strbuf_free(&text);
    return sg_alts_end(c, &alts, count, term);
}

/* s minus the named keywords, or NULL when out of memory (built key by key: json_copy drops
 * a key it fails to insert without saying so). */
static json_t *sg_without(const json_t *s, const char *a, const char *b) {
    json_t *r = json_object(), *v;
    const char *k;
    json_object_foreach((json_t *)s, k, v) {
        if (r && strcmp(k, a) && strcmp(k, b) && json_object_set(r, k, v)) {
            json_decref(r);
            r = NULL;
        }
    }
    return r;
}

static int sg_alt(sg *c, const json_t *s, strbuf *term) {
    const char *key = json_object_get(s, "anyOf") ? "anyOf" : "oneOf";
    const json_t *list = json_object_get(s, key);
    if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf"))
        return sg_fail(c, STRATA_EUNSUPPORTED, "anyOf and oneOf together");
    if (!json_is_array(list) || !json_array_size(list))
        return sg_fail(c, STRATA_EINVALID, "\"%s\" must be a non-empty array of schemas", key);
    json_t *rest = sg_without(s, "anyOf", "oneOf");
    if (!rest) return sg_nomem(c);
    int siblings = sg_constrains(rest), count = 0, rc = 0;
    strbuf alts = {0}, one = {0};
    for (size_t i = 0; i < json_array_size(list) && rc >= 0; i++) {
        size_t at = sg_push_i(c, key, i);
        json_t *both = NULL;
        const json_t *branch = json_array_get(list, i);
        if (siblings) { /* the sibling keywords apply to every branch: an allOf of the two */
            both = json_pack("{s:[OO]}", "allOf", rest, branch);
            if (!both) rc = sg_nomem(c);
        }
        strbuf_reset(&one);
        if (rc >= 0) rc = sg_schema(c, both ? both : branch, &one);
        json_decref(both);
        sg_pop(c, at);
        if (rc > 0) put(c, &alts, count++ ? " | " : ""), put(c, &alts, one.p);
    }
    json_decref(rest);
    strbuf_free(&one);
    if (rc < 0) {
        strbuf_free(&alts);
        return rc;
    }
    return sg_alts_end(c, &alts, count, term);
}

/* The object schema a part of an allOf stands for, following $refs; NULL when it is not one
 * (only type "object", properties, required and additionalProperties may constrain it). */
static const json_t *sg_object_part(const sg *c, const json_t *p) {
    for (int hops = 0; hops < 8; hops++) {
        const json_t *r = json_is_string(p) ? p : json_object_get(p, "$ref");
        if (!r) break;
        p = json_is_string(r) && json_string_value(r)[0] == '#'
                ? sg_resolve(c->root, json_string_value(r))
                : NULL;
    }
    if (!json_is_object(p)) return NULL;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)p, k, v) {
        if (!strcmp(k, "type") ? !json_is_string(v) || strcmp(json_string_value(v), "object")
                               : sg_in(SG_USED, k) && strcmp(k, "properties") &&
                                     strcmp(k, "required") && strcmp(k, "additionalProperties"))
            return NULL;
    }
    return p;
}

static int sg_merge_into(json_t *props, json_t *req, json_t **ap, const json_t *part) {
    const char *k;
    json_t *v, *x;
    json_object_foreach(json_object_get(part, "properties"), k, v) {
        json_t *old = json_object_get(props, k);
        x = old ? json_pack("{s:[OO]}", "allOf", old, v) : json_incref(v);
        if (!x || json_object_set_new(props, k, x)) return -1;
    }
    size_t i;
    json_array_foreach(json_object_get(part, "required"), i, v) {
        int seen = 0;
        for (size_t j = 0; j < json_array_size(req); j++)
            seen |= json_equal(v, json_array_get(req, j));
        if (!seen && json_array_append(req, v)) return -1;
    }
    x = json_object_get(part, "additionalProperties");
    if (x && (!*ap || json_is_false(x))) *ap = x;
    return 0;
}

/* allOf parts that are all object schemas, merged into one: properties in order (one named
 * twice: the allOf of both), required joined, additionalProperties false if any says so. */
static int sg_merge(sg *c, const json_t **parts, int n, strbuf *term) {
    json_t *props = json_object(), *req = json_array(), *m = NULL, *ap = NULL;
    int rc = props && req ? 0 : -1;
    for (int i = 0; i < n && !rc; i++) {
        const json_t *p = sg_object_part(c, parts[i]);
        if (!p) {
            json_decref(props);
            json_decref(req);
            return sg_fail(c, STRATA_EUNSUPPORTED,
                           "allOf (or $ref with siblings) whose parts are not all object schemas");
        }
        if (!json_is_array(json_object_get(p, "required")) && json_object_get(p, "required")) {
            json_decref(props);
            json_decref(req);
            return sg_fail(c, STRATA_EINVALID, "\"required\" must be an array of strings");
        }
        rc = sg_merge_into(props, req, &ap, p);
    }
    if (!rc) m = json_pack("{s:s,s:O,s:O}", "type", "object", "properties", props, "required", req);
    if (m && ap && json_object_set(m, "additionalProperties", ap)) rc = -1;
    rc = !m || rc ? sg_nomem(c) : sg_schema(c, m, term);
    json_decref(m);
    json_decref(props);
    json_decref(req);
    return rc;
}

/* allOf, or $ref with constraining siblings: one constraining part is compiled as it is;
 * several must be object schemas, merged. */
static int sg_conj(sg *c, const json_t *s, strbuf *term) {
    const json_t *all = json_object_get(s, "allOf"), *ref = json_object_get(s, "$ref");
    if (all && (!json_is_array(all) || !json_array_size(all) || json_array_size(all) > 64))
        return sg_fail(c, STRATA_EINVALID, "\"allOf\" must be an array of 1 to 64 schemas");
    const json_t *parts[66];
    int n = 0, only = -1;
    if (ref) parts[n++] = ref;
    for (size_t i = 0; i < json_array_size(all); i++) {
        const json_t *p = json_array_get(all, i);
        if (json_is_false(p)) return 0;
        if (!json_is_boolean(p) && !json_is_object(p))
            return sg_fail(c, STRATA_EINVALID, "\"allOf\" must be an array of 1 to 64 schemas");
        if (json_is_object(p) && sg_constrains(p)) only = (int)i, parts[n++] = p;
    }
    json_t *rest = sg_without(s, "allOf", "$ref");
    if (!rest) return sg_nomem(c);
    if (sg_constrains(rest)) parts[n++] = rest;
    int rc;
    if (n == 0) rc = sg_any(c, term);
    else if (n == 1 && parts[0] == ref) rc = sg_ref(c, ref, term);
    else if (n == 1 && parts[0] == rest) rc = sg_node(c, rest, term);
    else if (n == 1) {
        size_t at = sg_push_i(c, "allOf", (size_t)only);
        rc = sg_schema(c, parts[0], term);
        sg_pop(c, at);
    } else rc = sg_merge(c, parts, n, term);
    json_decref(rest);
    return rc;
}

/* ---- the walk -------------------------------------------------------------------------- */

/* The type a keyword implies when "type" is absent. */
static void sg_implied(const json_t *s, const char **names, int *n) {
    static const struct {
        const char *type, *keys[5];
    } by[] = {
        {"object", {"properties", "required", "additionalProperties"}},
        {"array", {"items", "prefixItems", "minItems", "maxItems", "additionalItems"}},
        {"string", {"minLength", "maxLength", "pattern", "format"}},
        {"number", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}},
    };
    *n = 0;
    for (size_t t = 0; t < sizeof by / sizeof *by; t++)
        for (int k = 0; k < 5 && by[t].keys[k]; k++)
            if (json_object_get(s, by[t].keys[k])) {
                names[(*n)++] = by[t].type;
                break;
            }
}

static int sg_type_one(sg *c, const json_t *s, const char *t, strbuf *term) {
    if (!strcmp(t, "null")) return put(c, term, "\"null\""), 1;
    if (!strcmp(t, "boolean")) return put(c, term, "( \"true\" | \"false\" )"), 1;
    if (!strcmp(t, "string")) return sg_string(c, s, term);
    if (!strcmp(t, "integer")) return sg_numeric(c, s, 1, term);
    if (!strcmp(t, "number")) return sg_numeric(c, s, 0, term);
    if (!strcmp(t, "object")) return sg_object(c, s, term);
    return sg_array(c, s, term);
}

static int sg_types(sg *c, const json_t *s, strbuf *term) {
    const char *names[8];
    int n, rc = sg_type_list(c, s, names, &n), count = 0, number = 0;
    if (rc) return rc;
    if (!json_object_get(s, "type")) sg_implied(s, names, &n);
    if (n == 0) return sg_any(c, term);
    for (int i = 0; i < n; i++) number |= !strcmp(names[i], "number");
    strbuf alts = {0}, one = {0};
    for (int i = 0; i < n && rc >= 0; i++) {
        if (number && !strcmp(names[i], "integer")) continue; /* number has them */
        strbuf_reset(&one);
        rc = sg_type_one(c, s, names[i], &one);
        if (rc > 0) put(c, &alts, count++ ? " | " : ""), put(c, &alts, one.p);
    }
    strbuf_free(&one);
    if (rc < 0) {
        strbuf_free(&alts);
        return rc;
    }
    return sg_alts_end(c, &alts, count, term);
}

static int sg_node(sg *c, const json_t *s, strbuf *term) {
    if (json_object_get(s, "$ref") || json_object_get(s, "allOf")) return sg_conj(c, s, term);
    if (json_object_get(s, "anyOf") || json_object_get(s, "oneOf")) return sg_alt(c, s, term);
    if (json_object_get(s, "enum") || json_object_get(s, "const")) return sg_enum(c, s, term);
    return sg_types(c, s, term);
}

/* Appends one GBNF element matching the instances of s to term: 1, or 0 when no finite text
 * is one (term unchanged), or a negative error. */
static int sg_schema(sg *c, const json_t *s, strbuf *term) {
    if (json_is_true(s)) return sg_any(c, term);
    if (json_is_false(s)) return 0;
    if (!json_is_object(s))
        return sg_fail(c, STRATA_EINVALID, "a schema must be an object or a boolean");
    if (c->depth >= SG_MAX_DEPTH)
        return sg_fail(c, STRATA_EUNSUPPORTED, "schema nested deeper than %d", SG_MAX_DEPTH);
    int rc = sg_check_keywords(c, s);
    if (rc) return rc;
    size_t mark = term->len;
    c->depth++;
    rc = sg_node(c, s, term);
    c->depth--;
    if (rc <= 0) term->len = mark;
    if (term->p) term->p[term->len] = 0;
    if (rc > 0 && c->oom) return sg_nomem(c);
    return rc;
}

/* One walk from the root (the $ref table's entry 0, "#"). */
static int sg_walk(sg *c) {
    strbuf term = {0};
    strbuf_reset(&c->out);
    c->n_aux = c->depth = c->containers = c->changed = c->oom = c->any = 0;
    c->prims = 0;
    c->path[0] = 0;
    c->path_len = 0;
    for (int k = 0; k < c->n_refs; k++)
        c->refs[k].open = c->refs[k].done = c->refs[k].read_open = 0;
    int rc = sg_ref_use(c, 0, "#", &term);
    strbuf_free(&term);
    return rc >= 0 && c->oom ? sg_nomem(c) : rc;
}

int schema_gbnf(const json_t *schema, const char *name, strbuf *out, strata_err *err) {
    size_t nlen = name ? strlen(name) : 0;
    if (!nlen || nlen > 64 ||
        strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789-") != nlen)
        return strata_err_set(err, STRATA_EINVALID, "json_schema: bad rule name");
    if (!schema) return strata_err_set(err, STRATA_EINVALID, "json_schema: no schema");
    sg c = {.root = schema, .name = name, .err = err, .cap_refs = 16};
    c.refs = calloc((size_t)c.cap_refs, sizeof *c.refs);
    if (!c.refs) return sg_nomem(&c);
    c.refs[0].target = schema;
    c.n_refs = 1;
    int rc;
    /* answers only rise from 0 to 1, so this ends within n_refs + 1 walks */
    for (int walk = 0;; walk++) {
        rc = sg_walk(&c);
        if (rc < 0 || !c.changed || walk > c.n_refs + 1) break;
    }
    if (rc == 0)
        rc = strata_err_set(err, STRATA_EINVALID,
                            "json_schema: no finite JSON value satisfies the schema");
    if (rc > 0) rc = strbuf_add(out, c.out.p, c.out.len) ? sg_nomem(&c) : 0;
    strbuf_free(&c.out);
    free(c.refs);
    return rc;
}

int schema_gbnf_root(const json_t *schema, strbuf *out, strata_err *err) {
    return schema_gbnf(schema, "root", out, err);
}
