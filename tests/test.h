/* test.h - the assertions every unit test binary uses.
 *
 * A test binary runs its cases, prints one line per failed check, and exits
 * non-zero if any failed; tests/run.sh counts the binaries. */
#ifndef STRATA_TEST_H
#define STRATA_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int test_failures;
static int test_checks;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        test_checks++;                                                                             \
        if (!(cond)) {                                                                             \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        test_checks++;                                                                             \
        if (!(cond)) {                                                                             \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    CHECK_MSG((long long)(a) == (long long)(b), "%lld != %lld", (long long)(a), (long long)(b))

#define CHECK_NEAR(a, b, tol)                                                                      \
    CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g (tol %g)", (double)(a),      \
              (double)(b), (double)(tol))

#define RUN(fn)                                                                                    \
    do {                                                                                           \
        int before_ = test_failures;                                                               \
        fn();                                                                                      \
        fprintf(stderr, "  %-48s %s\n", #fn, test_failures == before_ ? "ok" : "FAILED");          \
    } while (0)

#define TEST_DONE()                                                                                \
    do {                                                                                           \
        fprintf(stderr, "%d checks, %d failed\n", test_checks, test_failures);                     \
        return test_failures ? 1 : 0;                                                              \
    } while (0)

#endif
