/* test_quant.c - the block formats of engine/base/quant.c against llama.cpp's, through the
 * `gguf` Python package's port of them (fixtures from tools/quant_fixtures.py in
 * tests/data/quant/, or $STRATA_QUANT_FIXTURES for a larger set):
 *
 * - dequantizing random blocks of every type gives the package's values bit for bit, and
 *   quant_value_at agrees with the row dequantizer;
 * - quantizing rows to Q8_0, Q4_0 and Q5_0 gives the package's bytes (rounding ties, equal
 *   maxima, zero blocks, d overflowing f16 included);
 * - the package cannot quantize Q4_K or Q6_K: their quantizers give the bytes llama.cpp's
 *   own C gives (quantize_k.bin, made with --llama-cpp), and on many more rows are held to
 *   what the format allows: an element whose code is not at the end of the range is within
 *   half a step of its value (the step being its sub-block's d · scale), and none is
 *   further than the fit may clip (see the bounds below);
 * - the dtype table: block sizes, row bytes, and that element-size callers see 0. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/quant.h"
#include "tests/test.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint32_t rng_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}
/* Roughly normal (sum of four uniforms), scaled. */
static float rng_n(float scale) {
    float s = 0;
    for (int i = 0; i < 4; i++) s += (float)rng_u32() / 4294967296.0f - 0.5f;
    return s * 1.7f * scale;
}

/* The whole file; NULL (a failed check) when it cannot be read. Caller frees. */
static unsigned char *read_fixture(const char *name, size_t *len) {
    const char *dir = getenv("STRATA_QUANT_FIXTURES");
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "tests/data/quant", name);
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n)) && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (f) fclose(f);
    CHECK_MSG(buf != NULL, "cannot read %s (run tools/quant_fixtures.py)", path);
    *len = buf ? (size_t)n : 0;
    return buf;
}

static void test_dtype_table(void) {
    CHECK_EQ_INT(dtype_block_elems(DTYPE_BF16), 1);
    CHECK_EQ_INT(dtype_block_elems(DTYPE_Q8_0), 32);
    CHECK_EQ_INT(dtype_block_elems(DTYPE_Q4_K), 256);
    CHECK_EQ_INT(dtype_row_bytes(DTYPE_Q8_0, 2048), 64 * 34);
    CHECK_EQ_INT(dtype_row_bytes(DTYPE_Q4_0, 64), 2 * 18);
    CHECK_EQ_INT(dtype_row_bytes(DTYPE_Q5_0, 64), 2 * 22);
    CHECK_EQ_INT(dtype_row_bytes(DTYPE_Q4_K, 512), 2 * 144);
    CHECK_EQ_INT(dtype_row_bytes(DTYPE_Q6_K, 256), 210);
    CHECK_EQ_INT(dtype_row_bytes(DTYPE_BF16, 7), 14);
    CHECK_EQ_INT(dtype_row_bytes(DTYPE_Q4_K, 300), 0); /* not whole blocks */
    CHECK_EQ_INT(dtype_row_bytes(DTYPE_COUNT, 32), 0);
    /* a block type has no element size: a per-element caller gets 0, never a wrong size */
    CHECK_EQ_INT(dtype_size(DTYPE_Q8_0), 0);
    CHECK_EQ_INT(dtype_size(DTYPE_F16), 2);
    CHECK(strcmp(dtype_name(DTYPE_Q6_K), "Q6_K") == 0);
    dtype t = DTYPE_F32;
    CHECK(dtype_parse("Q4_K", &t) != 0 && t == DTYPE_F32); /* safetensors has no block types */
    CHECK(dtype_parse("BF16", &t) == 0 && t == DTYPE_BF16);
    float out[32];
    CHECK(quant_dequantize_row(out, out, DTYPE_BF16, 32) == -1);
    CHECK(quant_dequantize_row(out, out, DTYPE_Q8_0, 31) == -1);
    CHECK(quant_quantize_row(out, out, DTYPE_F32, 32) == -1);
}

static void check_dequant(const char *file, dtype dt) {
    size_t len;
    unsigned char *buf = read_fixture(file, &len);
    if (!buf) return;
    uint32_t nb;
    memcpy(&nb, buf, 4);
    size_t bb = dtype_row_bytes(dt, dtype_block_elems(dt)), n = (size_t)nb * dtype_block_elems(dt);
    CHECK_MSG(len == 4 + nb * bb + n * 4, "%s: %zu bytes", file, len);
    if (len == 4 + nb * bb + n * 4) {
        /* blocks copied out so they are aligned as mmapped tensors are */
        void *blocks = malloc(nb * bb);
        float *want = malloc(n * 4), *got = malloc(n * 4);
        if (!blocks || !want || !got) abort();
        memcpy(blocks, buf + 4, nb * bb);
        memcpy(want, buf + 4 + nb * bb, n * 4);
        CHECK(quant_dequantize_row(got, blocks, dt, (int64_t)n) == 0);
        size_t bad = n, bad_at = n;
        for (size_t i = 0; i < n; i++) {
            if (memcmp(&got[i], &want[i], 4) && bad == n) bad = i;
            float v = quant_value_at(blocks, dt, i);
            if (memcmp(&v, &got[i], 4) && bad_at == n) bad_at = i;
        }
        CHECK_MSG(bad == n, "%s: element %zu is %.9g, gguf says %.9g", file, bad,
                  bad < n ? got[bad] : 0.0, bad < n ? want[bad] : 0.0);
        CHECK_MSG(bad_at == n, "%s: quant_value_at differs from the row at %zu", file, bad_at);
        free(blocks);
        free(want);
        free(got);
    }
    free(buf);
}

static void test_dequant_matches_gguf(void) {
    check_dequant("dequant_q8_0.bin", DTYPE_Q8_0);
    check_dequant("dequant_q4_0.bin", DTYPE_Q4_0);
    check_dequant("dequant_q4_k.bin", DTYPE_Q4_K);
    check_dequant("dequant_q6_k.bin", DTYPE_Q6_K);
    check_dequant("dequant_q5_0.bin", DTYPE_Q5_0);
}

static void test_quantize_matches_gguf(void) {
    size_t len;
    unsigned char *buf = read_fixture("quantize.bin", &len);
    if (!buf) return;
    uint32_t n;
    memcpy(&n, buf, 4);
    size_t b8 = dtype_row_bytes(DTYPE_Q8_0, n), b4 = dtype_row_bytes(DTYPE_Q4_0, n),
           b5 = dtype_row_bytes(DTYPE_Q5_0, n);
    int sized = n % 32 == 0 && len == 4 + (size_t)n * 4 + b8 + b4 + b5;
    CHECK_MSG(sized, "quantize.bin: %zu bytes", len);
    if (sized) {
        float *x = malloc((size_t)n * 4);
        unsigned char *got = malloc(b8);
        if (!x || !got) abort();
        memcpy(x, buf + 4, (size_t)n * 4);
        const unsigned char *want8 = buf + 4 + (size_t)n * 4, *want4 = want8 + b8,
                            *want5 = want4 + b4;
        const struct {
            dtype dt;
            const unsigned char *want;
            size_t bytes;
        } cases[] = {{DTYPE_Q8_0, want8, b8}, {DTYPE_Q4_0, want4, b4}, {DTYPE_Q5_0, want5, b5}};
        for (int c = 0; c < 3; c++) {
            CHECK(quant_quantize_row(got, x, cases[c].dt, n) == 0);
            size_t bad = cases[c].bytes;
            for (size_t i = 0; i < cases[c].bytes && bad == cases[c].bytes; i++)
                if (got[i] != cases[c].want[i]) bad = i;
            size_t bs = dtype_row_bytes(cases[c].dt, 32);
            CHECK_MSG(bad == cases[c].bytes, "%s: byte %zu of block %zu is %02x, gguf says %02x",
                      dtype_name(cases[c].dt), bad % bs, bad / bs,
                      bad < cases[c].bytes ? got[bad] : 0,
                      bad < cases[c].bytes ? cases[c].want[bad] : 0);
        }
        free(x);
        free(got);
    }
    free(buf);
}

/* Q4_K and Q6_K rows against llama.cpp's own quantize_row_q4_K_ref / _q6_K_ref (compiled
 * from its source by tools/quant_fixtures.py --llama-cpp): the same bytes. */
static void test_quantize_k_matches_llama_cpp(void) {
    size_t len;
    unsigned char *buf = read_fixture("quantize_k.bin", &len);
    if (!buf) return;
    uint32_t n;
    memcpy(&n, buf, 4);
    size_t b4 = dtype_row_bytes(DTYPE_Q4_K, n), b6 = dtype_row_bytes(DTYPE_Q6_K, n);
    int ok = n % 256 == 0 && len == 4 + (size_t)n * 4 + b4 + b6;
    CHECK_MSG(ok, "quantize_k.bin: %zu bytes", len);
    if (ok) {
        float *x = malloc((size_t)n * 4);
        unsigned char *got = malloc(b6);
        if (!x || !got) abort();
        memcpy(x, buf + 4, (size_t)n * 4);
        const unsigned char *want4 = buf + 4 + (size_t)n * 4, *want6 = want4 + b4;
        CHECK(quant_quantize_row(got, x, DTYPE_Q4_K, n) == 0);
        size_t bad = b4;
        for (size_t i = 0; i < b4 && bad == b4; i++)
            if (got[i] != want4[i]) bad = i;
        CHECK_MSG(bad == b4, "Q4_K: byte %zu of block %zu differs from llama.cpp's", bad % 144,
                  bad / 144);
        CHECK(quant_quantize_row(got, x, DTYPE_Q6_K, n) == 0);
        bad = b6;
        for (size_t i = 0; i < b6 && bad == b6; i++)
            if (got[i] != want6[i]) bad = i;
        CHECK_MSG(bad == b6, "Q6_K: byte %zu of block %zu differs from llama.cpp's", bad % 210,
                  bad / 210);
        free(x);
        free(got);
    }
    free(buf);
}

/* Rows of blocks of 256 at scales from 1e-4 to 1e3 (one per block, as a weight row has),
 * each sub-block of 16 with its own character: noise, one-signed runs (a min of 0 or a
 * large one), a lone outlier, zeros. */
static void fill_row(float *x, int n) {
    float scale = 1.0f;
    for (int j = 0; j < n; j += 16) {
        if (j % 256 == 0) scale = powf(10.0f, (float)(rng_u32() % 8) - 4.0f);
        int kind = (int)(rng_u32() % 6);
        for (int e = j; e < j + 16; e++) {
            float v = rng_n(scale);
            x[e] = kind == 1 ? fabsf(v) : kind == 2 ? -fabsf(v) - scale : kind == 3 ? 0.0f : v;
        }
        if (kind == 4) x[j + (int)(rng_u32() % 16)] *= 20.0f;
    }
}

/* How far the f16 value v may be from the f32 it was rounded from: half an ulp, which
 * for a subnormal half (a block of values under ~1e-3) is 2^-25 whatever v is. */
static double f16_err(float v) { return fmax(ldexp(fabs((double)v), -11), ldexp(1.0, -25)); }

/* Q4_K: the requantization rounds (x + m)/d_j to the nearest code, d_j = d · sc_j, so an
 * element whose code is neither 0 nor 15 is within half a step (plus float rounding, 1e-5
 * of the values involved). At the ends the grid may fall short of the values: the fit's
 * trial scales put a sub-block's range at 14 to 16 of its steps (about one step clipped at
 * the top); storing the fitted scale as sc_j on d's 6-bit grid moves the top code by up to
 * 15 · d / 2, and d's own f16 rounding by 15 · (sc_j + 1/2) of its error; storing the min
 * on dmin's grid moves the bottom by dmin / 2 and dmin's rounding. */
static void test_q4_k_quantize_bounds(void) {
    enum { N = 256 * 64 };
    float *x = malloc(N * 4), *y = malloc(N * 4);
    quant_block_q4_k *q = malloc(sizeof *q * (N / 256));
    if (!x || !y || !q) abort();
    fill_row(x, N);
    CHECK(quant_quantize_row(q, x, DTYPE_Q4_K, N) == 0);
    CHECK(quant_dequantize_row(y, q, DTYPE_Q4_K, N) == 0);
    int bad_in = 0, bad_all = 0;
    double worst = 0;
    for (int b = 0; b < N / 256; b++) {
        uint8_t sc[8], m[8];
        quant_q4_k_scales(q[b].scales, sc, m);
        float d = dtype_f16_to_f32(q[b].d), dmin = dtype_f16_to_f32(q[b].dmin);
        for (int e = 0; e < 256; e++) {
            int i = 256 * b + e, j = e / 32,
                code = (q[b].qs[32 * (e / 64) + e % 32] >> (4 * (j & 1))) & 15;
            double step = (double)d * sc[j], err = fabs((double)x[i] - y[i]);
            double slack = 1e-5 * (fabs(x[i]) + (double)dmin * m[j] + step * 15);
            if (code > 0 && code < 15 && err > 0.5 * step + slack) bad_in++;
            double clip = step + 7.5 * d + 15 * f16_err(d) * (sc[j] + 0.5) + 0.5 * dmin +
                          f16_err(dmin) * (m[j] + 0.5);
            if (err > clip + slack) bad_all++;
            if (step > 0 && err / step > worst) worst = err / step;
        }
    }
    CHECK_MSG(bad_in == 0, "Q4_K: %d inner codes further than half a step", bad_in);
    CHECK_MSG(bad_all == 0, "Q4_K: %d elements past the clipping bound (worst %.3g steps)", bad_all,
              worst);
    free(x);
    free(y);
    free(q);
}

/* Q6_K: a code q - 32 in (-32, 31) is x / d_j rounded to nearest, d_j = d · scales[j]. The
 * fit maps the largest magnitude to -32 ± 0.9 (its trial scales span nmax ± 0.9), so a
 * value of the other sign may clip at 31 by up to 1.9 steps; storing the fitted scale on
 * d's 8-bit grid moves the end codes by up to 32.9 · d / 2, and d's f16 rounding by
 * 32.9 · (|scales[j]| + 1/2) of its error. */
static void test_q6_k_quantize_bounds(void) {
    enum { N = 256 * 64 };
    float *x = malloc(N * 4), *y = malloc(N * 4);
    quant_block_q6_k *q = malloc(sizeof *q * (N / 256));
    if (!x || !y || !q) abort();
    fill_row(x, N);
    CHECK(quant_quantize_row(q, x, DTYPE_Q6_K, N) == 0);
    CHECK(quant_dequantize_row(y, q, DTYPE_Q6_K, N) == 0);
    int bad_in = 0, bad_all = 0;
    for (int b = 0; b < N / 256; b++) {
        float d = dtype_f16_to_f32(q[b].d);
        for (int e = 0; e < 256; e++) {
            int i = 256 * b + e, code = quant_q6_k_q(&q[b], e) - 32;
            double step = fabs((double)d * q[b].scales[e / 16]), err = fabs((double)x[i] - y[i]);
            double slack = 1e-5 * (fabs(x[i]) + 32 * step);
            if (code > -32 && code < 31 && err > 0.5 * step + slack) bad_in++;
            double dd = f16_err(d), dj = fabs((double)q[b].scales[e / 16]) + 0.5;
            if (err > 1.9 * step + 16.45 * fabs(d) + 32.9 * dd * dj + slack) bad_all++;
        }
    }
    CHECK_MSG(bad_in == 0, "Q6_K: %d inner codes further than half a step", bad_in);
    CHECK_MSG(bad_all == 0, "Q6_K: %d elements past the clipping bound", bad_all);
    free(x);
    free(y);
    free(q);
}

/* All-zero input gives zero blocks that dequantize to zeros (the quantizers' early outs). */
static void test_zero_rows(void) {
    static const dtype dts[] = {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q5_0, DTYPE_Q4_K, DTYPE_Q6_K};
    float x[256] = {0}, y[256];
    unsigned char q[8 * sizeof(quant_block_q8_0)]; /* the largest of the rows */
    for (int t = 0; t < 5; t++) {
        memset(y, 0xff, sizeof y);
        CHECK(quant_quantize_row(q, x, dts[t], 256) == 0);
        CHECK(quant_dequantize_row(y, q, dts[t], 256) == 0);
        int nonzero = 0;
        for (int i = 0; i < 256; i++) nonzero += y[i] != 0.0f;
        CHECK_MSG(nonzero == 0, "%s: zeros came back as %d non-zeros", dtype_name(dts[t]), nonzero);
    }
}

int main(void) {
    RUN(test_dtype_table);
    RUN(test_dequant_matches_gguf);
    RUN(test_quantize_matches_gguf);
    RUN(test_quantize_k_matches_llama_cpp);
    RUN(test_q4_k_quantize_bounds);
    RUN(test_q6_k_quantize_bounds);
    RUN(test_zero_rows);
    TEST_DONE();
}
