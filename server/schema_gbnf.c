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
 * (sg.oom), checked where rules are written, so the many small appends need no checks.
 *
 * This file holds the entry points and the walk: keywords, $ref targets, enum/const and
 * anyOf/oneOf/allOf, and the errors, paths and rules every part writes through.
 * schema_gbnf_value.c writes values' text, the shared rules, strings and numbers;
 * schema_gbnf_object.c objects and arrays (schema_gbnf_internal.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/schema_gbnf.h"
#include "server/schema_gbnf_internal.h"

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

/* ---- errors and paths ------------------------------------------------------------------ */

int sg_fail(sg *c, int code, const char *fmt, ...) {
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return strata_err_set(c->err, code, "json_schema: %s at %s", what,
                          c->path_len ? c->path : "the root");
}

int sg_nomem(sg *c) { return strata_err_set(c->err, STRATA_ENOMEM, "json_schema: out of memory"); }

/* Appends /seg (escaped as a JSON pointer) to the path; returns the length to pop back to. A
 * path too long for the buffer is cut: it only names places in messages. */
size_t sg_push(sg *c, const char *seg) {
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

size_t sg_push_i(sg *c, const char *seg, size_t i) {
    char num[24];
    size_t at = sg_push(c, seg);
    snprintf(num, sizeof num, "%zu", i);
    sg_push(c, num);
    return at;
}

void sg_pop(sg *c, size_t at) {
    c->path_len = at;
    c->path[at] = 0;
}

/* ---- rules ----------------------------------------------------------------------------- */

int sg_written(sg *c) {
    if (c->oom) return sg_nomem(c);
    if (c->out.len > SG_MAX_OUT)
        return sg_fail(c, STRATA_EUNSUPPORTED, "the grammar grows past %u bytes", SG_MAX_OUT);
    return 0;
}

/* Writes `<name>-<k> ::= body` for a fresh k and appends its name to term. */
int sg_rule(sg *c, strbuf *term, const strbuf *body) {
    int k = ++c->n_aux;
    if (body->len > SG_MAX_OUT)
        return sg_fail(c, STRATA_EUNSUPPORTED, "the grammar grows past %u bytes", SG_MAX_OUT);
    sg_putf(c, &c->out, "%s-%d ::= ", c->name, k);
    sg_put(c, &c->out, body->p ? body->p : "");
    sg_put(c, &c->out, "\n");
    sg_putf(c, term, "%s-%d", c->name, k);
    return sg_written(c);
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
int sg_count(sg *c, const json_t *s, const char *key, long long def, long long *out) {
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
            if (k == 0) sg_putf(c, &c->out, "%s ::= ", c->name);
            else sg_putf(c, &c->out, "%s-ref-%d ::= ", c->name, k);
            sg_put(c, &c->out, body.p);
            sg_put(c, &c->out, "\n");
            int w = sg_written(c);
            rc = w ? w : 1;
        }
        memcpy(c->path, saved, saved_len + 1);
        c->path_len = saved_len;
        strbuf_free(&body);
        if (rc <= 0) return rc;
    }
    if (!e->prod) return 0;
    if (k == 0) sg_put(c, term, c->name);
    else sg_putf(c, term, "%s-ref-%d", c->name, k);
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
    if (count > 1) sg_put(c, term, "( ");
    if (count) sg_put(c, term, alts->p);
    if (count > 1) sg_put(c, term, " )");
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
        sg_put_json(c, &text, v);
        if (count++) sg_put(c, &alts, " | ");
        sg_put_lit(c, &alts, text.p ? text.p : "", text.len);
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
        if (rc > 0) sg_put(c, &alts, count++ ? " | " : ""), sg_put(c, &alts, one.p);
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
    if (!strcmp(t, "null")) return sg_put(c, term, "\"null\""), 1;
    if (!strcmp(t, "boolean")) return sg_put(c, term, "( \"true\" | \"false\" )"), 1;
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
        if (rc > 0) sg_put(c, &alts, count++ ? " | " : ""), sg_put(c, &alts, one.p);
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
int sg_schema(sg *c, const json_t *s, strbuf *term) {
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
