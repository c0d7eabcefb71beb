/* sched.c - one engine step: pick the batch, launch the model, and take the tokens of the
 * step before (engine/take.c).
 *
 * Batch order: first one decode token per running sequence (so decoding streams
 * advance every step whatever arrives), then prompt chunks of the sequences still in
 * prefill, oldest first, until prefill_chunk tokens (or the model's step size) are
 * used. A long prompt therefore takes several steps and never stalls the others.
 * A sequence that wants prompt logprobs also asks for the logits of its prompt rows;
 * those share a fixed number of rows per step (e->plp_rows), and a chunk that would
 * need more is cut shorter, so the logits buffer stays the size set at create.
 *
 * On a backend with graphs a decode-only step is padded to a batch-size bucket (1, 2, 4,
 * ... max_seqs) with rows in slots no live sequence uses, so one graph per bucket serves
 * every mix of sequences. When the device samples every token of a step for sure (greedy
 * or a top-k it holds, sched_flight.certain) the step is left in flight: the next one is
 * built and launched behind it, its decode tokens fed on the device by the sampler
 * (model_out.fed), and the host reads step t's tokens while step t+1 runs. A sequence
 * that finishes at step t has then been fed once more at t+1; that row is dropped.
 * Step thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

static int sched_flight_alloc(sched_flight *f, size_t S) {
    f->seq = calloc(S, sizeof *f->seq);
    f->pos = calloc(S, sizeof *f->pos);
    f->res = calloc(S, sizeof *f->res);
    f->pick = calloc(S, sizeof *f->pick);
    return f->seq && f->pos && f->res && f->pick ? 0 : -1;
}

static void sched_flight_free(sched_flight *f) {
    free(f->seq);
    free(f->pos);
    free(f->res);
    free(f->pick);
}

/* Graphs hold the addresses of the engine's buffers (the fed ids, the sampler's): none may
 * outlive them, nor be replayed by an engine that did not capture it. */
static void sched_graphs_clear(engine *e) {
    if (e->b && e->b->ops->graph_clear) e->b->ops->graph_clear(e->b);
}

int sched_alloc(engine *e, strata_err *err) {
    size_t S = (size_t)e->max_seqs, T = (size_t)e->step_tokens, R = (size_t)e->plp_rows;
    if (batch_buf_init(&e->bb, e->step_tokens, e->max_seqs, err)) return err->code;
    e->run = calloc(S, sizeof *e->run);
    e->free_slots = calloc(S, sizeof *e->free_slots);
    e->slot_used = calloc(S, 1);
    e->b_out_rows = calloc(S + R, sizeof(int32_t));
    e->b_plp_row = calloc(R, sizeof(int32_t));
    e->b_plp_idx = calloc(R, sizeof(int32_t));
    e->b_plp_seq = calloc(R, sizeof *e->b_plp_seq);
    e->b_chunk = calloc(S, sizeof *e->b_chunk);
    e->b_tokens = calloc(T, sizeof(int32_t));
    e->logits = calloc((S + R) * (size_t)e->vocab, sizeof(float));
    if (!e->run || !e->free_slots || !e->slot_used || !e->b_out_rows || !e->b_chunk ||
        !e->b_tokens || !e->b_plp_row || !e->b_plp_idx || !e->b_plp_seq || !e->logits ||
        sched_flight_alloc(&e->fl[0], S) || sched_flight_alloc(&e->fl[1], S))
        return strata_err_set(err, STRATA_ENOMEM, "engine: out of memory for %d slots",
                              e->max_seqs);
    sched_graphs_clear(e);
    if (!e->host_sampling && dsample_init(&e->ds, e->b, e->max_seqs, e->vocab, err))
        return err->code;
    const model_info *mi = model_get_info(e->m);
    if (e->ds.b && !mi->host_ids && backend_supports(e->b, BK_OP_EMBED_FED, DTYPE_COUNT))
        e->fed = e->ds.fed;
    /* lowest slot on top of the stack, so slot use is easy to follow in tests */
    for (int i = 0; i < e->max_seqs; i++) e->free_slots[i] = e->max_seqs - 1 - i;
    e->n_free = e->max_seqs;
    return 0;
}

void sched_free(engine *e) {
    sched_graphs_clear(e);
    batch_buf_deinit(&e->bb);
    free(e->run);
    free(e->free_slots);
    free(e->slot_used);
    free(e->b_out_rows);
    free(e->b_plp_row);
    free(e->b_plp_idx);
    free(e->b_plp_seq);
    free(e->b_chunk);
    free(e->b_tokens);
    free(e->logits);
    sched_flight_free(&e->fl[0]);
    sched_flight_free(&e->fl[1]);
    dsample_free(&e->ds);
}

/* A new sequence starts from the longest prefix of its prompt the cache holds (never the
 * whole prompt: its last token's logits are needed). Prompt logprobs need every row, so a
 * sequence that wants them computes its prompt. */
static void sched_restore(engine *e, engine_seq *s, int first) {
    if (!e->prefix_on || s->plp) return;
    int hit = prefix_restore(&e->pc, s->slot, s->prompt, s->n_feed, s->n_feed);
    if (hit) {
        s->n_done = s->pos = s->stored = hit;
        atomic_fetch_add(&e->cached, hit);
    }
    if (!first) return; /* a recomputation: not the request's figures */
    atomic_fetch_add(&e->pc_queries, 1);
    atomic_fetch_add(&e->pc_query_tokens, s->n_prompt);
    atomic_store(&s->cached, hit);
    if (!hit) return;
    atomic_fetch_add(&e->pc_hits, 1);
    atomic_fetch_add(&e->pc_hit_tokens, hit);
}

/* The pool's and the cache's figures for engine_get_stats. */
static void sched_kv_stats(engine *e) {
    atomic_store(&e->kv_used, model_kv_held(e->m));
    atomic_store(&e->kv_peak, model_kv_peak(e->m));
    if (!e->prefix_on) return;
    atomic_store(&e->pc_nodes, prefix_nodes(&e->pc));
    atomic_store(&e->pc_snaps, prefix_snapshots(&e->pc));
}

void sched_admit(engine *e, engine_seq *list) {
    while (list) {
        engine_seq *s = list;
        list = s->next;
        s->next = NULL;
        /* engine_submit counted the slot, so the stack cannot be empty */
        s->slot = e->free_slots[--e->n_free];
        /* cleared when taken, not when freed: pad rows run in free slots */
        model_reset_slot(e->m, s->slot);
        s->n_done = s->pos = s->n_gen = s->in_flight = s->stored = s->pend_pos = 0;
        s->n_feed = s->n_prompt;
        sched_restore(e, s, 1);
        for (int i = 0; i < s->n_prompt; i++) sampler_accept_prompt(s->smp, s->prompt[i]);
        strata_err serr = {0}; /* a sequence the device cannot seat samples on the host */
        s->dev_sample = e->ds.b && !dsample_seat(&e->ds, s->slot, s->smp, &serr);
        engine_seq_set_scheduled(s);
        e->run[e->n_run++] = s;
    }
}

/* Frees the slots of finished sequences (between steps, never during one) and drops
 * the engine's references, keeping the running list in admission order. A sequence with
 * a token still in flight stays until that step is taken. */
static void sched_compact(engine *e) {
    int k = 0, freed = 0;
    for (int i = 0; i < e->n_run; i++) {
        engine_seq *s = e->run[i];
        if (!s->done || s->in_flight) {
            e->run[k++] = s;
            continue;
        }
        /* the state a finished sequence passed last goes to the cache (a failed one's
         * caches are not trusted), then its blocks go back to the pool */
        if (e->prefix_on && s->finish != ENGINE_FINISH_ERROR && s->pend_pos > s->stored &&
            s->pend_pos <= s->n_prompt + s->n_gen)
            prefix_commit(&e->pc, s->slot, s->prompt, s->pend_pos);
        model_release_slot(e->m, s->slot);
        e->free_slots[e->n_free++] = s->slot;
        atomic_fetch_sub(&e->cached, s->pos);
        atomic_fetch_sub(&e->active, 1);
        engine_seq_release(s);
        freed++;
    }
    e->n_run = k;
    sched_kv_stats(e);
    if (freed && e->on_slot_free) e->on_slot_free(e->ud);
}

/* The step in flight, if any. */
static sched_flight *sched_in_flight(engine *e) {
    return e->fl[0].live ? &e->fl[0] : e->fl[1].live ? &e->fl[1] : NULL;
}

/* Every running sequence finishes with an error (the caches of a failed step are
 * unreliable), the step in flight is taken (its rows dropped) and the slots are freed. */
static void sched_fail_all(engine *e, const char *why) {
    for (int i = 0; i < e->n_run; i++)
        if (!e->run[i]->done) engine_seq_finish(e->run[i], ENGINE_FINISH_ERROR, why);
    sched_flight *f = sched_in_flight(e);
    strata_err ignored = {0};
    if (f) take_step(e, f, &ignored);
    sched_compact(e);
}

/* Takes f's tokens; a device failure on the way fails every sequence. */
static void sched_take(engine *e, sched_flight *f) {
    strata_err err = {0};
    if (!take_step(e, f, &err)) return;
    char why[300];
    snprintf(why, sizeof why, "model step failed: %.200s", err.msg);
    sched_fail_all(e, why);
}

void sched_reap_cancelled(engine *e) {
    int any = 0;
    for (int i = 0; i < e->n_run; i++) {
        engine_seq *s = e->run[i];
        if (!s->done && atomic_load(&s->cancelled)) {
            engine_seq_finish(s, ENGINE_FINISH_ABORT, "cancelled");
            any = 1;
        }
    }
    if (any) sched_compact(e);
}

void sched_abort_all(engine *e, const char *why) {
    for (int i = 0; i < e->n_run; i++)
        if (!e->run[i]->done) engine_seq_finish(e->run[i], ENGINE_FINISH_ABORT, why);
    sched_flight *f = sched_in_flight(e);
    if (f) sched_take(e, f);
    sched_compact(e);
}

/* The batch size a decode step of n sequences is padded to: a power of two, or max_seqs. */
static int sched_bucket(const engine *e, int n) {
    int b = 1;
    while (b < n) b <<= 1;
    return b < e->max_seqs ? b : e->max_seqs;
}

/* Free slots keep the block a pad row took; they give it back when the pool runs short. */
static void sched_release_free_slots(engine *e) {
    for (int i = 0; i < e->n_free; i++) model_release_slot(e->m, e->free_slots[i]);
}

/* Promises the step the blocks slot needs to reach position end - 1, making room in the
 * prefix cache when the pool is short; -1 when they cannot be had. */
static int sched_blocks(engine *e, int slot, int end) {
    int need = model_kv_need(e->m, slot, end);
    if (!need) return 0;
    if (model_kv_free(e->m) - e->kv_promised < need) {
        sched_release_free_slots(e);
        if (e->prefix_on) prefix_make_room(&e->pc, e->kv_promised + need);
    }
    if (model_kv_free(e->m) - e->kv_promised < need) return -1;
    e->kv_promised += need;
    return 0;
}

/* The longest prompt chunk from s->n_done of at most c tokens whose blocks the pool has
 * (0: none), cut at the prefix cache's next snapshot point. */
static int sched_chunk(engine *e, engine_seq *s, int c) {
    if (e->prefix_on) {
        int B = e->pc.block, iv = e->pc.interval, at = s->n_done;
        int last = (s->n_feed - 1) / B * B, next = (at / iv + 1) * iv;
        if (last > at && last < at + c) c = last - at;
        if (next < at + c) c = next - at;
    }
    if (!sched_blocks(e, s->slot, s->pos + c)) return c;
    const int32_t *ids;
    int have = model_kv_table(e->m, s->slot, &ids), B = model_get_info(e->m)->kv_block;
    int avail = model_kv_free(e->m) - e->kv_promised;
    int fit = (have + avail) * B - s->pos;
    if (fit <= 0) return 0;
    if (sched_blocks(e, s->slot, s->pos + fit)) return 0;
    return fit < c ? fit : c;
}

/* Before a step feeds s at a block boundary: a prompt's state at a snapshot point goes to
 * the prefix cache (its tokens are known); a decoding sequence's to its pending buffer
 * (the token before may still be on the device), committed when it finishes. */
static void sched_snapshot(engine *e, engine_seq *s) {
    if (!e->prefix_on || s->pos == 0 || s->pos % e->pc.block || s->pos <= s->stored) return;
    if (s->n_done < s->n_feed) {
        int last = (s->n_feed - 1) / e->pc.block * e->pc.block;
        if (s->pos % e->pc.interval && s->pos != last) return;
        prefix_store(&e->pc, s->slot, s->prompt, s->pos);
        s->stored = s->pos;
    } else if (s->pos > s->pend_pos) {
        prefix_save_pending(&e->pc, s->slot);
        s->pend_pos = s->pos;
    }
}

/* Lays out the next step in e->bb / e->b_tokens / e->b_out_rows and f: decode rows, then
 * prompt chunks, then pad rows. Returns the step's tokens (0: nothing to run). */
static int sched_build(engine *e, sched_flight *f) {
    int nout = 0, n_decode = 0, n_plp = 0;
    *f = (sched_flight){.seq = f->seq, .pos = f->pos, .res = f->res, .pick = f->pick};
    e->kv_promised = 0;
    e->starved = 0;
    batch_buf_clear(&e->bb);
    memset(e->slot_used, 0, (size_t)e->max_seqs);
    /* decode tokens first: one per sequence whose prompt is in the cache and that may
     * take one more (a sequence at its last token or the context end waits for it) */
    for (int i = 0; i < e->n_run; i++) {
        engine_seq *s = e->run[i];
        e->b_chunk[i] = 0;
        if (s->done || s->n_done < s->n_feed) continue;
        if (s->n_gen + s->in_flight >= s->max_tokens || s->pos >= e->ctx) continue;
        if (sched_blocks(e, s->slot, s->pos + 1)) {
            e->starved = 1; /* waits for a block */
            continue;
        }
        sched_snapshot(e, s);
        int nt = batch_buf_add(&e->bb, s->slot, s->pos, 1);
        e->b_tokens[nt] = s->in_flight ? -1 : s->last; /* -1: the device feeds it */
        e->b_out_rows[nout] = nt;
        f->seq[nout++] = s;
        e->slot_used[s->slot] = 1;
        e->b_chunk[i] = -1;
        n_decode++;
    }
    /* then prompt chunks, oldest first, within the prefill budget */
    int budget = e->prefill_chunk, plp_left = e->plp_rows;
    for (int i = 0; i < e->n_run && budget > 0 && e->bb.bt.n_tokens < e->step_tokens; i++) {
        engine_seq *s = e->run[i];
        if (s->done || s->n_done >= s->n_feed) continue;
        int first = e->bb.bt.n_tokens;
        int c = s->n_feed - s->n_done;
        if (c > budget) c = budget;
        if (c > e->step_tokens - first) c = e->step_tokens - first;
        if (!(c = sched_chunk(e, s, c))) {
            e->starved = 1;
            continue;
        }
        if (s->plp) {
            /* row j predicts prompt token n_done + j + 1; the prompt's last row is the
             * sampling row below. Cut the chunk to the prompt rows left this step. */
            int need = s->n_feed - 1 - s->n_done;
            if (need > c) need = c;
            if (need > plp_left) c = need = plp_left;
            if (!c) continue; /* its promised blocks are taken by a later step */
            for (int j = 0; j < need; j++) {
                e->b_plp_row[n_plp] = first + j;
                e->b_plp_idx[n_plp] = s->n_done + j + 1;
                e->b_plp_seq[n_plp++] = s;
            }
            plp_left -= need;
        }
        sched_snapshot(e, s);
        batch_buf_add(&e->bb, s->slot, s->pos, c);
        memcpy(e->b_tokens + first, s->prompt + s->n_done, (size_t)c * sizeof *e->b_tokens);
        if (s->n_done + c == s->n_feed && s->max_tokens > 0) {
            e->b_out_rows[nout] = first + c - 1;
            f->seq[nout++] = s;
        }
        e->b_chunk[i] = c;
        budget -= c;
    }
    int nt = e->bb.bt.n_tokens;
    f->n_seqs = e->bb.bt.n_seqs;
    f->n_decode = n_decode;
    f->n_plp = n_plp;
    /* Pad a decode-only step to its bucket. In such a step every running sequence left out
     * is finished or finishing (never fed again), so its slot is as free as a free one. */
    if (nt && n_decode == f->n_seqs && backend_supports(e->b, BK_OP_GRAPHS, DTYPE_COUNT)) {
        int bucket = sched_bucket(e, n_decode);
        for (int slot = 0; slot < e->max_seqs && n_decode + f->n_pad < bucket; slot++) {
            if (e->slot_used[slot]) continue;
            if (sched_blocks(e, slot, 1)) break;
            int t = batch_buf_add(&e->bb, slot, 0, 1);
            e->b_tokens[t] = 0;
            e->b_out_rows[nout] = t;
            f->seq[nout++] = NULL;
            f->n_pad++;
        }
        nt = e->bb.bt.n_tokens;
    }
    f->nout = nout;
    f->n_tokens = nt;
    /* the prompt rows' logits follow the sampling rows' */
    for (int k = 0; k < n_plp; k++) e->b_out_rows[nout + k] = e->b_plp_row[k];
    return nt;
}

/* The device samples the step's rows when every sequence in it is seated there; then the
 * requests are filled, with the grammar masks of constrained sequences. f->certain when the
 * next step may be fed on the device. */
static void sched_requests(engine *e, sched_flight *f) {
    f->dev = e->ds.b && f->nout > 0;
    for (int r = 0; r < f->nout && f->dev; r++)
        if (f->seq[r] && !f->seq[r]->dev_sample) f->dev = 0;
    f->certain = f->dev && e->fed != NULL;
    if (!f->dev) return;
    for (int r = 0; r < f->nout; r++) {
        engine_seq *s = f->seq[r];
        if (!s) {
            dsample_pad(&e->ds, r);
            continue;
        }
        dsample_request(&e->ds, r, s->slot, s->smp, s->in_flight);
        if (!dsample_certain(&e->ds, s->smp)) f->certain = 0;
        if (s->cons) {
            /* the mask follows the token before, which the host has taken (a grammar's
             * step is never certain); the device applies it, the logits stay there */
            f->certain = 0;
            strata_err err = {0};
            if (take_allow(e, s) < 0) dsample_pad(&e->ds, r);
            else if (dsample_mask(&e->ds, r, s->slot, s->allow, &err))
                engine_seq_finish(s, ENGINE_FINISH_ERROR, err.msg), dsample_pad(&e->ds, r);
        }
    }
}

/* Runs f's forward. A decode-only step has the same op sequence whenever it has the same
 * shape, so where the backend has graphs it is captured once per (batch-size bucket,
 * sampled on the device or not) and replayed after; a replay the backend refuses runs
 * again eagerly. A certain step's graph is left running (f->deferred). */
static int sched_launch(engine *e, sched_flight *f, strata_err *err) {
    bk_batch *bt = &e->bb.bt;
    model_out out = {.logits = e->logits,
                     .n_sample = f->dev ? f->nout : 0,
                     .req = e->ds.req,
                     .res = f->res,
                     .fed = e->fed};
    int n_out = f->nout + f->n_plp, rc;
    f->graph = -1;
    f->t_start = strata_now();
    if (f->n_decode == f->n_seqs && !f->n_plp &&
        backend_supports(e->b, BK_OP_GRAPHS, DTYPE_COUNT)) {
        strata_err gerr = {0};
        int end = 0, w = 0;
        for (int s = 0; s < bt->n_seqs; s++)
            if (bt->pos0[s] + bt->len[s] > end) end = bt->pos0[s] + bt->len[s];
        for (int bw = model_kv_step_width(e->m, end); bw > 1; bw >>= 1) w++;
        /* the block table's width sizes the step's copies: part of the op sequence */
        uint64_t key = (uint64_t)f->dev << 63 | (uint64_t)w << 48 | (uint64_t)bt->n_seqs << 32 |
                       (uint64_t)n_out;
        int g = backend_graph_begin(e->b, key, &gerr);
        if (g >= 0) {
            rc = model_forward_to(e->m, bt, e->b_tokens, e->b_out_rows, n_out, &out, err);
            if (!backend_graph_end(e->b, !f->certain, &gerr) && !rc) {
                f->graph = g;
                f->deferred = f->certain;
                f->sampled_rows = out.sampled_rows;
                return 0;
            }
        }
    }
    rc = model_forward_to(e->m, bt, e->b_tokens, e->b_out_rows, n_out, &out, err);
    f->sampled_rows = out.sampled_rows;
    return rc;
}

/* What a launched step moves: positions, prompt progress, tokens in flight. */
static void sched_advance(engine *e, sched_flight *f) {
    for (int i = 0; i < e->n_run; i++) {
        engine_seq *s = e->run[i];
        int c = e->b_chunk[i] < 0 ? 1 : e->b_chunk[i];
        if (!e->b_chunk[i]) continue;
        s->pos += c;
        atomic_fetch_add(&e->cached, c);
        if (e->b_chunk[i] < 0) continue;
        s->n_done += c;
        atomic_fetch_add(&e->prompt_tokens, c);
    }
    for (int r = 0; r < f->nout; r++) {
        engine_seq *s = f->seq[r];
        if (!s) continue;
        s->in_flight++;
        f->pos[r] = s->pos;
    }
    f->live = 1;
}

/* No sequence could be fed for want of kv blocks (each holds some, none can grow): the
 * youngest gives its blocks and state up and computes them again later, from the prefix
 * cache where it can: its prompt and every token it was given are fed again, and the last
 * one's logits pick its next token as they would have (the sampler's history and draw
 * count are kept, and on the CPU the recomputed state is the same to the bit). */
static void sched_unstarve(engine *e) {
    int live = 0;
    for (int i = 0; i < e->n_run; i++) live += !e->run[i]->done;
    for (int i = e->n_run - 1; i >= 0; i--) {
        engine_seq *s = e->run[i];
        if (s->done || s->in_flight || s->pos == 0) continue;
        atomic_fetch_add(&e->kv_evictions, 1);
        if (live < 2) { /* alone, it cannot be short of blocks others hold: a bug */
            engine_seq_finish(s, ENGINE_FINISH_ERROR, "the kv cache is full (--kv-cache-memory)");
            return;
        }
        atomic_fetch_sub(&e->cached, s->pos);
        model_reset_slot(e->m, s->slot);
        s->n_feed = s->n_prompt + s->n_gen;
        s->n_done = s->pos = s->stored = s->pend_pos = 0;
        sched_restore(e, s, 0);
        return;
    }
}

void sched_step(engine *e) {
    sched_flight *prev = sched_in_flight(e);
    /* The next step may run behind the one in flight only when the device has picked
     * that one's tokens for sure: they are its input. */
    int hold = e->hold;
    e->hold = 0;
    if (prev && (!prev->certain || hold)) {
        sched_take(e, prev);
        prev = NULL;
    }
    sched_flight *f = prev == &e->fl[0] ? &e->fl[1] : &e->fl[0];
    if (!sched_build(e, f)) {
        if (prev) sched_take(e, prev);
        if (!prev && e->starved) sched_unstarve(e);
        sched_compact(e);
        return;
    }
    sched_requests(e, f);
    f->chained = prev != NULL;
    strata_err err = {0};
    int rc = sched_launch(e, f, &err);
    atomic_fetch_add(&e->steps, 1);
    if (rc) {
        char why[300];
        snprintf(why, sizeof why, "model step failed: %.200s", err.msg);
        sched_fail_all(e, why);
        return;
    }
    sched_advance(e, f);
    if (prev) sched_take(e, prev);
    if (!f->deferred && f->live) sched_take(e, f);
    sched_compact(e);
}
