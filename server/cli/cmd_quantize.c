/* cmd_quantize.c - `strata quantize IN OUT.gguf`: a checkpoint written as a GGUF file that
 * llama.cpp and `strata --model OUT.gguf` read (models/load/gguf_model.h's gguf_quantize does
 * the work; this file parses the options and prints its notes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/load/gguf_model.h"

static const char quantize_usage[] =
    "usage: strata quantize IN OUT.gguf [--type q8_0|q4_k|bf16|f16|f32] [--threads N]\n"
    "                       [--allow-requantize]\n"
    "Writes the safetensors checkpoint directory IN as a GGUF file llama.cpp reads: its\n"
    "architecture's keys and tensor names, the tokenizer and chat template, matrices quantized\n"
    "as `--quantization TYPE` quantizes them on load (default q8_0), vectors and norms F32.\n"
    "IN may be a GGUF file: its keys and other tensors are kept, its matrices take TYPE\n"
    "(a quantized one only with --allow-requantize: the two roundings add up).\n";

static const struct {
    const char *name;
    dtype dt;
} quantize_types[] = {{"q8_0", DTYPE_Q8_0},
                      {"q4_k", DTYPE_Q4_K},
                      {"bf16", DTYPE_BF16},
                      {"f16", DTYPE_F16},
                      {"f32", DTYPE_F32}};

/* Notes on their own line; progress overwrites itself on a terminal (a log gets the notes). */
static void quantize_note(void *ctx, int progress, const char *line) {
    int *open = ctx;
    if (progress && !isatty(STDERR_FILENO)) return;
    if (*open) fputc('\n', stderr);
    fprintf(stderr, progress ? "\r%s" : "%s\n", line);
    *open = progress;
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[2] = {NULL, NULL};
    int n_pos = 0, open = 0;
    gguf_quant_opts o = {.type = DTYPE_Q8_0, .note = quantize_note, .note_ctx = &open};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(quantize_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--type") && v) {
            size_t k, nt = sizeof quantize_types / sizeof quantize_types[0];
            for (k = 0; k < nt && strcmp(v, quantize_types[k].name); k++) {
            }
            if (k == nt) {
                fprintf(stderr, "strata: quantize: --type %s: allowed q8_0, q4_k, bf16, f16, f32\n",
                        v);
                return 2;
            }
            o.type = quantize_types[k].dt;
            i++;
        } else if (!strcmp(a, "--allow-requantize")) {
            o.allow_requantize = 1;
        } else if (!strcmp(a, "--threads") && v) {
            char *end;
            long t = strtol(v, &end, 10);
            if (*end || t < 1 || t > 1024) {
                fprintf(stderr, "strata: quantize: --threads %s: a count from 1\n", v);
                return 2;
            }
            o.threads = (int)t;
            i++;
        } else if (a[0] == '-' || n_pos == 2) {
            fprintf(stderr, "strata: quantize: unexpected argument '%s'\n%s", a, quantize_usage);
            return 2;
        } else {
            pos[n_pos++] = a;
        }
    }
    if (n_pos != 2) {
        fputs(quantize_usage, stderr);
        return 2;
    }
    o.in = pos[0];
    o.out = pos[1];
    strata_err err = {0};
    int rc = gguf_quantize(&o, &err);
    if (open) fputc('\n', stderr);
    if (rc) {
        fprintf(stderr, "strata: quantize: %s\n", err.msg);
        return 1;
    }
    return 0;
}
