/* test_gguf_model.c - models opened from GGUF files (models/load/gguf_model.h): the golden
 * checkpoints converted by llama.cpp's own converter (tests/data/gguf/golden/, written by
 * tools/gguf_from_golden.py) against the same fixtures' transformers logits and against the
 * safetensors path, and every refusal a malformed or lying file must give.
 *
 * Tolerances. An f32 GGUF holds the checkpoint's f32 weights, but qwen35's norms as
 * f32(1 + w) minus 1 again: w keeps all its bits only where |w| >= 0.5, elsewhere it loses the
 * bits below 1's last (6e-8 absolute), a relative error of up to 6e-8 / |w| per norm weight.
 * Against the safetensors path that moves the logits by far less than the transformers
 * tolerance (measured below 1e-5 of the largest |logit|), so the f32 files are held to the
 * golden tests' own F32_REL_TOL (2e-4, tests/unit/test_qwen35_golden.c) against transformers and
 * to 1e-4 against the safetensors model (50x the measured). Gemma 4 and Nemotron-H store
 * their weights unchanged (A_log as -exp(A_log): log of it gives the same f32 back here), so
 * theirs must match the safetensors path bit for bit, except that Nemotron-H's q and k rows,
 * permuted back whole, are exact too: 0.
 * A bf16 GGUF holds bf16(1 + w) for qwen35's norms, not bf16 w: that is llama.cpp's model,
 * not transformers'. Its logits are compared with the bf16 safetensors model at 2e-2 of the
 * largest |logit| (measured 3e-3) and greedily with transformers where its top-2 gap is
 * >= 1.0, as the bf16 golden test does.
 * A Q8_0 GGUF from the converter against the safetensors model quantized on load to Q8_0
 * (--quantization q8_0): the gguf package's Q8_0 quantizer and ours round the same way and
 * the permuted rows and column blocks are the same blocks, so qwen35 (every matrix whole
 * blocks) must agree bit for bit. Where rows are not whole blocks the converter stores F16
 * and strata keeps the f32 (Nemotron-H's ssm_out, most of Gemma 4's h = 80 matrices), and it
 * quantizes Gemma 4's per-layer table that strata keeps on the host: those two must stay
 * within 1x what quantizing did to the safetensors model's logits (rms; measured 0.45x and
 * 0.63x), where a wrong tensor or permutation moves them by the size of the logits.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/batch.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/load/gguf_model.h"
#include "models/model.h"
/* golden_run.h's helpers for the golden tests' other checks go unused here */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "tests/golden_run.h"
#pragma GCC diagnostic pop
#include "tests/golden_util.h"
#include "tests/test_model.h"
#include "tests/test.h"

#define G "tests/data/gguf/golden/"
#define F32_REL_TOL 2e-4
#define BF16_MIN_GAP 1.0f

static model *open_mmap(backend *b, const char *path, dtype quant, dtype wdt, int weights_mmap) {
    model_opts o = test_model_opts(path, 1, 256, 256);
    o.weight_dtype = wdt;
    o.quant = quant;
    o.kv_cache = MODEL_KV_F32;
    o.weights_mmap = weights_mmap;
    return test_model_open(b, &o);
}

static model *open_with(backend *b, const char *path, dtype quant, dtype wdt) {
    return open_mmap(b, path, quant, wdt, 0);
}

/* Every case's logits, one shot: [sum n, vocab]; NULL on an error. */
static float *all_logits(model *m, const golden_set *gs) {
    size_t total = 0;
    for (int c = 0; c < gs->n_cases; c++) total += (size_t)gs->cases[c].n;
    float *lg = malloc(sizeof(float) * total * (size_t)gs->vocab);
    int one_shot[] = {512};
    size_t at = 0;
    for (int c = 0; c < gs->n_cases && lg; c++) {
        if (golden_run_chunked(m, 0, gs->cases[c].prompt, gs->cases[c].n, one_shot, 1,
                               lg + at * (size_t)gs->vocab)) {
            free(lg);
            return NULL;
        }
        at += (size_t)gs->cases[c].n;
    }
    return lg;
}

static double rms_diff(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s / (double)n);
}

/* A quantized GGUF whose converter stored some matrices otherwise than strata's rule (F16
 * where a row is not whole blocks, a quantized host table): its logits against the safetensors
 * model quantized on load must differ by at most ratio x what quantizing did to the latter
 * (rms over every position). */
static void check_near_quant(const char *path, const char *dir, const golden_set *gs,
                             const float *lg, const float *lq, size_t n, double ratio) {
    backend *b = NULL;
    strata_err err = {0};
    CHECK(backend_cpu_create(2, &b, &err) == 0);
    model *mf = open_with(b, dir, DTYPE_F32, DTYPE_COUNT);
    float *lf = mf ? all_logits(mf, gs) : NULL;
    CHECK(lf != NULL);
    if (lf) {
        double d = rms_diff(lg, lq, n), q = rms_diff(lq, lf, n);
        fprintf(stderr, "    %s: rms vs the Q8_0 safetensors model %.3g; Q8_0 vs f32 %.3g\n", path,
                d, q);
        CHECK_MSG(q > 0 && d <= ratio * q, "%s: rms diff %.3g > %.2f x the quantization's %.3g",
                  path, d, ratio, q);
    }
    free(lf);
    model_close(mf);
    backend_destroy(b);
}

/* The GGUF gguf_name's path, the fixture dir's golden set and a 2-thread CPU backend (NULL
 * after a failed check); -1, after a failed check, when the fixture does not load. */
static int fixture_open(const char *gguf_name, const char *dir, char path[256], golden_set *gs,
                        backend **b) {
    snprintf(path, 256, G "%s", gguf_name);
    *b = NULL;
    if (golden_load(dir, gs)) {
        CHECK_MSG(0, "cannot load fixture %s", dir);
        return -1;
    }
    strata_err err = {0};
    CHECK(backend_cpu_create(2, b, &err) == 0);
    return 0;
}

/* The GGUF gguf_name against the fixture dir: vs transformers (f32: within F32_REL_TOL; bf16:
 * greedy where clear) and vs the safetensors model (quantized on load with quant) within
 * self_tol. */
static void check_file(const char *gguf_name, const char *dir, dtype quant, dtype wdt,
                       double self_tol) {
    char path[256];
    golden_set gs;
    backend *b;
    if (fixture_open(gguf_name, dir, path, &gs, &b)) return;
    model *mg = open_with(b, path, DTYPE_F32, DTYPE_COUNT), *ms = open_with(b, dir, quant, wdt);
    CHECK_MSG(mg && ms, "%s: did not open", path);
    float *lg = mg ? all_logits(mg, &gs) : NULL, *ls = ms ? all_logits(ms, &gs) : NULL;
    CHECK(!mg || (lg && model_get_info(mg)->vocab == gs.vocab));
    size_t total = 0;
    for (int c = 0; c < gs.n_cases; c++) total += (size_t)gs.cases[c].n * (size_t)gs.vocab;
    if (lg && ls && self_tol < 0) check_near_quant(path, dir, &gs, lg, ls, total, -self_tol);
    if (lg && ls && self_tol >= 0) {
        size_t at = 0;
        for (int c = 0; c < gs.n_cases; c++) {
            const golden_case *gc = &gs.cases[c];
            const float *g = lg + at * (size_t)gs.vocab, *s = ls + at * (size_t)gs.vocab;
            golden_compare(path, "vs the safetensors model", g, s, gc->n, gs.vocab, self_tol);
            if (quant != DTYPE_F32) {
                /* quantized: the safetensors comparison is the test */
            } else if (gs.is_bf16) {
                int agree = 0, judged = 0;
                for (int p = 0; p < gc->n; p++) {
                    const float *r = gc->logits + (size_t)p * gs.vocab;
                    if (golden_top2_gap(r, gs.vocab) < BF16_MIN_GAP) continue;
                    judged++;
                    agree += golden_argmax(g + (size_t)p * gs.vocab, gs.vocab) ==
                             golden_argmax(r, gs.vocab);
                }
                CHECK_MSG(agree == judged, "%s: greedy differs at %d of %d clear positions", path,
                          judged - agree, judged);
            } else {
                golden_compare(path, "vs transformers", g, gc->logits, gc->n, gs.vocab,
                               F32_REL_TOL);
            }
            at += (size_t)gc->n;
        }
    }
    /* the eos ids come from tokenizer.ggml.eos_token_id as generation_config gives them */
    if (mg && ms) {
        CHECK(model_get_info(mg)->n_eos >= 1);
        CHECK_EQ_INT(model_get_info(mg)->eos[0], model_get_info(ms)->eos[0]);
    }
    free(lg);
    free(ls);
    model_close(mg);
    model_close(ms);
    backend_destroy(b);
    golden_free(&gs);
}

static void test_qwen35_f32(void) {
    check_file("qwen35_tiny-f32.gguf", "tests/golden/qwen35_tiny", DTYPE_F32, DTYPE_COUNT, 1e-4);
}
static void test_qwen35_bf16(void) {
    check_file("qwen35_tiny_bf16-bf16.gguf", "tests/golden/qwen35_tiny_bf16", DTYPE_F32,
               DTYPE_COUNT, 2e-2);
}
static void test_qwen35_q8_0(void) {
    check_file("qwen35_tiny-q8_0.gguf", "tests/golden/qwen35_tiny", DTYPE_Q8_0, DTYPE_COUNT, 0.0);
}
static void test_gemma4_f32(void) {
    check_file("gemma4_tiny-f32.gguf", "tests/golden/gemma4_tiny", DTYPE_F32, DTYPE_COUNT, 0.0);
}
static void test_gemma4_q8_0(void) {
    check_file("gemma4_tiny-q8_0.gguf", "tests/golden/gemma4_tiny", DTYPE_Q8_0, DTYPE_COUNT, -1.0);
}
static void test_nemotron_h_f32(void) {
    check_file("nemotron_h_nofloor-f32.gguf", "tests/golden/nemotron_h_nofloor", DTYPE_F32,
               DTYPE_COUNT, 0.0);
}
static void test_nemotron_h_q8_0(void) {
    check_file("nemotron_h_nofloor-q8_0.gguf", "tests/golden/nemotron_h_nofloor", DTYPE_Q8_0,
               DTYPE_COUNT, -1.0);
}

/* ---- Qwen3.5's V heads left tiled (gguf_wsrc_v_tiled) ----
 * A file whose ssm_out cannot be put back in transformers' order (Q4_K / Q6_K at head_v_dim
 * 128) runs with every V-indexed tensor in the file's tiled order and the delta rule's tiled
 * head mapping. STRATA_GGUF_V_TILED=1 takes that path on the tiny files, which could be
 * un-tiled, so the two can be compared: every per-head computation (projections, conv,
 * gates, delta rule, gated norm) is the same arithmetic on heads in another order, and only
 * out_proj (ssm_out) sums its Hv·dv columns in another order. On the f32 file that
 * reassociation rounds differently by a few f32 ulps of each layer's mix (~1e-7 relative),
 * carried through the layers to the logits: measured 2.7e-6 of the largest |logit|, held
 * to 1e-5. On the Q8_0 file every matmul quantizes its input rows to int8 (cpu_qmatmul.c),
 * and an f32 difference that moves one input across a rounding boundary moves that product
 * by a whole int8 step (1/127 of its block's largest value), which the recurrent state and
 * the cache carry on: measured below 3e-6 over the first 128 positions, then 8.9e-3 from a
 * step at position 128 of the 150-token case; held to 3e-2. A wrong head mapping moves
 * the logits by the size of the logits (measured 0.9-1.3 on both files). Greedy tokens
 * must be equal at every position whose top-2 gap is more than twice the tolerance. */
static void check_tiled(const char *gguf_name, const char *dir, double tol) {
    char path[256];
    golden_set gs;
    backend *b;
    if (fixture_open(gguf_name, dir, path, &gs, &b)) return;
    strata_err err = {0};
    /* the switch and the decision: off, the tiny files are un-tiled; on, kept tiled */
    gguf *g = NULL;
    int tiled = -1;
    CHECK(gguf_open(&g, path, &err) == 0);
    CHECK(g && gguf_wsrc_v_tiled(g, &tiled, &err) == 0 && tiled == 0);
    setenv("STRATA_GGUF_V_TILED", "2", 1);
    CHECK(g && gguf_wsrc_v_tiled(g, &tiled, &err) == STRATA_EINVALID);
    setenv("STRATA_GGUF_V_TILED", "1", 1);
    CHECK(g && gguf_wsrc_v_tiled(g, &tiled, &err) == 0 && tiled == 1);
    gguf_close(g);
    model *mt = open_with(b, path, DTYPE_F32, DTYPE_COUNT);
    unsetenv("STRATA_GGUF_V_TILED");
    model *mu = open_with(b, path, DTYPE_F32, DTYPE_COUNT);
    CHECK_MSG(mt && mu, "%s: did not open", path);
    float *lt = mt ? all_logits(mt, &gs) : NULL, *lu = mu ? all_logits(mu, &gs) : NULL;
    CHECK(lt && lu);
    size_t at = 0;
    for (int c = 0; lt && lu && c < gs.n_cases; c++) {
        const golden_case *gc = &gs.cases[c];
        const float *t = lt + at * (size_t)gs.vocab, *u = lu + at * (size_t)gs.vocab;
        size_t n = (size_t)gc->n * (size_t)gs.vocab;
        double scale = 1, worst = 0;
        for (size_t i = 0; i < n; i++) {
            if (fabs(u[i]) > scale) scale = fabs(u[i]);
            if (fabs((double)t[i] - u[i]) > worst) worst = fabs((double)t[i] - u[i]);
        }
        fprintf(stderr, "    %s case %d: tiled vs un-tiled max rel diff %.3g\n", path, c,
                worst / scale);
        golden_compare(path, "tiled vs un-tiled", t, u, gc->n, gs.vocab, tol);
        for (int p = 0; p < gc->n; p++) {
            const float *tp = t + (size_t)p * gs.vocab, *up = u + (size_t)p * gs.vocab;
            if (golden_top2_gap(up, gs.vocab) <= 2 * tol * scale) continue;
            CHECK_MSG(golden_argmax(tp, gs.vocab) == golden_argmax(up, gs.vocab),
                      "%s case %d position %d: greedy token %d tiled, %d un-tiled", path, c, p,
                      golden_argmax(tp, gs.vocab), golden_argmax(up, gs.vocab));
        }
        at += (size_t)gc->n;
    }
    free(lt);
    free(lu);
    model_close(mt);
    model_close(mu);
    backend_destroy(b);
    golden_free(&gs);
}

static void test_qwen35_tiled_f32(void) {
    check_tiled("qwen35_tiny-f32.gguf", "tests/golden/qwen35_tiny", 1e-5);
}
static void test_qwen35_tiled_q8_0(void) {
    check_tiled("qwen35_tiny-q8_0.gguf", "tests/golden/qwen35_tiny", 3e-2);
}

/* ---- refusals: a corrupted copy of the qwen35 f32 file ---- */

typedef struct fbuf {
    unsigned char *p;
    size_t len;
} fbuf;

static fbuf fb_load(const char *path) {
    fbuf b = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return b;
    fseek(f, 0, SEEK_END);
    b.len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    b.p = malloc(b.len);
    if (fread(b.p, 1, b.len, f) != b.len) b.len = 0;
    fclose(f);
    return b;
}

/* Offset just past the first occurrence of s in b (the end of a key or tensor name). */
static size_t fb_after(const fbuf *b, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= b->len; i++)
        if (!memcmp(b->p + i, s, n)) return i + n;
    return 0;
}

/* Opens the corrupted bytes as a model; the error must have code and name the file and needle. */
static void expect_refusal(const fbuf *b, int code, const char *needle) {
    char dir[] = "/tmp/strata_gguf_model_XXXXXX", path[96];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/bad.gguf", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b->p, 1, b->len, f) == b->len);
    if (f) fclose(f);
    backend *be = NULL;
    model *m = NULL;
    strata_err err = {0};
    CHECK(backend_cpu_create(1, &be, &err) == 0);
    model_opts o = {.path = path, .weight_dtype = DTYPE_COUNT, .max_seqs = 1, .ctx_size = 64};
    int rc = model_open(&m, &o, be, &err);
    CHECK_MSG(rc == code && strstr(err.msg, path) && strstr(err.msg, needle),
              "expected code %d naming the file and '%s', got %d: %s", code, needle, rc, err.msg);
    if (!rc) model_close(m);
    backend_destroy(be);
    unlink(path);
    rmdir(dir);
}

/* The weights copied out of the file mapping at load (the CPU default) and read in place
 * (--mmap) give the same logits, bit for bit, from a GGUF file (quantized blocks) and from
 * safetensors. */
static void test_mmap_or_copy(void) {
    const char *paths[] = {G "qwen35_tiny-q8_0.gguf", "tests/golden/qwen35_tiny"};
    golden_set gs;
    if (golden_load(paths[1], &gs)) {
        CHECK_MSG(0, "cannot load fixture %s", paths[1]);
        return;
    }
    backend *b = NULL;
    strata_err err = {0};
    CHECK(backend_cpu_create(2, &b, &err) == 0);
    size_t total = 0;
    for (int c = 0; c < gs.n_cases; c++) total += (size_t)gs.cases[c].n * (size_t)gs.vocab;
    for (int i = 0; i < 2; i++) {
        model *mc = open_mmap(b, paths[i], DTYPE_F32, DTYPE_COUNT, 0);
        model *mm = open_mmap(b, paths[i], DTYPE_F32, DTYPE_COUNT, 1);
        CHECK_MSG(mc && mm, "%s: did not open", paths[i]);
        float *lc = mc ? all_logits(mc, &gs) : NULL, *lm = mm ? all_logits(mm, &gs) : NULL;
        CHECK_MSG(lc && lm && !memcmp(lc, lm, total * sizeof(float)),
                  "%s: copied and mapped weights give different logits", paths[i]);
        free(lc);
        free(lm);
        model_close(mc);
        model_close(mm);
    }
    backend_destroy(b);
    golden_free(&gs);
}

static void test_refusals(void) {
    fbuf orig = fb_load(G "qwen35_tiny-f32.gguf");
    CHECK(orig.len > 0);
    if (!orig.len) return;
    fbuf b = {malloc(orig.len), orig.len};
    size_t at;
    uint32_t u;
    /* a tensor the model needs renamed away: missing */
    memcpy(b.p, orig.p, b.len);
    at = fb_after(&b, "blk.0.ffn_up.weight");
    CHECK(at > 0);
    b.p[at - 8] = 'q'; /* ffn_uq */
    expect_refusal(&b, STRATA_ENOTFOUND, "blk.0.ffn_up.weight is missing");
    /* a lying shape: ffn_up's ne[1] 128 -> 64 (its bytes shrink, the file stays valid) */
    memcpy(b.p, orig.p, b.len);
    at = fb_after(&b, "blk.0.ffn_up.weight") + 4 + 8; /* n_dims, ne[0] */
    memcpy(&u, b.p + at, 4);
    CHECK_EQ_INT(u, 128);
    u = 64;
    memcpy(b.p + at, &u, 4);
    expect_refusal(&b, STRATA_EFORMAT, "blk.0.ffn_up.weight has shape [64, 64]");
    /* a type strata does not compute with: F32 -> I32 (the same bytes a row) */
    memcpy(b.p, orig.p, b.len);
    at = fb_after(&b, "blk.0.ffn_up.weight") + 4 + 2 * 8; /* n_dims, ne[0..1] */
    u = 26;                                               /* GGML_TYPE_I32 */
    memcpy(b.p + at, &u, 4);
    expect_refusal(&b, STRATA_EUNSUPPORTED, "blk.0.ffn_up.weight has ggml type I32");
    /* an architecture strata does not run */
    memcpy(b.p, orig.p, b.len);
    at = fb_after(&b, "general.architecture") + 4 + 8; /* value type, length */
    CHECK(!memcmp(b.p + at, "qwen35", 6));
    memcpy(b.p + at, "qwen99", 6);
    expect_refusal(&b, STRATA_EUNSUPPORTED, "\"qwen99\" is not supported");
    /* a metadata key missing, one of the wrong type */
    memcpy(b.p, orig.p, b.len);
    at = fb_after(&b, "qwen35.ssm.group_count");
    b.p[at - 1] = 'X';
    expect_refusal(&b, STRATA_ENOTFOUND, "'qwen35.ssm.group_count' is missing");
    memcpy(b.p, orig.p, b.len);
    at = fb_after(&b, "qwen35.rope.freq_base");
    u = GGUF_VT_U32; /* was F32: the same four bytes, read as an integer */
    memcpy(b.p + at, &u, 4);
    expect_refusal(&b, STRATA_EFORMAT, "'qwen35.rope.freq_base': a u32, expected");
    free(b.p);
    free(orig.p);
}

int main(void) {
    RUN(test_qwen35_f32);
    RUN(test_qwen35_bf16);
    RUN(test_qwen35_q8_0);
    RUN(test_qwen35_tiled_f32);
    RUN(test_qwen35_tiled_q8_0);
    RUN(test_gemma4_f32);
    RUN(test_gemma4_q8_0);
    RUN(test_nemotron_h_f32);
    RUN(test_nemotron_h_q8_0);
    RUN(test_mmap_or_copy);
    RUN(test_refusals);
    TEST_DONE();
}
