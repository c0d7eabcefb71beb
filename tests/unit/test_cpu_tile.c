/* test_cpu_tile.c - the tile product of the chunked scans (kernels/cpu/cpu_tile.c,
 * cpu_tile_avx2.c, cpu_tile_avx512.c) on every ISA this machine runs, against a double
 * reference on awkward sizes: row counts around the 4-row register tile, column counts of
 * one and several 16- and 32-wide blocks, k of 0, 1 and a prime, padded strides, alpha 0
 * (c not read: it holds NaN) and alpha != 0, and a and c sharing a buffer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_tile.h"
#define CPU_TEST_SEED 0x6a09e667f3bcc908ull
#include "tests/cpu_test_util.h"
#include "tests/test.h"

/* Each c[i, j] is a sum of k products of values in [-1, 1) plus alpha·c: the f32 error is
 * at most k·2^-24 of the sum of |terms| (<= k + |alpha|), whatever the order or fusing, so
 * (k + 1)^2 · 2^-24 bounds it; a wrong row, column or stride is off by O(1). */
static double tile_tol(int k) { return (double)(k + 1) * (k + 1) * ldexp(1.0, -24); }

static void tile_check(cpu_tile_gemm_fn fn, const char *name, int m, int n, int k, float alpha) {
    int lda = k + 3, ldb = n + 16, ldc = n + 32;
    float *a = frand((size_t)m * lda + 1), *b = frand((size_t)(k ? k : 1) * ldb);
    float *c = frand((size_t)m * ldc), *c0 = fvec((size_t)m * ldc);
    if (alpha == 0.0f)
        for (size_t i = 0; i < (size_t)m * ldc; i++) c[i] = NAN;
    memcpy(c0, c, sizeof(float) * m * ldc);
    double *want = dvec((size_t)m * n);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = alpha != 0.0f ? (double)alpha * c0[(size_t)i * ldc + j] : 0.0;
            for (int l = 0; l < k; l++)
                s += (double)a[(size_t)i * lda + l] * b[(size_t)l * ldb + j];
            want[(size_t)i * n + j] = s;
        }
    fn(c, ldc, a, lda, b, ldb, m, n, k, alpha);
    double md = 0;
    int untouched = 1;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double d = fabs(c[(size_t)i * ldc + j] - want[(size_t)i * n + j]);
            md = d > md || d != d ? (d != d ? INFINITY : d) : md;
        }
        /* columns past n are left alone (NaN == NaN fails, so compare bits) */
        untouched &=
            !memcmp(c + (size_t)i * ldc + n, c0 + (size_t)i * ldc + n, sizeof(float) * (ldc - n));
    }
    CHECK_MSG(md <= tile_tol(k), "%s m %d n %d k %d alpha %g: max diff %.3g (tol %.3g)", name, m, n,
              k, alpha, md, tile_tol(k));
    CHECK_MSG(untouched, "%s m %d n %d k %d: wrote past column n", name, m, n, k);
    free(want);
    free(c0);
    free(c);
    free(b);
    free(a);
}

/* Runs check on a one-thread backend of every ISA this machine runs. */
static void for_each_isa(void (*check)(backend *b, const char *isa_name)) {
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_backend_isa_supported((cpu_isa)isa)) continue;
        backend *b = NULL;
        strata_err err = {0};
        CHECK(cpu_backend_create_isa(1, (cpu_isa)isa, &b, &err) == 0);
        if (!b) continue;
        check(b, cpu_backend_isa_name((cpu_isa)isa));
        backend_destroy(b);
    }
}

static void tile_gemm_sizes(backend *b, const char *name) {
    static const int ms[] = {1, 2, 3, 4, 5, 7, 8, 13, 64};
    static const int ns[] = {16, 32, 48, 80, 144};
    static const int ks[] = {0, 1, 5, 16, 67, 128};
    static const float alphas[] = {0.0f, 1.0f, -0.375f};
    cpu_tile_gemm_fn fn = cpu_tile_gemm_of(b);
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
                for (size_t ai = 0; ai < sizeof alphas / sizeof *alphas; ai++)
                    tile_check(fn, name, ms[mi], ns[ni], ks[ki], alphas[ai]);
}

static void test_tile_gemm(void) { for_each_isa(tile_gemm_sizes); }

/* a and c in one buffer, disjoint columns: c = [0, 16) += a = [16, 16 + k) · b, the way
 * the delta rule's chunk forms Ũ = U − W·S0 in place. */
static void tile_shared_buffer(backend *b, const char *name) {
    int m = 6, k = 9, ld = 16 + k;
    float *x = frand((size_t)m * ld), *w = frand((size_t)k * 16);
    double *want = dvec((size_t)m * 16);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < 16; j++) {
            double s = x[(size_t)i * ld + j];
            for (int l = 0; l < k; l++) s += (double)x[(size_t)i * ld + 16 + l] * w[l * 16 + j];
            want[i * 16 + j] = s;
        }
    cpu_tile_gemm_of(b)(x, ld, x + 16, ld, w, 16, m, 16, k, 1.0f);
    double md = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < 16; j++) md = fmax(md, fabs(x[(size_t)i * ld + j] - want[i * 16 + j]));
    CHECK_MSG(md <= tile_tol(k), "%s shared buffer: max diff %.3g", name, md);
    free(want);
    free(w);
    free(x);
}

static void test_tile_shared_buffer(void) { for_each_isa(tile_shared_buffer); }

int main(void) {
    RUN(test_tile_gemm);
    RUN(test_tile_shared_buffer);
    TEST_DONE();
}
