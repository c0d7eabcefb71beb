/* dsample.c - the device sampler's bookkeeping (see dsample.h).
 *
 * A slot's counts are uploaded whole when a sequence with penalties takes it (its prompt
 * marked seen), then advanced by the device for every token it picks; the bias list is
 * uploaded once per sequence. Both happen between steps, never inside a captured graph,
 * and the requests that point at them are staged data, so a graph captured for one set of
 * sequences replays for any other. */
#include "engine/dsample.h"

#include <stdlib.h>
#include <string.h>

int dsample_init(dsample *d, backend *b, int slots, int vocab, strata_err *err) {
    memset(d, 0, sizeof *d);
    if (!b->ops->sample) return 0;
    const backend_ops *o = b->ops;
    size_t nb = (size_t)slots * DSAMPLE_MAX_BIAS;
    d->slots = slots;
    d->vocab = vocab;
    d->bias_ids = o->alloc(b, nb * sizeof(int32_t));
    d->bias_vals = o->alloc(b, nb * sizeof(float));
    d->fed = o->alloc(b, (size_t)slots * sizeof(int32_t));
    d->host_row = malloc(sizeof(uint32_t) * (size_t)vocab);
    d->row = malloc(sizeof(float) * (size_t)vocab);
    d->req = calloc((size_t)slots, sizeof *d->req);
    d->b = b;
    if (!d->bias_ids || !d->bias_vals || !d->fed || !d->host_row || !d->row || !d->req) {
        dsample_free(d);
        return strata_err_set(err, STRATA_ENOMEM, "engine: out of memory for the device sampler");
    }
    return 0;
}

void dsample_free(dsample *d) {
    backend *b = d->b;
    if (b) {
        if (d->bias_ids) b->ops->free(b, d->bias_ids);
        if (d->bias_vals) b->ops->free(b, d->bias_vals);
        if (d->counts) b->ops->free(b, d->counts);
        if (d->fed) b->ops->free(b, d->fed);
        if (d->allow) b->ops->free(b, d->allow);
    }
    free(d->host_row);
    free(d->bits);
    free(d->row);
    free(d->req);
    memset(d, 0, sizeof *d);
}

void dsample_req_of(const sampler *smp, bk_sample_req *q) {
    const sampler_params *p = sampler_get_params(smp);
    *q = (bk_sample_req){.temperature = p->temperature,
                         .top_p = p->top_p,
                         .min_p = p->min_p,
                         .top_k = p->top_k,
                         .repetition_penalty = p->repetition_penalty,
                         .presence_penalty = p->presence_penalty,
                         .frequency_penalty = p->frequency_penalty,
                         .top_logprobs = p->top_logprobs,
                         .logprobs = p->logprobs,
                         .n_bias = p->n_logit_bias,
                         .seed = p->seed,
                         .draw = sampler_draws(smp)};
}

int dsample_seat(dsample *d, int slot, const sampler *smp, strata_err *err) {
    const backend_ops *o = d->b->ops;
    const sampler_params *p = sampler_get_params(smp);
    if (p->n_logit_bias > DSAMPLE_MAX_BIAS)
        return strata_err_set(err, STRATA_ERANGE, "%d logit_bias entries: more than %d",
                              p->n_logit_bias, DSAMPLE_MAX_BIAS);
    size_t at = (size_t)slot * DSAMPLE_MAX_BIAS;
    if (p->n_logit_bias) {
        o->upload(d->b, d->bias_ids + at, p->bias_ids, sizeof(int32_t) * (size_t)p->n_logit_bias);
        o->upload(d->b, d->bias_vals + at, p->bias_vals, sizeof(float) * (size_t)p->n_logit_bias);
    }
    if (!sampler_counts(smp, d->host_row)) return 0;
    if (!d->counts) {
        d->counts = o->alloc(d->b, sizeof(uint32_t) * (size_t)d->slots * (size_t)d->vocab);
        if (!d->counts)
            return strata_err_set(err, STRATA_ENOMEM,
                                  "no backend memory for the penalty counts of %d slots", d->slots);
    }
    o->upload(d->b, d->counts + (size_t)slot * (size_t)d->vocab, d->host_row,
              sizeof(uint32_t) * (size_t)d->vocab);
    return 0;
}

void dsample_request(dsample *d, int r, int slot, const sampler *smp, int pending) {
    bk_sample_req *q = &d->req[r];
    dsample_req_of(smp, q);
    q->draw += (uint64_t)pending;
    q->feed = d->fed + slot;
    q->bias_ids = d->bias_ids + (size_t)slot * DSAMPLE_MAX_BIAS;
    q->bias_vals = d->bias_vals + (size_t)slot * DSAMPLE_MAX_BIAS;
    if (sampler_counts_on(smp)) q->counts = d->counts + (size_t)slot * (size_t)d->vocab;
}

int dsample_result(dsample *d, const bk_sample_res *res, int r, int slot, sampler *smp,
                   const float *rows, sampler_result *out) {
    if (res->token >= 0) {
        out->token = res->token;
        out->logprob = res->logprob;
        out->n_top = res->n_top;
        for (int i = 0; i < res->n_top && i < SAMPLER_MAX_TOP_LOGPROBS; i++) {
            out->top[i].token = res->top_id[i];
            out->top[i].logprob = res->top_lp[i];
        }
        return 0;
    }
    if (!rows) return -1;
    const size_t V = (size_t)d->vocab;
    d->b->ops->download(d->b, d->row, rows + (size_t)r * V, sizeof(float) * V);
    sampler_pick(smp, d->row, out);
    if (sampler_counts_on(smp)) { /* as the device would have: seen, generated once more */
        uint32_t v = (sampler_count_of(smp, out->token) | 1u) + 2u;
        d->b->ops->upload(d->b, d->counts + (size_t)slot * V + (size_t)out->token, &v, sizeof v);
    }
    return 0;
}

int dsample_mask(dsample *d, int r, int slot, const uint8_t *allow, strata_err *err) {
    const backend_ops *o = d->b->ops;
    if (!d->allow) {
        d->words = (d->vocab + 31) / 32;
        d->bits = malloc(sizeof(uint32_t) * (size_t)d->words);
        d->allow = o->alloc(d->b, sizeof(uint32_t) * (size_t)d->words * (size_t)d->slots);
        if (!d->bits || !d->allow) {
            free(d->bits);
            if (d->allow) o->free(d->b, d->allow);
            d->bits = NULL, d->allow = NULL;
            return strata_err_set(err, STRATA_ENOMEM,
                                  "no backend memory for the grammar masks of %d slots", d->slots);
        }
    }
    memset(d->bits, 0, sizeof(uint32_t) * (size_t)d->words);
    for (int i = 0; i < d->vocab; i++)
        if (allow[i]) d->bits[i >> 5] |= 1u << (i & 31);
    uint32_t *row = d->allow + (size_t)slot * (size_t)d->words;
    o->upload(d->b, row, d->bits, sizeof(uint32_t) * (size_t)d->words);
    d->req[r].allow = row;
    return 0;
}

void dsample_pad(dsample *d, int r) { d->req[r] = (bk_sample_req){.top_p = 1.0f}; }

int dsample_certain(const dsample *d, const sampler *smp) {
    const sampler_params *p = sampler_get_params(smp);
    if (!(p->temperature > 0.0f)) return 1;
    /* the candidates are the top_k, or the BK_SAMPLE_CANDIDATES most likely (the host's
     * fast path too); only a top_p over the latter may need more (kernels/backend.h) */
    if (p->top_k > 0 && p->top_k < d->vocab) return p->top_k <= BK_SAMPLE_CANDIDATES;
    return p->top_p >= 1.0f || d->vocab <= BK_SAMPLE_CANDIDATES;
}
