/* bench_constrain.c - how long a JSON-object token mask takes on a real vocabulary
 * (engine/constrain), in the states a generation spends its time in: inside a string
 * (where most of the vocabulary fits), after {, inside a number, between values.
 *
 * Build and run from the repo root (after `make`, which builds build/libstrata.a):
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -I. -pthread tools/bench_constrain.c build/libstrata.a \
 *       -o build/bench_constrain -ljansson -lonig -lsentencepiece -lstdc++ -lm -ldl
 *   d=$(mktemp -d) && (cd tests/data/tokenizers/qwen35 &&
 *       zstd -dq --long=27 tokenizer.json.zst -o $d/tokenizer.json) && build/bench_constrain $d
 * Prints the vocabulary's build time and trie size, then per state the tokens allowed and
 * the min / median / max of its masks (a second argument: how many, default 200), and the
 * same over all the states' masks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/bench_clock.h"

#include "engine/constrain/constrain.h"
#include "engine/constrain/constrain_internal.h"

static const struct {
    const char *what, *prefix;
} bench_states[] = {
    {"start", ""},
    {"after {", "{"},
    {"key string", "{\"na"},
    {"value string", "{\"name\": \"Jo"},
    {"value string, deep", "{\"a\": [{\"b\": {\"c\": [\"x"},
    {"mid UTF-8", "{\"a\": \"\xE4\xB8"},
    {"mid \\u escape", "{\"a\": \"\\u00"},
    {"after :", "{\"a\":"},
    {"integer", "{\"a\": 12"},
    {"fraction", "{\"a\": 1.5"},
    {"exponent sign", "{\"a\": 1e"},
    {"after [", "{\"a\": ["},
    {"after value", "{\"a\": 1"},
    {"after ,", "{\"a\": 1, "},
    {"literal", "{\"a\": tr"},
    {"done", "{\"a\": \"b\"}"},
};

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s TOKENIZER_DIR [reps]\n", argv[0]);
        return 2;
    }
    int reps = argc > 2 ? atoi(argv[2]) : 200;
    if (reps < 1) reps = 1;
    strata_err err;
    tokenizer *t;
    if (tok_load(&t, argv[1], &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int n = tok_vocab_size(t);
    double t0 = bench_now_us();
    constrain_vocab *v;
    if (constrain_vocab_build(&v, t, n, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("vocab %d ids, %d fit somewhere, longest %d bytes; trie %u nodes (%.1f MB); "
           "build %.0f ms\n",
           n, v->n_sorted, v->max_len, v->n_nodes,
           (double)v->n_nodes * sizeof(constrain_node) / 1e6, (bench_now_us() - t0) / 1e3);
    constrain *c;
    if (constrain_json_object(&c, v, &err)) return 1;
    uint8_t *allow = malloc((size_t)n);
    int n_states = (int)(sizeof bench_states / sizeof bench_states[0]);
    double *all = malloc(sizeof(double) * (size_t)(reps * n_states)), *one = all;
    printf("%-20s %8s %9s %9s %9s  (us per mask)\n", "state", "allowed", "min", "median", "max");
    for (int s = 0; s < n_states; s++, one += reps) {
        json_pda_init(&c->state);
        const char *p = bench_states[s].prefix;
        if (json_pda_feed(&c->state, (const uint8_t *)p, strlen(p))) {
            fprintf(stderr, "state %s: the prefix does not fit\n", bench_states[s].what);
            return 1;
        }
        int allowed = 0;
        for (int r = 0; r < reps; r++) {
            double a = bench_now_us();
            allowed = constrain_mask(c, allow, n);
            one[r] = bench_now_us() - a;
        }
        qsort(one, (size_t)reps, sizeof *one, bench_cmp_double);
        printf("%-20s %8d %9.1f %9.1f %9.1f\n", bench_states[s].what, allowed, one[0],
               one[reps / 2], one[reps - 1]);
    }
    int total = reps * n_states;
    qsort(all, (size_t)total, sizeof *all, bench_cmp_double);
    printf("%-20s %8s %9.1f %9.1f %9.1f\n", "all states", "", all[0], all[total / 2],
           all[total - 1]);
    free(all);
    free(allow);
    constrain_free(c);
    constrain_vocab_free(v);
    tok_free(t);
    return 0;
}
