/* fuzz_tokenizer.c - tok_load_json on arbitrary bytes, then encode / decode / stream.
 *
 * Input: a tokenizer.json, optionally followed by a NUL byte and a text. When the JSON
 * loads, the text is encoded with and without special tokens, the ids are decoded with
 * and without skipping, and streamed through a detok with a stop string; the streamed
 * text must be valid UTF-8 and equal the decode. */
// fuzz-lib: strata
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/detok.h"
#include "engine/text/tokenizer.h"
#include "engine/base/utf8.h"

static void check_stream(const tokenizer *t, const int32_t *ids, size_t n, int skip) {
    char *full = NULL, *acc = NULL;
    size_t flen = 0, alen = 0;
    strata_err err;
    if (tok_decode(t, ids, n, skip, &full, &flen, &err)) return;
    const char *stop[] = {"\xE2\x96\x81x"};
    detok_opts o = {.skip_special = skip, .split_reasoning = skip};
    detok *d;
    if (detok_create(&d, t, &o, &err)) abort();
    detok_out out;
    for (size_t i = 0; i <= n; i++) {
        int r = i < n ? detok_push(d, ids[i], &out, &err) : detok_finish(d, &out, &err);
        if (r) abort(); /* ids came from the encoder, so they are all valid */
        if (!unicode_utf8_valid(out.text, out.text_len) ||
            !unicode_utf8_valid(out.reasoning, out.reasoning_len))
            abort();
        if (!skip) { /* without reasoning split the text alone is the whole stream */
            acc = realloc(acc, alen + out.text_len + 1);
            memcpy(acc + alen, out.text, out.text_len);
            alen += out.text_len;
        }
    }
    if (!skip && (alen != flen || (flen && memcmp(acc, full, flen)))) abort();
    detok_free(d);
    o.n_stop = 1;
    o.stop = stop;
    if (!detok_create(&d, t, &o, &err)) {
        for (size_t i = 0; i < n; i++) detok_push(d, ids[i], &out, &err);
        detok_finish(d, &out, &err);
        detok_free(d);
    }
    free(acc);
    free(full);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    const char *json = (const char *)data;
    const char *nul = memchr(data, 0, size);
    size_t jlen = nul ? (size_t)(nul - json) : size;
    const char *text = nul ? nul + 1 : "Hello world, naïve 日本 😀!";
    size_t tlen = nul ? size - jlen - 1 : strlen(text);
    tokenizer *t = NULL;
    strata_err err;
    if (tok_load_json(&t, json, jlen, NULL, 0, &err)) return 0;
    for (int sp = 0; sp < 2; sp++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (tok_encode(t, text, tlen, sp, &ids, &n, &err)) continue;
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= tok_vocab_size(t)) abort();
        check_stream(t, ids, n, 0);
        check_stream(t, ids, n, 1);
        free(ids);
    }
    tok_free(t);
    return 0;
}
