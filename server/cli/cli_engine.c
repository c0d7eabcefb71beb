/* cli_engine.c - one sequence at a time through the engine, for the offline commands
 * (see cli_engine.h). The step thread's wake signals a condition variable; this thread
 * takes the output as it comes. */
#include "server/cli/cli_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cli_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int woken;
    int released; /* the sequence is freed: no callback will come again */
} cli_wait;

static void cli_signal(cli_wait *w, int *flag) {
    pthread_mutex_lock(&w->mu);
    *flag = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void cli_wake(void *ud) {
    cli_wait *w = ud;
    cli_signal(w, &w->woken);
}

static void cli_released(void *ud) {
    cli_wait *w = ud;
    cli_signal(w, &w->released);
}

void cli_result_free(cli_result *r) {
    free(r->ids);
    free(r->lp);
    strbuf_free(&r->text);
    memset(r, 0, sizeof *r);
}

int cli_engine_open(cli_model *o, const tokenizer *tok,
                    int (*on_step)(void *, const engine_step_info *), void *ud, engine **out) {
    strata_err err = {0};
    engine_opts eo = {.max_seqs = o->max_seqs,
                      .prefill_chunk = o->chunk,
                      .host_sampling = o->host_sampling,
                      .on_step = on_step,
                      .ud = ud};
    if (engine_create(out, o->m, tok, &eo, &err)) {
        fprintf(stderr, "strata: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int cli_keep(cli_result *r, const engine_chunk *c, int keep_lp) {
    if (strbuf_add(&r->text, c->text.p ? c->text.p : "", c->text.len)) return -1;
    if (r->n_ids + c->n_tok > r->cap) {
        int cap = r->cap ? r->cap * 2 : 64;
        while (cap < r->n_ids + c->n_tok) cap *= 2;
        int32_t *p = realloc(r->ids, sizeof *p * (size_t)cap);
        if (!p) return -1;
        r->ids = p;
        if (keep_lp) {
            sampler_result *q = realloc(r->lp, sizeof *q * (size_t)cap);
            if (!q) return -1;
            r->lp = q;
        }
        r->cap = cap;
    }
    for (int i = 0; i < c->n_tok; i++) {
        if (keep_lp) r->lp[r->n_ids] = c->tok[i];
        r->ids[r->n_ids++] = c->tok[i].token;
    }
    return 0;
}

int cli_run(engine *e, const cli_model *o, const int32_t *prompt, int n_prompt, int max_tokens,
            void (*on_ids)(void *ud, const int32_t *ids, int n), void *ud, cli_result *r) {
    strata_err err = {0};
    cli_wait w = {.woken = 0};
    engine_seq *s = NULL;
    engine_chunk c;
    int rc = -1;
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    engine_chunk_init(&c);
    /* ids come with each token's sampler result; the sampler itself computes logprobs
     * only when asked (o->sp.logprobs: --logprobs), so timing is the server's */
    engine_seq_params p = {.prompt = prompt,
                           .n_prompt = n_prompt,
                           .max_tokens = max_tokens,
                           .sampling = o->sp,
                           .logprobs = 1,
                           .ignore_eos = o->ignore_eos,
                           .skip_special = 1};
    if (engine_seq_create(e, &p, cli_wake, cli_released, &w, &s, &err) ||
        engine_submit(e, s, &err)) {
        fprintf(stderr, "strata: %s\n", err.msg);
        goto out;
    }
    for (;;) {
        pthread_mutex_lock(&w.mu);
        while (!w.woken) pthread_cond_wait(&w.cv, &w.mu);
        w.woken = 0;
        pthread_mutex_unlock(&w.mu);
        while (engine_seq_take(s, &c)) {
            int first = r->n_ids;
            if (cli_keep(r, &c, o->sp.logprobs)) {
                fprintf(stderr, "strata: out of memory for the output\n");
                engine_seq_cancel(s);
                goto out;
            }
            if (on_ids && r->n_ids > first) on_ids(ud, r->ids + first, r->n_ids - first);
            if (c.finish) {
                r->finish = c.finish;
                snprintf(r->error, sizeof r->error, "%s", c.error);
                engine_seq_get_times(s, &r->times);
                rc = 0;
                if (c.finish == ENGINE_FINISH_ERROR) {
                    fprintf(stderr, "strata: %s\n", c.error);
                    rc = -1;
                }
                goto out;
            }
        }
    }
out:
    if (s) {
        /* the finish can be seen before the step thread's last wake: w lives until the
         * engine let go of the sequence too */
        engine_seq_cancel(s);
        engine_seq_release(s);
        pthread_mutex_lock(&w.mu);
        while (!w.released) pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
    }
    engine_chunk_deinit(&c);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    if (rc) cli_result_free(r);
    return rc;
}
