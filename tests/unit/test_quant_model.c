/* test_quant_model.c - quantize on load (--quantization, issue 20 parts 3 and 5): a tiny
 * model run with Q8_0 / Q4_K weights against the same model whose weights were quantized
 * and dequantized again to f32, run through the f32 path.
 *
 * The two runs hold exactly the same weight values, so what separates their logits is the
 * activation rounding of the quantized kernels alone: x is quantized to int8 per block
 * (32 elements for Q8_0 / Q5_0 weights, 256 for Q4_K) with scale amax / 127, an error of at
 * most half a step, amax / 254, per element. That is the very rounding Q8_0 applies to the
 * weights (int8, amax / 127 per block of 32), applied to the other factor of each product:
 * in y = sum W x the two give errors sum dW x and sum W dx of the same form, whose sizes
 * relative to y are in the ratio of the crest factors (amax / rms per block) of x and W,
 * about 2-2.5 for activations against 1.7 for uniform weights, more for activations with
 * outliers. So the test measures, on the same model and prompt, what rounding the weights to
 * Q8_0 does to the logits (Q8_0-dequantized f32 against the original f32) and asks the
 * activation rounding to stay within 2.5 times that for Q8_0 (measured: 0.6-1.4 times) and
 * 3.5 times for Q4_K, whose x blocks of 256 have a larger amax (about 2.9 rms for gaussian
 * values against 2.1 for 32; measured up to 2.1 times). A kernel bug (a wrong scale, block or nibble) gives errors of the size
 * of the logits themselves, so also rms(diff) <= 15 % and max |diff| <= 2 x the logits'
 * rms (these random tiny models amplify, and the max over every position and vocabulary
 * entry is heavy-tailed: 2-11 % rms and up to 1.6 x in the max are measured, the latter on
 * qwen35_tiny at Q4_K, whose matrices all take Q5_0). For Q4_K the
 * activation rounding must also sit well below what the 4-bit weights change (< 0.5 x),
 * or the comparison with the dequantized model would prove nothing.
 * On the quantized model, prompts run in one step, a token at a time or in odd chunks
 * give bit-identical logits (the CPU kernels are batch invariant). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/batch.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/load/wsrc.h"
#include "models/model.h"
#include "tests/test_model.h"
#include "tests/test.h"

#define N_TOK 24

/* quant: a block dtype, or F32 for none; dummy: the directory's config with dummy f32
 * weights (load_dummy), else its safetensors. */
static model *open_q(backend *b, const char *dir, int dummy, dtype quant, int as_f32) {
    model_opts o = test_model_opts(dir, 1, 64, 32);
    o.weight_dtype = dummy ? DTYPE_F32 : DTYPE_COUNT;
    o.quant = quant;
    o.load_dummy = dummy;
    o.quant_as_f32 = as_f32;
    o.seed = 11;
    o.kv_cache = MODEL_KV_F32;
    return test_model_open(b, &o);
}

/* The logits of every position of a fixed prompt [N_TOK, vocab], run in forwards of the
 * given sizes (cycled) from a fresh slot 0; NULL on an error. */
static float *run_prompt(model *m, const int *chunks, int n_chunks) {
    const model_info *in = model_get_info(m);
    int V = in->vocab, rc = 0;
    int32_t ids[N_TOK], rows[N_TOK];
    for (int i = 0; i < N_TOK; i++) ids[i] = (int32_t)((i * 37 + 5) % V);
    float *lg = malloc(sizeof(float) * (size_t)N_TOK * (size_t)V);
    batch_buf bb;
    strata_err err = {0};
    if (!lg || batch_buf_init(&bb, in->step_tokens, 1, &err)) {
        free(lg);
        return NULL;
    }
    model_reset_slot(m, 0);
    for (int pos = 0, c = 0; pos < N_TOK && !rc; c++) {
        int len = chunks[c % n_chunks];
        if (len > N_TOK - pos) len = N_TOK - pos;
        batch_buf_clear(&bb);
        batch_buf_add(&bb, 0, pos, len);
        for (int i = 0; i < len; i++) rows[i] = i;
        rc = model_forward(m, &bb.bt, ids + pos, rows, len, lg + (size_t)pos * V, &err);
        if (rc) fprintf(stderr, "forward: %s\n", err.msg);
        pos += len;
    }
    batch_buf_deinit(&bb);
    if (rc) {
        free(lg);
        lg = NULL;
    }
    return lg;
}

/* One shot, token by token and odd chunks give the same logits: bit for bit here (the CPU
 * kernels are batch invariant). tests/device/test_cuda_quant_model.c runs this file on the
 * CUDA backend, whose other ops are not, and defines its own comparison. */
#ifndef QUANT_SAME_LOGITS
#define QUANT_SAME_LOGITS(a, b, n) (!memcmp((a), (b), (n) * sizeof(float)))
#endif

typedef struct diff_stats {
    double max_abs, rms_diff, rms_ref;
} diff_stats;

static diff_stats diff_of(const float *a, const float *ref, size_t n) {
    diff_stats s = {0};
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (d > s.max_abs || d != d) s.max_abs = d != d ? INFINITY : d;
        s.rms_diff += d * d;
        s.rms_ref += (double)ref[i] * ref[i];
    }
    s.rms_diff = sqrt(s.rms_diff / (double)n);
    s.rms_ref = sqrt(s.rms_ref / (double)n);
    return s;
}

/* One model, Q8_0 then Q4_K: the tolerances of the header and batch invariance. */
static void check_model(backend *b, const char *dir, int dummy) {
    static const dtype fmts[2] = {DTYPE_Q8_0, DTYPE_Q4_K};
    model *mo = open_q(b, dir, dummy, DTYPE_F32, 0);
    CHECK(mo != NULL);
    if (!mo) return;
    int V = model_get_info(mo)->vocab, one_shot[] = {N_TOK}, step[] = {1}, odd[] = {3, 5, 2};
    size_t n = (size_t)N_TOK * (size_t)V;
    float *lo = run_prompt(mo, one_shot, 1);
    double w8 = 0; /* rms effect on the logits of rounding the weights to Q8_0 */
    CHECK(lo != NULL);
    for (int f = 0; lo && f < 2; f++) {
        dtype q = fmts[f];
        model *mq = open_q(b, dir, dummy, q, 0), *mr = open_q(b, dir, dummy, q, 1);
        CHECK(mq && mr);
        float *lq = mq ? run_prompt(mq, one_shot, 1) : NULL;
        float *lr = mr ? run_prompt(mr, one_shot, 1) : NULL;
        float *ls = mq ? run_prompt(mq, step, 1) : NULL, *lc = mq ? run_prompt(mq, odd, 3) : NULL;
        CHECK(lq && lr && ls && lc);
        if (lq && lr && ls && lc) {
            diff_stats act = diff_of(lq, lr, n), wq = diff_of(lr, lo, n);
            if (q == DTYPE_Q8_0) w8 = wq.rms_diff;
            fprintf(
                stderr,
                "    %-28s %-4s activation rounding: rms %.2e max %.2e (%.1f %% / %.1f %% of the "
                "logits' rms %.2f); weight rounding: rms %.2e (Q8_0's %.2e)\n",
                dir, dtype_name(q), act.rms_diff, act.max_abs, 100 * act.rms_diff / act.rms_ref,
                100 * act.max_abs / act.rms_ref, act.rms_ref, wq.rms_diff, w8);
            /* the weights did change: the f32 path ran other values than the checkpoint's */
            CHECK_MSG(wq.rms_diff > 0, "%s %s: quantization changed no logit", dir, dtype_name(q));
            double k = q == DTYPE_Q4_K ? 3.5 : 2.5;
            CHECK_MSG(act.rms_diff <= k * w8,
                      "%s %s: activation rounding %.3e > %.1f x Q8_0 weight rounding %.3e", dir,
                      dtype_name(q), act.rms_diff, k, w8);
            CHECK_MSG(act.rms_diff <= 0.15 * act.rms_ref && act.max_abs <= 2 * act.rms_ref,
                      "%s %s: rms diff %.3e / max %.3e against logits rms %.3e", dir, dtype_name(q),
                      act.rms_diff, act.max_abs, act.rms_ref);
            if (q == DTYPE_Q4_K)
                CHECK_MSG(act.rms_diff < 0.5 * wq.rms_diff,
                          "%s: activation rounding %.3e not well below 4-bit weight rounding %.3e",
                          dir, act.rms_diff, wq.rms_diff);
            CHECK_MSG(QUANT_SAME_LOGITS(lq, ls, n), "%s %s: token by token differs from one shot",
                      dir, dtype_name(q));
            CHECK_MSG(QUANT_SAME_LOGITS(lq, lc, n), "%s %s: chunks 3,5,2 differ from one shot", dir,
                      dtype_name(q));
        }
        free(lq);
        free(lr);
        free(ls);
        free(lc);
        model_close(mq);
        model_close(mr);
    }
    free(lo);
    model_close(mo);
}

static void test_golden_fixtures(void) {
    backend *b = NULL;
    strata_err err = {0};
    CHECK(backend_cpu_create(2, &b, &err) == 0);
    const char *dirs[] = {"tests/golden/qwen35_tiny", "tests/golden/gemma4_tiny",
                          "tests/golden/nemotron_h_tiny"};
    for (size_t i = 0; b && i < sizeof dirs / sizeof dirs[0]; i++) {
        check_model(b, dirs[i], 0); /* rows of 64-160: Q4_K takes Q5_0 where a multiple of 32 */
    }
    backend_destroy(b);
}

/* The tiny fixtures' rows are too short for Q4_K's blocks of 256: the same Qwen3.5 with a
 * hidden size and intermediate size of 256 and 512 (dummy f32 weights) runs real Q4_K. */
static void test_q4_k_wide(void) {
    char dir[] = "/tmp/strata_quant_XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    json_error_t je;
    json_t *cfg = json_load_file("tests/golden/qwen35_tiny/config.json", 0, &je);
    CHECK(cfg != NULL);
    json_t *tc = json_object_get(cfg, "text_config");
    if (!tc) tc = cfg;
    json_object_set_new(tc, "hidden_size", json_integer(256));
    json_object_set_new(tc, "intermediate_size", json_integer(512));
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(json_dump_file(cfg, path, 0) == 0);
    json_decref(cfg);
    backend *b = NULL;
    strata_err err = {0};
    CHECK(backend_cpu_create(2, &b, &err) == 0);
    if (b) {
        check_model(b, dir, 1);
    }
    backend_destroy(b);
    unlink(path);
    rmdir(dir);
}

/* Greedy continuation of ids[0..n) for n_gen tokens on slot 0 into out; -1 on an error. */
static int greedy(model *m, const int32_t *ids, int n, int n_gen, int32_t *out) {
    int V = model_get_info(m)->vocab, rc = 0;
    float *lg = malloc(sizeof(float) * (size_t)n * (size_t)V);
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)n);
    batch_buf bb;
    strata_err err = {0};
    if (!lg || !rows || batch_buf_init(&bb, n, 1, &err)) {
        free(lg);
        free(rows);
        return -1;
    }
    model_reset_slot(m, 0);
    batch_buf_add(&bb, 0, 0, n);
    rows[0] = n - 1;
    rc = model_forward(m, &bb.bt, ids, rows, 1, lg, &err);
    for (int i = 0; !rc && i < n_gen; i++) {
        int32_t best = 0, row = 0;
        for (int v = 1; v < V; v++)
            if (lg[v] > lg[best]) best = v;
        out[i] = best;
        if (i + 1 == n_gen) break;
        batch_buf_clear(&bb);
        batch_buf_add(&bb, 0, n + i, 1);
        rc = model_forward(m, &bb.bt, &best, &row, 1, lg, &err);
    }
    if (rc) fprintf(stderr, "forward: %s\n", err.msg);
    batch_buf_deinit(&bb);
    free(lg);
    free(rows);
    return rc ? -1 : 0;
}

/* The demo model (bf16) quantized to Q8_0 continues the prompts of
 * models/demo/greedy_reference.json (its README prompts, chat included) with exactly
 * transformers' 20 greedy tokens, like the unquantized model (tests/demo/test_demo.sh). */
static void test_demo_q8_0_greedy(void) {
    json_error_t je;
    json_t *ref = json_load_file("models/demo/greedy_reference.json", 0, &je);
    CHECK_MSG(ref != NULL, "models/demo/greedy_reference.json: %s", je.text);
    backend *b = NULL;
    strata_err err = {0};
    CHECK(backend_cpu_create(2, &b, &err) == 0);
    model *m = NULL;
    model_opts o = test_model_opts("models/demo", 1, 256, 128);
    o.quant = DTYPE_Q8_0;
    if (b && ref && model_open(&m, &o, b, &err)) fprintf(stderr, "models/demo: %s\n", err.msg);
    CHECK(m != NULL);
    json_t *cases = json_object_get(ref, "cases");
    size_t ci;
    json_t *c;
    int n_cases = 0;
    json_array_foreach(cases, ci, c) {
        json_t *jp = json_object_get(c, "prompt"), *jg = json_object_get(c, "greedy");
        int n = (int)json_array_size(jp), ng = (int)json_array_size(jg);
        if (!m || n < 1 || n > 128 || ng < 1 || ng > 64) {
            CHECK_MSG(0, "case %zu: prompt of %d, greedy of %d", ci, n, ng);
            continue;
        }
        int32_t ids[128], got[64];
        for (int i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(jp, i));
        CHECK(greedy(m, ids, n, ng, got) == 0);
        int same = 0;
        while (same < ng && got[same] == json_integer_value(json_array_get(jg, same))) same++;
        CHECK_MSG(same == ng, "demo Q8_0 \"%s\": greedy token %d is %d, reference %lld",
                  json_string_value(json_object_get(c, "text")), same, got[same < ng ? same : 0],
                  same < ng ? json_integer_value(json_array_get(jg, same)) : 0LL);
        n_cases++;
    }
    CHECK(n_cases >= 4);
    model_close(m);
    backend_destroy(b);
    json_decref(ref);
}

/* The one rule of which weights are quantized, and to what. */
static void test_quant_target(void) {
    int64_t mat[2] = {64, 256}, odd[2] = {64, 80}, k64[2] = {64, 64}, vec[1] = {256};
    int64_t conv[3] = {64, 1, 4};
    CHECK(wsrc_quant_target(DTYPE_Q8_0, 2, mat, 0) == DTYPE_Q8_0);
    CHECK(wsrc_quant_target(DTYPE_Q4_K, 2, mat, 0) == DTYPE_Q4_K);
    CHECK(wsrc_quant_target(DTYPE_Q4_K, 2, k64, 0) == DTYPE_Q5_0);
    CHECK(wsrc_quant_target(DTYPE_Q8_0, 2, odd, 0) == DTYPE_COUNT); /* 80 = 2.5 blocks */
    CHECK(wsrc_quant_target(DTYPE_Q4_K, 2, odd, 0) == DTYPE_COUNT);
    CHECK(wsrc_quant_target(DTYPE_Q8_0, 1, vec, 0) == DTYPE_COUNT);
    CHECK(wsrc_quant_target(DTYPE_Q8_0, 3, conv, 0) == DTYPE_COUNT);
    CHECK(wsrc_quant_target(DTYPE_Q8_0, 2, mat, ARCH_BIND_HOST) == DTYPE_COUNT);
    CHECK(wsrc_quant_target(DTYPE_Q8_0, 2, mat, ARCH_BIND_KEEP) == DTYPE_COUNT);
    CHECK(wsrc_quant_target(DTYPE_BF16, 2, mat, 0) == DTYPE_COUNT);
    dtype d;
    CHECK(model_quant_parse("q8_0", &d) == 0 && d == DTYPE_Q8_0);
    CHECK(model_quant_parse("Q4_K", &d) == 0 && d == DTYPE_Q4_K);
    CHECK(model_quant_parse("none", &d) == 0 && dtype_block_elems(d) == 1);
    CHECK(model_quant_parse("q4_0", &d) == -1);
    CHECK(model_quant_parse("q8", &d) == -1);
}

/* A backend without kernels for a block type is refused before any weight is converted,
 * with a message naming the option. */
static int no_blocks(const backend *b, int op, dtype dt) {
    (void)b;
    (void)op;
    return dtype_block_elems(dt) == 1;
}

static void test_unsupported_backend(void) {
    backend *b = NULL;
    strata_err err = {0};
    CHECK(backend_cpu_create(1, &b, &err) == 0);
    if (!b) return;
    backend_ops ops = *b->ops;
    const backend_ops *real = b->ops;
    ops.supports = no_blocks;
    b->ops = &ops;
    model *m = NULL;
    model_opts o = test_model_opts("tests/golden/qwen35_tiny", 1, 16, 4);
    o.quant = DTYPE_Q8_0;
    int rc = model_open(&m, &o, b, &err);
    CHECK(rc == STRATA_EUNSUPPORTED && m == NULL);
    CHECK_MSG(strstr(err.msg, "--quantization q8_0") && strstr(err.msg, "Q8_0"), "%s", err.msg);
    b->ops = real;
    backend_destroy(b);
}

int main(void) {
    RUN(test_quant_target);
    RUN(test_unsupported_backend);
    RUN(test_golden_fixtures);
    RUN(test_q4_k_wide);
    RUN(test_demo_q8_0_greedy);
    TEST_DONE();
}
