/* cuda_ops_mixers.c - the sequence ops of the CUDA op test (kv_store + attention, conv1d,
 * gated delta rule, SSD) against the CPU backend, the graph capture / replay path, the
 * device sampler inside a graph, and the speed figures. Part of test_cuda_ops (see test_cuda_ops.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/clock.h"
#include "kernels/backend_select.h"
#include "tests/device/cuda_ops_test.h"
#include "tests/test_kv.h"

/* ---- kv_store + attention ---- */

typedef struct {
    const char *name;
    int H, KV, D, cap, slots, window;
    float scale, softcap;
    int n_seqs, len[3], pos0[3], slot[3];
} att_cfg;

static void *att_dev(const void *h, size_t bytes) {
    void *d = gpu->ops->alloc(gpu, bytes);
    if (!d) abort();
    gpu->ops->upload(gpu, d, h, bytes);
    return d;
}

static void att_one(const att_cfg *c, dtype dt) {
    int kvw = c->KV * c->D, m = 0;
    for (int s = 0; s < c->n_seqs; s++) m += c->len[s];
    size_t csz = (size_t)c->slots * c->cap * kvw, qn = (size_t)m * c->H * c->D;
    size_t cbytes = csz * dtype_size(dt);
    /* Every cache row starts random: rows of earlier positions are the history, and a
     * kernel reading a wrong row reads other numbers than the CPU does. */
    float *kc0 = hrand(csz, 1.0f), *vc0 = hrand(csz, 1.0f);
    float *k = hrand((size_t)m * kvw, 1.0f), *v = hrand((size_t)m * kvw, 1.0f);
    float *q = hrand(qn, 2.0f), *out = hvec(qn);
    bk_kv hkv = {test_kv_half(kc0, csz, dt), test_kv_half(vc0, csz, dt), dt, c->cap, kvw};
    bk_kv dkv = {att_dev(hkv.k, cbytes), att_dev(hkv.v, cbytes), dt, c->cap, kvw};
    float *dk = gput(k, (size_t)m * kvw);
    float *dv = gput(v, (size_t)m * kvw), *dq = gput(q, qn), *dout = gput(out, qn);
    tbatch tb;
    tb_make(&tb, c->n_seqs, c->len, c->pos0, c->slot);
    cpu->ops->kv_store(cpu, &hkv, k, v, &tb.hb);
    cpu->ops->attention(cpu, out, q, &hkv, &tb.hb, c->H, c->KV, c->D, c->scale, c->window,
                        c->softcap);
    tb_dev(&tb);
    gpu->ops->kv_store(gpu, &dkv, dk, dv, &tb.db);
    gpu->ops->attention(gpu, dout, dq, &dkv, &tb.db, c->H, c->KV, c->D, c->scale, c->window,
                        c->softcap);
    float *got = gget(dout, qn);
    void *gkb = malloc(cbytes);
    if (!gkb) abort();
    gpu->ops->download(gpu, gkb, dkv.k, cbytes);
    float *gk = test_kv_widen(gkb, csz, dt), *wk = test_kv_widen(hkv.k, csz, dt);
    char name[96];
    snprintf(name, sizeof name, "%s, %s cache", c->name, dtn(dt));
    report("kv_store", name, gk, wk, csz, 0);
    report("attention", name, got, out, qn, TOL_ATT);
    free(kc0), free(vc0), free(k), free(v), free(q), free(out), free(got), free(gk), free(wk);
    free(gkb), free(hkv.k), free(hkv.v);
    gfree(dkv.k), gfree(dkv.v), gfree(dk), gfree(dv), gfree(dq), gfree(dout);
}

void test_attention(void) {
    const att_cfg cfgs[] = {
        {"qwen H8/2 D256, 3 seqs",
         8,
         2,
         256,
         64,
         3,
         0,
         0.0625f,
         0,
         3,
         {5, 1, 3},
         {0, 17, 40},
         {2, 0, 1}},
        {"H6/3 D20, 2 seqs", 6, 3, 20, 50, 2, 0, 0.2236f, 0, 2, {7, 2}, {3, 30}, {1, 0}},
        {"H8/1 D512 softcap 30, scale 1", 8, 1, 512, 32, 1, 0, 1.0f, 30.0f, 1, {4}, {10}, {0}},
        {"ring cap 10 window 8", 4, 2, 128, 10, 2, 8, 0.0884f, 0, 2, {3, 1}, {20, 50}, {0, 1}},
        {"nemotron H40/8 D128 decode", 40, 8, 128, 64, 1, 0, 0.0884f, 0, 1, {1}, {33}, {0}},
        {"decode at 3000 and 4095 (splits)",
         8,
         2,
         256,
         4096,
         2,
         0,
         0.0625f,
         0,
         2,
         {1, 1},
         {3000, 4095},
         {1, 0}},
        {"D1024 H2/1", 2, 1, 1024, 16, 1, 0, 0.03125f, 0, 1, {2}, {5}, {0}},
        {"prefill 513 tokens", 8, 2, 256, 600, 1, 0, 0.0625f, 0, 1, {513}, {0}, {0}},
        {"window 512 decode at 2000", 8, 1, 256, 2048, 1, 512, 0.0625f, 0, 1, {1}, {2000}, {0}},
        /* one per (row width, heads per kv head) kernel the dispatch can pick */
        {"D64 H3/3 (G 1)", 3, 3, 64, 40, 1, 0, 0.125f, 0, 1, {6}, {9}, {0}},
        {"D128 H16/4 (G 4)", 16, 4, 128, 40, 2, 0, 0.0884f, 0, 2, {2, 1}, {0, 30}, {1, 0}},
        {"D256 H2/2 (G 1)", 2, 2, 256, 40, 1, 0, 0.0625f, 0, 1, {3}, {5}, {0}},
        {"D192 H4/2 (G 2)", 4, 2, 192, 40, 1, 0, 0.0722f, 0, 1, {4}, {11}, {0}},
        {"D512 H2/2 (G 1)", 2, 2, 512, 24, 1, 0, 0.0442f, 0, 1, {2}, {7}, {0}},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        att_one(&cfgs[i], DTYPE_F32);
        att_one(&cfgs[i], DTYPE_BF16);
    }
}

/* ---- attn_prep: split, norms, RoPE and kv store in one op ---- */

typedef struct {
    const char *name;
    int H, KV, D, rot, gate, mode, v_norm, owner; /* mode -1: no q / k norms */
} ap_cfg;

/* One step of 3 sequences through attn_prep on both backends: the queries (and gates) and
 * the whole cache after it. A bf16 cache row may differ by the last bf16 bit where the f32
 * sums round apart; 8e-3 is that one step of the largest value, far below a wrong row. */
static void ap_one(const ap_cfg *c, dtype dt) {
    int len[3] = {4, 1, 2}, pos0[3] = {0, 13, 6}, slot[3] = {1, 2, 0}, m = 7, cap = 16;
    size_t qw = (size_t)c->H * c->D, kvw = (size_t)c->KV * c->D, csz = 3 * (size_t)cap * kvw;
    size_t qgn = (size_t)m * qw * (c->gate ? 2 : 1), qn = (size_t)m * qw;
    size_t cbytes = csz * dtype_size(dt);
    float *qg = hrand(qgn, 2.0f), *k = hrand((size_t)m * kvw, 2.0f),
          *v = hrand((size_t)m * kvw, 2.0f);
    float *q = c->gate ? hvec(qn) : hdup(qg, qn), *gate = hvec(qn), *c0 = hrand(csz, 1.0f);
    tw qn_w = wmake(DTYPE_BF16, c->D, 0, 0.5f), kn_w = wmake(DTYPE_F32, c->D, 0, 0.5f);
    float inv[512] = {0};
    for (int i = 0; i < c->rot / 2; i++) inv[i] = (float)pow(10000.0, -2.0 * i / c->rot);
    float *dinv = gput(inv, c->rot / 2 + 1);
    bk_kv hkv = {test_kv_half(c0, csz, dt), test_kv_half(c0, csz, dt), dt, cap, (int)kvw};
    bk_kv dkv = {att_dev(hkv.k, cbytes), att_dev(hkv.v, cbytes), dt, cap, (int)kvw};
    float *dqg = gput(qg, qgn), *dk = gput(k, (size_t)m * kvw), *dv = gput(v, (size_t)m * kvw);
    float *dq = c->gate ? gput(NULL, qn) : gput(qg, qn), *dgate = gput(NULL, qn);
    bk_qkv_prep hp = {.H = c->H,
                      .KV = c->KV,
                      .D = c->D,
                      .q_norm = c->mode >= 0 ? &qn_w.h : NULL,
                      .k_norm = c->mode >= 0 ? &kn_w.h : NULL,
                      .norm_mode = c->mode,
                      .v_norm = c->v_norm,
                      .eps = 1e-6f,
                      .inv_freq = inv,
                      .rot = c->rot};
    bk_qkv_prep dp = hp;
    dp.q_norm = c->mode >= 0 ? &qn_w.d : NULL, dp.k_norm = c->mode >= 0 ? &kn_w.d : NULL;
    dp.inv_freq = dinv;
    tbatch tb;
    tb_make(&tb, 3, len, pos0, slot);
    cpu->ops->attn_prep(cpu, q, c->gate ? gate : NULL, qg, k, v, c->owner ? &hkv : NULL, &tb.hb,
                        &hp);
    tb_dev(&tb);
    gpu->ops->attn_prep(gpu, dq, c->gate ? dgate : NULL, dqg, dk, dv, c->owner ? &dkv : NULL,
                        &tb.db, &dp);
    float *gq = gget(dq, qn), *gg = gget(dgate, qn);
    char name[96];
    snprintf(name, sizeof name, "%s, %s cache", c->name, dtn(dt));
    report("attn_prep q", name, gq, q, qn, TOL_ATT);
    if (c->gate) report("attn_prep gate", name, gg, gate, qn, 0);
    void *gb = malloc(cbytes);
    if (!gb) abort();
    for (int half = 0; half < 2; half++) { /* k, then v */
        gpu->ops->download(gpu, gb, half ? dkv.v : dkv.k, cbytes);
        float *got = test_kv_widen(gb, csz, dt),
              *want = test_kv_widen(half ? hkv.v : hkv.k, csz, dt);
        report(half ? "attn_prep v cache" : "attn_prep k cache", name, got, want, csz,
               dt == DTYPE_BF16 ? 8e-3 : TOL_ATT);
        free(got), free(want);
    }
    free(qg), free(k), free(v), free(q), free(gate), free(c0), free(gq), free(gg), free(gb);
    free(hkv.k), free(hkv.v), wfree(&qn_w), wfree(&kn_w);
    gfree(dinv), gfree(dkv.k), gfree(dkv.v), gfree(dqg), gfree(dk), gfree(dv), gfree(dq);
    gfree(dgate);
}

void test_attn_prep(void) {
    const ap_cfg cfgs[] = {
        {"qwen3.5: gate split, 1+w norms, RoPE 64 of 256", 8, 2, 256, 64, 1, BK_NORM_ONE_PLUS, 0,
         1},
        {"gemma4 sliding: norms, v_norm, RoPE 256", 8, 1, 256, 256, 0, BK_NORM_PLAIN, 1, 1},
        {"gemma4 full: D 512", 8, 1, 512, 512, 0, BK_NORM_PLAIN, 1, 1},
        {"gemma4 kv-shared: queries only", 8, 1, 256, 256, 0, BK_NORM_PLAIN, 1, 0},
        {"no norms, no RoPE", 4, 2, 64, 0, 0, -1, 0, 1},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        ap_one(&cfgs[i], DTYPE_F32);
        ap_one(&cfgs[i], DTYPE_BF16);
    }
}

/* ---- conv1d ---- */

void test_conv1d(void) {
    const struct {
        int C, K, act, bias, n_seqs, len[3], pos0[3], slot[3];
    } cs[] = {
        {70, 4, 1, 0, 3, {5, 1, 2}, {0, 9, 3}, {1, 2, 0}}, {33, 3, 0, 1, 1, {1}, {4}, {0}},
        {6144, 4, 1, 0, 2, {100, 1}, {0, 7}, {0, 2}},      {20, 6, 1, 1, 2, {2, 9}, {5, 0}, {2, 1}},
        {64, 4, 1, 1, 3, {1, 3, 4}, {7, 0, 4}, {2, 0, 1}}, /* a decode step: one kernel */
    };
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        int C = cs[ci].C, K = cs[ci].K, ld = C + 6, m = 0, slots = 3;
        for (int s = 0; s < cs[ci].n_seqs; s++) m += cs[ci].len[s];
        tw w = wmake(DTYPE_BF16, C, K, 0.5f), b = wmake(DTYPE_F32, C, 0, 0.5f);
        size_t ssz = (size_t)slots * (K - 1) * C;
        float *x = hrand((size_t)m * ld, 1.0f), *st = hrand(ssz, 1.0f), *out = hvec((size_t)m * C);
        float *dx = gput(x, (size_t)m * ld), *dst = gput(st, ssz), *dout = gput(out, (size_t)m * C);
        tbatch tb;
        tb_make(&tb, cs[ci].n_seqs, cs[ci].len, cs[ci].pos0, cs[ci].slot);
        cpu->ops->conv1d(cpu, out, x, ld, &w.h, cs[ci].bias ? &b.h : NULL, st, &tb.hb, C, K,
                         cs[ci].act);
        tb_dev(&tb);
        gpu->ops->conv1d(gpu, dout, dx, ld, &w.d, cs[ci].bias ? &b.d : NULL, dst, &tb.db, C, K,
                         cs[ci].act);
        float *go = gget(dout, (size_t)m * C), *gs = gget(dst, ssz);
        char shape[64];
        snprintf(shape, sizeof shape, "C %d K %d act %d bias %d, %d tokens", C, K, cs[ci].act,
                 cs[ci].bias, m);
        report("conv1d out", shape, go, out, (size_t)m * C, TOL_EW);
        report("conv1d window", shape, gs, st, ssz, 0);
        free(x), free(st), free(out), free(go), free(gs), gfree(dx), gfree(dst), gfree(dout);
        wfree(&w), wfree(&b);
    }
}

/* ---- gated delta rule ---- */

static const struct {
    int Hk, Hv, dk, dv, n_seqs, len[3], pos0[3], slot[3];
} gd_cases[] = {
    {2, 4, 16, 32, 3, {5, 1, 3}, {0, 9, 2}, {2, 0, 1}}, /* qwen35_tiny */
    {4, 4, 32, 32, 1, {2}, {0}, {0}},
    {16, 32, 128, 128, 2, {1, 1}, {40, 7}, {1, 0}}, /* 4B / 9B decode */
    {16, 16, 128, 128, 1, {37}, {0}, {2}},          /* 0.8B / 2B prefill */
    {1, 3, 48, 40, 2, {9, 4}, {0, 3}, {0, 1}},      /* awkward */
    {2, 4, 192, 64, 1, {3}, {0}, {0}},              /* dk 129..256: 64 rows a warp */
    {1, 1, 300, 20, 1, {3}, {0}, {1}},              /* dk > 256: generic kernel */
};

/* A delta-rule op's output [on] and state [ssz] on the device against the CPU's. */
static void gd_report(const char *op, int Hk, int Hv, int dk, int dv, int m, const float *dout,
                      const float *out, size_t on, const float *dst, const float *st, size_t ssz) {
    float *go = gget(dout, on), *gs = gget(dst, ssz);
    char shape[64], what[32];
    snprintf(shape, sizeof shape, "Hk %d Hv %d dk %d dv %d, %d tokens", Hk, Hv, dk, dv, m);
    snprintf(what, sizeof what, "%s out", op);
    report(what, shape, go, out, on, TOL_REC);
    snprintf(what, sizeof what, "%s state", op);
    report(what, shape, gs, st, ssz, TOL_REC);
    free(go), free(gs);
}

void test_gated_delta(void) {
    const __typeof__(gd_cases[0]) *cs = gd_cases;
    for (size_t ci = 0; ci < sizeof gd_cases / sizeof gd_cases[0]; ci++) {
        int Hk = cs[ci].Hk, Hv = cs[ci].Hv, dk = cs[ci].dk, dv = cs[ci].dv, m = 0, slots = 3;
        for (int s = 0; s < cs[ci].n_seqs; s++) m += cs[ci].len[s];
        int ld_qk = Hk * dk + 3, ld_v = Hv * dv + 5;
        float *q = hrand((size_t)m * ld_qk, 1.0f), *k = hrand((size_t)m * ld_qk, 1.0f);
        for (int t = 0; t < m; t++) /* l2-normalised heads, q scaled by dk^-1/2, as the model */
            for (int h = 0; h < Hk; h++) {
                float *qh = q + (size_t)t * ld_qk + (size_t)h * dk,
                      *kh = k + (size_t)t * ld_qk + (size_t)h * dk;
                double sq = 0, sk = 0;
                for (int i = 0; i < dk; i++) sq += qh[i] * qh[i], sk += kh[i] * kh[i];
                for (int i = 0; i < dk; i++)
                    qh[i] *= (float)(1.0 / sqrt(sq * dk)), kh[i] *= (float)(1.0 / sqrt(sk));
            }
        float *v = hrand((size_t)m * ld_v, 1.0f), *g = hvec((size_t)m * Hv),
              *be = hvec((size_t)m * Hv);
        for (int i = 0; i < m * Hv; i++)
            g[i] = -(rnd() + 1.0f) * 0.5f, be[i] = (rnd() + 1.0f) * 0.5f;
        size_t ssz = (size_t)slots * Hv * dk * dv, on = (size_t)m * Hv * dv;
        float *st = hrand(ssz, 0.1f), *out = hvec(on);
        float *dq = gput(q, (size_t)m * ld_qk), *dk_ = gput(k, (size_t)m * ld_qk),
              *dv_ = gput(v, (size_t)m * ld_v);
        float *dg = gput(g, (size_t)m * Hv), *dbe = gput(be, (size_t)m * Hv), *dst = gput(st, ssz),
              *dout = gput(out, on);
        tbatch tb;
        tb_make(&tb, cs[ci].n_seqs, cs[ci].len, cs[ci].pos0, cs[ci].slot);
        cpu->ops->gated_delta(cpu, out, q, k, ld_qk, v, ld_v, g, be, st, &tb.hb, Hk, Hv, dk, dv);
        tb_dev(&tb);
        gpu->ops->gated_delta(gpu, dout, dq, dk_, ld_qk, dv_, ld_v, dg, dbe, dst, &tb.db, Hk, Hv,
                              dk, dv);
        gd_report("gated_delta", Hk, Hv, dk, dv, m, dout, out, on, dst, st, ssz);
        free(q), free(k), free(v), free(g), free(be), free(st), free(out);
        gfree(dq), gfree(dk_), gfree(dv_), gfree(dg), gfree(dbe), gfree(dst), gfree(dout);
    }
}

/* ---- SSD ---- */

void test_ssd(void) {
    SKIP_WITHOUT(ssd)
    const struct {
        int H, P, N, G, n_seqs, len[3], pos0[3], slot[3];
        float dt_min;
    } cs[] = {
        {6, 10, 20, 2, 2, {4, 1}, {0, 5}, {1, 0}, 0.0f},
        {4, 80, 128, 1, 1, {1}, {9}, {2}, 1e-3f}, /* Nemotron heads, decode */
        {4, 80, 128, 1, 2, {20, 3}, {0, 0}, {0, 1}, 0.0f},
        {8, 16, 256, 4, 1, {6}, {0}, {0}, 0.5f}, /* N 256: 8 floats per lane */
        {2, 5, 300, 1, 1, {3}, {0}, {1}, 0.0f},  /* N > 256: generic kernel */
    };
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        int H = cs[ci].H, P = cs[ci].P, N = cs[ci].N, G = cs[ci].G, m = 0, slots = 3;
        for (int s = 0; s < cs[ci].n_seqs; s++) m += cs[ci].len[s];
        int ld_x = H * P + 2, ld_bc = G * N + 4, ld_dt = H + 1;
        tw A = wmake(DTYPE_F32, H, 0, 1.0f), dtb = wmake(DTYPE_BF16, H, 0, 1.0f),
           D = wmake(DTYPE_F32, H, 0, 1.0f);
        float *x = hrand((size_t)m * ld_x, 1.0f), *B = hrand((size_t)m * ld_bc, 1.0f);
        float *C = hrand((size_t)m * ld_bc, 1.0f), *dt = hrand((size_t)m * ld_dt, 2.0f);
        size_t ssz = (size_t)slots * H * P * N, yn = (size_t)m * H * P;
        float *st = hrand(ssz, 0.1f), *y = hvec(yn);
        float *dx = gput(x, (size_t)m * ld_x), *dB = gput(B, (size_t)m * ld_bc),
              *dC = gput(C, (size_t)m * ld_bc);
        float *ddt = gput(dt, (size_t)m * ld_dt), *dst = gput(st, ssz), *dy = gput(y, yn);
        tbatch tb;
        tb_make(&tb, cs[ci].n_seqs, cs[ci].len, cs[ci].pos0, cs[ci].slot);
        if (cpu->ops->ssd)
            cpu->ops->ssd(cpu, y, x, ld_x, B, C, ld_bc, dt, ld_dt, &A.h, &dtb.h, &D.h, st, &tb.hb,
                          H, P, N, G, cs[ci].dt_min);
        else
            ref_ssd(y, x, ld_x, B, C, ld_bc, dt, ld_dt, &A.h, &dtb.h, &D.h, st, &tb.hb, H, P, N, G,
                    cs[ci].dt_min);
        tb_dev(&tb);
        gpu->ops->ssd(gpu, dy, dx, ld_x, dB, dC, ld_bc, ddt, ld_dt, &A.d, &dtb.d, &D.d, dst, &tb.db,
                      H, P, N, G, cs[ci].dt_min);
        float *gy = gget(dy, yn), *gs = gget(dst, ssz);
        char shape[80];
        snprintf(shape, sizeof shape, "H %d P %d N %d G %d, %d tokens%s", H, P, N, G, m,
                 cpu->ops->ssd ? "" : " (local ref)");
        report("ssd y", shape, gy, y, yn, TOL_REC);
        report("ssd state", shape, gs, st, ssz, TOL_REC);
        free(x), free(B), free(C), free(dt), free(st), free(y), free(gy), free(gs);
        gfree(dx), gfree(dB), gfree(dC), gfree(ddt), gfree(dst), gfree(dy);
        wfree(&A), wfree(&dtb), wfree(&D);
    }
}

/* The fused DeltaNet core (l2norm of q and k, the gates, the delta rule) on raw q, k, a
 * and b against the CPU's four ops, on the delta rule's cases (dk > 256: the unfused ops). */
void test_gdn(void) {
    for (size_t ci = 0; ci < sizeof gd_cases / sizeof gd_cases[0]; ci++) {
        int Hk = gd_cases[ci].Hk, Hv = gd_cases[ci].Hv, dk = gd_cases[ci].dk;
        int dv = gd_cases[ci].dv, m = 0, slots = 3;
        for (int s = 0; s < gd_cases[ci].n_seqs; s++) m += gd_cases[ci].len[s];
        int ld = 2 * Hk * dk + Hv * dv; /* q | k | v in one row, as the conv leaves them */
        size_t xn = (size_t)m * ld, gn = (size_t)m * Hv, ssz = (size_t)slots * Hv * dk * dv;
        size_t on = (size_t)m * Hv * dv;
        float *x = hrand(xn, 1.0f), *a = hrand(gn, 2.0f), *bb = hrand(gn, 2.0f);
        float *st = hrand(ssz, 0.1f), *out = hvec(on), *g = hvec(gn), *be = hvec(gn);
        tw A_log = wmake(DTYPE_F32, Hv, 0, 1.0f), dt_bias = wmake(DTYPE_BF16, Hv, 0, 1.0f);
        float *dx = gput(x, xn), *da = gput(a, gn), *dbb = gput(bb, gn), *dst = gput(st, ssz);
        float *dout = gput(out, on), *dg = gput(g, gn), *dbe = gput(be, gn);
        float qs = 1.0f / sqrtf((float)dk);
        tbatch tb;
        tb_make(&tb, gd_cases[ci].n_seqs, gd_cases[ci].len, gd_cases[ci].pos0, gd_cases[ci].slot);
        cpu->ops->gdn(cpu, out, x, x + Hk * dk, ld, x + 2 * Hk * dk, ld, a, bb, &A_log.h,
                      &dt_bias.h, g, be, st, &tb.hb, Hk, Hv, dk, dv, qs);
        tb_dev(&tb);
        gpu->ops->gdn(gpu, dout, dx, dx + Hk * dk, ld, dx + 2 * Hk * dk, ld, da, dbb, &A_log.d,
                      &dt_bias.d, dg, dbe, dst, &tb.db, Hk, Hv, dk, dv, qs);
        gd_report("gdn", Hk, Hv, dk, dv, m, dout, out, on, dst, st, ssz);
        free(x), free(a), free(bb), free(st), free(out), free(g), free(be);
        gfree(dx), gfree(da), gfree(dbb), gfree(dst), gfree(dout), gfree(dg), gfree(dbe);
        wfree(&A_log), wfree(&dt_bias);
    }
}

/* ---- graphs, and the device sampler inside one ---- */

enum { GT = 3, GH = 64, GV = 500, GN = 300 };
typedef struct {
    tw emb, nw, W;
    float *dinv, *dx, *dy;
    tbatch tb;
} graph_fix;

/* A miniature decode step: embed, norm, rope at the step's positions, head, download. */
static void graph_forward(graph_fix *f, const int32_t *ids, int pos, float *logits, int extra) {
    int len = GT, slot = 0;
    tb_make(&f->tb, 1, &len, &pos, &slot);
    tb_dev(&f->tb);
    gpu->ops->embed(gpu, f->dx, &f->emb.d, ids, GT);
    gpu->ops->rmsnorm(gpu, f->dx, f->dx, &f->nw.d, GT, GH, GH, 1e-6f, BK_NORM_ONE_PLUS);
    gpu->ops->rope(gpu, f->dx, &f->tb.db, f->dinv, 4, 16, 16, GH);
    if (extra) gpu->ops->add(gpu, f->dx, f->dx, f->dx, (size_t)GT * GH);
    gpu->ops->matmul(gpu, f->dy, f->dx, &f->W.d, GT);
    gpu->ops->download(gpu, logits, f->dy, sizeof(float) * GT * GN);
}

/* The miniature model of the graph tests: embedding, norm, head, RoPE frequencies, and
 * zeroed activations for rows tokens. */
static void graph_fix_init(graph_fix *f, int rows) {
    f->emb = wmake(DTYPE_BF16, GV, GH, 1.0f);
    f->nw = wmake(DTYPE_F32, GH, 0, 0.5f);
    f->W = wmake(DTYPE_BF16, GN, GH, 0.2f);
    float inv[8];
    for (int i = 0; i < 8; i++) inv[i] = (float)pow(10000.0, -2.0 * i / 16);
    f->dinv = gput(inv, 8), f->dx = gput(NULL, (size_t)rows * GH);
    f->dy = gput(NULL, (size_t)rows * GN);
}

static void graph_fix_free(graph_fix *f) {
    gfree(f->dinv), gfree(f->dx), gfree(f->dy), wfree(&f->emb), wfree(&f->nw), wfree(&f->W);
}

void test_graph(void) {
    graph_fix f;
    graph_fix_init(&f, GT);
    int32_t ids[4][GT];
    static float ref[4][GT * GN], got[GT * GN];
    for (int s = 0; s < 4; s++) {
        for (int i = 0; i < GT; i++) ids[s][i] = (int32_t)((rnd() + 1.0f) * 0.5f * (GV - 1));
        graph_forward(&f, ids[s], 5 + GT * s, ref[s], 0); /* eager */
    }
    strata_err ge = {0};
    for (int s = 0; s < 3; s++) {
        int mode = backend_graph_begin(gpu, GT, &ge);
        graph_forward(&f, ids[s], 5 + GT * s, got, 0);
        int rc = backend_graph_end(gpu, 1, &ge);
        char what[64];
        snprintf(what, sizeof what, "step %d: %s (begin %d, end %d)", s, s ? "replay" : "capture",
                 mode, rc);
        if (mode != (s ? 1 : 0) || rc) {
            printf("graph %s: %s  FAIL\n", what, ge.msg);
            report("graph", what, got, ref[s], 0, -1);
        } else {
            report("graph", what, got, ref[s], GT * GN, 0);
        }
    }
    /* Same key, another op sequence: refused before anything runs, then recaptured. */
    int mode = backend_graph_begin(gpu, GT, &ge);
    graph_forward(&f, ids[3], 5 + GT * 3, got, 1);
    int rc = backend_graph_end(gpu, 1, &ge);
    float flag = mode == 1 && rc != 0 ? 0.0f : 1.0f, zero = 0.0f;
    report("graph mismatch refused", "extra op under a captured key", &flag, &zero, 1, 0);
    mode = backend_graph_begin(gpu, GT, &ge);
    graph_forward(&f, ids[3], 5 + GT * 3, got, 0);
    rc = backend_graph_end(gpu, 1, &ge);
    report("graph recaptured", mode == 0 && rc == 0 ? "after the refusal" : "FAILED to recapture",
           got, ref[3], mode == 0 && rc == 0 ? GT * GN : 0, mode == 0 && rc == 0 ? 0 : -1);
    /* A forward ending in the device sampler, captured under its own key and replayed with
     * other ids, positions and requests (staged, so a replay reads the new ones): each
     * step's tokens must be those of the same forward and request run eagerly. */
    if (gpu->ops->sample) {
        bk_sample_res want[GT], gotr[GT];
        float wt[3 * GT], gt[3 * GT];
        for (int s = 0; s < 3; s++) {
            bk_sample_req rq[GT];
            for (int r = 0; r < GT; r++)
                rq[r] = (bk_sample_req){.temperature = s ? 0.5f * (float)(s + r) : 0.0f,
                                        .top_p = s == 2 ? 0.9f : 1.0f,
                                        .top_k = s == 1 ? 7 : 0,
                                        .repetition_penalty = 1.0f,
                                        .logprobs = 1,
                                        .top_logprobs = r,
                                        .seed = 11u + (unsigned)s,
                                        .draw = (uint64_t)(3 * s + r)};
            graph_forward(&f, ids[s], 5 + GT * s, got, 0);
            gpu->ops->sample(gpu, want, f.dy, rq, GT, GN);
            gget(f.dy, 1); /* eager: wait */
            int mode = backend_graph_begin(gpu, GT + 100, &ge);
            graph_forward(&f, ids[s], 5 + GT * s, got, 0);
            gpu->ops->sample(gpu, gotr, f.dy, rq, GT, GN);
            int rc = backend_graph_end(gpu, 1, &ge);
            for (int r = 0; r < GT; r++) {
                wt[s * GT + r] = (float)want[r].token;
                gt[s * GT + r] = mode == (s ? 1 : 0) && !rc ? (float)gotr[r].token : -2.0f;
            }
            if (mode != (s ? 1 : 0) || rc) printf("    sampled graph step %d: %s\n", s, ge.msg);
        }
        report("graph sampled", "capture, 2 replays, new requests", gt, wt, 3 * GT, 0);
    }
    graph_fix_free(&f);
}

/* ---- decode steps chained on the device ---- */

enum { CN = 3, CSTEPS = 5 };
static const int chain_slot[CN] = {1, 3, 4};

/* A decode step of CN sequences (one token each), ids[i] < 0 fed from the step before's
 * picks, sampled (greedy, and a seeded top-k the device keeps) into fed and res. */
static void chain_forward(graph_fix *f, const int32_t *ids, int step, int32_t *fed,
                          bk_sample_res *res) {
    int len[CN], pos[CN];
    bk_sample_req rq[CN];
    for (int i = 0; i < CN; i++) {
        len[i] = 1, pos[i] = 7 + step + 5 * i;
        rq[i] = (bk_sample_req){.temperature = i == 2 ? 0.8f : 0.0f,
                                .top_p = 1.0f,
                                .top_k = 5,
                                .repetition_penalty = 1.0f,
                                .logprobs = 1,
                                .seed = 5,
                                .draw = (uint64_t)step,
                                .feed = fed + chain_slot[i]};
    }
    tb_make(&f->tb, CN, len, pos, chain_slot);
    tb_dev(&f->tb);
    gpu->ops->embed_fed(gpu, f->dx, &f->emb.d, ids, fed, &f->tb.db, CN);
    gpu->ops->rmsnorm(gpu, f->dx, f->dx, &f->nw.d, CN, GH, GH, 1e-6f, BK_NORM_ONE_PLUS);
    gpu->ops->rope(gpu, f->dx, &f->tb.db, f->dinv, 4, 16, 16, GH);
    gpu->ops->matmul(gpu, f->dy, f->dx, &f->W.d, CN);
    gpu->ops->sample(gpu, res, f->dy, rq, CN, GN);
}

/* Steps launched behind each other as graphs that do not wait (two in flight at a time),
 * every input id after the first step fed on the device, results taken one step behind
 * by graph_sync (and once by an eager download, which owes them first): each step's
 * picks must be those of the same steps run eagerly with the ids on the host. */
void test_graph_chain(void) {
    if (!gpu->ops->sample || !gpu->ops->embed_fed || !gpu->ops->graph_sync) return;
    graph_fix f;
    graph_fix_init(&f, CN);
    int32_t *fed = gpu->ops->alloc(gpu, 8 * sizeof(int32_t));
    int32_t ids[CN], fed_ids[CN] = {-1, -1, -1};
    bk_sample_res want[CSTEPS][CN], got[CSTEPS][CN];
    for (int i = 0; i < CN; i++) ids[i] = 11 + 97 * i;
    for (int s = 0; s < CSTEPS; s++) { /* eager, the host feeding each step */
        chain_forward(&f, ids, s, fed, want[s]);
        free(gget(f.dy, 1));
        for (int i = 0; i < CN; i++) ids[i] = want[s][i].token;
    }
    for (int i = 0; i < CN; i++) ids[i] = 11 + 97 * i;
    memset(got, 0xff, sizeof got);
    strata_err ge = {0};
    int bad = 0, synced = 0;
    for (int s = 0; s < CSTEPS; s++) {
        int mode = backend_graph_begin(gpu, GT + 200, &ge);
        chain_forward(&f, s ? fed_ids : ids, s, fed, got[s]);
        if (mode < 0 || backend_graph_end(gpu, 0, &ge)) {
            printf("    chained step %d: %s\n", s, ge.msg);
            bad = 1;
            break;
        }
        if (s == 3) { /* an eager download completes both steps in flight first */
            free(gget(f.dx, 1));
            bad |= got[2][0].token < 0 || got[3][0].token < 0;
        }
        while (s > 0 && synced < s) bad |= backend_graph_sync(gpu, &ge) != 0, synced++;
    }
    while (synced < CSTEPS) bad |= backend_graph_sync(gpu, &ge) != 0, synced++;
    bad |= backend_graph_sync(gpu, &ge) != 0; /* nothing in flight: at once */
    float wt[2 * CSTEPS * CN], gt[2 * CSTEPS * CN];
    for (int s = 0; s < CSTEPS; s++)
        for (int i = 0; i < CN; i++) {
            wt[2 * (s * CN + i)] = (float)want[s][i].token;
            wt[2 * (s * CN + i) + 1] = want[s][i].logprob;
            gt[2 * (s * CN + i)] = bad ? -2.0f : (float)got[s][i].token;
            gt[2 * (s * CN + i) + 1] = got[s][i].logprob;
        }
    report("graph chained", "5 steps fed on the device, 2 in flight", gt, wt, 2 * CSTEPS * CN, 0);
    gfree(fed);
    graph_fix_free(&f);
}

/* ---- speed (printed, not judged) ---- */

static void sync_gpu(const float *d) {
    float t;
    gpu->ops->download(gpu, &t, d, sizeof t);
}

void test_speed(void) {
    double bw = gpu->ops->read_bandwidth ? gpu->ops->read_bandwidth(gpu, (size_t)1 << 30) : 0;
    printf("speed: device copy bandwidth %.0f GB/s (read + write)\n", bw);
    int n = 8192, k = 8192, reps = 20;
    tw w = wmake(DTYPE_BF16, n, k, 0.05f);
    float *x = hrand((size_t)8 * k, 1.0f), *dx = gput(x, (size_t)8 * k),
          *dy = gput(x, (size_t)8 * n);
    for (int m = 1; m <= 8; m *= 2) {
        gpu->ops->matmul(gpu, dy, dx, &w.d, m);
        sync_gpu(dy);
        double t0 = strata_now();
        for (int r = 0; r < reps; r++) gpu->ops->matmul(gpu, dy, dx, &w.d, m);
        sync_gpu(dy);
        double t = (strata_now() - t0) / reps, gbs = (double)n * k * 2 / t / 1e9;
        printf("speed: gemv bf16 [8192 x 8192] m %d: %.1f us, %.0f GB/s = %.2f of copy bandwidth\n",
               m, t * 1e6, gbs, bw > 0 ? gbs / bw : 0);
    }
    free(x), gfree(dx), gfree(dy), wfree(&w);
    /* prefill GEMM of a Qwen3.5-2B MLP up projection: m 1024, W [6144, 2048] */
    int m = 1024;
    n = 6144, k = 2048;
    w = wmake(DTYPE_BF16, n, k, 0.05f);
    x = hrand((size_t)m * k, 1.0f), dx = gput(x, (size_t)m * k), dy = gput(NULL, (size_t)m * n);
    gpu->ops->matmul(gpu, dy, dx, &w.d, m);
    sync_gpu(dy);
    double t0 = strata_now();
    for (int r = 0; r < 10; r++) gpu->ops->matmul(gpu, dy, dx, &w.d, m);
    sync_gpu(dy);
    double t = (strata_now() - t0) / 10;
    printf("speed: bf16 GEMM m %d [%d x %d] (x rounded to bf16): %.3f ms, %.0f TFLOP/s of the "
           "product\n",
           m, n, k, t * 1e3, 2.0 * m * n * k / t / 1e12);
    free(x), gfree(dx), gfree(dy), wfree(&w);
    /* decode attention at position 4000 and the delta rule, one token */
    {
        int H = 8, KV = 2, D = 256, cap = 4096, len = 1, pos = 4000, slot = 0;
        size_t csz = (size_t)cap * KV * D;
        float *dkc = gput(NULL, csz), *dvc = gput(NULL, csz), *dq = gput(NULL, (size_t)H * D),
              *dout = gput(NULL, (size_t)H * D);
        tbatch tb;
        tb_make(&tb, 1, &len, &pos, &slot);
        tb_dev(&tb);
        for (int bf = 0; bf < 2; bf++) { /* a bf16 cache is the same buffers read as half */
            bk_kv kv = {dkc, dvc, bf ? DTYPE_BF16 : DTYPE_F32, cap, KV * D};
            gpu->ops->attention(gpu, dout, dq, &kv, &tb.db, H, KV, D, 0.0625f, 0, 0);
            sync_gpu(dout);
            t0 = strata_now();
            for (int r = 0; r < 50; r++)
                gpu->ops->attention(gpu, dout, dq, &kv, &tb.db, H, KV, D, 0.0625f, 0, 0);
            sync_gpu(dout);
            t = (strata_now() - t0) / 50;
            printf("speed: decode attention H8/2 D256 at position 4000, %s cache: %.1f us (%.0f "
                   "GB/s of cache)\n",
                   bf ? "bf16" : "f32", t * 1e6, 2.0 * 4001 * KV * D * (bf ? 2 : 4) / t / 1e9);
        }
        gfree(dkc), gfree(dvc), gfree(dq), gfree(dout);
    }
    for (int T = 1; T <= 1024; T *= 1024) {
        int Hk = 16, Hv = 32, dk = 128, dv = 128, slot = 0, pos = 0;
        float *dq = gput(NULL, (size_t)T * Hk * dk), *dk_ = gput(NULL, (size_t)T * Hk * dk);
        float *dv_ = gput(NULL, (size_t)T * Hv * dv), *dg = gput(NULL, (size_t)T * Hv);
        float *dbe = gput(NULL, (size_t)T * Hv), *dst = gput(NULL, (size_t)Hv * dk * dv);
        float *dout = gput(NULL, (size_t)T * Hv * dv);
        tbatch tb;
        tb_make(&tb, 1, &T, &pos, &slot);
        tb_dev(&tb);
        gpu->ops->gated_delta(gpu, dout, dq, dk_, Hk * dk, dv_, Hv * dv, dg, dbe, dst, &tb.db, Hk,
                              Hv, dk, dv);
        sync_gpu(dout);
        t0 = strata_now();
        for (int r = 0; r < 10; r++)
            gpu->ops->gated_delta(gpu, dout, dq, dk_, Hk * dk, dv_, Hv * dv, dg, dbe, dst, &tb.db,
                                  Hk, Hv, dk, dv);
        sync_gpu(dout);
        t = (strata_now() - t0) / 10;
        printf("speed: gated_delta Hv 32 dk dv 128, %d tokens: %.1f us\n", T, t * 1e6);
        gfree(dq), gfree(dk_), gfree(dv_), gfree(dg), gfree(dbe), gfree(dst), gfree(dout);
    }
}
