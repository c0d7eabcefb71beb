/* test_spm.c - engine/text/spm_shim.cc against the Python sentencepiece package.
 *
 * tests/data/spm/{unigram,bpe}.{model,json} come from tools/spm_fixtures/gen.py: two
 * models trained with spm_train, and for each ~300 strings the ids and decoded text
 * that Python's sentencepiece produced, every piece by id, and decodes of arbitrary
 * id sequences. Then the error paths: missing, garbage, empty and truncated files,
 * and ids outside the vocabulary. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/text/spm.h"
#include "tests/test.h"

static json_t *load_fixture(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je); /* byte pieces decode to NUL */
    if (!j) fprintf(stderr, "%s: %s (line %d)\n", path, je.text, je.line);
    return j;
}

static size_t ids_from_json(const json_t *arr, int32_t *out, size_t cap) {
    size_t n = json_array_size(arr);
    for (size_t i = 0; i < n && i < cap; i++)
        out[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return n;
}

/* Prints the first difference so a failure says where the two encodings part. */
static int ids_equal(const int32_t *got, size_t n_got, const int32_t *want, size_t n_want,
                     const char *text) {
    if (n_got == n_want && (n_got == 0 || memcmp(got, want, n_got * sizeof *got) == 0)) return 1;
    size_t i = 0;
    while (i < n_got && i < n_want && got[i] == want[i]) i++;
    fprintf(stderr, "encode \"%s\": %zu ids vs %zu, first difference at %zu: %d vs %d\n", text,
            n_got, n_want, i, i < n_got ? got[i] : -1, i < n_want ? want[i] : -1);
    return 0;
}

static void check_model(const char *name) {
    char model_path[128], json_path[128];
    snprintf(model_path, sizeof model_path, "tests/data/spm/%s.model", name);
    snprintf(json_path, sizeof json_path, "tests/data/spm/%s.json", name);
    json_t *ref = load_fixture(json_path);
    spm *s = NULL;
    strata_err err = {0};
    int rc = spm_load(&s, model_path, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    CHECK(ref != NULL);
    if (rc || !ref) goto done;

    int vocab = (int)json_integer_value(json_object_get(ref, "vocab_size"));
    CHECK_EQ_INT(spm_vocab_size(s), vocab);
    CHECK_EQ_INT(spm_bos_id(s), json_integer_value(json_object_get(ref, "bos_id")));
    CHECK_EQ_INT(spm_eos_id(s), json_integer_value(json_object_get(ref, "eos_id")));

    /* Every piece both ways; the vocabulary has no duplicates, so ids round-trip. */
    const json_t *pieces = json_object_get(ref, "pieces");
    CHECK_EQ_INT(json_array_size(pieces), vocab);
    int bad_pieces = 0;
    for (int i = 0; i < vocab; i++) {
        const char *want = json_string_value(json_array_get(pieces, (size_t)i));
        const char *got = spm_id_to_piece(s, i);
        if (!want || !got || strcmp(want, got) != 0 || spm_piece_to_id(s, want) != i) bad_pieces++;
    }
    CHECK_EQ_INT(bad_pieces, 0);
    CHECK(spm_id_to_piece(s, -1) == NULL && spm_id_to_piece(s, vocab) == NULL);
    CHECK_EQ_INT(spm_piece_to_id(s, "definitely-not-a-piece"), -1);
    CHECK_EQ_INT(spm_piece_to_id(s, ""), -1);
    CHECK_EQ_INT(spm_piece_to_id(s, "<unk>"), json_integer_value(json_object_get(ref, "unk_id")));

    /* Encode each string, then decode the ids back. */
    const json_t *cases = json_object_get(ref, "encode");
    size_t n_cases = json_array_size(cases);
    CHECK(n_cases >= 300);
    int enc_bad = 0, dec_bad = 0;
    int32_t want[1024];
    for (size_t c = 0; c < n_cases; c++) {
        const json_t *cs = json_array_get(cases, c);
        const char *text = json_string_value(json_object_get(cs, "text"));
        const char *decoded = json_string_value(json_object_get(cs, "decoded"));
        size_t n_text = json_string_length(json_object_get(cs, "text"));
        size_t n_decoded = json_string_length(json_object_get(cs, "decoded"));
        size_t n_want = ids_from_json(json_object_get(cs, "ids"), want, 1024);
        int32_t *ids = NULL;
        size_t n = 0;
        rc = spm_encode(s, text, n_text, &ids, &n, &err);
        CHECK_MSG(rc == 0 && ids != NULL, "%s", err.msg);
        if (rc) continue;
        if (n_want > 1024 || !ids_equal(ids, n, want, n_want, text)) enc_bad++;
        char *out = NULL;
        size_t len = 0;
        rc = spm_decode(s, ids, n, &out, &len, &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
        if (rc == 0 && (len != n_decoded || memcmp(out, decoded, len) != 0 || out[len] != '\0')) {
            fprintf(stderr, "decode of \"%s\": \"%s\" vs \"%s\"\n", text, out, decoded);
            dec_bad++;
        }
        free(out);
        free(ids);
    }
    CHECK_EQ_INT(enc_bad, 0);
    CHECK_EQ_INT(dec_bad, 0);

    /* Decoding arbitrary id sequences (invalid UTF-8 from byte pieces, controls). */
    const json_t *decs = json_object_get(ref, "decode");
    CHECK(json_array_size(decs) > 40);
    dec_bad = 0;
    for (size_t c = 0; c < json_array_size(decs); c++) {
        const json_t *ds = json_array_get(decs, c);
        const char *text = json_string_value(json_object_get(ds, "text"));
        size_t n_text = json_string_length(json_object_get(ds, "text"));
        size_t n = ids_from_json(json_object_get(ds, "ids"), want, 1024);
        char *out = NULL;
        size_t len = 0;
        rc = spm_decode(s, want, n, &out, &len, &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
        if (rc == 0 && (len != n_text || memcmp(out, text, len) != 0)) {
            fprintf(stderr, "decode case %zu: \"%s\" vs \"%s\"\n", c, out, text);
            dec_bad++;
        }
        free(out);
    }
    CHECK_EQ_INT(dec_bad, 0);

    /* Length-delimited input: bytes after len are not read. */
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CHECK(spm_encode(s, "hello worldXYZ", 11, &a, &na, &err) == 0);
    CHECK(spm_encode(s, "hello world", 11, &b, &nb, &err) == 0);
    CHECK(a && b && ids_equal(a, na, b, nb, "hello world"));
    free(a);
    free(b);
    /* Invalid UTF-8 and embedded NULs are encoded, not refused, and do not crash. */
    const char junk[] = "ab\xff\xfe\xc3(\x80\0zz\xe2\x82";
    a = NULL;
    CHECK(spm_encode(s, junk, sizeof junk - 1, &a, &na, &err) == 0 && a != NULL);
    free(a);

    /* Ids outside the vocabulary are refused with the id in the message. */
    int32_t out_of_range[3] = {5, vocab, 6};
    char *text = (char *)"untouched";
    size_t len = 12345;
    CHECK_EQ_INT(spm_decode(s, out_of_range, 3, &text, &len, &err), STRATA_ERANGE);
    CHECK(strstr(err.msg, "id ") != NULL && strcmp(text, "untouched") == 0 && len == 12345);
    out_of_range[1] = -1;
    CHECK_EQ_INT(spm_decode(s, out_of_range, 3, &text, &len, &err), STRATA_ERANGE);
    CHECK(strstr(err.msg, "-1") != NULL);
done:
    spm_free(s);
    json_decref(ref);
}

static void test_unigram(void) { check_model("unigram"); }
static void test_bpe(void) { check_model("bpe"); }

static void expect_load_fail(const char *path, int code) {
    spm *s = NULL;
    strata_err err = {0};
    int rc = spm_load(&s, path, &err);
    CHECK_MSG(rc == code, "%s: rc %d want %d: %s", path, rc, code, err.msg);
    CHECK(s == NULL);
    CHECK_MSG(strstr(err.msg, path) != NULL, "message '%s' does not name %s", err.msg, path);
}

static void test_load_errors(void) {
    char dir[] = "/tmp/strata-spm-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    char path[128];
    snprintf(path, sizeof path, "%s/missing.model", dir);
    expect_load_fail(path, STRATA_ENOTFOUND);

    snprintf(path, sizeof path, "%s/garbage.model", dir);
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 4096; i++) fputc((i * 7919 + 13) & 0xff, f);
    fclose(f);
    expect_load_fail(path, STRATA_EFORMAT);

    snprintf(path, sizeof path, "%s/empty.model", dir);
    fclose(fopen(path, "wb"));
    expect_load_fail(path, STRATA_EFORMAT);

    /* The first half of a real model: a valid prefix that stops mid-message. */
    char trunc[128];
    snprintf(trunc, sizeof trunc, "%s/truncated.model", dir);
    FILE *in = fopen("tests/data/spm/bpe.model", "rb"), *out = fopen(trunc, "wb");
    CHECK(in && out);
    if (in && out) {
        char buf[4096];
        size_t n = fread(buf, 1, sizeof buf, in);
        fwrite(buf, 1, n / 2, out);
    }
    if (in) fclose(in);
    if (out) fclose(out);
    expect_load_fail(trunc, STRATA_EFORMAT);

    /* A directory and a JSON file are not models either. */
    spm *s = NULL;
    strata_err err = {0};
    CHECK(spm_load(&s, dir, &err) != 0 && s == NULL);
    expect_load_fail("tests/data/spm/bpe.json", STRATA_EFORMAT);

    unlink(path);
    unlink(trunc);
    snprintf(path, sizeof path, "%s/garbage.model", dir);
    unlink(path);
    rmdir(dir);
    spm_free(NULL);
}

int main(void) {
    RUN(test_unigram);
    RUN(test_bpe);
    RUN(test_load_errors);
    TEST_DONE();
}
