/* jinja_methods.c - the Python methods templates call on values (str.startswith,
 * str.split, dict.get, dict.items, loop.cycle, ...) and the environment's
 * globals (range, namespace, dict, cycler, joiner, raise_exception, strftime_now).
 *
 * Methods behave as CPython's: split() without a separator splits on whitespace
 * runs, strip(chars) strips a set of characters, dict views print as
 * dict_items([...]). The immutable sandbox refuses methods that mutate
 * (list.append, dict.update, ...): looking them up yields an undefined whose use
 * raises, as Jinja2's unsafe_undefined does. range() is capped at 100,000 items
 * like Jinja2's sandbox. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine/template/jinja_internal.h"

/* a list laid out by hand: clang-format reflows X-macro lists differently each run */
/* clang-format off */
#define STR_METHODS(X)                                                         \
    X(startswith) X(endswith) X(split) X(rsplit) X(strip) X(lstrip)            \
    X(rstrip) X(upper) X(lower) X(title) X(capitalize) X(swapcase)             \
    X(casefold) X(replace) X(join) X(find) X(rfind) X(index)                   \
    X(rindex) X(count) X(isdigit) X(isdecimal) X(isnumeric) X(isalpha)         \
    X(isalnum) X(isspace) X(isupper) X(islower) X(istitle) X(isascii)          \
    X(splitlines) X(format) X(removeprefix) X(removesuffix) X(zfill) X(ljust)  \
    X(rjust) X(center) X(partition) X(rpartition) X(encode) X(expandtabs)      \
    X(format_map) X(isidentifier) X(isprintable) X(maketrans) X(translate)
/* clang-format on */

enum {
#define X(m) JM_STR_##m,
    STR_METHODS(X)
#undef X
        JM_DICT_GET,
    JM_DICT_ITEMS,
    JM_DICT_KEYS,
    JM_DICT_VALUES,
    JM_DICT_COPY,
    JM_LIST_INDEX,
    JM_LIST_COUNT,
    JM_LIST_COPY,
    JM_LOOP_CYCLE,
    JM_LOOP_CHANGED,
    JM_CYCLER_NEXT,
    JM_CYCLER_RESET,
    JM_UNSAFE,
};

static const char *const str_method_names[] = {
#define X(m) #m,
    STR_METHODS(X)
#undef X
};

static const char *const dict_unsafe[] = {"clear",  "pop",      "popitem", "setdefault",
                                          "update", "fromkeys", NULL};
static const char *const list_unsafe[] = {"append", "clear",   "extend", "insert", "pop",
                                          "remove", "reverse", "sort",   NULL};

static int in_names(const char *const *names, const char *name) {
    for (; *names; names++)
        if (!strcmp(*names, name)) return 1;
    return 0;
}

int jinja_method_find(jv self, const char *name, int *id, int *unsafe) {
    *unsafe = 0;
    switch ((jinja_kind)self.kind) {
    case JV_STR:
        for (size_t i = 0; i < sizeof str_method_names / sizeof *str_method_names; i++)
            if (!strcmp(str_method_names[i], name)) return *id = (int)i, 1;
        return 0;
    case JV_DICT:
        *id = !strcmp(name, "get")      ? JM_DICT_GET
              : !strcmp(name, "items")  ? JM_DICT_ITEMS
              : !strcmp(name, "keys")   ? JM_DICT_KEYS
              : !strcmp(name, "values") ? JM_DICT_VALUES
              : !strcmp(name, "copy")   ? JM_DICT_COPY
                                        : -1;
        if (*id < 0 && in_names(dict_unsafe, name)) *id = JM_UNSAFE, *unsafe = 1;
        return *id >= 0;
    case JV_LIST:
    case JV_TUPLE:
    case JV_RANGE:
        *id = !strcmp(name, "index")                          ? JM_LIST_INDEX
              : !strcmp(name, "count")                        ? JM_LIST_COUNT
              : !strcmp(name, "copy") && self.kind == JV_LIST ? JM_LIST_COPY
                                                              : -1;
        if (*id < 0 && self.kind == JV_LIST && in_names(list_unsafe, name))
            *id = JM_UNSAFE, *unsafe = 1;
        return *id >= 0;
    case JV_LOOP:
        *id = !strcmp(name, "cycle")     ? JM_LOOP_CYCLE
              : !strcmp(name, "changed") ? JM_LOOP_CHANGED
                                         : -1;
        return *id >= 0;
    case JV_CYCLER:
        *id = !strcmp(name, "next")    ? JM_CYCLER_NEXT
              : !strcmp(name, "reset") ? JM_CYCLER_RESET
                                       : -1;
        return *id >= 0;
    default: return 0;
    }
}

/* ---- str helpers -------------------------------------------------------------------------- */

static int arg_str(jctx *c, int line, const char *meth, jv v, int allow_none) {
    if (v.kind == JV_STR || (allow_none && v.kind == JV_NONE)) return 0;
    return jinja_ctx_fail(c, STRATA_EINVALID, line, "%s arg must be %sstr, not %s", meth,
                          allow_none ? "None or " : "", jinja_typename(v));
}

int jinja_str_split(jctx *c, jv s, jv sep, int64_t maxsplit, int right, jv *out) {
    jv l = jinja_list(c, 4);
    if (jinja_is_oom(l)) return STRATA_ENOMEM;
    const char *p = s.u.s->p;
    size_t len = s.u.s->len;
    if (sep.kind == JV_NONE) { /* whitespace runs; empty strings dropped */
        size_t i = 0;
        size_t *st = jinja_arena_alloc(c->a, (len + 1) * sizeof *st),
               *en = jinja_arena_alloc(c->a, (len + 1) * sizeof *en), n = 0;
        if (!st || !en) return STRATA_ENOMEM;
        while (i < len) {
            size_t k = i;
            if (unicode_py_isspace(jinja_utf8_next(p, len, &k))) {
                i = k;
                continue;
            }
            st[n] = i;
            while (i < len) {
                k = i;
                if (unicode_py_isspace(jinja_utf8_next(p, len, &k))) break;
                i = k;
            }
            en[n++] = i;
        }
        if (maxsplit >= 0 && (size_t)maxsplit + 1 < n) { /* the remainder keeps inner whitespace */
            if (!right) {
                en[maxsplit] = en[n - 1];
                n = (size_t)maxsplit + 1;
            } else {
                size_t first = n - (size_t)maxsplit - 1;
                st[first] = st[0];
                memmove(st, st + first, ((size_t)maxsplit + 1) * sizeof *st);
                memmove(en, en + first, ((size_t)maxsplit + 1) * sizeof *en);
                n = (size_t)maxsplit + 1;
            }
        }
        for (size_t k = 0; k < n; k++) {
            jv piece = jinja_str(c, p + st[k], en[k] - st[k]);
            if (jinja_is_oom(piece) || jinja_list_push(c, l.u.l, piece) < 0) return STRATA_ENOMEM;
        }
        *out = l;
        return 0;
    }
    size_t sl = sep.u.s->len;
    const char *q = sep.u.s->p;
    /* collect match positions left to right (non-overlapping), then honour maxsplit */
    size_t *hits = jinja_arena_alloc(c->a, (len / (sl ? sl : 1) + 2) * sizeof *hits), nh = 0;
    if (!hits) return STRATA_ENOMEM;
    if (!right) {
        for (size_t i = 0; i + sl <= len && (maxsplit < 0 || (int64_t)nh < maxsplit);) {
            if (!memcmp(p + i, q, sl)) hits[nh++] = i, i += sl;
            else i++;
        }
    } else {
        for (size_t i = len; i >= sl && (maxsplit < 0 || (int64_t)nh < maxsplit);) {
            if (!memcmp(p + i - sl, q, sl)) hits[nh++] = i - sl, i -= sl;
            else i--;
        }
        for (size_t a = 0, b = nh ? nh - 1 : 0; a < b; a++, b--) { /* ascending order */
            size_t t = hits[a];
            hits[a] = hits[b];
            hits[b] = t;
        }
    }
    size_t from = 0;
    for (size_t k = 0; k <= nh; k++) {
        size_t to = k < nh ? hits[k] : len;
        jv piece = jinja_str(c, p + from, to - from);
        if (jinja_is_oom(piece) || jinja_list_push(c, l.u.l, piece) < 0) return STRATA_ENOMEM;
        from = to + sl;
    }
    *out = l;
    return 0;
}

static int str_pred(jv s, int id) {
    if (s.u.s->len == 0) return id == JM_STR_isascii;
    int cased = 0, prev_cased = 0;
    size_t i = 0;
    while (i < s.u.s->len) {
        uint32_t cp = jinja_utf8_next(s.u.s->p, s.u.s->len, &i);
        switch (id) {
        case JM_STR_isdigit:
        case JM_STR_isdecimal:
        case JM_STR_isnumeric:
            if (!unicode_py_isdigit(cp)) return 0;
            break;
        case JM_STR_isalpha:
            if (!unicode_py_isalpha(cp)) return 0;
            break;
        case JM_STR_isalnum:
            if (!unicode_py_isalpha(cp) && !unicode_py_isdigit(cp)) return 0;
            break;
        case JM_STR_isspace:
            if (!unicode_py_isspace(cp)) return 0;
            break;
        case JM_STR_isascii:
            if (cp > 0x7F) return 0;
            break;
        case JM_STR_isprintable:
            if (!unicode_py_isprintable(cp)) return 0;
            break;
        case JM_STR_isupper:
            if (unicode_py_islower(cp) || unicode_py_istitle(cp)) return 0;
            cased |= unicode_py_isupper(cp);
            break;
        case JM_STR_islower:
            if (unicode_py_isupper(cp) || unicode_py_istitle(cp)) return 0;
            cased |= unicode_py_islower(cp);
            break;
        case JM_STR_istitle:
            if (unicode_py_isupper(cp) || unicode_py_istitle(cp)) {
                if (prev_cased) return 0;
                prev_cased = cased = 1;
            } else if (unicode_py_islower(cp)) {
                if (!prev_cased) return 0;
                prev_cased = cased = 1;
            } else {
                prev_cased = 0;
            }
            break;
        }
    }
    if (id == JM_STR_isupper || id == JM_STR_islower || id == JM_STR_istitle) return cased;
    return 1;
}

/* Byte offset of the first (or last) occurrence of sub; -1 when absent. */
static int64_t find_sub(const jstr *s, const jstr *sub, int last) {
    if (sub->len > s->len) return -1;
    int64_t found = -1;
    for (size_t i = 0; i + sub->len <= s->len; i++) {
        if (!memcmp(s->p + i, sub->p, sub->len)) {
            found = (int64_t)i;
            if (!last) break;
        }
    }
    return found;
}

static int pad(jctx *c, int line, jv s, int64_t width, jv fill, int mode, jv *out) {
    /* mode 0 ljust, 1 rjust, 2 center, 3 zfill */
    int64_t len = (int64_t)s.u.s->ncp;
    if (width <= len) {
        *out = s;
        return 0;
    }
    if (width > 10000000) return jinja_ctx_fail(c, STRATA_ERANGE, line, "width too large");
    const char *f = fill.kind == JV_STR ? fill.u.s->p : mode == 3 ? "0" : " ";
    size_t fl = fill.kind == JV_STR ? fill.u.s->len : 1;
    int64_t marg = width - len, left = mode == 0   ? 0
                                       : mode == 2 ? marg / 2 + (marg & width & 1)
                                                   : marg;
    strbuf b;
    jinja_buf_init(&b, c->a, 0);
    size_t skip = 0;
    if (mode == 3 && s.u.s->len && (s.u.s->p[0] == '+' || s.u.s->p[0] == '-')) {
        if (strbuf_addc(&b, s.u.s->p[0]) < 0) return jinja_ctx_nomem(c, line);
        skip = 1;
    }
    for (int64_t i = 0; i < left; i++)
        if (strbuf_add(&b, f, fl) < 0) return jinja_ctx_nomem(c, line);
    if (strbuf_add(&b, s.u.s->p + skip, s.u.s->len - skip) < 0) return jinja_ctx_nomem(c, line);
    for (int64_t i = 0; i < marg - left; i++)
        if (strbuf_add(&b, f, fl) < 0) return jinja_ctx_nomem(c, line);
    *out = jinja_str(c, b.p, b.len);
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}

static int prefix_match(jctx *c, int line, const jstr *s, jv pre, int at_end, int *res) {
    if (pre.kind == JV_TUPLE) {
        *res = 0;
        for (size_t i = 0; i < pre.u.l->n && !*res; i++)
            JTRY(prefix_match(c, line, s, pre.u.l->v[i], at_end, res));
        return 0;
    }
    if (pre.kind != JV_STR)
        return jinja_ctx_fail(c, STRATA_EINVALID, line,
                              "%s first arg must be str or a tuple of str, not %s",
                              at_end ? "endswith" : "startswith", jinja_typename(pre));
    size_t n = pre.u.s->len;
    *res = n <= s->len && !memcmp(at_end ? s->p + s->len - n : s->p, pre.u.s->p, n);
    return 0;
}

static int str_method(jctx *c, int line, int id, jv self, jv *args, size_t nargs, const char **kwn,
                      jv *kwv, size_t nkw, jv *out) {
    const char *name = str_method_names[id];
    jv a[3] = {jinja_missing(), jinja_missing(), jinja_missing()};
    static const char *const split_params[] = {"sep", "maxsplit"};
    static const char *const none_params[] = {"chars", "x", "y"};
    if (id == JM_STR_split || id == JM_STR_rsplit) {
        JTRY(jinja_bind_args(c, line, name, split_params, 2, args, nargs, kwn, kwv, nkw, a));
    } else if (id == JM_STR_format) {
        return jinja_format_brace(c, line, self, args, nargs, kwn, kwv, nkw, out);
    } else {
        if (nkw)
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "str.%s() takes no keyword arguments",
                                  name);
        JTRY(jinja_bind_args(c, line, name, none_params, 3, args, nargs, kwn, kwv, nkw, a));
    }
    const jstr *s = self.u.s;
    int r, rc = 0;
    switch (id) {
    case JM_STR_startswith:
    case JM_STR_endswith:
        if (!jinja_given(a[0]))
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "%s() takes at least 1 argument", name);
        if (jinja_given(a[1]))
            return jinja_ctx_fail(c, STRATA_EUNSUPPORTED, line,
                                  "%s() with start/end is not supported", name);
        JTRY(prefix_match(c, line, s, a[0], id == JM_STR_endswith, &r));
        *out = jinja_bool(r);
        return 0;
    case JM_STR_split:
    case JM_STR_rsplit: {
        jv sep = jinja_given(a[0]) ? a[0] : jinja_none();
        JTRY(arg_str(c, line, "split", sep, 1));
        if (sep.kind == JV_STR && sep.u.s->len == 0)
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "empty separator");
        int64_t maxsplit = jinja_given(a[1]) ? a[1].u.i : -1;
        if (jinja_given(a[1]) && a[1].kind != JV_INT && a[1].kind != JV_BOOL)
            return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                  "'%s' object cannot be interpreted as an integer",
                                  jinja_typename(a[1]));
        rc = jinja_str_split(c, self, sep, maxsplit, id == JM_STR_rsplit, out);
        break;
    }
    case JM_STR_strip:
    case JM_STR_lstrip:
    case JM_STR_rstrip: {
        jv ch = jinja_given(a[0]) ? a[0] : jinja_none();
        JTRY(arg_str(c, line, name, ch, 1));
        int has = ch.kind == JV_STR;
        rc = jinja_filter_py_strip(c, self, has ? ch.u.s->p : NULL, has ? ch.u.s->len : 0,
                                   id != JM_STR_rstrip, id != JM_STR_lstrip, out);
        if (rc == 0) out->markup = 0;
        break;
    }
    case JM_STR_upper: rc = jinja_str_case(c, self, 1, out); break;
    case JM_STR_lower:
    case JM_STR_casefold: rc = jinja_str_case(c, self, 0, out); break;
    case JM_STR_capitalize: rc = jinja_str_case(c, self, 2, out); break;
    case JM_STR_title: rc = jinja_str_case(c, self, 3, out); break;
    case JM_STR_swapcase: rc = jinja_str_case(c, self, 5, out); break;
    case JM_STR_replace: {
        if (!jinja_given(a[1]))
            return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                  "replace expected at least 2 arguments");
        JTRY(arg_str(c, line, "replace", a[0], 0));
        JTRY(arg_str(c, line, "replace", a[1], 0));
        jv fargs[3] = {a[0], a[1], jinja_given(a[2]) ? a[2] : jinja_none()};
        self.markup = 0;
        return jinja_filter_apply(c, line, "replace", self, fargs, 3, NULL, NULL, 0, out);
    }
    case JM_STR_join: {
        jlist *items;
        if (!jinja_given(a[0]))
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "join() takes exactly one argument");
        JTRY(jinja_iterate(c, line, a[0], &items));
        strbuf b;
        jinja_buf_init(&b, c->a, c->max_output);
        for (size_t i = 0; i < items->n; i++) {
            if (items->v[i].kind != JV_STR)
                return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                      "sequence item %zu: expected str instance, %s found", i,
                                      jinja_typename(items->v[i]));
            if ((i && strbuf_add(&b, s->p, s->len) < 0) ||
                strbuf_add(&b, items->v[i].u.s->p, items->v[i].u.s->len) < 0)
                return jinja_ctx_nomem(c, line);
        }
        *out = jinja_str(c, b.p ? b.p : "", b.len);
        break;
    }
    case JM_STR_find:
    case JM_STR_rfind:
    case JM_STR_index:
    case JM_STR_rindex:
    case JM_STR_count: {
        JTRY(arg_str(c, line, name, a[0], 0));
        if (jinja_given(a[1]))
            return jinja_ctx_fail(c, STRATA_EUNSUPPORTED, line,
                                  "%s() with start/end is not supported", name);
        if (id == JM_STR_count) {
            int64_t n = 0;
            if (a[0].u.s->len == 0) n = (int64_t)s->ncp + 1;
            else
                for (size_t i = 0; i + a[0].u.s->len <= s->len;)
                    if (!memcmp(s->p + i, a[0].u.s->p, a[0].u.s->len)) n++, i += a[0].u.s->len;
                    else i++;
            *out = jinja_int(n);
            return 0;
        }
        int64_t at = find_sub(s, a[0].u.s, id == JM_STR_rfind || id == JM_STR_rindex);
        if (at < 0 && (id == JM_STR_index || id == JM_STR_rindex))
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "substring not found");
        *out = jinja_int(at < 0 ? -1 : (int64_t)jinja_utf8_count(s->p, (size_t)at));
        return 0;
    }
    case JM_STR_isdigit:
    case JM_STR_isdecimal:
    case JM_STR_isnumeric:
    case JM_STR_isalpha:
    case JM_STR_isalnum:
    case JM_STR_isspace:
    case JM_STR_isupper:
    case JM_STR_islower:
    case JM_STR_istitle:
    case JM_STR_isascii:
    case JM_STR_isprintable: *out = jinja_bool(str_pred(self, id)); return 0;
    case JM_STR_removeprefix:
    case JM_STR_removesuffix: {
        JTRY(arg_str(c, line, name, a[0], 0));
        JTRY(prefix_match(c, line, s, a[0], id == JM_STR_removesuffix, &r));
        size_t n = r ? a[0].u.s->len : 0;
        *out = jinja_str(c, s->p + (id == JM_STR_removeprefix ? n : 0), s->len - n);
        break;
    }
    case JM_STR_zfill:
    case JM_STR_ljust:
    case JM_STR_rjust:
    case JM_STR_center:
        if (!jinja_given(a[0]) || (a[0].kind != JV_INT && a[0].kind != JV_BOOL))
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "%s() needs an integer width", name);
        return pad(c, line, self, a[0].u.i, jinja_given(a[1]) ? a[1] : jinja_none(),
                   id == JM_STR_ljust    ? 0
                   : id == JM_STR_rjust  ? 1
                   : id == JM_STR_center ? 2
                                         : 3,
                   out);
    case JM_STR_partition:
    case JM_STR_rpartition: {
        JTRY(arg_str(c, line, name, a[0], 0));
        if (a[0].u.s->len == 0) return jinja_ctx_fail(c, STRATA_EINVALID, line, "empty separator");
        int64_t at = find_sub(s, a[0].u.s, id == JM_STR_rpartition);
        jv t = jinja_list(c, 3), e = jinja_strz(c, "");
        if (jinja_is_oom(t) || jinja_is_oom(e)) return jinja_ctx_nomem(c, line);
        if (at < 0) {
            t.u.l->v[0] = id == JM_STR_partition ? self : e;
            t.u.l->v[1] = e;
            t.u.l->v[2] = id == JM_STR_partition ? e : self;
        } else {
            t.u.l->v[0] = jinja_str(c, s->p, (size_t)at);
            t.u.l->v[1] = a[0];
            t.u.l->v[2] =
                jinja_str(c, s->p + at + a[0].u.s->len, s->len - (size_t)at - a[0].u.s->len);
        }
        t.u.l->n = 3;
        t.kind = JV_TUPLE;
        *out = t;
        return 0;
    }
    case JM_STR_splitlines: {
        jv l = jinja_list(c, 4);
        if (jinja_is_oom(l)) return jinja_ctx_nomem(c, line);
        int keep = jinja_given(a[0]) && jinja_truthy(a[0]);
        size_t i = 0, st = 0;
        while (i < s->len) {
            size_t k = i;
            uint32_t cp = jinja_utf8_next(s->p, s->len, &k);
            if (cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C ||
                (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
                if (cp == '\r' && k < s->len && s->p[k] == '\n') k++;
                jv piece = jinja_str(c, s->p + st, (keep ? k : i) - st);
                if (jinja_is_oom(piece) || jinja_list_push(c, l.u.l, piece) < 0)
                    return jinja_ctx_nomem(c, line);
                st = k;
            }
            i = k;
        }
        if (st < s->len) {
            jv piece = jinja_str(c, s->p + st, s->len - st);
            if (jinja_is_oom(piece) || jinja_list_push(c, l.u.l, piece) < 0)
                return jinja_ctx_nomem(c, line);
        }
        *out = l;
        return 0;
    }
    default: return jinja_ctx_fail(c, STRATA_EUNSUPPORTED, line, "str.%s() is not supported", name);
    }
    if (rc < 0 || jinja_is_oom(*out)) return jinja_ctx_nomem(c, line);
    return 0;
}

static int make_view(jctx *c, int line, jdict *d, int flavour, jv *out) {
    jv l = jinja_list(c, d->n);
    if (jinja_is_oom(l)) return jinja_ctx_nomem(c, line);
    for (size_t i = 0; i < d->n; i++) {
        jv item = flavour == JVIEW_KEYS ? d->k[i] : d->v[i];
        if (flavour == JVIEW_ITEMS) {
            jv pair = jinja_list(c, 2);
            if (jinja_is_oom(pair)) return jinja_ctx_nomem(c, line);
            pair.u.l->v[0] = d->k[i];
            pair.u.l->v[1] = d->v[i];
            pair.u.l->n = 2;
            pair.kind = JV_TUPLE;
            item = pair;
        }
        l.u.l->v[l.u.l->n++] = item;
    }
    l.kind = JV_VIEW;
    l.fn = (uint16_t)flavour;
    *out = l;
    return 0;
}

int jinja_method_call(jctx *c, int line, jmethod *m, jv *args, size_t nargs, const char **kwn,
                      jv *kwv, size_t nkw, jv *out) {
    jv self = m->self;
    if (self.kind == JV_STR)
        return str_method(c, line, m->id, self, args, nargs, kwn, kwv, nkw, out);
    if (nkw && m->id != JM_LOOP_CHANGED)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "this method takes no keyword arguments");
    switch (m->id) {
    case JM_DICT_GET:
        if (nargs < 1 || nargs > 2)
            return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                  "get expected 1 or 2 arguments, got %zu", nargs);
        if (!jinja_hashable(args[0]))
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "unhashable type: '%s'",
                                  jinja_typename(args[0]));
        if (!jinja_dict_get(self.u.d, args[0], out)) *out = nargs == 2 ? args[1] : jinja_none();
        return 0;
    case JM_DICT_ITEMS: return make_view(c, line, self.u.d, JVIEW_ITEMS, out);
    case JM_DICT_KEYS: return make_view(c, line, self.u.d, JVIEW_KEYS, out);
    case JM_DICT_VALUES: return make_view(c, line, self.u.d, JVIEW_VALUES, out);
    case JM_DICT_COPY: {
        jv d = jinja_dict(c, self.u.d->n);
        if (jinja_is_oom(d)) return jinja_ctx_nomem(c, line);
        for (size_t i = 0; i < self.u.d->n; i++)
            if (jinja_dict_set(c, d.u.d, self.u.d->k[i], self.u.d->v[i]) < 0)
                return jinja_ctx_nomem(c, line);
        *out = d;
        return 0;
    }
    case JM_LIST_INDEX:
    case JM_LIST_COUNT: {
        if (nargs != 1) return jinja_ctx_fail(c, STRATA_EINVALID, line, "expected 1 argument");
        int64_t n = 0;
        for (size_t i = 0; i < self.u.l->n; i++) {
            if (!jinja_eq(self.u.l->v[i], args[0])) continue;
            if (m->id == JM_LIST_INDEX) {
                *out = jinja_int((int64_t)i);
                return 0;
            }
            n++;
        }
        if (m->id == JM_LIST_INDEX)
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "x not in list");
        *out = jinja_int(n);
        return 0;
    }
    case JM_LIST_COPY: {
        jv l = jinja_list(c, self.u.l->n);
        if (jinja_is_oom(l)) return jinja_ctx_nomem(c, line);
        memcpy(l.u.l->v, self.u.l->v, self.u.l->n * sizeof(jv));
        l.u.l->n = self.u.l->n;
        *out = l;
        return 0;
    }
    case JM_LOOP_CYCLE:
        if (!nargs) return jinja_ctx_fail(c, STRATA_EINVALID, line, "no items for cycling given");
        *out = args[self.u.lp->idx % nargs];
        return 0;
    case JM_LOOP_CHANGED: {
        jv vals = jinja_list(c, nargs);
        if (jinja_is_oom(vals) || nkw)
            return nkw ? jinja_ctx_fail(c, STRATA_EINVALID, line,
                                        "changed() takes no keyword arguments")
                       : jinja_ctx_nomem(c, line);
        memcpy(vals.u.l->v, args, nargs * sizeof(jv));
        vals.u.l->n = nargs;
        jloop *lp = self.u.lp;
        int changed = !lp->has_changed || !jinja_eq(lp->last_changed, vals);
        lp->has_changed = 1;
        lp->last_changed = vals;
        *out = jinja_bool(changed);
        return 0;
    }
    case JM_CYCLER_NEXT: {
        jcycler *cy = self.u.cy;
        *out = cy->items[cy->pos];
        cy->pos = (cy->pos + 1) % cy->n;
        return 0;
    }
    case JM_CYCLER_RESET:
        self.u.cy->pos = 0;
        *out = jinja_none();
        return 0;
    default: return jinja_ctx_fail(c, STRATA_EINVALID, line, "unsupported method");
    }
}

/* ---- globals ---------------------------------------------------------------------------- */

static const char *const global_names[] = {"range",  "namespace",       "dict",         "cycler",
                                           "joiner", "raise_exception", "strftime_now", "lipsum"};
enum { G_RANGE, G_NAMESPACE, G_DICT, G_CYCLER, G_JOINER, G_RAISE, G_STRFTIME, G_LIPSUM, G_COUNT };

int jinja_global_find(const char *name) {
    for (int i = 0; i < G_COUNT; i++)
        if (!strcmp(global_names[i], name)) return i;
    return -1;
}

/* dict(*args, **kwargs) as Python builds it: an optional mapping or iterable of pairs. */
static int build_dict(jctx *c, int line, jv *args, size_t nargs, const char **kwn, jv *kwv,
                      size_t nkw, int ns, jv *out) {
    if (nargs > 1)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "dict expected at most 1 argument, got %zu",
                              nargs);
    jv d = jinja_dict(c, 4);
    if (jinja_is_oom(d)) return jinja_ctx_nomem(c, line);
    if (nargs == 1) {
        jv src = args[0];
        if (src.kind == JV_DICT || src.kind == JV_NS) {
            for (size_t i = 0; i < src.u.d->n; i++)
                if (jinja_dict_set(c, d.u.d, src.u.d->k[i], src.u.d->v[i]) < 0)
                    return jinja_ctx_nomem(c, line);
        } else {
            jlist *items;
            JTRY(jinja_iterate(c, line, src, &items));
            for (size_t i = 0; i < items->n; i++) {
                jlist *pair;
                JTRY(jinja_iterate(c, line, items->v[i], &pair));
                if (pair->n != 2)
                    return jinja_ctx_fail(
                        c, STRATA_EINVALID, line,
                        "dictionary update sequence element #%zu has length %zu; 2 is required", i,
                        pair->n);
                if (!jinja_hashable(pair->v[0]))
                    return jinja_ctx_fail(c, STRATA_EINVALID, line, "unhashable type");
                if (jinja_dict_set(c, d.u.d, pair->v[0], pair->v[1]) < 0)
                    return jinja_ctx_nomem(c, line);
            }
        }
    }
    for (size_t k = 0; k < nkw; k++) {
        jv key = jinja_strz(c, kwn[k]);
        if (jinja_is_oom(key) || jinja_dict_set(c, d.u.d, key, kwv[k]) < 0)
            return jinja_ctx_nomem(c, line);
    }
    if (ns) {
        for (size_t i = 0; i < d.u.d->n; i++)
            if (d.u.d->k[i].kind == JV_STR && d.u.d->k[i].u.s->p[0] == '_')
                return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                      "Chat templates cannot store underscore-prefixed attributes "
                                      "on a namespace, but got '%s'. Please rename the attribute.",
                                      d.u.d->k[i].u.s->p);
        d.kind = JV_NS;
    }
    *out = d;
    return 0;
}

int jinja_global_call(jctx *c, int line, int fn, jv *args, size_t nargs, const char **kwn, jv *kwv,
                      size_t nkw, jv *out) {
    switch (fn) {
    case G_RANGE: {
        if (nkw)
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "range() takes no keyword arguments");
        if (nargs < 1 || nargs > 3)
            return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                  "range expected 1 to 3 arguments, got %zu", nargs);
        for (size_t i = 0; i < nargs; i++)
            if (args[i].kind != JV_INT && args[i].kind != JV_BOOL) {
                JTRY(jinja_check_defined(c, line, args[i]));
                return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                      "'%s' object cannot be interpreted as an integer",
                                      jinja_typename(args[i]));
            }
        int64_t start = nargs > 1 ? args[0].u.i : 0, stop = nargs > 1 ? args[1].u.i : args[0].u.i;
        int64_t step = nargs > 2 ? args[2].u.i : 1;
        if (step == 0)
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "range() arg 3 must not be zero");
        int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                             : (start > stop ? (start - stop - step - 1) / -step : 0);
        if (n > 100000)
            return jinja_ctx_fail(
                c, STRATA_ERANGE, line,
                "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        jrange *r = jinja_arena_alloc(c->a, sizeof *r);
        jv *items = jinja_arena_alloc(c->a, ((size_t)n + 1) * sizeof(jv));
        if (!r || !items) return jinja_ctx_nomem(c, line);
        for (int64_t i = 0; i < n; i++) items[i] = jinja_int(start + i * step);
        r->l.v = items;
        r->l.n = r->l.cap = (size_t)n;
        r->start = start, r->stop = stop, r->step = step;
        *out = jinja_undef();
        out->kind = JV_RANGE;
        out->u.l = &r->l;
        return 0;
    }
    case G_NAMESPACE:
    case G_DICT: return build_dict(c, line, args, nargs, kwn, kwv, nkw, fn == G_NAMESPACE, out);
    case G_CYCLER:
    case G_JOINER: {
        jcycler *cy = jinja_arena_alloc(c->a, sizeof *cy);
        if (!cy) return jinja_ctx_nomem(c, line);
        memset(cy, 0, sizeof *cy);
        if (fn == G_CYCLER) {
            if (!nargs)
                return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                      "at least one item has to be provided");
            cy->items = args;
            cy->n = nargs;
        } else {
            cy->sep = ", ";
            if (nargs + nkw > 1)
                return jinja_ctx_fail(c, STRATA_EINVALID, line, "joiner takes one argument");
            jv sep = nargs ? args[0] : nkw ? kwv[0] : jinja_none();
            if (sep.kind != JV_NONE) {
                jv s = jinja_to_str(c, sep);
                if (jinja_is_oom(s)) return jinja_ctx_nomem(c, line);
                cy->sep = s.u.s->p;
            }
        }
        *out = jinja_undef();
        out->kind = fn == G_CYCLER ? JV_CYCLER : JV_JOINER;
        out->u.cy = cy;
        return 0;
    }
    case G_RAISE: {
        jv msg = nargs ? jinja_to_str(c, args[0]) : jinja_strz(c, "");
        if (jinja_is_oom(msg)) return jinja_ctx_nomem(c, line);
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "%s", msg.kind == JV_STR ? msg.u.s->p : "");
    }
    case G_STRFTIME: {
        if (nargs != 1 || args[0].kind != JV_STR)
            return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                  "strftime_now() takes one format string");
        time_t t = (time_t)c->now;
        struct tm tm;
        char buf[1024];
        if (!localtime_r(&t, &tm))
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "local time unavailable");
        size_t n = strftime(buf, sizeof buf, args[0].u.s->p, &tm);
        if (n == 0 && args[0].u.s->len) buf[0] = 0;
        *out = jinja_str(c, buf, n);
        return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
    }
    default:
        return jinja_ctx_fail(c, STRATA_EUNSUPPORTED, line, "'%s' is not supported",
                              global_names[fn]);
    }
}
