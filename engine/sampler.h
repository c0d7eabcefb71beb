/* sampler.h - turns one row of logits into a token, per sequence.
 *
 * Order of operations (as vLLM / HF): logit_bias; repetition penalty (HF style, over
 * prompt + generated tokens); presence / frequency penalties (OpenAI style, over
 * generated tokens); then greedy when temperature == 0, else temperature, top-k,
 * top-p, min-p and a draw from the request's own stream: Philox keyed by the seed, draw n
 * for the n-th generated token (engine/base/philox.h), the same on every backend. Logprobs are those of the
 * distribution after penalties and bias, before temperature / truncation (as vLLM's
 * default "raw" processed logprobs). Thread: the engine step thread. */
#ifndef STRATA_SAMPLER_H
#define STRATA_SAMPLER_H

#include <stdint.h>

#include "engine/base/err.h"

#define SAMPLER_MAX_TOP_LOGPROBS 20

typedef struct sampler_params {
    float temperature;        /* 0 = greedy (ties: lowest id) */
    int top_k;                /* <= 0: off */
    float top_p;              /* >= 1: off */
    float min_p;              /* <= 0: off */
    float repetition_penalty; /* 1: off; > 0 */
    float presence_penalty;   /* 0: off; [-2, 2] */
    float frequency_penalty;  /* 0: off; [-2, 2] */
    uint64_t seed;            /* the Philox key; same seed, same draws at the same positions */
    int n_logit_bias;
    const int32_t *bias_ids; /* [n_logit_bias], copied at create */
    const float *bias_vals;  /* [n_logit_bias], copied at create */
    int top_logprobs;        /* 0..SAMPLER_MAX_TOP_LOGPROBS alternatives to report */
    int logprobs;            /* 0: skip the chosen token's logprob (a pass over the vocab) */
} sampler_params;

/* Defaults: greedy, every filter off, logprobs computed. */
void sampler_params_default(sampler_params *p);

typedef struct sampler sampler;

typedef struct sampler_logprob {
    int32_t token;
    float logprob;
} sampler_logprob;

typedef struct sampler_result {
    int32_t token;
    float logprob;                                 /* of the chosen token (0 when !logprobs) */
    int n_top;                                     /* = params.top_logprobs */
    sampler_logprob top[SAMPLER_MAX_TOP_LOGPROBS]; /* most likely first */
} sampler_result;

/* Caller frees with sampler_destroy. Validates ranges (STRATA_EINVALID naming the
 * field). All scratch is allocated here, none per sample. */
int sampler_create(sampler **out, const sampler_params *p, int vocab, strata_err *err);
void sampler_destroy(sampler *s);

/* Records a prompt token (repetition penalty only) or a generated token. */
void sampler_accept_prompt(sampler *s, int32_t token);
void sampler_accept(sampler *s, int32_t token);

/* Picks the next token from logits[vocab]; logits is used as scratch (modified).
 * = sampler_process, then sampler_pick. */
void sampler_sample(sampler *s, float *logits, sampler_result *out);
/* Logit bias and penalties, in place: the processed logits. */
void sampler_process(const sampler *s, float *logits);
/* The choice and the logprobs from processed logits (a row the device sampler left). */
void sampler_pick(sampler *s, float *logits, sampler_result *out);

/* What a device sampler needs to pick as this one does (kernels/backend.h, bk_sample_req):
 * the parameters, the counter of the next draw (tokens accepted so far), and the penalty
 * state as out[vocab] = seen | times generated << 1 (returns 0 and writes nothing when no
 * penalty is on). */
const sampler_params *sampler_get_params(const sampler *s);
uint64_t sampler_draws(const sampler *s);
int sampler_counts(const sampler *s, uint32_t *out);
/* 1 when a penalty is on (the state above exists). */
int sampler_counts_on(const sampler *s);
/* One token's entry of that state (0 without penalties). */
uint32_t sampler_count_of(const sampler *s, int32_t token);

#endif
