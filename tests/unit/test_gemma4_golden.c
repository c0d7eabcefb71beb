/* test_gemma4_golden.c - the Gemma 4 forward against transformers' own logits
 * (tests/golden/gemma4_tiny*, made by tools/goldens/make_goldens.py), and against itself:
 * one-shot prefill == chunked prefill with odd chunks (straddling the sliding window of
 * 8, through a wrapping kv ring) == step-by-step decode == batched with other sequences;
 * the PLE gathered on the host == gathered on the backend, bit for bit; both config
 * spellings and both tensor-name prefixes open the same model; bad configs are refused
 * naming the field; the real-size E2B preset opens with dummy weights. */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/cpu_backend.h"
#include "engine/batch.h"
#include "models/model.h"
#include "tests/golden_run.h"
#include "tests/golden_util.h"
#include "tests/test.h"

/* f32 fixtures: the same math in f32 with a different summation order (our matmul and
 * attention vs torch's), over 6 layers and up to 150 positions. Measured on AVX-512:
 * worst 3.3e-6 of the largest |logit| (6.3e-5 on ~19); 3e-5 leaves 10x for other ISAs'
 * orders. The bugs this guards against (1+w norms, a wrong donor, an off-by-one window,
 * a missing v_norm or scale) are off by 1e-3 and more. */
#define F32_REL_TOL 3e-5
/* Our own paths (chunking, batching, decode, the ring) must agree bit for bit: every op is
 * row-local and every matmul kernel sums a row the same way whatever rows share its step
 * (tests/unit/test_cpu_matmul.c), on every dtype and ISA. */
#define SELF_REL_TOL 0.0
/* bf16 fixtures: transformers rounds to bf16 after every op (spec §3.1) and its own bf16
 * run differs from its f32 run by up to 0.72 on these prompts, so logits are not
 * compared; greedy choices are, wherever its top-2 gap is >= 1.0. */
#define BF16_MIN_GAP 1.0f

enum { RING_MAX_TOKENS = 16 }; /* ring of window 8 + 16 = 24 rows: wraps on every case */

static float *run_alloc(model *m, const golden_case *gc, const int *chunks, int n_chunks) {
    float *lg = malloc(sizeof(float) * (size_t)gc->n * model_get_info(m)->vocab);
    CHECK(golden_run_chunked(m, 0, gc->prompt, gc->n, chunks, n_chunks, lg) == 0);
    return lg;
}

/* one shot (m) against transformers, then odd chunks and single steps on m and on the
 * ring model r against that one shot */
static void check_case(const char *name, model *m, model *r, const golden_case *gc, int vocab,
                       int is_bf16) {
    int odd[] = {3, 1, 7, 13, 64, 9}, ringc[] = {3, 16, 1, 7, 13, 9, 16}, step[] = {1};
    float *a = golden_one_shot(m, gc);
    golden_check_reference(name, a, gc, vocab, is_bf16, F32_REL_TOL, BF16_MIN_GAP);
    golden_check_chunked(name, "odd chunks vs one shot", m, 0, gc, odd, 6, a, SELF_REL_TOL);
    golden_check_chunked(name, "step by step vs one shot", m, 0, gc, step, 1, a, SELF_REL_TOL);
    golden_check_chunked(name, "ring, chunks <= 16 vs one shot", r, 0, gc, ringc, 7, a,
                         SELF_REL_TOL);
    golden_check_chunked(name, "ring, step by step vs one shot", r, 0, gc, step, 1, a,
                         SELF_REL_TOL);
    free(a);
}

/* §5: rows gathered on the host and uploaded == rows gathered by the backend, to the bit,
 * in one shot, in odd chunks and step by step. */
static void check_ple_paths(backend *b, const char *dir, model *host, const golden_set *gs) {
    model *dev = golden_open(b, dir, 4, 256, 256, 1);
    CHECK_MSG(dev != NULL, "%s: model with ple_on_device did not open", dir);
    if (!dev) return;
    int chunks[3][6] = {{512}, {3, 1, 7, 13, 64, 9}, {1}};
    int n_chunks[3] = {1, 6, 1};
    const golden_case *gc = &gs->cases[gs->n_cases - 1]; /* the longest prompt */
    for (int k = 0; k < 3; k++) {
        float *a = run_alloc(host, gc, chunks[k], n_chunks[k]);
        float *d = run_alloc(dev, gc, chunks[k], n_chunks[k]);
        CHECK_MSG(!memcmp(a, d, sizeof(float) * (size_t)gc->n * gs->vocab),
                  "%s: PLE host and device paths differ (chunking %d)", dir, k);
        free(a);
        free(d);
    }
    model_close(dev);
}

static void test_fixture(backend *b, const char *dir) {
    golden_set gs;
    if (golden_load_fixture(dir, &gs)) return;
    model *m = golden_open(b, dir, 4, 256, 256, 0);
    model *r = golden_open(b, dir, 4, 256, RING_MAX_TOKENS, 0);
    CHECK_MSG(m && r, "%s: model did not open", dir);
    if (m && r) {
        CHECK_EQ_INT(model_get_info(m)->vocab, gs.vocab);
        int n_eos = model_get_info(m)->n_eos;
        CHECK_MSG(n_eos >= 1 && model_get_info(m)->eos[0] == 1, "eos");
        for (int c = 0; c < gs.n_cases; c++) {
            check_case(dir, m, r, &gs.cases[c], gs.vocab, gs.is_bf16);
            if (gs.cases[c].n_greedy && !gs.is_bf16)
                golden_check_greedy(dir, m, &gs.cases[c], gs.vocab, NULL, 0);
        }
        int wide[8] = {5, 1, 17, 2}, narrow[8] = {5, 1, 7, 3}; /* narrow: 16 tokens a step */
        golden_check_batched(dir, m, &gs, wide, SELF_REL_TOL);
        golden_check_batched(dir, r, &gs, narrow, SELF_REL_TOL);
        check_ple_paths(b, dir, m, &gs);
    }
    model_close(m);
    model_close(r);
    /* A bf16 model with its kv cache in bf16 (the GPU's default): greedy as transformers
     * where it is clear, and our own paths still agree with each other. */
    m = gs.is_bf16 ? golden_open_kv(b, dir, 4, 256, 256, 0, MODEL_KV_BF16) : NULL;
    r = gs.is_bf16 ? golden_open_kv(b, dir, 4, 256, RING_MAX_TOKENS, 0, MODEL_KV_BF16) : NULL;
    if (m && r) {
        for (int c = 0; c < gs.n_cases; c++) check_case(dir, m, r, &gs.cases[c], gs.vocab, 1);
        int wide[8] = {5, 1, 17, 2};
        golden_check_batched(dir, m, &gs, wide, SELF_REL_TOL);
    }
    model_close(m);
    model_close(r);
    golden_free(&gs);
}

static void test_all_fixtures(void) {
    int n = golden_for_each("gemma4_", test_fixture);
    CHECK_MSG(n >= 2, "only %d gemma4 fixtures found", n);
}

/* ---- other spellings of the same checkpoint ---- */

/* Logits of case 1 from dir, into out [n, V]; 0 on success. */
static int case_logits(const char *dir, const golden_case *gc, float *out) {
    backend *b = NULL;
    strata_err err = {0};
    if (backend_cpu_create(1, &b, &err)) return -1;
    model *m = golden_open(b, dir, 1, 64, 16, 0);
    int one_shot[] = {512};
    int rc = m ? golden_run_chunked(m, 0, gc->prompt, gc->n, one_shot, 1, out) : -1;
    model_close(m);
    backend_destroy(b);
    return rc;
}

/* A text-only save (Gemma4ForCausalLM: prefix model., config = the text config, no dead
 * k/v, no towers): the fixture's header rewritten, its data section reused as is. */
static int write_text_only(const char *src, const char *dst) {
    FILE *f = fopen(src, "rb");
    uint64_t n = 0;
    if (!f || fread(&n, 8, 1, f) != 1) {
        if (f) fclose(f);
        return -1;
    }
    char *hdr = malloc(n + 1);
    fseek(f, 0, SEEK_END);
    long total = ftell(f);
    size_t data_len = (size_t)total - 8 - n;
    char *data = malloc(data_len);
    fseek(f, 8, SEEK_SET);
    int ok = fread(hdr, 1, n, f) == n && fread(data, 1, data_len, f) == data_len;
    fclose(f);
    hdr[n] = 0;
    json_t *in = ok ? json_loads(hdr, 0, NULL) : NULL, *out = json_object();
    const char *key, *pre = "model.language_model.";
    json_t *v;
    json_object_foreach(in, key, v) {
        if (strncmp(key, pre, strlen(pre))) continue;
        int layer = -1;
        if (sscanf(key + strlen(pre), "layers.%d.", &layer) == 1 && layer >= 3 &&
            (strstr(key, "k_proj") || strstr(key, "v_proj") || strstr(key, "k_norm")))
            continue; /* layers 3..5 share kv in the fixture: no dead weights here */
        char name[256];
        snprintf(name, sizeof name, "model.%s", key + strlen(pre));
        json_object_set(out, name, v);
    }
    char *js = json_dumps(out, JSON_COMPACT);
    size_t len = strlen(js), pad = (8 - len % 8) % 8;
    uint64_t hl = len + pad;
    FILE *g = fopen(dst, "wb");
    int rc = g && ok && in ? 0 : -1;
    if (!rc) {
        fwrite(&hl, 8, 1, g);
        fwrite(js, 1, len, g);
        for (size_t i = 0; i < pad; i++) fputc(' ', g);
        fwrite(data, 1, data_len, g);
    }
    if (g) fclose(g);
    free(js);
    json_decref(in);
    json_decref(out);
    free(hdr);
    free(data);
    return rc;
}

static void test_spellings(void) {
    golden_set gs;
    if (golden_load("tests/golden/gemma4_tiny", &gs)) {
        CHECK_MSG(0, "cannot load gemma4_tiny");
        return;
    }
    const golden_case *gc = &gs.cases[1];
    size_t bytes = sizeof(float) * (size_t)gc->n * gs.vocab;
    float *ref = malloc(bytes), *got = malloc(bytes);
    CHECK(case_logits("tests/golden/gemma4_tiny", gc, ref) == 0);

    /* hub spelling: global_head_dim instead of per_layer_config (spec §1.2) */
    json_t *cfg = json_load_file("tests/golden/gemma4_tiny/config.json", 0, NULL);
    json_t *tc = json_object_get(cfg, "text_config");
    json_object_del(tc, "per_layer_config");
    json_object_set_new(tc, "global_head_dim", json_integer(32));
    json_object_set_new(tc, "num_global_key_value_heads", json_null());
    char dir[64];
    int made = golden_scratch_make(dir, cfg, "tests/golden/gemma4_tiny/model.safetensors") == 0;
    CHECK(made);
    if (made) {
        CHECK(case_logits(dir, gc, got) == 0);
        CHECK_MSG(!memcmp(got, ref, bytes), "global_head_dim spelling gives other logits");
        golden_scratch_remove(dir);
    }
    /* text-only: config is the text config, tensors under model. */
    json_t *text = json_deep_copy(tc);
    made = golden_scratch_make(dir, text, NULL) == 0;
    CHECK(made);
    if (made) {
        char dst[600];
        snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
        CHECK(write_text_only("tests/golden/gemma4_tiny/model.safetensors", dst) == 0);
        CHECK(case_logits(dir, gc, got) == 0);
        CHECK_MSG(!memcmp(got, ref, bytes), "model. prefix gives other logits");
        golden_scratch_remove(dir);
    }
    json_decref(text);
    json_decref(cfg);
    free(ref);
    free(got);
    golden_free(&gs);
}

/* ---- config problems are reported with the field, checkpoint problems with the tensor ---- */

/* The fixture's config with text_config[key] = value (and the key drop removed). */
static void expect_open_error_drop(const char *key, json_t *value, const char *drop,
                                   const char *needle) {
    json_t *cfg = json_load_file("tests/golden/gemma4_tiny/config.json", 0, NULL);
    json_object_set_new(json_object_get(cfg, "text_config"), key, value);
    if (drop) json_object_del(json_object_get(cfg, "text_config"), drop);
    strata_err err = {0};
    int rc = golden_open_config(cfg, "tests/golden/gemma4_tiny/model.safetensors", &err);
    golden_expect_refusal(key, rc, &err, needle);
}

static void expect_open_error(const char *key, json_t *value, const char *needle) {
    expect_open_error_drop(key, value, NULL, needle);
}

static json_t *types(const char *a) { /* "ssf" -> layer_types, s = sliding, f = full */
    json_t *arr = json_array();
    for (; *a; a++)
        json_array_append_new(arr, json_string(*a == 'f' ? "full_attention" : "sliding_attention"));
    return arr;
}

static void test_bad_configs(void) {
    expect_open_error("hidden_size", json_integer(64), "embed_tokens.weight");
    expect_open_error("some_new_field", json_true(), "some_new_field");
    expect_open_error("eos_token_id", json_pack("[i,s]", 1, "x"),
                      "eos_token_id[1] must be an integer");
    expect_open_error("eos_token_id", json_integer(1 << 20), "outside the vocabulary");
    expect_open_error("query_pre_attn_scalar", json_integer(256), "query_pre_attn_scalar");
    expect_open_error("hidden_activation", json_string("gelu"), "hidden_activation");
    expect_open_error("vocab_size", json_string("big"), "vocab_size");
    expect_open_error("layer_types", json_array(), "layer_types");
    expect_open_error("layer_types", types("ssssf"), "layer_types");
    /* layer 5 (full) shares kv but layers 0..2 own none of its type */
    expect_open_error_drop("layer_types", types("sssssf"), "per_layer_config", "owns a cache");
    expect_open_error("attention_k_eq_v", json_true(), "attention_k_eq_v");
    expect_open_error("enable_moe_block", json_true(), "enable_moe_block");
    expect_open_error("num_kv_shared_layers", json_integer(6), "num_kv_shared_layers");
    expect_open_error("num_key_value_heads", json_integer(3), "kv heads");
    expect_open_error("vocab_size_per_layer_input", json_integer(256),
                      "vocab_size_per_layer_input");
    expect_open_error("per_layer_config", json_pack("{s:{s:i}}", "9", "head_dim", 32),
                      "per_layer_config");
    expect_open_error("per_layer_config", json_pack("{s:{s:i}}", "2", "rope_theta", 3),
                      "rope_theta");
    /* full layers with another head dim than the checkpoint's */
    expect_open_error("per_layer_config", json_pack("{s:{s:i}}", "2", "head_dim", 16), "q_proj");
    /* layer 5 left at head_dim 16 while layer 2 (also full) gets 32: one RoPE per type */
    expect_open_error("per_layer_config", json_pack("{s:{s:i}}", "2", "head_dim", 32), "head dim");
    expect_open_error("rope_parameters",
                      json_pack("{s:{s:s,s:f},s:{s:s,s:f}}", "sliding_attention", "rope_type",
                                "default", "rope_theta", 1e4, "full_attention", "rope_type", "yarn",
                                "rope_theta", 1e6),
                      "rope_type");
    expect_open_error(
        "rope_parameters",
        json_pack("{s:{s:s,s:f}}", "sliding_attention", "rope_type", "default", "rope_theta", 1e4),
        "full_attention");
}

/* ---- the real-size E2B preset with dummy weights ---- */

/* §2.3: 2,279,759,139 parameters read per decode token (PLE table and dead k/v left out,
 * the tied embedding once as the head) in bf16, plus the token's PLE row of 35·256 bf16 =
 * 17,920 bytes; kv rows of the 15 owning layers: 12 sliding · 2·256 + 3 full · 2·512. */
static void check_preset_sizes(const model_info *in, int64_t kv_elem_bytes) {
    CHECK_EQ_INT(in->weight_bytes, 2279759139LL * 2 + 17920);
    CHECK_EQ_INT(in->kv_bytes_per_token, (12LL * 2 * 256 + 3LL * 2 * 512) * kv_elem_bytes);
    CHECK(in->n_eos >= 2);
}

static void test_dummy_preset(void) {
    static const int32_t ids[3] = {2, 262143, 106};
    golden_check_dummy_preset("google/gemma-4-E2B-it", 262144, check_preset_sizes, ids,
                              30.0f); /* the softcap */
}

int main(void) {
    RUN(test_all_fixtures);
    RUN(test_spellings);
    RUN(test_bad_configs);
    GOLDEN_RUN_BIG(test_dummy_preset);
    TEST_DONE();
}
