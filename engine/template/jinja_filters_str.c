/* jinja_filters_str.c - Jinja2's string and scalar filters (case, trim, string, safe,
 * escape, length, default, abs, int, float, round, replace, indent, center, wordcount,
 * format, truncate, attr), each a port of the Python function in jinja2/filters.py 3.1
 * with its quirks: |int turns "42.23" into 42, |length of an undefined is 0, |indent
 * leaves empty lines alone, |title splits words on "-", whitespace and opening
 * brackets. */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engine/template/jinja_filter_impl.h"

/* str(value) as Jinja2's soft_str does (Undefined is ""; Markup stays Markup). */
int jinja_soft_str(jctx *c, int line, jv v, jv *out) {
    if (v.kind == JV_UNDEF) {
        if (v.u.u && v.u.u->security) return jinja_check_defined(c, line, v);
        *out = jinja_strz(c, "");
    } else {
        *out = jinja_to_str(c, v);
    }
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}

FILTER(jfilter_case) { /* upper / lower / capitalize / title share this; mode rides in *out */
    int mode = (int)out->u.i;
    NOARGS("do_case");
    jv s;
    JTRY(jinja_soft_str(c, line, v, &s));
    return OOM(jinja_str_case(c, s, mode, out));
}

FILTER(jfilter_trim) {
    BIND("do_trim", "chars");
    jv s;
    JTRY(jinja_soft_str(c, line, v, &s));
    if (jinja_given(a[0]) && a[0].kind != JV_NONE && a[0].kind != JV_STR)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "strip arg must be None or str");
    int has = jinja_given(a[0]) && a[0].kind == JV_STR;
    return OOM(
        jinja_filter_py_strip(c, s, has ? a[0].u.s->p : NULL, has ? a[0].u.s->len : 0, 1, 1, out));
}

FILTER(jfilter_string) {
    NOARGS("do_string");
    return jinja_soft_str(c, line, v, out);
}

FILTER(jfilter_safe) {
    NOARGS("do_mark_safe");
    JTRY(jinja_soft_str(c, line, v, out));
    out->markup = 1;
    return 0;
}

FILTER(jfilter_escape) {
    NOARGS("escape");
    if (v.kind == JV_STR && v.markup && out->u.i == 1) v.markup = 0; /* forceescape */
    *out = jinja_escape(c, v);
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}

FILTER(jfilter_length) {
    NOARGS("len");
    int64_t n = jinja_len(v);
    if (n < 0)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "object of type '%s' has no len()",
                              jinja_typename(v));
    *out = jinja_int(n);
    return 0;
}

FILTER(jfilter_default) {
    BIND("do_default", "default_value", "boolean");
    jv dflt = jinja_given(a[0]) ? a[0] : jinja_strz(c, "");
    if (jinja_is_oom(dflt)) return jinja_ctx_nomem(c, line);
    int boolean = jinja_given(a[1]) && jinja_truthy(a[1]);
    *out = v.kind == JV_UNDEF || (boolean && !jinja_truthy(v)) ? dflt : v;
    return 0;
}

FILTER(jfilter_abs) {
    NOARGS("abs");
    if (!jinja_is_num(v)) {
        JTRY(jinja_check_defined(c, line, v));
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "bad operand type for abs(): '%s'",
                              jinja_typename(v));
    }
    if (v.kind == JV_FLOAT) *out = jinja_float(fabs(v.u.f));
    else if (v.u.i == INT64_MIN) return jinja_ctx_fail(c, STRATA_ERANGE, line, "integer overflow");
    else *out = jinja_int(v.u.i < 0 ? -v.u.i : v.u.i);
    return 0;
}

FILTER(jfilter_int) {
    BIND("do_int", "default", "base");
    jv dflt = jinja_given(a[0]) ? a[0] : jinja_int(0);
    int base = jinja_given(a[1]) && jinja_is_int_like(a[1]) ? (int)a[1].u.i : 10;
    int64_t i;
    double f;
    if (v.kind == JV_UNDEF) return jinja_check_defined(c, line, v); /* Undefined.__int__ raises */
    int is_float = v.kind == JV_FLOAT, parsed = 0;
    if (jinja_is_int_like(v)) {
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

FILTER(jfilter_float) {
    BIND("do_float", "default");
    jv dflt = jinja_given(a[0]) ? a[0] : jinja_float(0.0);
    double f;
    if (v.kind == JV_UNDEF) return jinja_check_defined(c, line, v);
    if (jinja_is_num(v)) *out = jinja_float(jinja_as_double(v));
    else if (v.kind == JV_STR && jinja_py_float(v.u.s, &f)) *out = jinja_float(f);
    else *out = dflt;
    return 0;
}

FILTER(jfilter_round) {
    BIND("do_round", "precision", "method");
    int64_t prec = jinja_given(a[0]) && jinja_is_int_like(a[0]) ? a[0].u.i : 0;
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

FILTER(jfilter_replace) {
    BIND("do_replace", "old", "new", "count");
    if (!jinja_given(a[0]) || !jinja_given(a[1]))
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "do_replace() missing required arguments");
    jv s, old, new;
    JTRY(jinja_soft_str(c, line, v, &s));
    JTRY(jinja_soft_str(c, line, a[0], &old));
    JTRY(jinja_soft_str(c, line, a[1], &new));
    int64_t count = jinja_given(a[2]) && jinja_is_int_like(a[2]) ? a[2].u.i : -1;
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

FILTER(jfilter_indent) {
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
        int64_t w = jinja_given(a[0]) && jinja_is_int_like(a[0]) ? a[0].u.i : 4;
        if (jinja_given(a[0]) && !jinja_is_int_like(a[0]))
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

FILTER(jfilter_center) {
    BIND("do_center", "width");
    jv s;
    JTRY(jinja_soft_str(c, line, v, &s));
    int64_t width = jinja_given(a[0]) && jinja_is_int_like(a[0]) ? a[0].u.i : 80,
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

FILTER(jfilter_wordcount) {
    NOARGS("do_wordcount");
    jv s;
    JTRY(jinja_soft_str(c, line, v, &s));
    int64_t n = 0;
    int in_word = 0;
    size_t i = 0;
    while (i < s.u.s->len) {
        uint32_t cp = jinja_utf8_next(s.u.s->p, s.u.s->len, &i);
        int w = cp == '_' || unicode_py_isalpha(cp) || unicode_py_isdigit(cp) ||
                (cp >= '0' && cp <= '9');
        n += w && !in_word;
        in_word = w;
    }
    *out = jinja_int(n);
    return 0;
}

FILTER(jfilter_format) {
    if (nargs && nkw)
        return jinja_ctx_fail(c, STRATA_EINVALID, line,
                              "can't handle positional and keyword arguments at the same time");
    jv s, rest;
    JTRY(jinja_soft_str(c, line, v, &s));
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

FILTER(jfilter_truncate) {
    BIND("do_truncate", "length", "killwords", "end", "leeway");
    jv s = v, end;
    if (v.kind != JV_STR) { /* do_truncate takes len(s) of whatever it gets */
        int64_t n = jinja_len(v);
        int64_t lim = (jinja_given(a[0]) && jinja_is_int_like(a[0]) ? a[0].u.i : 255) +
                      (jinja_given(a[3]) && jinja_is_int_like(a[3]) ? a[3].u.i : 5);
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
    int64_t length = jinja_given(a[0]) && jinja_is_int_like(a[0]) ? a[0].u.i : 255;
    int killwords = jinja_given(a[1]) && jinja_truthy(a[1]);
    end = jinja_given(a[2]) ? a[2] : jinja_strz(c, "...");
    if (jinja_is_oom(end)) return jinja_ctx_nomem(c, line);
    JTRY(jinja_soft_str(c, line, end, &end));
    int64_t leeway = jinja_given(a[3]) && jinja_is_int_like(a[3]) ? a[3].u.i : 5;
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

FILTER(jfilter_attr) {
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
