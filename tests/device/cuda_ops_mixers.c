/* cuda_ops_mixers.c - the sequence ops of the CUDA op test (kv_store + attention and
 * attn_prep over slot rings and paged pools, conv1d, gated delta rule, SSD) against the
 * CPU backend, the graph capture / replay path (paged decode steps included), the device
 * sampler inside a graph, and the speed figures. Part of test_cuda_ops (see
 * test_cuda_ops.c). */
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

/* kv_store of the step's k and v into kv, then attention of q over it, on backend b. */
static void att_step(backend *b, const bk_kv *kv, const float *k, const float *v, const float *q,
                     float *out, const bk_batch *bt, int H, int KV, int D, float scale, int window,
                     float softcap) {
    b->ops->kv_store(b, kv, k, v, bt);
    b->ops->attention(b, out, q, kv, bt, H, KV, D, scale, window, softcap);
}

/* table: the step also carries a block table (for another, paged cache), which a ring
 * cache must not be misled by. */
static void att_one_t(const att_cfg *c, dtype dt, int table, double tol) {
    int kvw = c->KV * c->D, m = 0;
    for (int s = 0; s < c->n_seqs; s++) m += c->len[s];
    size_t csz = (size_t)c->slots * c->cap * kvw, qn = (size_t)m * c->H * c->D;
    size_t cbytes = csz * dtype_size(dt);
    /* Every cache row starts random: rows of earlier positions are the history, and a
     * kernel reading a wrong row reads other numbers than the CPU does. */
    float *kc0 = hrand(csz, 1.0f), *vc0 = hrand(csz, 1.0f);
    float *k = hrand((size_t)m * kvw, 1.0f), *v = hrand((size_t)m * kvw, 1.0f);
    float *q = hrand(qn, 2.0f), *out = hvec(qn);
    bk_kv hkv = {test_kv_half(kc0, csz, dt), test_kv_half(vc0, csz, dt), dt, c->cap, kvw, 0};
    bk_kv dkv = {att_dev(hkv.k, cbytes), att_dev(hkv.v, cbytes), dt, c->cap, kvw, 0};
    float *dk = gput(k, (size_t)m * kvw);
    float *dv = gput(v, (size_t)m * kvw), *dq = gput(q, qn), *dout = gput(out, qn);
    tbatch tb;
    tb_make(&tb, c->n_seqs, c->len, c->pos0, c->slot);
    if (table) {
        const int32_t blk[3 * 4] = {5, 2, 7, 1, 0, 3, 6, 4, 9, 8, 11, 10};
        tb_blocks(&tb, 4, blk);
    }
    att_step(cpu, &hkv, k, v, q, out, &tb.hb, c->H, c->KV, c->D, c->scale, c->window, c->softcap);
    tb_dev(&tb);
    att_step(gpu, &dkv, dk, dv, dq, dout, &tb.db, c->H, c->KV, c->D, c->scale, c->window,
             c->softcap);
    float *got = gget(dout, qn);
    void *gkb = malloc(cbytes);
    if (!gkb) abort();
    gpu->ops->download(gpu, gkb, dkv.k, cbytes);
    float *gk = test_kv_widen(gkb, csz, dt), *wk = test_kv_widen(hkv.k, csz, dt);
    char name[96];
    snprintf(name, sizeof name, "%s, %s cache%s", c->name, dtn(dt),
             table ? ", a block table beside" : "");
    report("kv_store", name, gk, wk, csz, 0);
    report("attention", name, got, out, qn, tol);
    free(kc0), free(vc0), free(k), free(v), free(q), free(out), free(got), free(gk), free(wk);
    free(gkb), free(hkv.k), free(hkv.v);
    gfree(dkv.k), gfree(dkv.v), gfree(dk), gfree(dv), gfree(dq), gfree(dout);
}

static void att_one(const att_cfg *c, dtype dt, int table) { att_one_t(c, dt, table, TOL_ATT); }
static void att_one_tol(const att_cfg *c, dtype dt, double tol) { att_one_t(c, dt, 0, tol); }

/* ---- the paged layout: pool blocks through a scrambled block table ---- */

static int pg_gcd(int a, int b) {
    while (b) {
        int r = a % b;
        a = b, b = r;
    }
    return a;
}

/* A block table for n_seqs sequences whose positions reach top[s] (exclusive): the u-th
 * block taken is pool block (u · stride + 3) % n_blocks (not in order, not at its own
 * index), each sequence taking the ones it needs in turn; with share > 0 the last
 * sequence's first share entries are the first sequence's (a shared prefix, written by
 * neither). Entries past a sequence's need name a pool block nobody took, so a row read
 * through them is wrong. Aborts when the pool is too small (a bug of the test). */
static void pg_table(int32_t *blk, int blk_w, int n_seqs, const int *top, int block, int n_blocks,
                     int share) {
    int stride = 7; /* the first of 7, 8, 9, ... coprime with n_blocks */
    while (pg_gcd(stride, n_blocks) != 1) stride++;
    int used = 0;
    for (int s = 0; s < n_seqs; s++) {
        int need = (top[s] + block - 1) / block;
        if (need > blk_w) abort();
        for (int e = 0; e < blk_w; e++) {
            int32_t *at = &blk[(size_t)s * blk_w + e];
            if (s == n_seqs - 1 && s > 0 && e < share) *at = blk[e];
            else if (e < need) *at = (int32_t)((used++ * stride + 3) % n_blocks);
            else *at = (int32_t)(((n_blocks - 1 - s) * stride + 3) % n_blocks); /* untaken */
        }
    }
    if (used > n_blocks - n_seqs) abort(); /* the untaken ones above were taken after all */
}

typedef struct {
    const char *name;
    int H, KV, D, block, n_blocks, blk_w, window;
    float scale, softcap;
    int n_seqs, len[4], pos0[4], share;
} pg_cfg;

/* One step over a paged cache against the CPU backend (the pool bit for bit, the output
 * at TOL_ATT), then the same history laid out as slot rings of cap blk_w · block (the
 * paged cache's reach, so the same split count) through the same kernels: the outputs
 * must be the same bits. */
static void att_paged_one_tol(const pg_cfg *c, dtype dt, double tol) {
    static const int slots[4] = {3, 0, 2, 1};
    int kvw = c->KV * c->D, m = 0, top[4], reach = c->blk_w * c->block;
    for (int s = 0; s < c->n_seqs; s++) m += c->len[s], top[s] = c->pos0[s] + c->len[s];
    size_t psz = (size_t)c->n_blocks * c->block * kvw, rsz = (size_t)4 * reach * kvw;
    size_t qn = (size_t)m * c->H * c->D, pbytes = psz * dtype_size(dt);
    tbatch tb;
    tb_make(&tb, c->n_seqs, c->len, c->pos0, slots);
    int32_t table[4 * 256];
    pg_table(table, c->blk_w, c->n_seqs, top, c->block, c->n_blocks, c->share);
    tb_blocks(&tb, c->blk_w, table);
    float *kc0 = hrand(psz, 1.0f), *vc0 = hrand(psz, 1.0f);
    float *k = hrand((size_t)m * kvw, 1.0f), *v = hrand((size_t)m * kvw, 1.0f);
    float *q = hrand(qn, 2.0f), *out = hvec(qn);
    bk_kv hkv = {test_kv_half(kc0, psz, dt), test_kv_half(vc0, psz, dt), dt, 0, kvw, c->block};
    bk_kv dkv = {att_dev(hkv.k, pbytes), att_dev(hkv.v, pbytes), dt, 0, kvw, c->block};
    /* the rings: sequence s's position p at row slots[s] · reach + p, from the pool */
    float *rk0 = hvec(rsz), *rv0 = hvec(rsz);
    for (int s = 0; s < c->n_seqs; s++)
        for (int p = 0; p < reach; p++) {
            size_t from = bk_kv_row(&hkv, &tb.hb, s, p) * kvw;
            size_t to = ((size_t)slots[s] * reach + p) * kvw;
            memcpy(rk0 + to, kc0 + from, sizeof(float) * kvw);
            memcpy(rv0 + to, vc0 + from, sizeof(float) * kvw);
        }
    size_t rbytes = rsz * dtype_size(dt);
    void *rkh = test_kv_half(rk0, rsz, dt), *rvh = test_kv_half(rv0, rsz, dt);
    bk_kv rkv = {att_dev(rkh, rbytes), att_dev(rvh, rbytes), dt, reach, kvw, 0};
    float *dk = gput(k, (size_t)m * kvw), *dv = gput(v, (size_t)m * kvw), *dq = gput(q, qn);
    float *dout = gput(NULL, qn), *dring = gput(NULL, qn);
    att_step(cpu, &hkv, k, v, q, out, &tb.hb, c->H, c->KV, c->D, c->scale, c->window, c->softcap);
    tb_dev(&tb);
    att_step(gpu, &dkv, dk, dv, dq, dout, &tb.db, c->H, c->KV, c->D, c->scale, c->window,
             c->softcap);
    att_step(gpu, &rkv, dk, dv, dq, dring, &tb.db, c->H, c->KV, c->D, c->scale, c->window,
             c->softcap);
    float *got = gget(dout, qn), *gring = gget(dring, qn);
    char name[128];
    snprintf(name, sizeof name, "%s, %s pool", c->name, dtn(dt));
    void *gb = malloc(pbytes);
    if (!gb) abort();
    for (int half = 0; half < 2; half++) { /* k, then v: the whole pool */
        gpu->ops->download(gpu, gb, half ? dkv.v : dkv.k, pbytes);
        float *gw = test_kv_widen(gb, psz, dt), *ww = test_kv_widen(half ? hkv.v : hkv.k, psz, dt);
        report(half ? "kv_store paged v" : "kv_store paged k", name, gw, ww, psz, 0);
        free(gw), free(ww);
    }
    report("attention paged", name, got, out, qn, tol);
    report("attention paged = ring", name, got, gring, qn, 0);
    free(kc0), free(vc0), free(k), free(v), free(q), free(out), free(got), free(gring), free(gb);
    free(rk0), free(rv0), free(rkh), free(rvh), free(hkv.k), free(hkv.v);
    gfree(dkv.k), gfree(dkv.v), gfree(rkv.k), gfree(rkv.v), gfree(dk), gfree(dv), gfree(dq);
    gfree(dout), gfree(dring);
}
static void att_paged_one(const pg_cfg *c, dtype dt) { att_paged_one_tol(c, dt, TOL_ATT); }

static void test_attention_flash(void);

static void test_attention_paged(void) {
    /* a table laid out by hand: clang-format puts each field of a long row on a line */
    /* clang-format off */
    const pg_cfg cfgs[] = { /* name; H, KV, D, block, n_blocks, blk_w, window, scale, softcap,
                             * n_seqs, len, pos0, share */
        {"block 16: a prefill chunk, a decode, a chunk",
         8, 2, 128, 16, 24, 8, 0, 0.0884f, 0, 3, {5, 1, 3}, {0, 37, 90}, 0},
        {"block 4 window 8, 4 seqs",
         4, 2, 64, 4, 40, 16, 8, 0.125f, 0, 4, {3, 1, 6, 2}, {20, 50, 9, 0}, 0},
        {"block 8, a shared prefix of 2 blocks, D20 H6/3",
         6, 3, 20, 8, 12, 4, 0, 0.2236f, 0, 3, {2, 4, 1}, {16, 3, 20}, 2},
        {"block 5, D512 softcap 30", 8, 1, 512, 5, 9, 4, 0, 1.0f, 30.0f, 2, {4, 1}, {10, 0}, 0},
        {"decode at 3000 and 1234, block 32 (splits)",
         8, 2, 256, 32, 160, 128, 0, 0.0625f, 0, 2, {1, 1}, {3000, 1234}, 0},
        {"window 512 decode at 2000, block 16 (splits)",
         8, 1, 256, 16, 130, 128, 512, 0.0625f, 0, 1, {1}, {2000}, 0},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        att_paged_one(&cfgs[i], DTYPE_F32);
        att_paged_one(&cfgs[i], DTYPE_BF16);
    }
}

void test_attention(void) {
    /* clang-format off */
    const att_cfg cfgs[] = { /* name; H, KV, D, cap, slots, window, scale, softcap, n_seqs,
                              * len, pos0, slot */
        {"qwen H8/2 D256, 3 seqs",
         8, 2, 256, 64, 3, 0, 0.0625f, 0, 3, {5, 1, 3}, {0, 17, 40}, {2, 0, 1}},
        {"H6/3 D20, 2 seqs", 6, 3, 20, 50, 2, 0, 0.2236f, 0, 2, {7, 2}, {3, 30}, {1, 0}},
        {"H8/1 D512 softcap 30, scale 1", 8, 1, 512, 32, 1, 0, 1.0f, 30.0f, 1, {4}, {10}, {0}},
        {"ring cap 10 window 8", 4, 2, 128, 10, 2, 8, 0.0884f, 0, 2, {3, 1}, {20, 50}, {0, 1}},
        {"nemotron H40/8 D128 decode", 40, 8, 128, 64, 1, 0, 0.0884f, 0, 1, {1}, {33}, {0}},
        {"decode at 3000 and 4095 (splits)",
         8, 2, 256, 4096, 2, 0, 0.0625f, 0, 2, {1, 1}, {3000, 4095}, {1, 0}},
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
    /* clang-format on */
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        att_one(&cfgs[i], DTYPE_F32, 0);
        att_one(&cfgs[i], DTYPE_BF16, 0);
    }
    att_one(&cfgs[0], DTYPE_BF16, 1); /* 3 sequences: the table's rows lie after tok_seq */
    att_one(&cfgs[3], DTYPE_F32, 1);
    test_attention_paged();
    test_attention_flash();
}

/* The tensor-core prefill (cuda_attention_flash.cu) a bf16 model's runs of 16 tokens or
 * more take over its bf16 cache, beside short runs the flash-decoding kernel keeps in the
 * same step: one query tile and several with a partial last one, a history before the
 * run (chunked prefill), GQA, Qwen3.5's D256, a sliding window shorter than the run,
 * Gemma's softcap, Gemma's D512 and another wide head (the narrow tiles), a paged pool. q and the probabilities round to bf16: TOL_FA. */
static void test_attention_flash(void) {
    if (!gpu->ops->compute_dtype) return; /* --self: a CPU backend computes in f32 only */
    /* clang-format off */
    const att_cfg cfgs[] = {
        {"flash H4/2 D64, 3 seqs",
         4, 2, 64, 160, 3, 0, 0.125f, 0, 3, {100, 5, 20}, {0, 9, 30}, {2, 0, 1}},
        {"flash H2/1 D256", 2, 1, 256, 80, 1, 0, 0.0625f, 0, 1, {70}, {0}, {0}},
        {"flash window 24, softcap 30", 4, 4, 32, 200, 1, 24, 0.17f, 30.0f, 1, {90}, {40}, {0}},
        /* Gemma 4's global layers: D 512 takes the 32 x 32 tiles. Scale 1/sqrt(D): at
         * scale 1, unit q and k give scores of ~22 whose bf16 rounding of q alone moves
         * the output by ~2e-2 on either tile size (measured: 1.5e-2 at D 256) */
        {"flash H4/1 D512 softcap 30, 2 seqs",
         4, 1, 512, 120, 2, 0, 0.0442f, 30.0f, 2, {70, 17}, {0, 33}, {1, 0}},
        {"flash H2/2 D320 window 40", 2, 2, 320, 110, 1, 40, 0.0559f, 0, 1, {100}, {5}, {0}},
    };
    /* clang-format on */
    gpu->ops->compute_dtype(gpu, DTYPE_BF16);
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
        att_one_tol(&cfgs[i], DTYPE_BF16, TOL_FA);
    /* clang-format off */
    const pg_cfg pg = {"flash block 16, a run of 40 after 37",
                       4, 2, 64, 16, 12, 6, 0, 0.125f, 0, 2, {40, 1}, {37, 12}, 0};
    /* clang-format on */
    att_paged_one_tol(&pg, DTYPE_BF16, TOL_FA);
    gpu->ops->compute_dtype(gpu, DTYPE_F32);
}

/* ---- attn_prep: split, norms, RoPE and kv store in one op ---- */

typedef struct {
    const char *name;
    int H, KV, D, rot, gate, mode, v_norm, owner; /* mode -1: no q / k norms */
} ap_cfg;

/* One step of 3 sequences through attn_prep on both backends: the queries (and gates) and
 * the whole cache after it, slot rings of 16 rows or (paged) the same rows as a pool of 12
 * blocks of 4 through a scrambled block table. A bf16 cache row may differ by the last
 * bf16 bit where the f32 sums round apart; 8e-3 is that one step of the largest value,
 * far below a wrong row. */
static void ap_one(const ap_cfg *c, dtype dt, int paged) {
    int len[3] = {4, 1, 2}, pos0[3] = {0, 13, 6}, slot[3] = {1, 2, 0}, m = 7, cap = 16;
    int top[3] = {4, 14, 8}, block = paged ? 4 : 0, blk_w = 8;
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
    int ring = paged ? 0 : cap; /* a paged cache has no rings */
    bk_kv hkv = {test_kv_half(c0, csz, dt), test_kv_half(c0, csz, dt), dt, ring, (int)kvw, block};
    bk_kv dkv = {att_dev(hkv.k, cbytes), att_dev(hkv.v, cbytes), dt, ring, (int)kvw, block};
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
    if (paged) {
        int32_t table[3 * 8];
        pg_table(table, blk_w, 3, top, block, (int)(csz / kvw) / block, 0);
        tb_blocks(&tb, blk_w, table);
    }
    cpu->ops->attn_prep(cpu, q, c->gate ? gate : NULL, qg, k, v, c->owner ? &hkv : NULL, &tb.hb,
                        &hp);
    tb_dev(&tb);
    gpu->ops->attn_prep(gpu, dq, c->gate ? dgate : NULL, dqg, dk, dv, c->owner ? &dkv : NULL,
                        &tb.db, &dp);
    float *gq = gget(dq, qn), *gg = gget(dgate, qn);
    char name[96];
    snprintf(name, sizeof name, "%s, %s %s", c->name, dtn(dt), paged ? "pool" : "cache");
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
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
        for (int paged = 0; paged < 2; paged++) {
            if (paged && !cfgs[i].owner) continue; /* no cache written */
            ap_one(&cfgs[i], DTYPE_F32, paged);
            ap_one(&cfgs[i], DTYPE_BF16, paged);
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
    {2, 4, 260, 20, 2, {3, 1}, {0, 5}, {1, 0}},     /* ... with GQA */
};

/* ---- the tiled V-head order (backend.h BK_VHEAD_TILED) ----
 * Every delta-rule case with 1 < Hk < Hv runs once more on the device with the tiled
 * mapping, on the same inputs with their V heads tiled (v, g, beta, a, bb, A_log, dt_bias,
 * the state); its output and state, put back in grouped order, must match the CPU's
 * grouped results at the case's tolerance: a head computes the same either way. */

/* Where grouped V head h (h = k·r + j, key head k, r = Hv / Hk) sits tiled: j·Hk + k. */
static int vt_pos(int h, int Hk, int Hv) { return (h % (Hv / Hk)) * Hk + h / (Hv / Hk); }

/* A copy of src (rows rows ld floats apart) with the Hv head blocks of w floats at off in
 * each row moved to their tiled places (back, with back set). Caller frees. */
static float *vt_move(const float *src, int rows, size_t ld, size_t off, int Hk, int Hv, size_t w,
                      int back) {
    float *d = hdup(src, (size_t)rows * ld);
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < Hv; h++) {
            size_t g = r * ld + off + h * w, t = r * ld + off + (size_t)vt_pos(h, Hk, Hv) * w;
            memcpy(d + (back ? g : t), src + (back ? t : g), w * sizeof(float));
        }
    return d;
}

/* A [Hv] weight (f32 or bf16) with its elements in tiled order, prepared on the device. */
static tw vt_weight(const tw *w, int Hk, int Hv) {
    size_t es = dtype_size(w->h.dt);
    tw t = *w;
    t.buf = malloc((size_t)Hv * es + 16);
    if (!t.buf) abort();
    for (int h = 0; h < Hv; h++)
        memcpy((char *)t.buf + (size_t)vt_pos(h, Hk, Hv) * es, (const char *)w->buf + h * es, es);
    t.h.data = t.d.data = t.buf;
    if (gpu->ops->weight_prepare(gpu, &t.d, &err)) abort();
    return t;
}

/* The device's tiled results (dout [m, Hv, dv], dst [slots, Hv, dk·dv]) back in grouped
 * order against the CPU's grouped out and st. */
static void vt_report(const char *op, const char *shape, const float *dout, const float *out, int m,
                      const float *dst, const float *st, int slots, int Hk, int Hv, int dk, int dv,
                      double tol) {
    size_t on = (size_t)m * Hv * dv, hs = (size_t)dk * dv;
    float *go = gget(dout, on), *gs = gget(dst, (size_t)slots * Hv * hs);
    float *uo = vt_move(go, m, (size_t)Hv * dv, 0, Hk, Hv, (size_t)dv, 1);
    float *us = vt_move(gs, slots, Hv * hs, 0, Hk, Hv, hs, 1);
    char what[48];
    snprintf(what, sizeof what, "%s tiled out", op);
    report(what, shape, uo, out, on, tol);
    snprintf(what, sizeof what, "%s tiled state", op);
    report(what, shape, us, st, (size_t)slots * Hv * hs, tol);
    free(go), free(gs), free(uo), free(us);
}

/* The fused op tiled: x [m, ld] rows of q | k | v, a and bb [m, Hv], st0 the state before
 * the step, out and st the CPU's grouped results. */
static void vt_gdn(const char *op, const char *shape, tbatch *tb, const float *x, int ld,
                   const float *a, const float *bb, const float *st0, const tw *A_log,
                   const tw *dt_bias, const float *out, const float *st, int m, int slots, int Hk,
                   int Hv, int dk, int dv, double tol) {
    size_t ssz = (size_t)slots * Hv * dk * dv, gn = (size_t)m * Hv;
    float *xt = vt_move(x, m, (size_t)ld, 2 * (size_t)Hk * dk, Hk, Hv, (size_t)dv, 0);
    float *at = vt_move(a, m, (size_t)Hv, 0, Hk, Hv, 1, 0);
    float *bt = vt_move(bb, m, (size_t)Hv, 0, Hk, Hv, 1, 0);
    float *stt = vt_move(st0, slots, (size_t)Hv * dk * dv, 0, Hk, Hv, (size_t)dk * dv, 0);
    tw At = vt_weight(A_log, Hk, Hv), Dt = vt_weight(dt_bias, Hk, Hv);
    float *dx = gput(xt, (size_t)m * ld), *da = gput(at, gn), *dbb = gput(bt, gn);
    float *dst = gput(stt, ssz), *dout = gput(NULL, (size_t)m * Hv * dv);
    float *dg = gput(NULL, gn), *dbe = gput(NULL, gn);
    tb_dev(tb);
    gpu->ops->gdn(gpu, dout, dx, dx + Hk * dk, ld, dx + 2 * Hk * dk, ld, da, dbb, &At.d, &Dt.d, dg,
                  dbe, dst, &tb->db, Hk, Hv, dk, dv, 1.0f / sqrtf((float)dk), BK_VHEAD_TILED);
    vt_report(op, shape, dout, out, m, dst, st, slots, Hk, Hv, dk, dv, tol);
    free(xt), free(at), free(bt), free(stt), wfree(&At), wfree(&Dt);
    gfree(dx), gfree(da), gfree(dbb), gfree(dst), gfree(dout), gfree(dg), gfree(dbe);
}

/* A delta-rule op's output [on] and state [ssz] on the device against the CPU's. */
static void gd_report(const char *op, const char *shape, const float *dout, const float *out,
                      size_t on, const float *dst, const float *st, size_t ssz, double tol) {
    float *go = gget(dout, on), *gs = gget(dst, ssz);
    char what[32];
    snprintf(what, sizeof what, "%s out", op);
    report(what, shape, go, out, on, tol);
    snprintf(what, sizeof what, "%s state", op);
    report(what, shape, gs, st, ssz, tol);
    free(go), free(gs);
}

/* A delta-rule case's shape as the reports name it; tag ends it (", bf16"). */
static void gd_shape(char *shape, size_t n, int Hk, int Hv, int dk, int dv, int m,
                     const char *tag) {
    snprintf(shape, n, "Hk %d Hv %d dk %d dv %d, %d tokens%s", Hk, Hv, dk, dv, m, tag);
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
        float *st = hrand(ssz, 0.1f), *out = hvec(on), *st0 = hdup(st, ssz);
        float *dq = gput(q, (size_t)m * ld_qk), *dk_ = gput(k, (size_t)m * ld_qk),
              *dv_ = gput(v, (size_t)m * ld_v);
        float *dg = gput(g, (size_t)m * Hv), *dbe = gput(be, (size_t)m * Hv), *dst = gput(st, ssz),
              *dout = gput(out, on);
        tbatch tb;
        tb_make(&tb, cs[ci].n_seqs, cs[ci].len, cs[ci].pos0, cs[ci].slot);
        cpu->ops->gated_delta(cpu, out, q, k, ld_qk, v, ld_v, g, be, st, &tb.hb, Hk, Hv, dk, dv,
                              BK_VHEAD_GROUPED);
        tb_dev(&tb);
        gpu->ops->gated_delta(gpu, dout, dq, dk_, ld_qk, dv_, ld_v, dg, dbe, dst, &tb.db, Hk, Hv,
                              dk, dv, BK_VHEAD_GROUPED);
        char shape[80];
        gd_shape(shape, sizeof shape, Hk, Hv, dk, dv, m, "");
        gd_report("gated_delta", shape, dout, out, on, dst, st, ssz, TOL_REC);
        if (Hk > 1 && Hk < Hv) {
            float *vt = vt_move(v, m, (size_t)ld_v, 0, Hk, Hv, (size_t)dv, 0);
            float *gt = vt_move(g, m, (size_t)Hv, 0, Hk, Hv, 1, 0);
            float *bt = vt_move(be, m, (size_t)Hv, 0, Hk, Hv, 1, 0);
            float *stt = vt_move(st0, slots, (size_t)Hv * dk * dv, 0, Hk, Hv, (size_t)dk * dv, 0);
            gpu->ops->upload(gpu, dv_, vt, sizeof(float) * (size_t)m * ld_v);
            gpu->ops->upload(gpu, dg, gt, sizeof(float) * (size_t)m * Hv);
            gpu->ops->upload(gpu, dbe, bt, sizeof(float) * (size_t)m * Hv);
            gpu->ops->upload(gpu, dst, stt, sizeof(float) * ssz);
            tb_dev(&tb);
            gpu->ops->gated_delta(gpu, dout, dq, dk_, ld_qk, dv_, ld_v, dg, dbe, dst, &tb.db, Hk,
                                  Hv, dk, dv, BK_VHEAD_TILED);
            vt_report("gated_delta", shape, dout, out, m, dst, st, slots, Hk, Hv, dk, dv, TOL_REC);
            free(vt), free(gt), free(bt), free(stt);
        }
        free(q), free(k), free(v), free(g), free(be), free(st), free(out), free(st0);
        gfree(dq), gfree(dk_), gfree(dv_), gfree(dg), gfree(dbe), gfree(dst), gfree(dout);
    }
}

/* ---- SSD ---- */

/* One SSD case on both backends: output and state against the CPU's, within tol. */
static void ssd_case(int H, int P, int N, int G, int n_seqs, const int *len, const int *pos0,
                     const int *slot, float dt_min, const char *tag, double tol) {
    int m = 0, slots = 3;
    for (int s = 0; s < n_seqs; s++) m += len[s];
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
    tb_make(&tb, n_seqs, len, pos0, slot);
    if (cpu->ops->ssd)
        cpu->ops->ssd(cpu, y, x, ld_x, B, C, ld_bc, dt, ld_dt, &A.h, &dtb.h, &D.h, st, &tb.hb, H, P,
                      N, G, dt_min);
    else
        ref_ssd(y, x, ld_x, B, C, ld_bc, dt, ld_dt, &A.h, &dtb.h, &D.h, st, &tb.hb, H, P, N, G,
                dt_min);
    tb_dev(&tb);
    gpu->ops->ssd(gpu, dy, dx, ld_x, dB, dC, ld_bc, ddt, ld_dt, &A.d, &dtb.d, &D.d, dst, &tb.db, H,
                  P, N, G, dt_min);
    float *gy = gget(dy, yn), *gs = gget(dst, ssz);
    char shape[96], what[32];
    snprintf(shape, sizeof shape, "H %d P %d N %d G %d, %d tokens%s%s", H, P, N, G, m,
             cpu->ops->ssd ? "" : " (local ref)", tag);
    snprintf(what, sizeof what, "ssd%s y", *tag ? " chunked" : "");
    report(what, shape, gy, y, yn, tol);
    snprintf(what, sizeof what, "ssd%s state", *tag ? " chunked" : "");
    report(what, shape, gs, st, ssz, tol);
    free(x), free(B), free(C), free(dt), free(st), free(y), free(gy), free(gs);
    gfree(dx), gfree(dB), gfree(dC), gfree(ddt), gfree(dst), gfree(dy);
    wfree(&A), wfree(&dtb), wfree(&D);
}

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
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
        ssd_case(cs[ci].H, cs[ci].P, cs[ci].N, cs[ci].G, cs[ci].n_seqs, cs[ci].len, cs[ci].pos0,
                 cs[ci].slot, cs[ci].dt_min, "", TOL_REC);
}

/* The chunked SSD (cuda_ssd_chunk.cu) a bf16 model's long runs take: runs at the floor
 * (16), one chunk and several with a partial last one beside a short recurrent run, each
 * from a carried state; groups; dt_min on and off; a head shape it does not take (P 10)
 * stays recurrent and f32-exact. Products round x, B, C and the state to bf16: TOL_GDC. */
void test_ssd_chunked(void) {
    if (!gpu->ops->compute_dtype || !cpu->ops->ssd) return; /* --self: f32 only */
    const struct {
        int H, P, N, G, n_seqs, len[3], pos0[3], slot[3];
        float dt_min;
        double tol;
    } cs[] = {
        {4, 16, 32, 2, 3, {16, 150, 3}, {0, 0, 4}, {1, 2, 0}, 0.0f, TOL_GDC},
        {2, 80, 128, 1, 1, {64}, {0}, {2}, 1e-3f, TOL_GDC}, /* Nemotron 3 Nano 4B heads */
        {6, 32, 64, 3, 2, {70, 20}, {0, 0}, {0, 1}, 0.5f, TOL_GDC},
        {6, 10, 20, 2, 1, {40}, {0}, {1}, 0.0f, TOL_REC}, /* P 10: recurrent */
    };
    gpu->ops->compute_dtype(gpu, DTYPE_BF16);
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
        ssd_case(cs[ci].H, cs[ci].P, cs[ci].N, cs[ci].G, cs[ci].n_seqs, cs[ci].len, cs[ci].pos0,
                 cs[ci].slot, cs[ci].dt_min, ", bf16", cs[ci].tol);
    gpu->ops->compute_dtype(gpu, DTYPE_F32);
}

/* One fused DeltaNet case (op "gdn" or "gdn chunked") on both backends from the same raw
 * q | k | v, a, bb and state, A_log and dt_bias in the dtypes given: output and state
 * against the CPU's within tol, then (1 < Hk < Hv) the tiled V-head order. tag ends the
 * reports' shape. */
static void gdn_case(const char *op, int Hk, int Hv, int dk, int dv, int n_seqs, const int *len,
                     const int *pos0, const int *slot, int slots, dtype a_dt, dtype b_dt,
                     const char *tag, double tol) {
    int m = 0;
    for (int s = 0; s < n_seqs; s++) m += len[s];
    int ld = 2 * Hk * dk + Hv * dv; /* q | k | v in one row, as the conv leaves them */
    size_t xn = (size_t)m * ld, gn = (size_t)m * Hv, ssz = (size_t)slots * Hv * dk * dv;
    size_t on = (size_t)m * Hv * dv;
    float *x = hrand(xn, 1.0f), *a = hrand(gn, 2.0f), *bb = hrand(gn, 2.0f);
    float *st = hrand(ssz, 0.1f), *out = hvec(on), *g = hvec(gn), *be = hvec(gn);
    float *x0 = hdup(x, xn), *st0 = hdup(st, ssz); /* the CPU op writes x and st */
    tw A_log = wmake(a_dt, Hv, 0, 1.0f), dt_bias = wmake(b_dt, Hv, 0, 1.0f);
    float *dx = gput(x, xn), *da = gput(a, gn), *dbb = gput(bb, gn), *dst = gput(st, ssz);
    float *dout = gput(out, on), *dg = gput(g, gn), *dbe = gput(be, gn);
    float qs = 1.0f / sqrtf((float)dk);
    tbatch tb;
    tb_make(&tb, n_seqs, len, pos0, slot);
    cpu->ops->gdn(cpu, out, x, x + Hk * dk, ld, x + 2 * Hk * dk, ld, a, bb, &A_log.h, &dt_bias.h, g,
                  be, st, &tb.hb, Hk, Hv, dk, dv, qs, BK_VHEAD_GROUPED);
    tb_dev(&tb);
    gpu->ops->gdn(gpu, dout, dx, dx + Hk * dk, ld, dx + 2 * Hk * dk, ld, da, dbb, &A_log.d,
                  &dt_bias.d, dg, dbe, dst, &tb.db, Hk, Hv, dk, dv, qs, BK_VHEAD_GROUPED);
    char shape[80];
    gd_shape(shape, sizeof shape, Hk, Hv, dk, dv, m, tag);
    gd_report(op, shape, dout, out, on, dst, st, ssz, tol);
    if (Hk > 1 && Hk < Hv)
        vt_gdn(op, shape, &tb, x0, ld, a, bb, st0, &A_log, &dt_bias, out, st, m, slots, Hk, Hv, dk,
               dv, tol);
    free(x), free(a), free(bb), free(st), free(out), free(g), free(be), free(x0), free(st0);
    gfree(dx), gfree(da), gfree(dbb), gfree(dst), gfree(dout), gfree(dg), gfree(dbe);
    wfree(&A_log), wfree(&dt_bias);
}

/* The fused DeltaNet core (l2norm of q and k, the gates, the delta rule) on raw q, k, a
 * and b against the CPU's four ops, on the delta rule's cases (dk > 256: the unfused ops). */
void test_gdn(void) {
    const __typeof__(gd_cases[0]) *cs = gd_cases;
    for (size_t ci = 0; ci < sizeof gd_cases / sizeof gd_cases[0]; ci++)
        gdn_case("gdn", cs[ci].Hk, cs[ci].Hv, cs[ci].dk, cs[ci].dv, cs[ci].n_seqs, cs[ci].len,
                 cs[ci].pos0, cs[ci].slot, 3, DTYPE_F32, DTYPE_BF16, "", TOL_REC);
}

/* The chunked delta rule (cuda_deltanet_chunk.cu) a bf16 model's long runs take: runs at
 * the chunk's floor (16), one chunk (64) and several with a partial last one, beside a
 * short run the recurrent kernel keeps, each from a carried state; GQA; a head shape the
 * chunked kernel does not take (dk 48, dv 40) stays recurrent and f32-exact. The products
 * round q, k, v, T and the state to bf16 (8 bits): the CPU's f32 recurrence is matched to
 * TOL_GDC (cuda_ops_test.h). */
void test_gdn_chunked(void) {
    if (!gpu->ops->compute_dtype) return; /* --self: a CPU backend computes in f32 only */
    static const struct {
        int Hk, Hv, dk, dv, n_seqs, len[4], pos0[4], slot[4];
        double tol;
    } cs[] = {
        {2, 4, 16, 32, 4, {16, 64, 150, 5}, {0, 3, 0, 7}, {2, 0, 3, 1}, TOL_GDC}, /* tiny */
        {1, 2, 64, 64, 2, {70, 20}, {0, 0}, {1, 0}, TOL_GDC},                     /* GQA */
        {2, 2, 128, 128, 1, {101}, {0}, {2}, TOL_GDC},                            /* Qwen3.5 */
        {1, 3, 48, 40, 2, {30, 4}, {0, 3}, {0, 1}, TOL_REC}, /* not its shape: recurrent */
    };
    gpu->ops->compute_dtype(gpu, DTYPE_BF16);
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
        gdn_case("gdn chunked", cs[ci].Hk, cs[ci].Hv, cs[ci].dk, cs[ci].dv, cs[ci].n_seqs,
                 cs[ci].len, cs[ci].pos0, cs[ci].slot, 4, DTYPE_BF16, DTYPE_F32, ", bf16",
                 cs[ci].tol);
    gpu->ops->compute_dtype(gpu, DTYPE_F32);
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

/* ---- paged decode steps as graphs ---- */

enum { PG_H = 4, PG_KV = 2, PG_D = 64, PG_BLOCK = 4, PG_W = 4, PG_BLOCKS = 10, PG_STEPS = 4 };

/* A paged decode step of two sequences: their q, k, v uploaded (staged), kv_store and
 * attention through the step's block table, the output downloaded. */
static void pg_forward(tbatch *tb, const bk_kv *kv, float *const dev[4], const float *const in[3],
                       float *out) {
    size_t qn = 2 * PG_H * PG_D, kn = 2 * PG_KV * PG_D;
    tb_dev(tb);
    gpu->ops->upload(gpu, dev[0], in[0], qn * sizeof(float));
    gpu->ops->upload(gpu, dev[1], in[1], kn * sizeof(float));
    gpu->ops->upload(gpu, dev[2], in[2], kn * sizeof(float));
    gpu->ops->kv_store(gpu, kv, dev[1], dev[2], &tb->db);
    gpu->ops->attention(gpu, dev[3], dev[0], kv, &tb->db, PG_H, PG_KV, PG_D, 0.125f, 0, 0);
    gpu->ops->download(gpu, out, dev[3], qn * sizeof(float));
}

/* Decode steps over a paged BF16 cache captured once and replayed with the positions
 * crossing into new blocks (the block table, staged with the batch, gains an entry each
 * time: a replay must read the refilled one), each against the CPU backend, the pool bit
 * for bit after them; the last step is left in flight while copy snapshots its output
 * (ordered behind the graph, needing no staging); and a step whose table is wider (blk_w
 * is part of the graph key) is refused under the same key. */
void test_graph_paged(void) {
    if (!gpu->ops->graph_sync) return;
    const int slot[2] = {1, 0}, pos0[2] = {6, 9}; /* new blocks at steps 2 and 3 */
    const size_t qn = 2 * PG_H * PG_D, kn = 2 * PG_KV * PG_D;
    const size_t psz = (size_t)PG_BLOCKS * PG_BLOCK * PG_KV * PG_D, pbytes = psz * 2;
    int top[2] = {pos0[0] + PG_STEPS, pos0[1] + PG_STEPS}, len[2] = {1, 1};
    int32_t full[2 * PG_W], table[2 * PG_W];
    pg_table(full, PG_W, 2, top, PG_BLOCK, PG_BLOCKS, 0);
    const int32_t spare = full[PG_W - 1]; /* sequence 0 takes 3 of its 4 entries: untaken */
    float *c0 = hrand(psz, 1.0f);
    bk_kv hkv = {test_kv_half(c0, psz, DTYPE_BF16),
                 test_kv_half(c0, psz, DTYPE_BF16),
                 DTYPE_BF16,
                 0,
                 PG_KV * PG_D,
                 PG_BLOCK};
    bk_kv dkv = {
        att_dev(hkv.k, pbytes), att_dev(hkv.v, pbytes), DTYPE_BF16, 0, PG_KV * PG_D, PG_BLOCK};
    float *dev[4] = {gput(NULL, qn), gput(NULL, kn), gput(NULL, kn), gput(NULL, qn)};
    float *snap = gput(NULL, qn), ref[PG_STEPS][2 * PG_H * PG_D], got[PG_STEPS][2 * PG_H * PG_D];
    strata_err ge = {0};
    int bad = 0;
    tbatch tb;
    for (int s = 0; s < PG_STEPS; s++) {
        int pos[2] = {pos0[0] + s, pos0[1] + s};
        tb_make(&tb, 2, len, pos, slot);
        for (int i = 0; i < 2; i++) /* the entries a step may reach; the rest not yet taken */
            for (int e = 0; e < PG_W; e++)
                table[i * PG_W + e] = e <= pos[i] / PG_BLOCK ? full[i * PG_W + e] : spare;
        tb_blocks(&tb, PG_W, table);
        float *in[3] = {hrand(qn, 2.0f), hrand(kn, 1.0f), hrand(kn, 1.0f)};
        cpu->ops->kv_store(cpu, &hkv, in[1], in[2], &tb.hb);
        cpu->ops->attention(cpu, ref[s], in[0], &hkv, &tb.hb, PG_H, PG_KV, PG_D, 0.125f, 0, 0);
        int last = s == PG_STEPS - 1;
        int mode = backend_graph_begin(gpu, 300, &ge);
        pg_forward(&tb, &dkv, dev, (const float *const *)in, got[s]);
        int rc = backend_graph_end(gpu, !last, &ge);
        if (!rc && last) {
            gpu->ops->copy(gpu, snap, dev[3], qn * sizeof(float));
            rc = backend_graph_sync(gpu, &ge);
        }
        if (mode != (s ? 1 : 0) || rc) {
            printf("    paged graph step %d (begin %d): %s\n", s, mode, ge.msg);
            bad = 1;
        }
        char what[64];
        snprintf(what, sizeof what, "bf16 pool, step %d: %s", s, s ? "replay" : "capture");
        report("graph paged", what, got[s], ref[s], bad ? 0 : qn, bad ? -1 : TOL_ATT);
        free(in[0]), free(in[1]), free(in[2]);
    }
    void *gb = malloc(pbytes);
    if (!gb) abort();
    gpu->ops->download(gpu, gb, dkv.k, pbytes);
    float *gk = test_kv_widen(gb, psz, DTYPE_BF16), *wk = test_kv_widen(hkv.k, psz, DTYPE_BF16);
    report("graph paged k pool", "after the steps", gk, wk, psz, 0);
    float *gs = gget(snap, qn);
    report("copy behind a graph", "the last step's output", gs, got[PG_STEPS - 1], qn, 0);
    /* the same key with a table twice as wide: another staged size, refused */
    int32_t wide[4 * PG_W];
    for (int e = 0; e < 4 * PG_W; e++) wide[e] = table[e % (2 * PG_W)];
    tb_blocks(&tb, 2 * PG_W, wide);
    float *in[3] = {hrand(qn, 2.0f), hrand(kn, 1.0f), hrand(kn, 1.0f)};
    int mode = backend_graph_begin(gpu, 300, &ge);
    pg_forward(&tb, &dkv, dev, (const float *const *)in, got[0]);
    int rc = backend_graph_end(gpu, 1, &ge);
    float refused = mode == 1 && rc != 0, one = 1.0f;
    report("graph paged refused", "blk_w 8 under a blk_w 4 graph", &refused, &one, 1, 0);
    free(in[0]), free(in[1]), free(in[2]), free(gb), free(gk), free(wk), free(gs), free(c0);
    free(hkv.k), free(hkv.v), gfree(dkv.k), gfree(dkv.v), gfree(snap);
    for (int i = 0; i < 4; i++) gfree(dev[i]);
}

/* ---- speed (printed, not judged) ---- */

static void sync_gpu(const float *d) {
    float t;
    gpu->ops->download(gpu, &t, d, sizeof t);
}

/* Seconds per call of f (after a warm-up), reps calls. */
static double speed_time(void (*f)(void *), void *ctx, const float *sync, int reps) {
    f(ctx);
    sync_gpu(sync);
    double t0 = strata_now();
    for (int r = 0; r < reps; r++) f(ctx);
    sync_gpu(sync);
    return (strata_now() - t0) / reps;
}

typedef struct {
    float *out, *x, *a, *b, *st, *q;
    tw w1, w2, w3;
    bk_kv kv;
    tbatch tb;
    int T;
} speed_fix;

static void speed_gdn(void *p) { /* Qwen3.5-9B's DeltaNet heads: Hk 16, Hv 32, 128 x 128 */
    speed_fix *f = p;
    int ld = 2 * 16 * 128 + 32 * 128;
    gpu->ops->gdn(gpu, f->out, f->x, f->x + 16 * 128, ld, f->x + 2 * 16 * 128, ld, f->a, f->b,
                  &f->w1.d, &f->w2.d, NULL, NULL, f->st, &f->tb.db, 16, 32, 128, 128, 0.0884f,
                  BK_VHEAD_GROUPED);
}
static void speed_ssd(void *p) { /* Nemotron 3 Nano 4B: H 96, P 80, N 128, G 8 */
    speed_fix *f = p;
    int ld_x = 96 * 80, ld_bc = 8 * 128;
    gpu->ops->ssd(gpu, f->out, f->x, ld_x, f->a, f->a + (size_t)f->T * ld_bc, ld_bc, f->b, 96,
                  &f->w1.d, &f->w2.d, &f->w3.d, f->st, &f->tb.db, 96, 80, 128, 8, 0.0f);
}
static void speed_att(void *p) { /* Qwen3.5's full attention: H 8 / KV 2, D 256 */
    speed_fix *f = p;
    gpu->ops->attention(gpu, f->out, f->q, &f->kv, &f->tb.db, 8, 2, 256, 0.0625f, 0, 0.0f);
}

/* A 4,096-token prefill through the recurrent / split-key kernels (f32 compute) and the
 * chunked / tensor-core ones (bf16 compute), per op: what the chunked forms buy. */
/* The prefill GEMMs of the matmul op (x rounded to bf16, then cuBLAS) on Qwen3.5-2B's and
 * -9B's MLP shapes at T tokens, against the same op on an 8192-cube, the device's bf16
 * tensor-core rate as cuBLAS reaches it in this run (the ceiling prefill is held to). */
static void speed_prefill_gemm(int T) {
    static const int shapes[][3] = {
        {8192, 8192, 8192}, {0, 6144, 2048}, {0, 2048, 6144}, {0, 12288, 4096}, {0, 4096, 12288}};
    double peak = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int m = shapes[i][0] ? shapes[i][0] : T, n = shapes[i][1], k = shapes[i][2];
        tw w = wmake(DTYPE_BF16, n, k, 0.05f);
        float *dx = gput(NULL, (size_t)m * k), *dy = gput(NULL, (size_t)m * n);
        gpu->ops->matmul(gpu, dy, dx, &w.d, m);
        sync_gpu(dy);
        double t0 = strata_now();
        for (int r = 0; r < 5; r++) gpu->ops->matmul(gpu, dy, dx, &w.d, m);
        sync_gpu(dy);
        double t = (strata_now() - t0) / 5, tf = 2.0 * m * n * k / t / 1e12;
        if (!i) peak = tf;
        printf("speed: prefill GEMM m %d [%d x %d] bf16: %.3f ms, %.0f TFLOP/s = %.2f of the "
               "8192-cube's\n",
               m, n, k, t * 1e3, tf, peak > 0 ? tf / peak : 0);
        gfree(dx), gfree(dy), wfree(&w);
    }
}

void test_speed_prefill(void) {
    if (!gpu->ops->compute_dtype) return;
    const char *env = getenv("PREFILL_SPEED_TOKENS"); /* a short dry run on the CPU */
    speed_fix f = {.T = env && atoi(env) > 0 ? atoi(env) : 4096};
    int slot = 0, pos = 0, T = f.T;
    size_t big =
        (size_t)T * 96 * 80 > (size_t)T * 8 * 256 ? (size_t)T * 96 * 80 : (size_t)T * 8 * 256;
    f.x = gput(NULL, (size_t)T * (2 * 16 * 128 + 32 * 128) > big
                         ? (size_t)T * (2 * 16 * 128 + 32 * 128)
                         : big);
    f.a = gput(NULL, (size_t)T * 2 * 8 * 128), f.b = gput(NULL, (size_t)T * 96);
    f.out = gput(NULL, big), f.q = gput(NULL, (size_t)T * 8 * 256);
    f.st = gput(NULL, (size_t)96 * 80 * 128 > (size_t)32 * 128 * 128 ? (size_t)96 * 80 * 128
                                                                     : (size_t)32 * 128 * 128);
    f.w1 = wmake(DTYPE_BF16, 96, 0, 0.5f), f.w2 = wmake(DTYPE_BF16, 96, 0, 0.5f);
    f.w3 = wmake(DTYPE_BF16, 96, 0, 0.5f);
    size_t cb = (size_t)T * 2 * 256 * 2;
    f.kv = (bk_kv){gpu->ops->alloc(gpu, cb), gpu->ops->alloc(gpu, cb), DTYPE_BF16, T, 2 * 256, 0};
    gpu->ops->zero(gpu, f.kv.k, cb), gpu->ops->zero(gpu, f.kv.v, cb);
    tb_make(&f.tb, 1, &T, &pos, &slot);
    tb_dev(&f.tb);
    static const struct {
        const char *name;
        void (*run)(void *);
    } ops[] = {{"gdn Hk 16 Hv 32 dk dv 128", speed_gdn},
               {"ssd H 96 P 80 N 128 G 8", speed_ssd},
               {"attention H8/2 D256, bf16 cache", speed_att}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        double t[2];
        for (int bf = 0; bf < 2; bf++) {
            gpu->ops->compute_dtype(gpu, bf ? DTYPE_BF16 : DTYPE_F32);
            t[bf] = speed_time(ops[i].run, &f, f.out, 3);
        }
        printf("speed: prefill %d tokens, %s: recurrent / split-key %.2f ms, chunked / tensor "
               "cores %.2f ms (%.1fx)\n",
               T, ops[i].name, t[0] * 1e3, t[1] * 1e3, t[0] / t[1]);
    }
    gpu->ops->compute_dtype(gpu, DTYPE_F32);
    gfree(f.x), gfree(f.a), gfree(f.b), gfree(f.out), gfree(f.q), gfree(f.st);
    gfree(f.kv.k), gfree(f.kv.v), wfree(&f.w1), wfree(&f.w2), wfree(&f.w3);
    speed_prefill_gemm(T);
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
            bk_kv kv = {dkc, dvc, bf ? DTYPE_BF16 : DTYPE_F32, cap, KV * D, 0};
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
                              Hv, dk, dv, BK_VHEAD_GROUPED);
        sync_gpu(dout);
        t0 = strata_now();
        for (int r = 0; r < 10; r++)
            gpu->ops->gated_delta(gpu, dout, dq, dk_, Hk * dk, dv_, Hv * dv, dg, dbe, dst, &tb.db,
                                  Hk, Hv, dk, dv, BK_VHEAD_GROUPED);
        sync_gpu(dout);
        t = (strata_now() - t0) / 10;
        printf("speed: gated_delta Hv 32 dk dv 128, %d tokens: %.1f us\n", T, t * 1e6);
        gfree(dq), gfree(dk_), gfree(dv_), gfree(dg), gfree(dbe), gfree(dst), gfree(dout);
    }
    test_speed_prefill();
}
