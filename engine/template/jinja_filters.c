/* jinja_filters.c - Jinja2's builtin tests and the first half of its filters
 * (string and scalar filters); jinja_filters2.c holds the sequence filters.
 *
 * Each filter is a port of the Python function in jinja2/filters.py 3.1 and keeps
 * its quirks: |int turns "42.23" into 42, |length of an undefined is 0, |first of
 * an empty list is undefined, |indent leaves empty lines alone, |title splits words
 * on "-", whitespace and opening brackets. Filters Jinja2 has but chat templates do
 * not need (urlize, wordwrap, random, ...) are recognised and refused at run time,
 * so a template using them in a branch never taken still renders, as in Jinja2. */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/template/jinja_internal.h"

int jinja_bind_args(jctx *c, int line, const char *fname, const char *const *params, size_t np,
                    jv *args, size_t nargs, const char **kwn, jv *kwv, size_t nkw, jv *out) {
    if (nargs > np)
        return jinja_ctx_fail(c, STRATA_EINVALID, line,
                              "%s() takes at most %zu arguments (%zu given)", fname, np, nargs);
    for (size_t i = 0; i < np; i++) out[i] = i < nargs ? args[i] : jinja_missing();
    for (size_t k = 0; k < nkw; k++) {
        size_t i = 0;
        while (i < np && strcmp(params[i], kwn[k])) i++;
        if (i == np)
            return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                  "%s() got an unexpected keyword argument '%s'", fname, kwn[k]);
        if (jinja_given(out[i]))
            return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                  "%s() got multiple values for argument '%s'", fname, kwn[k]);
        out[i] = kwv[k];
    }
    return 0;
}

/* str(value) as Jinja2's soft_str does (Undefined is ""; Markup stays Markup). */
static int soft_str(jctx *c, int line, jv v, jv *out) {
    if (v.kind == JV_UNDEF) {
        if (v.u.u && v.u.u->security) return jinja_check_defined(c, line, v);
        *out = jinja_strz(c, "");
    } else {
        *out = jinja_to_str(c, v);
    }
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}

static int is_int_like(jv v) {
    return v.kind == JV_INT || v.kind == JV_BOOL;
}

/* ---- the `in` operator and tests ---------------------------------------------------- */

static int contains(jctx *c, int line, jv seq, jv item, int *res) {
    jlist *items;
    *res = 0;
    switch ((jinja_kind)seq.kind) {
    case JV_STR:
        if (item.kind != JV_STR)
            return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                  "'in <string>' requires string as left operand, not %s",
                                  jinja_typename(item));
        *res = item.u.s->len == 0 ||
               memmem(seq.u.s->p, seq.u.s->len, item.u.s->p, item.u.s->len) != NULL;
        return 0;
    case JV_DICT:
        if (!jinja_hashable(item))
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "unhashable type: '%s'",
                                  jinja_typename(item));
        *res = jinja_dict_get(seq.u.d, item, NULL);
        return 0;
    case JV_UNDEF:
        if (seq.u.u && seq.u.u->security) return jinja_check_defined(c, line, seq);
        return 0;
    case JV_LIST:
    case JV_TUPLE:
    case JV_ITER:
    case JV_VIEW:
    case JV_RANGE:
    case JV_LOOP:
        JTRY(jinja_iterate(c, line, seq, &items));
        for (size_t i = 0; i < items->n && !*res; i++) *res = jinja_eq(items->v[i], item);
        return 0;
    default:
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "argument of type '%s' is not iterable",
                              jinja_typename(seq));
    }
}

/* Jinja2's tests: X(name, id, takes an argument). Aliases share the behaviour of
 * their canonical test through the switch below. */
#define JTEST_LIST(X)                                                                              \
    X("boolean", BOOLEAN, 0)                                                                       \
    X("callable", CALLABLE, 0) X("defined", DEFINED, 0) X("divisibleby", DIVISIBLEBY, 1)           \
        X("eq", EQ, 1) X("equalto", EQUALTO, 1) X("==", EQ2, 1) X("escaped", ESCAPED, 0) X(        \
            "even", EVEN, 0) X("false", FALSE, 0) X("filter", FILTER, 0) X("float", FLOAT, 0)      \
            X("ge", GE, 1) X(">=", GE2, 1) X("gt", GT, 1) X("greaterthan", GT3, 1) X(">", GT2, 1)  \
                X("in", IN, 1) X("integer", INTEGER, 0) X("iterable", ITERABLE, 0) X("le", LE, 1)  \
                    X("<=", LE2, 1) X("lower", LOWER, 0) X("lt", LT, 1) X("lessthan", LT3, 1)      \
                        X("<", LT2, 1) X("mapping", MAPPING, 0) X("ne", NE, 1) X("!=", NE2, 1)     \
                            X("none", NONE, 0) X("number", NUMBER, 0) X("odd", ODD, 0)             \
                                X("sameas", SAMEAS, 1) X("sequence", SEQUENCE, 0)                  \
                                    X("string", STRING, 0) X("test", TEST, 0) X("true", TRUE, 0)   \
                                        X("undefined", UNDEFINED, 0) X("upper", UPPER, 0)

enum {
#define X(name, id, arg) JTEST_##id,
    JTEST_LIST(X)
#undef X
        JTEST_COUNT
};
static const struct {
    const char *name;
    int arg;
} tests[] = {
#define X(name, id, arg) {name, arg},
    JTEST_LIST(X)
#undef X
};

int jinja_test_find(const char *name) {
    for (int i = 0; i < JTEST_COUNT; i++)
        if (!strcmp(tests[i].name, name)) return i;
    return -1;
}

static int str_all_case(jctx *c, int line, jv v, int upper, int *res) {
    jv s;
    JTRY(soft_str(c, line, v, &s));
    int cased = 0, ok = 1;
    size_t i = 0;
    while (i < s.u.s->len && ok) {
        uint32_t cp = jinja_utf8_next(s.u.s->p, s.u.s->len, &i);
        if (upper ? (unicode_py_islower(cp) || unicode_py_istitle(cp))
                  : (unicode_py_isupper(cp) || unicode_py_istitle(cp)))
            ok = 0;
        else if (upper ? unicode_py_isupper(cp) : unicode_py_islower(cp))
            cased = 1;
    }
    *res = ok && cased;
    return 0;
}

int jinja_test_apply(jctx *c, int line, int tid, jv v, jv *args, size_t nargs, jv *out) {
    const char *name = tests[tid].name;
    int r = 0, cmp;
    jv arg = nargs ? args[0] : jinja_missing(), tmp;
    if (tests[tid].arg && !jinja_given(arg))
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "test '%s' is missing an argument", name);
    if (nargs > (size_t)tests[tid].arg)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "test '%s' got too many arguments", name);
    switch (tid) {
    case JTEST_DEFINED: r = v.kind != JV_UNDEF; break;
    case JTEST_UNDEFINED: r = v.kind == JV_UNDEF; break;
    case JTEST_NONE: r = v.kind == JV_NONE; break;
    case JTEST_BOOLEAN: r = v.kind == JV_BOOL; break;
    case JTEST_FALSE: r = v.kind == JV_BOOL && !v.u.i; break;
    case JTEST_TRUE: r = v.kind == JV_BOOL && v.u.i; break;
    case JTEST_INTEGER: r = v.kind == JV_INT; break;
    case JTEST_FLOAT: r = v.kind == JV_FLOAT; break;
    case JTEST_NUMBER: r = jinja_is_num(v); break;
    case JTEST_STRING: r = v.kind == JV_STR; break;
    case JTEST_MAPPING: r = v.kind == JV_DICT; break;
    case JTEST_ESCAPED: r = v.kind == JV_STR && v.markup; break;
    case JTEST_CALLABLE: /* Undefined defines __call__ too */
        r = v.kind == JV_MACRO || v.kind == JV_FUNC || v.kind == JV_METHOD || v.kind == JV_JOINER ||
            v.kind == JV_LOOP || v.kind == JV_UNDEF;
        break;
    case JTEST_ITERABLE:
        r = v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_TUPLE || v.kind == JV_DICT ||
            v.kind == JV_UNDEF || v.kind == JV_ITER || v.kind == JV_VIEW || v.kind == JV_LOOP ||
            v.kind == JV_RANGE;
        break;
    case JTEST_SEQUENCE: /* len() and __getitem__: str, list, tuple, dict, range, Undefined */
        r = v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_TUPLE || v.kind == JV_DICT ||
            v.kind == JV_UNDEF || v.kind == JV_RANGE;
        break;
    case JTEST_LOWER:
    case JTEST_UPPER: JTRY(str_all_case(c, line, v, tid == JTEST_UPPER, &r)); break;
    case JTEST_ODD:
    case JTEST_EVEN:
    case JTEST_DIVISIBLEBY: /* value % n == 0 (or == 1 for odd), as Jinja2 computes it */
        JTRY(jinja_eval_binop(c, line, JOP_MOD, v, tid == JTEST_DIVISIBLEBY ? arg : jinja_int(2),
                              &tmp));
        r = jinja_eq(tmp, jinja_int(tid == JTEST_ODD));
        break;
    case JTEST_IN: JTRY(contains(c, line, arg, v, &r)); break;
    case JTEST_SAMEAS: /* identity: singletons, CPython's small ints, the same object */
        r = v.kind == arg.kind &&
            (v.kind == JV_NONE || v.kind == JV_UNDEF ? 1
             : v.kind == JV_BOOL                     ? v.u.i == arg.u.i
             : v.kind == JV_INT   ? v.u.i == arg.u.i && v.u.i >= -5 && v.u.i <= 256
             : v.kind == JV_FLOAT ? 0
                                  : v.u.s == arg.u.s);
        break;
    case JTEST_FILTER: r = v.kind == JV_STR && jinja_filter_find(v.u.s->p) >= 0; break;
    case JTEST_TEST: r = v.kind == JV_STR && jinja_test_find(v.u.s->p) >= 0; break;
    case JTEST_EQ:
    case JTEST_EQUALTO:
    case JTEST_EQ2: r = jinja_eq(v, arg); break;
    case JTEST_NE:
    case JTEST_NE2: r = !jinja_eq(v, arg); break;
    default:
        JTRY(jinja_cmp(c, line, v, arg, &cmp));
        r = tid == JTEST_LT || tid == JTEST_LT2 || tid == JTEST_LT3   ? cmp < 0
            : tid == JTEST_LE || tid == JTEST_LE2                     ? cmp <= 0
            : tid == JTEST_GT || tid == JTEST_GT2 || tid == JTEST_GT3 ? cmp > 0
                                                                      : cmp >= 0;
    }
    *out = jinja_bool(r);
    return 0;
}

/* ---- scalar and string filters ------------------------------------------------------- */

#define FILTER(fname)                                                                              \
    static int fname(jctx *c, int line, jv v, jv *args, size_t nargs, const char **kwn, jv *kwv,   \
                     size_t nkw, jv *out)
#define BIND(pyname, ...)                                                                          \
    static const char *const params_[] = {__VA_ARGS__};                                            \
    jv a[sizeof params_ / sizeof params_[0]];                                                      \
    JTRY(jinja_bind_args(c, line, pyname, params_, sizeof params_ / sizeof params_[0], args,       \
                         nargs, kwn, kwv, nkw, a))
#define NOARGS(pyname)                                                                             \
    do {                                                                                           \
        (void)args, (void)kwn, (void)kwv;                                                          \
        if (nargs || nkw)                                                                          \
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "%s() takes exactly 1 argument",       \
                                  pyname);                                                         \
    } while (0)
#define OOM(x) ((x) < 0 ? jinja_ctx_nomem(c, line) : 0)

FILTER(f_case) { /* upper / lower / capitalize / title share this; mode rides in *out */
    int mode = (int)out->u.i;
    NOARGS("do_case");
    jv s;
    JTRY(soft_str(c, line, v, &s));
    return OOM(jinja_str_case(c, s, mode, out));
}

FILTER(f_trim) {
    BIND("do_trim", "chars");
    jv s;
    JTRY(soft_str(c, line, v, &s));
    if (jinja_given(a[0]) && a[0].kind != JV_NONE && a[0].kind != JV_STR)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "strip arg must be None or str");
    int has = jinja_given(a[0]) && a[0].kind == JV_STR;
    return OOM(
        jinja_filter_py_strip(c, s, has ? a[0].u.s->p : NULL, has ? a[0].u.s->len : 0, 1, 1, out));
}

FILTER(f_string) {
    NOARGS("do_string");
    return soft_str(c, line, v, out);
}

FILTER(f_safe) {
    NOARGS("do_mark_safe");
    JTRY(soft_str(c, line, v, out));
    out->markup = 1;
    return 0;
}

FILTER(f_escape) {
    NOARGS("escape");
    if (v.kind == JV_STR && v.markup && out->u.i == 1) v.markup = 0; /* forceescape */
    *out = jinja_escape(c, v);
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}

FILTER(f_length) {
    NOARGS("len");
    int64_t n = jinja_len(v);
    if (n < 0)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "object of type '%s' has no len()",
                              jinja_typename(v));
    *out = jinja_int(n);
    return 0;
}

FILTER(f_default) {
    BIND("do_default", "default_value", "boolean");
    jv dflt = jinja_given(a[0]) ? a[0] : jinja_strz(c, "");
    if (jinja_is_oom(dflt)) return jinja_ctx_nomem(c, line);
    int boolean = jinja_given(a[1]) && jinja_truthy(a[1]);
    *out = v.kind == JV_UNDEF || (boolean && !jinja_truthy(v)) ? dflt : v;
    return 0;
}

FILTER(f_abs) {
    NOARGS("abs");
    if (!jinja_is_num(v)) {
        JTRY(jinja_check_defined(c, line, v));
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "bad operand type for abs(): '%s'",
                              jinja_typename(v));
    }
    if (v.kind == JV_FLOAT)
        *out = jinja_float(fabs(v.u.f));
    else if (v.u.i == INT64_MIN)
        return jinja_ctx_fail(c, STRATA_ERANGE, line, "integer overflow");
    else
        *out = jinja_int(v.u.i < 0 ? -v.u.i : v.u.i);
    return 0;
}

FILTER(f_int) {
    BIND("do_int", "default", "base");
    jv dflt = jinja_given(a[0]) ? a[0] : jinja_int(0);
    int base = jinja_given(a[1]) && is_int_like(a[1]) ? (int)a[1].u.i : 10;
    int64_t i;
    double f;
    if (v.kind == JV_UNDEF) return jinja_check_defined(c, line, v); /* Undefined.__int__ raises */
    int is_float = v.kind == JV_FLOAT, parsed = 0;
    if (is_int_like(v)) {
        *out = jinja_int(v.u.i);
        return 0;
    }
    if (v.kind == JV_STR && jinja_py_int(v.u.s, base, &i)) {
        *out = jinja_int(i);
        return 0;
    }
    f = is_float ? v.u.f : 0;
    parsed = is_float || (v.kind == JV_STR && jinja_py_float(v.u.s, &f));
    if (is_float && isinf(f)) /* int(inf) raises OverflowError, which do_int does not catch */
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "cannot convert float infinity to integer");
    if (!parsed || !isfinite(f)) {
        *out = dflt;
        return 0;
    }
    if (fabs(f) >= 9.2e18) /* Python answers with a big integer */
        return jinja_ctx_fail(c, STRATA_ERANGE, line, "integer beyond 64 bits");
    *out = jinja_int((int64_t)f);
    return 0;
}

FILTER(f_float) {
    BIND("do_float", "default");
    jv dflt = jinja_given(a[0]) ? a[0] : jinja_float(0.0);
    double f;
    if (v.kind == JV_UNDEF) return jinja_check_defined(c, line, v);
    if (jinja_is_num(v))
        *out = jinja_float(jinja_as_double(v));
    else if (v.kind == JV_STR && jinja_py_float(v.u.s, &f))
        *out = jinja_float(f);
    else
        *out = dflt;
    return 0;
}

FILTER(f_round) {
    BIND("do_round", "precision", "method");
    int64_t prec = jinja_given(a[0]) && is_int_like(a[0]) ? a[0].u.i : 0;
    const char *method = jinja_given(a[1]) && a[1].kind == JV_STR ? a[1].u.s->p : "common";
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "method must be common, ceil or floor");
    if (!jinja_is_num(v)) {
        JTRY(jinja_check_defined(c, line, v));
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "type %s doesn't define __round__ method",
                              jinja_typename(v));
    }
    if (prec < -300 || prec > 300)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "precision out of range");
    double x = jinja_as_double(v), p10 = pow(10.0, (double)prec);
    if (strcmp(method, "common")) { /* math.ceil/floor(value * 10**p) / 10**p: always a float */
        *out = jinja_float((method[0] == 'c' ? ceil(x * p10) : floor(x * p10)) / p10);
        return 0;
    }
    if (v.kind != JV_FLOAT) { /* round(int, n) stays an int */
        *out = jinja_int(v.u.i);
        if (prec < 0) {
            double r = nearbyint(x / pow(10.0, (double)-prec)) * pow(10.0, (double)-prec);
            *out = jinja_int((int64_t)r);
        }
        return 0;
    }
    if (!isfinite(x)) {
        *out = v;
        return 0;
    }
    if (prec >= 0) { /* correctly rounded decimal, ties to even, as CPython's dtoa */
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
        *out = jinja_float(strtod(buf, NULL));
    } else {
        double q = pow(10.0, (double)-prec);
        *out = jinja_float(nearbyint(x / q) * q);
    }
    return 0;
}

FILTER(f_replace) {
    BIND("do_replace", "old", "new", "count");
    if (!jinja_given(a[0]) || !jinja_given(a[1]))
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "do_replace() missing required arguments");
    jv s, old, new;
    JTRY(soft_str(c, line, v, &s));
    JTRY(soft_str(c, line, a[0], &old));
    JTRY(soft_str(c, line, a[1], &new));
    int64_t count = jinja_given(a[2]) && is_int_like(a[2]) ? a[2].u.i : -1;
    strbuf b;
    jinja_buf_init(&b, c->a, c->max_output);
    const char *p = s.u.s->p, *end = p + s.u.s->len;
    size_t ol = old.u.s->len;
    if (ol == 0) { /* Python inserts new between every character (and at both ends) */
        size_t i = 0;
        while (count != 0) {
            if (strbuf_add(&b, new.u.s->p, new.u.s->len) < 0) return jinja_ctx_nomem(c, line);
            if (count > 0) count--;
            if (i >= s.u.s->len) break;
            size_t st = i;
            jinja_utf8_next(p, s.u.s->len, &i);
            if (strbuf_add(&b, p + st, i - st) < 0) return jinja_ctx_nomem(c, line);
        }
        if (i < s.u.s->len && strbuf_add(&b, p + i, s.u.s->len - i) < 0)
            return jinja_ctx_nomem(c, line);
    } else {
        while (count != 0) {
            const char *hit = memmem(p, (size_t)(end - p), old.u.s->p, ol);
            if (!hit) break;
            if (strbuf_add(&b, p, (size_t)(hit - p)) < 0 ||
                strbuf_add(&b, new.u.s->p, new.u.s->len) < 0)
                return jinja_ctx_nomem(c, line);
            p = hit + ol;
            if (count > 0) count--;
        }
        if (strbuf_add(&b, p, (size_t)(end - p)) < 0) return jinja_ctx_nomem(c, line);
    }
    *out = jinja_str(c, b.p ? b.p : "", b.len);
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}

FILTER(f_indent) {
    BIND("do_indent", "width", "first", "blank");
    jv s = v, ind;
    if (v.kind != JV_STR) { /* do_indent does s += "\n" without converting s */
        JTRY(jinja_check_defined(c, line, v));
        return jinja_ctx_fail(c, STRATA_EINVALID, line,
                              "unsupported operand type(s) for +=: '%s' and 'str'",
                              jinja_typename(v));
    }
    if (jinja_given(a[0]) && a[0].kind == JV_STR) {
        ind = a[0];
    } else {
        int64_t w = jinja_given(a[0]) && is_int_like(a[0]) ? a[0].u.i : 4;
        if (jinja_given(a[0]) && !is_int_like(a[0]))
            return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                  "can't multiply sequence by non-int of type '%s'",
                                  jinja_typename(a[0]));
        JTRY(jinja_eval_binop(c, line, JOP_MUL, jinja_strz(c, " "), jinja_int(w), &ind));
    }
    int first = jinja_given(a[1]) && jinja_truthy(a[1]),
        blank = jinja_given(a[2]) && jinja_truthy(a[2]);
    /* s += "\n"; lines = s.splitlines(); rv = first line, then "\n" + indent + line for the
     * rest (empty lines unindented unless blank) */
    jv lines, nl = jinja_strz(c, "\n");
    if (jinja_is_oom(nl)) return jinja_ctx_nomem(c, line);
    JTRY(jinja_eval_binop(c, line, JOP_ADD, s, nl, &s));
    jv meth = jinja_undef();
    JTRY(jinja_eval_getattr(c, line, s, "splitlines", &meth));
    JTRY(jinja_call_value(c, line, meth, NULL, 0, NULL, NULL, 0, &lines));
    strbuf b;
    jinja_buf_init(&b, c->a, c->max_output);
    if (first && OOM(strbuf_add(&b, ind.u.s->p, ind.u.s->len))) return STRATA_ENOMEM;
    for (size_t i = 0; i < lines.u.l->n; i++) {
        const jstr *ls = lines.u.l->v[i].u.s;
        if (i > 0) {
            if (OOM(strbuf_addc(&b, '\n'))) return STRATA_ENOMEM;
            if ((blank || ls->len) && OOM(strbuf_add(&b, ind.u.s->p, ind.u.s->len)))
                return STRATA_ENOMEM;
        }
        if (OOM(strbuf_add(&b, ls->p, ls->len))) return STRATA_ENOMEM;
    }
    *out = jinja_str(c, b.p ? b.p : "", b.len);
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}

FILTER(f_center) {
    BIND("do_center", "width");
    jv s;
    JTRY(soft_str(c, line, v, &s));
    int64_t width = jinja_given(a[0]) && is_int_like(a[0]) ? a[0].u.i : 80,
            len = (int64_t)s.u.s->ncp;
    if (width <= len) {
        *out = s;
        return 0;
    }
    if (width > 1000000) return jinja_ctx_fail(c, STRATA_ERANGE, line, "center width too large");
    int64_t marg = width - len, left = marg / 2 + (marg & width & 1);
    strbuf b;
    jinja_buf_init(&b, c->a, 0);
    for (int64_t i = 0; i < left; i++) JTRY(OOM(strbuf_addc(&b, ' ')));
    JTRY(OOM(strbuf_add(&b, s.u.s->p, s.u.s->len)));
    for (int64_t i = 0; i < marg - left; i++) JTRY(OOM(strbuf_addc(&b, ' ')));
    *out = jinja_str(c, b.p, b.len);
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}

FILTER(f_wordcount) {
    NOARGS("do_wordcount");
    jv s;
    JTRY(soft_str(c, line, v, &s));
    int64_t n = 0;
    int in_word = 0;
    size_t i = 0;
    while (i < s.u.s->len) {
        uint32_t cp = jinja_utf8_next(s.u.s->p, s.u.s->len, &i);
        int w =
            cp == '_' || unicode_py_isalpha(cp) || unicode_py_isdigit(cp) || (cp >= '0' && cp <= '9');
        n += w && !in_word;
        in_word = w;
    }
    *out = jinja_int(n);
    return 0;
}

FILTER(f_format) {
    if (nargs && nkw)
        return jinja_ctx_fail(c, STRATA_EINVALID, line,
                              "can't handle positional and keyword arguments at the same time");
    jv s, rest;
    JTRY(soft_str(c, line, v, &s));
    if (nkw) {
        rest = jinja_dict(c, nkw);
        if (jinja_is_oom(rest)) return jinja_ctx_nomem(c, line);
        for (size_t k = 0; k < nkw; k++) {
            jv key = jinja_strz(c, kwn[k]);
            if (jinja_is_oom(key) || jinja_dict_set(c, rest.u.d, key, kwv[k]) < 0)
                return jinja_ctx_nomem(c, line);
        }
    } else {
        rest = jinja_list(c, nargs);
        if (jinja_is_oom(rest)) return jinja_ctx_nomem(c, line);
        for (size_t i = 0; i < nargs; i++) rest.u.l->v[i] = args[i];
        rest.u.l->n = nargs;
        rest.kind = JV_TUPLE;
    }
    return jinja_format_percent(c, line, s, rest, out);
}

FILTER(f_truncate) {
    BIND("do_truncate", "length", "killwords", "end", "leeway");
    jv s = v, end;
    if (v.kind != JV_STR) { /* do_truncate takes len(s) of whatever it gets */
        int64_t n = jinja_len(v);
        int64_t lim = (jinja_given(a[0]) && is_int_like(a[0]) ? a[0].u.i : 255) +
                      (jinja_given(a[3]) && is_int_like(a[3]) ? a[3].u.i : 5);
        if (v.kind == JV_UNDEF || n < 0)
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "object of type '%s' has no len()",
                                  jinja_typename(v));
        if (n <= lim) {
            *out = v;
            return 0;
        }
        return jinja_ctx_fail(c, STRATA_EUNSUPPORTED, line,
                              "truncate of a long %s is not supported", jinja_typename(v));
    }
    int64_t length = jinja_given(a[0]) && is_int_like(a[0]) ? a[0].u.i : 255;
    int killwords = jinja_given(a[1]) && jinja_truthy(a[1]);
    end = jinja_given(a[2]) ? a[2] : jinja_strz(c, "...");
    if (jinja_is_oom(end)) return jinja_ctx_nomem(c, line);
    JTRY(soft_str(c, line, end, &end));
    int64_t leeway = jinja_given(a[3]) && is_int_like(a[3]) ? a[3].u.i : 5;
    if (length < (int64_t)end.u.s->ncp || leeway < 0)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "expected length >= %zu", end.u.s->ncp);
    if ((int64_t)s.u.s->ncp <= length + leeway) {
        *out = s;
        return 0;
    }
    int64_t keep = length - (int64_t)end.u.s->ncp;
    size_t i = 0;
    for (int64_t k = 0; k < keep; k++) jinja_utf8_next(s.u.s->p, s.u.s->len, &i);
    size_t cut = i;
    if (!killwords) { /* s[:n].rsplit(" ", 1)[0] */
        while (cut > 0 && s.u.s->p[cut - 1] != ' ') cut--;
        cut = cut > 0 ? cut - 1 : i;
    }
    strbuf b;
    jinja_buf_init(&b, c->a, 0);
    if (OOM(strbuf_add(&b, s.u.s->p, cut)) || OOM(strbuf_add(&b, end.u.s->p, end.u.s->len)))
        return STRATA_ENOMEM;
    *out = jinja_str(c, b.p, b.len);
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}

FILTER(f_attr) {
    BIND("do_attr", "name");
    if (!jinja_given(a[0]) || a[0].kind != JV_STR)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "attr() needs a name");
    JTRY(jinja_check_defined(c, line, v));
    if (v.kind == JV_DICT) { /* no key fallback: only real attributes (methods) */
        int id, unsafe;
        if (!jinja_method_find(v, a[0].u.s->p, &id, &unsafe)) {
            *out = jinja_undef_attr(c, v, a[0].u.s->p);
            return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
        }
    }
    return jinja_eval_getattr(c, line, v, a[0].u.s->p, out);
}

/* ---- the filter table ------------------------------------------------------------------- */

typedef struct {
    const char *name;
    jinja_filter_fn fn;
    int mode; /* passed to shared implementations in out->u.i */
} filter_entry;

static const filter_entry filters[] = {
    {"abs", f_abs, 0},
    {"attr", f_attr, 0},
    {"capitalize", f_case, 2},
    {"center", f_center, 0},
    {"count", f_length, 0},
    {"d", f_default, 0},
    {"default", f_default, 0},
    {"e", f_escape, 0},
    {"escape", f_escape, 0},
    {"float", f_float, 0},
    {"forceescape", f_escape, 1},
    {"format", f_format, 0},
    {"indent", f_indent, 0},
    {"int", f_int, 0},
    {"length", f_length, 0},
    {"lower", f_case, 0},
    {"replace", f_replace, 0},
    {"round", f_round, 0},
    {"safe", f_safe, 0},
    {"string", f_string, 0},
    {"title", f_case, 4},
    {"trim", f_trim, 0},
    {"truncate", f_truncate, 0},
    {"upper", f_case, 1},
    {"wordcount", f_wordcount, 0},
    /* Jinja2 builtins not implemented: known, so only their use fails */
    {"filesizeformat", NULL, 0},
    {"groupby", NULL, 0},
    {"pprint", NULL, 0},
    {"random", NULL, 0},
    {"striptags", NULL, 0},
    {"urlencode", NULL, 0},
    {"urlize", NULL, 0},
    {"wordwrap", NULL, 0},
    {"xmlattr", NULL, 0},
};
#define NFILTERS (sizeof filters / sizeof filters[0])

int jinja_filter_find(const char *name) {
    for (size_t i = 0; i < NFILTERS; i++)
        if (!strcmp(filters[i].name, name)) return (int)i;
    int j = jinja_filter_find2(name);
    return j < 0 ? -1 : (int)NFILTERS + j;
}

int jinja_filter_apply_id(jctx *c, int line, int fid, jv val, jv *args, size_t nargs,
                          const char **kwn, jv *kwv, size_t nkw, jv *out) {
    jinja_filter_fn fn;
    *out = jinja_int(0);
    if (fid < 0) return jinja_ctx_fail(c, STRATA_EINVALID, line, "unknown filter");
    if ((size_t)fid >= NFILTERS) {
        fn = jinja_filter_fn2(fid - (int)NFILTERS);
    } else {
        fn = filters[fid].fn;
        out->u.i = filters[fid].mode;
        if (!fn)
            return jinja_ctx_fail(c, STRATA_EUNSUPPORTED, line, "the '%s' filter is not supported",
                                  filters[fid].name);
    }
    return fn(c, line, val, args, nargs, kwn, kwv, nkw, out);
}

int jinja_filter_apply(jctx *c, int line, const char *name, jv val, jv *args, size_t nargs,
                       const char **kwn, jv *kwv, size_t nkw, jv *out) {
    int fid = jinja_filter_find(name);
    if (fid < 0) return jinja_ctx_fail(c, STRATA_EINVALID, line, "No filter named '%s'.", name);
    return jinja_filter_apply_id(c, line, fid, val, args, nargs, kwn, kwv, nkw, out);
}
