/* pystr_tables.h - the shape of the generated Python str tables (pystr_tables.c), for
 * the lookups in pystr.c. Private to engine/unicode. */
#ifndef STRATA_UNICODE_PYSTR_TABLES_H
#define STRATA_UNICODE_PYSTR_TABLES_H

#include <stddef.h>
#include <stdint.h>

/* Sorted, disjoint inclusive ranges [lo, hi]. */
typedef struct pystr_ranges {
    const uint32_t (*r)[2];
    size_t n;
} pystr_ranges;

/* count code points start, start + stride, ... each mapped to itself + delta. */
typedef struct {
    uint32_t start;
    uint16_t count, stride;
    int32_t delta;
} jcase_run;
/* A code point whose mapping is two or three code points (the rest zero). */
typedef struct {
    uint32_t cp;
    uint32_t to[3];
} jcase_multi;
typedef struct pystr_case {
    const jcase_run *runs;
    size_t nruns;
    const jcase_multi *multi;
    size_t nmulti;
} pystr_case;

extern const pystr_ranges pystr_nonprint, pystr_alpha, pystr_digit, pystr_cased, pystr_title;
/* the exceptions to "islower is has-an-uppercase-mapping" (and the same for isupper) */
extern const pystr_ranges pystr_lower_x, pystr_upper_x;
extern const pystr_case pystr_up, pystr_low, pystr_tit;

#endif
