/* sched.c - one engine step: pick the batch, run the model, sample, emit.
 *
 * Batch order: first one decode token per running sequence (so decoding streams
 * advance every step whatever arrives), then prompt chunks of the sequences still in
 * prefill, oldest first, until prefill_chunk tokens (or the model's step size) are
 * used. A long prompt therefore takes several steps and never stalls the others.
 * A sequence that wants prompt logprobs also asks for the logits of its prompt rows;
 * those share a fixed number of rows per step (e->plp_rows), and a chunk that would
 * need more is cut shorter, so the logits buffer stays the size set at create.
 * Step thread only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

int sched_alloc(engine *e, strata_err *err) {
    size_t S = (size_t)e->max_seqs, T = (size_t)e->step_tokens, R = (size_t)e->plp_rows;
    if (batch_buf_init(&e->bb, e->step_tokens, e->max_seqs, err)) return err->code;
    e->run = calloc(S, sizeof *e->run);
    e->free_slots = calloc(S, sizeof *e->free_slots);
    e->b_out_rows = calloc(S + R, sizeof(int32_t));
    e->b_plp_row = calloc(R, sizeof(int32_t));
    e->b_plp_idx = calloc(R, sizeof(int32_t));
    e->b_plp_seq = calloc(R, sizeof *e->b_plp_seq);
    e->b_out_seq = calloc(S, sizeof *e->b_out_seq);
    e->b_chunk = calloc(S, sizeof *e->b_chunk);
    e->b_tokens = calloc(T, sizeof(int32_t));
    e->logits = calloc((S + R) * (size_t)e->vocab, sizeof(float));
    if (!e->run || !e->free_slots || !e->b_out_rows || !e->b_out_seq || !e->b_chunk ||
        !e->b_tokens || !e->b_plp_row || !e->b_plp_idx || !e->b_plp_seq || !e->logits)
        return strata_err_set(err, STRATA_ENOMEM, "engine: out of memory for %d slots",
                              e->max_seqs);
    if (!e->host_sampling && dsample_init(&e->ds, e->b, e->max_seqs, e->vocab, err))
        return err->code;
    /* lowest slot on top of the stack, so slot use is easy to follow in tests */
    for (int i = 0; i < e->max_seqs; i++) e->free_slots[i] = e->max_seqs - 1 - i;
    e->n_free = e->max_seqs;
    return 0;
}

void sched_free(engine *e) {
    batch_buf_deinit(&e->bb);
    free(e->run);
    free(e->free_slots);
    free(e->b_out_rows);
    free(e->b_plp_row);
    free(e->b_plp_idx);
    free(e->b_plp_seq);
    free(e->b_out_seq);
    free(e->b_chunk);
    free(e->b_tokens);
    free(e->logits);
    dsample_free(&e->ds);
}

void sched_admit(engine *e, engine_seq *list) {
    while (list) {
        engine_seq *s = list;
        list = s->next;
        s->next = NULL;
        /* engine_submit counted the slot, so the stack cannot be empty */
        s->slot = e->free_slots[--e->n_free];
        s->n_done = s->pos = s->n_gen = 0;
        for (int i = 0; i < s->n_prompt; i++) sampler_accept_prompt(s->smp, s->prompt[i]);
        strata_err serr = {0}; /* a sequence the device cannot seat samples on the host */
        s->dev_sample = e->ds.b && !dsample_seat(&e->ds, s->slot, s->smp, &serr);
        engine_seq_set_scheduled(s);
        e->run[e->n_run++] = s;
    }
}

static void sched_finish(engine_seq *s, int finish, const char *why) {
    engine_seq_emit(s, NULL, 0, NULL, 0, NULL, finish, why);
    s->done = 1;
    if (s->wake) s->wake(s->ud);
}

/* Frees the slots of finished sequences (between steps, never during one) and drops
 * the engine's references, keeping the running list in admission order. */
static void sched_compact(engine *e) {
    int k = 0, freed = 0;
    for (int i = 0; i < e->n_run; i++) {
        engine_seq *s = e->run[i];
        if (!s->done) {
            e->run[k++] = s;
            continue;
        }
        model_reset_slot(e->m, s->slot);
        e->free_slots[e->n_free++] = s->slot;
        atomic_fetch_sub(&e->cached, s->pos);
        atomic_fetch_sub(&e->active, 1);
        engine_seq_release(s);
        freed++;
    }
    e->n_run = k;
    if (freed && e->on_slot_free) e->on_slot_free(e->ud);
}

void sched_reap_cancelled(engine *e) {
    int any = 0;
    for (int i = 0; i < e->n_run; i++) {
        engine_seq *s = e->run[i];
        if (!s->done && atomic_load(&s->cancelled)) {
            sched_finish(s, ENGINE_FINISH_ABORT, "cancelled");
            any = 1;
        }
    }
    if (any) sched_compact(e);
}

void sched_abort_all(engine *e, const char *why) {
    for (int i = 0; i < e->n_run; i++)
        if (!e->run[i]->done) sched_finish(e->run[i], ENGINE_FINISH_ABORT, why);
    sched_compact(e);
}

static int sched_is_stop_id(const engine *e, const engine_seq *s, int32_t t) {
    if (!s->ignore_eos)
        for (int i = 0; i < e->n_eos; i++)
            if (e->eos[i] == t) return 1;
    for (int i = 0; i < s->n_stop_ids; i++)
        if (s->stop_ids[i] == t) return 1;
    return 0;
}

/* log p(target | the row's prefix) and the n_top most likely tokens (descending, ties
 * to the lower id, as the sampler orders them) from one row of raw logits. A scan with
 * a sorted insertion into the n_top <= SAMPLER_MAX_TOP_LOGPROBS slots: no scratch. */
static void sched_prompt_logprob(sampler_result *out, const float *row, int vocab, int32_t target,
                                 int n_top) {
    float mx = -INFINITY;
    for (int i = 0; i < vocab; i++)
        if (row[i] > mx) mx = row[i];
    double z = 0;
    for (int i = 0; i < vocab; i++) z += exp((double)(row[i] - mx));
    float lse = mx + (float)log(z);
    if (n_top > vocab) n_top = vocab;
    if (n_top > SAMPLER_MAX_TOP_LOGPROBS) n_top = SAMPLER_MAX_TOP_LOGPROBS;
    int n = 0;
    for (int i = 0; i < vocab && n_top > 0; i++) {
        float v = row[i];
        if (n == n_top && !(v > out->top[n - 1].logprob)) continue;
        int k = n < n_top ? n++ : n - 1; /* the slot that frees up: the end */
        while (k > 0 && v > out->top[k - 1].logprob) {
            out->top[k] = out->top[k - 1];
            k--;
        }
        out->top[k].token = i;
        out->top[k].logprob = v;
    }
    for (int k = 0; k < n; k++) out->top[k].logprob -= lse;
    out->n_top = n;
    out->token = target;
    out->logprob = row[target] - lse;
}

/* Takes res as the next token of s and emits text / finish. */
static void sched_take(engine *e, engine_seq *s, const sampler_result *res) {
    sampler_accept(s->smp, res->token);
    s->last = res->token;
    s->n_gen++;
    atomic_fetch_add(&e->gen_tokens, 1);
    double now = strata_now();
    if (s->n_gen > 1 && e->on_token_gap) e->on_token_gap(e->ud, now - s->t_last_tok);
    s->t_last_tok = now;

    int finish = ENGINE_FINISH_NONE, flush = 0, rc = 0;
    char idtext[24], why[256] = "";
    detok_out o = {0};
    strata_err err = {0};
    if (sched_is_stop_id(e, s, res->token)) {
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
    if (!finish && (s->n_gen >= s->max_tokens || s->pos >= e->ctx)) {
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
        sched_finish(s, finish, why[0] ? why : NULL);
    } else if (s->wake) {
        s->wake(s->ud);
    }
}

/* Runs the step's forward. A step where every sequence feeds one sampled token has the
 * same op sequence whenever it has the same shape, so where the backend has graphs it
 * is captured once per (sequences, logit rows, sampled on the device or not) and replayed
 * after; a replay the backend refuses runs again eagerly. Sets *graph as
 * engine_step_info.graph. */
static int sched_forward(engine *e, bk_batch *bt, int n_out, model_out *out, int decode_only,
                         int *graph, strata_err *err) {
    *graph = -1;
    if (decode_only && backend_supports(e->b, BK_OP_GRAPHS, DTYPE_COUNT)) {
        strata_err gerr = {0};
        uint64_t key = (uint64_t)(out->n_sample > 0) << 63 | (uint64_t)bt->n_seqs << 32 |
                       (uint64_t)(uint32_t)n_out;
        int g = backend_graph_begin(e->b, key, &gerr);
        if (g >= 0) {
            int rc = model_forward_to(e->m, bt, e->b_tokens, e->b_out_rows, n_out, out, err);
            if (!backend_graph_end(e->b, &gerr) && !rc) {
                *graph = g;
                return 0;
            }
        }
    }
    return model_forward_to(e->m, bt, e->b_tokens, e->b_out_rows, n_out, out, err);
}

/* The device samples the step's rows when every sequence in it is seated there. */
static int sched_on_device(engine *e, int nout) {
    if (!e->ds.b || !nout) return 0;
    for (int r = 0; r < nout; r++)
        if (!e->b_out_seq[r]->dev_sample) return 0;
    for (int r = 0; r < nout; r++)
        dsample_request(&e->ds, r, e->b_out_seq[r]->slot, e->b_out_seq[r]->smp);
    return 1;
}

void sched_step(engine *e) {
    int nt = 0, nout = 0, n_decode = 0;
    double t_start = strata_now();
    batch_buf_clear(&e->bb);
    /* decode tokens first: one per sequence whose prompt is in the cache */
    for (int i = 0; i < e->n_run; i++) {
        engine_seq *s = e->run[i];
        e->b_chunk[i] = 0;
        if (s->n_done < s->n_prompt) continue;
        nt = batch_buf_add(&e->bb, s->slot, s->pos, 1);
        e->b_tokens[nt] = s->last;
        e->b_out_rows[nout] = nt;
        e->b_out_seq[nout++] = s;
        e->b_chunk[i] = -1;
        n_decode++;
    }
    /* then prompt chunks, oldest first, within the prefill budget */
    int budget = e->prefill_chunk, plp_left = e->plp_rows, n_plp = 0;
    for (int i = 0; i < e->n_run && budget > 0 && e->bb.bt.n_tokens < e->step_tokens; i++) {
        engine_seq *s = e->run[i];
        if (s->n_done >= s->n_prompt) continue;
        int first = e->bb.bt.n_tokens;
        int c = s->n_prompt - s->n_done;
        if (c > budget) c = budget;
        if (c > e->step_tokens - first) c = e->step_tokens - first;
        if (s->plp) {
            /* row j predicts prompt token n_done + j + 1; the prompt's last row is the
             * sampling row below. Cut the chunk to the prompt rows left this step. */
            int need = s->n_prompt - 1 - s->n_done;
            if (need > c) need = c;
            if (need > plp_left) c = need = plp_left;
            if (!c) continue;
            for (int j = 0; j < need; j++) {
                e->b_plp_row[n_plp] = first + j;
                e->b_plp_idx[n_plp] = s->n_done + j + 1;
                e->b_plp_seq[n_plp++] = s;
            }
            plp_left -= need;
        }
        batch_buf_add(&e->bb, s->slot, s->pos, c);
        memcpy(e->b_tokens + first, s->prompt + s->n_done, (size_t)c * sizeof *e->b_tokens);
        if (s->n_done + c == s->n_prompt && s->max_tokens > 0) {
            e->b_out_rows[nout] = first + c - 1;
            e->b_out_seq[nout++] = s;
        }
        e->b_chunk[i] = c;
        budget -= c;
    }
    bk_batch *bt = &e->bb.bt;
    nt = bt->n_tokens;
    if (!nt) return;
    strata_err err = {0};
    /* the prompt rows' logits follow the sampling rows' */
    for (int k = 0; k < n_plp; k++) e->b_out_rows[nout + k] = e->b_plp_row[k];
    int graph, dev = sched_on_device(e, nout);
    model_out out = {
        .logits = e->logits, .n_sample = dev ? nout : 0, .req = e->ds.req, .res = e->ds.res};
    int rc =
        sched_forward(e, bt, nout + n_plp, &out, n_decode == bt->n_seqs && !n_plp, &graph, &err);
    atomic_fetch_add(&e->steps, 1);
    if (rc) {
        /* the caches of every sequence in the batch are now unreliable */
        char why[300];
        snprintf(why, sizeof why, "model step failed: %.200s", err.msg);
        for (int i = 0; i < e->n_run; i++)
            if (!e->run[i]->done) sched_finish(e->run[i], ENGINE_FINISH_ERROR, why);
        sched_compact(e);
        return;
    }
    for (int k = 0; k < n_plp; k++) {
        engine_seq *s = e->b_plp_seq[k];
        int idx = e->b_plp_idx[k];
        sched_prompt_logprob(&s->plp[idx], e->logits + (size_t)(nout + k) * (size_t)e->vocab,
                             e->vocab, s->prompt[idx], s->plp_top);
    }
    for (int i = 0; i < e->n_run; i++) {
        engine_seq *s = e->run[i];
        int c = e->b_chunk[i] < 0 ? 1 : e->b_chunk[i];
        if (!e->b_chunk[i]) continue;
        s->pos += c;
        atomic_fetch_add(&e->cached, c);
        if (e->b_chunk[i] < 0) continue;
        s->n_done += c;
        atomic_fetch_add(&e->prompt_tokens, c);
        if (s->n_done < s->n_prompt) continue;
        /* the prompt is in: its logprobs go out before the first token's wake */
        if (s->plp) engine_seq_emit_prompt(s);
        if (!s->max_tokens) sched_finish(s, ENGINE_FINISH_LENGTH, NULL);
    }
    int n_host = dev ? 0 : nout;
    for (int r = 0; r < nout; r++) {
        engine_seq *s = e->b_out_seq[r];
        sampler_result res;
        n_host += dev && e->ds.res[r].token < 0;
        if (!dev) {
            sampler_sample(s->smp, e->logits + (size_t)r * (size_t)e->vocab, &res);
        } else if (dsample_result(&e->ds, r, s->slot, s->smp, out.sampled_rows, &res)) {
            sched_finish(s, ENGINE_FINISH_ERROR, "the device sampler left a row it had not kept");
            continue;
        }
        sched_take(e, s, &res);
    }
    if (n_decode == bt->n_seqs && !n_plp)
        atomic_fetch_add(graph == 1   ? &e->graph_replays
                         : graph == 0 ? &e->graph_captures
                                      : &e->eager_decode_steps,
                         1);
    atomic_fetch_add(&e->smp_device, nout - n_host);
    atomic_fetch_add(&e->smp_host, n_host);
    if (e->on_step) {
        engine_step_info si = {.n_tokens = nt,
                               .n_seqs = bt->n_seqs,
                               .n_decode = n_decode,
                               .graph = graph,
                               .sampled_device = nout - n_host,
                               .sampled_host = n_host,
                               .t_start = t_start,
                               .t_end = strata_now()};
        e->on_step(e->ud, &si);
    }
    sched_compact(e);
}
