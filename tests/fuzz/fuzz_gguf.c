/* fuzz_gguf.c - the GGUF reader on arbitrary bytes.
 *
 * Each input is a whole .gguf file, opened through gguf_open_buffer (from a copy of
 * exactly the input's length, so ASan sees any read past it). When it opens, every
 * pointer it hands out must lie inside the input: each key's values and strings are
 * read through, each tensor's first and last byte are read, its byte size must agree
 * with its dims and type, and each key and tensor must be found by name. When it does
 * not open, the error must say why. The seeds are the fixtures of
 * tools/gen_gguf_fixtures.py (tests/fuzz/corpus/gguf/). */
// fuzz-sources: models/load/gguf.c models/load/gguf_meta.c engine/base/err.c
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/load/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t *lo, *hi; /* the input copy */

static void in_input(const void *p, uint64_t n) {
    const uint8_t *b = p;
    if (n == 0) return;
    if (b < lo || b > hi || n > (uint64_t)(hi - b)) abort();
}

static unsigned check_kv(const gguf *g, const gguf_kv *kv) {
    unsigned sum = 0;
    if (gguf_find_kv(g, kv->key) != kv) abort();
    if (kv->elem_type == GGUF_VT_ARRAY || kv->elem_type < 0 || kv->elem_type >= GGUF_VT_COUNT)
        abort();
    if (kv->type != GGUF_VT_ARRAY && (kv->type != kv->elem_type || kv->n != 1)) abort();
    if (kv->elem_type == GGUF_VT_STRING) {
        for (uint64_t i = 0; i < kv->n; i++) {
            in_input(kv->str[i].ptr, kv->str[i].len);
            if (kv->str[i].len) sum += (uint8_t)kv->str[i].ptr[kv->str[i].len - 1];
        }
        return sum;
    }
    int64_t v;
    double d;
    for (uint64_t i = 0; i < kv->n; i++) {
        if (gguf_kv_int(kv, i, &v) == 0) sum += (unsigned)v;
        if (gguf_kv_float(kv, i, &d) == 0) sum += d > 0;
    }
    /* the typed getters on whatever this key holds: each returns or fails cleanly */
    strata_err err = {0};
    uint32_t u;
    float f;
    int64_t iv[4];
    float fv[4];
    if (gguf_get_u32(g, kv->key, &u, &err) != 0 && !err.msg[0]) abort();
    if (gguf_get_f32(g, kv->key, &f, &err) == 0) sum += f > 0;
    if (gguf_get_ints(g, kv->key, iv, 4, &err) == 0) sum += (unsigned)iv[3];
    if (gguf_get_floats(g, kv->key, fv, 4, &err) == 0) sum += fv[3] > 0;
    return sum;
}

static unsigned check_tensor(const gguf *g, const gguf_tensor *t) {
    if (gguf_find_tensor(g, t->name) != t) abort();
    uint32_t blck = gguf_ggml_block(t->type), bytes = gguf_ggml_block_bytes(t->type);
    if (!blck || t->ndim < 0 || t->ndim > GGUF_MAX_DIMS) abort();
    uint64_t elems = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        if (t->ne[d] < 0 || (d >= t->ndim && t->ne[d] != 1)) abort();
        if (d < t->ndim && t->shape[d] != t->ne[t->ndim - 1 - d]) abort();
        elems *= (uint64_t)t->ne[d]; /* checked by the reader not to wrap unless a dim is 0 */
    }
    if (t->n_elements == 0 ? t->nbytes != 0
                           : (elems != (uint64_t)t->n_elements || t->ne[0] % blck ||
                              t->nbytes != elems / blck * bytes))
        abort();
    if (t->offset % gguf_alignment(g)) abort();
    in_input(t->data, t->nbytes);
    const uint8_t *p = t->data;
    return t->nbytes ? p[0] + p[t->nbytes - 1] : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    lo = copy;
    hi = copy + size;
    gguf *g = NULL;
    strata_err err = {0};
    if (gguf_open_buffer(&g, copy, size, "fuzz.gguf", &err) == 0) {
        unsigned sum = 0;
        uint32_t a = gguf_alignment(g);
        if (!a || (a & (a - 1)) || gguf_data_offset(g) > size) abort();
        if (gguf_tensor_count(g) && gguf_data_offset(g) % a) abort();
        for (int i = 0; i < gguf_kv_count(g); i++) sum += check_kv(g, gguf_kv_at(g, i));
        for (int i = 0; i < gguf_tensor_count(g); i++) sum += check_tensor(g, gguf_tensor_at(g, i));
        if (sum == 0xdeadbeef) fputc(' ', stderr); /* keep the reads */
        gguf_close(g);
    } else if (!err.msg[0] || !strstr(err.msg, "fuzz.gguf")) {
        abort(); /* every failure must say why, naming the file */
    }
    free(copy);
    return 0;
}
