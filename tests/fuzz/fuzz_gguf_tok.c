/* fuzz_gguf_tok.c - a GGUF file's tokenizer and chat template on arbitrary bytes.
 *
 * Each input is a whole .gguf file, opened through gguf_open_buffer from a copy of
 * exactly its length. When it opens, the path `--model X.gguf` takes runs on it: the
 * tokenizer.ggml.* keys copied out (server/model_text.c), rebuilt into a tokenizer.json
 * tree and loaded (engine/text/tok_ggml.c), then its tokenizer.chat_template parsed with
 * that tokenizer's bos / eos. A tokenizer that loads must encode a fixed text into ids of
 * its vocabulary and decode them again; every refusal must name the file, as the errors
 * of both files promise. The seeds are tools/gen_gguf_fixtures.py's tokenizer GGUFs
 * (tests/fuzz/corpus/gguf_tok/: qwen35, tekken, gpt-2 and gemma4). */
// fuzz-lib: strata
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/load/gguf.h"
#include "server/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A refusal must say why, naming the file (an allocation failure aside). */
static void check_refusal(int r, const strata_err *err) {
    if (r == STRATA_ENOMEM) return;
    if (!err->msg[0] || !strstr(err->msg, "fuzz.gguf")) abort();
}

static void check_tokenizer(const tokenizer *t) {
    static const char text[] = "hello world, na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac "
                               "<|im_start|>ab<think>\xf0\x9f\x98\x80\n\n  x";
    strata_err err = {0};
    for (int sp = 0; sp < 2; sp++) {
        int32_t *ids = NULL;
        size_t n = 0;
        char *out = NULL;
        size_t len = 0;
        if (tok_encode(t, text, sizeof text - 1, sp, &ids, &n, &err)) continue;
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= tok_vocab_size(t)) abort();
        for (int skip = 0; skip < 2; skip++) {
            if (!tok_decode(t, ids, n, skip, &out, &len, &err)) free(out);
            out = NULL;
        }
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 20) return 0;
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    gguf *g = NULL;
    tokenizer *t = NULL;
    chat_template *ct = NULL;
    strata_err err = {0};
    if (gguf_open_buffer(&g, copy, size, "fuzz.gguf", &err)) goto done;
    int r = model_text_gguf_tokenizer(&t, g, &err);
    if (r) {
        if (t) abort(); /* a failed load leaves its output untouched */
        check_refusal(r, &err);
    } else {
        check_tokenizer(t);
    }
    err = (strata_err){0};
    r = model_text_gguf_template(&ct, g, t, &err);
    if (r && ct) abort();
    if (r) check_refusal(r, &err);
done:
    chat_template_free(ct);
    tok_free(t);
    gguf_close(g);
    free(copy);
    return 0;
}
