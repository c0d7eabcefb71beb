/* jinja_filters.c - the one table of Jinja2's builtin filters: name, implementation
 * (jinja_filters_str.c: strings and scalars; jinja_filters_seq.c: sequences), and the
 * mode shared implementations take; and the lookup the parser and evaluator use.
 * Filters Jinja2 has but chat templates do not need (urlize, wordwrap, random, ...)
 * are known and refused at run time, so a template using them in a branch never taken
 * still renders, as in Jinja2. */
#include <string.h>

#include "engine/template/jinja_filter_impl.h"

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

/* ---- the filter table ------------------------------------------------------------------- */

typedef struct {
    const char *name;
    jinja_filter_fn fn; /* NULL: a Jinja2 builtin we refuse when it is used */
    int mode;           /* passed to shared implementations in out->u.i */
} filter_entry;

static const filter_entry filters[] = {
    {"abs", jfilter_abs, 0},
    {"attr", jfilter_attr, 0},
    {"batch", jfilter_batch, 0},
    {"capitalize", jfilter_case, 2},
    {"center", jfilter_center, 0},
    {"count", jfilter_length, 0},
    {"d", jfilter_default, 0},
    {"default", jfilter_default, 0},
    {"dictsort", jfilter_dictsort, 0},
    {"e", jfilter_escape, 0},
    {"escape", jfilter_escape, 0},
    {"first", jfilter_first, 0},
    {"float", jfilter_float, 0},
    {"forceescape", jfilter_escape, 1},
    {"format", jfilter_format, 0},
    {"indent", jfilter_indent, 0},
    {"int", jfilter_int, 0},
    {"items", jfilter_items, 0},
    {"join", jfilter_join, 0},
    {"last", jfilter_last, 0},
    {"length", jfilter_length, 0},
    {"list", jfilter_list, 0},
    {"lower", jfilter_case, 0},
    {"map", jfilter_map, 0},
    {"max", jfilter_max, 0},
    {"min", jfilter_min, 0},
    {"reject", jfilter_reject, 0},
    {"rejectattr", jfilter_rejectattr, 0},
    {"replace", jfilter_replace, 0},
    {"reverse", jfilter_reverse, 0},
    {"round", jfilter_round, 0},
    {"safe", jfilter_safe, 0},
    {"select", jfilter_select, 0},
    {"selectattr", jfilter_selectattr, 0},
    {"slice", jfilter_slice, 0},
    {"sort", jfilter_sort, 0},
    {"string", jfilter_string, 0},
    {"sum", jfilter_sum, 0},
    {"title", jfilter_case, 4},
    {"tojson", jfilter_tojson, 0},
    {"trim", jfilter_trim, 0},
    {"truncate", jfilter_truncate, 0},
    {"unique", jfilter_unique, 0},
    {"upper", jfilter_case, 1},
    {"wordcount", jfilter_wordcount, 0},
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
    return -1;
}

int jinja_filter_apply_id(jctx *c, int line, int fid, jv val, jv *args, size_t nargs,
                          const char **kwn, jv *kwv, size_t nkw, jv *out) {
    jinja_filter_fn fn;
    *out = jinja_int(0);
    if (fid < 0 || (size_t)fid >= NFILTERS)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "unknown filter");
    fn = filters[fid].fn;
    out->u.i = filters[fid].mode;
    if (!fn)
        return jinja_ctx_fail(c, STRATA_EUNSUPPORTED, line, "the '%s' filter is not supported",
                              filters[fid].name);
    return fn(c, line, val, args, nargs, kwn, kwv, nkw, out);
}

int jinja_filter_apply(jctx *c, int line, const char *name, jv val, jv *args, size_t nargs,
                       const char **kwn, jv *kwv, size_t nkw, jv *out) {
    int fid = jinja_filter_find(name);
    if (fid < 0) return jinja_ctx_fail(c, STRATA_EINVALID, line, "No filter named '%s'.", name);
    return jinja_filter_apply_id(c, line, fid, val, args, nargs, kwn, kwv, nkw, out);
}
