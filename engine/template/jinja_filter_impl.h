/* jinja_filter_impl.h - what the files implementing filters share: the signature of a
 * filter, argument binding as Python's keyword rules do it, and the prototypes of every
 * filter the table in jinja_filters.c lists. Only jinja_filters*.c include it. */
#ifndef STRATA_JINJA_FILTER_IMPL_H
#define STRATA_JINJA_FILTER_IMPL_H

#include "engine/template/jinja_internal.h"

#define FILTER(fname)                                                                              \
    int fname(jctx *c, int line, jv v, jv *args, size_t nargs, const char **kwn, jv *kwv,          \
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

/* string and scalar filters (jinja_filters_str.c) */
FILTER(jfilter_case);
FILTER(jfilter_trim);
FILTER(jfilter_string);
FILTER(jfilter_safe);
FILTER(jfilter_escape);
FILTER(jfilter_length);
FILTER(jfilter_default);
FILTER(jfilter_abs);
FILTER(jfilter_int);
FILTER(jfilter_float);
FILTER(jfilter_round);
FILTER(jfilter_replace);
FILTER(jfilter_indent);
FILTER(jfilter_center);
FILTER(jfilter_wordcount);
FILTER(jfilter_format);
FILTER(jfilter_truncate);
FILTER(jfilter_attr);

/* sequence filters and tojson (jinja_filters_seq.c) */
FILTER(jfilter_list);
FILTER(jfilter_first);
FILTER(jfilter_last);
FILTER(jfilter_items);
FILTER(jfilter_join);
FILTER(jfilter_reverse);
FILTER(jfilter_dictsort);
FILTER(jfilter_sort);
FILTER(jfilter_unique);
FILTER(jfilter_min);
FILTER(jfilter_max);
FILTER(jfilter_map);
FILTER(jfilter_sum);
FILTER(jfilter_batch);
FILTER(jfilter_slice);
FILTER(jfilter_tojson);
FILTER(jfilter_select);
FILTER(jfilter_reject);
FILTER(jfilter_selectattr);
FILTER(jfilter_rejectattr);

#endif
