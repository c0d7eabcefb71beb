/* clock.h - the one clock strata measures with: CLOCK_MONOTONIC in seconds (never
 * steps back when the wall clock is set). */
#ifndef STRATA_CLOCK_H
#define STRATA_CLOCK_H

#include <time.h>

static inline double strata_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
