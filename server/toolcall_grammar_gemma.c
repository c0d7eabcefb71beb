/* toolcall_grammar_gemma.c - forced tool calls as a grammar in Gemma 4's call syntax, the
 * way google/gemma-4-31B-it's template renders an assistant's calls (server/toolcall_gemma.c
 * reads it back):
 *   <|tool_call>call:NAME{key:VALUE,...}<tool_call|>
 * calls concatenated with nothing between them. Keys are bare (between <|"|> markers when
 * the parser could not read them bare) in the order the template's dictsort gives them
 * (case-insensitive), the required ones always, the others optionally. A value follows
 * its schema:
 *  - enum / const: one of the members, written as the template's format_argument would;
 *  - string: <|"|>text<|"|>, the text never holding the marker (with maxLength: that many
 *    characters, none of them '<', so the marker cannot hide inside; a model rambles);
 *  - integer, number, boolean, null: their JSON grammar (server/schema_gbnf.c), which is
 *    the Gemma text as well since it has no whitespace and no quotes;
 *  - an object with properties, an array: the same, recursively; a type list: any member;
 *  - anything else (anyOf, $ref, free-form objects): any Gemma value, GC_DEPTH deep at most.
 * So a call parses every time, and its arguments validate except where the schema says
 * more than this (string patterns and formats, anyOf, additional properties). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/gbnf_text.h"
#include "server/schema_gbnf.h"
#include "server/toolcall_grammar_internal.h"
#include "server/toolcall_internal.h"

#define QUOTE "<|\"|>"
#define GC_DEPTH 6         /* containers of a generic value nested at most */
#define GC_SCHEMA_DEPTH 16 /* schema levels followed before values turn generic */
#define GC_MAX_ITEMS 100   /* array bounds past this are refused (as schema_gbnf does) */
#define GC_MAX_LEN 1000    /* string lengths are capped here (as the XML form does) */

/* The writer: where the rules go and how many typed-value rules (gc-sN) exist so far. */
typedef struct gw {
    strbuf *out;
    strata_err *err;
    int n;
} gw;

static int gw_nomem(gw *w) {
    return strata_err_set(w->err, STRATA_ENOMEM, "tool-call grammar: out of memory");
}

static int gw_addf(gw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int gw_addf(gw *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || strbuf_reserve(w->out, (size_t)n)) return gw_nomem(w);
    va_start(ap, fmt);
    vsnprintf(w->out->p + w->out->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    w->out->len += (size_t)n;
    return 0;
}

static int gw_lit(gw *w, const char *s, size_t n) {
    return gbnf_literal(w->out, s, n) ? gw_nomem(w) : 0;
}

/* A fresh rule name for a typed value. */
static void gw_name(gw *w, char name[32]) { snprintf(name, 32, "gc-s%d", w->n++); }

/* 1 when the parser reads s as a bare name (toolcall_cur_name). */
static int bare_name(const char *s) {
    size_t n = strlen(s);
    if (!n || n > TOOLCALL_NAME_MAX) return 0;
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || strchr("<>{}[]\"'=,:", *s)) return 0;
    return 1;
}

/* Appends key as the template writes it, bare, or quoted when it cannot be read bare. */
static int render_key(strbuf *b, const char *key, strata_err *err) {
    if (bare_name(key)) return strbuf_adds(b, key) ? STRATA_ENOMEM : 0;
    if (strstr(key, QUOTE))
        return strata_err_set(err, STRATA_EUNSUPPORTED, "the key '%.100s' holds %s", key, QUOTE);
    return strbuf_addf(b, QUOTE "%s" QUOTE, key) ? STRATA_ENOMEM : 0;
}

/* Appends v as format_argument writes it (keys bare): the text an enum or const is. */
static int render(strbuf *b, const json_t *v, strata_err *err) {
    const char *k;
    json_t *x;
    size_t i;
    int rc = 0, first = 1;
    if (json_is_string(v)) {
        if (strstr(json_string_value(v), QUOTE))
            return strata_err_set(err, STRATA_EUNSUPPORTED, "a value holds %s", QUOTE);
        return strbuf_addf(b, QUOTE "%s" QUOTE, json_string_value(v)) ? STRATA_ENOMEM : 0;
    }
    if (json_is_object(v)) {
        rc = strbuf_addc(b, '{') ? STRATA_ENOMEM : 0;
        json_object_foreach((json_t *)v, k, x) {
            if (!rc && !first) rc = strbuf_addc(b, ',') ? STRATA_ENOMEM : 0;
            first = 0;
            if (!rc) rc = render_key(b, k, err);
            if (!rc) rc = strbuf_addc(b, ':') ? STRATA_ENOMEM : 0;
            if (!rc) rc = render(b, x, err);
        }
        return rc ? rc : strbuf_addc(b, '}') ? STRATA_ENOMEM : 0;
    }
    if (json_is_array(v)) {
        rc = strbuf_addc(b, '[') ? STRATA_ENOMEM : 0;
        json_array_foreach(v, i, x) {
            if (!rc && i) rc = strbuf_addc(b, ',') ? STRATA_ENOMEM : 0;
            if (!rc) rc = render(b, x, err);
        }
        return rc ? rc : strbuf_addc(b, ']') ? STRATA_ENOMEM : 0;
    }
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    rc = !s || strbuf_adds(b, s) ? STRATA_ENOMEM : 0;
    free(s);
    return rc;
}

/* rule ::= one of the enum's members (or the const). */
static int gw_enum(gw *w, const char *rule, const json_t *s) {
    const json_t *en = json_object_get(s, "enum"), *c = json_object_get(s, "const");
    strbuf b = {0};
    size_t i;
    json_t *x;
    if (!json_is_array(en) || !json_array_size(en)) en = NULL;
    if (!en && !c) return strata_err_set(w->err, STRATA_EINVALID, "an empty enum");
    int rc = gw_addf(w, "%s ::= ", rule);
    for (i = 0; !rc && i < (en ? json_array_size(en) : 1); i++) {
        x = en ? json_array_get(en, i) : (json_t *)c;
        strbuf_reset(&b);
        if (i && (rc = gw_addf(w, " | "))) break;
        if ((rc = render(&b, x, w->err))) break;
        rc = gw_lit(w, b.p ? b.p : "", b.len);
    }
    strbuf_free(&b);
    if (rc == STRATA_ENOMEM) return gw_nomem(w);
    return rc ? rc : gw_addf(w, "\n");
}

static json_int_t int_or(const json_t *s, const char *key, json_int_t dflt) {
    const json_t *v = json_object_get(s, key);
    return json_is_integer(v) ? json_integer_value(v) : dflt;
}

/* rule ::= <|"|> text <|"|>, of minLength..maxLength characters. */
static int gw_string(gw *w, const char *rule, const json_t *s) {
    json_int_t lo = int_or(s, "minLength", 0), hi = int_or(s, "maxLength", -1);
    if (lo < 0) lo = 0;
    if (lo > GC_MAX_LEN) lo = GC_MAX_LEN;
    if (hi > GC_MAX_LEN) hi = GC_MAX_LEN;
    if (hi >= 0 && lo > hi) lo = 0;
    int rc = gw_addf(w, "%s ::= \"<|\\\"|>\" ", rule);
    if (rc) return rc;
    if (hi == 0) return gw_addf(w, "\"<|\\\"|>\"\n");
    if (hi > 0) return gw_addf(w, "[^<]{%lld,%lld} \"<|\\\"|>\"\n", (long long)lo, (long long)hi);
    if (lo > 0) return gw_addf(w, "[^<]{%lld} gc-text\n", (long long)lo);
    return gw_addf(w, "gc-text\n");
}

static int gw_value(gw *w, const char *rule, const json_t *s, int depth);

typedef struct gw_prop {
    const char *key;
    const json_t *schema;
    int at; /* its place in properties: dictsort is stable */
} gw_prop;

static int prop_cmp(const void *a, const void *b) {
    const gw_prop *x = a, *y = b;
    int c = strcasecmp(x->key, y->key);
    return c ? c : x->at - y->at;
}

/* The rules of property j of object rule R: R-kJ (key:value), R-fJ (the properties from j
 * on when none came before), R-rJ (the same after one did, each after a comma). */
static int gw_member(gw *w, const char *rule, const gw_prop *p, int j, int n, int req, int depth) {
    char val[32];
    strbuf key = {0};
    int rc = gw_addf(w, "%s-f%d ::= %s-k%d", rule, j, rule, j);
    if (!rc && j + 1 < n) rc = gw_addf(w, " %s-r%d", rule, j + 1);
    if (!rc && !req) rc = j + 1 < n ? gw_addf(w, " | %s-f%d", rule, j + 1) : gw_addf(w, "?");
    if (!rc)
        rc = gw_addf(w, "\n%s-r%d ::= %s\",\" %s-k%d%s", rule, j, req ? "" : "( ", rule, j,
                     req ? "" : " )?");
    if (!rc && j + 1 < n) rc = gw_addf(w, " %s-r%d", rule, j + 1);
    if (!rc) rc = gw_addf(w, "\n%s-k%d ::= ", rule, j);
    if (!rc && (rc = render_key(&key, p->key, w->err)) == STRATA_ENOMEM) rc = gw_nomem(w);
    if (!rc && strbuf_addc(&key, ':')) rc = gw_nomem(w);
    if (!rc) rc = gw_lit(w, key.p, key.len);
    strbuf_free(&key);
    gw_name(w, val);
    if (!rc) rc = gw_addf(w, " %s\n", val);
    return rc ? rc : gw_value(w, val, p->schema, depth + 1);
}

/* rule ::= "{" the properties of s, sorted "}". */
static int gw_object(gw *w, const char *rule, const json_t *s, int depth) {
    const json_t *props = json_object_get(s, "properties");
    int n = (int)json_object_size(props), j = 0, rc;
    if (!n) return gw_addf(w, "%s ::= \"{}\"\n", rule);
    gw_prop *p = malloc((size_t)n * sizeof *p);
    if (!p) return gw_nomem(w);
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)props, k, x) {
        p[j] = (gw_prop){k, x, j};
        j++;
    }
    qsort(p, (size_t)n, sizeof *p, prop_cmp);
    rc = gw_addf(w, "%s ::= \"{\" %s-f0 \"}\"\n", rule, rule);
    for (j = 0; j < n && !rc; j++)
        rc = gw_member(w, rule, &p[j], j, n, toolcall_grammar_required(s, p[j].key), depth);
    free(p);
    return rc;
}

/* rule ::= "[" items "]", minItems..maxItems of them. */
static int gw_array(gw *w, const char *rule, const json_t *s, int depth) {
    json_int_t lo = int_or(s, "minItems", 0), hi = int_or(s, "maxItems", -1);
    if (lo > GC_MAX_ITEMS || hi > GC_MAX_ITEMS)
        return strata_err_set(w->err, STRATA_EUNSUPPORTED, "array bounds past %d", GC_MAX_ITEMS);
    if (lo < 0) lo = 0;
    if (hi >= 0 && lo > hi)
        return strata_err_set(w->err, STRATA_EINVALID, "minItems is above maxItems");
    if (hi == 0) return gw_addf(w, "%s ::= \"[]\"\n", rule);
    const json_t *items = json_object_get(s, "items");
    char it[32] = "gc-v0", rep[48] = "*";
    if (json_is_object(items)) gw_name(w, it);
    json_int_t a = lo ? lo - 1 : 0; /* the items after the first */
    if (hi < 0 && a) snprintf(rep, sizeof rep, "{%lld,}", (long long)a);
    else if (hi > 0) snprintf(rep, sizeof rep, "{%lld,%lld}", (long long)a, (long long)hi - 1);
    int rc = gw_addf(w, "%s ::= \"[\" %s%s", rule, lo ? "" : "( ", it);
    if (!rc && hi != 1) rc = gw_addf(w, " ( \",\" %s )%s", it, rep);
    if (!rc) rc = gw_addf(w, "%s \"]\"\n", lo ? "" : " )?");
    if (!rc && json_is_object(items)) rc = gw_value(w, it, items, depth + 1);
    return rc;
}

/* rule ::= any of the types of a type list, each with the rest of s. */
static int gw_types(gw *w, const char *rule, const json_t *s, int depth) {
    const json_t *types = json_object_get(s, "type");
    size_t i, n = json_array_size(types);
    int rc = gw_addf(w, "%s ::= ", rule), first = w->n;
    for (i = 0; i < n && !rc; i++) rc = gw_addf(w, "%sgc-s%d", i ? " | " : "", first + (int)i);
    if (!rc) rc = gw_addf(w, "%s\n", n ? "" : "gc-v0");
    w->n += (int)n;
    for (i = 0; i < n && !rc; i++) {
        json_t *one = json_copy((json_t *)s);
        char name[32];
        snprintf(name, sizeof name, "gc-s%d", first + (int)i);
        if (!one || json_object_set((json_t *)one, "type", json_array_get(types, i)))
            rc = gw_nomem(w);
        if (!rc) rc = gw_value(w, name, one, depth);
        json_decref(one);
    }
    return rc;
}

static int is_type(const char *t, const char *want) { return t && !strcmp(t, want); }

/* The type a schema without "type" has by its keywords (NULL: any value). */
static const char *implied_type(const json_t *s) {
    if (json_object_get(s, "properties")) return "object";
    if (json_object_get(s, "items")) return "array";
    return NULL;
}

/* rule ::= the Gemma text of the values of schema s. */
static int gw_value(gw *w, const char *rule, const json_t *s, int depth) {
    if (json_is_array(json_object_get(s, "enum")) || json_object_get(s, "const"))
        return gw_enum(w, rule, s);
    const json_t *type = json_object_get(s, "type");
    if (json_is_array(type)) return gw_types(w, rule, s, depth);
    const char *t = type ? json_string_value(type) : implied_type(s);
    if (!t || depth > GC_SCHEMA_DEPTH) return gw_addf(w, "%s ::= gc-v0\n", rule);
    if (is_type(t, "string")) return gw_string(w, rule, s);
    if (is_type(t, "integer") || is_type(t, "number") || is_type(t, "boolean") ||
        is_type(t, "null"))
        return schema_gbnf(s, rule, w->out, w->err);
    if (is_type(t, "object"))
        return json_is_object(json_object_get(s, "properties"))
                   ? gw_object(w, rule, s, depth)
                   : gw_addf(w, "%s ::= gc-o0\n", rule);
    if (is_type(t, "array")) return gw_array(w, rule, s, depth);
    return gw_addf(w, "%s ::= gc-v0\n", rule);
}

/* The rules every grammar holds: text up to the marker and any value, GC_DEPTH deep. */
static int gw_generic(gw *w) {
    int rc = gbnf_until(w->out, "gc-text", QUOTE) ? gw_nomem(w) : 0;
    if (!rc)
        rc = gw_addf(w, "gc-str ::= \"<|\\\"|>\" gc-text\n"
                        "gc-num ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,17} ) ( \".\" [0-9]{1,20} )? "
                        "( [eE] [-+]? [0-9]{1,2} )?\n"
                        "gc-key ::= [A-Za-z_] [A-Za-z0-9_]{0,63}\n");
    for (int d = 0; d <= GC_DEPTH && !rc; d++) {
        rc = gw_addf(w, "gc-v%d ::= gc-str | gc-num | \"true\" | \"false\" | \"null\"", d);
        if (!rc && d < GC_DEPTH) rc = gw_addf(w, " | gc-o%d | gc-a%d", d, d);
        if (!rc) rc = gw_addf(w, "\n");
        if (rc || d == GC_DEPTH) continue;
        rc = gw_addf(w,
                     "gc-o%d ::= \"{\" ( gc-key \":\" gc-v%d ( \",\" gc-key \":\" gc-v%d )* )? "
                     "\"}\"\ngc-a%d ::= \"[\" ( gc-v%d ( \",\" gc-v%d )* )? \"]\"\n",
                     d, d + 1, d + 1, d, d + 1, d + 1);
    }
    return rc;
}

/* gc-fK ::= NAME{arguments}: the declared parameters, or any object for a free-form one. */
static int gw_function(gw *w, int k, const json_t *fn) {
    const char *name = json_string_value(json_object_get(fn, "name"));
    const json_t *params = json_object_get(fn, "parameters");
    char rule[32];
    snprintf(rule, sizeof rule, "gc-f%d-a", k);
    if (!bare_name(name))
        return strata_err_set(w->err, STRATA_EUNSUPPORTED,
                              "tool '%.100s': the name cannot be written in Gemma 4's call syntax",
                              name);
    int rc = gw_addf(w, "gc-f%d ::= ", k);
    if (!rc) rc = gw_lit(w, name, strlen(name));
    if (!rc) rc = gw_addf(w, " %s\n", rule);
    if (rc) return rc;
    int free_form = json_is_object(params) && !json_object_get(params, "properties") &&
                    !json_object_get(params, "required") &&
                    !json_object_get(params, "additionalProperties");
    if (free_form) return gw_addf(w, "%s ::= gc-o0\n", rule);
    if (!json_is_object(params)) return gw_addf(w, "%s ::= \"{}\"\n", rule);
    if ((rc = gw_object(w, rule, params, 0)) && rc != STRATA_ENOMEM) {
        char msg[sizeof w->err->msg];
        snprintf(msg, sizeof msg, "%s", w->err->msg);
        return strata_err_set(w->err, rc, "tool '%.100s': %s", name, msg);
    }
    return rc;
}

int toolcall_grammar_gemma(const json_t *tools, const char *name, int single, strbuf *out,
                           strata_err *err) {
    gw w = {out, err, 0};
    size_t i;
    json_t *t;
    int n = 0;
    int rc = gw_addf(&w, single ? "root ::= gc-call\n" : "root ::= gc-call+\n");
    if (!rc) rc = gw_addf(&w, "gc-call ::= \"<|tool_call>call:\" (");
    json_array_foreach((json_t *)tools, i, t) {
        const char *fn = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (rc || !fn || (name && strcmp(fn, name))) continue;
        rc = gw_addf(&w, "%sgc-f%d", n++ ? " | " : "", (int)i);
    }
    if (rc) return rc;
    if (!n) return strata_err_set(err, STRATA_EINVALID, "no tool to call");
    if ((rc = gw_addf(&w, ") \"<tool_call|>\"\n")) || (rc = gw_generic(&w))) return rc;
    json_array_foreach((json_t *)tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        const char *fname = json_string_value(json_object_get(fn, "name"));
        if (!fname || (name && strcmp(fname, name))) continue;
        if ((rc = gw_function(&w, (int)i, fn))) return rc;
    }
    return 0;
}
