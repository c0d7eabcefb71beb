/* engine.h - the step thread: continuous batching over a model's cache slots.
 *
 * One engine drives one model on one thread. Each step mixes one decode token per
 * running sequence with at most prefill_chunk prompt tokens (chunked prefill, oldest
 * sequence first), runs model_forward once (a decode-only step replays a captured
 * graph where the backend has graphs), samples every sequence that produced a row,
 * detokenizes (stop strings, reasoning split) and appends the result to the
 * sequence's output, then calls its wake function. Nothing polls: the thread sleeps
 * on a condition variable while it has no work. The server, `strata generate` and
 * `strata bench` all run their sequences through this one loop.
 *
 * Sequences are reference counted: the creator holds one reference, the engine holds
 * one from engine_submit until the sequence finished and its slot is free again.
 * Cancellation only sets a flag; the step thread frees the slot between steps.
 * Threads: engine_create / engine_destroy on one owner thread; engine_seq_* and
 * engine_submit from any thread (the server: HTTP threads create, the loop thread
 * submits, the connection takes output). Callbacks run on the step thread. */
#ifndef STRATA_ENGINE_H
#define STRATA_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/clock.h" /* engine_seq_times and engine_step_info are strata_now() */
#include "engine/base/err.h"
#include "engine/base/strbuf.h"
#include "engine/constrain/constrain.h"
#include "models/model.h"
#include "engine/sampler.h"
#include "engine/text/tokenizer.h"

typedef struct engine engine;
typedef struct engine_seq engine_seq;

#define ENGINE_FINISH_LIST(X)                                                                      \
    X(NONE, "none")                                                                                \
    X(STOP, "stop")                                                                                \
    X(LENGTH, "length")                                                                            \
    X(ABORT, "abort")                                                                              \
    X(ERROR, "error")

enum {
#define ENGINE_FINISH_ENUM(name, text) ENGINE_FINISH_##name,
    ENGINE_FINISH_LIST(ENGINE_FINISH_ENUM)
#undef ENGINE_FINISH_ENUM
};
const char *engine_finish_name(int finish); /* "stop", "length", ...; never NULL */

/* What one step did, for engine_opts.on_step. */
typedef struct engine_step_info {
    int n_tokens;       /* tokens the forward ran, pad rows included */
    int n_seqs;         /* sequences in it, pad rows not included */
    int n_decode;       /* of them, sequences that fed one sampled token */
    int n_pad;          /* rows that only filled the step to its graph's batch size */
    int graph;          /* 1 replayed a captured graph, 0 captured one, -1 ran eagerly */
    int chained;        /* launched while the step before ran: its decode tokens were fed
                         * on the device, before the host had read them */
    int sampled_device; /* tokens the backend's sampler picked */
    int sampled_host;   /* tokens the host sampler picked (rows downloaded) */
    /* strata_now() at the step's launch (batch, forward) and when its tokens were taken */
    double t_start, t_end;
} engine_step_info;

typedef struct engine_opts {
    int max_seqs;      /* running sequences at most (<= the model's slots; 0 = all) */
    int prefill_chunk; /* prompt tokens per step (clamped to the model's step_tokens) */
    /* Logit rows per step for prompt logprobs (engine_seq_params.prompt_logprobs); the
     * logits buffer holds max_seqs + this many rows, allocated here. A prompt chunk
     * that needs more rows is cut shorter. 0 = as many as fit in 32 MiB of logits,
     * at most prefill_chunk. */
    int prompt_logprob_rows;
    /* 1: sample on the host even where the backend has a sampler (comparisons, and a way
     * out should the device sampler misbehave) */
    int host_sampling;
    /* The prefix cache (engine/prefix.h): 1 to reuse the kv blocks and recurrent state of
     * prompts seen before; its state snapshots (one pending per slot included) take at
     * most prefix_cache_memory bytes of backend memory (0: 1 GiB; slots + 1 at least), taken at prefill every prefix_interval positions (0: 1024),
     * at each prompt's last block boundary and at a finished sequence's. */
    int prefix_cache;
    int64_t prefix_cache_memory;
    int prefix_interval;
    /* Called on the step thread after a slot became free (a sequence finished or was
     * cancelled); the server uses it to admit waiting requests. May be NULL. */
    void (*on_slot_free)(void *ud);
    /* Called on the step thread with the gap between two tokens of one sequence. */
    void (*on_token_gap)(void *ud, double seconds);
    /* Called on the step thread after every step's tokens were taken. The step after it
     * may already run on the backend (launched behind it); a nonzero return asks the
     * engine to finish that one before it launches another, so the next call comes with
     * nothing on the backend and a benchmark may measure from there. May be NULL. */
    int (*on_step)(void *ud, const engine_step_info *si);
    void *ud;
} engine_opts;

/* Starts the step thread over m (borrowed, used only by that thread from now on until
 * engine_destroy) and tok (borrowed, may be NULL: then outputs are "[id]" text and
 * stop strings are not matched). Caller frees with engine_destroy. */
int engine_create(engine **out, model *m, const tokenizer *tok, const engine_opts *o,
                  strata_err *err);
/* Stops the thread; sequences still queued or running finish with ENGINE_FINISH_ABORT
 * (their wake functions run), then the engine is freed. Accepts NULL. */
void engine_destroy(engine *e);

typedef struct engine_seq_params {
    const int32_t *prompt; /* [n_prompt] token ids, copied; n_prompt >= 1 */
    int n_prompt;
    /* >= 0; generation also stops at the context end. 0: only prefill the prompt (for
     * its logprobs) and finish with ENGINE_FINISH_LENGTH, sampling nothing. */
    int max_tokens;
    sampler_params sampling;
    int logprobs; /* record the sampler result of each token */
    /* Also record log p(prompt[i] | prompt[<i]) of every prompt token with its
     * sampling.top_logprobs alternatives, from the raw logits (no bias or penalty, as
     * vLLM's prompt_logprobs); delivered all at once when the prefill ends. */
    int prompt_logprobs;
    int n_stop;
    const char *const *stop; /* stop strings, copied */
    int n_stop_ids;
    const int32_t *stop_ids; /* extra stop token ids besides the model's eos, copied */
    int ignore_eos;          /* do not stop on the model's eos ids */
    int skip_special;        /* drop special tokens from the text */
    int split_reasoning;     /* <think>...</think> text goes to reasoning */
    int start_in_reasoning;  /* the prompt already opened <think> */
    /* A grammar the output must follow (engine/constrain): only tokens that keep it a
     * prefix of the grammar's language are sampled (on the host), and the sequence stops
     * when the grammar is complete. engine_seq_create takes it over on success (it is then
     * freed with the sequence); on failure the caller still owns it. NULL: none. */
    constrain *cons;
} engine_seq_params;

/* wake(ud) runs on the step thread after new output was appended (and after the
 * finish); release(ud) runs once, on whichever thread drops the last reference, when
 * the sequence is freed. Both may be NULL. Validates params (STRATA_EINVALID naming
 * the field, STRATA_ERANGE when prompt + max_tokens exceed the context). Any thread.
 * The caller holds the one reference; drop it with engine_seq_release. */
int engine_seq_create(engine *e, const engine_seq_params *p, void (*wake)(void *ud),
                      void (*release)(void *ud), void *ud, engine_seq **out, strata_err *err);

/* Hands s to the step thread (the engine takes its own reference). STRATA_EBUSY when
 * every slot is taken or reserved (see engine_free_slots), STRATA_ESTATE when the
 * engine is stopping or s was submitted before. Any thread. */
int engine_submit(engine *e, engine_seq *s, strata_err *err);

/* Asks the step thread to drop s: queued or running, it finishes with
 * ENGINE_FINISH_ABORT before the next step and its slot is freed. Any thread;
 * idempotent; no effect after it finished. */
void engine_seq_cancel(engine_seq *s);

/* Drops the caller's reference. Any thread. Accepts NULL. */
void engine_seq_release(engine_seq *s);

/* Output taken from a sequence. The consumer owns the buffers; engine_seq_take swaps
 * them with the sequence's pending buffers, so steady streaming allocates nothing. */
typedef struct engine_chunk {
    strbuf text;         /* new content bytes */
    strbuf reasoning;    /* new reasoning bytes */
    sampler_result *tok; /* one per new token when params.logprobs */
    int n_tok, tok_cap;
    /* prompt logprobs (params.prompt_logprobs), in the one take with prompt_done set:
     * [n_prompt_tok] = one per prompt token; prompt_tok[0] has n_top = -1 and logprob 0
     * since nothing predicts the first token. Owned by the chunk like the rest. */
    sampler_result *prompt_tok;
    int n_prompt_tok;
    int prompt_done; /* this take carries prompt_tok: the prompt is in the cache */
    int n_new;       /* tokens generated since the previous take */
    int n_generated; /* tokens generated in total */
    int finish;      /* ENGINE_FINISH_* once the sequence ended, else NONE */
    char error[256]; /* ENGINE_FINISH_ERROR: why */
} engine_chunk;

void engine_chunk_init(engine_chunk *c);
void engine_chunk_deinit(engine_chunk *c);

/* Moves everything appended since the last take into c (replacing c's contents).
 * Returns 1 when c holds something new (output or the finish), 0 when not. */
int engine_seq_take(engine_seq *s, engine_chunk *c);

/* Timestamps (CLOCK_MONOTONIC seconds; 0 when not reached yet). */
typedef struct engine_seq_times {
    double scheduled; /* took a slot */
    double first_token;
    double finished;
} engine_seq_times;
void engine_seq_get_times(engine_seq *s, engine_seq_times *t);
/* Prompt tokens restored from the prefix cache instead of computed (usage's
 * cached_tokens); final once the first token or the finish was taken. */
int engine_seq_cached_tokens(engine_seq *s);

/* Load, for admission and metrics. Any thread (atomics, may be a step stale). */
typedef struct engine_stats {
    int max_seqs;
    int active; /* submitted and not yet freed */
    int ctx_size;
    int64_t cached_tokens; /* positions held in the slots of running sequences */
    int64_t steps;
    int64_t prompt_tokens;    /* prompt tokens processed so far */
    int64_t generated_tokens; /* tokens sampled so far */
    /* decode steps that replayed a captured graph, captured one, or ran eagerly (on a
     * backend with graphs, eager decode steps are the fallback to watch) */
    int64_t graph_replays, graph_captures, eager_decode_steps;
    /* decode steps launched while the step before ran (their tokens fed on the device) */
    int64_t chained_decode_steps;
    int64_t pad_rows; /* rows that filled decode steps up to their graph's batch size */
    int64_t sampled_device, sampled_host; /* tokens picked by the backend's sampler / the host's */
    /* the paged kv pool: blocks of kv_block positions, held by sequences now (blocks only
     * the prefix cache holds are free to take), held by anyone at most */
    int kv_block, kv_blocks, kv_blocks_used, kv_blocks_peak;
    /* the prefix cache: requests that looked (queries) and found a prefix (hits), prompt
     * tokens looked up and restored, sequences that gave up their blocks for others
     * (kv_evictions), cached blocks and state snapshots held */
    int prefix_cache;
    int64_t prefix_queries, prefix_hits, prefix_query_tokens, prefix_hit_tokens, kv_evictions;
    int prefix_blocks, prefix_snapshots;
} engine_stats;
void engine_get_stats(engine *e, engine_stats *st);
int engine_free_slots(engine *e);

#endif
