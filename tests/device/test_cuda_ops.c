/* test_cuda_ops.c - every CUDA op against the CPU backend's op on the same random inputs
 * of awkward sizes (style.md §18), then the graph capture/replay path (with the device sampler),
 * the out-of-memory path, and a few bandwidth figures. Built and run on the GPU machine
 * by tests/device/cuda_tests.sh; prints one line per comparison:
 *   op  shape  max rel err  tol  PASS|FAIL
 * where the error is max |cuda − cpu| / max(1, max |cpu|) over the output (and over the
 * updated caches / states for the ops that write them). Exit 0 when all pass, 77 when no
 * CUDA device can be used. `test_cuda_ops --self` runs the harness with a second CPU
 * backend in place of the GPU (checks the test itself on a machine without one);
 * `--no-speed` leaves out the bandwidth figures (tests/cuda-host runs it so: the CPU
 * emulation has no timing worth printing).
 *
 * Where the CPU backend does not implement an op yet (its vtable entry is NULL), the
 * comparison is against a plain reference written here from kernels/backend.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/backend.h"
#include "kernels/backend_select.h"
#include "engine/base/dtype.h"
#include "tests/device/cuda_ops_test.h"
#include "tests/test_batch.h"

backend *cpu, *gpu;
static int n_pass, n_fail;
static int self_run; /* --self: the backend under test is a second CPU backend */
strata_err err;

/* ---- helpers ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
float rnd(void) { /* uniform [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(rng >> 40) / 8388608.0f - 1.0f;
}
float *hvec(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) abort();
    return p;
}
float *hrand(size_t n, float amp) {
    float *p = hvec(n);
    for (size_t i = 0; i < n; i++) p[i] = rnd() * amp;
    return p;
}
float *hdup(const float *h, size_t n) {
    float *p = hvec(n);
    memcpy(p, h, n * sizeof(float));
    return p;
}
float *gput(const float *h, size_t n) {
    float *d = gpu->ops->alloc(gpu, (n ? n : 1) * sizeof(float));
    if (!d) {
        fprintf(stderr, "device alloc of %zu floats failed\n", n);
        exit(1);
    }
    if (n && h) gpu->ops->upload(gpu, d, h, n * sizeof(float)); /* NULL: stays zero */
    return d;
}
float *gget(const float *d, size_t n) {
    float *h = hvec(n);
    gpu->ops->download(gpu, h, d, n * sizeof(float));
    return h;
}
void gfree(void *d) { gpu->ops->free(gpu, d); }

int report(const char *op, const char *shape, const float *got, const float *ref, size_t n,
           double tol) {
    double mx = 0, md = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double a = fabs(ref[i]), d = fabs((double)got[i] - ref[i]);
        if (a > mx) mx = a;
        if (!(d <= md)) {
            md = isnan(d) ? INFINITY : d;
            at = i;
        }
    }
    double rel = md / (mx > 1 ? mx : 1);
    int ok = rel <= tol;
    printf("%-24s %-40s max rel err %.2e  tol %.0e  %s\n", op, shape, rel, tol,
           ok ? "PASS" : "FAIL");
    if (!ok && n) printf("    worst at %zu: cuda %.9g cpu %.9g\n", at, got[at], ref[at]);
    if (ok) n_pass++;
    else n_fail++;
    fflush(stdout);
    return ok;
}

tw wmake(dtype dt, int64_t s0, int64_t s1, float amp) {
    tw w;
    size_t n = (size_t)s0 * (size_t)(s1 ? s1 : 1);
    w.buf = malloc(n * dtype_size(dt) + 16);
    if (!w.buf) abort();
    for (size_t i = 0; i < n; i++) {
        float v = rnd() * amp;
        if (dt == DTYPE_BF16) ((uint16_t *)w.buf)[i] = dtype_f32_to_bf16(v);
        else if (dt == DTYPE_F16) ((uint16_t *)w.buf)[i] = dtype_f32_to_f16(v);
        else ((float *)w.buf)[i] = v;
    }
    w.h = (bk_weight){w.buf, dt, s1 ? 2 : 1, {s0, s1, 0, 0}};
    w.d = w.h;
    if (gpu->ops->weight_prepare(gpu, &w.d, &err)) {
        fprintf(stderr, "weight_prepare: %s\n", err.msg);
        exit(1);
    }
    return w;
}
void wfree(tw *w) {
    gpu->ops->weight_release(gpu, &w->d);
    free(w->buf);
}

void tb_make(tbatch *t, int n_seqs, const int *len, const int *pos0, const int *slot) {
    t->hb = test_batch_fill(TEST_BATCH_ARRAYS(t), n_seqs, len, pos0, slot);
    t->db = t->hb;
    cpu->ops->batch_prepare(cpu, &t->hb, &err);
}
void tb_blocks(tbatch *t, int blk_w, const int32_t *blk) {
    size_t n = (size_t)t->hb.n_seqs * (size_t)blk_w;
    if (n > sizeof t->blk / sizeof t->blk[0]) abort();
    memcpy(t->blk, blk, n * sizeof(int32_t));
    t->hb.blk = t->db.blk = blk_w ? t->blk : NULL;
    t->hb.blk_w = t->db.blk_w = blk_w;
}
/* The device mirror is the backend's last prepared batch: prepare right before use. */
void tb_dev(tbatch *t) {
    if (gpu->ops->batch_prepare(gpu, &t->db, &err)) {
        fprintf(stderr, "batch_prepare: %s\n", err.msg);
        exit(1);
    }
}

const char *dtn(dtype dt) { return dt == DTYPE_BF16 ? "bf16" : dt == DTYPE_F16 ? "f16" : "f32"; }

/* ---- elementwise and row ops ---- */

static void test_embed(void) {
    const dtype dts[] = {DTYPE_BF16, DTYPE_F16, DTYPE_F32};
    for (int di = 0; di < 3; di++) {
        tw t = wmake(dts[di], 1000, 77, 1.0f);
        int32_t ids[5] = {0, 999, 17, 17, 500};
        float *ref = hvec(5 * 77), *d = gput(ref, 5 * 77);
        cpu->ops->embed(cpu, ref, &t.h, ids, 5);
        gpu->ops->embed(gpu, d, &t.d, ids, 5);
        float *got = gget(d, 5 * 77);
        char shape[64];
        snprintf(shape, sizeof shape, "[1000,77] %s, 5 ids", dtn(dts[di]));
        report("embed", shape, got, ref, 5 * 77, 0);
        free(ref), free(got), gfree(d), wfree(&t);
    }
}

/* embed_fed: a negative id takes its sequence's slot's entry of fed (the device sampler's
 * last pick), against the CPU's embed of the ids resolved on the host. */
static void test_embed_fed(void) {
    SKIP_WITHOUT(embed_fed);
    tw t = wmake(DTYPE_BF16, 1000, 77, 1.0f);
    int len[3] = {2, 1, 2}, pos[3] = {4, 0, 9}, slot[3] = {2, 0, 5};
    int32_t ids[5] = {12, -1, -1, 40, -1}, fed[8] = {100, 200, 300, 400, 500, 600, 700, 999};
    int32_t resolved[5] = {12, 300, 100, 40, 600};
    int32_t *dfed = gpu->ops->alloc(gpu, sizeof fed);
    gpu->ops->upload(gpu, dfed, fed, sizeof fed);
    tbatch tb;
    tb_make(&tb, 3, len, pos, slot);
    float *ref = hvec(5 * 77), *d = gput(ref, 5 * 77);
    cpu->ops->embed(cpu, ref, &t.h, resolved, 5);
    tb_dev(&tb);
    gpu->ops->embed_fed(gpu, d, &t.d, ids, dfed, &tb.db, 5);
    float *got = gget(d, 5 * 77);
    report("embed_fed", "[1000,77] bf16, 3 of 5 ids fed", got, ref, 5 * 77, 0);
    free(got);
    /* the table left in host memory, mapped for the device (Gemma 4's PLE table); a second
     * mapping of the same pages is refused, and the refusal is not a device error */
    bk_weight mapped, again;
    strata_err merr = {0};
    if (backend_weight_map(gpu, &t.h, &mapped, &merr)) {
        printf("embed_fed mapped table: %s  FAIL\n", merr.msg);
        report("embed_fed", "mapped host table", NULL, NULL, 0, -1);
    } else {
        tb_dev(&tb);
        gpu->ops->embed_fed(gpu, d, &mapped, ids, dfed, &tb.db, 5);
        got = gget(d, 5 * 77);
        report("embed_fed", "[1000,77] bf16 in mapped host memory", got, ref, 5 * 77, 0);
        free(got);
        float refused = backend_weight_map(gpu, &t.h, &again, &merr) != 0, one = 1.0f;
        const char *(*last)(const backend *) = gpu->ops->last_error;
        refused *= !(last && last(gpu));
        report("weight_map", "second map of the same pages refused, not sticky", &refused, &one, 1,
               0);
        gpu->ops->weight_unmap(gpu, &mapped);
    }
    free(ref), gfree(d), gfree(dfed), wfree(&t);
}

static void test_rmsnorm(void) {
    const int cases[][3] = {{7, 33, 40}, {3, 2050, 2050}, {1, 4096, 4096}, {300, 256, 256}};
    for (int ci = 0; ci < 4; ci++)
        for (int mode = 0; mode < 3; mode++) {
            int m = cases[ci][0], n = cases[ci][1], ld = cases[ci][2];
            tw w = wmake(DTYPE_BF16, n, 0, 0.5f);
            float *x = hrand((size_t)m * ld, 2.0f), *ref = hdup(x, (size_t)m * ld);
            float *d = gput(x, (size_t)m * ld);
            cpu->ops->rmsnorm(cpu, ref, ref, &w.h, m, n, ld, 1e-6f, mode);
            gpu->ops->rmsnorm(gpu, d, d, &w.d, m, n, ld, 1e-6f, mode); /* in place */
            float *got = gget(d, (size_t)m * ld);
            char shape[64];
            snprintf(shape, sizeof shape, "m %d n %d ld %d mode %d", m, n, ld, mode);
            report("rmsnorm", shape, got, ref, (size_t)m * ld, TOL_EW);
            free(x), free(ref), free(got), gfree(d), wfree(&w);
        }
}

/* The fused residual step against the CPU's (itself the op sequence it replaces, bit for
 * bit: tests/unit/test_cpu_ops.c): x and xn, for each delta norm / output norm choice,
 * short rows (a warp each) and long ones (a block each). */
static void test_residual(void) {
    /* a warp a row; a block a row, its elements in registers (n <= 4,096) or not */
    const int cases[][2] = {{7, 33}, {3, 2050}, {1, 4096}, {40, 256}, {1, 5000}};
    const int modes[][2] = {{-1, BK_NORM_ONE_PLUS},
                            {-1, -1},
                            {BK_NORM_PLAIN, BK_NORM_PLAIN},
                            {BK_NORM_PLAIN, -1},
                            {BK_NORM_ONE_PLUS, BK_NORM_PLAIN}};
    for (int ci = 0; ci < (int)(sizeof cases / sizeof cases[0]); ci++)
        for (int mi = 0; mi < 5; mi++) {
            int m = cases[ci][0], n = cases[ci][1], dm = modes[mi][0], nm = modes[mi][1];
            size_t N = (size_t)m * n;
            tw wd = wmake(DTYPE_BF16, n, 0, 0.5f), wn = wmake(DTYPE_F32, n, 0, 0.5f);
            tw ws = wmake(DTYPE_BF16, 1, 0, 2.0f); /* layer_scalar, in every other case */
            const bk_weight *hs = mi & 1 ? &ws.h : NULL, *ds = mi & 1 ? &ws.d : NULL;
            float *x = hrand(N, 2.0f), *dl = hrand(N, 2.0f), *xn = hvec(N);
            float *gx = gput(x, N), *gd = gput(dl, N), *gxn = gput(NULL, N);
            cpu->ops->residual(cpu, x, nm < 0 ? NULL : xn, dl, dm < 0 ? NULL : &wd.h, dm, hs, &wn.h,
                               nm, m, n, 1e-6f);
            gpu->ops->residual(gpu, gx, nm < 0 ? NULL : gxn, gd, dm < 0 ? NULL : &wd.d, dm, ds,
                               &wn.d, nm, m, n, 1e-6f);
            float *got = gget(gx, N), *gotn = gget(gxn, N), *gotd = gget(gd, N);
            char shape[80];
            snprintf(shape, sizeof shape, "m %d n %d delta norm %d out norm %d%s", m, n, dm, nm,
                     hs ? " scaled" : "");
            report("residual x", shape, got, x, N, TOL_EW);
            if (nm >= 0) report("residual xn", shape, gotn, xn, N, TOL_EW);
            report("residual delta kept", shape, gotd, dl, N, 0);
            free(x), free(dl), free(xn), free(got), free(gotn), free(gotd);
            gfree(gx), gfree(gd), gfree(gxn), wfree(&wd), wfree(&wn), wfree(&ws);
        }
}

static void test_rmsnorm_gated(void) {
    const int cases[][2] = {{9, 130}, {4, 1025}, {64, 128}};
    for (int ci = 0; ci < 3; ci++) {
        int m = cases[ci][0], n = cases[ci][1];
        size_t t = (size_t)m * n;
        tw w = wmake(DTYPE_F32, n, 0, 1.0f);
        float *x = hrand(t, 2.0f), *z = hrand(t, 3.0f), *ref = hvec(t);
        float *dx = gput(x, t), *dz = gput(z, t), *dout = gput(ref, t);
        cpu->ops->rmsnorm_gated(cpu, ref, x, z, &w.h, m, n, 1e-6f);
        gpu->ops->rmsnorm_gated(gpu, dout, dx, dz, &w.d, m, n, 1e-6f);
        float *got = gget(dout, t);
        char shape[64];
        snprintf(shape, sizeof shape, "m %d n %d", m, n);
        report("rmsnorm_gated", shape, got, ref, t, TOL_EW);
        free(x), free(z), free(ref), free(got), gfree(dx), gfree(dz), gfree(dout), wfree(&w);
    }
}

static void test_grouped(void) {
    SKIP_WITHOUT(rmsnorm_gated_grouped)
    const int cases[][3] = {{3, 96, 24}, {2, 1920, 960}, {5, 70, 70}};
    for (int ci = 0; ci < 3; ci++) {
        int m = cases[ci][0], width = cases[ci][1], group = cases[ci][2];
        size_t t = (size_t)m * width;
        tw w = wmake(DTYPE_BF16, width, 0, 1.0f);
        float *x = hrand(t, 2.0f), *z = hrand(t, 3.0f), *ref = hvec(t);
        float *dx = gput(x, t), *dz = gput(z, t);
        if (cpu->ops->rmsnorm_gated_grouped)
            cpu->ops->rmsnorm_gated_grouped(cpu, ref, x, z, &w.h, m, width, group, 1e-5f);
        else ref_grouped(ref, x, z, &w.h, m, width, group, 1e-5f);
        gpu->ops->rmsnorm_gated_grouped(gpu, dx, dx, dz, &w.d, m, width, group, 1e-5f);
        float *got = gget(dx, t);
        char shape[64];
        snprintf(shape, sizeof shape, "m %d width %d group %d%s", m, width, group,
                 cpu->ops->rmsnorm_gated_grouped ? "" : " (local ref)");
        report("rmsnorm_gated_grouped", shape, got, ref, t, TOL_EW);
        free(x), free(z), free(ref), free(got), gfree(dx), gfree(dz), wfree(&w);
    }
}

static void test_l2norm(void) {
    /* rows ld apart; then heads inside token rows (gpr heads of n per ld-wide token row,
     * Qwen3.5's q and k in its conv output), short rows and block-wide ones */
    const int cases[][4] = {{6, 129, 131, 1}, {3 * 16, 128, 6144, 16}, {2 * 4, 1100, 9000, 4}};
    for (int ci = 0; ci < 3; ci++) {
        int m = cases[ci][0], n = cases[ci][1], ld = cases[ci][2], gpr = cases[ci][3];
        size_t t = (size_t)(m / gpr) * ld;
        float *x = hrand(t, 1.0f), *ref = hdup(x, t), *d = gput(x, t);
        cpu->ops->l2norm(cpu, ref, m, n, ld, gpr, 1e-6f, 0.088f);
        gpu->ops->l2norm(gpu, d, m, n, ld, gpr, 1e-6f, 0.088f);
        float *got = gget(d, t);
        char shape[64];
        snprintf(shape, sizeof shape, "m %d n %d ld %d gpr %d", m, n, ld, gpr);
        report("l2norm", shape, got, ref, t, TOL_EW);
        free(x), free(ref), free(got), gfree(d);
    }
}

/* add, silu_mul, gelu_tanh_mul, sigmoid_mul, relu2, scale, softcap */
static void test_elementwise(void) {
    size_t n = 100003;
    float *a = hrand(n, 4.0f), *b = hrand(n, 4.0f), *ref = hvec(n);
    float *da = gput(a, n), *db = gput(b, n), *dout = gput(ref, n), *got;
    tw s = wmake(DTYPE_BF16, 1, 0, 1.0f);
    cpu->ops->add(cpu, ref, a, b, n);
    gpu->ops->add(gpu, dout, da, db, n);
    report("add", "n 100003", got = gget(dout, n), ref, n, TOL_EW), free(got);
    cpu->ops->silu_mul(cpu, ref, a, b, 7, (int)(n / 7));
    gpu->ops->silu_mul(gpu, dout, da, db, 7, (int)(n / 7));
    report("silu_mul", "m 7 n 14286", got = gget(dout, n / 7 * 7), ref, n / 7 * 7, TOL_EW),
        free(got);
    if (!gpu->ops->gelu_tanh_mul || !gpu->ops->relu2 || !gpu->ops->scale || !gpu->ops->softcap) {
        printf("%-24s SKIP: the backend under test lacks them\n", "gelu/relu2/scale/softcap");
        free(a), free(b), free(ref), gfree(da), gfree(db), gfree(dout), wfree(&s);
        return;
    }
    if (cpu->ops->gelu_tanh_mul) cpu->ops->gelu_tanh_mul(cpu, ref, a, b, 3, 1001);
    else ref_gelu_mul(ref, a, b, 3 * 1001);
    gpu->ops->gelu_tanh_mul(gpu, dout, da, db, 3, 1001);
    report("gelu_tanh_mul", cpu->ops->gelu_tanh_mul ? "m 3 n 1001" : "m 3 n 1001 (local ref)",
           got = gget(dout, 3003), ref, 3003, TOL_EW),
        free(got);
    memcpy(ref, a, n * sizeof(float));
    gpu->ops->upload(gpu, dout, a, n * sizeof(float));
    cpu->ops->sigmoid_mul(cpu, ref, b, 4097);
    gpu->ops->sigmoid_mul(gpu, dout, db, 4097);
    report("sigmoid_mul", "n 4097", got = gget(dout, 4097), ref, 4097, TOL_EW), free(got);
    memcpy(ref, a, n * sizeof(float));
    gpu->ops->upload(gpu, dout, a, n * sizeof(float));
    if (cpu->ops->relu2) cpu->ops->relu2(cpu, ref, n);
    else ref_relu2(ref, n);
    gpu->ops->relu2(gpu, dout, n);
    report("relu2", "n 100003", got = gget(dout, n), ref, n, TOL_EW), free(got);
    for (int with_s = 0; with_s < 2; with_s++) {
        memcpy(ref, a, n * sizeof(float));
        gpu->ops->upload(gpu, dout, a, n * sizeof(float));
        if (cpu->ops->scale) cpu->ops->scale(cpu, ref, 0.37f, with_s ? &s.h : NULL, n);
        else ref_scale(ref, 0.37f, with_s ? &s.h : NULL, n);
        gpu->ops->scale(gpu, dout, 0.37f, with_s ? &s.d : NULL, n);
        report("scale", with_s ? "n 100003, bf16 scalar" : "n 100003", got = gget(dout, n), ref, n,
               TOL_EW),
            free(got);
    }
    memcpy(ref, a, n * sizeof(float));
    for (size_t i = 0; i < n; i++) ref[i] *= 20.0f; /* reach the saturating part */
    gpu->ops->upload(gpu, dout, ref, n * sizeof(float));
    if (cpu->ops->softcap) cpu->ops->softcap(cpu, ref, 30.0f, n);
    else ref_softcap(ref, 30.0f, n);
    gpu->ops->softcap(gpu, dout, 30.0f, n);
    report("softcap", "n 100003 cap 30", got = gget(dout, n), ref, n, TOL_EW), free(got);
    free(a), free(b), free(ref), gfree(da), gfree(db), gfree(dout), wfree(&s);
}

static void test_split_gather(void) {
    int rows = 5, half = 259;
    size_t t = (size_t)rows * half;
    float *in = hrand(2 * t, 1.0f), *ra = hvec(t), *rg = hvec(t);
    float *din = gput(in, 2 * t), *da = gput(ra, t), *dg = gput(rg, t);
    cpu->ops->split_halves(cpu, ra, rg, in, rows, half);
    gpu->ops->split_halves(gpu, da, dg, din, rows, half);
    float *ga = gget(da, t), *gg = gget(dg, t);
    report("split_halves a", "rows 5 half 259", ga, ra, t, 0);
    report("split_halves g", "rows 5 half 259", gg, rg, t, 0);
    free(ga), free(gg);
    /* gather into a separate buffer, then in place (rows[i] >= i: compaction) */
    int32_t rws[4] = {8, 0, 3, 3}, comp[4] = {1, 4, 7, 8};
    int width = 301;
    float *x = hrand(9 * (size_t)width, 1.0f), *ref = hvec(4 * (size_t)width);
    float *dx = gput(x, 9 * (size_t)width), *dout = gput(ref, 4 * (size_t)width), *got;
    cpu->ops->gather_rows(cpu, ref, x, rws, 4, width);
    gpu->ops->gather_rows(gpu, dout, dx, rws, 4, width);
    report("gather_rows", "4 of 9 rows, width 301", got = gget(dout, 4 * (size_t)width), ref,
           4 * (size_t)width, 0),
        free(got);
    cpu->ops->gather_rows(cpu, x, x, comp, 4, width);
    gpu->ops->gather_rows(gpu, dx, dx, comp, 4, width);
    report("gather_rows in place", "rows {1,4,7,8} onto 0..3", got = gget(dx, 9 * (size_t)width), x,
           9 * (size_t)width, 0),
        free(got);
    free(in), free(ra), free(rg), free(x), free(ref);
    gfree(din), gfree(da), gfree(dg), gfree(dx), gfree(dout);
}

/* copy: device to device in stream order (an add queued before it changes what it copies,
 * one after it does not), at float offsets and an odd byte count, against the CPU's. */
static void test_copy(void) {
    size_t n = 10007;
    float *a = hrand(n, 3.0f), *ref = hvec(n);
    float *da = gput(a, n), *dd = gput(NULL, n);
    const size_t big = 9000 * sizeof(float), odd = 7;
    cpu->ops->add(cpu, a, a, a, n);
    cpu->ops->copy(cpu, ref + 5, a + 2, big);
    cpu->ops->copy(cpu, ref + 9010, a + 1, odd);
    cpu->ops->copy(cpu, ref, a, 0);
    cpu->ops->add(cpu, a, a, a, n);
    gpu->ops->add(gpu, da, da, da, n);
    gpu->ops->copy(gpu, dd + 5, da + 2, big);
    gpu->ops->copy(gpu, dd + 9010, da + 1, odd);
    gpu->ops->copy(gpu, dd, da, 0);
    gpu->ops->add(gpu, da, da, da, n);
    float *got = gget(dd, n), *gota = gget(da, n);
    report("copy", "9000 floats, then 7 bytes, between two adds", got, ref, n, 0);
    report("copy source", "the add after the copy", gota, a, n, 0);
    free(a), free(ref), free(got), free(gota), gfree(da), gfree(dd);
}

static void test_gates(void) {
    for (int di = 0; di < 2; di++) {
        dtype dt = di ? DTYPE_BF16 : DTYPE_F32;
        int m = 7, Hv = 5;
        size_t t = (size_t)m * Hv;
        tw A = wmake(dt, Hv, 0, 1.0f), dtb = wmake(dt, Hv, 0, 1.0f);
        float *a = hrand(t, 25.0f), *bb = hrand(t, 4.0f), *g = hvec(t), *be = hvec(t);
        float *da = gput(a, t), *dbb = gput(bb, t), *dg = gput(g, t), *dbe = gput(be, t);
        cpu->ops->gdn_gates(cpu, g, be, a, bb, &A.h, &dtb.h, m, Hv);
        gpu->ops->gdn_gates(gpu, dg, dbe, da, dbb, &A.d, &dtb.d, m, Hv);
        float *gg = gget(dg, t), *gb = gget(dbe, t);
        report("gdn_gates g", dtn(dt), gg, g, t, TOL_EW);
        report("gdn_gates beta", dtn(dt), gb, be, t, TOL_EW);
        free(a), free(bb), free(g), free(be), free(gg), free(gb);
        gfree(da), gfree(dbb), gfree(dg), gfree(dbe), wfree(&A), wfree(&dtb);
    }
}

static void test_rope(void) {
    int m = 5, heads = 3, hd = 36, rot = 20, ld = heads * hd + 4;
    int len[2] = {2, 3}, pos0[2] = {0, 4990}, slot[2] = {0, 1};
    tbatch tb;
    tb_make(&tb, 2, len, pos0, slot);
    float inv[10];
    for (int i = 0; i < rot / 2; i++) inv[i] = (float)(1.0 / pow(10000.0, 2.0 * i / rot));
    size_t t = (size_t)m * ld;
    float *x = hrand(t, 1.0f), *ref = hdup(x, t), *dx = gput(x, t), *dinv = gput(inv, rot / 2);
    cpu->ops->rope(cpu, ref, &tb.hb, inv, heads, hd, rot, ld);
    tb_dev(&tb);
    gpu->ops->rope(gpu, dx, &tb.db, dinv, heads, hd, rot, ld);
    float *got = gget(dx, t);
    report("rope", "5 tokens to pos 4992, 3x36 rot 20", got, ref, t, TOL_EW);
    free(x), free(ref), free(got), gfree(dx), gfree(dinv);
}

static void matmul_one(dtype dt, int n, int k, int m) {
    tw w = wmake(dt, n, k, 0.05f);
    float *x = hrand((size_t)m * k, 1.0f), *ref = hvec((size_t)m * n);
    float *dx = gput(x, (size_t)m * k), *dout = gput(ref, (size_t)m * n);
    int long_k = k > (1 << 20);
    if (long_k) ref_matmul_bf16(ref, x, &w.h, m);
    else cpu->ops->matmul(cpu, ref, x, &w.h, m);
    gpu->ops->matmul(gpu, dout, dx, &w.d, m);
    float *got = gget(dout, (size_t)m * n);
    char shape[64];
    snprintf(shape, sizeof shape, "%s W [%d,%d] m %d%s", dtn(dt), n, k, m,
             long_k ? " (double ref)" : "");
    report("matmul", shape, got, ref, (size_t)m * n, dt == DTYPE_F32 ? TOL_MM32 : TOL_MM16);
    free(got), free(x), free(ref), gfree(dx), gfree(dout), wfree(&w);
}

/* matmul_n against the CPU's matmuls: one GEMV over every weight's rows at m <= 8 (few
 * rows next to many, so the row split and the segment edges cross blocks), one matmul
 * each past it. */
static void test_matmul_n(void) {
    const int ns[] = {2048, 16, 16, 6};
    const dtype dts[] = {DTYPE_BF16, DTYPE_F32};
    const int ms[] = {1, 2, 3, 8, 9};
    int k = 1024;
    for (int di = 0; di < 2; di++)
        for (int mi = 0; mi < 5; mi++)
            for (int nw = 2; nw <= 4; nw += 2) {
                int m = ms[mi];
                tw w[4];
                const bk_weight *hw[4], *dw[4];
                float *ref[4], *dout[4];
                float *x = hrand((size_t)m * k, 1.0f), *dx = gput(x, (size_t)m * k);
                for (int j = 0; j < nw; j++) {
                    w[j] = wmake(dts[di], ns[j], k, 0.05f);
                    hw[j] = &w[j].h, dw[j] = &w[j].d;
                    ref[j] = hvec((size_t)m * ns[j]);
                    dout[j] = gput(NULL, (size_t)m * ns[j]);
                }
                cpu->ops->matmul_n(cpu, ref, x, hw, nw, m);
                gpu->ops->matmul_n(gpu, dout, dx, dw, nw, m);
                for (int j = 0; j < nw; j++) {
                    float *got = gget(dout[j], (size_t)m * ns[j]);
                    char shape[80];
                    snprintf(shape, sizeof shape, "%s %d weights, #%d [%d,%d] m %d", dtn(dts[di]),
                             nw, j, ns[j], k, m);
                    report("matmul_n", shape, got, ref[j], (size_t)m * ns[j],
                           dts[di] == DTYPE_F32 ? TOL_MM32 : TOL_MM16);
                    free(got), free(ref[j]), gfree(dout[j]), wfree(&w[j]);
                }
                free(x), gfree(dx);
            }
}

static void test_matmul(void) {
    const dtype dts[] = {DTYPE_BF16, DTYPE_F16, DTYPE_F32};
    /* n, k: vector path; k % 8 != 0 (scalar path); few rows (split rows over warps);
     * a wide one; a tiny one; one whose bf16 GEMM runs in row chunks (2·m·n > scratch). */
    const int shapes[][2] = {{1000, 1024}, {77, 130}, {16, 2048},
                             {3000, 520},  {5, 8},    {100000, 64}};
    const int ms[] = {1, 5, 8, 9, 37, 100};
    for (int di = 0; di < 3; di++)
        for (int si = 0; si < 6; si++)
            for (int mi = 0; mi < 6; mi++) {
                int n = shapes[si][0], k = shapes[si][1], m = ms[mi];
                if ((si == 5) != (mi == 5)) continue; /* the chunked shape with m 100 only */
                tw w = wmake(dts[di], n, k, 0.05f);
                float *x = hrand((size_t)m * k + 1, 1.0f), *ref = hvec((size_t)m * n);
                float *dx = gput(x, (size_t)m * k + 1), *dout = gput(ref, (size_t)m * n);
                cpu->ops->matmul(cpu, ref, x, &w.h, m);
                gpu->ops->matmul(gpu, dout, dx, &w.d, m);
                float *got = gget(dout, (size_t)m * n);
                char shape[64];
                snprintf(shape, sizeof shape, "%s W [%d,%d] m %d", dtn(dts[di]), n, k, m);
                double tol = dts[di] == DTYPE_F32 ? TOL_MM32 : TOL_MM16;
                report("matmul", shape, got, ref, (size_t)m * n, tol);
                free(got);
                if (si == 0 && (m == 1 || m == 9)) { /* x not 16-byte aligned */
                    cpu->ops->matmul(cpu, ref, x + 1, &w.h, m);
                    gpu->ops->matmul(gpu, dout, dx + 1, &w.d, m);
                    got = gget(dout, (size_t)m * n);
                    strncat(shape, " x+1", sizeof shape - strlen(shape) - 1);
                    report("matmul", shape, got, ref, (size_t)m * n, tol);
                    free(got);
                }
                free(x), free(ref), gfree(dx), gfree(dout), wfree(&w);
            }
    /* every other row count of the GEMV, on every dtype */
    const int more_m[] = {2, 3, 4, 6, 7};
    for (int di = 0; di < 3; di++)
        for (int mi = 0; mi < 5; mi++) matmul_one(dts[di], 1000, 1024, more_m[mi]);
    /* bf16 x at m <= 2 past what a GEMV block stages: rounded once into act16 instead */
    matmul_one(DTYPE_BF16, 5, 50000, 1);
    matmul_one(DTYPE_BF16, 5, 50000, 2);
    /* m <= 8 whose bf16 x outgrows the act16 scratch (16M values): the tiled kernel. A
     * CUDA dispatch only; past its own bf16 scratch (k > 2,097,152) the CPU backend
     * multiplies x unrounded, so a double reference of the rounded product judges it. */
    if (self_run) printf("%-24s SKIP: k 2097160 reaches a CUDA-only path\n", "matmul");
    else matmul_one(DTYPE_BF16, 3, 2097160, 8);
}

/* matmul_glu: the activation fused into the GEMV's loads (BF16, m <= 2: staged per block;
 * m <= 8: rounded once for the GEMV), or the elementwise op and the matmul (F32 weights,
 * m > 8, k % 8 != 0, an unaligned u), against the CPU's op sequence. With BF16 weights the
 * activation is rounded to bf16 on both sides, and where CUDA's expf / tanhf and glibc's
 * differ in the last bit the rounding of an element may flip: one bf16 step (2^-8 of it)
 * moves the output by up to ~2e-4 of its largest value here (measured 5.05e-5 where
 * exactly one flipped). 1e-3 allows a few; a wrong activation or row moves most outputs
 * by far more. */
#define TOL_GLU16 1e-3
static void test_matmul_glu(void) {
    const char *names[] = {"silu", "gelu_tanh", "sigmoid", "relu2"};
    const dtype dts[] = {DTYPE_BF16, DTYPE_F32};
    const int shapes[][2] = {{1000, 1024}, {64, 3584}, {77, 130}};
    const int ms[] = {1, 2, 3, 8, 9};
    for (int act = 0; act < BK_ACT_COUNT; act++)
        for (int di = 0; di < 2; di++)
            for (int si = 0; si < 3; si++)
                for (int mi = 0; mi < 5; mi++) {
                    int n = shapes[si][0], k = shapes[si][1], m = ms[mi];
                    if (di && (si || mi % 2)) continue; /* F32: the unfused path, a few */
                    size_t e = (size_t)m * k + 4;
                    int off = si == 0 && m == 1 && act == BK_ACT_SILU; /* u not 16-byte aligned */
                    tw w = wmake(dts[di], n, k, 0.05f);
                    float *g = hrand(e, 3.0f), *u = hrand(e, 1.0f), *ref = hvec((size_t)m * n);
                    float *dg = gput(g, e), *du = gput(u, e), *dout = gput(ref, (size_t)m * n);
                    float *hu = act == BK_ACT_RELU2 ? NULL : u + off;
                    float *gu = act == BK_ACT_RELU2 ? NULL : du + off;
                    cpu->ops->matmul_glu(cpu, ref, g, hu, &w.h, m, act);
                    gpu->ops->matmul_glu(gpu, dout, dg, gu, &w.d, m, act);
                    float *got = gget(dout, (size_t)m * n);
                    char shape[96];
                    snprintf(shape, sizeof shape, "%s %s W [%d,%d] m %d%s", names[act],
                             dtn(dts[di]), n, k, m, off ? " u+1" : "");
                    report("matmul_glu", shape, got, ref, (size_t)m * n,
                           dts[di] == DTYPE_F32 ? TOL_MM32 : TOL_GLU16);
                    free(got), free(g), free(u), free(ref), gfree(dg), gfree(du), gfree(dout);
                    wfree(&w);
                }
}

/* matmul_gnorm: the gated norm fused into the GEMV's staging (BF16, m <= 2) or written
 * normed and rounded for it (m <= 8), or the norm op and the matmul (F32 weights, m > 8,
 * more groups than the staging holds), against the CPU's op sequence at matmul_glu's
 * tolerance (the same bf16 roundings of a silu-gated value), and against the backend's own
 * unfused ops bit for bit: the fused kernels take the norm kernels' sums in their order.
 * Groups below and from 256 (a warp or a block a group), both modes, the gain per head
 * (HEAD, F32 like Qwen3.5's) and per row (GROUPED, BF16 like Nemotron-H's), 16 groups a
 * row at m = 8 (more than a staging block holds for all rows, fused a row a block) and 130
 * (more than a block holds: unfused). */
static void test_matmul_gnorm(void) {
    const struct {
        int mode, n, k, group;
    } cases[] = {{BK_GNORM_HEAD, 1000, 2048, 128}, {BK_GNORM_HEAD, 77, 384, 96},
                 {BK_GNORM_HEAD, 50, 1280, 320},   {BK_GNORM_GROUPED, 300, 1920, 960},
                 {BK_GNORM_GROUPED, 64, 384, 96},  {BK_GNORM_GROUPED, 40, 280, 70},
                 {BK_GNORM_HEAD, 20, 1040, 8}};
    const int ms[] = {1, 2, 3, 8, 9};
    const dtype dts[] = {DTYPE_BF16, DTYPE_F32};
    for (int ci = 0; ci < 7; ci++)
        for (int di = 0; di < 2; di++)
            for (int mi = 0; mi < 5; mi++) {
                int mode = cases[ci].mode, n = cases[ci].n, k = cases[ci].k;
                int group = cases[ci].group, m = ms[mi];
                if (di && (ci % 3 || mi % 2)) continue; /* F32: the unfused path, a few */
                size_t e = (size_t)m * k;
                int head = mode == BK_GNORM_HEAD;
                tw w = wmake(dts[di], n, k, 0.05f);
                tw nw = wmake(head ? DTYPE_F32 : DTYPE_BF16, head ? group : k, 0, 1.0f);
                float *x = hrand(e, 2.0f), *z = hrand(e, 3.0f), *ref = hvec((size_t)m * n);
                float *xc = hdup(x, e);
                float *dx = gput(x, e), *dx2 = gput(x, e), *dz = gput(z, e);
                float *dout = gput(ref, (size_t)m * n), *dout2 = gput(ref, (size_t)m * n);
                cpu->ops->matmul_gnorm(cpu, ref, xc, z, &nw.h, group, 1e-6f, mode, &w.h, m);
                gpu->ops->matmul_gnorm(gpu, dout, dx, dz, &nw.d, group, 1e-6f, mode, &w.d, m);
                if (head)
                    gpu->ops->rmsnorm_gated(gpu, dx2, dx2, dz, &nw.d, m * (k / group), group,
                                            1e-6f);
                else gpu->ops->rmsnorm_gated_grouped(gpu, dx2, dx2, dz, &nw.d, m, k, group, 1e-6f);
                gpu->ops->matmul(gpu, dout2, dx2, &w.d, m);
                float *got = gget(dout, (size_t)m * n), *got2 = gget(dout2, (size_t)m * n);
                char shape[96];
                snprintf(shape, sizeof shape, "%s %s W [%d,%d] group %d m %d",
                         head ? "head" : "grouped", dtn(dts[di]), n, k, group, m);
                report("matmul_gnorm", shape, got, ref, (size_t)m * n,
                       dts[di] == DTYPE_F32 ? TOL_MM32 : TOL_GLU16);
                report("matmul_gnorm vs unfused", shape, got, got2, (size_t)m * n, 0.0);
                free(got), free(got2), free(x), free(xc), free(z), free(ref);
                gfree(dx), gfree(dx2), gfree(dz), gfree(dout), gfree(dout2);
                wfree(&w), wfree(&nw);
            }
}

/* Out of memory: NULL, and the backend keeps working (the failure is not sticky). */
static void test_oom(void) {
    void *p = gpu->ops->alloc(gpu, (size_t)1 << 50);
    float one = 1.0f, *d = gput(&one, 1), *got;
    gpu->ops->add(gpu, d, d, d, 1);
    got = gget(d, 1);
    float want = 2.0f;
    report("alloc 1 PiB -> NULL", p ? "returned memory" : "NULL, then add still works", got, &want,
           1, p ? -1 : 0);
    free(got), gfree(d);
}

/* name is one of the comma-separated items of list */
static int in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* The comparisons, by the names --only picks them with (comma-separated). */
static const struct {
    const char *name;
    void (*run)(void);
} op_tests[] = {
    {"embed", test_embed},
    {"embed_fed", test_embed_fed},
    {"rmsnorm", test_rmsnorm},
    {"residual", test_residual},
    {"rmsnorm_gated", test_rmsnorm_gated},
    {"grouped", test_grouped},
    {"l2norm", test_l2norm},
    {"elementwise", test_elementwise},
    {"split_gather", test_split_gather},
    {"copy", test_copy},
    {"gates", test_gates},
    {"rope", test_rope},
    {"matmul", test_matmul},
    {"matmul_n", test_matmul_n},
    {"matmul_glu", test_matmul_glu},
    {"matmul_gnorm", test_matmul_gnorm},
    {"quant", test_quant_ops},
    {"attention", test_attention},
    {"attn_prep", test_attn_prep},
    {"conv1d", test_conv1d},
    {"gated_delta", test_gated_delta},
    {"gdn", test_gdn},
    {"gdn_chunked", test_gdn_chunked},
    {"ssd", test_ssd},
    {"ssd_chunked", test_ssd_chunked},
    {"sample", test_sample},
};

int main(int argc, char **argv) {
    int self = 0, speed = 1;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--self")) self = self_run = 1;
        else if (!strcmp(argv[i], "--no-speed")) speed = 0;      /* tests/cuda-host: no timing */
        else if (!strcmp(argv[i], "--prefill-speed")) speed = 2; /* run.sh --prefill */
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr, "usage: test_cuda_ops [--self] [--no-speed | --prefill-speed] "
                            "[--only NAME[,NAME...]]\n");
            return 2;
        }
    }
    if (backend_cpu_create(0, &cpu, &err)) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 1;
    }
    if (self ? backend_cpu_create(1, &gpu, &err) : backend_create("cuda", 0, &gpu, &err)) {
        printf("no CUDA backend: %s\n", err.msg);
        backend_destroy(cpu);
        return 77;
    }
    printf("backend under test: %s%s\n", backend_name(gpu), self ? " (--self: harness check)" : "");
    if (speed == 2) { /* the prefill kernels' timings alone */
        test_speed_prefill();
        backend_destroy(gpu);
        backend_destroy(cpu);
        return 0;
    }
    int ran = 0;
    for (size_t i = 0; i < sizeof op_tests / sizeof op_tests[0]; i++)
        if (!only || in_list(only, op_tests[i].name)) op_tests[i].run(), ran++;
    if (!ran) {
        fprintf(stderr, "--only %s: no such comparison\n", only);
        return 2;
    }
    if (!self && !only) {
        test_oom();
        test_graph();
        test_graph_chain();
        test_graph_paged();
        if (speed) test_speed(), test_speed_quant();
        backend_mem dm;
        if (!backend_memory(gpu, &dm))
            printf("device memory: peak %zu MiB held by the backend, %zu MiB free of %zu MiB\n",
                   dm.peak >> 20, dm.free >> 20, dm.total >> 20);
        const char *(*cerr)(const backend *) = gpu->ops->last_error;
        if (cerr && cerr(gpu)) {
            printf("sticky CUDA error: %s  FAIL\n", cerr(gpu));
            n_fail++;
        }
    }
    printf("cuda ops: %d passed, %d failed\n", n_pass, n_fail);
    backend_destroy(gpu);
    backend_destroy(cpu);
    return n_fail ? 1 : 0;
}
