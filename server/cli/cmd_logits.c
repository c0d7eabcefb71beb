/* cmd_logits.c - `strata logits`: the f32 logits of every prompt position, for
 * comparisons with a reference (the goldens). It scores a prompt, it does not
 * generate: one chunked prefill straight through the model, no sampler or engine. */
#include <stdio.h>
#include <stdlib.h>

#include "engine/batch.h"
#include "server/cli/cli_model.h"

static const char logits_usage[] =
    "usage: strata logits --model DIR --prompt-ids 1,2,3 --out FILE [--prefill-chunk N]\n"
    "         [--dtype bf16|f16|f32] [--quantization none|q8_0|q4_k] [--threads N]\n"
    "Writes the f32 logits of every prompt position, [n_prompt, vocab] row-major.\n";

/* Runs the prompt through slot 0 in chunks of o->chunk; every position's logits go
 * to fp (logits holds the last chunk's). */
static int prefill(cli_model *o, const int32_t *ids, int n, float *logits, FILE *fp) {
    const model_info *in = model_get_info(o->m);
    strata_err err = {0};
    batch_buf bb;
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)o->chunk);
    if (!rows || batch_buf_init(&bb, o->chunk, 1, &err)) {
        free(rows);
        fprintf(stderr, "strata: out of memory\n");
        return -1;
    }
    int rc = 0;
    model_reset_slot(o->m, 0);
    for (int pos = 0; pos < n && !rc; pos += o->chunk) {
        int len = n - pos < o->chunk ? n - pos : o->chunk;
        batch_buf_clear(&bb);
        batch_buf_add(&bb, 0, pos, len);
        int n_out = 0;
        for (int i = 0; i < len; i++) rows[n_out++] = i;
        if (model_forward(o->m, &bb.bt, ids + pos, rows, n_out, logits, &err)) {
            fprintf(stderr, "strata: %s\n", err.msg);
            rc = -1;
        } else if (fwrite(logits, sizeof(float) * (size_t)in->vocab, (size_t)len, fp) !=
                   (size_t)len) {
            fprintf(stderr, "strata: cannot write the logits\n");
            rc = -1;
        }
    }
    batch_buf_deinit(&bb);
    free(rows);
    return rc;
}

int cmd_logits(int argc, char **argv) {
    cli_model o;
    int rc = cli_model_parse(&o, argc, argv, logits_usage);
    if (rc) return rc > 0 ? 0 : 2;
    int32_t *prompt = NULL;
    int n_prompt = 0;
    if (!o.prompt_ids || cli_parse_ids(o.prompt_ids, &prompt, &n_prompt) || n_prompt == 0 ||
        !o.out) {
        fprintf(stderr, "strata: logits needs --prompt-ids 1,2,3 and --out FILE\n");
        free(prompt);
        return 2;
    }
    if (o.ctx_size == 0) o.ctx_size = n_prompt;
    if (cli_model_open(&o)) {
        free(prompt);
        return 1;
    }
    const model_info *in = model_get_info(o.m);
    float *logits = malloc(sizeof(float) * (size_t)in->vocab * (size_t)o.chunk);
    FILE *fp = fopen(o.out, "wb");
    rc = 1;
    if (!logits || !fp) {
        fprintf(stderr, "strata: cannot open %s or allocate logits\n", o.out);
    } else if (prefill(&o, prompt, n_prompt, logits, fp) == 0) {
        rc = 0;
    }
    if (fp && fclose(fp) && rc == 0) {
        fprintf(stderr, "strata: cannot write %s\n", o.out);
        rc = 1;
    }
    free(logits);
    free(prompt);
    cli_model_close(&o);
    return rc;
}
