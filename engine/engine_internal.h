/* engine_internal.h - what engine.c, seq.c and sched.c share: the engine and sequence
 * structs, the sequence output functions (seq.c) and the step functions (sched.c).
 * engine.c calls sched.c and seq.c; sched.c calls seq.c; seq.c calls neither. Not for
 * use outside engine/. */
#ifndef STRATA_ENGINE_INTERNAL_H
#define STRATA_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "engine/batch.h"
#include "engine/dsample.h"
#include "engine/engine.h"
#include "engine/text/detok.h"

struct engine_seq {
    engine *e;
    atomic_int refs;
    atomic_int cancelled;
    int submitted;    /* under e->mu */
    engine_seq *next; /* incoming list link, under e->mu */

    /* copied params */
    int32_t *prompt; /* [n_prompt] */
    int n_prompt, max_tokens, logprobs, ignore_eos;
    /* prompt logprobs being filled by the step thread, [n_prompt]; allocated at create
     * (never in a step), moved to the pending chunk when the prefill ends; NULL when
     * not wanted or handed over */
    sampler_result *plp;
    int plp_top;       /* alternatives per prompt token */
    int32_t *stop_ids; /* [n_stop_ids] */
    int n_stop_ids;
    sampler *smp; /* step thread */
    detok *dt;    /* step thread; NULL without a tokenizer */
    void (*wake)(void *ud);
    void (*release)(void *ud);
    void *ud;

    /* step thread state */
    int slot;       /* cache slot, -1 before admission */
    int n_done;     /* prompt tokens in the cache */
    int pos;        /* positions in the cache */
    int32_t last;   /* the sampled token to feed next */
    int dev_sample; /* seated in the device sampler (dsample_seat succeeded) */
    int n_gen;      /* tokens generated */
    int done;       /* finished: waiting to leave the running list */
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
    void (*on_step)(void *ud, const engine_step_info *si);
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

    /* step thread only, sized at create */
    engine_seq **run; /* [max_seqs] running, oldest first */
    int n_run;
    int *free_slots; /* [max_seqs] stack */
    int n_free;
    batch_buf bb;           /* the step's token layout */
    int32_t *b_tokens;      /* [step_tokens] the step's token ids */
    int32_t *b_out_rows;    /* [max_seqs + plp_rows]: sampling rows, then prompt rows */
    engine_seq **b_out_seq; /* [max_seqs] */
    int *b_chunk;           /* [max_seqs] prompt tokens fed per running seq this step */
    int plp_rows;           /* prompt-logprob logit rows per step */
    int32_t *b_plp_row;     /* [plp_rows] step token index of each prompt row */
    int32_t *b_plp_idx;     /* [plp_rows] prompt index of the token that row predicts */
    engine_seq **b_plp_seq; /* [plp_rows] */
    float *logits;          /* [max_seqs + plp_rows, vocab] */
    int host_sampling;      /* engine_opts.host_sampling */
    dsample ds;             /* the device sampler's side (ds.b NULL: host sampling only) */
};

/* seq.c */
int engine_seq_emit(engine_seq *s, const char *text, size_t text_len, const char *reasoning,
                    size_t reasoning_len, const sampler_result *tok, int finish, const char *error);
void engine_seq_set_scheduled(engine_seq *s);
/* Moves the filled prompt logprobs to the pending output (no allocation). */
void engine_seq_emit_prompt(engine_seq *s);

/* sched.c: step thread */
int sched_alloc(engine *e, strata_err *err);
void sched_free(engine *e);
void sched_admit(engine *e, engine_seq *list);
void sched_reap_cancelled(engine *e);
void sched_abort_all(engine *e, const char *why);
void sched_step(engine *e);

#endif
