/* seq.c - a sequence: its copied parameters, sampler and detokenizer, and the output
 * the step thread appends and the consumer takes.
 *
 * A step allocates only when a sequence's pending output buffer has to grow, and those
 * buffers are swapped with the consumer's rather than freed, so steady streaming
 * reaches a fixed size. The step thread writes under the sequence's mutex; the consumer
 * takes under it; nothing else is shared. */
#include "engine/engine.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_internal.h"

static const char *const engine_finish_names[] = {
#define ENGINE_FINISH_NAME(name, text) text,
    ENGINE_FINISH_LIST(ENGINE_FINISH_NAME)
#undef ENGINE_FINISH_NAME
};

const char *engine_finish_name(int finish) {
    if (finish < 0 || finish > ENGINE_FINISH_ERROR) return "unknown";
    return engine_finish_names[finish];
}

/* ---- output buffers ---- */

void engine_chunk_init(engine_chunk *c) { memset(c, 0, sizeof *c); }

void engine_chunk_deinit(engine_chunk *c) {
    if (!c) return;
    strbuf_free(&c->text);
    strbuf_free(&c->reasoning);
    free(c->tok);
    free(c->prompt_tok);
    memset(c, 0, sizeof *c);
}

static int engine_chunk_add_tok(engine_chunk *c, const sampler_result *r) {
    if (c->n_tok == c->tok_cap) {
        int nc = c->tok_cap ? c->tok_cap * 2 : 16;
        sampler_result *p = realloc(c->tok, (size_t)nc * sizeof *p);
        if (!p) return STRATA_ENOMEM;
        c->tok = p;
        c->tok_cap = nc;
    }
    c->tok[c->n_tok++] = *r;
    return 0;
}

/* ---- sequences ---- */

static void engine_seq_free(engine_seq *s) {
    void (*release)(void *) = s->release;
    void *ud = s->ud;
    sampler_destroy(s->smp);
    detok_free(s->dt);
    engine_chunk_deinit(&s->pending);
    pthread_mutex_destroy(&s->mu);
    free(s->prompt);
    constrain_free(s->cons);
    free(s->allow);
    free(s->plp);
    free(s->stop_ids);
    free(s);
    if (release) release(ud);
}

void engine_seq_release(engine_seq *s) {
    if (s && atomic_fetch_sub(&s->refs, 1) == 1) engine_seq_free(s);
}

void engine_seq_cancel(engine_seq *s) {
    /* The step thread looks at the flag before every step; a queued sequence is
     * picked up at the next step too, so no wakeup is needed. */
    if (s) atomic_store(&s->cancelled, 1);
}

int engine_seq_create(engine *e, const engine_seq_params *p, void (*wake)(void *ud),
                      void (*release)(void *ud), void *ud, engine_seq **out, strata_err *err) {
    engine_seq *s = NULL;
    int rc;
    if (p->n_prompt < 1) return strata_err_set(err, STRATA_EINVALID, "prompt: at least one token");
    if (p->max_tokens < 0) return strata_err_set(err, STRATA_EINVALID, "max_tokens: at least 0");
    if ((int64_t)p->n_prompt + p->max_tokens > e->ctx)
        return strata_err_set(err, STRATA_ERANGE,
                              "This model's maximum context length is %d tokens. However, you "
                              "requested %lld tokens (%d in the prompt, %d for the completion).",
                              e->ctx, (long long)p->n_prompt + p->max_tokens, p->n_prompt,
                              p->max_tokens);
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= e->vocab)
            return strata_err_set(err, STRATA_EINVALID, "prompt: token id %d outside [0, %d)",
                                  p->prompt[i], e->vocab);
    if (!(s = calloc(1, sizeof *s)))
        return strata_err_set(err, STRATA_ENOMEM, "engine: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    atomic_init(&s->refs, 1);
    atomic_init(&s->cancelled, 0);
    s->e = e;
    s->slot = -1;
    s->n_prompt = p->n_prompt;
    s->max_tokens = p->max_tokens;
    s->logprobs = p->logprobs;
    s->ignore_eos = p->ignore_eos;
    /* room for the completion too: the tokens after the prompt key the prefix cache when
     * the sequence finishes (pages never written cost nothing) */
    if (!(s->prompt = malloc(((size_t)p->n_prompt + (size_t)p->max_tokens) * sizeof *s->prompt))) {
        rc = strata_err_set(err, STRATA_ENOMEM, "engine: out of memory");
        goto fail;
    }
    memcpy(s->prompt, p->prompt, (size_t)p->n_prompt * sizeof *s->prompt);
    if (p->prompt_logprobs) {
        /* the whole prompt's results, so the step thread never allocates for them */
        if (!(s->plp = calloc((size_t)p->n_prompt, sizeof *s->plp))) {
            rc = strata_err_set(err, STRATA_ENOMEM, "engine: out of memory for prompt logprobs");
            goto fail;
        }
        s->plp[0].token = p->prompt[0];
        s->plp[0].n_top = -1;
        s->plp_top = p->sampling.top_logprobs;
    }
    if (p->n_stop_ids > 0) {
        if (!(s->stop_ids = malloc((size_t)p->n_stop_ids * sizeof *s->stop_ids))) {
            rc = strata_err_set(err, STRATA_ENOMEM, "engine: out of memory");
            goto fail;
        }
        memcpy(s->stop_ids, p->stop_ids, (size_t)p->n_stop_ids * sizeof *s->stop_ids);
        s->n_stop_ids = p->n_stop_ids;
    }
    if ((rc = sampler_create(&s->smp, &p->sampling, e->vocab, err))) goto fail;
    if (p->cons && !(s->allow = malloc((size_t)e->vocab))) {
        rc = strata_err_set(err, STRATA_ENOMEM, "engine: out of memory for the grammar's mask");
        goto fail;
    }
    if (e->tok) {
        detok_opts o = {.skip_special = p->skip_special,
                        .n_stop = p->n_stop,
                        .stop = p->stop,
                        .split_reasoning = p->split_reasoning,
                        .start_in_reasoning = p->start_in_reasoning};
        if ((rc = detok_create(&s->dt, e->tok, &o, err))) goto fail;
    }
    /* Set last: a failed create must not call release (the caller still owns ud), nor free
     * the grammar (the caller still owns it too). */
    s->cons = p->cons;
    s->wake = wake;
    s->release = release;
    s->ud = ud;
    *out = s;
    return 0;
fail:
    engine_seq_free(s);
    return rc;
}

int engine_seq_take(engine_seq *s, engine_chunk *c) {
    pthread_mutex_lock(&s->mu);
    engine_chunk *p = &s->pending;
    int news = p->text.len || p->reasoning.len || p->n_new || p->prompt_done ||
               (p->finish && !s->finish_taken);
    /* swap the buffers: the consumer's old ones become the next pending ones */
    strbuf t = c->text, r = c->reasoning;
    sampler_result *tk = c->tok, *old_prompt = c->prompt_tok;
    int tkc = c->tok_cap;
    *c = *p;
    p->text = t, strbuf_reset(&p->text);
    p->reasoning = r, strbuf_reset(&p->reasoning);
    p->tok = tk, p->tok_cap = tkc, p->n_tok = 0;
    p->n_new = 0;
    /* the prompt logprobs come once: they move to c, nothing is swapped back */
    p->prompt_tok = NULL, p->n_prompt_tok = 0, p->prompt_done = 0;
    if (c->finish) s->finish_taken = 1;
    pthread_mutex_unlock(&s->mu);
    free(old_prompt);
    return news;
}

void engine_seq_get_times(engine_seq *s, engine_seq_times *t) {
    pthread_mutex_lock(&s->mu);
    *t = s->times;
    pthread_mutex_unlock(&s->mu);
}

int engine_seq_cached_tokens(engine_seq *s) { return atomic_load(&s->cached); }

/* Appends one step's result to the pending output. Step thread. */
int engine_seq_emit(engine_seq *s, const char *text, size_t text_len, const char *reasoning,
                    size_t reasoning_len, const sampler_result *tok, int finish,
                    const char *error) {
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    engine_chunk *p = &s->pending;
    if (text_len) rc |= strbuf_add(&p->text, text, text_len);
    if (reasoning_len) rc |= strbuf_add(&p->reasoning, reasoning, reasoning_len);
    if (tok) {
        p->n_new++;
        p->n_generated++;
        if (s->logprobs) rc |= engine_chunk_add_tok(p, tok);
        if (!s->times.first_token) s->times.first_token = strata_now();
    }
    if (finish && !p->finish) {
        p->finish = finish;
        if (error) snprintf(p->error, sizeof p->error, "%s", error);
        s->times.finished = strata_now();
    }
    pthread_mutex_unlock(&s->mu);
    return rc ? STRATA_ENOMEM : 0;
}

void engine_seq_emit_prompt(engine_seq *s) {
    pthread_mutex_lock(&s->mu);
    s->pending.prompt_tok = s->plp;
    s->pending.n_prompt_tok = s->n_prompt;
    s->pending.prompt_done = 1;
    s->plp = NULL;
    pthread_mutex_unlock(&s->mu);
}

void engine_seq_set_scheduled(engine_seq *s) {
    pthread_mutex_lock(&s->mu);
    s->times.scheduled = strata_now();
    pthread_mutex_unlock(&s->mu);
}

void engine_seq_finish(engine_seq *s, int finish, const char *why) {
    engine_seq_emit(s, NULL, 0, NULL, 0, NULL, finish, why);
    s->done = 1;
    s->finish = finish;
    if (s->wake) s->wake(s->ud);
}
