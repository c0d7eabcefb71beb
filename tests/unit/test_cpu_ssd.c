/* test_cpu_ssd.c - the CPU backend's Nemotron-H ops (kernels/cpu/cpu_ssd.c, cpu_ssd_avx2.c,
 * cpu_ssd_avx512.c, cpu_mamba.c) on every ISA this machine runs, against double-precision
 * references written here from kernels/backend.h and shared/spec/nemotron_h.md §6:
 * the SSD scan (with a cached initial state, several sequences in their own slots, strided
 * rows, the Δ floor on and off), the gate-first grouped RMSNorm and relu².
 *
 * Beyond matching the references, the identities the engine relies on are checked bit for
 * bit on each backend: a sequence scanned in one call equals it in odd pieces and one
 * token at a time, and batched with other sequences equals it alone (design.md, Caches). */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_mamba.h"
#include "tests/cpu_test_util.h"
#include "tests/test.h"

/* A weight of n values stored as dt; vals is rounded in place to what the op reads. */
static bk_weight make_weight(float *vals, size_t n, dtype dt, void **store) {
    bk_weight w = {.dt = dt, .ndim = 1, .shape = {(int64_t)n}};
    if (dt == DTYPE_BF16) {
        uint16_t *h = malloc(n * 2);
        for (size_t i = 0; i < n; i++) {
            h[i] = dtype_f32_to_bf16(vals[i]);
            vals[i] = dtype_bf16_to_f32(h[i]);
        }
        *store = h;
    } else {
        float *f = malloc(n * 4);
        memcpy(f, vals, n * 4);
        *store = f;
    }
    w.data = *store;
    return w;
}

/* Largest |a - b| relative to the largest |b| (outputs and states live on one scale). */
static double rel_diff(const float *a, const double *b, size_t n, size_t *at) {
    double m = 0, scale = 1e-30;
    *at = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(b[i]) > scale) scale = fabs(b[i]);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > m || d != d) {
            m = d != d ? INFINITY : d;
            *at = i;
        }
    }
    return m / scale;
}

#define CHECK_REL(got, want, n, tol, what, ...)                                                    \
    do {                                                                                           \
        size_t at_;                                                                                \
        double rd_ = rel_diff((got), (want), (n), &at_);                                           \
        CHECK_MSG(rd_ <= (tol),                                                                    \
                  "%s " what ": rel diff %.3g at %zu (got %.9g want %.9g, tol %.3g)", bname,       \
                  __VA_ARGS__, rd_, at_, (double)(got)[at_], (want)[at_], (double)(tol));          \
    } while (0)

/* ---- SSD ---- */

/* One scenario: H heads of P in G groups of state N, sequences in slots. Every token row of
 * `in` is [x (H·P) | B (G·N) | C (G·N) | dt (H) | pad], ld floats wide: the op reads all four
 * through strides, as the model does from in_proj and the conv. */
typedef struct {
    int H, P, N, G, n_seqs, slots, ld;
    int len[3], slot[3];
    float dt_min;
    float *in;               /* [m, ld] */
    float *alog, *dtb, *dsk; /* [H], rounded to what the weights hold */
    bk_weight A_log, dt_bias, D;
    void *st_a, *st_b, *st_d;
    float *S0; /* [slots, H, P, N] initial states */
} ssd_case;

static void ssd_case_init(ssd_case *c) {
    int m = 0;
    for (int s = 0; s < c->n_seqs; s++) m += c->len[s];
    c->ld = c->H * c->P + 2 * c->G * c->N + c->H + 3;
    c->in = fvec((size_t)m * c->ld);
    for (size_t i = 0; i < (size_t)m * c->ld; i++) c->in[i] = rng_f();
    c->alog = fvec((size_t)c->H);
    c->dtb = fvec((size_t)c->H);
    c->dsk = fvec((size_t)c->H);
    for (int h = 0; h < c->H; h++) {
        c->alog[h] = logf(0.5f + 7.5f * (rng_f() + 1.0f) / 2.0f); /* A in [-8, -0.5] */
        /* dt_bias spans softplus 6e-6 (under the 1e-3 floor) .. 2.1 (fast decay) */
        c->dtb[h] = h % 3 == 0 ? -12.0f + rng_f() : 2.0f * rng_f();
        c->dsk[h] = 1.0f + 0.5f * rng_f();
    }
    c->A_log = make_weight(c->alog, (size_t)c->H, DTYPE_BF16, &c->st_a);
    c->dt_bias = make_weight(c->dtb, (size_t)c->H, DTYPE_F32, &c->st_b);
    c->D = make_weight(c->dsk, (size_t)c->H, DTYPE_BF16, &c->st_d);
    size_t ss = (size_t)c->slots * c->H * c->P * c->N;
    c->S0 = fvec(ss);
    for (size_t i = 0; i < ss; i++) c->S0[i] = 0.5f * rng_f();
}

static void ssd_case_free(ssd_case *c) {
    free(c->in);
    free(c->alog);
    free(c->dtb);
    free(c->dsk);
    free(c->st_a);
    free(c->st_b);
    free(c->st_d);
    free(c->S0);
}

/* The recurrence of backend.h in double: y [m, H, P], S [slots, H, P, N] updated. */
static void ssd_dref(const ssd_case *c, double *y, double *S) {
    int HP = c->H * c->P, GN = c->G * c->N, t0 = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        for (int h = 0; h < c->H; h++) {
            int g = h / (c->H / c->G);
            double A = -exp((double)c->alog[h]);
            double *Sh = S + ((size_t)c->slot[s] * c->H + h) * c->P * c->N;
            for (int t = t0; t < t0 + c->len[s]; t++) {
                const float *row = c->in + (size_t)t * c->ld;
                const float *x = row + h * c->P, *B = row + HP + g * c->N,
                            *C = row + HP + GN + g * c->N;
                double v = (double)row[HP + 2 * GN + h] + c->dtb[h];
                double d = v > 20 ? v : log1p(exp(v));
                if (c->dt_min > 0 && d < c->dt_min) d = c->dt_min;
                double a = exp(d * A);
                for (int p = 0; p < c->P; p++) {
                    double acc = 0;
                    for (int n = 0; n < c->N; n++) {
                        double *e = Sh + (size_t)p * c->N + n;
                        *e = a * *e + d * x[p] * B[n];
                        acc += *e * C[n];
                    }
                    y[((size_t)t * c->H + h) * c->P + p] = acc + c->dsk[h] * x[p];
                }
            }
        }
        t0 += c->len[s];
    }
}

typedef void (*ssd_fn)(backend *b, float *y, const float *x, int ld_x, const float *B,
                       const float *C, int ld_bc, const float *dt, int ld_dt,
                       const bk_weight *A_log, const bk_weight *dt_bias, const bk_weight *D,
                       float *state, const bk_batch *bt, int H, int P, int N, int G, float dt_min);

static void ssd_ref_entry(backend *b, float *y, const float *x, int ld_x, const float *B,
                          const float *C, int ld_bc, const float *dt, int ld_dt,
                          const bk_weight *A_log, const bk_weight *dt_bias, const bk_weight *D,
                          float *state, const bk_batch *bt, int H, int P, int N, int G,
                          float dt_min) {
    (void)b;
    cpu_ssd_ref(y, x, ld_x, B, C, ld_bc, dt, ld_dt, A_log, dt_bias, D, state, bt, H, P, N, G,
                dt_min);
}

/* Runs sequences [s0, s1) of the case (token rows from row0) through fn on state S. */
static void ssd_run(const ssd_case *c, ssd_fn fn, backend *b, int s0, int s1, const int *len,
                    int row0, float *y, float *S) {
    tbatch tb;
    static const int zero_pos[8] = {0};
    make_batch(&tb, s1 - s0, len + s0, zero_pos, c->slot + s0);
    int HP = c->H * c->P, GN = c->G * c->N;
    const float *in = c->in + (size_t)row0 * c->ld;
    fn(b, y, in, c->ld, in + HP, in + HP + GN, c->ld, in + HP + 2 * GN, c->ld, &c->A_log,
       &c->dt_bias, &c->D, S, &tb.b, c->H, c->P, c->N, c->G, c->dt_min);
}

/* f32 against double: each state element is a decayed sum of up to 13 rank-1 terms and
 * y a dot product of N <= 129 of them, so the f32 error is a few ulp of the largest
 * term times sqrt(N)·T, ~1e-6 of the output scale; 2e-5 also covers the FMA variants. */
#define SSD_TOL 2e-5

static void test_ssd(void) {
    static const int dims[][4] = {/* H, P, N, G */
                                  {6, 3, 4, 2},  {4, 17, 33, 4},  {3, 5, 16, 1},
                                  {2, 1, 1, 1},  {8, 16, 129, 2}, {12, 7, 31, 3},
                                  {4, 8, 15, 2}, {2, 80, 128, 1}, {3, 7, 128, 1}};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (int fl = 0; fl < 2; fl++) {
            ssd_case c = {.H = dims[di][0],
                          .P = dims[di][1],
                          .N = dims[di][2],
                          .G = dims[di][3],
                          .n_seqs = 3,
                          .slots = 3,
                          .len = {5, 1, 13},
                          .slot = {2, 0, 1},
                          .dt_min = fl ? 1e-3f : 0.0f};
            ssd_case_init(&c);
            int m = 19, HP = c.H * c.P;
            size_t ss = (size_t)c.slots * HP * c.N;
            double *yw = dvec((size_t)m * HP), *Sw = dvec(ss);
            for (size_t i = 0; i < ss; i++) Sw[i] = c.S0[i];
            ssd_dref(&c, yw, Sw);
            float *y = fvec((size_t)m * HP), *S = fvec(ss);
            const char *bname = "reference";
            memcpy(S, c.S0, ss * 4);
            ssd_run(&c, ssd_ref_entry, NULL, 0, 3, c.len, 0, y, S);
            CHECK_REL(y, yw, (size_t)m * HP, SSD_TOL, "ssd y dims %zu floor %d", di, fl);
            CHECK_REL(S, Sw, ss, SSD_TOL, "ssd state dims %zu floor %d", di, fl);
            for (int bi = 0; bi < n_be; bi++) {
                bname = be_name[bi];
                memcpy(S, c.S0, ss * 4);
                memset(y, 0, (size_t)m * HP * 4);
                ssd_run(&c, be[bi]->ops->ssd, be[bi], 0, 3, c.len, 0, y, S);
                CHECK_REL(y, yw, (size_t)m * HP, SSD_TOL, "ssd y dims %zu floor %d", di, fl);
                CHECK_REL(S, Sw, ss, SSD_TOL, "ssd state dims %zu floor %d", di, fl);
            }
            free(y);
            free(S);
            free(yw);
            free(Sw);
            ssd_case_free(&c);
        }
}

/* The ssd op with every run in the chunked form (cpu_ssd_chunk.c), and with none. */
static void ssd_chunked_entry(backend *b, float *y, const float *x, int ld_x, const float *B,
                              const float *C, int ld_bc, const float *dt, int ld_dt,
                              const bk_weight *A_log, const bk_weight *dt_bias, const bk_weight *D,
                              float *state, const bk_batch *bt, int H, int P, int N, int G,
                              float dt_min) {
    cpu_ssd_run(b, y, x, ld_x, B, C, ld_bc, dt, ld_dt, A_log, dt_bias, D, state, bt, H, P, N, G,
                dt_min, 1);
}
static void ssd_recurrent_entry(backend *b, float *y, const float *x, int ld_x, const float *B,
                                const float *C, int ld_bc, const float *dt, int ld_dt,
                                const bk_weight *A_log, const bk_weight *dt_bias,
                                const bk_weight *D, float *state, const bk_batch *bt, int H, int P,
                                int N, int G, float dt_min) {
    cpu_ssd_run(b, y, x, ld_x, B, C, ld_bc, dt, ld_dt, A_log, dt_bias, D, state, bt, H, P, N, G,
                dt_min, INT_MAX);
}

/* The chunked form against the double recurrence and the f32 one: runs shorter than, equal
 * to and several times the chunk (CPU_SSD_CHUNK), three sequences of unequal length in
 * one step from carried states, n_groups 1 to 4, the floor on and off, sizes that need
 * padding and the 4B's head (P 80, N 128). The cases' decay spans e^{-24} per token to ~1
 * (Δ 6e-6); a second pass adds 8 to every dt_bias (Δ ~ 8-11, e^{ℓ} under e^{-4}), so a
 * chunk's cumulative log decay passes -600 and each decay factor takes its own exp.
 * Tolerance: SSD_TOL. Each entry of a chunk's products sums at most 32 + N <= 161 terms,
 * each rounded once (a decay factor is one exp of a double difference), against the
 * recurrence's N-term dot products and T decays, so the same few-ulp-times-sqrt argument
 * holds; measured under 1e-6 of the output scale. */
static void test_ssd_chunked(void) {
    static const int dims[][4] = {/* H, P, N, G */
                                  {6, 3, 4, 2},
                                  {4, 17, 33, 4},
                                  {12, 7, 31, 3},
                                  {2, 80, 128, 1}};
    static const int lens[][3] = {{4 * CPU_SSD_CHUNK + 22, CPU_SSD_CHUNK, 7},
                                  {1, CPU_SSD_CHUNK - 1, CPU_SSD_CHUNK + 1}};
    for (size_t di = 0; di < sizeof dims / sizeof dims[0] * 2; di++)
        for (int li = 0; li < 2; li++)
            for (int fl = 0; fl < 2; fl++) {
                int fast = di >= sizeof dims / sizeof dims[0];
                ssd_case c = {.H = dims[di % (sizeof dims / sizeof dims[0])][0],
                              .P = dims[di % (sizeof dims / sizeof dims[0])][1],
                              .N = dims[di % (sizeof dims / sizeof dims[0])][2],
                              .G = dims[di % (sizeof dims / sizeof dims[0])][3],
                              .n_seqs = 3,
                              .slots = 3,
                              .len = {lens[li][0], lens[li][1], lens[li][2]},
                              .slot = {1, 2, 0},
                              .dt_min = fl ? 1e-3f : 0.0f};
                ssd_case_init(&c);
                if (fast) {
                    for (int h = 0; h < c.H; h++) c.dtb[h] += 8.0f;
                    free(c.st_b);
                    c.dt_bias = make_weight(c.dtb, (size_t)c.H, DTYPE_F32, &c.st_b);
                }
                int m = c.len[0] + c.len[1] + c.len[2], HP = c.H * c.P;
                size_t ss = (size_t)c.slots * HP * c.N;
                double *yw = dvec((size_t)m * HP), *Sw = dvec(ss);
                for (size_t i = 0; i < ss; i++) Sw[i] = c.S0[i];
                ssd_dref(&c, yw, Sw);
                float *y = fvec((size_t)m * HP), *S = fvec(ss);
                for (int bi = 0; bi < n_be; bi++)
                    for (int form = 0; form < 2; form++) {
                        const char *bname = be_name[bi];
                        memcpy(S, c.S0, ss * 4);
                        memset(y, 0, (size_t)m * HP * 4);
                        ssd_run(&c, form ? ssd_chunked_entry : ssd_recurrent_entry, be[bi], 0, 3,
                                c.len, 0, y, S);
                        CHECK_REL(y, yw, (size_t)m * HP, SSD_TOL,
                                  "y dims %zu lens %d floor %d form %d", di, li, fl, form);
                        CHECK_REL(S, Sw, ss, SSD_TOL, "state dims %zu lens %d floor %d form %d", di,
                                  li, fl, form);
                    }
                free(y);
                free(S);
                free(yw);
                free(Sw);
                ssd_case_free(&c);
            }
}

/* One call == odd pieces == token by token == batched with other sequences, bit for bit:
 * every token runs the same step on the same state, whatever the step's shape. N = 128
 * with an odd P and runs of several 16-token spans takes AVX-512's register-resident
 * span (cpu_ssd_avx512_span, two rows at a time and a last single row). */
static void test_ssd_pieces_case(int H, int P, int N, int len0) {
    ssd_case c = {.H = H,
                  .P = P,
                  .N = N,
                  .G = 2,
                  .n_seqs = 3,
                  .slots = 3,
                  .len = {len0, 4, 9},
                  .slot = {1, 2, 0},
                  .dt_min = 0.0f};
    ssd_case_init(&c);
    int T = c.len[0], HP = c.H * c.P;
    size_t ss = (size_t)c.slots * HP * c.N;
    for (int bi = 0; bi < n_be; bi++) {
        float *y1 = fvec((size_t)(T + 13) * HP), *y2 = fvec((size_t)T * HP),
              *y3 = fvec((size_t)T * HP);
        float *S1 = fvec(ss), *S2 = fvec(ss), *S3 = fvec(ss);
        memcpy(S1, c.S0, ss * 4);
        memcpy(S2, c.S0, ss * 4);
        memcpy(S3, c.S0, ss * 4);
        ssd_run(&c, be[bi]->ops->ssd, be[bi], 0, 3, c.len, 0, y1, S1); /* batched, one call */
        static const int odd[] = {3, 1, 7, 2, 10};
        for (int pos = 0, k = 0; pos < T; k++) {
            int l = odd[k % 5] < T - pos ? odd[k % 5] : T - pos;
            ssd_run(&c, be[bi]->ops->ssd, be[bi], 0, 1, &l, pos, y2 + (size_t)pos * HP, S2);
            int one = 1;
            for (int i = 0; i < l; i++) /* the same tokens one at a time, on S3 */
                ssd_run(&c, be[bi]->ops->ssd, be[bi], 0, 1, &one, pos + i,
                        y3 + (size_t)(pos + i) * HP, S3);
            pos += l;
        }
        size_t s0 = (size_t)c.slot[0] * HP * c.N, sn = (size_t)HP * c.N;
        CHECK_MSG(!memcmp(y1, y2, (size_t)T * HP * 4) && !memcmp(S1 + s0, S2 + s0, sn * 4),
                  "%s: ssd in odd pieces differs from batched in one call", be_name[bi]);
        CHECK_MSG(!memcmp(y2, y3, (size_t)T * HP * 4) && !memcmp(S2 + s0, S3 + s0, sn * 4),
                  "%s: ssd token by token differs from odd pieces", be_name[bi]);
        free(y1);
        free(y2);
        free(y3);
        free(S1);
        free(S2);
        free(S3);
    }
    ssd_case_free(&c);
}

static void test_ssd_pieces(void) {
    test_ssd_pieces_case(6, 12, 16, 23);
    test_ssd_pieces_case(4, 5, 128, 41);
}

/* AVX-512's span (the state's rows in registers through a run of tokens) against its own
 * token step called once a token, bit for bit, with strided rows, an odd P (the last
 * single row) and decays from 0 to 1. */
static void test_ssd_span(void) {
    if (!cpu_backend_isa_supported(CPU_ISA_AVX512)) return;
    enum { P = 7, N = 128, T = 21, LDX = 11, LDBC = 3 * N + 5, LDY = 9 };
    float *S0 = frand((size_t)P * N), *S1 = fvec((size_t)P * N), *S2 = fvec((size_t)P * N);
    float *x = frand((size_t)T * LDX), *bc = frand((size_t)T * LDBC);
    float *y1 = fvec((size_t)T * LDY), *y2 = fvec((size_t)T * LDY);
    float decay[T], delta[T];
    for (int t = 0; t < T; t++) {
        delta[t] = 0.05f + 0.5f * (rng_f() + 1.0f);
        decay[t] = t % 5 == 0 ? 0.0f : t % 7 == 0 ? 1.0f : expf(-delta[t] * 2.0f);
    }
    memcpy(S1, S0, sizeof(float) * P * N);
    memcpy(S2, S0, sizeof(float) * P * N);
    const float *B = bc + 3, *C = bc + 3 + N + 1;
    CHECK(cpu_ssd_avx512_span(S1, y1, LDY, x, LDX, B, C, LDBC, decay, delta, 1.25f, P, N, T));
    for (int t = 0; t < T; t++)
        cpu_ssd_avx512_token(S2, y2 + (size_t)t * LDY, x + (size_t)t * LDX, B + (size_t)t * LDBC,
                             C + (size_t)t * LDBC, decay[t], delta[t], 1.25f, P, N);
    CHECK_MSG(!memcmp(S1, S2, sizeof(float) * P * N), "span state differs from token steps");
    int same = 1;
    for (int t = 0; t < T; t++) same &= !memcmp(y1 + (size_t)t * LDY, y2 + (size_t)t * LDY, 4 * P);
    CHECK_MSG(same, "span outputs differ from token steps");
    CHECK(!cpu_ssd_avx512_span(S1, y1, LDY, x, LDX, B, C, LDBC, decay, delta, 1.0f, P, 64, T));
    free(S0);
    free(S1);
    free(S2);
    free(x);
    free(bc);
    free(y1);
    free(y2);
}

/* The floor changes exactly the tokens whose Δ is under it: heads with softplus(dt_bias)
 * ~6e-6 change, a case whose every Δ is above 1e-3 does not move at all. */
static void test_ssd_floor(void) {
    ssd_case c = {.H = 3, .P = 4, .N = 8, .G = 1, .n_seqs = 1, .slots = 1, .len = {6}, .slot = {0}};
    ssd_case_init(&c);
    int HP = c.H * c.P, m = c.len[0];
    size_t ss = (size_t)HP * c.N;
    for (int bi = 0; bi < n_be; bi++) {
        float *y0 = fvec((size_t)m * HP), *y1 = fvec((size_t)m * HP), *S = fvec(ss);
        c.dt_min = 0.0f;
        memcpy(S, c.S0, ss * 4);
        ssd_run(&c, be[bi]->ops->ssd, be[bi], 0, 1, c.len, 0, y0, S);
        c.dt_min = 1e-3f;
        memcpy(S, c.S0, ss * 4);
        ssd_run(&c, be[bi]->ops->ssd, be[bi], 0, 1, c.len, 0, y1, S);
        int head0_moved = 0, others_same = 1;
        for (int t = 0; t < m; t++)
            for (int h = 0; h < c.H; h++)
                for (int p = 0; p < c.P; p++) {
                    size_t i = ((size_t)t * c.H + h) * c.P + p;
                    if (h == 0) head0_moved |= y0[i] != y1[i]; /* dt_bias ~ -12: floored */
                    else if (c.dtb[h] > -6.0f) others_same &= y0[i] == y1[i];
                }
        CHECK_MSG(head0_moved && others_same, "%s: floor moved head 0 %d, left the rest %d",
                  be_name[bi], head0_moved, others_same);
        free(y0);
        free(y1);
        free(S);
    }
    ssd_case_free(&c);
}

/* ---- grouped gated RMSNorm ---- */

static void norm_dref(double *out, const float *x, const float *z, const float *w, int m, int width,
                      int group, double eps) {
    for (int i = 0; i < m; i++) {
        const float *xr = x + (size_t)i * width, *zr = z + (size_t)i * width;
        double *o = out + (size_t)i * width;
        for (int j = 0; j < width; j++) o[j] = xr[j] * (zr[j] / (1.0 + exp(-(double)zr[j])));
        for (int g0 = 0; g0 < width; g0 += group) {
            double ss = 0;
            for (int j = g0; j < g0 + group; j++) ss += o[j] * o[j];
            double r = 1.0 / sqrt(ss / group + eps);
            for (int j = g0; j < g0 + group; j++) o[j] *= r * w[j];
        }
    }
}

/* |v̂| <= sqrt(group) and w < 1.5: errors are the vector silu's (~2 ulp) and the f32 sum
 * of squares over <= 960 terms, ~1e-6 of the output scale; 1e-5 leaves a margin. */
#define NORM_TOL 1e-5

static void test_norm_grouped(void) {
    static const int shapes[][3] = {/* m, width, group */
                                    {1, 7, 7},      {3, 72, 36}, {2, 51, 17}, {5, 33, 11},
                                    {1, 1920, 960}, {4, 16, 16}, {2, 34, 17}, {1, 8209, 8209}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int wd = 0; wd < 2; wd++) {
            int m = shapes[si][0], width = shapes[si][1], group = shapes[si][2];
            size_t n = (size_t)m * width;
            float *x = fvec(n), *z = fvec(n), *wv = fvec((size_t)width), *out = fvec(n);
            for (size_t i = 0; i < n; i++) {
                x[i] = 3.0f * rng_f();
                z[i] = 6.0f * rng_f();
            }
            for (int j = 0; j < width; j++) wv[j] = 1.0f + 0.5f * rng_f();
            void *st;
            bk_weight w = make_weight(wv, (size_t)width, wd ? DTYPE_BF16 : DTYPE_F32, &st);
            w.shape[0] = width;
            double *want = dvec(n);
            norm_dref(want, x, z, wv, m, width, group, 1e-5);
            const char *bname = "reference";
            cpu_mamba_rmsnorm_gated_grouped_ref(out, x, z, &w, m, width, group, 1e-5f);
            CHECK_REL(out, want, n, NORM_TOL, "norm shape %zu wdt %d", si, wd);
            for (int bi = 0; bi < n_be; bi++) {
                bname = be_name[bi];
                memset(out, 0, n * 4);
                be[bi]->ops->rmsnorm_gated_grouped(be[bi], out, x, z, &w, m, width, group, 1e-5f);
                CHECK_REL(out, want, n, NORM_TOL, "norm shape %zu wdt %d", si, wd);
                float *io = fvec(n); /* out aliasing x gives the same bits */
                memcpy(io, x, n * 4);
                be[bi]->ops->rmsnorm_gated_grouped(be[bi], io, io, z, &w, m, width, group, 1e-5f);
                CHECK_MSG(!memcmp(io, out, n * 4), "%s: norm in place differs (shape %zu)",
                          be_name[bi], si);
                free(io);
            }
            free(want);
            free(st);
            free(x);
            free(z);
            free(wv);
            free(out);
        }
}

/* ---- relu² ---- */

static void test_relu2(void) {
    static const size_t sizes[] = {1, 3, 15, 16, 17, 4093, 100003};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        float *x = fvec(n), *a = fvec(n);
        for (size_t i = 0; i < n; i++) x[i] = i % 7 == 0 ? 0.0f : 4.0f * rng_f();
        for (int bi = 0; bi < n_be; bi++) {
            memcpy(a, x, n * 4);
            be[bi]->ops->relu2(be[bi], a, n);
            int ok = 1;
            for (size_t i = 0; i < n; i++) {
                float r = x[i] > 0 ? x[i] * x[i] : 0.0f; /* one rounding: exact to compare */
                ok &= a[i] == r;
            }
            CHECK_MSG(ok, "%s: relu2 n %zu", be_name[bi], n);
        }
        memcpy(a, x, n * 4);
        cpu_mamba_relu2_ref(a, n);
        int ok = 1;
        for (size_t i = 0; i < n; i++) ok &= a[i] == (x[i] > 0 ? x[i] * x[i] : 0.0f) && a[i] >= 0;
        CHECK_MSG(ok, "reference relu2 n %zu", n);
        free(x);
        free(a);
    }
}

int main(void) {
    if (cpu_test_backends_open()) return 1;
    RUN(test_ssd);
    RUN(test_ssd_pieces);
    RUN(test_ssd_span);
    RUN(test_ssd_floor);
    RUN(test_ssd_chunked);
    RUN(test_norm_grouped);
    RUN(test_relu2);
    cpu_test_backends_close();
    TEST_DONE();
}
