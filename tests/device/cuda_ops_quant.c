/* cuda_ops_quant.c - the CUDA ops on quantized weights (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K: issue 20
 * part 4) against the CPU: matmul, matmul_n and matmul_glu against the f32 matmul of the
 * same weights dequantized (quant_dequantize_row), batch invariance, embed / embed_fed of a
 * quantized table bit for bit, which ops the backend says take block weights, and the
 * decode GEMVs' bandwidth at Qwen3.5-2B's shapes. Part of test_cuda_ops. Test-only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/clock.h"
#include "engine/base/quant.h"
#include "tests/device/cuda_ops_test.h"

/* The CUDA kernel multiplies f32 x by the dequantized weights (every dequantized value is
 * exact or rounded once, cuda_quant.cuh, so they are the reference's values) and sums in f32
 * in another order than the CPU's f32 matmul: per 16- or 32-element sub-block first, with
 * the scale applied to the sum (and Q4_K's min to the sum of x), then across a lane's units
 * and the warp. Either order errs by a few 2^-24 of the partial sums, which here (weights
 * and x uniform, k <= 33024) are no larger than a few times the result's scale: measured worst
 * 9.4e-7 of max(1, max |ref|) over every format and shape (k 33024; 5.5e-7 at the models'
 * largest k, 12288). 2e-6 allows ~2x that at k 33024; a wrong
 * nibble, bit pair, scale, min or sub-block moves outputs by 1e-2 of that scale or more. */
#define TOL_QMM 2e-6

static const dtype qdts[] = {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q5_0, DTYPE_Q4_K, DTYPE_Q6_K};
#define N_QDTS (int)(sizeof qdts / sizeof qdts[0])

/* A weight [n, k] of random values quantized with the project's quantizer (host and device
 * copies), and its dequantized values as an F32 host weight (*ref, data caller frees). */
static tw qmake(dtype dt, int n, int k, float amp, bk_weight *ref) {
    size_t rb = dtype_row_bytes(dt, k);
    float *row = hvec((size_t)k), *deq = hvec((size_t)n * k);
    tw w;
    w.buf = malloc((size_t)n * rb);
    if (!w.buf) abort();
    for (int r = 0; r < n; r++) {
        for (int e = 0; e < k; e++) row[e] = rnd() * amp;
        if (quant_quantize_row((char *)w.buf + (size_t)r * rb, row, dt, k) ||
            quant_dequantize_row(deq + (size_t)r * k, (char *)w.buf + (size_t)r * rb, dt, k))
            abort();
    }
    free(row);
    w.h = (bk_weight){w.buf, dt, 2, {n, k, 0, 0}};
    w.d = w.h;
    if (gpu->ops->weight_prepare(gpu, &w.d, &err)) {
        fprintf(stderr, "weight_prepare %s: %s\n", dtype_name(dt), err.msg);
        exit(1);
    }
    *ref = (bk_weight){deq, DTYPE_F32, 2, {n, k, 0, 0}};
    return w;
}

/* One shape of one format at several m: against the dequantized f32 product, and each row
 * of x alone (m 1) giving the same bits as inside the batch. */
static void qmatmul_shape(dtype dt, int n, int k, int unaligned) {
    const int ms[] = {1, 2, 3, 8, 9, 20};
    bk_weight ref_w;
    tw w = qmake(dt, n, k, 0.05f, &ref_w);
    int mmax = 20;
    size_t xs = (size_t)mmax * k + 1;
    float *x = hrand(xs, 1.0f), *dx = gput(x, xs), *one = NULL;
    float *ref = hvec((size_t)mmax * n), *dout = gput(NULL, (size_t)mmax * n);
    const float *hx = x + unaligned;
    const float *gx = dx + unaligned;
    for (int mi = 0; mi < 6; mi++) {
        int m = ms[mi];
        if (unaligned && m != 1 && m != 9) continue;
        cpu->ops->matmul(cpu, ref, hx, &ref_w, m);
        gpu->ops->matmul(gpu, dout, gx, &w.d, m);
        float *got = gget(dout, (size_t)m * n);
        char shape[80];
        snprintf(shape, sizeof shape, "%s W [%d,%d] m %d%s", dtype_name(dt), n, k, m,
                 unaligned ? " x+1" : "");
        report("qmatmul", shape, got, ref, (size_t)m * n, TOL_QMM);
        if (m == 1) {
            one = got;
            continue;
        }
        /* batch invariance: row 0 of this batch is the m = 1 result, bit for bit */
        snprintf(shape, sizeof shape, "%s W [%d,%d] row 0 of m %d = m 1", dtype_name(dt), n, k, m);
        report("qmatmul batch", shape, got, one, (size_t)n, 0);
        free(got);
    }
    /* the last row of the largest batch alone */
    if (!unaligned) {
        float *big = gget(dout, (size_t)mmax * n);
        gpu->ops->matmul(gpu, dout, gx + (size_t)(mmax - 1) * k, &w.d, 1);
        float *got = gget(dout, (size_t)n);
        char shape[80];
        snprintf(shape, sizeof shape, "%s W [%d,%d] row 19 of m 20 = m 1", dtype_name(dt), n, k);
        report("qmatmul batch", shape, got, big + (size_t)(mmax - 1) * n, (size_t)n, 0);
        free(big), free(got);
    }
    free(one), free(x), free(ref), free((void *)ref_w.data), gfree(dx), gfree(dout), wfree(&w);
}

/* Each format: a large row count, rows of k that are not a multiple of 256 (32-blocks: 65
 * blocks, so a partial last tile of 32 units) or not a multiple of 8 blocks (K types: 9
 * blocks, a partial tile), n not a multiple of the 8 warps of a block, and a one-block row. */
static void test_qmatmul(void) {
    for (int di = 0; di < N_QDTS; di++) {
        dtype dt = qdts[di];
        int kb = dtype_block_elems(dt);
        qmatmul_shape(dt, 1000, 1024, 0);
        qmatmul_shape(dt, 77, kb == 32 ? 2080 : 2304, 0);
        qmatmul_shape(dt, 13, kb, 0);
        qmatmul_shape(dt, 1000, 1024, 1); /* x not 16-byte aligned: the scalar loads */
    }
    /* cuda_qgemv.cu's splits (Q8_0, Q4_K): rows of 3,332 bytes, so a block's offset in its
     * 16-byte chunk changes from row to row (Nemotron-H's k); few long rows, parts of 2
     * and 8 warps a row, x in registers at m 1 and 2 and read from L1 above */
    qmatmul_shape(DTYPE_Q8_0, 300, 3136, 0);
    for (int di = 0; di < 2; di++) {
        qmatmul_shape(di ? DTYPE_Q4_K : DTYPE_Q8_0, 40, 4096, 0);
        qmatmul_shape(di ? DTYPE_Q4_K : DTYPE_Q8_0, 24, 12288, 0);
        /* rows past what 8 warps of 4 items a lane hold: cuda_qmatmul.cu's kernel */
        qmatmul_shape(di ? DTYPE_Q4_K : DTYPE_Q8_0, 8, 33024, 0);
    }
}

/* matmul_n: several quantized weights of one x in one launch (segment edges inside a block of
 * 8 rows), against each weight's dequantized product; matmul_glu's unfused path. */
static void test_qmatmul_n(void) {
    const int ns[] = {300, 17, 64};
    const int ms[] = {1, 4, 9};
    int k = 512;
    for (int di = 0; di < N_QDTS; di++)
        for (int mi = 0; mi < 3; mi++) {
            int m = ms[mi];
            tw w[3];
            bk_weight rw[3];
            const bk_weight *dw[3];
            float *dout[3];
            float *x = hrand((size_t)m * k, 1.0f), *dx = gput(x, (size_t)m * k);
            for (int j = 0; j < 3; j++) {
                w[j] = qmake(qdts[di], ns[j], k, 0.05f, &rw[j]);
                dw[j] = &w[j].d;
                dout[j] = gput(NULL, (size_t)m * ns[j]);
            }
            gpu->ops->matmul_n(gpu, dout, dx, dw, 3, m);
            for (int j = 0; j < 3; j++) {
                float *ref = hvec((size_t)m * ns[j]), *got = gget(dout[j], (size_t)m * ns[j]);
                cpu->ops->matmul(cpu, ref, x, &rw[j], m);
                char shape[80];
                snprintf(shape, sizeof shape, "%s 3 weights, #%d [%d,%d] m %d",
                         dtype_name(qdts[di]), j, ns[j], k, m);
                report("qmatmul_n", shape, got, ref, (size_t)m * ns[j], TOL_QMM);
                free(ref), free(got), gfree(dout[j]), wfree(&w[j]), free((void *)rw[j].data);
            }
            free(x), gfree(dx);
        }
    /* matmul_glu of a quantized down projection: silu into g, then the matmul */
    for (int mi = 0; mi < 3; mi++) {
        int m = ms[mi], n = 200, kk = 768;
        bk_weight rw;
        tw w = qmake(DTYPE_Q4_K, n, kk, 0.05f, &rw);
        size_t e = (size_t)m * kk;
        float *g = hrand(e, 3.0f), *u = hrand(e, 1.0f), *ref = hvec((size_t)m * n);
        float *dg = gput(g, e), *du = gput(u, e), *dout = gput(NULL, (size_t)m * n);
        cpu->ops->silu_mul(cpu, g, g, u, m, kk);
        cpu->ops->matmul(cpu, ref, g, &rw, m);
        gpu->ops->matmul_glu(gpu, dout, dg, du, &w.d, m, BK_ACT_SILU);
        float *got = gget(dout, (size_t)m * n);
        char shape[80];
        snprintf(shape, sizeof shape, "silu Q4_K W [%d,%d] m %d", n, kk, m);
        report("qmatmul_glu", shape, got, ref, (size_t)m * n, TOL_QMM);
        free(g), free(u), free(ref), free(got), gfree(dg), gfree(du), gfree(dout), wfree(&w);
        free((void *)rw.data);
    }
}

/* embed and embed_fed of a quantized table: the CPU dequantizes the rows
 * (quant_dequantize_row); the device's per-element decode must give the same bits. */
static void test_qembed(void) {
    for (int di = 0; di < N_QDTS; di++) {
        dtype dt = qdts[di];
        int n = dtype_block_elems(dt) == 32 ? 96 : 512;
        bk_weight rw;
        tw t = qmake(dt, 300, n, 1.0f, &rw);
        int32_t ids[5] = {0, 299, 17, 17, 150};
        float *ref = hvec(5 * (size_t)n), *d = gput(NULL, 5 * (size_t)n);
        cpu->ops->embed(cpu, ref, &t.h, ids, 5);
        gpu->ops->embed(gpu, d, &t.d, ids, 5);
        float *got = gget(d, 5 * (size_t)n);
        char shape[64];
        snprintf(shape, sizeof shape, "[300,%d] %s, 5 ids", n, dtype_name(dt));
        report("embed", shape, got, ref, 5 * (size_t)n, 0);
        free(got);
        if (gpu->ops->embed_fed) { /* ids 2 and 4 fed from slots 1 and 0 */
            int len[2] = {3, 2}, pos[2] = {0, 7}, slot[2] = {1, 0};
            int32_t fids[5] = {0, 299, -1, 17, -1}, fed[2] = {150, 17};
            int32_t *dfed = gpu->ops->alloc(gpu, sizeof fed);
            gpu->ops->upload(gpu, dfed, fed, sizeof fed);
            tbatch tb;
            tb_make(&tb, 2, len, pos, slot);
            tb_dev(&tb);
            gpu->ops->embed_fed(gpu, d, &t.d, fids, dfed, &tb.db, 5);
            got = gget(d, 5 * (size_t)n);
            snprintf(shape, sizeof shape, "[300,%d] %s, 2 of 5 ids fed", n, dtype_name(dt));
            int32_t resolved[5] = {0, 299, 17, 17, 150};
            cpu->ops->embed(cpu, ref, &t.h, resolved, 5);
            report("embed_fed", shape, got, ref, 5 * (size_t)n, 0);
            free(got), gfree(dfed);
        }
        free(ref), gfree(d), wfree(&t), free((void *)rw.data);
    }
}

/* Which ops take block weights (the matmuls and the embeds), and for other dtypes the
 * answer of a backend without a supports slot (kernels/backend.c), op by op. */
static void test_qsupports(void) {
    backend_ops plain = *gpu->ops;
    backend view = *gpu;
    plain.supports = NULL;
    view.ops = &plain;
    const dtype plain_dts[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_COUNT};
    float wrong = 0, zero = 0;
    for (int op = 0; op < BK_OP_COUNT; op++) {
        for (int di = 0; di < N_QDTS; di++) {
            int want = op == BK_OP_MATMUL || op == BK_OP_MATMUL_N || op == BK_OP_MATMUL_GLU ||
                       op == BK_OP_MATMUL_GNORM || op == BK_OP_EMBED || op == BK_OP_EMBED_FED;
            int got = backend_supports(gpu, op, qdts[di]);
            dtype pd = plain_dts[di % 4];
            int plain_got = backend_supports(gpu, op, pd);
            int plain_want = backend_supports(&view, op, pd);
            if (got != want || plain_got != plain_want) {
                printf("    op %d: %s %d (want %d), %s %d (want %d)\n", op, dtype_name(qdts[di]),
                       got, want, dtype_name(pd), plain_got, plain_want);
                wrong++;
            }
        }
    }
    report("supports", "block dtypes: matmuls, embeds; others: default", &wrong, &zero, 1, 0);
}

void test_quant_ops(void) {
    test_qsupports();
    test_qembed();
    test_qmatmul();
    test_qmatmul_n();
}

/* The decode GEMVs at Qwen3.5-2B's shapes (MLP up / gate [6144, 2048], attention and
 * DeltaNet projections [2048, 2048]): GB/s of the quantized bytes. */
void test_speed_quant(void) {
    const int shapes[][2] = {{6144, 2048}, {2048, 2048}};
    for (int di = 0; di < N_QDTS; di++)
        for (int si = 0; si < 2; si++) {
            int n = shapes[si][0], k = shapes[si][1], reps = 50;
            bk_weight rw;
            tw w = qmake(qdts[di], n, k, 0.05f, &rw);
            float *x = hrand((size_t)8 * k, 1.0f), *dx = gput(x, (size_t)8 * k);
            float *dy = gput(NULL, (size_t)8 * n), sink;
            double bytes = (double)n * (double)dtype_row_bytes(qdts[di], k);
            for (int m = 1; m <= 8; m *= 8) {
                gpu->ops->matmul(gpu, dy, dx, &w.d, m);
                gpu->ops->download(gpu, &sink, dy, sizeof sink);
                double t0 = strata_now();
                for (int r = 0; r < reps; r++) gpu->ops->matmul(gpu, dy, dx, &w.d, m);
                gpu->ops->download(gpu, &sink, dy, sizeof sink);
                double t = (strata_now() - t0) / reps;
                printf("speed: gemv %s [%d x %d] m %d: %.1f us, %.0f GB/s of the blocks\n",
                       dtype_name(qdts[di]), n, k, m, t * 1e6, bytes / t / 1e9);
            }
            free(x), gfree(dx), gfree(dy), wfree(&w), free((void *)rw.data);
        }
}
