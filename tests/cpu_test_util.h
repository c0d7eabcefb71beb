/* cpu_test_util.h - fixtures shared by the CPU backend op tests: the backends under
 * test (one per ISA / thread count), a seeded generator, vectors, a step layout, and
 * the closeness checks whose messages name the backend. Define CPU_TEST_SEED before
 * including to pick the stream. Test-only. */
#ifndef STRATA_CPU_TEST_UTIL_H
#define STRATA_CPU_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/test.h"
#include "tests/test_batch.h"

#ifndef CPU_TEST_SEED
#define CPU_TEST_SEED 0x9e3779b97f4a7c15ull
#endif

enum { MAX_BE = 8 };
static backend *be[MAX_BE];
static char be_name[MAX_BE][32];
static int n_be;

static uint64_t rng_state = CPU_TEST_SEED;
static inline uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}
/* Uniform in [-1, 1). */
static inline float rng_f(void) { return (float)rng_u32() / 2147483648.0f - 1.0f; }

/* noinline: the allocation size stays opaque to the optimiser, as in a real caller */
__attribute__((noinline, unused)) static float *fvec(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) abort();
    return p;
}
__attribute__((unused)) static float *frand(size_t n) {
    float *p = fvec(n);
    for (size_t i = 0; i < n; i++) p[i] = rng_f();
    return p;
}
__attribute__((noinline, unused)) static double *dvec(size_t n) {
    double *p = calloc(n ? n : 1, sizeof(double));
    if (!p) abort();
    return p;
}

/* Fills be[] with every ISA this machine runs: scalar on 1 thread (be[0], the baseline)
 * and on 2, the vector ISAs on 3 threads, so task splits are uneven and run
 * concurrently even on a 2-core machine. Returns -1 (message printed) on failure. */
__attribute__((unused)) static int cpu_test_backends_open(void) {
    strata_err err = {0};
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_backend_isa_supported((cpu_isa)isa)) {
            fprintf(stderr, "  (isa %s not supported here: skipped)\n",
                    cpu_backend_isa_name((cpu_isa)isa));
            continue;
        }
        for (int ti = 0; ti < (isa == CPU_ISA_SCALAR ? 2 : 1); ti++) {
            int nt = isa == CPU_ISA_SCALAR ? 1 + ti : 3;
            if (cpu_backend_create_isa(nt, (cpu_isa)isa, &be[n_be], &err) != 0) {
                fprintf(stderr, "create %s: %s\n", cpu_backend_isa_name((cpu_isa)isa), err.msg);
                return -1;
            }
            snprintf(be_name[n_be], sizeof be_name[n_be], "%s/%dt",
                     cpu_backend_isa_name((cpu_isa)isa), nt);
            n_be++;
        }
    }
    return 0;
}

__attribute__((unused)) static void cpu_test_backends_close(void) {
    for (int i = 0; i < n_be; i++) backend_destroy(be[i]);
    n_be = 0;
}

/* A step of n_seqs sequences (len tokens each, first at pos0, in slot). */
typedef struct {
    bk_batch b;
    int32_t slot[8], start[8], len[8], pos0[8];
    int32_t tok_pos[1024], tok_seq[1024];
} tbatch;

/* A step laid out as the engine lays it out (tests/test_batch.h). */
static inline void make_batch(tbatch *t, int n_seqs, const int *len, const int *pos0,
                              const int *slot) {
    memset(t, 0, sizeof *t);
    t->b = test_batch_fill(TEST_BATCH_ARRAYS(t), n_seqs, len, pos0, slot);
}

/* Largest |a - b| over n floats (NaN counts as infinite), and where. */
static inline double max_diff(const float *a, const double *b, size_t n, size_t *at) {
    double m = 0;
    *at = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > m || d != d) {
            m = d != d ? INFINITY : d;
            *at = i;
        }
    }
    return m;
}

/* Both expect the backend index bi in scope. */
#define CHECK_CLOSE(got, want, n, tol, what, ...)                                                  \
    do {                                                                                           \
        size_t at_;                                                                                \
        double md_ = max_diff((got), (want), (n), &at_);                                           \
        CHECK_MSG(md_ <= (tol),                                                                    \
                  "%s " what ": max diff %.3g at %zu (got %.9g want %.9g, tol %.3g)", be_name[bi], \
                  __VA_ARGS__, md_, at_, (double)(got)[at_], (want)[at_], (double)(tol));          \
    } while (0)

#define CHECK_SAME(a, b, n, what, ...)                                                             \
    CHECK_MSG(memcmp((a), (b), (n) * sizeof(float)) == 0, "%s " what ": not bit-identical",        \
              be_name[bi], __VA_ARGS__)

#endif
