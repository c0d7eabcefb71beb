/* test_gguf.c - models/load/gguf.c and gguf_meta.c against files the `gguf` package wrote.
 *
 * tests/data/gguf/ holds small files made by the reference writer (GGUFWriter, through
 * tools/gen_gguf_fixtures.py). The first cases read them back: every metadata value type,
 * string and number arrays, tensors F32 / F16 / BF16 / Q8_0 / Q4_K with their dims in
 * both orders and their bytes. The refusal cases copy tiny.gguf into a mkdtemp directory,
 * corrupt one field (found by searching for its key or tensor name, so they do not depend
 * on where the writer put it) and check the error code and that the message names the
 * file and the key or tensor. The last case fails the n-th allocation until an open
 * succeeds and checks that nothing leaks. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALLOC_HOOK_WITH_ASAN
#include "engine/base/dtype.h"
#include "models/load/gguf.h"
#include "tests/alloc_hook.h"
#include "tests/test.h"
#include "tests/test_file.h"

#define DATA "tests/data/gguf/"

static char tmp_dir[256];

/* ---- files --------------------------------------------------------------------------- */

typedef struct buf {
    uint8_t *p;
    size_t len;
} buf;

static buf load(const char *path) {
    buf b = {0};
    b.p = (uint8_t *)test_file_read(path, &b.len);
    if (!b.p) {
        perror(path);
        exit(2);
    }
    return b;
}

static const char *save(const buf *b, const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s.gguf", tmp_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b->p, 1, b->len, f) != b->len) exit(2);
    fclose(f);
    return path;
}

static void put32(buf *b, size_t at, uint32_t v) {
    for (int i = 0; i < 4; i++) b->p[at + i] = (uint8_t)(v >> 8 * i);
}

static void put64(buf *b, size_t at, uint64_t v) {
    for (int i = 0; i < 8; i++) b->p[at + i] = (uint8_t)(v >> 8 * i);
}

static uint64_t get64(const buf *b, size_t at) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b->p[at + i];
    return v;
}

/* Offset of the GGUF string s (u64 length, then the bytes) in b: where its length is. */
static size_t find_gstr(const buf *b, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i + 8 + n <= b->len; i++)
        if (get64(b, i) == n && memcmp(b->p + i + 8, s, n) == 0) return i;
    fprintf(stderr, "fixture has no string '%s'\n", s);
    exit(2);
}

/* Where the value type of key k is (right after the key string). */
static size_t key_type_at(const buf *b, const char *k) { return find_gstr(b, k) + 8 + strlen(k); }

/* Fields of a tensor info: ndim, dim d, type, offset. */
static size_t ti_ndim_at(const buf *b, const char *t) { return find_gstr(b, t) + 8 + strlen(t); }
static size_t ti_dim_at(const buf *b, const char *t, int d) { return ti_ndim_at(b, t) + 4 + 8 * d; }
static size_t ti_type_at(const buf *b, const char *t) {
    size_t at = ti_ndim_at(b, t);
    return at + 4 + 8 * b->p[at];
}
static size_t ti_offset_at(const buf *b, const char *t) { return ti_type_at(b, t) + 4; }

/* Opens path, expects code, and checks that the message holds path and each string. */
static void expect_fail(const char *path, int code, ...) {
    gguf *g = NULL;
    strata_err err = {0};
    int rc = gguf_open(&g, path, &err);
    CHECK_MSG(rc == code, "%s: rc %d (%s), want %d; msg: %s", path, rc, strata_err_name(rc), code,
              err.msg);
    CHECK(g == NULL);
    CHECK_EQ_INT(err.code, code);
    CHECK_MSG(strstr(err.msg, path) != NULL, "message '%s' lacks the path", err.msg);
    va_list ap;
    va_start(ap, code);
    for (const char *s; (s = va_arg(ap, const char *));)
        CHECK_MSG(strstr(err.msg, s) != NULL, "message '%s' lacks '%s'", err.msg, s);
    va_end(ap);
    gguf_close(g);
}

static gguf *open_ok(const char *path) {
    gguf *g = NULL;
    strata_err err = {0};
    int rc = gguf_open(&g, path, &err);
    CHECK_MSG(rc == 0, "%s: %s", path, err.msg);
    return g;
}

/* ---- reading what GGUFWriter wrote ------------------------------------------------------ */

static void check_scalars(const gguf *g) {
    strata_err err = {0};
    uint32_t u = 0;
    int32_t i = 0;
    uint64_t u64 = 0;
    float f = 0;
    int bl = 0;
    gguf_str s = {0};
    CHECK(gguf_get_u32(g, "test.u8", &u, &err) == 0 && u == 200);
    CHECK(gguf_get_i32(g, "test.i8", &i, &err) == 0 && i == -100);
    CHECK(gguf_get_u32(g, "test.u16", &u, &err) == 0 && u == 60000);
    CHECK(gguf_get_i32(g, "test.i16", &i, &err) == 0 && i == -30000);
    CHECK(gguf_get_u32(g, "test.u32", &u, &err) == 0 && u == 4000000000u);
    CHECK(gguf_get_i32(g, "test.i32", &i, &err) == 0 && i == -2000000000);
    CHECK(gguf_get_f32(g, "test.f32", &f, &err) == 0 && f == 1.5f);
    CHECK(gguf_get_f32(g, "test.f64", &f, &err) == 0 && f == 0.25f);
    CHECK(gguf_get_bool(g, "test.bool", &bl, &err) == 0 && bl == 1);
    CHECK(gguf_get_u64(g, "test.u64", &u64, &err) == 0 && u64 == (1ull << 63) + 5);
    CHECK(gguf_get_u64(g, "test.u32", &u64, &err) == 0 && u64 == 4000000000u);
    CHECK(gguf_get_str(g, "test.str", &s, &err) == 0 && s.len == 6 &&
          memcmp(s.ptr, "h\xc3\xa9llo", 6) == 0);
    CHECK(gguf_get_str(g, "general.architecture", &s, &err) == 0 && s.len == 6 &&
          memcmp(s.ptr, "qwen35", 6) == 0);
    const gguf_kv *kv = gguf_find_kv(g, "test.i64");
    int64_t v = 0;
    CHECK(kv && kv->type == GGUF_VT_I64 && kv->n == 1);
    CHECK(kv && gguf_kv_int(kv, 0, &v) == 0 && v == -(1LL << 40));
    CHECK(kv && gguf_kv_int(kv, 1, &v) == -1);

    /* wrong type, out of range, missing: errors naming file and key, outputs untouched */
    u = 99;
    CHECK_EQ_INT(gguf_get_i32(g, "test.u32", &i, &err), STRATA_EFORMAT);
    CHECK(strstr(err.msg, "tiny.gguf") && strstr(err.msg, "'test.u32'") && strstr(err.msg, "i32"));
    CHECK_EQ_INT(gguf_get_u32(g, "test.i8", &u, &err), STRATA_EFORMAT);
    CHECK_EQ_INT(gguf_get_u32(g, "test.u64", &u, &err), STRATA_EFORMAT);
    CHECK(u == 99);
    CHECK_EQ_INT(gguf_get_u32(g, "test.str", &u, &err), STRATA_EFORMAT);
    CHECK(strstr(err.msg, "'test.str'") && strstr(err.msg, "string"));
    CHECK_EQ_INT(gguf_get_str(g, "test.u32", &s, &err), STRATA_EFORMAT);
    CHECK_EQ_INT(gguf_get_bool(g, "test.u8", &bl, &err), STRATA_EFORMAT);
    CHECK_EQ_INT(gguf_get_f32(g, "test.u8", &f, &err), STRATA_EFORMAT);
    CHECK_EQ_INT(gguf_get_u32(g, "test.arr_i32", &u, &err), STRATA_EFORMAT);
    CHECK(strstr(err.msg, "'test.arr_i32'") && strstr(err.msg, "array of 3"));
    CHECK_EQ_INT(gguf_get_u32(g, "no.such.key", &u, &err), STRATA_ENOTFOUND);
    CHECK(strstr(err.msg, "tiny.gguf") && strstr(err.msg, "'no.such.key'"));
    CHECK(gguf_find_kv(g, "no.such.key") == NULL);
}

static void check_arrays(const gguf *g) {
    strata_err err = {0};
    int64_t iv[4] = {0};
    float fv[5] = {0};
    CHECK(gguf_get_ints(g, "test.arr_i32", iv, 3, &err) == 0 && iv[0] == 1 && iv[1] == -2 &&
          iv[2] == 3);
    CHECK(gguf_get_ints(g, "test.arr_bol", iv, 3, &err) == 0 && iv[0] == 1 && iv[1] == 0 &&
          iv[2] == 1);
    CHECK(gguf_get_ints(g, "test.per_layer", iv, 4, &err) == 0 && iv[0] == 7 && iv[3] == 7);
    CHECK(gguf_get_floats(g, "test.arr_f32", fv, 2, &err) == 0 && fv[0] == 0.5f && fv[1] == -1.25f);
    CHECK(gguf_get_floats(g, "test.f32", fv, 3, &err) == 0 && fv[2] == 1.5f);
    CHECK(gguf_get_floats(g, "tokenizer.ggml.scores", fv, 5, &err) == 0 && fv[3] == -3.5f);
    iv[0] = 42;
    CHECK_EQ_INT(gguf_get_ints(g, "test.arr_i32", iv, 4, &err), STRATA_EFORMAT);
    CHECK(strstr(err.msg, "'test.arr_i32'") && strstr(err.msg, "expected 4"));
    CHECK_EQ_INT(gguf_get_ints(g, "test.arr_u64", iv, 1, &err), STRATA_EFORMAT);
    CHECK(strstr(err.msg, "'test.arr_u64'") && iv[0] == 42);
    CHECK_EQ_INT(gguf_get_floats(g, "test.arr_i32", fv, 3, &err), STRATA_EFORMAT);
    CHECK_EQ_INT(gguf_get_ints(g, "test.arr_f32", iv, 2, &err), STRATA_EFORMAT);
    CHECK_EQ_INT(gguf_get_ints(g, "tokenizer.ggml.tokens", iv, 5, &err), STRATA_EFORMAT);

    const gguf_str *tok = NULL;
    uint64_t n = 0;
    CHECK(gguf_get_strs(g, "tokenizer.ggml.tokens", &tok, &n, &err) == 0 && n == 5);
    if (n == 5) {
        CHECK(tok[0].len == 3 && memcmp(tok[0].ptr, "<s>", 3) == 0);
        CHECK(tok[2].len == 0);
        CHECK(tok[3].len == 7 && memcmp(tok[3].ptr, "\xc4\xa0hello", 7) == 0);
        CHECK(tok[4].len == 4 && memcmp(tok[4].ptr, "</s>", 4) == 0);
    }
    CHECK_EQ_INT(gguf_get_strs(g, "test.str", &tok, &n, &err), STRATA_EFORMAT);
    CHECK_EQ_INT(gguf_get_strs(g, "test.arr_i32", &tok, &n, &err), STRATA_EFORMAT);
}

static const gguf_tensor *tensor(const gguf *g, const char *name, int type, int ndim, int64_t ne0,
                                 int64_t ne1, int64_t ne2, size_t nbytes) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    CHECK_MSG(t != NULL, "no tensor %s", name);
    if (!t) return NULL;
    CHECK(strcmp(t->name, name) == 0);
    CHECK_MSG(t->type == type, "%s: type %d", name, t->type);
    CHECK_EQ_INT(t->ndim, ndim);
    CHECK(t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == ne2 && t->ne[3] == 1);
    for (int d = 0; d < ndim; d++) CHECK(t->shape[d] == t->ne[ndim - 1 - d]);
    CHECK_EQ_INT(t->n_elements, ne0 * ne1 * ne2);
    CHECK_EQ_INT(t->nbytes, nbytes);
    CHECK(t->offset % gguf_alignment(g) == 0);
    return t;
}

static void check_tensors(const gguf *g, const buf *file) {
    CHECK_EQ_INT(gguf_tensor_count(g), 6);
    const char *order[] = {"tf32", "tf16", "tb16", "tq80", "tq4k", "t3d_"};
    for (int i = 0; i < 6; i++)
        CHECK(gguf_tensor_at(g, i) && strcmp(gguf_tensor_at(g, i)->name, order[i]) == 0);
    CHECK(gguf_tensor_at(g, 6) == NULL && gguf_tensor_at(g, -1) == NULL);
    CHECK(gguf_find_tensor(g, "tf3") == NULL && gguf_find_tensor(g, "tf32x") == NULL);

    /* numpy [2, 3] is ggml ne {3, 2}; shape gives [2, 3] back */
    const gguf_tensor *t = tensor(g, "tf32", GGUF_GGML_F32, 2, 3, 2, 1, 24);
    if (t) {
        CHECK(t->shape[0] == 2 && t->shape[1] == 3);
        /* the data pointer is the file's bytes at data offset + tensor offset */
        CHECK(memcmp(t->data, file->p + gguf_data_offset(g) + t->offset, 24) == 0);
        const float *f = t->data;
        for (int i = 0; i < 6; i++) CHECK(f[i] == i * 0.5f - 1);
    }
    if ((t = tensor(g, "tf16", GGUF_GGML_F16, 2, 4, 2, 1, 16))) {
        const uint16_t *h = t->data;
        for (int i = 0; i < 8; i++) CHECK(dtype_f16_to_f32(h[i]) == i * 0.25f);
    }
    if ((t = tensor(g, "tb16", GGUF_GGML_BF16, 2, 2, 3, 1, 12))) {
        const uint16_t *h = t->data;
        for (int i = 0; i < 6; i++) CHECK(dtype_bf16_to_f32(h[i]) == i - 2.5f);
    }
    /* Q8_0 [2, 64]: 2 blocks of 34 bytes per row. Block 0 of row r spans values
     * (k - 32) / 8 + r, k < 32: amax 4 - r at k = 0, so d = (4 - r) / 127 as f16 and
     * the first quant is -127. */
    if ((t = tensor(g, "tq80", GGUF_GGML_Q8_0, 2, 64, 2, 1, 136))) {
        const uint8_t *q = t->data;
        for (int r = 0; r < 2; r++) {
            uint16_t d;
            memcpy(&d, q + 68 * r, 2);
            /* f16 keeps 11 significant bits: relative error of the rounded scale <= 2^-11 */
            CHECK_NEAR(dtype_f16_to_f32(d), (4.0 - r) / 127, (4.0 - r) / 127 / 2048);
            CHECK_EQ_INT((int8_t)q[68 * r + 2], -127);
        }
    }
    if ((t = tensor(g, "tq4k", GGUF_GGML_Q4_K, 2, 256, 2, 1, 288))) {
        const uint8_t *q = t->data;
        int bad = 0;
        for (int i = 0; i < 288; i++) bad += q[i] != (uint8_t)((7 * i + 3) % 256);
        CHECK_EQ_INT(bad, 0);
    }
    /* numpy [2, 3, 4]: ne {4, 3, 2}; element [1][2][3] is the last, 23 */
    if ((t = tensor(g, "t3d_", GGUF_GGML_F32, 3, 4, 3, 2, 96))) {
        CHECK(t->shape[0] == 2 && t->shape[1] == 3 && t->shape[2] == 4);
        CHECK(((const float *)t->data)[(1 * 3 + 2) * 4 + 3] == 23.0f);
    }
}

static void test_read_tiny(void) {
    buf file = load(DATA "tiny.gguf");
    gguf *g = open_ok(DATA "tiny.gguf");
    if (!g) return;
    CHECK(strcmp(gguf_path(g), DATA "tiny.gguf") == 0);
    CHECK_EQ_INT(gguf_version(g), 3);
    CHECK_EQ_INT(gguf_alignment(g), 32);
    CHECK(gguf_data_offset(g) % 32 == 0 && gguf_data_offset(g) < file.len);
    CHECK_EQ_INT(gguf_kv_count(g), 21);
    CHECK(gguf_kv_at(g, 0) && strcmp(gguf_kv_at(g, 0)->key, "general.architecture") == 0);
    CHECK(gguf_kv_at(g, 21) == NULL);
    check_scalars(g);
    check_arrays(g);
    check_tensors(g, &file);
    gguf_close(g);

    /* the same bytes through a buffer */
    strata_err err = {0};
    CHECK(gguf_open_buffer(&g, file.p, file.len, "mem", &err) == 0);
    if (g) {
        CHECK(gguf_find_tensor(g, "tq4k") != NULL);
        CHECK(((const uint8_t *)gguf_find_tensor(g, "tf32")->data) >= file.p);
    }
    gguf_close(g);
    gguf_close(NULL);
    free(file.p);
}

static void test_ggml_types(void) {
    CHECK(strcmp(gguf_ggml_name(GGUF_GGML_Q4_K), "Q4_K") == 0);
    CHECK(gguf_ggml_block(GGUF_GGML_Q4_K) == 256 && gguf_ggml_block_bytes(GGUF_GGML_Q4_K) == 144);
    CHECK(gguf_ggml_block(GGUF_GGML_Q8_0) == 32 && gguf_ggml_block_bytes(GGUF_GGML_Q8_0) == 34);
    CHECK(gguf_ggml_block(GGUF_GGML_Q6_K) == 256 && gguf_ggml_block_bytes(GGUF_GGML_Q6_K) == 210);
    CHECK(gguf_ggml_block(GGUF_GGML_BF16) == 1 && gguf_ggml_block_bytes(GGUF_GGML_BF16) == 2);
    CHECK(GGUF_GGML_BF16 == 30 && GGUF_GGML_Q4_0 == 2 && GGUF_GGML_MXFP4 == 39);
    /* removed from ggml (Q4_2, Q4_3, the repacked Q4_0_x_y) and out of range */
    int gone[] = {4, 5, 31, 32, 33, 36, 37, 38, 42, 1000, -1};
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
        CHECK(gguf_ggml_name(gone[i]) == NULL && gguf_ggml_block(gone[i]) == 0);
    CHECK(strcmp(gguf_vt_name(GGUF_VT_STRING), "string") == 0);
    CHECK(strcmp(gguf_vt_name(13), "?") == 0);
}

static void test_align64(void) {
    gguf *g = open_ok(DATA "align64.gguf");
    if (!g) return;
    CHECK_EQ_INT(gguf_alignment(g), 64);
    CHECK(gguf_data_offset(g) % 64 == 0);
    const gguf_tensor *a = gguf_find_tensor(g, "odd3"), *b = gguf_find_tensor(g, "odd5");
    CHECK(a && b && a->offset == 0 && b->offset == 64 && a->nbytes == 12 && b->nbytes == 20);
    if (b) CHECK(((const float *)b->data)[4] == 14.0f);
    gguf_close(g);
}

static void test_meta_only(void) {
    gguf *g = open_ok(DATA "meta_only.gguf");
    if (!g) return;
    strata_err err = {0};
    const gguf_str *tok;
    uint64_t n = 0;
    CHECK_EQ_INT(gguf_tensor_count(g), 0);
    CHECK(gguf_find_tensor(g, "x") == NULL);
    CHECK(gguf_get_strs(g, "tokenizer.ggml.tokens", &tok, &n, &err) == 0 && n == 2);
    gguf_close(g);
}

/* v2 differs from v3 only in allowing big-endian files; a v2 little-endian file reads. */
static void test_v2(void) {
    buf b = load(DATA "tiny.gguf");
    put32(&b, 4, 2);
    gguf *g = open_ok(save(&b, "v2"));
    CHECK(g && gguf_version(g) == 2 && gguf_tensor_count(g) == 6);
    gguf_close(g);
    free(b.p);
}

/* ---- refusals ------------------------------------------------------------------------- */

static void test_refuse_header(void) {
    expect_fail(DATA "nested.gguf", STRATA_EUNSUPPORTED, "'test.nested'", "arrays of arrays", NULL);
    expect_fail(DATA "big_endian.gguf", STRATA_EUNSUPPORTED, "big-endian", NULL);
    expect_fail("tests/data/gguf/no-such.gguf", STRATA_ENOTFOUND, NULL);
    expect_fail(DATA, STRATA_EFORMAT, "not a regular file", NULL);

    buf b = load(DATA "tiny.gguf");
    buf t = b;
    t.len = 20;
    expect_fail(save(&t, "short"), STRATA_EFORMAT, "truncated", NULL);
    b.p[3] = 'X';
    expect_fail(save(&b, "magic"), STRATA_EFORMAT, "not a GGUF file", NULL);
    b.p[3] = 'F';
    put32(&b, 4, 1);
    expect_fail(save(&b, "v1"), STRATA_EUNSUPPORTED, "version 1 ", NULL);
    put32(&b, 4, 4);
    expect_fail(save(&b, "v4"), STRATA_EUNSUPPORTED, "version 4 ", NULL);
    put32(&b, 4, 0x03000000u);
    expect_fail(save(&b, "be"), STRATA_EUNSUPPORTED, "big-endian", NULL);
    put32(&b, 4, 3);
    uint64_t n_tensors = get64(&b, 8), n_kv = get64(&b, 16);
    put64(&b, 8, 1ull << 40);
    expect_fail(save(&b, "ntensors"), STRATA_EFORMAT, "not a real file", NULL);
    put64(&b, 8, 1000);
    expect_fail(save(&b, "ntensors1k"), STRATA_EFORMAT, "1000 tensors, which cannot fit", NULL);
    put64(&b, 8, n_tensors);
    put64(&b, 16, b.len / 13);
    expect_fail(save(&b, "nkv"), STRATA_EFORMAT, "cannot fit", NULL);
    put64(&b, 16, n_kv);
    /* one tensor more than the infos hold: the next read runs into the data section */
    put64(&b, 8, n_tensors + 1);
    expect_fail(save(&b, "ntensors1"), STRATA_EFORMAT, "tensor 6", NULL);
    free(b.p);
}

/* Each case corrupts one field of a fresh copy of tiny.gguf. */
static void test_refuse_metadata(void) {
    buf b = load(DATA "tiny.gguf");
    uint8_t *orig = malloc(b.len);
    memcpy(orig, b.p, b.len);
#define RESET() memcpy(b.p, orig, b.len)
    size_t at;

    at = find_gstr(&b, "general.name");
    put64(&b, at, 1ull << 50);
    expect_fail(save(&b, "keylen"), STRATA_EFORMAT, "key 1:", "past the end", NULL);
    RESET();
    put64(&b, find_gstr(&b, "test.u8"), 0);
    expect_fail(save(&b, "keyempty"), STRATA_EFORMAT, "key 2: empty key", NULL);
    RESET();
    b.p[find_gstr(&b, "test.u8") + 8 + 4] = 0;
    expect_fail(save(&b, "keynul"), STRATA_EFORMAT, "'test'", "NUL", NULL);
    RESET();
    /* test.u16 -> a second test.i16 (same length) */
    b.p[find_gstr(&b, "test.u16") + 8 + 5] = 'i';
    expect_fail(save(&b, "dupkey"), STRATA_EFORMAT, "'test.i16' appears twice", NULL);
    RESET();
    put32(&b, key_type_at(&b, "test.u8"), 13);
    expect_fail(save(&b, "vtype"), STRATA_EFORMAT, "'test.u8'", "unknown value type 13", NULL);
    RESET();
    put32(&b, key_type_at(&b, "test.arr_i32") + 4, 200);
    expect_fail(save(&b, "elemtype"), STRATA_EFORMAT, "'test.arr_i32'", "unknown value type 200",
                NULL);
    RESET();
    put32(&b, key_type_at(&b, "test.arr_i32") + 4, GGUF_VT_ARRAY);
    expect_fail(save(&b, "nested"), STRATA_EUNSUPPORTED, "'test.arr_i32'", "arrays of arrays",
                NULL);
    RESET();
    b.p[key_type_at(&b, "test.bool") + 4] = 2;
    expect_fail(save(&b, "bool"), STRATA_EFORMAT, "'test.bool'", "not 0 or 1", NULL);
    RESET();
    b.p[key_type_at(&b, "test.arr_bol") + 4 + 4 + 8 + 1] = 7;
    expect_fail(save(&b, "boolarr"), STRATA_EFORMAT, "'test.arr_bol'", "bool 1 is 7", NULL);
    RESET();
    put64(&b, key_type_at(&b, "test.str") + 4, 1ull << 62);
    expect_fail(save(&b, "strlen"), STRATA_EFORMAT, "'test.str'", "past the end", NULL);
    RESET();
    put64(&b, key_type_at(&b, "test.arr_i32") + 8, 1ull << 61);
    expect_fail(save(&b, "arrlen"), STRATA_EFORMAT, "'test.arr_i32'", "past the end", NULL);
    RESET();
    put64(&b, key_type_at(&b, "tokenizer.ggml.tokens") + 8, 1ull << 61);
    expect_fail(save(&b, "strslen"), STRATA_EFORMAT, "'tokenizer.ggml.tokens'", "cannot fit", NULL);
    RESET();
    put64(&b, find_gstr(&b, "</s>"), 1ull << 60);
    expect_fail(save(&b, "tokenlen"), STRATA_EFORMAT, "'tokenizer.ggml.tokens'", "string 4",
                "past the end", NULL);
    RESET();
#undef RESET
    free(orig);
    free(b.p);

    b = load(DATA "align64.gguf");
    at = key_type_at(&b, "general.alignment");
    put32(&b, at + 4, 48);
    expect_fail(save(&b, "align48"), STRATA_EFORMAT, "'general.alignment'", "power of two", NULL);
    put32(&b, at + 4, 0);
    expect_fail(save(&b, "align0"), STRATA_EFORMAT, "'general.alignment'", "power of two", NULL);
    put32(&b, at + 4, 64);
    put32(&b, at, GGUF_VT_I32);
    expect_fail(save(&b, "aligntype"), STRATA_EFORMAT, "'general.alignment'", "must be u32", NULL);
    free(b.p);
}

static void test_refuse_tensors(void) {
    buf b = load(DATA "tiny.gguf");
    uint8_t *orig = malloc(b.len);
    memcpy(orig, b.p, b.len);
    size_t full = b.len, at;
#define RESET() (memcpy(b.p, orig, full), b.len = full)

    put64(&b, find_gstr(&b, "tf32"), 1ull << 50);
    expect_fail(save(&b, "namelen"), STRATA_EFORMAT, "tensor 0:", "past the end", NULL);
    RESET();
    put64(&b, find_gstr(&b, "tf16"), 0);
    expect_fail(save(&b, "nameempty"), STRATA_EFORMAT, "tensor 1: empty name", NULL);
    RESET();
    b.p[find_gstr(&b, "tf16") + 8 + 2] = 0;
    expect_fail(save(&b, "namenul"), STRATA_EFORMAT, "'tf'", "NUL", NULL);
    RESET();
    at = find_gstr(&b, "tf16") + 8; /* tf16 -> a second tf32 */
    b.p[at + 2] = '3';
    b.p[at + 3] = '2';
    expect_fail(save(&b, "dupname"), STRATA_EFORMAT, "'tf32' appears twice", "tensors 0 and 1",
                NULL);
    RESET();
    put32(&b, ti_ndim_at(&b, "tf32"), 5);
    expect_fail(save(&b, "ndim"), STRATA_EUNSUPPORTED, "'tf32'", "5 dims", NULL);
    RESET();
    put64(&b, ti_dim_at(&b, "tf32", 1), 1ull << 63);
    expect_fail(save(&b, "dimneg"), STRATA_EFORMAT, "'tf32'", "dim 1", NULL);
    RESET();
    /* elements overflow 64 bits */
    put64(&b, ti_dim_at(&b, "tf32", 0), 1ull << 32);
    put64(&b, ti_dim_at(&b, "tf32", 1), 1ull << 32);
    expect_fail(save(&b, "dimovf"), STRATA_EFORMAT, "'tf32'", "overflow", NULL);
    RESET();
    /* elements fit, bytes (x 4) do not */
    put64(&b, ti_dim_at(&b, "tf32", 0), 1ull << 62);
    put64(&b, ti_dim_at(&b, "tf32", 1), 1);
    expect_fail(save(&b, "byteovf"), STRATA_EFORMAT, "'tf32'", "overflow", NULL);
    RESET();
    /* large but not overflowing: the bytes run past the file */
    put64(&b, ti_dim_at(&b, "tf32", 1), 1ull << 20);
    expect_fail(save(&b, "dimbig"), STRATA_EFORMAT, "'tf32'", "past the end of the data", NULL);
    RESET();
    put32(&b, ti_type_at(&b, "tq80"), 4);
    expect_fail(save(&b, "type4"), STRATA_EUNSUPPORTED, "'tq80'", "unknown ggml type 4", NULL);
    put32(&b, ti_type_at(&b, "tq80"), 99);
    expect_fail(save(&b, "type99"), STRATA_EUNSUPPORTED, "'tq80'", "unknown ggml type 99", NULL);
    RESET();
    put64(&b, ti_dim_at(&b, "tq80", 0), 48);
    expect_fail(save(&b, "blocks"), STRATA_EFORMAT, "'tq80'", "48 elements", "Q8_0 blocks of 32",
                NULL);
    RESET();
    size_t off = ti_offset_at(&b, "tf16");
    put64(&b, off, get64(&b, off) + 1);
    expect_fail(save(&b, "misalign"), STRATA_EFORMAT, "'tf16'", "not a multiple of the alignment",
                NULL);
    RESET();
    put64(&b, ti_offset_at(&b, "tq4k"), 1ull << 40);
    expect_fail(save(&b, "offpast"), STRATA_EFORMAT, "'tq4k'", "past the end of the data", NULL);
    RESET();
    put64(&b, ti_offset_at(&b, "tf16"), 0); /* onto tf32 */
    expect_fail(save(&b, "overlap"), STRATA_EFORMAT, "'tf16'", "overlap tensor 'tf32'", NULL);
    RESET();
    b.len -= 32; /* t3d_ is last: its bytes now run past the end */
    expect_fail(save(&b, "cut"), STRATA_EFORMAT, "'t3d_'", "past the end of the data", NULL);
    RESET();
    /* cut inside the padding before the data section */
    size_t info_end = ti_offset_at(&b, "t3d_") + 8;
    b.len = info_end + 1;
    CHECK_MSG(info_end % 32 != 0 && info_end % 32 != 31, "info end %zu leaves no padding",
              info_end);
    expect_fail(save(&b, "nodata"), STRATA_EFORMAT, "data section starts", NULL);
    RESET();
    b.len = ti_dim_at(&b, "t3d_", 1) + 3; /* cut inside the last tensor info */
    expect_fail(save(&b, "cutinfo"), STRATA_EFORMAT, "'t3d_'", "tensor info runs past", NULL);
    RESET();
#undef RESET
    free(orig);
    free(b.p);
}

/* ---- allocation failures ---------------------------------------------------------------- */

static void test_alloc_failures(void) {
    if (!alloc_hook_on()) return;
    const char *files[] = {DATA "tiny.gguf", DATA "nested.gguf"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        int fails_seen = 0, want = f == 1 ? STRATA_EUNSUPPORTED : 0;
        for (long n = 1; n < 1000; n++) {
            gguf *g = NULL;
            strata_err err = {0};
            alloc_hook_start_scope(n, ALLOC_HOOK_EXE);
            int rc = gguf_open(&g, files[f], &err);
            if (rc == 0) {
                uint32_t u;
                rc = gguf_get_u32(g, "test.u8", &u, &err); /* getters allocate nothing */
            }
            gguf_close(g);
            int failed = alloc_hook_failed();
            long live = alloc_hook_live();
            alloc_hook_stop();
            CHECK_MSG(live == 0, "%s: allocation %ld failed, %ld blocks leaked", files[f], n, live);
            if (!failed) {
                CHECK_MSG(rc == want, "%s: rc %d: %s", files[f], rc, err.msg);
                break;
            }
            fails_seen++;
            CHECK_MSG(rc == STRATA_ENOMEM && strstr(err.msg, "out of memory") &&
                          strstr(err.msg, files[f]),
                      "%s: allocation %ld: %d %s", files[f], n, rc, err.msg);
        }
        CHECK(fails_seen >= 4);
    }
}

int main(void) {
    snprintf(tmp_dir, sizeof tmp_dir, "%s/strata-gguf-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (test_scratch_dir(tmp_dir)) {
        perror("mkdtemp");
        return 2;
    }
    RUN(test_read_tiny);
    RUN(test_ggml_types);
    RUN(test_align64);
    RUN(test_meta_only);
    RUN(test_v2);
    RUN(test_refuse_header);
    RUN(test_refuse_metadata);
    RUN(test_refuse_tensors);
    RUN(test_alloc_failures);
    TEST_DONE();
}
