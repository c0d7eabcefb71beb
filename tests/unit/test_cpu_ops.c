/* test_cpu_ops.c - every op of the CPU backend (kernels/cpu) on every ISA this machine
 * runs, against plain double-precision references written here from backend.h and the
 * Qwen3.5 spec (§4-7), and every ISA against the scalar one.
 *
 * Sizes are awkward on purpose: 1, 3, 7, vector widths ± 1 (7, 9, 15, 17, 31, 33) and a
 * prime near 4096, so every tail path runs. Where inputs are chosen so that every product
 * and partial sum is exact in f32 (small multiples of powers of two), results must match
 * to the bit; elsewhere each tolerance says why it is that number. The sequence ops
 * (attention, conv1d, gated delta) are in test_cpu_mixers.c. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_internal.h"
#include "tests/cpu_test_util.h"
#include "tests/test.h"

/* ---- fixtures ---- */

/* A multiple of 1/den in [-lim/den, lim/den]: exact in f32, bf16 and f16 for small lim. */
static float rng_grid(int lim, float den) {
    return (float)((int)(rng_u32() % (2 * lim + 1)) - lim) / den;
}

/* A weight in dtype dt holding vals, which are rewritten to the values the weight really
 * holds (rounded to bf16 / f16), so references use exactly what the op reads. */
static bk_weight make_weight(float *vals, int64_t rows, int64_t cols, dtype dt) {
    size_t n = (size_t)(rows * cols);
    bk_weight w = {.dt = dt, .ndim = 2, .shape = {rows, cols}};
    void *buf = malloc(n * (dt == DTYPE_F32 ? 4 : 2) + 1);
    if (!buf) abort();
    for (size_t i = 0; i < n; i++) {
        if (dt == DTYPE_BF16) {
            uint16_t h = dtype_f32_to_bf16(vals[i]);
            ((uint16_t *)buf)[i] = h;
            vals[i] = dtype_bf16_to_f32(h);
        } else if (dt == DTYPE_F16) {
            uint16_t h = dtype_f32_to_f16(vals[i]);
            ((uint16_t *)buf)[i] = h;
            vals[i] = dtype_f16_to_f32(h);
        } else {
            ((float *)buf)[i] = vals[i];
        }
    }
    w.data = buf;
    return w;
}
static void free_weight(bk_weight *w) { free((void *)w->data); }

static const dtype all_dt[3] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16};

/* A step layout: n_seqs sequences of the given lengths, first positions and slots. */

/* ---- matmul ---- */

/* Grid inputs: x in multiples of 1/8 up to 1, w in multiples of 1/4 up to 1; every product
 * is a multiple of 1/32 and |sum| <= k, so for k < 2^19 every partial sum is exact in f32
 * and the result must be bit-exact in any summation order and any ISA. */
static void test_matmul_exact(void) {
    /* 8209: wider than L1 for f32 x, so m = 1 takes the 1 × 3 tile path, whose row groups
     * and masked k tail the n values below all exercise. */
    static const int ks[] = {1, 3, 7, 9, 15, 16, 17, 31, 33, 64, 4093, 8209};
    static const int ns[] = {1, 3, 4, 5, 7, 17, 33};
    static const int ms[] = {1, 2, 3, 4, 5, 7, 9};
    for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
            for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
                for (int di = 0; di < 3; di++) {
                    int k = ks[ki], n = ns[ni], m = ms[mi];
                    if (k == 4093 && (m > 3 || n > 7)) continue; /* keep the run short */
                    if (k == 8209 && m > 2) continue;
                    float *wv = fvec((size_t)n * k), *x = fvec((size_t)m * k),
                          *out = fvec((size_t)m * n);
                    for (size_t i = 0; i < (size_t)n * k; i++) wv[i] = rng_grid(4, 4.0f);
                    for (size_t i = 0; i < (size_t)m * k; i++) x[i] = rng_grid(8, 8.0f);
                    bk_weight w = make_weight(wv, n, k, all_dt[di]);
                    double *want = dvec((size_t)m * n);
                    for (int i = 0; i < m; i++)
                        for (int j = 0; j < n; j++)
                            for (int l = 0; l < k; l++)
                                want[i * n + j] += (double)x[i * k + l] * wv[j * k + l];
                    for (int bi = 0; bi < n_be; bi++) {
                        for (size_t i = 0; i < (size_t)m * n; i++) out[i] = NAN;
                        be[bi]->ops->matmul(be[bi], out, x, &w, m);
                        CHECK_CLOSE(out, want, (size_t)m * n, 0.0, "matmul exact m=%d n=%d k=%d %s",
                                    m, n, k, dtype_name(all_dt[di]));
                    }
                    free_weight(&w);
                    free(want);
                    free(out);
                    free(x);
                    free(wv);
                }
}

/* Real-valued inputs, and shapes large enough to cut into tasks and m-blocks. Tolerance:
 * f32 summation of k products errs by about sqrt(k)·2^-24·Σ|x·w| in practice and at most
 * k·2^-24·Σ|x·w|; 8·sqrt(k)·FLT_EPSILON·Σ|x·w| sits above what any order gives at these
 * sizes yet far below a dropped or doubled term (~Σ|x·w|/k). */
static void test_matmul_real(void) {
    static const int shapes[][3] = {{1, 300, 1024}, {3, 129, 4099}, {8, 64, 257},
                                    {37, 67, 130},  {260, 19, 33},  {12, 2, 515},
                                    {1, 50, 12301}, {2, 7, 9001},   {20, 203, 1000}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (int di = 0; di < 3; di++) {
            int m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
            float *wv = frand((size_t)n * k), *x = frand((size_t)m * k), *out = fvec((size_t)m * n);
            float *out0 = fvec((size_t)m * n);
            bk_weight w = make_weight(wv, n, k, all_dt[di]);
            double *want = dvec((size_t)m * n), *absum = dvec((size_t)m * n);
            double tolmax = 0;
            /* BF16 weights meet x rounded to bf16 (cpu_matmul.c): the reference does too. */
            float *xr = fvec((size_t)m * k);
            for (size_t i = 0; i < (size_t)m * k; i++)
                xr[i] =
                    all_dt[di] == DTYPE_BF16 ? dtype_bf16_to_f32(cpu_pack_bf16_one(x[i])) : x[i];
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    for (int l = 0; l < k; l++) {
                        double p = (double)xr[(size_t)i * k + l] * wv[(size_t)j * k + l];
                        want[(size_t)i * n + j] += p;
                        absum[(size_t)i * n + j] += fabs(p);
                    }
                    double t = 8 * sqrt((double)k) * FLT_EPSILON * absum[(size_t)i * n + j];
                    tolmax = t > tolmax ? t : tolmax;
                }
            for (int bi = 0; bi < n_be; bi++) {
                be[bi]->ops->matmul(be[bi], out, x, &w, m);
                CHECK_CLOSE(out, want, (size_t)m * n, tolmax, "matmul m=%d n=%d k=%d %s", m, n, k,
                            dtype_name(all_dt[di]));
                if (bi == 0) memcpy(out0, out, (size_t)m * n * sizeof(float));
                /* ISA vs scalar (backend 0): both within the bound of the exact value. */
                double *o0 = dvec((size_t)m * n);
                for (size_t i = 0; i < (size_t)m * n; i++) o0[i] = out0[i];
                CHECK_CLOSE(out, o0, (size_t)m * n, 2 * tolmax,
                            "matmul vs scalar m=%d n=%d k=%d %s", m, n, k, dtype_name(all_dt[di]));
                free(o0);
            }
            free_weight(&w);
            free(xr);
            free(absum);
            free(want);
            free(out0);
            free(out);
            free(x);
            free(wv);
        }
}

/* ---- row ops ---- */

static void test_embed(void) {
    int rows = 11, n = 17;
    for (int di = 0; di < 3; di++) {
        float *tv = frand((size_t)rows * n);
        bk_weight t = make_weight(tv, rows, n, all_dt[di]);
        int32_t ids[5] = {10, 0, 3, 3, 7};
        double *want = dvec(5 * (size_t)n);
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < n; j++) want[i * n + j] = tv[ids[i] * n + j];
        float *out = fvec(5 * (size_t)n);
        for (int bi = 0; bi < n_be; bi++) {
            be[bi]->ops->embed(be[bi], out, &t, ids, 5);
            CHECK_CLOSE(out, want, 5 * (size_t)n, 0.0, "embed %s",
                        dtype_name(all_dt[di])); /* a copy: exact */
        }
        free(out);
        free(want);
        free_weight(&t);
        free(tv);
    }
}

/* Norms: f32 sums of n squares err by ~n·2^-24 relative at most; with n <= 4099 the 2e-5
 * relative tolerance (scaled by the row's output magnitude, ~1) covers that and the
 * rsqrt rounding, while any wrong weight mode or missing element is off by O(1). */
static void test_rmsnorm(void) {
    static const int ns[] = {1, 3, 7, 16, 17, 256, 4099};
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
        for (int mode = 0; mode < 3; mode++)
            for (int di = 0; di < 2; di++) {
                int n = ns[ni], m = 5, ld = n + 3;
                float *x = frand((size_t)m * ld), *wv = frand((size_t)n),
                      *out = fvec((size_t)m * ld);
                bk_weight w = make_weight(wv, 1, n, all_dt[di]);
                double *want = dvec((size_t)m * ld);
                for (int i = 0; i < m; i++) {
                    double ss = 0;
                    for (int j = 0; j < n; j++) ss += (double)x[i * ld + j] * x[i * ld + j];
                    double r = 1.0 / sqrt(ss / n + 1e-6);
                    for (int j = 0; j < ld; j++) {
                        double g = mode == BK_NORM_PLAIN      ? wv[j % n]
                                   : mode == BK_NORM_ONE_PLUS ? 1.0 + wv[j % n]
                                                              : 1.0;
                        want[i * ld + j] = j < n ? x[i * ld + j] * r * g : 0.0;
                    }
                }
                for (int bi = 0; bi < n_be; bi++) {
                    memset(out, 0, (size_t)m * ld * sizeof(float));
                    be[bi]->ops->rmsnorm(be[bi], out, x, mode == BK_NORM_NONE ? NULL : &w, m, n, ld,
                                         1e-6f, mode);
                    /* padding columns (j >= n) are not written: they stay 0 */
                    CHECK_CLOSE(out, want, (size_t)m * ld, 2e-5 * 4, "rmsnorm n=%d mode=%d", n,
                                mode);
                    /* in place */
                    float *y = fvec((size_t)m * ld);
                    memcpy(y, x, (size_t)m * ld * sizeof(float));
                    be[bi]->ops->rmsnorm(be[bi], y, y, mode == BK_NORM_NONE ? NULL : &w, m, n, ld,
                                         1e-6f, mode);
                    for (int i = 0; i < m; i++) /* in place, padding keeps x */
                        for (int j = n; j < ld; j++) want[i * ld + j] = x[i * ld + j];
                    CHECK_CLOSE(y, want, (size_t)m * ld, 2e-5 * 4, "rmsnorm in place n=%d mode=%d",
                                n, mode);
                    for (int i = 0; i < m; i++)
                        for (int j = n; j < ld; j++) want[i * ld + j] = 0.0;
                    free(y);
                }
                free(want);
                free_weight(&w);
                free(out);
                free(wv);
                free(x);
            }
}

/* The fused residual step is the op sequence it replaces, bit for bit: rmsnorm of delta
 * (when normed), add, scale by a 1-element weight (odd variants), rmsnorm into xn (when
 * wanted), on every ISA and thread count. */
static void test_residual(void) {
    static const int ns[] = {1, 17, 256, 4099};
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
        for (int variant = 0; variant < 6; variant++) {
            int n = ns[ni], m = 3, di = variant & 1;
            int dmode = variant < 2 ? -1 : variant < 4 ? BK_NORM_PLAIN : BK_NORM_ONE_PLUS;
            int nmode = variant == 4 ? -1 : variant & 1 ? BK_NORM_ONE_PLUS : BK_NORM_PLAIN;
            size_t N = (size_t)m * n;
            float *x0 = frand(N), *d0 = frand(N), *wd = frand((size_t)n), *wn = frand((size_t)n);
            float sv = 1.7f;
            bk_weight Wd = make_weight(wd, 1, n, all_dt[di]),
                      Wn = make_weight(wn, 1, n, all_dt[di]),
                      Ws = make_weight(&sv, 1, 1, all_dt[di]);
            const bk_weight *S = variant & 1 ? &Ws : NULL;
            for (int bi = 0; bi < n_be; bi++) {
                backend *b = be[bi];
                float *x = fvec(N), *d = fvec(N), *xn = fvec(N), *rx = fvec(N), *rd = fvec(N),
                      *rxn = fvec(N);
                memcpy(x, x0, N * 4), memcpy(d, d0, N * 4), memcpy(rx, x0, N * 4);
                memcpy(rd, d0, N * 4);
                b->ops->residual(b, x, nmode < 0 ? NULL : xn, d, dmode < 0 ? NULL : &Wd, dmode, S,
                                 &Wn, nmode, m, n, 1e-6f);
                if (dmode >= 0) b->ops->rmsnorm(b, rd, rd, &Wd, m, n, n, 1e-6f, dmode);
                b->ops->add(b, rx, rx, rd, N);
                if (S) b->ops->scale(b, rx, 1.0f, S, N);
                if (nmode >= 0) b->ops->rmsnorm(b, rxn, rx, &Wn, m, n, n, 1e-6f, nmode);
                CHECK_SAME(x, rx, N, "residual x n=%d variant %d", n, variant);
                if (nmode >= 0) CHECK_SAME(xn, rxn, N, "residual xn n=%d variant %d", n, variant);
                CHECK_SAME(d, d0, N, "residual left delta n=%d variant %d", n, variant);
                free(x), free(d), free(xn), free(rx), free(rd), free(rxn);
            }
            free_weight(&Wd), free_weight(&Wn), free_weight(&Ws);
            free(x0), free(d0), free(wd), free(wn);
        }
}

static void test_rmsnorm_gated(void) {
    static const int ns[] = {1, 3, 17, 128};
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        int n = ns[ni], m = 6;
        float *x = frand((size_t)m * n), *z = frand((size_t)m * n), *wv = frand((size_t)n);
        for (size_t i = 0; i < (size_t)m * n; i++) z[i] *= 6.0f;
        bk_weight w = make_weight(wv, 1, n, DTYPE_BF16);
        double *want = dvec((size_t)m * n);
        for (int i = 0; i < m; i++) {
            double ss = 0;
            for (int j = 0; j < n; j++) ss += (double)x[i * n + j] * x[i * n + j];
            double r = 1.0 / sqrt(ss / n + 1e-6);
            for (int j = 0; j < n; j++) {
                double zz = z[i * n + j];
                want[i * n + j] = x[i * n + j] * r * wv[j] * (zz / (1.0 + exp(-zz)));
            }
        }
        for (int bi = 0; bi < n_be; bi++) {
            float *out = fvec((size_t)m * n);
            memcpy(out, x, (size_t)m * n * sizeof(float));
            be[bi]->ops->rmsnorm_gated(be[bi], out, out, z, &w, m, n, 1e-6f); /* aliasing allowed */
            /* outputs up to ~|x̂|·|w|·6; 2e-5 relative of that (see test_rmsnorm) */
            CHECK_CLOSE(out, want, (size_t)m * n, 2e-5 * 6 * 4, "rmsnorm_gated n=%d", n);
            free(out);
        }
        free(want);
        free_weight(&w);
        free(wv);
        free(z);
        free(x);
    }
}

static void test_l2norm(void) {
    static const int ns[] = {1, 3, 17, 128};
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        int n = ns[ni], m = 4, ld = 2 * n + 1;
        float *x = frand((size_t)m * ld);
        double *want = dvec((size_t)m * ld);
        float scale = 0.0883883476f;
        for (int i = 0; i < m; i++) {
            double ss = 0;
            for (int j = 0; j < n; j++) ss += (double)x[i * ld + j] * x[i * ld + j];
            for (int j = 0; j < ld; j++)
                want[i * ld + j] = j < n ? x[i * ld + j] * scale / sqrt(ss + 1e-6) : x[i * ld + j];
        }
        for (int bi = 0; bi < n_be; bi++) {
            float *y = fvec((size_t)m * ld);
            memcpy(y, x, (size_t)m * ld * sizeof(float));
            be[bi]->ops->l2norm(be[bi], y, m, n, ld, 1, 1e-6f, scale);
            CHECK_CLOSE(y, want, (size_t)m * ld, 2e-5 * 4 * scale + 1e-9, "l2norm n=%d", n);
            free(y);
        }
        free(want);
        free(x);
    }
    /* heads inside token rows (Qwen3.5's q heads in its conv output): 3 tokens of 4 heads of
     * 5, token rows 23 apart; the 3 values after the heads are left alone */
    {
        enum { TOK = 3, G = 4, N = 5, LD = 23 };
        float *x = frand(TOK * LD), *y = fvec(TOK * LD);
        double want[TOK * LD];
        for (int i = 0; i < TOK * LD; i++) want[i] = x[i];
        for (int r = 0; r < TOK * G; r++) {
            int at = r / G * LD + r % G * N;
            double ss = 0;
            for (int j = 0; j < N; j++) ss += (double)x[at + j] * x[at + j];
            for (int j = 0; j < N; j++) want[at + j] = x[at + j] * 0.5 / sqrt(ss + 1e-6);
        }
        for (int bi = 0; bi < n_be; bi++) {
            memcpy(y, x, sizeof(float) * TOK * LD);
            be[bi]->ops->l2norm(be[bi], y, TOK * G, N, LD, G, 1e-6f, 0.5f);
            CHECK_CLOSE(y, want, (size_t)TOK * LD, 2e-5, "l2norm of heads in token rows (%d)", G);
        }
        free(x), free(y);
    }
    /* eps inside the root: an all-zero row stays finite (0), not NaN */
    float z[3] = {0, 0, 0};
    for (int bi = 0; bi < n_be; bi++) {
        be[bi]->ops->l2norm(be[bi], z, 1, 3, 3, 1, 1e-6f, 1.0f);
        CHECK(z[0] == 0.0f && z[1] == 0.0f && z[2] == 0.0f);
    }
}

/* Elementwise ops: one or two roundings of f32 math (expf within a few ulp), so 1e-6
 * relative to values of magnitude <= 6 covers them. */
static void test_elementwise(void) {
    static const size_t ns[] = {1, 3, 7, 17, 100003};
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        size_t n = ns[ni];
        float *a = frand(n), *g = frand(n), *out = fvec(n);
        for (size_t i = 0; i < n; i++) g[i] *= 8.0f;
        double *want = dvec(n);
        for (int bi = 0; bi < n_be; bi++) {
            for (size_t i = 0; i < n; i++) want[i] = (double)a[i] + g[i];
            be[bi]->ops->add(be[bi], out, a, g, n);
            CHECK_CLOSE(out, want, n, 1e-6 * 8, "add n=%zu", n);
            for (size_t i = 0; i < n; i++) want[i] = g[i] / (1.0 + exp(-(double)g[i])) * a[i];
            be[bi]->ops->silu_mul(be[bi], out, g, a, 1, (int)n);
            CHECK_CLOSE(out, want, n, 1e-6 * 8, "silu_mul n=%zu", n);
            memcpy(out, a, n * sizeof(float));
            for (size_t i = 0; i < n; i++) want[i] = a[i] / (1.0 + exp(-(double)g[i]));
            be[bi]->ops->sigmoid_mul(be[bi], out, g, n);
            CHECK_CLOSE(out, want, n, 1e-6, "sigmoid_mul n=%zu", n);
        }
        free(want);
        free(out);
        free(g);
        free(a);
    }
    /* extremes: the vector exp clamps its input; results must still be the limits
     * (silu(-100) = -0 up to 1e-35, sigmoid(100) = 1), never NaN or inf */
    {
        float ext[19] = {-1000, -100, -88.5f, -87.5f, -87, -20,   -1e-3f, -0.0f, 0,   1e-30f,
                         1e-3f, 1,    20,     80,     87,  88.5f, 89,     100,   1000};
        double ws[19], wsg[19];
        for (int i = 0; i < 19; i++) {
            ws[i] = ext[i] / (1.0 + exp(-(double)ext[i]));
            wsg[i] = 1.0 / (1.0 + exp(-(double)ext[i]));
        }
        for (int bi = 0; bi < n_be; bi++) {
            float o[19], one[19];
            for (int i = 0; i < 19; i++) one[i] = 1.0f;
            be[bi]->ops->silu_mul(be[bi], o, ext, one, 1, 19);
            /* relative 1e-6 of the value (|x| up to 1000) */
            for (int i = 0; i < 19; i++)
                CHECK_MSG(fabs(o[i] - ws[i]) <= 1e-6 * fabs(ws[i]) + 1e-30,
                          "%s silu(%g) = %g, want %g", be_name[bi], ext[i], o[i], ws[i]);
            be[bi]->ops->sigmoid_mul(be[bi], one, ext, 19);
            for (int i = 0; i < 19; i++)
                CHECK_MSG(fabs(one[i] - wsg[i]) <= 1e-6 * wsg[i] + 1e-30,
                          "%s sigmoid(%g) = %g, want %g", be_name[bi], ext[i], one[i], wsg[i]);
        }
    }
    /* silu_mul with rows, aliasing gate */
    int m = 3, n = 9;
    float *gate = frand(27), *up = frand(27);
    double want[27];
    for (int i = 0; i < 27; i++) want[i] = gate[i] / (1.0 + exp(-(double)gate[i])) * up[i];
    for (int bi = 0; bi < n_be; bi++) {
        float tmp[27];
        memcpy(tmp, gate, sizeof tmp);
        be[bi]->ops->silu_mul(be[bi], tmp, tmp, up, m, n);
        CHECK_CLOSE(tmp, want, 27, 1e-6, "silu_mul in place%s", "");
    }
    free(up);
    free(gate);
}

static void test_split_gather(void) {
    int rows = 5, half = 7;
    float *in = frand((size_t)rows * 2 * half), *a = fvec((size_t)rows * half),
          *g = fvec((size_t)rows * half);
    double *wa = dvec((size_t)rows * half), *wg = dvec((size_t)rows * half);
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < half; j++) {
            wa[r * half + j] = in[r * 2 * half + j];
            wg[r * half + j] = in[r * 2 * half + half + j];
        }
    int32_t idx[4] = {4, 0, 4, 2};
    float *gout = fvec(4 * 14);
    double gwant[4 * 14];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 14; j++) gwant[i * 14 + j] = in[idx[i] * 14 + j];
    for (int bi = 0; bi < n_be; bi++) {
        be[bi]->ops->split_halves(be[bi], a, g, in, rows, half);
        CHECK_CLOSE(a, wa, (size_t)rows * half, 0.0, "split a%s", "");
        CHECK_CLOSE(g, wg, (size_t)rows * half, 0.0, "split g%s", "");
        be[bi]->ops->gather_rows(be[bi], gout, in, idx, 4, 14);
        CHECK_CLOSE(gout, gwant, 4 * 14, 0.0, "gather_rows%s", "");
    }
    free(gout);
    free(wg);
    free(wa);
    free(g);
    free(a);
    free(in);
}

/* RoPE: the angle is the f32 product pos·inv_freq (as in torch); cos/sin in double here
 * vs cosf/sinf there (<= 1 ulp) on |x| <= 1: 4e-6 covers two products and a sum. */
static void test_rope(void) {
    int heads = 3, hd = 20, rot = 8, ld = heads * hd + 5;
    int len[2] = {3, 2}, pos0[2] = {0, 1000}, slot[2] = {0, 1};
    tbatch tb;
    make_batch(&tb, 2, len, pos0, slot);
    int m = tb.b.n_tokens;
    float inv_freq[4];
    for (int j = 0; j < 4; j++) inv_freq[j] = powf(10000.0f, -2.0f * j / rot);
    float *x = frand((size_t)m * ld);
    double *want = dvec((size_t)m * ld);
    for (int i = 0; i < m; i++)
        for (int c = 0; c < ld; c++) want[i * ld + c] = x[i * ld + c];
    for (int i = 0; i < m; i++)
        for (int h = 0; h < heads; h++)
            for (int j = 0; j < rot / 2; j++) {
                double a = (double)((float)tb.tok_pos[i] * inv_freq[j]);
                double x0 = x[i * ld + h * hd + j], x1 = x[i * ld + h * hd + j + rot / 2];
                want[i * ld + h * hd + j] = x0 * cos(a) - x1 * sin(a);
                want[i * ld + h * hd + j + rot / 2] = x1 * cos(a) + x0 * sin(a);
            }
    for (int bi = 0; bi < n_be; bi++) {
        float *y = fvec((size_t)m * ld);
        memcpy(y, x, (size_t)m * ld * sizeof(float));
        be[bi]->ops->rope(be[bi], y, &tb.b, inv_freq, heads, hd, rot, ld);
        CHECK_CLOSE(y, want, (size_t)m * ld, 4e-6, "rope%s", "");
        free(y);
    }
    free(want);
    free(x);
}

static void test_gdn_gates(void) {
    int m = 3, Hv = 5;
    float a[15], bb[15], alog[5], dtb[5];
    for (int i = 0; i < 15; i++) {
        a[i] = rng_f() * 10.0f;
        bb[i] = rng_f() * 5.0f;
    }
    a[2] = 30.0f; /* softplus threshold: returns x */
    for (int h = 0; h < 5; h++) {
        alog[h] = rng_f();
        dtb[h] = rng_f();
    }
    bk_weight A = make_weight(alog, 1, 5, DTYPE_BF16), D = make_weight(dtb, 1, 5, DTYPE_F32);
    double wg[15], wb[15];
    for (int t = 0; t < m; t++)
        for (int h = 0; h < Hv; h++) {
            double x = (double)a[t * Hv + h] + dtb[h];
            double sp = x > 20 ? x : log1p(exp(x));
            wg[t * Hv + h] = -exp((double)alog[h]) * sp;
            wb[t * Hv + h] = 1.0 / (1.0 + exp(-(double)bb[t * Hv + h]));
        }
    for (int bi = 0; bi < n_be; bi++) {
        float g[15], beta[15];
        be[bi]->ops->gdn_gates(be[bi], g, beta, a, bb, &A, &D, m, Hv);
        /* |g| up to ~30·e: 1e-6 relative of 100 */
        CHECK_CLOSE(g, wg, 15, 1e-4, "gdn g%s", "");
        CHECK_CLOSE(beta, wb, 15, 1e-6, "gdn beta%s", "");
    }
    free_weight(&A);
    free_weight(&D);
}

/* The bandwidth probe's streaming sum, per ISA table: f32 sums of n terms of |x| < 1 err
 * by at most n·2^-24·Σ|x|; a dropped tail element is off by up to 1. */
static void test_kernel_sum(void) {
    static const cpu_kernels *const tables[CPU_ISA_COUNT] = {&cpu_kernels_scalar, &cpu_kernels_avx2,
                                                             &cpu_kernels_avx512};
    static const size_t ns[] = {1, 3, 7, 31, 63, 64, 65, 129, 100003};
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_backend_isa_supported((cpu_isa)isa)) continue;
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
            size_t n = ns[ni];
            float *x = frand(n);
            for (size_t i = 0; i < n; i++)
                x[i] = 0.5f + 0.5f * x[i]; /* positive: a missing term cannot cancel out */
            double want = 0, abs = 0;
            for (size_t i = 0; i < n; i++) {
                want += x[i];
                abs += fabs(x[i]);
            }
            double got = tables[isa]->sum(x, n);
            CHECK_MSG(fabs(got - want) <= n * ldexp(1.0, -24) * abs, "%s sum n=%zu: %.9g vs %.9g",
                      tables[isa]->name, n, got, want);
            free(x);
        }
    }
}

/* ---- create, memory ops ---- */

static void test_create_and_memory(void) {
    strata_err err = {0};
    backend *b = NULL;
    CHECK_EQ_INT(backend_cpu_create(0, &b, &err), 0);
    if (!b) return;
    CHECK(b->threads >= 1);
    CHECK(strcmp(b->ops->name, "cpu") == 0);
    /* the best ISA this machine supports is the one picked */
    int best = CPU_ISA_SCALAR;
    for (int i = 0; i < CPU_ISA_COUNT; i++)
        if (cpu_backend_isa_supported((cpu_isa)i)) best = i;
    CHECK_EQ_INT(cpu_backend_isa(b), best);
    float *p = b->ops->alloc(b, 1000 * sizeof(float));
    CHECK(p != NULL && ((uintptr_t)p & 63) == 0);
    int zero = 1;
    for (int i = 0; p && i < 1000; i++) zero &= p[i] == 0.0f;
    CHECK(zero);
    float src[4] = {1, 2, 3, 4}, dst[4] = {0};
    b->ops->upload(b, p, src, sizeof src);
    b->ops->download(b, dst, p, sizeof dst);
    CHECK(memcmp(src, dst, sizeof src) == 0);
    b->ops->zero(b, p, sizeof src);
    b->ops->download(b, dst, p, sizeof dst);
    CHECK(dst[0] == 0 && dst[3] == 0);
    b->ops->free(b, p);
    bk_weight w = {.data = src, .dt = DTYPE_I32, .ndim = 1, .shape = {4}};
    CHECK_EQ_INT(b->ops->weight_prepare(b, &w, &err), STRATA_EUNSUPPORTED);
    w.dt = DTYPE_BF16;
    CHECK_EQ_INT(b->ops->weight_prepare(b, &w, &err), 0);
    CHECK(w.data == src); /* used in place */
    b->ops->weight_release(b, &w);
    /* the bandwidth probe: wired, and a plausible figure (any machine reads > 0.1 GB/s) */
    CHECK(b->ops->read_bandwidth == cpu_membw_read_gbs);
    double gbs = b->ops->read_bandwidth(b, (size_t)64 << 20);
    CHECK_MSG(gbs > 0.1 && gbs < 1e5, "read bandwidth %g GB/s", gbs);
    backend_destroy(b);
    backend_destroy(NULL);

    backend *untouched = (backend *)&err;
    CHECK_EQ_INT(backend_cpu_create(-1, &untouched, &err), STRATA_EINVALID);
    CHECK(untouched == (backend *)&err);
}

int main(void) {
    if (cpu_test_backends_open()) return 1;
    RUN(test_create_and_memory);
    RUN(test_kernel_sum);
    RUN(test_matmul_exact);
    RUN(test_matmul_real);
    RUN(test_embed);
    RUN(test_rmsnorm);
    RUN(test_residual);
    RUN(test_rmsnorm_gated);
    RUN(test_l2norm);
    RUN(test_elementwise);
    RUN(test_split_gather);
    RUN(test_rope);
    RUN(test_gdn_gates);
    cpu_test_backends_close();
    TEST_DONE();
}
