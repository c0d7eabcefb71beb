/* cmd_generate.c - `strata generate`: one sequence through the engine's step loop, as
 * the server runs it, no HTTP. Used by people to try a checkpoint and by tests to
 * compare against references. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/text/tokenizer.h"
#include "server/cli/cli_engine.h"
#include "server/cli/cli_model.h"
#include "server/serve.h"

static const char generate_usage[] =
    "usage: strata generate --model DIR|PRESET (--prompt-ids 1,2,3 | --prompt TEXT)\n"
    "         [--max-tokens N] [--quantization none|q8_0|q4_k]\n"
    "         [--load-format dummy] [--dtype bf16|f16|f32] [--device cpu|cuda|auto]\n"
    "         [--threads N] [--ctx-size N] [--kv-cache-dtype auto|bf16|f32]\n"
    "         [--prefill-chunk N] [--temperature T] [--top-k K] [--top-p P] [--min-p P]\n"
    "         [--repetition-penalty R] [--presence-penalty P] [--frequency-penalty F]\n"
    "         [--seed S] [--logprobs N] [--ignore-eos] [--host-sampling] [--mmap]\n"
    "Prints one JSON object: the generated ids (and their text when the checkpoint has a\n"
    "tokenizer), with --logprobs N each token's logprob and its N most likely alternatives,\n"
    "prefill ms and decode tokens/s. --prompt is encoded without special tokens added.\n";

/* A logprob as JSON: null where it is not finite (a token of probability 0). */
static void generate_print_logprob(const char *key, float lp) {
    if (isfinite(lp)) printf("\"%s\":%.9g", key, (double)lp);
    else printf("\"%s\":null", key);
}

/* "logprobs":[{"id":..,"logprob":..,"top":[{"id":..,"logprob":..},..]},..] */
static void generate_print_logprobs(const cli_result *res) {
    printf(",\"logprobs\":[");
    for (int i = 0; i < res->n_ids; i++) {
        const sampler_result *t = &res->lp[i];
        printf("%s{\"id\":%d,", i ? "," : "", t->token);
        generate_print_logprob("logprob", t->logprob);
        printf(",\"top\":[");
        for (int k = 0; k < t->n_top; k++) {
            printf("%s{\"id\":%d,", k ? "," : "", t->top[k].token);
            generate_print_logprob("logprob", t->top[k].logprob);
            printf("}");
        }
        printf("]}");
    }
    printf("]");
}

static void generate_print_ids(void *ud, const int32_t *ids, int n) {
    int *count = ud;
    for (int i = 0; i < n; i++) printf("%s%d", (*count)++ ? "," : "", ids[i]);
    fflush(stdout);
}

int cmd_generate(int argc, char **argv) {
    cli_model o;
    int rc = cli_model_parse(&o, argc, argv, generate_usage);
    if (rc) return rc > 0 ? 0 : 2;
    int32_t *prompt = NULL;
    int n_prompt = 0, printed = 0;
    strata_err err = {0};
    tokenizer *tok = NULL;
    engine *e = NULL;
    cli_result res = {0};
    /* The tokenizer is optional: a checkpoint without one still runs on ids. */
    if (!o.dummy && model_text_open(o.model, &tok, NULL, &err) && o.prompt) {
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
    rc = 1;
    const model_info *in = model_get_info(o.m);
    if (n_prompt + o.max_tokens > in->ctx_size) {
        fprintf(stderr, "strata: prompt (%d tokens) + max tokens (%d) exceed the context size %d\n",
                n_prompt, o.max_tokens, in->ctx_size);
        goto out;
    }
    if (cli_engine_open(&o, tok, NULL, NULL, &e)) goto out;
    /* ids stream as they are made; the text follows once decoding ends */
    printf("{\"ids\":[");
    fflush(stdout);
    if (cli_run(e, &o, prompt, n_prompt, o.max_tokens, generate_print_ids, &printed, &res)) {
        printf("]}\n");
        goto out;
    }
    printf("]");
    if (tok) {
        json_t *js = json_stringn(res.text.p ? res.text.p : "", res.text.len);
        char *enc = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
        if (enc) printf(",\"text\":%s", enc);
        free(enc);
        json_decref(js);
    }
    if (res.lp) generate_print_logprobs(&res);
    const engine_seq_times *t = &res.times;
    int steps = res.n_ids > 1 ? res.n_ids - 1 : 0;
    double prefill = t->first_token > t->scheduled ? t->first_token - t->scheduled : 0;
    double decode = t->finished - t->first_token;
    printf(",\"finish_reason\":\"%s\",\"prompt_tokens\":%d,\"prefill_ms\":%.3f,"
           "\"decode_tok_s\":%.3f}\n",
           engine_finish_name(res.finish), n_prompt, prefill * 1e3,
           steps && decode > 0 ? steps / decode : 0.0);
    rc = 0;
out:
    engine_destroy(e);
    cli_result_free(&res);
    free(prompt);
    tok_free(tok);
    cli_model_close(&o);
    return rc;
}
