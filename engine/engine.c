/* engine.c - the step thread: admission of submitted sequences, the loop that runs
 * steps (engine/sched.c) while there is work, and shutdown.
 *
 * Everything a step touches (the batch, logits, the running list, the free-slot
 * stack) is allocated in engine_create from max_seqs / prefill_chunk / vocab; the
 * sequences and their output live in engine/seq.c. */
#include "engine/engine.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_internal.h"

/* ---- engine ---- */

int engine_submit(engine *e, engine_seq *s, strata_err *err) {
    int rc = 0;
    pthread_mutex_lock(&e->mu);
    if (e->stop || s->submitted) {
        rc = strata_err_set(err, STRATA_ESTATE, "engine: %s",
                            e->stop ? "stopping" : "sequence already submitted");
    } else if (atomic_load(&e->active) >= e->max_seqs) {
        rc = strata_err_set(err, STRATA_EBUSY, "engine: all %d slots are busy", e->max_seqs);
    } else {
        s->submitted = 1;
        atomic_fetch_add(&s->refs, 1);
        atomic_fetch_add(&e->active, 1);
        s->next = NULL;
        if (e->in_tail) e->in_tail->next = s;
        else e->in_head = s;
        e->in_tail = s;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

int engine_free_slots(engine *e) { return e->max_seqs - atomic_load(&e->active); }

void engine_get_stats(engine *e, engine_stats *st) {
    st->max_seqs = e->max_seqs;
    st->active = atomic_load(&e->active);
    st->ctx_size = e->ctx;
    st->cached_tokens = atomic_load(&e->cached);
    st->steps = atomic_load(&e->steps);
    st->prompt_tokens = atomic_load(&e->prompt_tokens);
    st->generated_tokens = atomic_load(&e->gen_tokens);
    st->graph_replays = atomic_load(&e->graph_replays);
    st->graph_captures = atomic_load(&e->graph_captures);
    st->eager_decode_steps = atomic_load(&e->eager_decode_steps);
    st->chained_decode_steps = atomic_load(&e->chained_steps);
    st->pad_rows = atomic_load(&e->pad_rows);
    st->sampled_device = atomic_load(&e->smp_device);
    st->sampled_host = atomic_load(&e->smp_host);
    const model_info *mi = model_get_info(e->m);
    st->kv_block = mi->kv_block;
    st->kv_blocks = mi->kv_blocks;
    st->kv_blocks_used = atomic_load(&e->kv_used);
    st->kv_blocks_peak = atomic_load(&e->kv_peak);
    st->prefix_cache = e->prefix_on;
    st->prefix_queries = atomic_load(&e->pc_queries);
    st->prefix_hits = atomic_load(&e->pc_hits);
    st->prefix_query_tokens = atomic_load(&e->pc_query_tokens);
    st->prefix_hit_tokens = atomic_load(&e->pc_hit_tokens);
    st->kv_evictions = atomic_load(&e->kv_evictions);
    st->prefix_blocks = atomic_load(&e->pc_nodes);
    st->prefix_snapshots = atomic_load(&e->pc_snaps);
}

static void *engine_thread_main(void *arg) {
    engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && !e->n_run && !e->in_head) pthread_cond_wait(&e->cv, &e->mu);
        engine_seq *in = e->in_head;
        e->in_head = e->in_tail = NULL;
        int stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        sched_admit(e, in);
        if (stop) {
            sched_abort_all(e, "engine stopped");
            break;
        }
        sched_reap_cancelled(e);
        if (e->n_run) sched_step(e);
    }
    return NULL;
}

int engine_create(engine **out, model *m, const tokenizer *tok, const engine_opts *o,
                  strata_err *err) {
    engine *e = calloc(1, sizeof *e);
    int rc;
    if (!e) return strata_err_set(err, STRATA_ENOMEM, "engine: out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    const model_info *mi = model_get_info(m);
    e->m = m;
    e->tok = tok;
    e->vocab = mi->vocab;
    e->ctx = mi->ctx_size;
    e->max_seqs = o->max_seqs > 0 && o->max_seqs < mi->max_seqs ? o->max_seqs : mi->max_seqs;
    e->step_tokens = mi->step_tokens;
    e->prefill_chunk = o->prefill_chunk > 0 ? o->prefill_chunk : mi->step_tokens;
    if (e->step_tokens <= e->max_seqs) {
        rc = strata_err_set(err, STRATA_EINVALID,
                            "engine: the model's step size (%d tokens) must exceed max_seqs (%d)",
                            e->step_tokens, e->max_seqs);
        goto fail;
    }
    if (e->prefill_chunk > e->step_tokens) e->prefill_chunk = e->step_tokens;
    /* prompt logprob rows: bounded memory whatever the vocabulary (32 MiB of f32 rows
     * by default: 33 rows at Qwen3.5's 248k vocabulary, the whole chunk at small ones) */
    e->plp_rows = o->prompt_logprob_rows > 0
                      ? o->prompt_logprob_rows
                      : (int)((32u << 20) / ((size_t)e->vocab * sizeof(float)));
    if (e->plp_rows < 1) e->plp_rows = 1;
    if (e->plp_rows > e->prefill_chunk) e->plp_rows = e->prefill_chunk;
    e->on_slot_free = o->on_slot_free;
    e->on_token_gap = o->on_token_gap;
    e->on_step = o->on_step;
    e->ud = o->ud;
    e->b = model_backend(m);
    e->host_sampling = o->host_sampling;
    for (int i = 0; i < mi->n_eos && i < 8; i++) e->eos[e->n_eos++] = mi->eos[i];
    if (tok && tok_eos_id(tok) >= 0 && e->n_eos < 9) e->eos[e->n_eos++] = tok_eos_id(tok);
    if ((rc = sched_alloc(e, err))) goto fail;
    /* a model without paged layers or recurrent state has nothing such a cache could key */
    if (o->prefix_cache && mi->kv_blocks > 0) {
        int64_t budget = o->prefix_cache_memory > 0 ? o->prefix_cache_memory : (int64_t)1 << 30;
        if ((rc = prefix_init(&e->pc, m, e->max_seqs, budget, o->prefix_interval, err))) goto fail;
        e->prefix_on = 1;
    }
    if (pthread_create(&e->th, NULL, engine_thread_main, e)) {
        rc = strata_err_set(err, STRATA_ENOMEM, "engine: cannot start the step thread");
        goto fail;
    }
    e->started = 1;
    *out = e;
    return 0;
fail:
    engine_destroy(e);
    return rc;
}

void engine_destroy(engine *e) {
    if (!e) return;
    if (e->started) {
        pthread_mutex_lock(&e->mu);
        e->stop = 1;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->th, NULL);
    }
    if (e->prefix_on) prefix_deinit(&e->pc);
    sched_free(e);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}
