/* test_cpu_act.c - the CPU backend's gelu_tanh_mul, scale and softcap
 * (kernels/cpu/cpu_act.c) on every ISA this machine runs, against double-precision
 * references written here from kernels/backend.h, and the scalar references of
 * cpu_act.c against the same.
 *
 * Sizes are awkward on purpose (1, 3, vector widths ± 1, a prime near 4096, and sizes
 * big enough to be split over the pool), and gelu_tanh_mul also runs in place
 * (out aliasing gate), as the models call it. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_act.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/test.h"

enum { MAX_BE = 8 };
static backend *be[MAX_BE];
static char be_name[MAX_BE][32];
static int n_be;

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float rng_f(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)(uint32_t)(rng_state >> 32) / 2147483648.0f - 1.0f;
}

static float *fvec(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) abort();
    return p;
}

static const int sizes[] = {1, 3, 7, 15, 16, 17, 31, 33, 255, 257, 4093, 3 * 4093 + 5};
enum { N_SIZES = sizeof sizes / sizeof sizes[0] };

static double gelu_tanh_d(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* gelu_tanh(x)·u against the double formula. The f32 results differ from it by the
 * rounding of u(x) (a few ulp, scaled by |d gelu/du| <= 0.6·|x|) and of the products and
 * the sigmoid (~1e-7 each): 1e-6 of |x·up| plus 1e-7·|up| for x near zero covers it with
 * room; a wrong constant or a missing 0.5 is off by percent. */
static void check_gelu(const char *who, const float *got, const float *g, const float *u,
                       size_t n) {
    int bad = 0;
    for (size_t i = 0; i < n && !bad; i++) {
        double want = gelu_tanh_d(g[i]) * u[i];
        double tol = 1e-6 * fabs((double)g[i] * u[i]) + 1e-7 * fabs(u[i]) + 1e-30;
        if (!(fabs(got[i] - want) <= tol)) {
            bad = 1;
            CHECK_MSG(0, "%s gelu_tanh_mul n=%zu at %zu: x %g up %g got %.9g want %.9g", who, n, i,
                      g[i], u[i], got[i], want);
        }
    }
    CHECK(!bad);
}

static void test_gelu_tanh_mul(void) {
    for (int si = 0; si < N_SIZES; si++) {
        int n = sizes[si];
        float *g = fvec((size_t)n), *u = fvec((size_t)n), *o = fvec((size_t)n);
        /* gate spans the curve: deep negative tail, the bend, and the linear part */
        for (int i = 0; i < n; i++) {
            g[i] = 9.0f * rng_f();
            u[i] = 2.0f * rng_f();
        }
        cpu_act_gelu_tanh_mul_ref(o, g, u, 1, n);
        check_gelu("ref", o, g, u, (size_t)n);
        for (int b = 0; b < n_be; b++) {
            /* as [m, n/m] rows when that splits evenly, else one row */
            int m = n % 3 == 0 ? 3 : 1;
            memset(o, 0, sizeof(float) * (size_t)n);
            be[b]->ops->gelu_tanh_mul(be[b], o, g, u, m, n / m);
            check_gelu(be_name[b], o, g, u, (size_t)n);
            /* in place: out aliases gate */
            float *g2 = fvec((size_t)n);
            memcpy(g2, g, sizeof(float) * (size_t)n);
            be[b]->ops->gelu_tanh_mul(be[b], g2, g2, u, 1, n);
            CHECK_MSG(!memcmp(g2, o, sizeof(float) * (size_t)n), "%s gelu in place n=%d",
                      be_name[b], n);
            free(g2);
        }
        free(g);
        free(u);
        free(o);
    }
    /* the extremes saturate to x·up and to 0, and NaN propagates */
    float g[4] = {60.0f, -60.0f, 0.0f, NAN}, u[4] = {1.5f, 1.5f, 3.0f, 1.0f}, o[4];
    for (int b = 0; b < n_be; b++) {
        be[b]->ops->gelu_tanh_mul(be[b], o, g, u, 1, 4);
        CHECK_NEAR(o[0], 90.0, 1e-5);
        CHECK_NEAR(o[1], 0.0, 1e-30);
        CHECK(o[2] == 0.0f);
        CHECK(isnan(o[3]));
    }
}

/* scale: one f32 factor alpha · s[0], one rounding per element, so results are exact
 * against the same f32 product computed here. */
static void test_scale(void) {
    uint16_t s_bf16 = 0x3f31; /* bf16 0.69140625 */
    float s_f32 = 0.8125f;
    bk_weight wb = {.data = &s_bf16, .dt = DTYPE_BF16, .ndim = 1, .shape = {1}};
    bk_weight wf = {.data = &s_f32, .dt = DTYPE_F32, .ndim = 1, .shape = {1}};
    for (int si = 0; si < N_SIZES; si++) {
        int n = sizes[si];
        float *x = fvec((size_t)n), *y = fvec((size_t)n);
        for (int i = 0; i < n; i++) x[i] = 100.0f * rng_f();
        struct {
            float alpha;
            const bk_weight *w;
            float f;
        } cases[] = {{39.25f, NULL, 39.25f},
                     {1.0f, &wb, dtype_bf16_to_f32(s_bf16)},
                     {0.70710678f, &wf, 0.70710678f * 0.8125f}};
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            memcpy(y, x, sizeof(float) * (size_t)n);
            cpu_act_scale_ref(y, cases[c].alpha, cases[c].w, (size_t)n);
            int ok = 1;
            for (int i = 0; i < n; i++) ok &= y[i] == x[i] * cases[c].f;
            CHECK_MSG(ok, "scale ref case %zu n=%d", c, n);
            for (int b = 0; b < n_be; b++) {
                memcpy(y, x, sizeof(float) * (size_t)n);
                be[b]->ops->scale(be[b], y, cases[c].alpha, cases[c].w, (size_t)n);
                ok = 1;
                for (int i = 0; i < n; i++) ok &= y[i] == x[i] * cases[c].f;
                CHECK_MSG(ok, "%s scale case %zu n=%d", be_name[b], c, n);
            }
        }
        free(x);
        free(y);
    }
}

/* softcap against cap·tanh(x/cap) in double. The reference: tanhf is within 2 ulp and
 * x/cap adds one rounding, so |err| <= cap · 4e-7 (cap = 30: 1.2e-5). The backends'
 * 2c·sigmoid(2x/c) − c: a few ulp of the exp, then the subtraction of c, ~1 ulp of c:
 * cap · 4e-7 as well (measured: under cap · 3e-7). A wrong cap or a plain tanh(x) is
 * off by far more. */
static void test_softcap(void) {
    const float cap = 30.0f;
    for (int si = 0; si < N_SIZES; si++) {
        int n = sizes[si];
        float *x = fvec((size_t)n), *y = fvec((size_t)n), *r = fvec((size_t)n);
        for (int i = 0; i < n; i++) x[i] = 120.0f * rng_f();
        memcpy(r, x, sizeof(float) * (size_t)n);
        cpu_act_softcap_ref(r, cap, (size_t)n);
        int ok = 1;
        for (int i = 0; i < n; i++) ok &= fabs(r[i] - cap * tanh((double)x[i] / cap)) <= cap * 4e-7;
        CHECK_MSG(ok, "softcap ref n=%d", n);
        for (int b = 0; b < n_be; b++) {
            memcpy(y, x, sizeof(float) * (size_t)n);
            be[b]->ops->softcap(be[b], y, cap, (size_t)n);
            ok = 1;
            for (int i = 0; i < n; i++)
                ok &= fabs(y[i] - cap * tanh((double)x[i] / cap)) <= cap * 4e-7;
            CHECK_MSG(ok, "%s softcap n=%d", be_name[b], n);
        }
        free(x);
        free(y);
        free(r);
    }
    float big[4] = {1e30f, -1e30f, 0.0f, NAN};
    for (int b = 0; b < n_be; b++) {
        float y[4];
        memcpy(y, big, sizeof y);
        be[b]->ops->softcap(be[b], y, cap, 4);
        CHECK(y[0] == cap && y[1] == -cap && y[2] == 0.0f && isnan(y[3]));
    }
}

int main(void) {
    strata_err err = {0};
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_backend_isa_supported((cpu_isa)isa)) continue;
        for (int threads = 1; threads <= 2; threads++) {
            if (cpu_backend_create_isa(threads, (cpu_isa)isa, &be[n_be], &err) == 0) {
                snprintf(be_name[n_be], sizeof be_name[n_be], "%s/%dt",
                         cpu_backend_isa_name((cpu_isa)isa), threads);
                n_be++;
            }
        }
    }
    CHECK(n_be >= 2);
    RUN(test_gelu_tanh_mul);
    RUN(test_scale);
    RUN(test_softcap);
    for (int b = 0; b < n_be; b++) backend_destroy(be[b]);
    TEST_DONE();
}
