/* take.c - taking a launched step's tokens: the host's or the device's sampler results
 * become each sequence's next token, its text (detokenizer, stop strings) and finish, and
 * the prompt logprobs of a prefill go out. A row of a sequence that finished at the step
 * before (it was fed once more behind it, sched.c) is dropped. Step thread only. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/sampler_scan.h"

static int take_is_stop_id(const engine *e, const engine_seq *s, int32_t t) {
    if (!s->ignore_eos)
        for (int i = 0; i < e->n_eos; i++)
            if (e->eos[i] == t) return 1;
    for (int i = 0; i < s->n_stop_ids; i++)
        if (s->stop_ids[i] == t) return 1;
    return 0;
}

_Static_assert(SAMPLER_MAX_TOP_LOGPROBS <= VOCAB_TOP_FEW, "top logprobs must come sorted");

/* log p(target | the row's prefix) and the n_top most likely tokens (descending, ties
 * to the lower id, as the sampler orders them) from one row of raw logits; n_top <=
 * SAMPLER_MAX_TOP_LOGPROBS <= VOCAB_TOP_FEW, so the selection needs no scratch. */

static void take_prompt_logprob(sampler_result *out, const float *row, int vocab, int32_t target,
                                int n_top) {
    int32_t arg;
    float mx = vocab_argmax(row, vocab, &arg);
    float lse = mx + (float)log(vocab_sum_exp(row, vocab, (double)mx, 1.0));
    if (n_top > vocab) n_top = vocab;
    if (n_top > SAMPLER_MAX_TOP_LOGPROBS) n_top = SAMPLER_MAX_TOP_LOGPROBS;
    int32_t ids[SAMPLER_MAX_TOP_LOGPROBS];
    if (n_top > 0) vocab_top_k(row, vocab, n_top, ids, NULL);
    for (int k = 0; k < n_top; k++) {
        out->top[k].token = ids[k];
        out->top[k].logprob = row[ids[k]] - lse;
    }
    out->n_top = n_top > 0 ? n_top : 0;
    out->token = target;
    out->logprob = row[target] - lse;
}

/* s->allow: the tokens that keep s's output in its grammar, with its eos and stop tokens
 * only where the grammar may end (a grammar that must end has already stopped the sequence
 * in take_token). Returns how many are allowed; fails the sequence (returns -1) when none
 * is: the vocabulary cannot write the grammar's next byte, or its tables ran out of memory.
 * The step thread calls it before a step samples (the device applies it) or on the logits
 * the host samples. */
int take_allow(engine *e, engine_seq *s) {
    int n = constrain_mask(s->cons, s->allow, e->vocab);
    /* a stop is allowed exactly where the grammar may end (a special token the grammar
     * spells may also be a stop: not before the end), an ignored eos left as it is */
    uint8_t end = n >= 0 && constrain_complete(s->cons) == 1;
    for (int i = 0; n >= 0 && i < e->n_eos + s->n_stop_ids; i++) {
        int32_t t = i < e->n_eos ? e->eos[i] : s->stop_ids[i - e->n_eos];
        if (t < 0 || t >= e->vocab || s->allow[t] == end || (end && i < e->n_eos && s->ignore_eos))
            continue;
        s->allow[t] = end;
        n += end ? 1 : -1;
    }
    if (n > 0) return n;
    engine_seq_finish(s, ENGINE_FINISH_ERROR,
                      n < 0 ? "out of memory for the output format's grammar"
                            : "no token of the vocabulary continues the required output format");
    return -1;
}

/* The grammar's mask on a logits row the host samples: tokens that would leave it get
 * -inf, so the sampler (bias, penalties, temperature, top-k/p) only ever sees tokens that
 * fit. 1 when the sequence failed instead. */
static int take_mask(engine *e, engine_seq *s, float *row) {
    if (take_allow(e, s) < 0) return 1;
    for (int i = 0; i < e->vocab; i++)
        if (!s->allow[i]) row[i] = -INFINITY;
    return 0;
}

/* Takes res as the next token of s, whose positions in the cache after the step that
 * sampled it were pos, and emits text / finish. */
static void take_token(engine *e, engine_seq *s, const sampler_result *res, int pos) {
    sampler_accept(s->smp, res->token);
    s->last = res->token;
    s->prompt[s->n_prompt + s->n_gen] = res->token; /* n_gen < max_tokens: room was made */
    s->n_gen++;
    atomic_fetch_add(&e->gen_tokens, 1);
    double now = strata_now();
    if (s->n_gen > 1 && e->on_token_gap) e->on_token_gap(e->ud, now - s->t_last_tok);
    s->t_last_tok = now;

    int finish = ENGINE_FINISH_NONE, flush = 0, rc = 0;
    char idtext[24], why[256] = "";
    detok_out o = {0};
    strata_err err = {0};
    int complete =
        s->cons && !constrain_accept(s->cons, res->token) && constrain_complete(s->cons) == 2;
    if (!complete && take_is_stop_id(e, s, res->token)) {
        finish = ENGINE_FINISH_STOP;
        flush = 1;
    } else if (s->dt) {
        rc = detok_push(s->dt, res->token, &o, &err);
        if (rc && res->token < tok_vocab_size(e->tok)) {
            finish = ENGINE_FINISH_ERROR;
            snprintf(why, sizeof why, "detokenizer: %.200s", err.msg);
        } else if (!rc && o.stopped) {
            finish = ENGINE_FINISH_STOP;
        }
        /* an id the tokenizer does not know (a padded vocab row) yields no text */
        if (rc) memset(&o, 0, sizeof o);
    } else {
        int n = snprintf(idtext, sizeof idtext, "[%d]", res->token);
        o.text = idtext;
        o.text_len = (size_t)n;
    }
    if (!finish && complete) { /* the grammar's sentence is whole: nothing may follow */
        finish = ENGINE_FINISH_STOP;
        flush = 1;
    } else if (!finish && (s->n_gen >= s->max_tokens || pos >= e->ctx)) {
        finish = ENGINE_FINISH_LENGTH;
        flush = 1;
    }
    if (engine_seq_emit(s, o.text, o.text_len, o.reasoning, o.reasoning_len, res, 0, NULL)) {
        finish = ENGINE_FINISH_ERROR;
        snprintf(why, sizeof why, "out of memory for the output");
    }
    if (flush && finish != ENGINE_FINISH_ERROR && s->dt) {
        memset(&o, 0, sizeof o);
        if (!detok_finish(s->dt, &o, &err))
            engine_seq_emit(s, o.text, o.text_len, o.reasoning, o.reasoning_len, NULL, 0, NULL);
    }
    if (finish) {
        engine_seq_finish(s, finish, why[0] ? why : NULL);
    } else if (s->wake) {
        s->wake(s->ud);
    }
}

/* Per-row host work of a step (the prompt logprobs, the host sampler's picks), row k a
 * function of its logits row into its own entry: side by side on the backend's threads
 * (the CPU's pool, which would otherwise wait through them). */
typedef struct {
    engine *e;
    sched_flight *f;
} take_job;

static void take_tasks(engine *e, void (*fn)(void *ctx, int k), take_job *j, int n) {
    if (e->b) backend_host_tasks(e->b, fn, j, n);
    else
        for (int k = 0; k < n; k++) fn(j, k);
}

static void take_plp_task(void *ctx, int k) {
    const take_job *j = ctx;
    engine *e = j->e;
    engine_seq *s = e->b_plp_seq[k];
    int idx = e->b_plp_idx[k];
    take_prompt_logprob(&s->plp[idx], e->logits + (size_t)(j->f->nout + k) * (size_t)e->vocab,
                        e->vocab, s->prompt[idx], s->plp_top);
}

/* The end of a prefill chunk: once the whole prompt is in, its logprobs go out before
 * the first token's wake. Only in the step that was just built (eager: never in flight).
 * The rows' passes over the vocabulary run side by side on the backend's threads. */
static void take_prefill(engine *e, sched_flight *f) {
    take_job j = {e, f};
    take_tasks(e, take_plp_task, &j, f->n_plp);
    for (int i = 0; i < e->n_run; i++) {
        engine_seq *s = e->run[i];
        if (e->b_chunk[i] <= 0 || s->done || s->n_done < s->n_feed) continue;
        if (s->plp) engine_seq_emit_prompt(s);
        if (!s->max_tokens) engine_seq_finish(s, ENGINE_FINISH_LENGTH, NULL);
    }
}

/* Row r's pick when its sequence samples on the host without a grammar (a grammar's
 * mask is the engine's to compute: take_pick does those rows on its own thread). */
static void take_pick_task(void *ctx, int r) {
    const take_job *j = ctx;
    engine_seq *s = j->f->seq[r];
    if (!s || s->done || s->cons) return;
    sampler_sample(s->smp, j->e->logits + (size_t)r * (size_t)j->e->vocab, &j->f->pick[r]);
}

/* The host sampler's picks for every row of a step sampled on the host, into f->pick; a
 * pick's token -1 for a row that takes nothing (a pad, a finished sequence, a mask that
 * left no token). */
static void take_pick(engine *e, sched_flight *f) {
    for (int r = 0; r < f->nout; r++) {
        engine_seq *s = f->seq[r];
        f->pick[r].token = -1;
        if (s && !s->done && s->cons && !take_mask(e, s, e->logits + (size_t)r * (size_t)e->vocab))
            sampler_sample(s->smp, e->logits + (size_t)r * (size_t)e->vocab, &f->pick[r]);
    }
    take_job j = {e, f};
    take_tasks(e, take_pick_task, &j, f->nout);
}

int take_step(engine *e, sched_flight *f, strata_err *err) {
    int rc = f->deferred ? backend_graph_sync(e->b, err) : 0;
    f->live = 0;
    for (int r = 0; r < f->nout; r++)
        if (f->seq[r]) f->seq[r]->in_flight--;
    if (rc) return rc;
    if (!f->deferred) take_prefill(e, f);
    if (!f->dev) take_pick(e, f);
    int n_host = 0, n_dev = 0; /* tokens taken, by who picked them (dropped rows apart) */
    for (int r = 0; r < f->nout; r++) {
        engine_seq *s = f->seq[r];
        sampler_result res;
        if (!s || s->done) continue;
        n_host += !f->dev || f->res[r].token < 0;
        n_dev += f->dev && f->res[r].token >= 0;
        if (!f->dev) {
            if (f->pick[r].token < 0) continue;
            res = f->pick[r];
        } else if (dsample_result(&e->ds, &f->res[r], r, s->slot, s->smp, f->sampled_rows, &res)) {
            engine_seq_finish(s, ENGINE_FINISH_ERROR,
                              "the device sampler left a row it had not kept");
            continue;
        }
        take_token(e, s, &res, f->pos[r]);
    }
    if (f->n_decode == f->n_seqs && !f->n_plp) {
        atomic_fetch_add(f->graph == 1   ? &e->graph_replays
                         : f->graph == 0 ? &e->graph_captures
                                         : &e->eager_decode_steps,
                         1);
        atomic_fetch_add(&e->chained_steps, f->chained);
        atomic_fetch_add(&e->pad_rows, f->n_pad);
    }
    atomic_fetch_add(&e->smp_device, n_dev);
    atomic_fetch_add(&e->smp_host, n_host);
    if (e->on_step) {
        engine_step_info si = {.n_tokens = f->n_tokens,
                               .n_seqs = f->n_seqs,
                               .n_decode = f->n_decode,
                               .n_pad = f->n_pad,
                               .graph = f->graph,
                               .chained = f->chained,
                               .sampled_device = n_dev,
                               .sampled_host = n_host,
                               .t_start = f->t_start,
                               .t_end = strata_now()};
        if (e->on_step(e->ud, &si)) e->hold = 1;
    }
    return 0;
}
