/* jinja_filters_seq.c - Jinja2's sequence filters (first, last, list, join, sort,
 * dictsort, unique, map, select/reject(attr), batch, slice, sum, min, max,
 * items, reverse) and transformers' |tojson.
 *
 * As in Jinja2, map/select/reject/unique/items/batch/slice return one-shot
 * generators (always truthy, no len(), printed as a generator object), sorting is
 * stable with reverse keeping equal items in order, and string keys compare
 * case-insensitively unless case_sensitive is set. */
#include <string.h>

#include "engine/template/jinja_filter_impl.h"

static int new_list(jctx *c, int line, size_t cap, int kind, jv *out) {
    *out = jinja_list(c, cap);
    if (jinja_is_oom(*out)) return jinja_ctx_nomem(c, line);
    out->kind = (uint8_t)kind;
    return 0;
}

static int push(jctx *c, int line, jv l, jv item) {
    return jinja_list_push(c, l.u.l, item) < 0 ? jinja_ctx_nomem(c, line) : 0;
}

static int is_digits(const char *s, size_t n) {
    if (!n) return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

/* make_attrgetter: "a.b.0" walks getitem(item, "a"), "b", 0. */
int jinja_filter_resolve_attr(jctx *c, int line, jv item, const char *attr, jv dflt, jv *out) {
    const char *p = attr;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        jv key;
        if (is_digits(p, n) && n < 18) {
            int64_t k = 0;
            for (size_t i = 0; i < n; i++) k = k * 10 + (p[i] - '0');
            key = jinja_int(k);
        } else {
            key = jinja_str(c, p, n);
            if (jinja_is_oom(key)) return jinja_ctx_nomem(c, line);
        }
        JTRY(jinja_eval_getitem(c, line, item, key, &item));
        if (jinja_given(dflt) && dflt.kind != JV_NONE && item.kind == JV_UNDEF) item = dflt;
        if (!dot) break;
        p = dot + 1;
    }
    *out = item;
    return 0;
}

static int lower_key(jctx *c, int line, jv *k) {
    if (k->kind != JV_STR) return 0;
    return jinja_str_case(c, *k, 0, k) < 0 ? jinja_ctx_nomem(c, line) : 0;
}

/* The sort key of one item: [attr1, attr2, ...] or the item, lowercased unless
 * case_sensitive; a tuple so that multi-attribute keys compare element-wise. */
static int sort_key(jctx *c, int line, jv item, const char *attr, int case_sensitive, jv *key) {
    jv parts;
    JTRY(new_list(c, line, 2, JV_LIST, &parts));
    const char *p = attr;
    do {
        const char *comma = p ? strchr(p, ',') : NULL;
        jv k = item;
        if (p) {
            char *one = jinja_arena_strndup(c->a, p, comma ? (size_t)(comma - p) : strlen(p));
            if (!one) return jinja_ctx_nomem(c, line);
            JTRY(jinja_filter_resolve_attr(c, line, item, one, jinja_missing(), &k));
        }
        if (!case_sensitive) JTRY(lower_key(c, line, &k));
        JTRY(push(c, line, parts, k));
        p = comma ? comma + 1 : NULL;
    } while (p);
    *key = parts;
    return 0;
}

/* Stable merge sort of v by precomputed keys; reverse keeps equal items in order. */
static int merge_sort(jctx *c, int line, jv *v, jv *keys, size_t n, int reverse) {
    jv *tv = jinja_arena_alloc(c->a, (n + 1) * sizeof *tv),
       *tk = jinja_arena_alloc(c->a, (n + 1) * sizeof *tk);
    if (!tv || !tk) return jinja_ctx_nomem(c, line);
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int r;
                JTRY(jinja_cmp(c, line, keys[j], keys[i], &r));
                int take_right = reverse ? r > 0 : r < 0;
                if (take_right) tv[k] = v[j], tk[k++] = keys[j++];
                else tv[k] = v[i], tk[k++] = keys[i++];
            }
            while (i < mid) tv[k] = v[i], tk[k++] = keys[i++];
            while (j < hi) tv[k] = v[j], tk[k++] = keys[j++];
        }
        memcpy(v, tv, n * sizeof *v);
        memcpy(keys, tk, n * sizeof *keys);
    }
    return 0;
}

int jinja_filter_sort_values(jctx *c, int line, jv *v, size_t n, int case_sensitive,
                             const char *attr, int reverse) {
    jv *keys = jinja_arena_alloc(c->a, (n + 1) * sizeof *keys);
    if (!keys) return jinja_ctx_nomem(c, line);
    for (size_t i = 0; i < n; i++) JTRY(sort_key(c, line, v[i], attr, case_sensitive, &keys[i]));
    return merge_sort(c, line, v, keys, n, reverse);
}

static const char *attr_arg(jctx *c, jv a) {
    if (!jinja_given(a) || a.kind == JV_NONE) return NULL;
    if (a.kind == JV_STR) return a.u.s->p;
    jv s = jinja_to_str(c, a);
    return jinja_is_oom(s) ? "" : s.u.s->p;
}

/* ---- filters ------------------------------------------------------------------------- */

FILTER(jfilter_list) {
    NOARGS("list");
    jlist *items;
    JTRY(jinja_iterate(c, line, v, &items));
    JTRY(new_list(c, line, items->n, JV_LIST, out));
    memcpy(out->u.l->v, items->v, items->n * sizeof(jv));
    out->u.l->n = items->n;
    return 0;
}

FILTER(jfilter_first) {
    NOARGS("do_first");
    jlist *items;
    JTRY(jinja_iterate(c, line, v, &items));
    *out = items->n ? items->v[0] : jinja_undef_hint(c, "No first item, sequence was empty.");
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}

FILTER(jfilter_last) {
    NOARGS("do_last");
    jlist *items;
    if (v.kind == JV_ITER)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "'%s' object is not reversible",
                              jinja_typename(v));
    JTRY(jinja_iterate(c, line, v, &items));
    *out = items->n ? items->v[items->n - 1]
                    : jinja_undef_hint(c, "No last item, sequence was empty.");
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}

FILTER(jfilter_items) {
    NOARGS("do_items");
    JTRY(new_list(c, line, v.kind == JV_DICT ? v.u.d->n : 1, JV_ITER, out));
    if (v.kind == JV_UNDEF) return 0;
    if (v.kind != JV_DICT)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "Can only get item pairs from a mapping.");
    for (size_t i = 0; i < v.u.d->n; i++) {
        jv pair;
        JTRY(new_list(c, line, 2, JV_TUPLE, &pair));
        pair.u.l->v[0] = v.u.d->k[i];
        pair.u.l->v[1] = v.u.d->v[i];
        pair.u.l->n = 2;
        out->u.l->v[out->u.l->n++] = pair;
    }
    return 0;
}

FILTER(jfilter_join) {
    BIND("do_join", "d", "attribute");
    jlist *items;
    JTRY(jinja_iterate(c, line, v, &items));
    jv sep = jinja_given(a[0]) ? jinja_to_str(c, a[0]) : jinja_strz(c, "");
    if (jinja_is_oom(sep)) return jinja_ctx_nomem(c, line);
    const char *attr = attr_arg(c, a[1]);
    strbuf b;
    jinja_buf_init(&b, c->a, c->max_output);
    for (size_t i = 0; i < items->n; i++) {
        jv item = items->v[i];
        if (attr) JTRY(jinja_filter_resolve_attr(c, line, item, attr, jinja_missing(), &item));
        if (i && strbuf_add(&b, sep.u.s->p, sep.u.s->len) < 0) return jinja_ctx_nomem(c, line);
        if (jinja_write_str(c, &b, item) < 0)
            return c->err_set ? c->err->code : jinja_ctx_nomem(c, line);
    }
    *out = jinja_str(c, b.p ? b.p : "", b.len);
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}

FILTER(jfilter_reverse) {
    NOARGS("do_reverse");
    jlist *items;
    if (v.kind == JV_STR) {
        JTRY(jinja_iterate(c, line, v, &items));
        strbuf b;
        jinja_buf_init(&b, c->a, 0);
        for (size_t i = items->n; i-- > 0;)
            if (strbuf_add(&b, items->v[i].u.s->p, items->v[i].u.s->len) < 0)
                return jinja_ctx_nomem(c, line);
        *out = jinja_str(c, b.p ? b.p : "", b.len);
        if (jinja_is_oom(*out)) return jinja_ctx_nomem(c, line);
        out->markup = v.markup;
        return 0;
    }
    if (!(v.kind == JV_LIST || v.kind == JV_TUPLE || v.kind == JV_DICT || v.kind == JV_ITER ||
          v.kind == JV_VIEW || v.kind == JV_UNDEF || v.kind == JV_RANGE))
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "argument must be iterable");
    JTRY(jinja_iterate(c, line, v, &items));
    JTRY(new_list(c, line, items->n, v.kind == JV_ITER ? JV_LIST : JV_ITER, out));
    for (size_t i = items->n; i-- > 0;) out->u.l->v[out->u.l->n++] = items->v[i];
    out->fn = v.kind == JV_DICT ? JITER_DICT_REVERSE : JITER_LIST_REVERSE;
    return 0;
}

FILTER(jfilter_dictsort) {
    BIND("do_dictsort", "case_sensitive", "by", "reverse");
    int cs = jinja_given(a[0]) && jinja_truthy(a[0]), rev = jinja_given(a[2]) && jinja_truthy(a[2]),
        pos = 0;
    if (jinja_given(a[1])) {
        if (a[1].kind == JV_STR && !strcmp(a[1].u.s->p, "value")) pos = 1;
        else if (!(a[1].kind == JV_STR && !strcmp(a[1].u.s->p, "key")))
            return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                  "You can only sort by either \"key\" or \"value\"");
    }
    JTRY(jinja_check_defined(c, line, v));
    if (v.kind != JV_DICT)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "'%s' object has no attribute 'items'",
                              jinja_typename(v));
    size_t n = v.u.d->n;
    jv *keys = jinja_arena_alloc(c->a, (n + 1) * sizeof *keys);
    if (!keys) return jinja_ctx_nomem(c, line);
    JTRY(new_list(c, line, n, JV_LIST, out));
    for (size_t i = 0; i < n; i++) {
        jv pair;
        JTRY(new_list(c, line, 2, JV_TUPLE, &pair));
        pair.u.l->v[0] = v.u.d->k[i];
        pair.u.l->v[1] = v.u.d->v[i];
        pair.u.l->n = 2;
        out->u.l->v[i] = pair;
        keys[i] = pos ? v.u.d->v[i] : v.u.d->k[i];
        if (!cs) JTRY(lower_key(c, line, &keys[i]));
    }
    out->u.l->n = n;
    return merge_sort(c, line, out->u.l->v, keys, n, rev);
}

FILTER(jfilter_sort) {
    BIND("do_sort", "reverse", "case_sensitive", "attribute");
    jlist *items;
    JTRY(jinja_iterate(c, line, v, &items));
    JTRY(new_list(c, line, items->n, JV_LIST, out));
    memcpy(out->u.l->v, items->v, items->n * sizeof(jv));
    out->u.l->n = items->n;
    return jinja_filter_sort_values(c, line, out->u.l->v, items->n,
                                    jinja_given(a[1]) && jinja_truthy(a[1]), attr_arg(c, a[2]),
                                    jinja_given(a[0]) && jinja_truthy(a[0]));
}

static int single_key(jctx *c, int line, jv item, const char *attr, int cs, jv *key) {
    *key = item;
    if (attr) JTRY(jinja_filter_resolve_attr(c, line, item, attr, jinja_missing(), key));
    return cs ? 0 : lower_key(c, line, key);
}

FILTER(jfilter_unique) {
    BIND("do_unique", "case_sensitive", "attribute");
    jlist *items;
    JTRY(jinja_iterate(c, line, v, &items));
    int cs = jinja_given(a[0]) && jinja_truthy(a[0]);
    const char *attr = attr_arg(c, a[1]);
    jv seen;
    JTRY(new_list(c, line, items->n, JV_LIST, &seen));
    JTRY(new_list(c, line, items->n, JV_ITER, out));
    for (size_t i = 0; i < items->n; i++) {
        jv key;
        JTRY(single_key(c, line, items->v[i], attr, cs, &key));
        if (!jinja_hashable(key))
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "unhashable type: '%s'",
                                  jinja_typename(key));
        int dup = 0;
        for (size_t k = 0; k < seen.u.l->n && !dup; k++) dup = jinja_eq(seen.u.l->v[k], key);
        if (dup) continue;
        seen.u.l->v[seen.u.l->n++] = key;
        out->u.l->v[out->u.l->n++] = items->v[i];
    }
    return 0;
}

static int min_max(jctx *c, int line, jv v, jv *args, size_t nargs, const char **kwn, jv *kwv,
                   size_t nkw, int want_max, jv *out) {
    BIND(want_max ? "do_max" : "do_min", "case_sensitive", "attribute");
    jlist *items;
    JTRY(jinja_iterate(c, line, v, &items));
    if (!items->n) {
        *out = jinja_undef_hint(c, "No aggregated item, sequence was empty.");
        return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
    }
    int cs = jinja_given(a[0]) && jinja_truthy(a[0]);
    const char *attr = attr_arg(c, a[1]);
    jv best = items->v[0], best_key;
    JTRY(single_key(c, line, best, attr, cs, &best_key));
    for (size_t i = 1; i < items->n; i++) {
        jv key;
        int r;
        JTRY(single_key(c, line, items->v[i], attr, cs, &key));
        JTRY(jinja_cmp(c, line, key, best_key, &r));
        if (want_max ? r > 0 : r < 0) best = items->v[i], best_key = key;
    }
    *out = best;
    return 0;
}

FILTER(jfilter_min) { return min_max(c, line, v, args, nargs, kwn, kwv, nkw, 0, out); }
FILTER(jfilter_max) { return min_max(c, line, v, args, nargs, kwn, kwv, nkw, 1, out); }

FILTER(jfilter_map) {
    jlist *items;
    if (!jinja_truthy(v)) return new_list(c, line, 1, JV_ITER, out); /* "if value:" comes first */
    JTRY(jinja_iterate(c, line, v, &items));
    JTRY(new_list(c, line, items->n, JV_ITER, out));
    int by_attr = nargs == 0 && nkw > 0;
    const char *attr = NULL;
    jv dflt = jinja_none();
    int has_default = 0;
    if (by_attr) {
        int found = 0;
        for (size_t k = 0; k < nkw; k++) {
            if (!strcmp(kwn[k], "attribute")) attr = attr_arg(c, kwv[k]), found = 1;
            else if (!strcmp(kwn[k], "default"))
                dflt = kwv[k], has_default = kwv[k].kind != JV_NONE;
            else
                return jinja_ctx_fail(c, STRATA_EINVALID, line, "Unexpected keyword argument '%s'",
                                      kwn[k]);
        }
        if (!found) by_attr = 0;
    }
    if (!by_attr && (nargs == 0 || args[0].kind != JV_STR))
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "map requires a filter argument");
    for (size_t i = 0; i < items->n; i++) {
        jv r;
        if (by_attr) {
            JTRY(jinja_filter_resolve_attr(c, line, items->v[i], attr ? attr : "None",
                                           has_default ? dflt : jinja_missing(), &r));
        } else {
            JTRY(jinja_filter_apply(c, line, args[0].u.s->p, items->v[i], args + 1, nargs - 1, kwn,
                                    kwv, nkw, &r));
        }
        out->u.l->v[out->u.l->n++] = r;
    }
    return 0;
}

/* select / reject / selectattr / rejectattr */
static int select_reject(jctx *c, int line, jv v, jv *args, size_t nargs, int by_attr, int keep_if,
                         jv *out) {
    JTRY(new_list(c, line, 4, JV_ITER, out));
    if (!jinja_truthy(v)) return 0;
    jlist *items;
    JTRY(jinja_iterate(c, line, v, &items));
    size_t off = 0;
    const char *attr = NULL;
    if (by_attr) {
        if (nargs == 0)
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "Missing parameter for attribute name");
        attr = attr_arg(c, args[0]);
        off = 1;
    }
    int tid = -1;
    if (nargs > off) {
        if (args[off].kind != JV_STR || (tid = jinja_test_find(args[off].u.s->p)) < 0)
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "No test named %s.",
                                  args[off].kind == JV_STR ? args[off].u.s->p : "?");
    }
    for (size_t i = 0; i < items->n; i++) {
        jv x = items->v[i], r;
        if (attr) JTRY(jinja_filter_resolve_attr(c, line, x, attr, jinja_missing(), &x));
        int ok;
        if (tid >= 0) {
            JTRY(jinja_test_apply(c, line, tid, x, args + off + 1, nargs - off - 1, &r));
            ok = jinja_truthy(r);
        } else {
            ok = jinja_truthy(x);
        }
        if (ok == keep_if) JTRY(push(c, line, *out, items->v[i]));
    }
    return 0;
}

#define SELECT(fname, by_attr, keep)                                                               \
    FILTER(fname) {                                                                                \
        (void)kwn, (void)kwv;                                                                      \
        if (nkw)                                                                                   \
            return jinja_ctx_fail(c, STRATA_EINVALID, line,                                        \
                                  "tests take no keyword arguments here");                         \
        return select_reject(c, line, v, args, nargs, by_attr, keep, out);                         \
    }
SELECT(jfilter_select, 0, 1)
SELECT(jfilter_reject, 0, 0)
SELECT(jfilter_selectattr, 1, 1)
SELECT(jfilter_rejectattr, 1, 0)

FILTER(jfilter_sum) {
    BIND("do_sum", "attribute", "start");
    jlist *items;
    JTRY(jinja_iterate(c, line, v, &items));
    jv acc = jinja_given(a[1]) ? a[1] : jinja_int(0);
    if (acc.kind == JV_STR)
        return jinja_ctx_fail(c, STRATA_EINVALID, line,
                              "sum() can't sum strings [use ''.join(seq) instead]");
    const char *attr = attr_arg(c, a[0]);
    for (size_t i = 0; i < items->n; i++) {
        jv x = items->v[i];
        if (attr) JTRY(jinja_filter_resolve_attr(c, line, x, attr, jinja_missing(), &x));
        JTRY(jinja_eval_binop(c, line, JOP_ADD, acc, x, &acc));
    }
    *out = acc;
    return 0;
}

FILTER(jfilter_batch) {
    BIND("do_batch", "linecount", "fill_with");
    if (!jinja_given(a[0]) || (a[0].kind != JV_INT && a[0].kind != JV_BOOL) || a[0].u.i < 1)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "batch needs a positive line count");
    jlist *items;
    JTRY(jinja_iterate(c, line, v, &items));
    size_t per = (size_t)a[0].u.i;
    JTRY(new_list(c, line, items->n / per + 1, JV_ITER, out));
    jv cur = jinja_none();
    for (size_t i = 0; i < items->n; i++) {
        if (i % per == 0) {
            JTRY(new_list(c, line, per < 64 ? per : 64, JV_LIST, &cur));
            JTRY(push(c, line, *out, cur));
        }
        JTRY(push(c, line, cur, items->v[i]));
    }
    if (cur.kind == JV_LIST && jinja_given(a[1]) && a[1].kind != JV_NONE)
        while (cur.u.l->n < per) JTRY(push(c, line, cur, a[1]));
    return 0;
}

FILTER(jfilter_slice) {
    BIND("do_slice", "slices", "fill_with");
    if (!jinja_given(a[0]) || (a[0].kind != JV_INT && a[0].kind != JV_BOOL) || a[0].u.i < 1)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "slice needs a positive count");
    jlist *items;
    JTRY(jinja_iterate(c, line, v, &items));
    size_t slices = (size_t)a[0].u.i, len = items->n, per = len / slices, extra = len % slices,
           offset = 0;
    if (slices > 100000) return jinja_ctx_fail(c, STRATA_ERANGE, line, "too many slices");
    JTRY(new_list(c, line, slices, JV_ITER, out));
    for (size_t s = 0; s < slices; s++) {
        size_t start = offset + s * per;
        if (s < extra) offset++;
        size_t end = offset + (s + 1) * per;
        jv part;
        JTRY(new_list(c, line, end - start + 1, JV_LIST, &part));
        for (size_t i = start; i < end && i < len; i++) part.u.l->v[part.u.l->n++] = items->v[i];
        if (jinja_given(a[1]) && a[1].kind != JV_NONE && s >= extra)
            part.u.l->v[part.u.l->n++] = a[1];
        JTRY(push(c, line, *out, part));
    }
    return 0;
}

/* transformers: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
FILTER(jfilter_tojson) {
    BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    jinja_json_opts o = {0};
    o.ensure_ascii = jinja_given(a[0]) && jinja_truthy(a[0]);
    o.sort_keys = jinja_given(a[3]) && jinja_truthy(a[3]);
    if (jinja_given(a[1]) && a[1].kind != JV_NONE) {
        o.has_indent = 1;
        if (a[1].kind == JV_STR) {
            o.indent = a[1].u.s->p;
            o.indent_len = a[1].u.s->len;
        } else if (a[1].kind == JV_INT || a[1].kind == JV_BOOL) {
            int64_t n = a[1].u.i < 0 ? 0 : a[1].u.i;
            if (n > 1000) return jinja_ctx_fail(c, STRATA_ERANGE, line, "indent too large");
            char *sp = jinja_arena_alloc(c->a, (size_t)n + 1);
            if (!sp) return jinja_ctx_nomem(c, line);
            memset(sp, ' ', (size_t)n);
            sp[n] = 0;
            o.indent = sp;
            o.indent_len = (size_t)n;
        } else {
            return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                  "can't multiply sequence by non-int of type '%s'",
                                  jinja_typename(a[1]));
        }
    }
    o.item_sep = o.has_indent ? "," : ", ";
    o.key_sep = ": ";
    if (jinja_given(a[2]) && a[2].kind != JV_NONE) {
        if (!((a[2].kind == JV_LIST || a[2].kind == JV_TUPLE) && a[2].u.l->n == 2 &&
              a[2].u.l->v[0].kind == JV_STR && a[2].u.l->v[1].kind == JV_STR))
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "separators must be a pair of strings");
        o.item_sep = a[2].u.l->v[0].u.s->p;
        o.key_sep = a[2].u.l->v[1].u.s->p;
    }
    strbuf b;
    jinja_buf_init(&b, c->a, c->max_output);
    JTRY(jinja_json_dump(c, line, &b, v, &o));
    *out = jinja_str(c, b.p ? b.p : "", b.len);
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}
