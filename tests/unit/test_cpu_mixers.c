/* test_cpu_mixers.c - the CPU backend's sequence ops on every ISA this machine runs:
 * kv_store + attention (f32 and bf16 caches), conv1d with its carried window, and the
 * gated delta rule,
 * against double-precision references written here (backend.h, Qwen3.5 spec §5-7).
 *
 * Beyond matching the references, the step identities the engine relies on are checked:
 * a batch of sequences gives each sequence what it gets alone, and a sequence processed
 * in one call gives what it gets in pieces or one token at a time (design.md, Caches). */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_internal.h"
#define CPU_TEST_SEED 0x243f6a8885a308d3ull
#include "tests/cpu_test_util.h"
#include "tests/test.h"
#include "tests/test_kv.h"

/* ---- attention ---- */

/* A scenario: seqs with earlier history already cached, a step of new tokens. hist_k/v
 * hold every position's k/v per sequence ([seq][pos][KV·D]) for the reference, which reads
 * them by position, never through the cache layout. */
typedef struct {
    int n_seqs, H, KV, D, cap, slots, window;
    float scale, softcap;
    int len[4], pos0[4], slot[4];
    float *hist_k[4], *hist_v[4]; /* [pos0 + len, KV·D] */
    float *q;                     /* [step tokens, H·D] */
    float *kc0, *vc0;             /* the caches before the step */
    dtype dt;                     /* of the cache under test */
} att_case;

/* dt BF16: the history is drawn bf16-representable, so a BF16 cache holds it exactly and
 * the same reference applies; kv_store's rounding has its own test. */
static void att_case_init(att_case *c, dtype dt) {
    c->dt = dt;
    int kvw = c->KV * c->D;
    size_t csz = (size_t)c->slots * c->cap * kvw;
    c->kc0 = fvec(csz);
    c->vc0 = fvec(csz);
    for (size_t i = 0; i < csz; i++) c->kc0[i] = c->vc0[i] = 1e6f; /* poison: never attended */
    int m = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        int np = c->pos0[s] + c->len[s];
        c->hist_k[s] = frand((size_t)np * kvw);
        c->hist_v[s] = frand((size_t)np * kvw);
        for (size_t i = 0; dt == DTYPE_BF16 && i < (size_t)np * kvw; i++) {
            c->hist_k[s][i] = dtype_bf16_to_f32(dtype_f32_to_bf16(c->hist_k[s][i]));
            c->hist_v[s][i] = dtype_bf16_to_f32(dtype_f32_to_bf16(c->hist_v[s][i]));
        }
        /* earlier steps wrote positions 0 .. pos0-1 in order (a ring keeps the last cap) */
        for (int p = 0; p < c->pos0[s]; p++) {
            size_t row = (size_t)c->slot[s] * c->cap + (size_t)(p % c->cap);
            memcpy(c->kc0 + row * kvw, c->hist_k[s] + (size_t)p * kvw, (size_t)kvw * sizeof(float));
            memcpy(c->vc0 + row * kvw, c->hist_v[s] + (size_t)p * kvw, (size_t)kvw * sizeof(float));
        }
        m += c->len[s];
    }
    c->q = frand((size_t)m * c->H * c->D);
    for (size_t i = 0; i < (size_t)m * c->H * c->D; i++) c->q[i] *= 2.0f;
}

static void att_case_free(att_case *c) {
    for (int s = 0; s < c->n_seqs; s++) {
        free(c->hist_k[s]);
        free(c->hist_v[s]);
    }
    free(c->q);
    free(c->kc0);
    free(c->vc0);
}

/* Runs kv_store + attention for sequences [s0, s1) of the case on backend b into out. */
static void att_run(const att_case *c, backend *b, int s0, int s1, float *out) {
    int kvw = c->KV * c->D;
    size_t csz = (size_t)c->slots * c->cap * kvw;
    bk_kv kv = {.k = test_kv_half(c->kc0, csz, c->dt),
                .v = test_kv_half(c->vc0, csz, c->dt),
                .dt = c->dt,
                .cap = c->cap,
                .width = kvw};
    tbatch tb;
    make_batch(&tb, s1 - s0, c->len + s0, c->pos0 + s0, c->slot + s0);
    int m = tb.b.n_tokens, skip = 0;
    for (int s = 0; s < s0; s++) skip += c->len[s];
    float *k = fvec((size_t)m * kvw), *v = fvec((size_t)m * kvw);
    for (int s = s0, t = 0; s < s1; s++)
        for (int i = 0; i < c->len[s]; i++, t++) {
            memcpy(k + (size_t)t * kvw, c->hist_k[s] + (size_t)(c->pos0[s] + i) * kvw,
                   (size_t)kvw * 4);
            memcpy(v + (size_t)t * kvw, c->hist_v[s] + (size_t)(c->pos0[s] + i) * kvw,
                   (size_t)kvw * 4);
        }
    b->ops->batch_prepare(b, &tb.b, NULL);
    b->ops->kv_store(b, &kv, k, v, &tb.b);
    b->ops->attention(b, out, c->q + (size_t)skip * c->H * c->D, &kv, &tb.b, c->H, c->KV, c->D,
                      c->scale, c->window, c->softcap);
    free(v);
    free(k);
    free(kv.v);
    free(kv.k);
}

static void att_ref(const att_case *c, double *out) {
    int kvw = c->KV * c->D, t = 0, group = c->H / c->KV;
    for (int s = 0; s < c->n_seqs; s++)
        for (int i = 0; i < c->len[s]; i++, t++) {
            int p = c->pos0[s] + i;
            int lo = c->window > 0 ? p - c->window + 1 : 0;
            if (lo < 0) lo = 0;
            for (int h = 0; h < c->H; h++) {
                const float *q = c->q + ((size_t)t * c->H + h) * c->D;
                int kvh = h / group;
                double *sc = dvec((size_t)p + 1), mx = -INFINITY, sum = 0;
                for (int u = lo; u <= p; u++) {
                    const float *kr = c->hist_k[s] + (size_t)u * kvw + (size_t)kvh * c->D;
                    double d = 0;
                    for (int e = 0; e < c->D; e++) d += (double)q[e] * kr[e];
                    d *= c->scale;
                    if (c->softcap > 0) d = c->softcap * tanh(d / c->softcap);
                    sc[u] = d;
                    mx = d > mx ? d : mx;
                }
                for (int u = lo; u <= p; u++) sum += exp(sc[u] - mx);
                double *o = out + ((size_t)t * c->H + h) * c->D;
                for (int e = 0; e < c->D; e++) o[e] = 0;
                for (int u = lo; u <= p; u++) {
                    const float *vr = c->hist_v[s] + (size_t)u * kvw + (size_t)kvh * c->D;
                    for (int e = 0; e < c->D; e++) o[e] += exp(sc[u] - mx) / sum * vr[e];
                }
                free(sc);
            }
        }
}

/* a table laid out by hand, a case's shape on one line and its sequences on the next:
 * clang-format gives each designated field a line of its own */
/* clang-format off */
static const att_case att_cases[] = {
    /* GQA 4:2, odd head dim, a prefill chunk + a decode + a continued chunk, > one block */
    {.n_seqs = 3, .H = 4, .KV = 2, .D = 17, .cap = 160, .slots = 4, .scale = 0.25f,
     .len = {70, 1, 6}, .pos0 = {0, 5, 75}, .slot = {2, 0, 3}},
    /* MHA, vector-sized head dim, softcap with a large scale so it bites */
    {.n_seqs = 2, .H = 3, .KV = 3, .D = 64, .cap = 40, .slots = 2, .scale = 1.0f, .softcap = 5.0f,
     .len = {9, 1}, .pos0 = {0, 30}, .slot = {1, 0}},
    /* sliding window on a ring of cap = window: a decode far past cap, a chunk inside it */
    {.n_seqs = 2, .H = 2, .KV = 1, .D = 33, .cap = 8, .slots = 2, .window = 8, .scale = 0.2f,
     .len = {1, 5}, .pos0 = {20, 3}, .slot = {0, 1}},
    /* Qwen3.5 full-attention shape: 8 q heads on 2 kv heads of 256, decode at 300 */
    {.n_seqs = 1, .H = 8, .KV = 2, .D = 256, .cap = 512, .slots = 1, .scale = 0.0625f,
     .len = {1}, .pos0 = {300}, .slot = {0}},
};
/* clang-format on */

/* Tolerance: outputs are convex combinations of v (|v| < 1). f32 scores err by ~D·2^-24·|q||k|
 * scale (< 1e-5 here) and exp/normalisation by a few ulp, so 2e-5 bounds the output error
 * while a wrong mask, head mapping or cache row changes outputs by ~0.1. */
static void test_kv_attention(void) {
    for (size_t ci = 0; ci < 2 * sizeof att_cases / sizeof *att_cases; ci++) {
        att_case c = att_cases[ci / 2];
        att_case_init(&c, ci % 2 ? DTYPE_BF16 : DTYPE_F32);
        int m = 0;
        for (int s = 0; s < c.n_seqs; s++) m += c.len[s];
        size_t n = (size_t)m * c.H * c.D;
        double *want = dvec(n);
        att_ref(&c, want);
        float *out = fvec(n);
        for (int bi = 0; bi < n_be; bi++) {
            att_run(&c, be[bi], 0, c.n_seqs, out);
            CHECK_CLOSE(out, want, n, 2e-5, "attention case %zu, %s cache", ci / 2,
                        dtype_name(c.dt));
        }
        free(out);
        free(want);
        att_case_free(&c);
    }
}

/* Each (token, head) is computed from its own sequence only, with the same operations in
 * the same order whatever else is in the batch: results must be bit-identical. */
static void test_attention_batch_equals_alone(void) {
    att_case c = att_cases[0];
    att_case_init(&c, DTYPE_BF16);
    int m = c.len[0] + c.len[1] + c.len[2];
    size_t hd = (size_t)c.H * c.D;
    float *all = fvec((size_t)m * hd), *one = fvec((size_t)m * hd);
    for (int bi = 0; bi < n_be; bi++) {
        att_run(&c, be[bi], 0, 3, all);
        size_t off = 0;
        for (int s = 0; s < 3; s++) {
            att_run(&c, be[bi], s, s + 1, one);
            CHECK_SAME(all + off, one, c.len[s] * hd, "attention seq %d alone", s);
            off += c.len[s] * hd;
        }
    }
    free(one);
    free(all);
    att_case_free(&c);
}

/* A work item takes one query head or several of a kv head's group, as the batch and the
 * thread count decide (cpu_attention.c); each head's arithmetic is the same either way, so
 * the bits must not depend on it: a step of 4 tokens on 1 thread (whole groups) against 16
 * threads (one head an item), every ISA, GQA groups of 4 and 8, both cache dtypes. */
static void test_attention_grouping(void) {
    /* clang-format off */
    static const att_case cases[] = {
        {.n_seqs = 1, .H = 8, .KV = 2, .D = 64, .cap = 256, .slots = 1, .scale = 0.125f,
         .len = {4}, .pos0 = {100}, .slot = {0}},
        {.n_seqs = 1, .H = 8, .KV = 1, .D = 48, .cap = 256, .slots = 1, .scale = 0.2f,
         .softcap = 3.0f, .len = {4}, .pos0 = {130}, .slot = {0}},
    };
    /* clang-format on */
    for (size_t ci = 0; ci < 2 * sizeof cases / sizeof *cases; ci++) {
        att_case c = cases[ci / 2];
        att_case_init(&c, ci % 2 ? DTYPE_BF16 : DTYPE_F32);
        size_t n = (size_t)c.len[0] * c.H * c.D;
        float *grouped = fvec(n), *single = fvec(n);
        for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
            backend *b1 = NULL, *b16 = NULL;
            strata_err err = {0};
            if (!cpu_backend_isa_supported((cpu_isa)isa)) continue;
            CHECK_MSG(!cpu_backend_create_isa(1, (cpu_isa)isa, &b1, &err) &&
                          !cpu_backend_create_isa(16, (cpu_isa)isa, &b16, &err),
                      "%s", err.msg);
            if (b1 && b16) {
                att_run(&c, b1, 0, 1, grouped);
                att_run(&c, b16, 0, 1, single);
                CHECK_MSG(!memcmp(grouped, single, n * sizeof(float)),
                          "attention case %zu (%s cache, %s): 1 vs 16 threads not bit-identical",
                          ci / 2, dtype_name(c.dt), cpu_backend_isa_name((cpu_isa)isa));
            }
            backend_destroy(b1);
            backend_destroy(b16);
        }
        free(single);
        free(grouped);
        att_case_free(&c);
    }
}

/* The attention's four-key kernels are their one-key kernels, bit for bit: dot4 is four dots,
 * axpy4 is axpby with c and then with 1 three times (a mutant summing in another order, or
 * scaling every key by c, fails), on every ISA that has them, odd widths included. */
static void test_attention_four_key_kernels(void) {
    static const cpu_kernels *const tabs[] = {&cpu_kernels_scalar, &cpu_kernels_avx2,
                                              &cpu_kernels_avx512};
    static const cpu_isa isas[] = {CPU_ISA_SCALAR, CPU_ISA_AVX2, CPU_ISA_AVX512};
    static const int widths[] = {1, 17, 33, 48, 64, 256, 512};
    int ran = 0;
    for (int ti = 0; ti < 3; ti++) {
        const cpu_kernels *k = tabs[ti];
        if (!cpu_backend_isa_supported(isas[ti]) || (!k->dot4 && !k->axpy4)) continue;
        for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++) {
            int n = widths[wi];
            float *a = frand((size_t)n), *y = frand((size_t)n), *y1 = fvec((size_t)n);
            float *rows[4], w[4] = {0.3f, -1.7f, 0.01f, 2.5f}, c = 0.61f;
            for (int r = 0; r < 4; r++) rows[r] = frand((size_t)n);
            const float *const *cr = (const float *const *)rows;
            if (k->dot4) {
                float d4[4];
                k->dot4(a, cr, n, d4);
                for (int r = 0; r < 4; r++) {
                    float d = k->dot(a, rows[r], n);
                    CHECK_MSG(!memcmp(&d, &d4[r], sizeof d), "%s dot4 row %d n=%d: %g vs %g",
                              k->name, r, n, d4[r], d);
                }
            }
            if (k->axpy4) {
                memcpy(y1, y, sizeof(float) * (size_t)n);
                for (int r = 0; r < 4; r++) k->axpby(y1, rows[r], w[r], r ? 1.0f : c, n);
                k->axpy4(y, cr, w, c, n);
                CHECK_MSG(!memcmp(y, y1, sizeof(float) * (size_t)n), "%s axpy4 n=%d", k->name, n);
            }
            for (int r = 0; r < 4; r++) free(rows[r]);
            free(a);
            free(y);
            free(y1);
            ran++;
        }
    }
    CHECK_MSG(ran > 0 || !cpu_backend_isa_supported(CPU_ISA_AVX512),
              "no ISA with the four-key kernels was tested");
}

/* A BF16 cache holds each stored value rounded to nearest even, at its row. */
static void test_kv_store_bf16_rounds(void) {
    enum { W = 24, CAP = 5, SLOTS = 2, T = 3 };
    int len[1] = {T}, pos0[1] = {6}, slot[1] = {1};
    float *k = frand((size_t)T * W), *v = frand((size_t)T * W);
    for (int bi = 0; bi < n_be; bi++) {
        uint16_t kc[SLOTS * CAP * W] = {0}, vc[SLOTS * CAP * W] = {0};
        bk_kv kv = {.k = kc, .v = vc, .dt = DTYPE_BF16, .cap = CAP, .width = W};
        tbatch tb;
        make_batch(&tb, 1, len, pos0, slot);
        be[bi]->ops->batch_prepare(be[bi], &tb.b, NULL);
        be[bi]->ops->kv_store(be[bi], &kv, k, v, &tb.b);
        int bad = 0;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < W; j++) {
                size_t at = ((size_t)CAP + (size_t)(6 + t) % CAP) * W + (size_t)j;
                bad += kc[at] != dtype_f32_to_bf16(k[t * W + j]);
                bad += vc[at] != dtype_f32_to_bf16(v[t * W + j]);
            }
        CHECK_MSG(!bad, "%d cache values not the bf16 rounding of what was stored", bad);
    }
    free(k);
    free(v);
}

/* ---- conv1d ---- */

/* Double reference: per sequence, hist = [window (K-1 rows); x rows]; out[t] =
 * act(bias + Σ_j w[c, j]·hist[t + j]); the new window is the last K-1 rows of hist. */
static void conv_ref(double *out, const float *x, int ld_x, const float *w, const float *bias,
                     float *state, const tbatch *tb, int C, int K, int act) {
    int W = K - 1;
    for (int s = 0; s < tb->b.n_seqs; s++) {
        int len = tb->len[s], t0 = tb->start[s];
        float *st = state + (size_t)tb->slot[s] * W * C;
        double *hist = dvec((size_t)(W + len) * C);
        for (int r = 0; r < W; r++)
            for (int c = 0; c < C; c++) hist[r * C + c] = st[r * C + c];
        for (int t = 0; t < len; t++)
            for (int c = 0; c < C; c++)
                hist[(size_t)(W + t) * C + c] = x[(size_t)(t0 + t) * ld_x + c];
        for (int t = 0; t < len; t++)
            for (int c = 0; c < C; c++) {
                double a = bias ? bias[c] : 0.0;
                for (int j = 0; j < K; j++)
                    a += (double)w[c * K + j] * hist[(size_t)(t + j) * C + c];
                out[(size_t)(t0 + t) * C + c] = act ? a / (1.0 + exp(-a)) : a;
            }
        for (int r = 0; r < W; r++)
            for (int c = 0; c < C; c++) st[r * C + c] = (float)hist[(size_t)(len + r) * C + c];
        free(hist);
    }
}

/* Tolerance: K <= 4 f32 products of |values| < 1 plus silu: 1e-6 absolute. */
static void test_conv1d(void) {
    static const int Cs[] = {1, 17, 40};
    static const int Ks[] = {1, 2, 4};
    int len[3] = {5, 1, 2}, pos0[3] = {0, 9, 1}, slot[3] = {1, 0, 2};
    tbatch tb;
    make_batch(&tb, 3, len, pos0, slot);
    int m = tb.b.n_tokens;
    for (int ci = 0; ci < 3; ci++)
        for (int ki = 0; ki < 3; ki++)
            for (int var = 0; var < 2; var++) {
                int C = Cs[ci], K = Ks[ki], W = K - 1, ld_x = C + 3, act = var, use_bias = !var;
                float *x = frand((size_t)m * ld_x), *wv = frand((size_t)C * K),
                      *bv = frand((size_t)C);
                bk_weight w = {.data = wv, .dt = DTYPE_F32, .ndim = 3, .shape = {C, 1, K}};
                bk_weight bias = {.data = bv, .dt = DTYPE_F32, .ndim = 1, .shape = {C}};
                float *st0 = frand((size_t)3 * W * C);
                for (int i = 0; i < W * C; i++)
                    st0[(size_t)slot[0] * W * C + i] = 0; /* a new sequence */
                float *st_ref = fvec((size_t)3 * W * C);
                memcpy(st_ref, st0, (size_t)3 * W * C * sizeof(float));
                double *want = dvec((size_t)m * C), *wst = dvec((size_t)3 * W * C);
                conv_ref(want, x, ld_x, wv, use_bias ? bv : NULL, st_ref, &tb, C, K, act);
                for (int i = 0; i < 3 * W * C; i++) wst[i] = st_ref[i];
                for (int bi = 0; bi < n_be; bi++) {
                    float *out = fvec((size_t)m * C), *st = fvec((size_t)3 * W * C);
                    memcpy(st, st0, (size_t)3 * W * C * sizeof(float));
                    be[bi]->ops->conv1d(be[bi], out, x, ld_x, &w, use_bias ? &bias : NULL, st,
                                        &tb.b, C, K, act);
                    CHECK_CLOSE(out, want, (size_t)m * C, 1e-6, "conv1d C=%d K=%d act=%d", C, K,
                                act);
                    CHECK_CLOSE(st, wst, (size_t)3 * W * C, 0.0, "conv1d window C=%d K=%d", C, K);
                    free(st);
                    free(out);
                }
                free(wst);
                free(want);
                free(st_ref);
                free(st0);
                free(bv);
                free(wv);
                free(x);
            }
}

/* One call over 7 tokens == 3 + 1 + 3 tokens with the window carried == 7 single
 * tokens: each output is the same products summed in the same order, so bit-identical. */
static void test_conv1d_pieces(void) {
    int C = 37, K = 4, W = 3, T = 7;
    float *x = frand((size_t)T * C), *wv = frand((size_t)C * K);
    bk_weight w = {.data = wv, .dt = DTYPE_F32, .ndim = 2, .shape = {C, K}};
    float *st0 = frand((size_t)W * C);
    for (int bi = 0; bi < n_be; bi++) {
        float *o1 = fvec((size_t)T * C), *o2 = fvec((size_t)T * C), *o3 = fvec((size_t)T * C);
        float *s1 = fvec((size_t)W * C), *s2 = fvec((size_t)W * C), *s3 = fvec((size_t)W * C);
        memcpy(s1, st0, (size_t)W * C * 4);
        memcpy(s2, st0, (size_t)W * C * 4);
        memcpy(s3, st0, (size_t)W * C * 4);
        tbatch tb;
        int slot0 = 0;
        make_batch(&tb, 1, &T, &slot0, &slot0);
        be[bi]->ops->conv1d(be[bi], o1, x, C, &w, NULL, s1, &tb.b, C, K, 1);
        int pieces[3] = {3, 1, 3}, at = 0;
        for (int p = 0; p < 3; p++) {
            make_batch(&tb, 1, &pieces[p], &at, &slot0);
            be[bi]->ops->conv1d(be[bi], o2 + (size_t)at * C, x + (size_t)at * C, C, &w, NULL, s2,
                                &tb.b, C, K, 1);
            at += pieces[p];
        }
        for (int t = 0; t < T; t++) {
            int one = 1;
            make_batch(&tb, 1, &one, &t, &slot0);
            be[bi]->ops->conv1d(be[bi], o3 + (size_t)t * C, x + (size_t)t * C, C, &w, NULL, s3,
                                &tb.b, C, K, 1);
        }
        CHECK_SAME(o1, o2, (size_t)T * C, "conv1d pieces%s", "");
        CHECK_SAME(o1, o3, (size_t)T * C, "conv1d single tokens%s", "");
        CHECK_SAME(s1, s2, (size_t)W * C, "conv1d pieces window%s", "");
        CHECK_SAME(s1, s3, (size_t)W * C, "conv1d single window%s", "");
        free(s3);
        free(s2);
        free(s1);
        free(o3);
        free(o2);
        free(o1);
    }
    free(st0);
    free(wv);
    free(x);
}

/* ---- gated delta rule ---- */

/* The chunked form (spec §7.1) for one value head over T tokens, in double, chunk size cs,
 * from state S [dk, dv] (updated). q, k, v: [T, dk|dv] rows; g, beta: [T]. */
static void delta_chunked(double *o, double *S, const double *q, const double *k, const double *v,
                          const double *g, const double *beta, int T, int dk, int dv, int cs) {
    double *G = dvec(cs), *L = dvec((size_t)cs * cs), *U = dvec((size_t)cs * dv);
    double *Wm = dvec((size_t)cs * dk), *P = dvec((size_t)cs * cs), *Ut = dvec((size_t)cs * dv);
    double *Sn = dvec((size_t)dk * dv);
    for (int c0 = 0; c0 < T; c0 += cs) {
        /* rows past T are the zero padding: q = k = v = beta = g = 0 */
#define CH(arr, r, w, i) ((c0 + (r)) < T ? (arr)[(size_t)(c0 + (r)) * (w) + (i)] : 0.0)
        double acc = 0;
        for (int r = 0; r < cs; r++) G[r] = acc += CH(g, r, 1, 0);
        for (int r = 0; r < cs; r++)
            for (int s = 0; s < cs; s++) {
                double kk = 0, qk = 0;
                for (int i = 0; i < dk; i++) {
                    kk += CH(k, r, dk, i) * CH(k, s, dk, i);
                    qk += CH(q, r, dk, i) * CH(k, s, dk, i);
                }
                L[r * cs + s] = s < r ? CH(beta, r, 1, 0) * kk * exp(G[r] - G[s]) : 0.0;
                P[r * cs + s] = s <= r ? qk * exp(G[r] - G[s]) : 0.0;
            }
        for (int r = 0; r < cs; r++) { /* forward substitution with unit lower (I + L) */
            for (int j = 0; j < dv; j++) {
                double a = CH(beta, r, 1, 0) * CH(v, r, dv, j);
                for (int s = 0; s < r; s++) a -= L[r * cs + s] * U[s * dv + j];
                U[r * dv + j] = a;
            }
            for (int i = 0; i < dk; i++) {
                double a = CH(beta, r, 1, 0) * exp(G[r]) * CH(k, r, dk, i);
                for (int s = 0; s < r; s++) a -= L[r * cs + s] * Wm[s * dk + i];
                Wm[r * dk + i] = a;
            }
        }
        for (int r = 0; r < cs; r++)
            for (int j = 0; j < dv; j++) {
                double a = U[r * dv + j];
                for (int i = 0; i < dk; i++) a -= Wm[r * dk + i] * S[i * dv + j];
                Ut[r * dv + j] = a;
            }
        for (int r = 0; r < cs && c0 + r < T; r++)
            for (int j = 0; j < dv; j++) {
                double a = 0;
                for (int i = 0; i < dk; i++) a += exp(G[r]) * CH(q, r, dk, i) * S[i * dv + j];
                for (int s = 0; s < cs; s++) a += P[r * cs + s] * Ut[s * dv + j];
                o[(size_t)(c0 + r) * dv + j] = a;
            }
        double Gl = G[cs - 1];
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++) {
                double a = exp(Gl) * S[i * dv + j];
                for (int r = 0; r < cs; r++) a += exp(Gl - G[r]) * CH(k, r, dk, i) * Ut[r * dv + j];
                Sn[i * dv + j] = a;
            }
        memcpy(S, Sn, (size_t)dk * dv * sizeof(double));
#undef CH
    }
    free(Sn);
    free(Ut);
    free(P);
    free(Wm);
    free(U);
    free(L);
    free(G);
}

typedef struct {
    int Hk, Hv, dk, dv, n_seqs;
    int len[3], slot[3];
    float gmul; /* g scaled by this (0: 1): large values decay the state away in a few tokens */
} delta_case;

static const delta_case delta_cases[] = {
    {.Hk = 2, .Hv = 4, .dk = 7, .dv = 33, .n_seqs = 3, .len = {9, 1, 4}, .slot = {2, 0, 1}},
    {.Hk = 1, .Hv = 1, .dk = 17, .dv = 15, .n_seqs = 1, .len = {6}, .slot = {0}},
    /* Qwen3.5 head size, dk = dv = 128 */
    {.Hk = 1, .Hv = 2, .dk = 128, .dv = 128, .n_seqs = 2, .len = {5, 1}, .slot = {1, 0}},
};

/* Inputs as the model feeds them: rows of [q (Hk·dk) | k (Hk·dk) | v (Hv·dv)] (the conv
 * output), q and k l2-normalised with q scaled by dk^-1/2, g in (-2, 0), beta in (0, 1). */
static void delta_inputs(const delta_case *dc, int m, float *c, float *g, float *beta) {
    int C = 2 * dc->Hk * dc->dk + dc->Hv * dc->dv;
    for (int t = 0; t < m; t++) {
        float *row = c + (size_t)t * C;
        for (int i = 0; i < C; i++) row[i] = rng_f();
        for (int h = 0; h < 2 * dc->Hk; h++) {
            float *x = row + (size_t)h * dc->dk, ss = 0;
            for (int i = 0; i < dc->dk; i++) ss += x[i] * x[i];
            float sc = (h < dc->Hk ? 1.0f / sqrtf((float)dc->dk) : 1.0f) / sqrtf(ss + 1e-6f);
            for (int i = 0; i < dc->dk; i++) x[i] *= sc;
        }
        for (int h = 0; h < dc->Hv; h++) {
            g[t * dc->Hv + h] = -(rng_f() + 1.0f) * (dc->gmul > 0.0f ? dc->gmul : 1.0f);
            beta[t * dc->Hv + h] = 0.5f + 0.49f * rng_f();
        }
    }
}

/* The double reference for a whole step: per (sequence, value head), the chunked form
 * with chunk 4 in double (delta_chunked), from states st0 [3 slots, Hv, dk, dv] into wst,
 * outputs into want [m, Hv, dv]. c, g, beta are the step's inputs (delta_inputs). */
static void delta_want(const delta_case *dc, const tbatch *tb, const float *c, const float *g,
                       const float *beta, const float *st0, double *want, double *wst) {
    int Hv = dc->Hv, dk = dc->dk, dv = dc->dv, C = 2 * dc->Hk * dk + Hv * dv;
    for (size_t i = 0; i < 3 * (size_t)Hv * dk * dv; i++) wst[i] = st0[i];
    for (int s = 0; s < dc->n_seqs; s++)
        for (int h = 0; h < Hv; h++) {
            int T = dc->len[s], t0 = tb->start[s], hk = h / (Hv / dc->Hk);
            double *q = dvec((size_t)T * dk), *k = dvec((size_t)T * dk), *v = dvec((size_t)T * dv);
            double *gg = dvec(T), *bb = dvec(T), *o = dvec((size_t)T * dv);
            for (int t = 0; t < T; t++) {
                const float *row = c + (size_t)(t0 + t) * C;
                for (int i = 0; i < dk; i++) {
                    q[t * dk + i] = row[hk * dk + i];
                    k[t * dk + i] = row[dc->Hk * dk + hk * dk + i];
                }
                for (int j = 0; j < dv; j++) v[t * dv + j] = row[2 * dc->Hk * dk + h * dv + j];
                gg[t] = g[(t0 + t) * Hv + h];
                bb[t] = beta[(t0 + t) * Hv + h];
            }
            delta_chunked(o, wst + ((size_t)dc->slot[s] * Hv + h) * dk * dv, q, k, v, gg, bb, T, dk,
                          dv, 4);
            for (int t = 0; t < T; t++)
                for (int j = 0; j < dv; j++)
                    want[((size_t)(t0 + t) * Hv + h) * dv + j] = o[t * dv + j];
            free(o);
            free(bb);
            free(gg);
            free(v);
            free(k);
            free(q);
        }
}

/* A step of a delta case: its batch, inputs (delta_inputs), starting states st0 for 3
 * slots and the double reference want / wst (delta_want). */
typedef struct {
    tbatch tb;
    int m, C;  /* tokens, conv row width */
    size_t ss; /* one slot's state: Hv·dk·dv */
    float *c, *g, *beta, *st0;
    double *want, *wst;
} delta_step;

static void delta_step_init(delta_step *d, const delta_case *dc) {
    int pos0[3] = {0, 0, 0};
    make_batch(&d->tb, dc->n_seqs, dc->len, pos0, dc->slot);
    d->m = d->tb.b.n_tokens;
    d->C = 2 * dc->Hk * dc->dk + dc->Hv * dc->dv;
    d->c = fvec((size_t)d->m * d->C);
    d->g = fvec((size_t)d->m * dc->Hv);
    d->beta = fvec((size_t)d->m * dc->Hv);
    delta_inputs(dc, d->m, d->c, d->g, d->beta);
    d->ss = (size_t)dc->Hv * dc->dk * dc->dv;
    d->st0 = frand(3 * d->ss);
    for (size_t i = 0; i < 3 * d->ss; i++) d->st0[i] *= 0.1f;
    d->want = dvec((size_t)d->m * dc->Hv * dc->dv);
    d->wst = dvec(3 * d->ss);
    delta_want(dc, &d->tb, d->c, d->g, d->beta, d->st0, d->want, d->wst);
}

static void delta_step_free(delta_step *d) {
    free(d->wst);
    free(d->want);
    free(d->st0);
    free(d->beta);
    free(d->g);
    free(d->c);
}

/* Tolerance: the f32 recurrence does dot products of dk terms of size <= 1 per token
 * (error <= dk·2^-24 each) and the state map is non-expansive (decay <= 1, and
 * I − beta·k kᵀ with |k| = 1, beta in (0,1)), so errors add at most linearly over T
 * tokens: 4·T·dk·2^-24 bounds the deviation from exact arithmetic. A wrong head mapping,
 * orientation or decay order is off by O(0.1). */
static void test_gated_delta(void) {
    for (size_t ci = 0; ci < sizeof delta_cases / sizeof *delta_cases; ci++) {
        const delta_case *dc = &delta_cases[ci];
        int Hv = dc->Hv, dk = dc->dk, dv = dc->dv, Tmax = 0;
        for (int s = 0; s < dc->n_seqs; s++) Tmax = dc->len[s] > Tmax ? dc->len[s] : Tmax;
        delta_step d;
        delta_step_init(&d, dc);
        int m = d.m, C = d.C;
        size_t ss = d.ss;
        double tol = 4.0 * Tmax * dk * ldexp(1.0, -24) + 1e-6;
        for (int bi = 0; bi < n_be; bi++) {
            float *out = fvec((size_t)m * Hv * dv), *st = fvec(3 * ss);
            memcpy(st, d.st0, 3 * ss * sizeof(float));
            be[bi]->ops->gated_delta(be[bi], out, d.c, d.c + dc->Hk * dk, C, d.c + 2 * dc->Hk * dk,
                                     C, d.g, d.beta, st, &d.tb.b, dc->Hk, Hv, dk, dv,
                                     BK_VHEAD_GROUPED);
            CHECK_CLOSE(out, d.want, (size_t)m * Hv * dv, tol, "gated_delta case %zu out", ci);
            CHECK_CLOSE(st, d.wst, 3 * ss, tol, "gated_delta case %zu state", ci);
            free(st);
            free(out);
        }
        delta_step_free(&d);
    }
}

/* The chunked form (cpu_gated_delta_chunk.c, forced for every run) and the recurrence on
 * runs shorter than, equal to and several times the chunk, several sequences of unequal
 * length in one step, carried states, GQA, head sizes that need padding and the real one.
 * Tolerance 1e-5 (absolute; outputs and states are O(0.1-1)): an entry of a chunk is a
 * sum of at most dk + CPU_GATED_DELTA_CHUNK <= 160 products of size <= 1 (tile products,
 * the forward substitution, decay factors rounded once), whose rounding errors of
 * <= 2^-24 each add like a random walk, ~sqrt(160)·2^-24 = 8e-7, and the state passes
 * through the recurrence's non-expansive map between chunks. Measured: <= 1e-7 for both
 * forms on every ISA. test_gated_delta's worst-case bound (4·T·dk·2^-24, 3e-3 here) would
 * miss a decay factor off by 0.1%, which moves the outputs by 3e-5. */
#define DC CPU_GATED_DELTA_CHUNK
/* laid out by hand like att_cases */
/* clang-format off */
static const delta_case delta_chunk_cases[] = {
    {.Hk = 2, .Hv = 4, .dk = 7, .dv = 33, .n_seqs = 3,
     .len = {6 * DC + 8, DC, 5}, .slot = {2, 0, 1}},
    {.Hk = 1, .Hv = 1, .dk = 17, .dv = 15, .n_seqs = 3,
     .len = {DC - 1, DC + 1, 4 * DC}, .slot = {1, 0, 2}},
    {.Hk = 1, .Hv = 2, .dk = 128, .dv = 128, .n_seqs = 2, .len = {4 * DC + 2, 1}, .slot = {1, 0}},
    /* g down to -120: a chunk's Γ passes -600 (one exp per decay factor), e^g can be 0 */
    {.Hk = 1, .Hv = 2, .dk = 9, .dv = 16, .n_seqs = 1,
     .len = {2 * DC + 6}, .slot = {2}, .gmul = 60.0f},
};
/* clang-format on */
#undef DC

static void test_gated_delta_chunked(void) {
    for (size_t ci = 0; ci < sizeof delta_chunk_cases / sizeof *delta_chunk_cases; ci++) {
        const delta_case *dc = &delta_chunk_cases[ci];
        int Hv = dc->Hv, dk = dc->dk, dv = dc->dv;
        delta_step d;
        delta_step_init(&d, dc);
        int m = d.m, C = d.C;
        size_t ss = d.ss;
        const double tol = 1e-5;
        for (int bi = 0; bi < n_be; bi++)
            for (int form = 0; form < 2; form++) { /* 0: the recurrence, 1: chunked */
                float *out = fvec((size_t)m * Hv * dv), *st = fvec(3 * ss);
                memcpy(st, d.st0, 3 * ss * sizeof(float));
                cpu_gated_delta_run(be[bi], out, d.c, d.c + dc->Hk * dk, C, d.c + 2 * dc->Hk * dk,
                                    C, d.g, d.beta, st, &d.tb.b, dc->Hk, Hv, dk, dv,
                                    BK_VHEAD_GROUPED, form ? 1 : INT_MAX);
                CHECK_CLOSE(out, d.want, (size_t)m * Hv * dv, tol, "case %zu form %d out", ci,
                            form);
                CHECK_CLOSE(st, d.wst, 3 * ss, tol, "case %zu form %d state", ci, form);
                free(st);
                free(out);
            }
        delta_step_free(&d);
    }
}

/* Prefill of n tokens == n decode steps, bit for bit: the backend runs the same token
 * step either way (cpu_gated_delta.c), so any difference is a bug in the state handling. */
static void test_gated_delta_steps(void) {
    const delta_case *dc = &delta_cases[0];
    int Hk = dc->Hk, Hv = dc->Hv, dk = dc->dk, dv = dc->dv, T = 6, C = 2 * Hk * dk + Hv * dv;
    float *c = fvec((size_t)T * C), *g = fvec((size_t)T * Hv), *beta = fvec((size_t)T * Hv);
    delta_inputs(dc, T, c, g, beta);
    size_t ss = (size_t)Hv * dk * dv;
    for (int bi = 0; bi < n_be; bi++) {
        float *o1 = fvec((size_t)T * Hv * dv), *o2 = fvec((size_t)T * Hv * dv);
        float *s1 = fvec(ss), *s2 = fvec(ss);
        tbatch tb;
        int z = 0;
        make_batch(&tb, 1, &T, &z, &z);
        be[bi]->ops->gated_delta(be[bi], o1, c, c + Hk * dk, C, c + 2 * Hk * dk, C, g, beta, s1,
                                 &tb.b, Hk, Hv, dk, dv, BK_VHEAD_GROUPED);
        for (int t = 0; t < T; t++) {
            int one = 1;
            make_batch(&tb, 1, &one, &t, &z);
            const float *row = c + (size_t)t * C;
            be[bi]->ops->gated_delta(be[bi], o2 + (size_t)t * Hv * dv, row, row + Hk * dk, C,
                                     row + 2 * Hk * dk, C, g + t * Hv, beta + t * Hv, s2, &tb.b, Hk,
                                     Hv, dk, dv, BK_VHEAD_GROUPED);
        }
        CHECK_SAME(o1, o2, (size_t)T * Hv * dv, "gated_delta steps out%s", "");
        CHECK_SAME(s1, s2, ss, "gated_delta steps state%s", "");
        free(s2);
        free(s1);
        free(o2);
        free(o1);
    }
    free(beta);
    free(g);
    free(c);
}

/* ---- the tiled V-head order (backend.h BK_VHEAD_TILED) ---- */

/* Where grouped V head h (key head h / r, r = Hv / Hk) sits in the tiled order: h = k·r + j
 * goes to j·Hk + k, as llama.cpp's converter writes it. */
static int vt_pos(int h, int Hk, int Hv) {
    int r = Hv / Hk;
    return (h % r) * Hk + h / r;
}

/* dst = src with the Hv head blocks of w floats at off in each of rows rows (ld apart) moved
 * to their tiled places; the rest of each row copied. */
static void vt_tile(float *dst, const float *src, int rows, size_t ld, size_t off, int Hk, int Hv,
                    size_t w) {
    memcpy(dst, src, (size_t)rows * ld * sizeof(float));
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < Hv; h++)
            memcpy(dst + r * ld + off + (size_t)vt_pos(h, Hk, Hv) * w, src + r * ld + off + h * w,
                   w * sizeof(float));
}

/* The tiled mapping on tiled inputs equals the grouped mapping on the grouped ones with its
 * outputs and states tiled, bit for bit: a head's arithmetic is the same, only which q, k it
 * reads and where its v, g, beta, state and out sit change. For the recurrence and the
 * chunked form (cpu_gated_delta_run) and the fused gdn op (a, b, A_log, dt_bias tiled too),
 * Hk < Hv with Hk > 1 (Hk = 1 maps every head to key head 0 either way). */
static void test_gated_delta_tiled(void) {
    static const delta_case cs[] = {
        {.Hk = 2, .Hv = 4, .dk = 7, .dv = 33, .n_seqs = 3, .len = {40, 1, 5}, .slot = {2, 0, 1}},
        {.Hk = 3, .Hv = 6, .dk = 16, .dv = 20, .n_seqs = 2, .len = {3, 70}, .slot = {1, 2}},
        {.Hk = 2, .Hv = 8, .dk = 128, .dv = 128, .n_seqs = 1, .len = {35}, .slot = {0}},
    };
    for (size_t ci = 0; ci < sizeof cs / sizeof *cs; ci++) {
        const delta_case *dc = &cs[ci];
        int pos0[3] = {0, 0, 0}, Hk = dc->Hk, Hv = dc->Hv, dk = dc->dk, dv = dc->dv;
        tbatch tb;
        make_batch(&tb, dc->n_seqs, dc->len, pos0, dc->slot);
        int m = tb.b.n_tokens, C = 2 * Hk * dk + Hv * dv;
        size_t ss = (size_t)Hv * dk * dv, on = (size_t)m * Hv * dv, gn = (size_t)m * Hv;
        float *c = fvec((size_t)m * C), *g = fvec(gn), *beta = fvec(gn), *st0 = frand(3 * ss);
        float *ct = fvec((size_t)m * C), *gt = fvec(gn), *bt = fvec(gn), *st0t = fvec(3 * ss);
        float *a = frand(gn), *bb = frand(gn), *at = fvec(gn), *bbt = fvec(gn);
        float alog[8], dtb[8], alogt[8], dtbt[8];
        delta_inputs(dc, m, c, g, beta);
        for (size_t i = 0; i < 3 * ss; i++) st0[i] *= 0.1f;
        for (int h = 0; h < Hv; h++) alog[h] = 0.5f * rng_f(), dtb[h] = rng_f();
        vt_tile(ct, c, m, (size_t)C, 2 * (size_t)Hk * dk, Hk, Hv, (size_t)dv);
        vt_tile(gt, g, m, (size_t)Hv, 0, Hk, Hv, 1);
        vt_tile(bt, beta, m, (size_t)Hv, 0, Hk, Hv, 1);
        vt_tile(at, a, m, (size_t)Hv, 0, Hk, Hv, 1);
        vt_tile(bbt, bb, m, (size_t)Hv, 0, Hk, Hv, 1);
        vt_tile(st0t, st0, 3, ss, 0, Hk, Hv, (size_t)dk * dv);
        vt_tile(alogt, alog, 1, (size_t)Hv, 0, Hk, Hv, 1);
        vt_tile(dtbt, dtb, 1, (size_t)Hv, 0, Hk, Hv, 1);
        bk_weight A = {alog, DTYPE_F32, 1, {Hv}}, D = {dtb, DTYPE_F32, 1, {Hv}};
        bk_weight At = {alogt, DTYPE_F32, 1, {Hv}}, Dt = {dtbt, DTYPE_F32, 1, {Hv}};
        float *o = fvec(on), *s = fvec(3 * ss), *ot = fvec(on), *stt = fvec(3 * ss);
        float *want = fvec(on), *wst = fvec(3 * ss), *x = fvec((size_t)m * C), *xt = fvec(on);
        float *sg = fvec(gn), *sb = fvec(gn);
        for (int bi = 0; bi < n_be; bi++)
            for (int form = 0; form < 3; form++) { /* recurrence, chunked, fused gdn */
                memcpy(s, st0, 3 * ss * sizeof(float));
                memcpy(stt, st0t, 3 * ss * sizeof(float));
                if (form < 2) {
                    int cm = form ? 1 : INT_MAX;
                    cpu_gated_delta_run(be[bi], o, c, c + Hk * dk, C, c + 2 * Hk * dk, C, g, beta,
                                        s, &tb.b, Hk, Hv, dk, dv, BK_VHEAD_GROUPED, cm);
                    cpu_gated_delta_run(be[bi], ot, ct, ct + Hk * dk, C, ct + 2 * Hk * dk, C, gt,
                                        bt, stt, &tb.b, Hk, Hv, dk, dv, BK_VHEAD_TILED, cm);
                } else { /* gdn normalises q, k in place: on copies */
                    float qs = 1.0f / sqrtf((float)dk);
                    memcpy(x, c, (size_t)m * C * sizeof(float));
                    be[bi]->ops->gdn(be[bi], o, x, x + Hk * dk, C, x + 2 * Hk * dk, C, a, bb, &A,
                                     &D, sg, sb, s, &tb.b, Hk, Hv, dk, dv, qs, BK_VHEAD_GROUPED);
                    memcpy(x, ct, (size_t)m * C * sizeof(float));
                    be[bi]->ops->gdn(be[bi], ot, x, x + Hk * dk, C, x + 2 * Hk * dk, C, at, bbt,
                                     &At, &Dt, sg, sb, stt, &tb.b, Hk, Hv, dk, dv, qs,
                                     BK_VHEAD_TILED);
                }
                vt_tile(want, o, m, (size_t)Hv * dv, 0, Hk, Hv, (size_t)dv);
                vt_tile(wst, s, 3, ss, 0, Hk, Hv, (size_t)dk * dv);
                CHECK_SAME(ot, want, on, "tiled case %zu form %d out", ci, form);
                CHECK_SAME(stt, wst, 3 * ss, "tiled case %zu form %d state", ci, form);
                /* and the mapping matters: the grouped op on the tiled inputs is another */
                if (form == 0) {
                    memcpy(stt, st0t, 3 * ss * sizeof(float));
                    cpu_gated_delta_run(be[bi], xt, ct, ct + Hk * dk, C, ct + 2 * Hk * dk, C, gt,
                                        bt, stt, &tb.b, Hk, Hv, dk, dv, BK_VHEAD_GROUPED, INT_MAX);
                    CHECK_MSG(memcmp(xt, want, on * sizeof(float)) != 0,
                              "tiled case %zu: the mapping changed nothing", ci);
                }
            }
        free(sb), free(sg), free(xt), free(x), free(wst), free(want), free(stt), free(ot);
        free(s), free(o), free(bbt), free(at), free(bb), free(a), free(st0t), free(bt), free(gt);
        free(ct), free(st0), free(beta), free(g), free(c);
    }
}

int main(void) {
    if (cpu_test_backends_open()) return 1;
    RUN(test_kv_attention);
    RUN(test_attention_batch_equals_alone);
    RUN(test_attention_grouping);
    RUN(test_attention_four_key_kernels);
    RUN(test_kv_store_bf16_rounds);
    RUN(test_conv1d);
    RUN(test_conv1d_pieces);
    RUN(test_gated_delta);
    RUN(test_gated_delta_steps);
    RUN(test_gated_delta_chunked);
    RUN(test_gated_delta_tiled);
    cpu_test_backends_close();
    TEST_DONE();
}
