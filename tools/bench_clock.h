/* bench_clock.h - the wall clock and sort order the tools/bench_*.c timings share. */
#ifndef STRATA_BENCH_CLOCK_H
#define STRATA_BENCH_CLOCK_H

#include <time.h>

/* Monotonic time in microseconds. */
static inline double bench_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* qsort's comparison of two doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif
