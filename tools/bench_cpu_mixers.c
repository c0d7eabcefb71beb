/* bench_cpu_mixers.c - the CPU backend's recurrent mixers in prefill: the per-token
 * recurrence against the chunked form, for the gated delta rule (Qwen3.5's DeltaNet,
 * cpu_gated_delta.c / cpu_gated_delta_chunk.c) and the Mamba2 SSD (Nemotron-H, cpu_ssd.c /
 * cpu_ssd_chunk.c), on one layer of the real shapes, one sequence of each prompt length.
 *
 * Build and run from the repo root (after `make`, which builds build/libstrata.a):
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -I. -pthread tools/bench_cpu_mixers.c build/libstrata.a \
 *       -o build/bench_cpu_mixers -lm -ldl
 *   build/bench_cpu_mixers [-t threads] [-i isa] [-r reps] [-c] [-m name] [T ...]
 * T defaults to 128 and 1024; -m runs only the mixers whose name contains name; -c times
 * the calling thread's CPU time instead of wall time (with -t 1, on a busy machine).
 * Prints the best of reps runs (default 5) of each form, in ms per layer, and the largest
 * difference between the two forms' outputs. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_mamba.h"

typedef struct {
    const char *what;
    int Hk, Hv, dk, dv; /* gated delta rule; Hk 0 for SSD */
    int H, P, N, G;     /* SSD */
} bench_mixer;

static const bench_mixer bench_mixers[] = {
    {"qwen3.5-0.8b/2b deltanet", 16, 16, 128, 128, 0, 0, 0, 0},
    {"qwen3.5-4b/9b deltanet", 16, 32, 128, 128, 0, 0, 0, 0},
    {"nemotron-3-nano-4b ssd", 0, 0, 0, 0, 96, 80, 128, 8},
};

static uint64_t bench_rng = 0x2545f4914f6cdd1dull;
static float bench_rand(void) {
    bench_rng ^= bench_rng << 13;
    bench_rng ^= bench_rng >> 7;
    bench_rng ^= bench_rng << 17;
    return (float)(bench_rng >> 40) / 8388608.0f - 1.0f; /* [-1, 1) */
}

static float *bench_vec(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) abort();
    for (size_t i = 0; i < n; i++) p[i] = bench_rand();
    return p;
}

/* Wall time, or with -c the calling thread's CPU time: on a loaded machine that counts
 * only the time the thread ran (meaningful with -t 1, where it does all the work). */
static clockid_t bench_clock = CLOCK_MONOTONIC;
static double bench_now(void) {
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One sequence of T tokens in slot 0 from position 0. */
typedef struct {
    bk_batch b;
    int32_t slot, start, len, pos0, *tok_pos, *tok_seq;
} bench_batch;

static void bench_batch_init(bench_batch *bb, int T) {
    memset(bb, 0, sizeof *bb);
    bb->len = T;
    bb->tok_pos = calloc((size_t)T, sizeof(int32_t));
    bb->tok_seq = calloc((size_t)T, sizeof(int32_t));
    for (int t = 0; t < T; t++) bb->tok_pos[t] = t;
    bb->b = (bk_batch){.n_tokens = T,
                       .n_seqs = 1,
                       .slot = &bb->slot,
                       .start = &bb->start,
                       .len = &bb->len,
                       .pos0 = &bb->pos0,
                       .tok_pos = bb->tok_pos,
                       .tok_seq = bb->tok_seq};
}

static double bench_max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        m = d > m || d != d ? d : m;
    }
    return m;
}

/* One mixer's inputs for one sequence of T tokens, made once and run by both forms. */
typedef struct {
    const bench_mixer *m;
    int T, ld;
    float *in, *g, *beta, *st; /* delta: in = conv rows [q | k | v]; ssd: [x | B | C | dt] */
    float *alog, *dtb, *d;
    bk_weight wa, wdt, wd;
    bench_batch bb;
} bench_case;

/* Inputs as the model feeds them. Delta rule: unit q, k (q scaled by dk^-1/2), g in
 * (-2, -1), beta in (0.5, 1). SSD: x, B, C in [-1, 1), dt_raw in (-5, -3) with dt_bias 0
 * so Δ spans the checkpoints' 0.005-0.05, A_log = log(1..H) as transformers initialises
 * it. */
static void bench_case_init(bench_case *c, const bench_mixer *m, int T) {
    memset(c, 0, sizeof *c);
    c->m = m;
    c->T = T;
    bench_rng = 0x2545f4914f6cdd1dull;
    if (m->Hk) {
        c->ld = 2 * m->Hk * m->dk + m->Hv * m->dv;
        c->in = bench_vec((size_t)T * c->ld);
        c->g = bench_vec((size_t)T * m->Hv);
        c->beta = bench_vec((size_t)T * m->Hv);
        c->st = bench_vec((size_t)m->Hv * m->dk * m->dv);
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < 2 * m->Hk; h++) {
                float *x = c->in + (size_t)t * c->ld + (size_t)h * m->dk, ss = 1e-6f;
                for (int i = 0; i < m->dk; i++) ss += x[i] * x[i];
                float sc = (h < m->Hk ? 1.0f / sqrtf((float)m->dk) : 1.0f) / sqrtf(ss);
                for (int i = 0; i < m->dk; i++) x[i] *= sc;
            }
            for (int h = 0; h < m->Hv; h++) {
                c->g[(size_t)t * m->Hv + h] = -1.5f + 0.5f * c->g[(size_t)t * m->Hv + h];
                c->beta[(size_t)t * m->Hv + h] = 0.75f + 0.24f * c->beta[(size_t)t * m->Hv + h];
            }
        }
    } else {
        int H = m->H;
        c->ld = H * m->P + 2 * m->G * m->N + H;
        c->in = bench_vec((size_t)T * c->ld);
        c->st = bench_vec((size_t)H * m->P * m->N);
        c->alog = malloc(sizeof(float) * H);
        c->dtb = calloc((size_t)H, sizeof(float));
        c->d = bench_vec((size_t)H);
        for (int h = 0; h < H; h++) c->alog[h] = logf((float)(h + 1));
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) c->in[(size_t)t * c->ld + c->ld - H + h] -= 4.0f;
        c->wa = (bk_weight){.data = c->alog, .dt = DTYPE_F32, .ndim = 1, .shape = {H}};
        c->wdt = (bk_weight){.data = c->dtb, .dt = DTYPE_F32, .ndim = 1, .shape = {H}};
        c->wd = (bk_weight){.data = c->d, .dt = DTYPE_F32, .ndim = 1, .shape = {H}};
    }
    bench_batch_init(&c->bb, T);
}

static void bench_case_free(bench_case *c) {
    free(c->bb.tok_seq);
    free(c->bb.tok_pos);
    free(c->d);
    free(c->dtb);
    free(c->alog);
    free(c->st);
    free(c->beta);
    free(c->g);
    free(c->in);
}

/* Seconds of one layer's op from a zero state (chunk_min INT_MAX: the recurrence, 1: the
 * chunked form); the output goes to out. */
static double bench_case_run(backend *b, bench_case *c, int chunk_min, float *out) {
    const bench_mixer *m = c->m;
    double t0;
    if (m->Hk) {
        memset(c->st, 0, sizeof(float) * m->Hv * m->dk * m->dv);
        int q = 0, k = m->Hk * m->dk, v = 2 * m->Hk * m->dk;
        t0 = bench_now();
        cpu_gated_delta_run(b, out, c->in + q, c->in + k, c->ld, c->in + v, c->ld, c->g, c->beta,
                            c->st, &c->bb.b, m->Hk, m->Hv, m->dk, m->dv, BK_VHEAD_GROUPED,
                            chunk_min);
    } else {
        memset(c->st, 0, sizeof(float) * m->H * m->P * m->N);
        int B = m->H * m->P, C = B + m->G * m->N, dt = C + m->G * m->N;
        t0 = bench_now();
        cpu_ssd_run(b, out, c->in, c->ld, c->in + B, c->in + C, c->ld, c->in + dt, c->ld, &c->wa,
                    &c->wdt, &c->wd, c->st, &c->bb.b, m->H, m->P, m->N, m->G, 0.0f, chunk_min);
    }
    return bench_now() - t0;
}

int main(int argc, char **argv) {
    int threads = 2, reps = 5, Ts[16] = {128, 1024}, n_T = 2, user_T = 0;
    cpu_isa isa = CPU_ISA_AUTO;
    const char *only = NULL;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-t") == 0 && a + 1 < argc) {
            threads = atoi(argv[++a]);
        } else if (strcmp(argv[a], "-m") == 0 && a + 1 < argc) {
            only = argv[++a];
        } else if (strcmp(argv[a], "-c") == 0) {
            bench_clock = CLOCK_THREAD_CPUTIME_ID;
        } else if (strcmp(argv[a], "-r") == 0 && a + 1 < argc) {
            reps = atoi(argv[++a]);
        } else if (strcmp(argv[a], "-i") == 0 && a + 1 < argc) {
            ++a;
            for (int i = 0; i < CPU_ISA_COUNT; i++)
                if (strcmp(argv[a], cpu_backend_isa_name((cpu_isa)i)) == 0) isa = (cpu_isa)i;
        } else if (atoi(argv[a]) > 0 && n_T < 16) {
            if (!user_T) n_T = 0;
            user_T = 1;
            Ts[n_T++] = atoi(argv[a]);
        } else {
            fprintf(stderr, "usage: %s [-t threads] [-i isa] [-r reps] [-c] [-m name] [T ...]\n",
                    argv[0]);
            return 2;
        }
    }
    backend *b = NULL;
    strata_err err = {0};
    if (cpu_backend_create_isa(threads, isa, &b, &err) != 0) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 1;
    }
    printf("isa %s, %d threads, best of %d; ms per layer (one sequence of T tokens)\n",
           cpu_backend_isa_name(cpu_backend_isa(b)), threads, reps);
    printf("%-28s %6s %12s %12s %8s %10s\n", "mixer", "T", "recurrence", "chunked", "speedup",
           "max |diff|");
    for (size_t i = 0; i < sizeof bench_mixers / sizeof *bench_mixers; i++) {
        const bench_mixer *m = &bench_mixers[i];
        if (only && !strstr(m->what, only)) continue;
        for (int ti = 0; ti < n_T; ti++) {
            int T = Ts[ti];
            size_t n = (size_t)T * (m->Hk ? m->Hv * m->dv : m->H * m->P);
            float *o1 = malloc(n * sizeof(float)), *o2 = malloc(n * sizeof(float));
            /* the two forms alternate, so a busy moment of the machine hits both alike */
            bench_case bc;
            bench_case_init(&bc, m, T);
            double r = INFINITY, c = INFINITY;
            for (int k = 0; k < reps; k++) {
                double tr = bench_case_run(b, &bc, INT_MAX, o1);
                double tc = bench_case_run(b, &bc, 1, o2);
                r = tr < r ? tr : r;
                c = tc < c ? tc : c;
            }
            r *= 1e3;
            c *= 1e3;
            bench_case_free(&bc);
            printf("%-28s %6d %9.3f ms %9.3f ms %7.2fx %10.2g\n", m->what, T, r, c, r / c,
                   bench_max_diff(o1, o2, n));
            free(o2);
            free(o1);
        }
    }
    backend_destroy(b);
    return 0;
}
