/* cmd_generate.c - `strata generate` and `strata logits`: one sequence through the
 * engine's model and sampler, no server. Used by people to try a checkpoint and by
 * tests to compare against references. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/batch.h"
#include "engine/text/tokenizer.h"
#include "server/cli/cli_model.h"

static const char generate_usage[] =
    "usage: strata generate --model DIR|PRESET (--prompt-ids 1,2,3 | --prompt TEXT)\n"
    "         [--max-tokens N]\n"
    "         [--load-format dummy] [--dtype bf16|f16|f32] [--device cpu|cuda|auto]\n"
    "         [--threads N] [--ctx-size N]\n"
    "         [--prefill-chunk N] [--temperature T] [--top-k K] [--top-p P] [--min-p P]\n"
    "         [--repetition-penalty R] [--presence-penalty P] [--frequency-penalty F]\n"
    "         [--seed S] [--logprobs N] [--ignore-eos]\n"
    "Prints one JSON object: the generated ids (and their text when the checkpoint has a\n"
    "tokenizer), prefill ms and decode tokens/s. --prompt is encoded without special\n"
    "tokens added.\n";

static const char logits_usage[] =
    "usage: strata logits --model DIR --prompt-ids 1,2,3 --out FILE [--prefill-chunk N]\n"
    "         [--dtype bf16|f16|f32] [--threads N]\n"
    "Writes the f32 logits of every prompt position, [n_prompt, vocab] row-major.\n";

/* Runs the prompt through slot 0 in chunks of o->chunk. When all_rows, every
 * position's logits go to fp (logits then holds the last chunk's); otherwise only the
 * last position's logits are written to logits. */
static int prefill(cli_model *o, const int32_t *ids, int n, float *logits, int all_rows, FILE *fp) {
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
        if (all_rows)
            for (int i = 0; i < len; i++) rows[n_out++] = i;
        else if (pos + len == n)
            rows[n_out++] = len - 1;
        if (model_forward(o->m, &bb.bt, ids + pos, rows, n_out, logits, &err)) {
            fprintf(stderr, "strata: %s\n", err.msg);
            rc = -1;
        } else if (all_rows &&
                   fwrite(logits, sizeof(float) * (size_t)in->vocab, (size_t)len, fp) != (size_t)len) {
            fprintf(stderr, "strata: cannot write the logits\n");
            rc = -1;
        }
    }
    batch_buf_deinit(&bb);
    free(rows);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    cli_model o;
    int rc = cli_model_parse(&o, argc, argv, generate_usage);
    if (rc) return rc > 0 ? 0 : 2;
    int32_t *prompt = NULL, *gen = NULL;
    int n_prompt = 0, n_gen = 0;
    strata_err err = {0};
    tokenizer *tok = NULL;
    /* The tokenizer is optional: a checkpoint without one still runs on ids. */
    if (!o.dummy && tok_load(&tok, o.model, &err) && o.prompt) {
        fprintf(stderr, "strata: --prompt needs the checkpoint's tokenizer: %s\n", err.msg);
        return 1;
    }
    if (o.prompt) {
        size_t n = 0;
        if (tok_encode(tok, o.prompt, strlen(o.prompt), 0, &prompt, &n, &err) || n == 0) {
            fprintf(stderr, "strata: cannot encode the prompt: %s\n", n ? err.msg : "no tokens");
            free(prompt);
            tok_free(tok);
            return 2;
        }
        n_prompt = (int)n;
    } else if (!o.prompt_ids || cli_parse_ids(o.prompt_ids, &prompt, &n_prompt) || n_prompt == 0) {
        fprintf(stderr, "strata: give --prompt TEXT or --prompt-ids 1,2,3\n");
        tok_free(tok);
        return 2;
    }
    if (cli_model_open(&o)) {
        free(prompt);
        tok_free(tok);
        return 1;
    }
    const model_info *in = model_get_info(o.m);
    sampler *s = NULL;
    float *logits = malloc(sizeof(float) * (size_t)in->vocab * (size_t)o.chunk);
    gen = malloc(sizeof(int32_t) * (size_t)(o.max_tokens + 1));
    batch_buf bb = {0};
    rc = 1;
    if (!logits || !gen || batch_buf_init(&bb, 1, 1, &err)) {
        fprintf(stderr, "strata: out of memory\n");
        goto out;
    }
    if (n_prompt + o.max_tokens > in->ctx_size) {
        fprintf(stderr, "strata: prompt (%d tokens) + max tokens (%d) exceed the context size %d\n",
                n_prompt, o.max_tokens, in->ctx_size);
        goto out;
    }
    if (sampler_create(&s, &o.sp, in->vocab, &err)) {
        fprintf(stderr, "strata: %s\n", err.msg);
        goto out;
    }
    for (int i = 0; i < n_prompt; i++) sampler_accept_prompt(s, prompt[i]);
    double t0 = cli_now();
    if (prefill(&o, prompt, n_prompt, logits, 0, NULL)) goto out;
    double t1 = cli_now();
    const char *finish = "length";
    printf("{\"ids\":[");
    /* ids stream as they are made; the text follows once decoding ends */
    for (int pos = n_prompt; n_gen < o.max_tokens; pos++) {
        sampler_result r;
        sampler_sample(s, logits, &r);
        gen[n_gen++] = r.token;
        printf("%s%d", n_gen > 1 ? "," : "", r.token);
        fflush(stdout);
        int eos = 0;
        for (int e = 0; e < in->n_eos; e++) eos |= r.token == in->eos[e];
        if (eos && !o.ignore_eos) {
            finish = "stop";
            break;
        }
        sampler_accept(s, r.token);
        if (n_gen == o.max_tokens) break;
        batch_buf_clear(&bb);
        batch_buf_add(&bb, 0, pos, 1);
        int32_t row = 0;
        if (model_forward(o.m, &bb.bt, &r.token, &row, 1, logits, &err)) {
            fprintf(stderr, "\nstrata: %s\n", err.msg);
            goto out;
        }
    }
    double t2 = cli_now();
    int steps = n_gen > 1 ? n_gen - 1 : 0;
    printf("]");
    if (tok) {
        char *text = NULL;
        size_t len = 0;
        if (tok_decode(tok, gen, (size_t)n_gen, 1, &text, &len, &err) == 0) {
            json_t *js = json_stringn(text, len);
            char *enc = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
            if (enc) printf(",\"text\":%s", enc);
            free(enc);
            json_decref(js);
        }
        free(text);
    }
    printf(",\"finish_reason\":\"%s\",\"prompt_tokens\":%d,\"prefill_ms\":%.3f,"
           "\"decode_tok_s\":%.3f}\n",
           finish, n_prompt, (t1 - t0) * 1e3, steps ? steps / (t2 - t1) : 0.0);
    rc = 0;
out:
    sampler_destroy(s);
    batch_buf_deinit(&bb);
    free(logits);
    free(gen);
    free(prompt);
    tok_free(tok);
    cli_model_close(&o);
    return rc;
}

int cmd_logits(int argc, char **argv) {
    cli_model o;
    int rc = cli_model_parse(&o, argc, argv, logits_usage);
    if (rc) return rc > 0 ? 0 : 2;
    int32_t *prompt = NULL;
    int n_prompt = 0;
    if (!o.prompt_ids || cli_parse_ids(o.prompt_ids, &prompt, &n_prompt) || n_prompt == 0 || !o.out) {
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
    } else if (prefill(&o, prompt, n_prompt, logits, 1, fp) == 0) {
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
