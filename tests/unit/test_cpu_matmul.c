/* test_cpu_matmul.c - what the matmul promises beyond its values (those are checked
 * against a double reference in test_cpu_ops.c):
 *
 * - for BF16 weights every ISA rounds x to bf16 exactly as cpu_pack_bf16_one does
 *   (nearest even, NaN kept, subnormals to zero), so the ISAs start from the same bits;
 * - batch invariance, for every weight dtype: a row's output is bit-identical whether it
 *   is computed alone or among other rows (decode batches of 2-8, prefill blocks, m past
 *   the packing scratch) and whatever the thread count, on every ISA. This is what lets
 *   the server promise that a request's greedy output does not depend on what else is
 *   running. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_internal.h"
#include "tests/cpu_test_util.h"
#include "tests/test.h"

static float f32_of_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Inputs that probe the rounding: ties (low half exactly 0x8000) both ways, values one
 * ulp either side, subnormals, zeros of both signs, infinities, NaNs, the largest finite
 * values (which round up to infinity) and ordinary random values. */
static float pack_probe(uint32_t i) {
    static const uint32_t special[] = {
        0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00400000u, 0x7f800000u,
        0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7f7fffffu, 0x7f7f8000u,
        0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x00800000u, 0x80800000u};
    uint32_t n_special = sizeof special / sizeof *special;
    if (i < n_special) return f32_of_bits(special[i]);
    uint32_t r = rng_u32();
    switch (i % 4) {
    case 0: return f32_of_bits((r & 0xffff0000u) | 0x8000u); /* a tie */
    case 1: return f32_of_bits(r);                           /* any bits */
    case 2: return f32_of_bits(r & 0x807fffffu);             /* subnormal */
    default: return rng_f() * 100.0f;
    }
}

static void test_pack_bits(void) {
    enum { N = 4099 };
    float *x = fvec(N);
    uint16_t *got = calloc(N, 2), *want = calloc(N, 2);
    for (uint32_t i = 0; i < N; i++) x[i] = pack_probe(i);
    for (int i = 0; i < N; i++) want[i] = cpu_pack_bf16_one(x[i]);
    /* The scalar rule itself, on cases worked out by hand. */
    CHECK_EQ_INT(cpu_pack_bf16_one(f32_of_bits(0x3f808000u)), 0x3f80); /* tie to even: down */
    CHECK_EQ_INT(cpu_pack_bf16_one(f32_of_bits(0x3f818000u)), 0x3f82); /* tie to even: up */
    CHECK_EQ_INT(cpu_pack_bf16_one(f32_of_bits(0x3f808001u)), 0x3f81);
    CHECK_EQ_INT(cpu_pack_bf16_one(f32_of_bits(0x807fffffu)), 0x8000);       /* subnormal: -0 */
    CHECK_EQ_INT(cpu_pack_bf16_one(f32_of_bits(0x7f7fffffu)), 0x7f80);       /* rounds to inf */
    CHECK((cpu_pack_bf16_one(f32_of_bits(0x7f800001u)) & 0x7fc0) == 0x7fc0); /* quiet NaN */
    for (int bi = 0; bi < n_be; bi++) {
        const cpu_kernels *k = cpu_impl_of(be[bi])->k;
        /* every length up to 40 (all tails), then the whole run */
        for (int n = 0; n <= 40; n++) {
            memset(got, 0xa5, N * 2);
            k->pack_bf16(got, x + 7, n);
            CHECK_MSG(memcmp(got, want + 7, (size_t)n * 2) == 0, "%s: pack n=%d differs",
                      be_name[bi], n);
            CHECK_MSG(n == N || got[n] == 0xa5a5, "%s: pack n=%d wrote past the end", be_name[bi],
                      n);
        }
        k->pack_bf16(got, x, N);
        for (int i = 0; i < N; i++)
            if (got[i] != want[i]) {
                CHECK_MSG(0, "%s: pack of %08x gave %04x, want %04x", be_name[bi],
                          (unsigned)(*(uint32_t *)&x[i]), got[i], want[i]);
                break;
            }
    }
    free(x);
    free(got);
    free(want);
}

static bk_weight rand_weight(int n, int k, dtype dt) {
    size_t cnt = (size_t)n * k;
    void *d = malloc(cnt * (dt == DTYPE_F32 ? 4 : 2));
    if (!d) abort();
    for (size_t i = 0; i < cnt; i++) {
        float v = rng_f();
        if (dt == DTYPE_F32) ((float *)d)[i] = v;
        else ((uint16_t *)d)[i] = dt == DTYPE_BF16 ? dtype_f32_to_bf16(v) : dtype_f32_to_f16(v);
    }
    return (bk_weight){.data = d, .dt = dt, .ndim = 2, .shape = {n, k}};
}

/* Row r of out_all (computed with m rows) must equal out_one (row r alone), bit for bit. */
static void check_rows_alone(backend *b, const char *name, const float *x, const bk_weight *w,
                             int m) {
    int n = (int)w->shape[0], k = (int)w->shape[1];
    float *all = fvec((size_t)m * n), *one = fvec((size_t)n);
    b->ops->matmul(b, all, x, w, m);
    int bad = 0;
    for (int r = 0; r < m && !bad; r++) {
        b->ops->matmul(b, one, x + (size_t)r * k, w, 1);
        if (memcmp(one, all + (size_t)r * n, (size_t)n * sizeof(float))) bad = r + 1;
    }
    CHECK_MSG(!bad, "%s: row %d of m=%d (n=%d k=%d %s) differs from the row alone", name, bad - 1,
              m, n, k, dtype_name(w->dt));
    free(all);
    free(one);
}

static void test_batch_invariance(void) {
    backend *one_thread = NULL;
    strata_err err = {0};
    if (cpu_backend_create_isa(1, cpu_backend_isa(be[n_be - 1]), &one_thread, &err)) {
        CHECK_MSG(0, "create: %s", err.msg);
        return;
    }
    /* k: multiples of 64, of 32 only, tails of 1..63, and wide rows; m: decode batches,
     * a batch whose x overflows the L1 budget (the tile path), prefill blocks. */
    static const int shapes[][3] = {{8, 70, 1024},
                                    {8, 37, 3136},
                                    {5, 19, 1000},
                                    {3, 33, 33},
                                    {7, 29, 95},
                                    {16, 10, 12544},
                                    {37, 67, 130},
                                    {261, 7, 515},
                                    {2, 3, 1},
                                    /* either side of the stream's budget (x and one W row
                                     * in L1) for a 48 KiB L1 and for a 32 KiB one */
                                    {8, 13, 2720},
                                    {8, 13, 2752},
                                    {8, 13, 1792},
                                    {8, 13, 1856},
                                    /* task ranges long enough for AVX2's decode to take a
                                     * tile's W rows from four streams, the last range with
                                     * rows left over */
                                    {5, 1001, 64},
                                    /* wide-k decode batches: 13 rows as an 8-row tile,
                                     * then 4 and 1; 6 as 4 and 2; W rows not a
                                     * multiple of the tile's 4 */
                                    {13, 41, 3136},
                                    {6, 38, 3136},
                                    /* prefill tiles at wide k with a tail, and a row block
                                     * of 92 */
                                    {40, 11, 6177},
                                    {100, 7, 2112},
                                    /* rows a multiple of 4 KiB long, whose packed x
                                     * rows are padded a line apart; prefill tile rows
                                     * pulling the next one's W (13 = 6 + 6 + 1) */
                                    {44, 13, 2048},
                                    {9, 5, 4096},
                                    /* AVX2: a batch of 20 rows under 4 KiB spreads its W
                                     * rows over four streams and prefetches the next ones */
                                    {20, 203, 1000}};
    static const dtype dts[] = {DTYPE_BF16, DTYPE_F32, DTYPE_F16};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes * 3; si++) {
        int m = shapes[si / 3][0], n = shapes[si / 3][1], k = shapes[si / 3][2];
        float *x = frand((size_t)m * k);
        bk_weight w = rand_weight(n, k, dts[si % 3]);
        float *out = fvec((size_t)m * n);
        for (int bi = 0; bi < n_be; bi++) {
            check_rows_alone(be[bi], be_name[bi], x, &w, m);
        }
        /* the best ISA on one thread (no split of n or m) against three: same bits */
        float *o2 = fvec((size_t)m * n);
        be[n_be - 1]->ops->matmul(be[n_be - 1], out, x, &w, m);
        one_thread->ops->matmul(one_thread, o2, x, &w, m);
        CHECK_MSG(!memcmp(out, o2, (size_t)m * n * 4), "%s vs 1 thread: m=%d n=%d k=%d %s differ",
                  be_name[n_be - 1], m, n, k, dtype_name(w.dt));
        free(o2);
        free((void *)w.data);
        free(out);
        free(x);
    }
    backend_destroy(one_thread);
}

/* m beyond the packing scratch runs in row blocks: still the rows' own values. */
static void test_past_scratch(void) {
    int k = 12544, n = 5;
    int m = (int)(CPU_XB_BYTES / ((size_t)cpu_matmul_bf16_ldx(k) * 2)) + 3;
    float *x = frand((size_t)m * k);
    bk_weight w = rand_weight(n, k, DTYPE_BF16);
    check_rows_alone(be[n_be - 1], be_name[n_be - 1], x, &w, m);
    free((void *)w.data);
    free(x);
}

/* matmul_n is its matmuls, bit for bit, on every backend. */
static void test_matmul_n(void) {
    static const int ns[] = {70, 3, 1024, 16};
    /* decode (one pool run over the four weights' rows, split across their boundaries),
     * prefill tiles and row blocks, and a weight list that must fall back to one matmul
     * each (an F16 weight beside BF16 ones) */
    static const int ms[] = {3, 41};
    for (int mi = 0; mi < 2; mi++)
        for (int di = 0; di < 3; di++) {
            int m = ms[mi], k = 520;
            float *x = frand((size_t)m * k);
            bk_weight w[4];
            const bk_weight *wp[4];
            float *out[4], *ref[4];
            for (int j = 0; j < 4; j++) {
                dtype dt = di == 1 ? DTYPE_F32 : di == 2 && j == 1 ? DTYPE_F16 : DTYPE_BF16;
                w[j] = rand_weight(ns[j], k, dt);
                wp[j] = &w[j];
                out[j] = fvec((size_t)m * ns[j]);
                ref[j] = fvec((size_t)m * ns[j]);
            }
            for (int bi = 0; bi < n_be; bi++) {
                be[bi]->ops->matmul_n(be[bi], out, x, wp, 4, m);
                for (int j = 0; j < 4; j++) {
                    be[bi]->ops->matmul(be[bi], ref[j], x, wp[j], m);
                    CHECK_SAME(out[j], ref[j], (size_t)m * ns[j], "matmul_n weight %d %s m=%d", j,
                               dtype_name(w[j].dt), m);
                }
            }
            for (int j = 0; j < 4; j++) free((void *)w[j].data), free(out[j]), free(ref[j]);
            free(x);
        }
}

int main(void) {
    if (cpu_test_backends_open()) return 1;
    RUN(test_matmul_n);
    RUN(test_pack_bits);
    RUN(test_batch_invariance);
    RUN(test_past_scratch);
    cpu_test_backends_close();
    TEST_DONE();
}
