/* bench_sampler.c - the host sampler's time per token at a real vocabulary size, per kind of
 * request: what the engine thread spends between two decode steps on the CPU backend while
 * the workers wait (and what a GPU row left to the host costs).
 *
 * Build and run from the repo root (after `make`, which builds build/libstrata.a):
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -I. -pthread tools/bench_sampler.c build/libstrata.a \
 *       -o build/bench_sampler -lm -ldl
 *   build/bench_sampler [-v vocab] [-r reps]
 * Rows: "gaussian" (N(0, 2.5²) with 50 logits lifted by 15-20, a trained model's shape) and
 * "uniform" (U(-10, 10), the flattest: top-p must reach far down). Each line is the fastest
 * of reps calls of sampler_pick on a fresh copy of the row, the token it chose beside it (the
 * same before and after a change of the passes, for the same seed). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/sampler.h"
#include "tools/bench_clock.h"

typedef struct bench_case {
    const char *name;
    float temperature, top_p, min_p;
    int top_k, logprobs, top_logprobs;
} bench_case;

static const bench_case cases[] = {
    {"greedy", 0, 1, 0, 0, 0, 0},
    {"greedy, logprobs", 0, 1, 0, 0, 1, 0},
    {"greedy, 5 top logprobs", 0, 1, 0, 0, 1, 5},
    {"T 1 (OpenAI default)", 1, 1, 0, 0, 0, 0},
    {"T 0.7, top_k 40", 0.7f, 1, 0, 40, 0, 0},
    {"T 0.8, top_p 0.95", 0.8f, 0.95f, 0, 0, 0, 0},
    {"T 0.7, top_p 0.9", 0.7f, 0.9f, 0, 0, 0, 0},
    {"T 1, min_p 0.05, logprobs", 1, 1, 0.05f, 0, 1, 0},
};

static uint64_t rng_state = 88172645463325252ULL;
static double rng_unit(void) { /* (0, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return ((double)(rng_state >> 11) + 0.5) / 9007199254740992.0;
}

static void fill(float *l, int v, int gaussian) {
    for (int i = 0; i < v; i++)
        l[i] = gaussian ? (float)(2.5 * sqrt(-2 * log(rng_unit())) * cos(6.283185307 * rng_unit()))
                        : (float)(rng_unit() * 20 - 10);
    if (gaussian)
        for (int i = 0; i < 50; i++) l[(int)(rng_unit() * v)] += 15.0f + 0.1f * (float)i;
}

int main(int argc, char **argv) {
    int v = 248320, reps = 30, opt;
    while ((opt = getopt(argc, argv, "v:r:")) != -1) {
        if (opt == 'v') v = atoi(optarg);
        else if (opt == 'r') reps = atoi(optarg);
        else {
            fprintf(stderr, "usage: bench_sampler [-v vocab] [-r reps]\n");
            return 2;
        }
    }
    if (v < 2 || reps < 1) {
        fprintf(stderr, "bench_sampler: -v must be >= 2 and -r >= 1\n");
        return 2;
    }
    float *row = malloc(sizeof(float) * (size_t)v), *work = malloc(sizeof(float) * (size_t)v);
    if (!row || !work) {
        fprintf(stderr, "bench_sampler: out of memory\n");
        return 1;
    }
    printf("vocabulary %d, fastest of %d calls\n", v, reps);
    printf("%-28s %14s %14s\n", "request", "gaussian ms", "uniform ms");
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const bench_case *k = &cases[c];
        printf("%-28s", k->name);
        for (int gaussian = 1; gaussian >= 0; gaussian--) {
            rng_state = 88172645463325252ULL;
            fill(row, v, gaussian);
            sampler_params p;
            sampler_params_default(&p);
            p.temperature = k->temperature;
            p.top_p = k->top_p;
            p.min_p = k->min_p;
            p.top_k = k->top_k;
            p.logprobs = k->logprobs;
            p.top_logprobs = k->top_logprobs;
            p.seed = 7;
            sampler *s = NULL;
            strata_err err = {0};
            if (sampler_create(&s, &p, v, &err)) {
                fprintf(stderr, "bench_sampler: %s\n", err.msg);
                return 1;
            }
            sampler_result r;
            double best = 1e30;
            for (int i = 0; i < reps; i++) {
                memcpy(work, row, sizeof(float) * (size_t)v);
                double t0 = bench_now_us();
                sampler_pick(s, work, &r);
                double t = bench_now_us() - t0;
                if (t < best) best = t;
            }
            printf(" %7.3f (%6d)", best / 1e3, r.token);
            sampler_destroy(s);
        }
        printf("\n");
    }
    free(row);
    free(work);
    return 0;
}
