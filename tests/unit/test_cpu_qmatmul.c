/* test_cpu_qmatmul.c - the matmul against quantized weights (kernels/cpu/cpu_qmatmul.c and
 * its ISA kernels), through the backend's matmul op:
 *
 * - every ISA and thread count gives the scalar kernels' bits (cpu_qmatmul.h fixes the
 *   summation order), on awkward shapes: one block, odd block counts, n not a multiple of
 *   the 16-row task unit, m across the 4- and 8-row tiles and the decode / prefill switch;
 * - batch invariance: a row's output is the same alone (m = 1) as in a batch (m = 8, 13);
 * - against W dequantized to f32 times f32 x (computed in double) the error stays within
 *   what quantizing x allows: |x - x̂| <= d_x / 2 per element, so |Σ w (x - x̂)| <=
 *   Σ_blocks d_x / 2 · Σ |w|, plus the f32 rounding of the block products and sums;
 * - matmul_n and matmul_glu take the same path; weight_prepare and embed take block types. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/quant.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_internal.h"
#include "tests/cpu_test_util.h"
#include "tests/qweight_rand.h"
#include "tests/test.h"

static const dtype qtypes[] = {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q5_0, DTYPE_Q4_K, DTYPE_Q6_K};

/* A random [n, k] weight of type dt (qweight_rand.h); the caller frees data. */
static bk_weight rand_qweight(int n, int k, dtype dt, int raw) {
    return (bk_weight){
        .data = qweight_rand_rows(dt, n, k, raw), .dt = dt, .ndim = 2, .shape = {n, k}};
}

/* x with the values quantization meets: noise at a few scales, a zero block, a block
 * under the 1e-30 floor, a block dominated by one value. */
static float *rand_x(int m, int k) {
    float *x = fvec((size_t)m * k);
    for (int i = 0; i < m; i++)
        for (int l = 0; l < k; l++) {
            int blk = l / 32;
            float v = rng_f() * (blk % 3 == 0 ? 4.0f : blk % 3 == 1 ? 0.05f : 1.0f);
            if (blk == 1 && i % 2) v = 0.0f;
            if (blk == 2 && i % 3 == 1) v *= 1e-32f;
            x[(size_t)i * k + l] = v;
        }
    if (k >= 96) x[64] = 300.0f;
    return x;
}

/* out_ref[m, n] in double from the dequantized W, and the tolerance of each output. */
static void reference(double *want, double *tol, const float *x, const bk_weight *w, int m) {
    int n = (int)w->shape[0], k = (int)w->shape[1],
        xblk = dtype_block_elems(w->dt) == 256 ? 256 : 32;
    size_t rb = dtype_row_bytes(w->dt, k);
    float *wr = fvec((size_t)k), *mag = fvec((size_t)k);
    for (int j = 0; j < n; j++) {
        const void *wj = (const char *)w->data + (size_t)j * rb;
        quant_dequantize_row(wr, wj, w->dt, k);
        for (int l = 0; l < k; l++) mag[l] = fabsf(wr[l]);
        if (w->dt == DTYPE_Q4_K) /* the kernel sums d·sc·q and dmin·m apart: both magnitudes */
            for (int b = 0; b < k / 256; b++) {
                const quant_block_q4_k *q = (const quant_block_q4_k *)wj + b;
                uint8_t sc[8], mn[8];
                quant_q4_k_scales(q->scales, sc, mn);
                for (int l = 0; l < 256; l++)
                    mag[256 * b + l] += 2 * dtype_f16_to_f32(q->dmin) * (float)mn[l / 32];
            }
        for (int i = 0; i < m; i++) {
            const float *xi = x + (size_t)i * k;
            double s = 0, quant = 0, sum_mag = 0;
            for (int b = 0; b < k / xblk; b++) {
                double amax = 0, wabs = 0;
                for (int l = b * xblk; l < (b + 1) * xblk; l++) {
                    s += (double)xi[l] * wr[l];
                    amax = fmax(amax, fabs((double)xi[l]));
                    wabs += fabs((double)wr[l]);
                    sum_mag += (fabs((double)xi[l]) * 1.01 + amax / 254) * mag[l];
                }
                /* a block under the floor is quantized to zeros: all of it is error */
                quant += amax < 1e-30 ? amax * wabs : amax / 127 / 2 * 1.0001 * wabs;
            }
            want[(size_t)i * n + j] = s;
            /* f32 rounding: the block scale products, each product and the adds of the
             * lanes and blocks, a few ulps each of the summed magnitudes */
            tol[(size_t)i * n + j] = quant + (k / 32 + 16) * 2 * FLT_EPSILON * sum_mag + 1e-30;
        }
    }
    free(wr);
    free(mag);
}

static void check_shape(int m, int n, int k, dtype dt, int raw) {
    bk_weight w = rand_qweight(n, k, dt, raw);
    float *x = rand_x(m, k), *out0 = fvec((size_t)m * n), *out = fvec((size_t)m * n),
          *one = fvec((size_t)n);
    double *want = dvec((size_t)m * n), *tol = dvec((size_t)m * n);
    reference(want, tol, x, &w, m);
    be[0]->ops->matmul(be[0], out0, x, &w, m);
    int bad = -1;
    for (int i = 0; i < m * n && bad < 0; i++)
        if (!(fabs(out0[i] - want[i]) <= tol[i])) bad = i;
    CHECK_MSG(bad < 0, "%s m=%d n=%d k=%d%s: out[%d] = %.9g, f32 reference %.9g (tol %.3g)",
              dtype_name(dt), m, n, k, raw ? " raw" : "", bad, bad >= 0 ? out0[bad] : 0.0,
              bad >= 0 ? want[bad] : 0.0, bad >= 0 ? tol[bad] : 0.0);
    for (int bi = 0; bi < n_be; bi++) {
        be[bi]->ops->matmul(be[bi], out, x, &w, m);
        CHECK_SAME(out, out0, (size_t)m * n, "%s m=%d n=%d k=%d%s vs scalar", dtype_name(dt), m, n,
                   k, raw ? " raw" : "");
        for (int i = 0; i < m; i++) {
            be[bi]->ops->matmul(be[bi], one, x + (size_t)i * k, &w, 1);
            CHECK_SAME(one, out + (size_t)i * n, (size_t)n, "%s m=%d n=%d k=%d row %d alone",
                       dtype_name(dt), m, n, k, i);
        }
    }
    free((void *)w.data);
    free(x);
    free(out0);
    free(out);
    free(one);
    free(want);
    free(tol);
}

static void test_against_reference_and_isas(void) {
    /* k: one block, odd block counts, the widths the models have */
    static const int k32[] = {32, 96, 160, 352, 1024, 2048};
    static const int k256[] = {256, 768, 1536, 3072};
    static const int ms[] = {1, 3, 4, 5, 8, 13, 17};
    static const int ns[] = {1, 7, 33};
    for (int t = 0; t < (int)(sizeof qtypes / sizeof *qtypes); t++) {
        dtype dt = qtypes[t];
        int big = dtype_block_elems(dt) == 256;
        const int *ks = big ? k256 : k32;
        int nk = big ? 4 : 6;
        for (int ki = 0; ki < nk; ki++)
            for (int mi = 0; mi < 7; mi++) check_shape(ms[mi], ns[(ki + mi) % 3], ks[ki], dt, 0);
        check_shape(8, 19, ks[nk - 1], dt, 1);
        check_shape(2, 5, ks[1], dt, 1);
    }
}

/* Decode batches and a prefill block through the task split (n past one 16-row unit per
 * task and past the prefill's L2 chunk of W rows, m past the m-split threshold): m = 1
 * against m = 8 and m = 40, bit for bit. */
static void test_batch_invariance(void) {
    for (int t = 0; t < (int)(sizeof qtypes / sizeof *qtypes); t++) {
        int k = dtype_block_elems(qtypes[t]) == 256 ? 3072 : 2048, n = 301;
        bk_weight w = rand_qweight(n, k, qtypes[t], 0);
        float *x = rand_x(40, k), *all = fvec((size_t)40 * n), *one = fvec((size_t)n);
        for (int bi = 0; bi < n_be; bi++)
            for (int mm = 8; mm <= 40; mm += 32) {
                be[bi]->ops->matmul(be[bi], all, x, &w, mm);
                for (int i = 0; i < mm; i++) {
                    be[bi]->ops->matmul(be[bi], one, x + (size_t)i * k, &w, 1);
                    CHECK_SAME(one, all + (size_t)i * n, (size_t)n, "%s m=%d row %d",
                               dtype_name(qtypes[t]), mm, i);
                }
            }
        free((void *)w.data);
        free(x);
        free(all);
        free(one);
    }
}

/* matmul_n and matmul_glu go through the same matmul: equal bits. */
static void test_fused_paths(void) {
    int m = 3, k = 512, n = 24;
    bk_weight w1 = rand_qweight(n, k, DTYPE_Q4_K, 0), w2 = rand_qweight(n, k, DTYPE_Q8_0, 0);
    float *x = rand_x(m, k), *a = fvec((size_t)m * n), *b2 = fvec((size_t)m * n),
          *c = fvec((size_t)m * n), *d = fvec((size_t)m * n);
    float *g = fvec((size_t)m * k), *u = frand((size_t)m * k);
    for (int bi = 0; bi < n_be; bi++) {
        backend *b = be[bi];
        float *outs[2] = {a, b2};
        const bk_weight *ws[2] = {&w1, &w2};
        b->ops->matmul_n(b, outs, x, ws, 2, m);
        b->ops->matmul(b, c, x, &w1, m);
        b->ops->matmul(b, d, x, &w2, m);
        CHECK_SAME(a, c, (size_t)m * n, "matmul_n[0] %s", "Q4_K");
        CHECK_SAME(b2, d, (size_t)m * n, "matmul_n[1] %s", "Q8_0");
        memcpy(g, x, (size_t)m * k * 4);
        b->ops->matmul_glu(b, a, g, u, &w1, m, BK_ACT_SILU);
        memcpy(g, x, (size_t)m * k * 4);
        b->ops->silu_mul(b, g, g, u, m, k);
        b->ops->matmul(b, c, g, &w1, m);
        CHECK_SAME(a, c, (size_t)m * n, "matmul_glu %s", "Q4_K");
    }
    free((void *)w1.data);
    free((void *)w2.data);
    free(x);
    free(a);
    free(b2);
    free(c);
    free(d);
    free(g);
    free(u);
}

/* weight_prepare takes a block type only as whole blocks per row; embed dequantizes rows. */
static void test_prepare_and_embed(void) {
    backend *b = be[n_be - 1];
    strata_err err = {0};
    CHECK(backend_supports(b, BK_OP_MATMUL, DTYPE_Q4_K) &&
          backend_supports(b, BK_OP_EMBED, DTYPE_Q8_0));
    CHECK(!backend_supports(b, BK_OP_RMSNORM, DTYPE_Q4_K) &&
          backend_supports(b, BK_OP_RMSNORM, DTYPE_BF16));
    bk_weight w = rand_qweight(6, 512, DTYPE_Q6_K, 0);
    CHECK(b->ops->weight_prepare(b, &w, &err) == 0);
    bk_weight bad = w;
    bad.shape[1] = 500;
    CHECK(b->ops->weight_prepare(b, &bad, &err) == STRATA_EUNSUPPORTED);
    bad = w;
    bad.ndim = 1;
    CHECK(b->ops->weight_prepare(b, &bad, &err) == STRATA_EUNSUPPORTED);
    int32_t ids[3] = {5, 0, 5};
    float *out = fvec(3 * 512), *want = fvec(512);
    b->ops->embed(b, out, &w, ids, 3);
    quant_dequantize_row(want, (const char *)w.data + 5 * dtype_row_bytes(DTYPE_Q6_K, 512),
                         DTYPE_Q6_K, 512);
    int bi = n_be - 1;
    CHECK_SAME(out, want, 512, "embed row %d", 5);
    CHECK_SAME(out + 1024, want, 512, "embed row %d", 5);
    free((void *)w.data);
    free(out);
    free(want);
}

int main(void) {
    if (cpu_test_backends_open() != 0) return 1;
    RUN(test_against_reference_and_isas);
    RUN(test_batch_invariance);
    RUN(test_fused_paths);
    RUN(test_prepare_and_embed);
    cpu_test_backends_close();
    TEST_DONE();
}
