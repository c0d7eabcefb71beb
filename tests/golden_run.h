/* golden_run.h - running a model over golden prompts the ways the golden tests compare:
 * in chunks of given sizes, and batched with the other cases. Test-only; shared by
 * tests/unit/test_<arch>_golden.c. */
#ifndef STRATA_GOLDEN_RUN_H
#define STRATA_GOLDEN_RUN_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/cpu_backend.h"
#include "engine/batch.h"
#include "models/model.h"
#include "tests/golden_util.h"
#include "tests/test_model.h"

/* kv_cache: MODEL_KV_* (golden_open: the backend's default). */
static model *golden_open_kv(backend *b, const char *dir, int max_seqs, int ctx, int step_tokens,
                             int ple_on_device, int kv_cache) {
    model_opts o = test_model_opts(dir, max_seqs, ctx, step_tokens);
    o.ple_on_device = ple_on_device;
    o.kv_cache = kv_cache;
    return test_model_open(b, &o);
}

static model *golden_open(backend *b, const char *dir, int max_seqs, int ctx, int step_tokens,
                          int ple_on_device) {
    return golden_open_kv(b, dir, max_seqs, ctx, step_tokens, ple_on_device, MODEL_KV_AUTO);
}

/* Opens a real-shape preset with dummy bf16 weights, a context of 8, 4 tokens a step. */
static model *golden_open_dummy(backend *b, const char *preset) {
    model_opts o = test_model_opts(preset, 1, 8, 4);
    o.load_dummy = 1;
    o.weight_dtype = DTYPE_BF16;
    o.seed = 7;
    return test_model_open(b, &o);
}

/* On a golden_open_dummy model: the last row's logits of ids at positions 0..2 must all lie
 * in [-bound, bound] (1e30: finite; a softcap's cap), then an id outside the vocabulary and
 * positions past the context of 8 must be refused with STRATA_ERANGE, not run. 0 when all
 * three hold. */
static int golden_dummy_forward(model *m, const int32_t ids_in[3], float bound) {
    int vocab = model_get_info(m)->vocab;
    strata_err err = {0};
    batch_buf bb;
    float *lg = malloc(sizeof(float) * (size_t)vocab);
    if (!lg || batch_buf_init(&bb, 4, 1, &err)) {
        free(lg);
        return -1;
    }
    int32_t ids[3] = {ids_in[0], ids_in[1], ids_in[2]}, row = 2;
    batch_buf_add(&bb, 0, 0, 3);
    int rc = model_forward(m, &bb.bt, ids, &row, 1, lg, &err);
    if (rc) fprintf(stderr, "dummy forward: %s\n", err.msg);
    for (int i = 0; !rc && i < vocab; i++)
        if (!(lg[i] >= -bound && lg[i] <= bound))
            rc = -1, fprintf(stderr, "dummy logit %d is %g, outside +-%g\n", i, lg[i], bound);
    ids[1] = vocab;
    if (!rc && model_forward(m, &bb.bt, ids, &row, 1, lg, &err) != STRATA_ERANGE)
        rc = -1, fprintf(stderr, "id %d outside the vocabulary was not refused\n", vocab);
    batch_buf_clear(&bb);
    batch_buf_add(&bb, 0, 6, 3);
    ids[1] = ids_in[1];
    if (!rc && model_forward(m, &bb.bt, ids, &row, 1, lg, &err) != STRATA_ERANGE)
        rc = -1, fprintf(stderr, "positions 6..8 past the context of 8 were not refused\n");
    batch_buf_deinit(&bb);
    free(lg);
    return rc;
}

/* The real-size preset with dummy weights (golden_open_dummy) on a CPU backend of 2
 * threads: its vocabulary must be vocab, check_sizes checks the byte counts the
 * architecture's spec fixes (kv_elem_bytes: 2 where the backend has memory of its own and
 * the kv cache's auto dtype is bf16, else 4), and golden_dummy_forward must hold for ids. */
__attribute__((unused)) static void golden_check_dummy_preset(
    const char *preset, int vocab, void (*check_sizes)(const model_info *in, int64_t kv_elem_bytes),
    const int32_t ids[3], float bound) {
    backend *b = NULL;
    strata_err err = {0};
    CHECK(backend_cpu_create(2, &b, &err) == 0);
    model *m = golden_open_dummy(b, preset);
    CHECK(m != NULL);
    if (m) {
        const model_info *in = model_get_info(m);
        CHECK_EQ_INT(in->vocab, vocab);
        backend_mem bm;
        check_sizes(in, backend_memory(b, &bm) == 0 ? 2 : 4);
        CHECK(golden_dummy_forward(m, ids, bound) == 0);
        model_close(m);
    }
    backend_destroy(b);
}

/* Runs prompt through slot with forwards of the given chunk sizes (cycled, capped at
 * the model's step_tokens), writing every position's logits into out [n, V]. */
static int golden_run_chunked(model *m, int slot, const int32_t *ids, int n, const int *chunks,
                              int n_chunks, float *out) {
    const model_info *in = model_get_info(m);
    batch_buf bb;
    strata_err err = {0};
    int32_t rows[512];
    if (batch_buf_init(&bb, in->step_tokens, in->max_seqs, &err)) return -1;
    model_reset_slot(m, slot);
    int rc = 0;
    for (int pos = 0, c = 0; pos < n && !rc; c++) {
        int len = chunks[c % n_chunks];
        if (len > in->step_tokens) len = in->step_tokens;
        if (len > 512) len = 512;
        if (len > n - pos) len = n - pos;
        batch_buf_clear(&bb);
        batch_buf_add(&bb, slot, pos, len);
        for (int i = 0; i < len; i++) rows[i] = i;
        if (model_forward(m, &bb.bt, ids + pos, rows, len, out + (size_t)pos * in->vocab, &err)) {
            fprintf(stderr, "forward: %s\n", err.msg);
            rc = -1;
        }
        pos += len;
    }
    batch_buf_deinit(&bb);
    return rc;
}

/* The logits of every position of the case's prompt in one forward (slot 0), malloc'ed. */
__attribute__((unused)) static float *golden_one_shot(model *m, const golden_case *gc) {
    float *lg = malloc(sizeof(float) * (size_t)gc->n * model_get_info(m)->vocab);
    int one_shot[] = {512};
    CHECK(golden_run_chunked(m, 0, gc->prompt, gc->n, one_shot, 1, lg) == 0);
    return lg;
}

/* got [n, vocab] against the case's reference logits: within f32_rel_tol, or where the
 * reference is bf16 (is_bf16) only its clear greedy choices (golden_check_clear_greedy). */
__attribute__((unused)) static void golden_check_reference(const char *name, const float *got,
                                                           const golden_case *gc, int vocab,
                                                           int is_bf16, double f32_rel_tol,
                                                           float bf16_min_gap) {
    if (is_bf16) golden_check_clear_greedy(name, got, gc, vocab, bf16_min_gap);
    else golden_compare(name, "vs transformers", got, gc->logits, gc->n, vocab, f32_rel_tol);
}

/* The prompt run through slot in chunks of the given sizes must give the one-shot logits
 * within rel_tol (what: the chunking, for the report). */
__attribute__((unused)) static void golden_check_chunked(const char *name, const char *what,
                                                         model *m, int slot, const golden_case *gc,
                                                         const int *chunks, int n_chunks,
                                                         const float *one_shot, double rel_tol) {
    int vocab = model_get_info(m)->vocab;
    float *lg = malloc(sizeof(float) * (size_t)gc->n * vocab);
    CHECK(golden_run_chunked(m, slot, gc->prompt, gc->n, chunks, n_chunks, lg) == 0);
    golden_compare(name, what, lg, one_shot, gc->n, vocab, rel_tol);
    free(lg);
}

/* Greedy continuation from transformers' generate() (prefill, then one-token decodes) on
 * model m, token for token. With glogits (the recorded logits of every step, [n_greedy,
 * vocab]) each step's logits are also compared within rel_tol, and every recorded top-2
 * gap must be >= 0.05 (far above the tolerance, so the token must match too). */
__attribute__((unused)) static void golden_check_greedy(const char *name, model *m,
                                                        const golden_case *gc, int vocab,
                                                        const float *glogits, double rel_tol) {
    float *lg = malloc(sizeof(float) * (size_t)gc->n * vocab);
    int one_shot[] = {512};
    CHECK(golden_run_chunked(m, 0, gc->prompt, gc->n, one_shot, 1, lg) == 0);
    float *last = lg + (size_t)(gc->n - 1) * vocab;
    batch_buf bb;
    strata_err err = {0};
    batch_buf_init(&bb, 1, 1, &err);
    for (int i = 0; i < gc->n_greedy; i++) {
        if (glogits) {
            const float *want = glogits + (size_t)i * vocab;
            golden_compare(name, "greedy step logits", last, want, 1, vocab, rel_tol);
            CHECK(golden_top2_gap(want, vocab) >= 0.05f);
        }
        int32_t tok = golden_argmax(last, vocab), row = 0;
        CHECK_MSG(tok == gc->greedy[i], "%s: greedy token %d is %d, transformers %d", name, i, tok,
                  gc->greedy[i]);
        if (tok != gc->greedy[i]) break;
        batch_buf_clear(&bb);
        batch_buf_add(&bb, 0, gc->n + i, 1);
        CHECK(model_forward(m, &bb.bt, &tok, &row, 1, last, &err) == 0);
    }
    batch_buf_deinit(&bb);
    free(lg);
}

/* All cases in one batch per step (one sequence per slot, case c advancing by chunk[c]
 * tokens a step) must give each case the logits it gets alone, within rel_tol. */
static void golden_check_batched(const char *name, model *m, const golden_set *gs, const int *chunk,
                                 double rel_tol) {
    const model_info *in = model_get_info(m);
    int V = gs->vocab, nc = gs->n_cases < in->max_seqs ? gs->n_cases : in->max_seqs;
    if (nc > 8) nc = 8;
    float *alone[8], *mixed[8];
    int pos[8] = {0}, one_shot[] = {512};
    for (int c = 0; c < nc; c++) {
        alone[c] = malloc(sizeof(float) * (size_t)gs->cases[c].n * V);
        mixed[c] = malloc(sizeof(float) * (size_t)gs->cases[c].n * V);
        CHECK(golden_run_chunked(m, c, gs->cases[c].prompt, gs->cases[c].n, one_shot, 1,
                                 alone[c]) == 0);
        model_reset_slot(m, c);
    }
    batch_buf bb;
    strata_err err = {0};
    batch_buf_init(&bb, in->step_tokens, in->max_seqs, &err);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)in->step_tokens);
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)in->step_tokens);
    float *lg = malloc(sizeof(float) * (size_t)in->step_tokens * V);
    for (;;) {
        batch_buf_clear(&bb);
        int who[8], first[8], len[8], n_in = 0;
        for (int c = 0; c < nc; c++) {
            int l = gs->cases[c].n - pos[c];
            if (l <= 0) continue;
            if (l > chunk[c]) l = chunk[c];
            first[n_in] = batch_buf_add(&bb, c, pos[c], l);
            if (first[n_in] < 0) break; /* step full: the rest waits for the next one */
            memcpy(tokens + first[n_in], gs->cases[c].prompt + pos[c], sizeof(int32_t) * (size_t)l);
            who[n_in] = c;
            len[n_in++] = l;
        }
        if (!n_in) break;
        for (int i = 0; i < bb.bt.n_tokens; i++) rows[i] = i;
        CHECK(model_forward(m, &bb.bt, tokens, rows, bb.bt.n_tokens, lg, &err) == 0);
        for (int k = 0; k < n_in; k++) {
            int c = who[k];
            memcpy(mixed[c] + (size_t)pos[c] * V, lg + (size_t)first[k] * V,
                   sizeof(float) * (size_t)len[k] * V);
            pos[c] += len[k];
        }
    }
    for (int c = 0; c < nc; c++) {
        golden_compare(name, "batched vs alone", mixed[c], alone[c], gs->cases[c].n, V, rel_tol);
        free(alone[c]);
        free(mixed[c]);
    }
    free(tokens);
    free(rows);
    free(lg);
    batch_buf_deinit(&bb);
}

/* golden_load, where a fixture that does not load fails the test. */
__attribute__((unused)) static int golden_load_fixture(const char *dir, golden_set *gs) {
    if (!golden_load(dir, gs)) return 0;
    CHECK_MSG(0, "cannot load fixture %s", dir);
    return -1;
}

/* ---- edited checkpoints: what an open must refuse, and other spellings it must read ---- */

/* A scratch checkpoint: cfg as config.json beside a link to the weights file weights (a
 * path from the repository root; NULL: none, the caller writes its own). dir receives the
 * directory; 0 when it was made. */
__attribute__((unused)) static int golden_scratch_make(char dir[64], const json_t *cfg,
                                                       const char *weights) {
    char path[600], cwd[512];
    snprintf(dir, 64, "/tmp/strata_golden_XXXXXX");
    if (!mkdtemp(dir)) return -1;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (json_dump_file(cfg, path, JSON_INDENT(1))) return -1;
    if (weights) {
        char src[1100];
        snprintf(src, sizeof src, "%s/%s", getcwd(cwd, sizeof cwd) ? cwd : ".", weights);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        if (symlink(src, path)) return -1;
    }
    return 0;
}

__attribute__((unused)) static void golden_scratch_remove(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
}

/* Opens the checkpoint of cfg (consumed) and weights on a CPU backend of its own, as
 * small as a config check needs, and closes it again: model_open's code, its message in
 * err. A scratch directory that cannot be made fails the test. */
__attribute__((unused)) static int golden_open_config(json_t *cfg, const char *weights,
                                                      strata_err *err) {
    char dir[64];
    int made = golden_scratch_make(dir, cfg, weights) == 0;
    json_decref(cfg);
    CHECK_MSG(made, "scratch checkpoint for %s", weights);
    if (!made) return -1;
    backend *b = NULL;
    model *m = NULL;
    backend_cpu_create(1, &b, err);
    model_opts o = test_model_opts(dir, 1, 64, 16);
    int rc = model_open(&m, &o, b, err);
    model_close(m);
    backend_destroy(b);
    golden_scratch_remove(dir);
    return rc;
}

/* An open that returned rc must have been refused with a message naming needle (what:
 * the edit, for the report). */
__attribute__((unused)) static void golden_expect_refusal(const char *what, int rc,
                                                          const strata_err *err,
                                                          const char *needle) {
    CHECK_MSG(rc < 0 && strstr(err->msg, needle),
              "%s: expected an error naming '%s', got rc %d: %s", what, needle, rc, err->msg);
}

/* RUN(fn) unless STRATA_SKIP_BIG is set: fn opens a real-size preset, gigabytes of dummy
 * weights (copied to the device on a CUDA backend), which iterating can skip. */
#define GOLDEN_RUN_BIG(fn)                                                                         \
    do {                                                                                           \
        if (getenv("STRATA_SKIP_BIG")) fprintf(stderr, "  %s skipped\n", #fn);                     \
        else RUN(fn);                                                                              \
    } while (0)

/* Runs fn on every fixture directory tests/golden/<prefix>* with one CPU backend;
 * returns how many there were. */
__attribute__((unused)) static int golden_for_each(const char *prefix,
                                                   void (*fn)(backend *b, const char *dir)) {
    backend *b = NULL;
    strata_err err = {0};
    CHECK(backend_cpu_create(2, &b, &err) == 0);
    DIR *d = opendir("tests/golden");
    CHECK(d != NULL);
    int n = 0;
    if (d && b) {
        struct dirent *e;
        char path[512];
        while ((e = readdir(d))) {
            if (strncmp(e->d_name, prefix, strlen(prefix))) continue;
            snprintf(path, sizeof path, "tests/golden/%s", e->d_name);
            fn(b, path);
            n++;
        }
    }
    if (d) closedir(d);
    backend_destroy(b);
    return n;
}

#endif
