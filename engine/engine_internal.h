/* engine_internal.h - what engine.c, seq.c and sched.c share: the engine and sequence
 * structs, the sequence output functions (seq.c) and the step functions (sched.c, take.c).
 * engine.c calls sched.c and seq.c; sched.c calls take.c and seq.c; take.c calls seq.c;
 * seq.c calls none of them. Not for use outside engine/. */
#ifndef STRATA_ENGINE_INTERNAL_H
#define STRATA_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "engine/batch.h"
#include "engine/dsample.h"
#include "engine/engine.h"
#include "engine/prefix.h"
#include "engine/text/detok.h"

/* A step from its launch until the host has taken its tokens (sched.c). A decode step
 * whose tokens the device picks for sure is left in flight, and the next one is launched
 * behind it with its input ids fed on the device; every other step is taken at once. */
typedef struct sched_flight {
    int live;     /* launched, tokens not taken */
    int deferred; /* its graph was launched without waiting: graph_sync first */
    int certain;  /* every row sampled on the device, none can be left to the host */
    int nout;     /* sampling rows (pads included) */
    int n_plp;    /* prompt-logprob rows after them (eager steps only) */
    int dev;      /* rows sampled on the device */
    int graph;    /* engine_step_info.graph */
    int chained;  /* launched while the step before was in flight */
    int n_tokens, n_seqs, n_decode, n_pad; /* n_seqs: the real sequences, pads apart */
    double t_start;
    engine_seq **seq;          /* [max_seqs] each sampling row's sequence; NULL: a pad */
    int32_t *pos;              /* [max_seqs] the row's sequence's positions after the step */
    bk_sample_res *res;        /* [max_seqs] the device's picks */
    sampler_result *pick;      /* [max_seqs] the host sampler's picks */
    const float *sampled_rows; /* model_out.sampled_rows */
} sched_flight;

struct engine_seq {
    engine *e;
    atomic_int refs;
    atomic_int cancelled;
    int submitted;    /* under e->mu */
    engine_seq *next; /* incoming list link, under e->mu */

    /* copied params */
    int32_t *prompt; /* [n_prompt + max_tokens]: the prompt, then each token taken */
    int n_prompt, max_tokens, logprobs, ignore_eos;
    /* prompt logprobs being filled by the step thread, [n_prompt]; allocated at create
     * (never in a step), moved to the pending chunk when the prefill ends; NULL when
     * not wanted or handed over */
    sampler_result *plp;
    int plp_top;       /* alternatives per prompt token */
    int32_t *stop_ids; /* [n_stop_ids] */
    int n_stop_ids;
    sampler *smp;    /* step thread */
    constrain *cons; /* the output's grammar, or NULL (step thread) */
    uint8_t *allow;  /* [vocab] the grammar's mask of a step (with cons) */
    detok *dt;       /* step thread; NULL without a tokenizer */
    void (*wake)(void *ud);
    void (*release)(void *ud);
    void *ud;

    /* step thread state */
    int slot;          /* cache slot, -1 before admission */
    int n_feed;        /* tokens the prefill feeds: the prompt, or after a preemption every token
                 * taken (prompt[0, n_prompt + n_gen)) */
    int n_done;        /* of them in the cache */
    int pos;           /* positions in the cache */
    int32_t last;      /* the sampled token to feed next, once taken (in_flight 0) */
    int in_flight;     /* tokens launched and not taken yet: the next one is fed on the device */
    int dev_sample;    /* seated in the device sampler (dsample_seat succeeded) */
    int n_gen;         /* tokens generated */
    int done;          /* finished: waiting to leave the running list */
    int finish;        /* its ENGINE_FINISH_* once done */
    atomic_int cached; /* prompt positions restored from the prefix cache (read by
                     * engine_seq_cached_tokens from any thread once the prompt is in) */
    int stored;        /* furthest position whose state went to the prefix cache */
    int pend_pos;      /* position of the slot's pending snapshot (0: none) */
    double t_last_tok;

    /* output, under mu */
    pthread_mutex_t mu;
    engine_chunk pending;
    int finish_taken;
    engine_seq_times times;
};

struct engine {
    model *m;
    const tokenizer *tok;
    int vocab, ctx, max_seqs, step_tokens, prefill_chunk;
    int32_t eos[9];
    int n_eos;
    void (*on_slot_free)(void *ud);
    void (*on_token_gap)(void *ud, double seconds);
    int (*on_step)(void *ud, const engine_step_info *si);
    void *ud;
    backend *b; /* the model's, for graphs */

    pthread_t th;
    int started;
    pthread_mutex_t mu; /* guards stop and the incoming list */
    pthread_cond_t cv;
    int stop;
    engine_seq *in_head, *in_tail;
    atomic_int active; /* submitted and not yet freed */
    atomic_llong cached, steps, prompt_tokens, gen_tokens;
    atomic_llong graph_replays, graph_captures, eager_decode_steps, smp_device, smp_host;
    atomic_llong chained_steps, pad_rows;
    atomic_llong pc_queries, pc_hits, pc_query_tokens, pc_hit_tokens, kv_evictions;
    atomic_int kv_used, kv_peak, pc_nodes, pc_snaps;

    /* step thread only, sized at create */
    sched_flight fl[2];       /* the step being built and the one that may be in flight */
    int hold;                 /* on_step asked: finish the step in flight before the next */
    const int32_t *fed;       /* ds.fed when the model takes ids fed on the device, else NULL */
    unsigned char *slot_used; /* [max_seqs] build scratch: slots of the step's sequences */
    engine_seq **run;         /* [max_seqs] running, oldest first */
    int n_run;
    int *free_slots; /* [max_seqs] stack */
    int n_free;
    batch_buf bb;           /* the step's token layout */
    int32_t *b_tokens;      /* [step_tokens] the step's token ids */
    int32_t *b_out_rows;    /* [max_seqs + plp_rows]: sampling rows, then prompt rows */
    int *b_chunk;           /* [max_seqs] prompt tokens fed per running seq this step */
    int plp_rows;           /* prompt-logprob logit rows per step */
    int32_t *b_plp_row;     /* [plp_rows] step token index of each prompt row */
    int32_t *b_plp_idx;     /* [plp_rows] prompt index of the token that row predicts */
    engine_seq **b_plp_seq; /* [plp_rows] */
    float *logits;          /* [max_seqs + plp_rows, vocab] */
    int host_sampling;      /* engine_opts.host_sampling */
    dsample ds;             /* the device sampler's side (ds.b NULL: host sampling only) */
    int kv_promised;        /* build scratch: pool blocks the step's rows will take */
    int starved;            /* build scratch: a sequence waits for blocks */
    int prefix_on;          /* pc is set up */
    prefix_cache pc;
};

/* seq.c */
int engine_seq_emit(engine_seq *s, const char *text, size_t text_len, const char *reasoning,
                    size_t reasoning_len, const sampler_result *tok, int finish, const char *error);
void engine_seq_set_scheduled(engine_seq *s);
/* Emits s's finish (why: the error text, or NULL), marks it done and wakes its consumer;
 * its slot is freed between steps. */
void engine_seq_finish(engine_seq *s, int finish, const char *why);
/* Moves the filled prompt logprobs to the pending output (no allocation). */
void engine_seq_emit_prompt(engine_seq *s);

/* sched.c: step thread */
int sched_alloc(engine *e, strata_err *err);
void sched_free(engine *e);
void sched_admit(engine *e, engine_seq *list);
void sched_reap_cancelled(engine *e);
void sched_abort_all(engine *e, const char *why);
void sched_step(engine *e);

/* take.c: step thread */
/* Takes f's tokens (after graph_sync when its graph was left running): every sequence of
 * a sampling row that is not done gets its token, and on_step is called. On a device
 * failure nothing is taken (f is no longer live either) and the error is returned. */
int take_step(engine *e, sched_flight *f, strata_err *err);
/* s->allow for a sequence with a grammar (take.c): how many tokens may come, or -1 when
 * none may and s was failed. */
int take_allow(engine *e, engine_seq *s);

#endif
