/* test_gguf_stops.c - the stop tokens gguf_model_config gives a GGUF's generation config.
 *
 * A GGUF keeps one eos id (Gemma 4's converter writes <eos> alone), so the family's other
 * stop tokens are found by their text in tokenizer.ggml.tokens (models/load/gguf_config.c).
 * The files are copies of the golden gemma4 / qwen35 conversions (tests/data/gguf/golden/)
 * with a vocabulary that holds those texts at the ids Gemma 4 and Qwen3.5 give them, written
 * here through models/load/gguf_write.h. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/load/gguf.h"
#include "models/load/gguf_model.h"
#include "models/load/gguf_write.h"
#include "tests/test.h"

/* src with tokenizer.ggml.tokens replaced by "<tN>" where names has no text for N. */
static int write_with_tokens(const char *src, const char *dst, const char *const *names,
                             strata_err *err) {
    gguf *g = NULL;
    gguf_write *w = NULL;
    const gguf_kv *toks;
    int r = gguf_open(&g, src, err);
    if (!r) r = gguf_write_create(&w, dst, err);
    if (r || !(toks = gguf_find_kv(g, "tokenizer.ggml.tokens"))) goto done;
    for (int i = 0; i < gguf_kv_count(g) && !r; i++) {
        const gguf_kv *kv = gguf_kv_at(g, i);
        if (strcmp(kv->key, "general.alignment") && kv != toks) r = gguf_write_kv(w, kv, err);
    }
    char(*buf)[16] = calloc(toks->n, sizeof *buf);
    const char **s = calloc(toks->n, sizeof *s);
    for (uint64_t i = 0; buf && s && i < toks->n; i++) {
        snprintf(buf[i], sizeof buf[i], "<t%llu>", (unsigned long long)i);
        s[i] = names[i] ? names[i] : buf[i];
    }
    if (!r) r = buf && s ? gguf_write_strs(w, toks->key, s, NULL, toks->n, err) : STRATA_ENOMEM;
    free(buf);
    free(s);
    for (int i = 0; i < gguf_tensor_count(g) && !r; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        r = gguf_write_tensor(w, t->name, t->type, t->ndim, t->shape, err);
    }
    if (!r) r = gguf_write_begin(w, err);
    for (int i = 0; i < gguf_tensor_count(g) && !r; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        r = gguf_write_data(w, t->data, t->nbytes, err);
    }
    if (!r) r = gguf_write_finish(w, err);
done:
    gguf_write_destroy(w);
    gguf_close(g);
    return r;
}

/* The eos list gguf_model_config gives the copy, as a string "[a, b, ...]". */
static void eos_list(const char *path, char *out, size_t len) {
    strata_err err = {0};
    gguf *g = NULL;
    json_t *cfg = NULL, *gen = NULL;
    snprintf(out, len, "error");
    CHECK_MSG(!gguf_open(&g, path, &err), "%s", err.msg);
    if (g && !gguf_model_config(g, &cfg, &gen, &err)) {
        char *s = json_dumps(json_object_get(gen, "eos_token_id"), JSON_COMPACT);
        snprintf(out, len, "%s", s ? s : "null");
        free(s);
    } else {
        fprintf(stderr, "  %s\n", err.msg);
    }
    json_decref(cfg);
    json_decref(gen);
    gguf_close(g);
}

static void check_stops(const char *golden, const char *const *names, const char *want) {
    char dst[] = "/tmp/strata-gguf-stops.XXXXXX", path[300], got[200];
    CHECK(mkdtemp(dst) != NULL);
    snprintf(path, sizeof path, "%s/m.gguf", dst);
    strata_err err = {0};
    CHECK_MSG(!write_with_tokens(golden, path, names, &err), "%s", err.msg);
    eos_list(path, got, sizeof got);
    CHECK_MSG(!strcmp(got, want), "%s: eos %s, want %s", golden, got, want);
    unlink(path);
    rmdir(dst);
}

/* Gemma 4: eos_token_id 1 (<eos>), then <turn|> (106) and <|tool_response> (50), the
 * checkpoint's generation_config list [1, 106, 50]. */
static void test_gemma4(void) {
    static const char *names[512];
    names[1] = "<eos>", names[50] = "<|tool_response>", names[106] = "<turn|>";
    check_stops("tests/data/gguf/golden/gemma4_tiny-f32.gguf", names, "[1,106,50]");
    /* a text absent from the vocabulary adds nothing */
    names[50] = NULL;
    check_stops("tests/data/gguf/golden/gemma4_tiny-f32.gguf", names, "[1,106]");
}

/* Qwen3.5: the golden file's eos key is 1; <|im_end|> and <|endoftext|> follow, and a text
 * the key already names is not repeated. */
static void test_qwen35(void) {
    static const char *names[512];
    names[1] = "<|im_end|>", names[7] = "<|endoftext|>";
    check_stops("tests/data/gguf/golden/qwen35_tiny-f32.gguf", names, "[1,7]");
}

int main(void) {
    RUN(test_gemma4);
    RUN(test_qwen35);
    TEST_DONE();
}
