/* test_sampler_scan.c - engine/sampler_scan.c against plain references: the selection
 * against a full sort, the arg-max against a scan, the exponential sum against libm's exp
 * summed in long double. Rows with ties, signed zeros, infinities and NaN, at lengths on
 * and off the block size; the library's build (the clone the loader picked) and the
 * baseline build (this file includes the source again, renamed) both. */
#include <string.h>

#include "engine/sampler_scan.h"
#include "tests/test.h"
#include "tests/test_rng.h"

#define SAMPLER_SCAN_BASELINE
#define vocab_argmax base_argmax
#define vocab_sum_exp base_sum_exp
#define vocab_top_k base_top_k
#include "engine/sampler_scan.c"
#undef vocab_argmax
#undef vocab_sum_exp
#undef vocab_top_k

typedef struct impl {
    const char *name;
    float (*argmax)(const float *, int, int32_t *);
    double (*sum_exp)(const float *, int, double, double);
    void (*top_k)(const float *, int, int, int32_t *, int32_t *);
} impl;

static const impl impls[] = {{"library", vocab_argmax, vocab_sum_exp, vocab_top_k},
                             {"baseline", base_argmax, base_sum_exp, base_top_k}};

/* The order of sampler_scan.h: larger first, -0 == +0, NaN last, ties by the lower id. */
static const float *order_vals;
static int order_cmp(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = order_vals[i], y = order_vals[j];
    int xn = x != x, yn = y != y;
    if (xn != yn) return xn - yn;
    if (!xn && x != y) return x > y ? -1 : 1;
    return (i > j) - (i < j);
}

/* A row of n values drawn from a few shapes: a spread with ties, a narrow band (one
 * histogram bin), all equal, and specials sprinkled in. */
static void fill_row(float *x, int n, int shape, uint64_t *rng) {
    for (int i = 0; i < n; i++) {
        uint32_t r = test_rng_below(rng, 1000000);
        switch (shape) {
        case 0: x[i] = (float)(r % 2001) / 100.0f - 10.0f; break; /* steps of 0.01: ties */
        case 1: x[i] = 3.0f + (float)(r % 64) * 1e-6f; break;     /* one top-level bin */
        case 2: x[i] = -1.5f; break;
        default: x[i] = (float)r / 1000000.0f * 200.0f - 100.0f; break;
        }
        uint32_t s = test_rng_below(rng, 100);
        if (s == 0) x[i] = NAN;
        else if (s == 1) x[i] = -INFINITY;
        else if (s == 2) x[i] = (r & 1) ? 0.0f : -0.0f;
        else if (s == 3 && shape != 2) x[i] = INFINITY;
    }
}

static void test_top_k_matches_sort(void) {
    static const int lens[] = {1, 2, 15, 16, 17, 33, 100, 1000, 4099, 70001};
    uint64_t rng = 0x5eed5eedULL;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        int n = lens[li];
        float *x = malloc(sizeof(float) * (size_t)n);
        int32_t *all = malloc(sizeof(int32_t) * (size_t)n),
                *idx = malloc(sizeof(int32_t) * (size_t)n),
                *tmp = malloc(sizeof(int32_t) * (size_t)n);
        for (int shape = 0; shape < 4; shape++) {
            fill_row(x, n, shape, &rng);
            order_vals = x;
            for (int i = 0; i < n; i++) all[i] = i;
            qsort(all, (size_t)n, sizeof *all, order_cmp);
            /* the one-pass list up to 64, the radix select above */
            int ks[] = {1,
                        2,
                        40,
                        64,
                        65,
                        n / 3 + 1,
                        n > 1 ? n - 1 : 1,
                        n,
                        (int)test_rng_below(&rng, (uint32_t)n) + 1};
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
                for (size_t m = 0; m < sizeof impls / sizeof *impls; m++) {
                    int k = ks[ki] < n ? ks[ki] : n;
                    /* up to VOCAB_TOP_FEW: sorted already, and no scratch */
                    int few = k <= VOCAB_TOP_FEW;
                    impls[m].top_k(x, n, k, idx, few ? NULL : tmp);
                    CHECK_MSG(!few || !memcmp(idx, all, sizeof(int32_t) * (size_t)k),
                              "%s: n %d shape %d k %d: not in order", impls[m].name, n, shape, k);
                    qsort(idx, (size_t)k, sizeof *idx, order_cmp);
                    CHECK_MSG(!memcmp(idx, all, sizeof(int32_t) * (size_t)k),
                              "%s: n %d shape %d k %d: not the first k of the order", impls[m].name,
                              n, shape, k);
                }
        }
        free(x), free(all), free(idx), free(tmp);
    }
}

static void test_argmax(void) {
    uint64_t rng = 0xa59a5ULL;
    for (int n = 1; n < 300; n += 7)
        for (int shape = 0; shape < 4; shape++) {
            float x[300];
            fill_row(x, n, shape, &rng);
            float mx = -INFINITY;
            int32_t want = 0;
            for (int i = 0; i < n; i++)
                if (x[i] > mx) mx = x[i], want = i;
            for (size_t m = 0; m < sizeof impls / sizeof *impls; m++) {
                int32_t arg = -1;
                float got = impls[m].argmax(x, n, &arg);
                CHECK_MSG(got == mx && arg == want, "%s: n %d shape %d: %g at %d, want %g at %d",
                          impls[m].name, n, shape, got, arg, mx, want);
            }
        }
    float none[20];
    for (int i = 0; i < 20; i++) none[i] = i % 2 ? NAN : -INFINITY;
    for (size_t m = 0; m < sizeof impls / sizeof *impls; m++) {
        int32_t arg = -1;
        float got = impls[m].argmax(none, 20, &arg);
        CHECK(got == -INFINITY && arg == 0); /* NaN never wins, nothing above -inf: id 0 */
    }
}

/* Each term against libm's exp, then whole rows against a long double sum. */
static void test_sum_exp(void) {
    double worst = 0;
    uint64_t rng = 0xe4bULL;
    for (int t = 0; t < 20000; t++) {
        double d = -(double)test_rng_below(&rng, 1u << 30) / (double)(1u << 30) * 700.0;
        float x = (float)d;
        for (size_t m = 0; m < sizeof impls / sizeof *impls; m++) {
            double got = impls[m].sum_exp(&x, 1, 0.0, 1.0), want = exp((double)x);
            double rel = fabs(got - want) / want;
            if (rel > worst) worst = rel;
        }
    }
    CHECK_MSG(worst < 4 * 0x1p-52, "worst term %.3g (4 ulps is %.3g)", worst, 4 * 0x1p-52);
    float big[5003];
    for (int shape = 0; shape < 4; shape += 3) {
        fill_row(big, 5003, shape, &rng);
        for (int i = 0; i < 5003; i++) /* the contract: top >= every value, finite */
            if (!(big[i] > -INFINITY) || big[i] == INFINITY) big[i] = -50.0f;
        int32_t arg;
        double top = impls[0].argmax(big, 5003, &arg);
        const double inv_t[] = {1.0, 1.0 / 0.7, 0.25, 0.0};
        for (size_t ti = 0; ti < sizeof inv_t / sizeof *inv_t; ti++) {
            long double want = 0;
            for (int i = 0; i < 5003; i++) want += expl(((long double)big[i] - top) * inv_t[ti]);
            for (size_t m = 0; m < sizeof impls / sizeof *impls; m++) {
                double got = impls[m].sum_exp(big, 5003, top, inv_t[ti]);
                CHECK_MSG(fabsl(got - want) <= want * 1e-14L,
                          "%s: shape %d 1/T %g: %.17g vs %.17Lg", impls[m].name, shape, inv_t[ti],
                          got, want);
            }
        }
    }
    float odd[3] = {0.0f, NAN, -INFINITY}; /* NaN and -inf count as (next to) nothing */
    for (size_t m = 0; m < sizeof impls / sizeof *impls; m++)
        CHECK_NEAR(impls[m].sum_exp(odd, 3, 0.0, 1.0), 1.0, 1e-300);
}

int main(void) {
    RUN(test_top_k_matches_sort);
    RUN(test_argmax);
    RUN(test_sum_exp);
    TEST_DONE();
}
