/* jinja_value.c - the Python-like values templates compute with.
 *
 * Rules copied from CPython, because chat templates print and compare Python
 * objects: str()/repr() of None/True/floats/lists/dicts (quotes chosen as repr
 * does, non-printable characters escaped), == across int/float/bool, ordering
 * that refuses mixed types, and Jinja2's Undefined (prints empty, falsy, iterates
 * empty, compares equal only to another Undefined). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/template/jinja_internal.h"

int jinja_ctx_fail(jctx *c, int code, int line, const char *fmt, ...) {
    if (c->err_set) return code;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->err_set = 1;
    if (c->stmt_line > 0) line = c->stmt_line;
    if (line > 0) strata_err_set(c->err, code, "chat template line %d: %s", line, msg);
    else strata_err_set(c->err, code, "chat template: %s", msg);
    return code;
}

int jinja_ctx_nomem(jctx *c, int line) {
    if (jinja_arena_over_budget(c->a))
        return jinja_ctx_fail(c, STRATA_ERANGE, line, "template used more than its memory limit");
    return jinja_ctx_fail(c, STRATA_ENOMEM, line, "out of memory");
}

/* ---- constructors ------------------------------------------------------------------ */

jv jinja_str_cp(jctx *c, const char *s, size_t n, size_t ncp) {
    jstr *js = jinja_arena_alloc(c->a, sizeof(jstr) + n + 1);
    if (!js) {
        jv v = jinja_undef();
        v.fn = 1; /* marks an allocation failure (see jinja_is_oom) */
        return v;
    }
    js->len = n;
    js->ncp = ncp;
    if (n) memcpy(js->p, s, n);
    js->p[n] = 0;
    jv v = {0};
    v.kind = JV_STR;
    v.u.s = js;
    return v;
}

jv jinja_str(jctx *c, const char *s, size_t n) {
    return jinja_str_cp(c, s, n, jinja_utf8_count(s, n));
}

jv jinja_strz(jctx *c, const char *s) { return jinja_str(c, s, strlen(s)); }

int jinja_is_oom(jv v) { return v.kind == JV_UNDEF && v.fn == 1; }

jv jinja_list(jctx *c, size_t cap) {
    jlist *l = jinja_arena_alloc(c->a, sizeof *l);
    jv v = jinja_undef();
    if (!l) {
        v.fn = 1;
        return v;
    }
    l->n = 0;
    l->cap = cap ? cap : 4;
    l->v = jinja_arena_alloc(c->a, l->cap * sizeof(jv));
    if (!l->v) {
        v.fn = 1;
        return v;
    }
    v.kind = JV_LIST;
    v.u.l = l;
    return v;
}

int jinja_list_push(jctx *c, jlist *l, jv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *nv = jinja_arena_alloc(c->a, cap * sizeof(jv));
        if (!nv) return STRATA_ENOMEM;
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

jv jinja_dict(jctx *c, size_t cap) {
    jdict *d = jinja_arena_alloc(c->a, sizeof *d);
    jv v = jinja_undef();
    if (!d) {
        v.fn = 1;
        return v;
    }
    d->n = 0;
    d->cap = cap ? cap : 4;
    d->k = jinja_arena_alloc(c->a, d->cap * sizeof(jv));
    d->v = jinja_arena_alloc(c->a, d->cap * sizeof(jv));
    if (!d->k || !d->v) {
        v.fn = 1;
        return v;
    }
    v.kind = JV_DICT;
    v.u.d = d;
    return v;
}

int jinja_dict_get(const jdict *d, jv k, jv *out) {
    for (size_t i = 0; i < d->n; i++) {
        if (jinja_eq(d->k[i], k)) {
            if (out) *out = d->v[i];
            return 1;
        }
    }
    return 0;
}

int jinja_dict_gets(const jdict *d, const char *k, jv *out) {
    size_t n = strlen(k);
    for (size_t i = 0; i < d->n; i++) {
        const jv *key = &d->k[i];
        if (key->kind == JV_STR && key->u.s->len == n && !memcmp(key->u.s->p, k, n)) {
            if (out) *out = d->v[i];
            return 1;
        }
    }
    return 0;
}

int jinja_dict_set(jctx *c, jdict *d, jv k, jv v) {
    for (size_t i = 0; i < d->n; i++) {
        if (jinja_eq(d->k[i], k)) {
            d->v[i] = v; /* Python keeps the first key object and its position */
            return 0;
        }
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jv *nk = jinja_arena_alloc(c->a, cap * sizeof(jv));
        jv *nv = jinja_arena_alloc(c->a, cap * sizeof(jv));
        if (!nk || !nv) return STRATA_ENOMEM;
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(jv));
            memcpy(nv, d->v, d->n * sizeof(jv));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    return 0;
}

static jv undef_new(jctx *c, jundef **u) {
    *u = jinja_arena_alloc(c->a, sizeof **u);
    jv v = jinja_undef();
    if (!*u) {
        v.fn = 1;
        return v;
    }
    memset(*u, 0, sizeof **u);
    v.u.u = *u;
    return v;
}

jv jinja_undef_named(jctx *c, const char *name) {
    jundef *u;
    jv v = undef_new(c, &u);
    if (u) u->name = name;
    return v;
}

jv jinja_undef_attr(jctx *c, jv obj, const char *name) {
    jundef *u;
    jv v = undef_new(c, &u);
    if (u) u->name = name, u->obj = obj, u->has_obj = 1;
    return v;
}

jv jinja_undef_elem(jctx *c, jv obj, jv key) {
    jundef *u;
    jv v = undef_new(c, &u);
    if (!u) return v;
    strbuf b;
    jinja_buf_init(&b, c->a, 200);
    if (jinja_write_repr(c, &b, key) < 0 || !b.p) {
        u->name = "?";
    } else {
        u->name = b.p;
    }
    u->obj = obj;
    u->has_obj = 1;
    u->is_element = 1;
    return v;
}

jv jinja_undef_hint(jctx *c, const char *hint) {
    jundef *u;
    jv v = undef_new(c, &u);
    if (u) u->hint = hint;
    return v;
}

/* Jinja2's object_type_repr: "dict object", "None", "str object". */
static const char *type_repr(jctx *c, jv obj) {
    if (obj.kind == JV_NONE) return "None";
    char *p = jinja_arena_alloc(c->a, 64);
    if (!p) return "object";
    snprintf(p, 64, "%s object", jinja_typename(obj));
    return p;
}

const char *jinja_undef_message(jctx *c, jv v) {
    const jundef *u = v.u.u;
    char *p = jinja_arena_alloc(c->a, 400);
    if (!p) return "undefined value";
    if (!u) return "undefined value";
    if (u->hint) return u->hint;
    if (!u->has_obj) snprintf(p, 400, "'%s' is undefined", u->name ? u->name : "");
    else if (u->is_element) snprintf(p, 400, "%s has no element %s", type_repr(c, u->obj), u->name);
    else snprintf(p, 400, "'%s' has no attribute '%s'", type_repr(c, u->obj), u->name);
    return p;
}

/* ---- predicates ------------------------------------------------------------------ */

const char *jinja_typename(jv v) {
    switch ((jinja_kind)v.kind) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return v.markup ? "Markup" : "str";
    case JV_LIST: return "list";
    case JV_TUPLE: return "tuple";
    case JV_DICT: return "dict";
    case JV_NS: return "TemplateNamespace";
    case JV_MACRO: return "Macro";
    case JV_FUNC: return "function";
    case JV_METHOD: return "builtin_function_or_method";
    case JV_LOOP: return "LoopContext";
    case JV_CYCLER: return "Cycler";
    case JV_JOINER: return "Joiner";
    case JV_ITER: return v.fn == JITER_GENERATOR ? "generator" : "list_reverseiterator";
    case JV_VIEW:
        return v.fn == JVIEW_KEYS     ? "dict_keys"
               : v.fn == JVIEW_VALUES ? "dict_values"
                                      : "dict_items";
    case JV_RANGE: return "range";
    }
    return "object";
}

int jinja_is_num(jv v) { return v.kind == JV_BOOL || v.kind == JV_INT || v.kind == JV_FLOAT; }

double jinja_as_double(jv v) { return v.kind == JV_FLOAT ? v.u.f : (double)v.u.i; }

int jinja_truthy(jv v) {
    switch ((jinja_kind)v.kind) {
    case JV_UNDEF:
    case JV_NONE: return 0;
    case JV_BOOL:
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST:
    case JV_TUPLE: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    case JV_LOOP: return v.u.lp->items->n != 0; /* LoopContext has __len__ */
    case JV_VIEW:
    case JV_RANGE: return v.u.l->n != 0;
    default: return 1; /* generators are always true, even when empty */
    }
}

int64_t jinja_len(jv v) {
    switch ((jinja_kind)v.kind) {
    case JV_UNDEF: return 0;
    case JV_STR: return (int64_t)v.u.s->ncp;
    case JV_LIST:
    case JV_TUPLE: return (int64_t)v.u.l->n;
    case JV_DICT: return (int64_t)v.u.d->n;
    case JV_LOOP: return (int64_t)v.u.lp->items->n;
    case JV_VIEW:
    case JV_RANGE: return (int64_t)v.u.l->n;
    default: return -1;
    }
}

int jinja_hashable(jv v) {
    if (v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_NS) return 0;
    if (v.kind == JV_TUPLE)
        for (size_t i = 0; i < v.u.l->n; i++)
            if (!jinja_hashable(v.u.l->v[i])) return 0;
    return 1;
}

int jinja_eq(jv a, jv b) {
    if (jinja_is_num(a) && jinja_is_num(b)) {
        if (a.kind == JV_FLOAT || b.kind == JV_FLOAT)
            return jinja_as_double(a) == jinja_as_double(b);
        return a.u.i == b.u.i;
    }
    if (a.kind != b.kind) return 0;
    switch ((jinja_kind)a.kind) {
    case JV_UNDEF:
    case JV_NONE: return 1;
    case JV_STR: return a.u.s->len == b.u.s->len && !memcmp(a.u.s->p, b.u.s->p, a.u.s->len);
    case JV_LIST:
    case JV_TUPLE:
    case JV_RANGE:
        if (a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jinja_eq(a.u.l->v[i], b.u.l->v[i])) return 0;
        return 1;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv other;
            if (!jinja_dict_get(b.u.d, a.u.d->k[i], &other) || !jinja_eq(a.u.d->v[i], other))
                return 0;
        }
        return 1;
    case JV_FUNC: return a.fn == b.fn;
    case JV_METHOD: return a.u.me == b.u.me;
    default: return a.u.d == b.u.d; /* identity */
    }
}

int jinja_cmp(jctx *c, int line, jv a, jv b, int *res) {
    if (a.kind == JV_UNDEF || b.kind == JV_UNDEF)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "%s",
                              jinja_undef_message(c, a.kind == JV_UNDEF ? a : b));
    if (jinja_is_num(a) && jinja_is_num(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) *res = (a.u.i > b.u.i) - (a.u.i < b.u.i);
        else {
            double x = jinja_as_double(a), y = jinja_as_double(b);
            *res = (x > y) - (x < y);
        }
        return 0;
    }
    if (a.kind == JV_STR && b.kind == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int r = memcmp(a.u.s->p, b.u.s->p, n); /* UTF-8 byte order is code point order */
        if (r == 0) r = (a.u.s->len > b.u.s->len) - (a.u.s->len < b.u.s->len);
        *res = (r > 0) - (r < 0);
        return 0;
    }
    if ((a.kind == JV_LIST || a.kind == JV_TUPLE) && a.kind == b.kind) {
        size_t i = 0;
        for (; i < a.u.l->n && i < b.u.l->n; i++) {
            if (jinja_eq(a.u.l->v[i], b.u.l->v[i])) continue;
            return jinja_cmp(c, line, a.u.l->v[i], b.u.l->v[i], res);
        }
        *res = (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
        return 0;
    }
    return jinja_ctx_fail(c, STRATA_EINVALID, line,
                          "'<' not supported between instances of '%s' and '%s'", jinja_typename(a),
                          jinja_typename(b));
}

/* ---- str() and repr() --------------------------------------------------------------- */

int jinja_write_float(strbuf *b, double f) {
    if (isnan(f)) return strbuf_adds(b, "nan");
    if (isinf(f)) return strbuf_adds(b, f < 0 ? "-inf" : "inf");
    char tmp[40];
    int prec = 0;
    for (prec = 0; prec < 17; prec++) { /* shortest digits that round-trip, as repr */
        snprintf(tmp, sizeof tmp, "%.*e", prec, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp is [-]d[.ddd]e[+-]xx: split into digits and exponent */
    char digits[24];
    size_t nd = 0;
    const char *p = tmp;
    int neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp < -4 || exp >= 16) {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (size_t i = 1; i < nd; i++) out[o++] = digits[i];
        }
        o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", exp < 0 ? '-' : '+',
                              exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -exp - 1; i++) out[o++] = '0';
        for (size_t i = 0; i < nd; i++) out[o++] = digits[i];
    } else {
        for (int i = 0; i <= exp; i++) out[o++] = (size_t)i < nd ? digits[i] : '0';
        out[o++] = '.';
        if ((size_t)exp + 1 < nd)
            for (size_t i = (size_t)exp + 1; i < nd; i++) out[o++] = digits[i];
        else out[o++] = '0';
    }
    return strbuf_add(b, out, o);
}

static int write_str_repr(strbuf *b, const jstr *s) {
    int has_sq = memchr(s->p, '\'', s->len) != NULL, has_dq = memchr(s->p, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    JTRY(strbuf_addc(b, q));
    size_t i = 0, run = 0;
    while (i < s->len) {
        size_t start = i;
        uint32_t cp = jinja_utf8_next(s->p, s->len, &i);
        char esc[12];
        int ne = 0;
        if (cp == (uint32_t)q || cp == '\\') {
            esc[0] = '\\', esc[1] = (char)cp, ne = 2;
        } else if (cp == '\t') {
            memcpy(esc, "\\t", 2), ne = 2;
        } else if (cp == '\n') {
            memcpy(esc, "\\n", 2), ne = 2;
        } else if (cp == '\r') {
            memcpy(esc, "\\r", 2), ne = 2;
        } else if (cp < 0x20 || cp == 0x7F) {
            ne = snprintf(esc, sizeof esc, "\\x%02x", cp);
        } else if (cp >= 0x80 && !unicode_py_isprintable(cp)) {
            if (cp <= 0xFF) ne = snprintf(esc, sizeof esc, "\\x%02x", cp);
            else if (cp <= 0xFFFF) ne = snprintf(esc, sizeof esc, "\\u%04x", cp);
            else ne = snprintf(esc, sizeof esc, "\\U%08x", cp);
        }
        if (ne) {
            JTRY(strbuf_add(b, s->p + run, start - run));
            JTRY(strbuf_add(b, esc, (size_t)ne));
            run = i;
        }
    }
    JTRY(strbuf_add(b, s->p + run, s->len - run));
    return strbuf_addc(b, q);
}

static int write_seq(jctx *c, strbuf *b, const jlist *l, char open, char close, int tuple) {
    JTRY(strbuf_addc(b, open));
    for (size_t i = 0; i < l->n; i++) {
        if (i) JTRY(strbuf_add(b, ", ", 2));
        JTRY(jinja_write_repr(c, b, l->v[i]));
    }
    if (tuple && l->n == 1) JTRY(strbuf_addc(b, ','));
    return strbuf_addc(b, close);
}

static int write_dict(jctx *c, strbuf *b, const jdict *d) {
    JTRY(strbuf_addc(b, '{'));
    for (size_t i = 0; i < d->n; i++) {
        if (i) JTRY(strbuf_add(b, ", ", 2));
        JTRY(jinja_write_repr(c, b, d->k[i]));
        JTRY(strbuf_add(b, ": ", 2));
        JTRY(jinja_write_repr(c, b, d->v[i]));
    }
    return strbuf_addc(b, '}');
}

static int write_common(jctx *c, strbuf *b, jv v, int repr) {
    switch ((jinja_kind)v.kind) {
    case JV_UNDEF: return repr ? strbuf_adds(b, "Undefined") : 0;
    case JV_NONE: return strbuf_adds(b, "None");
    case JV_BOOL: return strbuf_adds(b, v.u.i ? "True" : "False");
    case JV_INT: return strbuf_addf(b, "%lld", (long long)v.u.i);
    case JV_FLOAT: return jinja_write_float(b, v.u.f);
    case JV_STR:
        if (!repr) return strbuf_add(b, v.u.s->p, v.u.s->len);
        if (v.markup) JTRY(strbuf_adds(b, "Markup("));
        JTRY(write_str_repr(b, v.u.s));
        return v.markup ? strbuf_addc(b, ')') : 0;
    case JV_LIST: return write_seq(c, b, v.u.l, '[', ']', 0);
    case JV_TUPLE: return write_seq(c, b, v.u.l, '(', ')', 1);
    case JV_DICT: return write_dict(c, b, v.u.d);
    case JV_NS:
        JTRY(strbuf_adds(b, "<Namespace "));
        JTRY(write_dict(c, b, v.u.d));
        return strbuf_addc(b, '>');
    case JV_MACRO:
        JTRY(strbuf_adds(b, "<Macro "));
        if (v.u.m->name) {
            jv name = jinja_strz(c, v.u.m->name);
            if (jinja_is_oom(name)) return STRATA_ENOMEM;
            JTRY(write_str_repr(b, name.u.s));
        } else {
            JTRY(strbuf_adds(b, "'caller'"));
        }
        return strbuf_addc(b, '>');
    case JV_LOOP: return strbuf_addf(b, "<LoopContext %zu/%zu>", v.u.lp->idx + 1, v.u.lp->items->n);
    case JV_FUNC: return strbuf_adds(b, "<function>");
    case JV_METHOD: return strbuf_adds(b, "<built-in method>");
    case JV_CYCLER: return strbuf_adds(b, "<jinja2.utils.Cycler object>");
    case JV_JOINER: return strbuf_adds(b, "<jinja2.utils.Joiner object>");
    case JV_ITER:
        return strbuf_adds(b, v.fn == JITER_GENERATOR ? "<generator object>"
                                                      : "<reverse iterator object>");
    case JV_RANGE: {
        const jrange *r = (const jrange *)v.u.l;
        if (r->step == 1)
            return strbuf_addf(b, "range(%lld, %lld)", (long long)r->start, (long long)r->stop);
        return strbuf_addf(b, "range(%lld, %lld, %lld)", (long long)r->start, (long long)r->stop,
                           (long long)r->step);
    }
    case JV_VIEW:
        JTRY(strbuf_adds(b, jinja_typename(v)));
        JTRY(strbuf_addc(b, '('));
        JTRY(write_seq(c, b, v.u.l, '[', ']', 0));
        return strbuf_addc(b, ')');
    }
    return 0;
}

int jinja_write_str(jctx *c, strbuf *b, jv v) { return write_common(c, b, v, 0); }

int jinja_write_repr(jctx *c, strbuf *b, jv v) { return write_common(c, b, v, 1); }

jv jinja_to_str(jctx *c, jv v) {
    if (v.kind == JV_STR) return v;
    strbuf b;
    jinja_buf_init(&b, c->a, 0);
    jv r = jinja_undef();
    if (jinja_write_str(c, &b, v) < 0) {
        r.fn = 1;
        return r;
    }
    return jinja_str(c, b.p ? b.p : "", b.len);
}

int jinja_iterate(jctx *c, int line, jv v, jlist **out) {
    jv l;
    switch ((jinja_kind)v.kind) {
    case JV_LIST:
    case JV_TUPLE: *out = v.u.l; return 0;
    case JV_UNDEF:
        if (v.u.u && v.u.u->security)
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "%s", jinja_undef_message(c, v));
        l = jinja_list(c, 1);
        break;
    case JV_DICT:
    case JV_STR: l = jinja_list(c, v.kind == JV_DICT ? v.u.d->n : v.u.s->ncp); break;
    case JV_LOOP: *out = v.u.lp->items; return 0;
    case JV_ITER:
    case JV_VIEW:
    case JV_RANGE: *out = v.u.l; return 0;
    default:
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "'%s' object is not iterable",
                              jinja_typename(v));
    }
    if (jinja_is_oom(l)) return jinja_ctx_nomem(c, line);
    if (v.kind == JV_DICT) {
        for (size_t i = 0; i < v.u.d->n; i++) l.u.l->v[l.u.l->n++] = v.u.d->k[i];
    } else if (v.kind == JV_STR) {
        size_t i = 0;
        while (i < v.u.s->len) {
            size_t st = i;
            jinja_utf8_next(v.u.s->p, v.u.s->len, &i);
            jv ch = jinja_str_cp(c, v.u.s->p + st, i - st,
                                 1); /* str.__iter__: plain str even for Markup */
            if (jinja_is_oom(ch)) return jinja_ctx_nomem(c, line);
            l.u.l->v[l.u.l->n++] = ch;
        }
    }
    *out = l.u.l;
    return 0;
}
