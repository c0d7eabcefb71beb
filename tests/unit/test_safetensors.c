/* test_safetensors.c - models/load/safetensors.c against real files written here.
 *
 * Each case writes .safetensors files (and index files) into a fresh mkdtemp
 * directory, opens them with st_open and checks values, error codes and that every
 * message names the file and the tensor. The last cases fail the N-th allocation
 * (through jansson's allocator, which the loader also uses) until the open succeeds. */
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/load/safetensors.h"
#include "tests/test.h"

static char tmp_dir[256];

/* ---- writers ----------------------------------------------------------------------- */

static char *tpath(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) & 3;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmp_dir, name);
    return buf[k];
}

/* Writes raw bytes: an 8-byte little-endian length hlen, then header, then data. */
static void write_raw(const char *path, uint64_t hlen, const char *header, size_t header_len,
                      const void *data, size_t data_len) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(hlen >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(header, 1, header_len, f);
    if (data_len) fwrite(data, 1, data_len, f);
    fclose(f);
}

/* Writes a well-formed file: header padded with spaces to a multiple of 8, as the
 * Python writer does, then data_len bytes of data (a counting pattern when NULL). */
static void write_st(const char *path, const char *header, const void *data, size_t data_len) {
    size_t n = strlen(header), padded = (n + 7) & ~(size_t)7;
    char *h = malloc(padded + 1);
    memcpy(h, header, n);
    memset(h + n, ' ', padded - n);
    uint8_t *d = NULL;
    if (!data && data_len) {
        d = malloc(data_len);
        for (size_t i = 0; i < data_len; i++) d[i] = (uint8_t)i;
        data = d;
    }
    write_raw(path, padded, h, padded, data, data_len);
    free(h);
    free(d);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void clean_dir(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'/*", tmp_dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
}

/* Opens path, expects code, and checks that the message contains each given string. */
static void expect_fail(const char *path, int code, ...) {
    st_model *m = NULL;
    strata_err err = {0};
    int rc = st_open(&m, path, &err);
    CHECK_MSG(rc == code, "%s: rc %d (%s), want %d; msg: %s", path, rc, strata_err_name(rc), code,
              err.msg);
    CHECK(m == NULL);
    CHECK_EQ_INT(err.code, code);
    va_list ap;
    va_start(ap, code);
    for (const char *s; (s = va_arg(ap, const char *));)
        CHECK_MSG(strstr(err.msg, s) != NULL, "message '%s' lacks '%s'", err.msg, s);
    va_end(ap);
}

/* ---- single file ------------------------------------------------------------------- */

static const char *single_header =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"w.bf16\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
    "\"w.f32\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[12,24]},"
    "\"w.f16\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[24,28]},"
    "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[28,28]},"
    "\"scalar\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[28,32]},"
    "\"ids\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[32,40]},"
    "\"mask\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,2],\"data_offsets\":[40,42]}}";

static void fill_single(uint8_t *d) {
    const float bf[6] = {1.0f, -2.5f, 0.15625f, 3e8f, -0.0f, 7.0f};
    for (int i = 0; i < 6; i++) {
        uint16_t h = dtype_f32_to_bf16(bf[i]);
        memcpy(d + 2 * i, &h, 2);
    }
    const float f[3] = {0.1f, -1e-20f, 123456.75f};
    memcpy(d + 12, f, 12);
    uint16_t h0 = dtype_f32_to_f16(0.5f), h1 = dtype_f32_to_f16(-65504.0f);
    memcpy(d + 24, &h0, 2);
    memcpy(d + 26, &h1, 2);
    int32_t s = -42;
    memcpy(d + 28, &s, 4);
    int64_t id = 1LL << 40;
    memcpy(d + 32, &id, 8);
    d[40] = 1;
    d[41] = 255;
}

static void check_single(const st_model *m, const char *file) {
    CHECK_EQ_INT(st_count(m), 7);
    CHECK(st_find(m, "__metadata__") == NULL);
    CHECK(st_find(m, "missing") == NULL);
    const st_tensor *t = st_find(m, "w.bf16");
    CHECK(t != NULL);
    if (!t) return;
    CHECK_EQ_INT(t->dt, DTYPE_BF16);
    CHECK_EQ_INT(t->ndim, 2);
    CHECK_EQ_INT(t->shape[0], 2);
    CHECK_EQ_INT(t->shape[1], 3);
    CHECK_EQ_INT(t->nbytes, 12);
    CHECK(strcmp(t->file, file) == 0);
    const uint16_t *b = t->data;
    CHECK_NEAR(dtype_bf16_to_f32(b[0]), 1.0, 0);
    CHECK_NEAR(dtype_bf16_to_f32(b[1]), -2.5, 0);
    CHECK_NEAR(dtype_bf16_to_f32(b[2]), 0.15625, 0);
    CHECK_NEAR(dtype_bf16_to_f32(b[5]), 7.0, 0);
    t = st_find(m, "w.f32");
    CHECK(t && t->dt == DTYPE_F32 && t->nbytes == 12);
    if (t) {
        float f[3];
        memcpy(f, t->data, 12);
        CHECK(f[0] == 0.1f && f[1] == -1e-20f && f[2] == 123456.75f);
    }
    t = st_find(m, "w.f16");
    CHECK(t && t->dt == DTYPE_F16);
    if (t) {
        const uint16_t *h = t->data;
        CHECK_NEAR(dtype_f16_to_f32(h[0]), 0.5, 0);
        CHECK_NEAR(dtype_f16_to_f32(h[1]), -65504.0, 0);
    }
    t = st_find(m, "empty");
    CHECK(t && t->nbytes == 0 && t->ndim == 2 && t->shape[0] == 0 && t->shape[1] == 4);
    t = st_find(m, "scalar");
    CHECK(t && t->ndim == 0 && t->nbytes == 4 && t->dt == DTYPE_I32);
    if (t) CHECK_EQ_INT(*(const int32_t *)t->data, -42);
    t = st_find(m, "ids");
    CHECK(t && t->dt == DTYPE_I64);
    if (t) CHECK_EQ_INT(*(const int64_t *)t->data, 1LL << 40);
    t = st_find(m, "mask");
    CHECK(t && t->dt == DTYPE_U8 && t->ndim == 8 && t->shape[7] == 2);
    if (t) CHECK(((const uint8_t *)t->data)[1] == 255);
    /* st_get walks every tensor exactly once, and each is reachable by name. */
    int seen = 0;
    for (int i = 0; i < st_count(m); i++) {
        const st_tensor *g = st_get(m, i);
        CHECK(g != NULL && st_find(m, g->name) == g);
        seen++;
    }
    CHECK_EQ_INT(seen, 7);
    CHECK(st_get(m, -1) == NULL && st_get(m, 7) == NULL);
}

static void test_single_file(void) {
    uint8_t d[42];
    fill_single(d);
    char *file = tpath("model.safetensors");
    write_st(file, single_header, d, sizeof d);
    st_model *m = NULL;
    strata_err err = {0};
    int rc = st_open(&m, file, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (m) check_single(m, file);
    st_close(m);
    /* The directory form finds model.safetensors inside. */
    m = NULL;
    rc = st_open(&m, tmp_dir, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (m) check_single(m, tpath("model.safetensors"));
    st_close(m);
    st_close(NULL);
    clean_dir();
}

static void test_check_header(void) {
    strata_err err = {0};
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    CHECK_EQ_INT(st_check_header(ok, strlen(ok), 8, "mem", &err), 0);
    CHECK_EQ_INT(st_check_header(ok, strlen(ok), 7, "mem", &err), STRATA_EFORMAT);
    CHECK(strstr(err.msg, "mem") && strstr(err.msg, "'a'"));
    CHECK_EQ_INT(st_check_header("{}", 2, 0, "mem", &err), 0);
    CHECK_EQ_INT(st_check_header("[1]", 3, 0, "mem", &err), STRATA_EFORMAT);
    CHECK_EQ_INT(st_check_header("{\"a\":", 5, 0, "mem", &err), STRATA_EFORMAT);
    CHECK_EQ_INT(st_check_header("", 0, 0, "mem", &err), STRATA_EFORMAT);
    const char *dup = "{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[4,8]}}";
    CHECK_EQ_INT(st_check_header(dup, strlen(dup), 8, "mem", &err), STRATA_EFORMAT);
    CHECK(strstr(err.msg, "mem") && strstr(err.msg, "a"));
    /* The size limit is checked before parsing, so no 100 MB buffer is needed. */
    CHECK_EQ_INT(st_check_header(ok, (size_t)200 * 1000 * 1000, 8, "mem", &err), STRATA_EFORMAT);
    CHECK(strstr(err.msg, "limit"));
}

/* ---- corrupt files ----------------------------------------------------------------- */

typedef struct {
    const char *header;
    size_t data_len;
    int code;
    const char *tensor; /* must appear in the message */
} bad_case;

static const bad_case bad_cases[] = {
    /* unknown dtype */
    {"{\"t_dtype\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     STRATA_EUNSUPPORTED, "t_dtype"},
    {"{\"t_dtype2\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, STRATA_EFORMAT,
     "t_dtype2"},
    {"{\"t_nodtype\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, STRATA_EFORMAT, "t_nodtype"},
    /* shape not a list of non-negative ints */
    {"{\"t_shape_neg\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0,
     STRATA_EFORMAT, "t_shape_neg"},
    {"{\"t_shape_real\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", 1,
     STRATA_EFORMAT, "t_shape_real"},
    {"{\"t_shape_str\":{\"dtype\":\"U8\",\"shape\":\"1\",\"data_offsets\":[0,1]}}", 1,
     STRATA_EFORMAT, "t_shape_str"},
    {"{\"t_shape_elem\":{\"dtype\":\"U8\",\"shape\":[[1]],\"data_offsets\":[0,1]}}", 1,
     STRATA_EFORMAT, "t_shape_elem"},
    {"{\"t_noshape\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, STRATA_EFORMAT, "t_noshape"},
    /* too many dims */
    {"{\"t_dims\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
     STRATA_EUNSUPPORTED, "t_dims"},
    /* shape x dtype size overflow, and a mismatch with the offsets */
    {"{\"t_ovf\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
     STRATA_EFORMAT, "t_ovf"},
    {"{\"t_ovf2\":{\"dtype\":\"BF16\",\"shape\":[9223372036854775807],\"data_offsets\":[0,2]}}", 2,
     STRATA_EFORMAT, "t_ovf2"},
    {"{\"t_len\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8, STRATA_EFORMAT,
     "t_len"},
    /* offsets past the end, begin > end, not integers, wrong arity */
    {"{\"t_past\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 8, STRATA_EFORMAT,
     "t_past"},
    {"{\"t_back\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,2]}}", 8, STRATA_EFORMAT,
     "t_back"},
    {"{\"t_offreal\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0.0,2]}}", 8, STRATA_EFORMAT,
     "t_offreal"},
    {"{\"t_offneg\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[-2,0]}}", 8, STRATA_EFORMAT,
     "t_offneg"},
    {"{\"t_off3\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2,4]}}", 8, STRATA_EFORMAT,
     "t_off3"},
    {"{\"t_offstr\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":\"0,2\"}}", 8, STRATA_EFORMAT,
     "t_offstr"},
    {"{\"t_entry\":[1,2]}", 0, STRATA_EFORMAT, "t_entry"},
    /* overlapping ranges between tensors (the second starts inside the first) */
    {"{\"t_a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"t_b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     12, STRATA_EFORMAT, "t_b"},
    {"{\"t_c\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
     "\"t_d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
     16, STRATA_EFORMAT, "t_c"},
    /* duplicate name inside one header */
    {"{\"t_dup\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
     "\"t_dup\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
     2, STRATA_EFORMAT, "t_dup"},
};

static void test_corrupt_headers(void) {
    char *file = tpath("bad.safetensors");
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        write_st(file, c->header, NULL, c->data_len);
        expect_fail(file, c->code, file, c->tensor, NULL);
        /* st_check_header agrees with st_open on the same bytes. */
        strata_err err = {0};
        CHECK_EQ_INT(st_check_header(c->header, strlen(c->header), c->data_len, "hdr", &err),
                     c->code);
        CHECK_MSG(strstr(err.msg, c->tensor) != NULL, "%s", err.msg);
    }
    clean_dir();
}

static void test_corrupt_files(void) {
    char *file = tpath("bad.safetensors");
    /* shorter than the 8-byte length */
    write_text(file, "abc");
    expect_fail(file, STRATA_EFORMAT, file, "truncated", NULL);
    write_text(file, "");
    expect_fail(file, STRATA_EFORMAT, file, "truncated", NULL);
    /* header length past the end of the file */
    const char *h = "{}      ";
    write_raw(file, 64, h, 8, NULL, 0);
    expect_fail(file, STRATA_EFORMAT, file, "truncated", NULL);
    /* absurd header length (the file itself is tiny) */
    write_raw(file, (uint64_t)1 << 62, h, 8, NULL, 0);
    expect_fail(file, STRATA_EFORMAT, file, "limit", NULL);
    write_raw(file, UINT64_MAX, h, 8, NULL, 0);
    expect_fail(file, STRATA_EFORMAT, file, "limit", NULL);
    /* header not valid JSON, and valid JSON that is not an object */
    write_raw(file, 8, "{\"a\":1  ", 8, NULL, 0);
    expect_fail(file, STRATA_EFORMAT, file, "JSON", NULL);
    write_raw(file, 8, "\0\0\0\0\0\0\0\0", 8, NULL, 0);
    expect_fail(file, STRATA_EFORMAT, file, "JSON", NULL);
    write_st(file, "[1,2,3]", NULL, 0);
    expect_fail(file, STRATA_EFORMAT, file, "object", NULL);
    /* the data section being cut short shows up as offsets past the end */
    write_st(file, "{\"cut\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", NULL, 10);
    expect_fail(file, STRATA_EFORMAT, file, "cut", NULL);
    /* an empty header with zero-size tensors only is fine */
    write_st(file,
             "{\"z\":{\"dtype\":\"BF16\",\"shape\":[0],\"data_offsets\":[0,0]},"
             "\"y\":{\"dtype\":\"BF16\",\"shape\":[3,0],\"data_offsets\":[0,0]},"
             "\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,0],"
             "\"data_offsets\":[0,0]}}",
             NULL, 0);
    st_model *m = NULL;
    strata_err err = {0};
    CHECK_MSG(st_open(&m, file, &err) == 0, "%s", err.msg);
    if (m) CHECK(st_count(m) == 3 && st_find(m, "y")->nbytes == 0 && st_find(m, "x")->ndim == 3);
    st_close(m);
    /* missing paths and directories without a checkpoint */
    expect_fail(tpath("nope.safetensors"), STRATA_ENOTFOUND, "nope.safetensors", NULL);
    mkdir(tpath("emptydir"), 0700);
    expect_fail(tpath("emptydir"), STRATA_ENOTFOUND, "emptydir", "model.safetensors", NULL);
    clean_dir();
}

/* ---- shards ------------------------------------------------------------------------ */

static const char *shard1 =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"embed\":{\"dtype\":\"BF16\",\"shape\":[4,2],\"data_offsets\":[0,16]},"
    "\"norm\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}";
static const char *shard2 =
    "{\"lm_head\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
    "\"bias\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}}";
static const char *good_index = "{\"metadata\":{\"total_size\":32},\"weight_map\":{"
                                "\"embed\":\"model-00001-of-00002.safetensors\","
                                "\"norm\":\"model-00001-of-00002.safetensors\","
                                "\"lm_head\":\"model-00002-of-00002.safetensors\","
                                "\"bias\":\"model-00002-of-00002.safetensors\"}}";

static void write_shards(void) {
    write_st(tpath("model-00001-of-00002.safetensors"), shard1, NULL, 24);
    write_st(tpath("model-00002-of-00002.safetensors"), shard2, NULL, 8);
}

static void check_sharded(const st_model *m) {
    CHECK_EQ_INT(st_count(m), 4);
    const st_tensor *e = st_find(m, "embed"), *n = st_find(m, "norm");
    const st_tensor *l = st_find(m, "lm_head"), *b = st_find(m, "bias");
    CHECK(e && n && l && b);
    if (!(e && n && l && b)) return;
    CHECK(strstr(e->file, "model-00001-of-00002") && strstr(l->file, "model-00002-of-00002"));
    CHECK(e->file == n->file && l->file == b->file && e->file != l->file);
    /* write_st fills data with the byte pattern 0,1,2,... per file */
    const uint8_t *p = e->data;
    CHECK(p[0] == 0 && p[15] == 15);
    CHECK(((const uint8_t *)n->data)[0] == 16);
    CHECK(((const uint8_t *)l->data)[0] == 0 && ((const uint8_t *)l->data)[7] == 7);
    CHECK(b->nbytes == 0 && l->shape[1] == 2 && l->dt == DTYPE_F16);
}

static void test_sharded(void) {
    write_shards();
    write_text(tpath("model.safetensors.index.json"), good_index);
    st_model *m = NULL;
    strata_err err = {0};
    CHECK_MSG(st_open(&m, tmp_dir, &err) == 0, "%s", err.msg);
    if (m) check_sharded(m);
    st_close(m);
    m = NULL;
    CHECK_MSG(st_open(&m, tpath("model.safetensors.index.json"), &err) == 0, "%s", err.msg);
    if (m) check_sharded(m);
    st_close(m);
    /* A bare index name: the shards are looked up in the current directory. */
    char cwd[1024];
    if (getcwd(cwd, sizeof cwd) && chdir(tmp_dir) == 0) {
        m = NULL;
        CHECK_MSG(st_open(&m, "model.safetensors.index.json", &err) == 0, "%s", err.msg);
        if (m) check_sharded(m);
        st_close(m);
        CHECK(chdir(cwd) == 0);
    }
    clean_dir();
}

static void test_sharded_errors(void) {
    const char *idx = tpath("model.safetensors.index.json");
    const char *s1 = "model-00001-of-00002.safetensors", *s2 = "model-00002-of-00002.safetensors";
    /* a tensor listed but missing from its shard: the message names tensor and shard */
    write_shards();
    write_text(idx, "{\"weight_map\":{\"embed\":\"model-00001-of-00002.safetensors\","
                    "\"norm\":\"model-00001-of-00002.safetensors\","
                    "\"ghost\":\"model-00001-of-00002.safetensors\","
                    "\"lm_head\":\"model-00002-of-00002.safetensors\","
                    "\"bias\":\"model-00002-of-00002.safetensors\"}}");
    expect_fail(tmp_dir, STRATA_EFORMAT, "ghost", s1, NULL);
    /* a tensor in another shard than the map says */
    write_text(idx, "{\"weight_map\":{\"embed\":\"model-00002-of-00002.safetensors\","
                    "\"norm\":\"model-00001-of-00002.safetensors\","
                    "\"lm_head\":\"model-00002-of-00002.safetensors\","
                    "\"bias\":\"model-00002-of-00002.safetensors\"}}");
    expect_fail(tmp_dir, STRATA_EFORMAT, "embed", s1, s2, NULL);
    /* a tensor a shard holds but the map does not list */
    write_text(idx, "{\"weight_map\":{\"embed\":\"model-00001-of-00002.safetensors\","
                    "\"lm_head\":\"model-00002-of-00002.safetensors\","
                    "\"bias\":\"model-00002-of-00002.safetensors\"}}");
    expect_fail(tmp_dir, STRATA_EFORMAT, "norm", s1, NULL);
    /* a shard the map names that does not exist */
    write_text(idx, "{\"weight_map\":{\"embed\":\"model-00003-of-00002.safetensors\"}}");
    expect_fail(tmp_dir, STRATA_ENOTFOUND, "model-00003-of-00002.safetensors", NULL);
    /* shard names escaping the directory, and malformed maps */
    write_text(idx, "{\"weight_map\":{\"embed\":\"../model-00001-of-00002.safetensors\"}}");
    expect_fail(tmp_dir, STRATA_EFORMAT, idx, "embed", NULL);
    write_text(idx, "{\"weight_map\":{\"embed\":7}}");
    expect_fail(tmp_dir, STRATA_EFORMAT, idx, "embed", NULL);
    write_text(idx, "{\"weight_map\":[]}");
    expect_fail(tmp_dir, STRATA_EFORMAT, idx, "weight_map", NULL);
    write_text(idx, "{\"weight_map\":{\"embed\":\"a\",");
    expect_fail(tmp_dir, STRATA_EFORMAT, idx, NULL);
    /* the same name in two shards */
    write_st(tpath(s2),
             "{\"lm_head\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
             "\"norm\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}}",
             NULL, 8);
    write_text(idx, good_index);
    expect_fail(tmp_dir, STRATA_EFORMAT, "norm", s1, s2, NULL);
    /* a corrupt shard is reported with its own path */
    write_st(tpath(s2), "{\"lm_head\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,9]}}",
             NULL, 9);
    expect_fail(tmp_dir, STRATA_EFORMAT, s2, "lm_head", NULL);
    clean_dir();
}

/* ---- allocation failures ----------------------------------------------------------- */

static long alloc_countdown; /* fail when it reaches 0; negative = never */
static long alloc_calls;

static void *failing_malloc(size_t n) {
    alloc_calls++;
    if (alloc_countdown >= 0 && alloc_countdown-- == 0) return NULL;
    return malloc(n);
}

/* Raises N from 0 until no allocation fails: each attempt whose N-th allocation failed
 * must fail cleanly (non-zero code, no model, and no leak: ASan checks at exit). The
 * code is usually STRATA_ENOMEM, but jansson reports a failure inside its string
 * scanner as a syntax error, so any error is accepted there. want is the code the open
 * returns once no allocation fails. */
static void alloc_loop(const char *path, int want) {
    json_set_alloc_funcs(failing_malloc, free);
    int n, rc = -1, injected = 1, enomem = 0;
    for (n = 0; n < 10000 && injected; n++) {
        alloc_countdown = n;
        alloc_calls = 0;
        st_model *m = NULL;
        strata_err err = {0};
        rc = st_open(&m, path, &err);
        injected = alloc_countdown < 0;
        if (injected) {
            CHECK_MSG(rc != 0 && m == NULL, "N=%d: succeeded although allocation failed", n);
            enomem += rc == STRATA_ENOMEM;
        } else {
            CHECK_MSG(rc == want, "N=%d: rc %d: %s", n, rc, err.msg);
        }
        st_close(m);
    }
    CHECK_MSG(!injected, "%s: still failing after %d allocations", path, n);
    CHECK(n > 5 && enomem > 3); /* failures were reached inside the loader and the parse */
    alloc_countdown = -1;
    json_set_alloc_funcs(malloc, free);
}

static void test_alloc_failures(void) {
    uint8_t d[42];
    fill_single(d);
    write_st(tpath("model.safetensors"), single_header, d, sizeof d);
    alloc_loop(tmp_dir, 0);
    clean_dir();
    write_shards();
    write_text(tpath("model.safetensors.index.json"), good_index);
    alloc_loop(tmp_dir, 0);
    write_text(tpath("model.safetensors.index.json"),
               "{\"weight_map\":{\"embed\":\"model-00001-of-00002.safetensors\","
               "\"norm\":\"model-00001-of-00002.safetensors\","
               "\"lm_head\":\"model-00001-of-00002.safetensors\","
               "\"bias\":\"model-00002-of-00002.safetensors\"}}");
    alloc_loop(tmp_dir, STRATA_EFORMAT);
    clean_dir();
}

int main(void) {
    const char *base = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/strata-st-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 2;
    }
    RUN(test_single_file);
    RUN(test_check_header);
    RUN(test_corrupt_headers);
    RUN(test_corrupt_files);
    RUN(test_sharded);
    RUN(test_sharded_errors);
    RUN(test_alloc_failures);
    rmdir(tmp_dir);
    TEST_DONE();
}
