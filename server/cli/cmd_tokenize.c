/* cmd_tokenize.c - `strata tokenize`: encode text to ids, decode ids to text, or
 * measure the encoder's speed, with a checkpoint's tokenizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/clock.h"
#include "engine/text/tokenizer.h"
#include "server/serve.h"

static void tokenize_usage(FILE *f) {
    fprintf(f, "usage: strata tokenize --model DIR|FILE.gguf [--text T] [--add-special]\n"
               "       strata tokenize --model DIR|FILE.gguf --decode 1,2,3 [--skip-special]\n"
               "       strata tokenize --model DIR|FILE.gguf --bench FILE [--lines] [--seconds S]\n"
               "Encodes T (or stdin) and prints the ids as a JSON array; --add-special runs the\n"
               "post-processor (BOS/EOS). --decode prints the text of the ids. --bench encodes\n"
               "FILE whole (or each line with --lines), repeatedly for S seconds (default 2),\n"
               "and prints the best encode speed in MB/s as JSON.\n");
}

static char *read_stream(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0, k;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    while ((k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            char *p = realloc(buf, cap *= 2);
            if (!p) {
                free(buf);
                return NULL;
            }
            buf = p;
        }
    }
    *len = n;
    return buf;
}

static int parse_ids(const char *s, int32_t **ids, size_t *n) {
    size_t cap = 16;
    *n = 0;
    *ids = malloc(cap * sizeof **ids);
    if (!*ids) return -1;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) break;
        if (*n == cap) {
            int32_t *p = realloc(*ids, (cap *= 2) * sizeof *p);
            if (!p) return -1;
            *ids = p;
        }
        (*ids)[(*n)++] = (int32_t)v;
        s = end;
        while (*s == ',' || *s == ' ' || *s == '[' || *s == ']') s++;
    }
    return *s ? -1 : 0;
}

/* Encodes text whole, or line by line (each line with its '\n', one call each). */
static int bench_once(const tokenizer *t, const char *text, size_t len, int lines, size_t *n_ids,
                      strata_err *err) {
    size_t at = 0;
    *n_ids = 0;
    while (at < len) {
        size_t end = len;
        if (lines) {
            const char *nl = memchr(text + at, '\n', len - at);
            if (nl) end = (size_t)(nl - text) + 1;
        }
        int32_t *ids;
        size_t n;
        if (tok_encode(t, text + at, end - at, 0, &ids, &n, err)) return -1;
        free(ids);
        *n_ids += n;
        at = end;
    }
    return 0;
}

static int bench(const tokenizer *t, const char *file, double seconds, int lines) {
    FILE *f = fopen(file, "rb");
    if (!f) {
        perror(file);
        return 1;
    }
    size_t len = 0;
    char *text = read_stream(f, &len);
    fclose(f);
    if (!text) return 1;
    strata_err err = {0};
    double best = 1e30, start = strata_now();
    size_t n_ids = 0;
    int runs = 0;
    while (runs < 3 || strata_now() - start < seconds) {
        double t0 = strata_now();
        if (bench_once(t, text, len, lines, &n_ids, &err)) {
            fprintf(stderr, "strata tokenize: %s\n", err.msg);
            free(text);
            return 1;
        }
        double dt = strata_now() - t0;
        if (dt < best) best = dt;
        runs++;
    }
    printf("{\"mode\": \"%s\", \"bytes\": %zu, \"tokens\": %zu, \"runs\": %d, \"best_s\": %.6f, "
           "\"mb_per_s\": %.3f}\n",
           lines ? "lines" : "whole", len, n_ids, runs, best, len / best / 1e6);
    free(text);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *decode = NULL, *bench_file = NULL;
    int add_special = 0, skip_special = 0, lines = 0, rc = 1;
    double seconds = 2.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--model") && more) model = argv[++i];
        else if (!strcmp(a, "--text") && more) text = argv[++i];
        else if (!strcmp(a, "--decode") && more) decode = argv[++i];
        else if (!strcmp(a, "--bench") && more) bench_file = argv[++i];
        else if (!strcmp(a, "--seconds") && more) seconds = atof(argv[++i]);
        else if (!strcmp(a, "--add-special")) add_special = 1;
        else if (!strcmp(a, "--skip-special")) skip_special = 1;
        else if (!strcmp(a, "--lines")) lines = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tokenize_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "strata tokenize: unknown or incomplete option '%s'\n", a);
            tokenize_usage(stderr);
            return 2;
        }
    }
    if (!model) {
        tokenize_usage(stderr);
        return 2;
    }
    strata_err err = {0};
    tokenizer *t = NULL;
    if (model_text_open(model, &t, NULL, &err)) {
        fprintf(stderr, "strata tokenize: %s\n", err.msg);
        return 1;
    }
    char *owned = NULL, *out = NULL;
    int32_t *ids = NULL;
    size_t n = 0, len = 0;
    if (bench_file) {
        rc = bench(t, bench_file, seconds, lines);
        goto done;
    }
    if (decode) {
        if (parse_ids(decode, &ids, &n)) {
            fprintf(stderr, "strata tokenize: --decode wants ids like 1,2,3\n");
            goto done;
        }
        if (tok_decode(t, ids, n, skip_special, &out, &len, &err)) {
            fprintf(stderr, "strata tokenize: %s\n", err.msg);
            goto done;
        }
        fwrite(out, 1, len, stdout);
        rc = 0;
        goto done;
    }
    if (text) len = strlen(text);
    else if (!(text = owned = read_stream(stdin, &len))) goto done;
    if (tok_encode(t, text, len, add_special, &ids, &n, &err)) {
        fprintf(stderr, "strata tokenize: %s\n", err.msg);
        goto done;
    }
    putchar('[');
    for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    printf("]\n");
    rc = 0;
done:
    free(owned);
    free(out);
    free(ids);
    tok_free(t);
    return rc;
}
