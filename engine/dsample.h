/* dsample.h - the engine's side of the device sampler (backend_ops.sample): each slot's
 * logit-bias list and penalty counts in backend memory, the step's requests, and the host
 * finishing a row the backend left to it. The host sampler of every sequence keeps
 * accepting its tokens either way, so its draw counter and counts stay the reference and a
 * step may fall back to host sampling at any time. Step thread only. Not for use outside
 * engine/. */
#ifndef STRATA_DSAMPLE_H
#define STRATA_DSAMPLE_H

#include "engine/sampler.h"
#include "kernels/backend.h"

#define DSAMPLE_MAX_BIAS 1024 /* bias entries a slot holds on the backend */

typedef struct dsample {
    backend *b; /* NULL: the backend has no sampler (or it is turned off) */
    int slots, vocab;
    int32_t *bias_ids;  /* backend [slots, DSAMPLE_MAX_BIAS] */
    float *bias_vals;   /* backend [slots, DSAMPLE_MAX_BIAS] */
    uint32_t *counts;   /* backend [slots, vocab]; allocated by the first request with penalties */
    int32_t *fed;       /* backend [slots]: each slot's last token picked on the device */
    uint32_t *allow;    /* backend [slots, words]: grammar masks; allocated by the first one */
    uint32_t *bits;     /* [words] host scratch: a mask packed before upload */
    int words;          /* (vocab + 31) / 32 */
    uint32_t *host_row; /* [vocab] host scratch: a slot's counts before upload */
    float *row;         /* [vocab] host scratch: a row left to the host */
    bk_sample_req *req; /* [slots] the step's requests (staged by the backend at once) */
} dsample;

/* Sets d up for b when b samples (else d->b stays NULL and nothing is allocated). */
int dsample_init(dsample *d, backend *b, int slots, int vocab, strata_err *err);
void dsample_free(dsample *d);
/* Puts the bias list and penalty state of smp (its prompt accepted) into slot. An error
 * (more bias entries than a slot holds, no memory for the counts) means: sample this
 * sequence on the host. */
int dsample_seat(dsample *d, int slot, const sampler *smp, strata_err *err);
/* The request for smp's next token, pointers left NULL (bias list, counts). */
void dsample_req_of(const sampler *smp, bk_sample_req *q);
/* Fills request r of the step for the sequence in slot, drawing its next number after the
 * pending ones (tokens picked on the device that smp has not accepted yet); the token is
 * also fed to the slot's next step. */
void dsample_request(dsample *d, int r, int slot, const sampler *smp, int pending);
/* Request r (filled by dsample_request for slot) also applies allow[vocab] (1: the token may
 * come), packed and uploaded to the slot's mask. -1 (with err) when there is no backend
 * memory for the masks: sample on the host then. */
int dsample_mask(dsample *d, int r, int slot, const uint8_t *allow, strata_err *err);
/* Request r for a row that only pads a step to its graph's size: greedy, nothing fed. */
void dsample_pad(dsample *d, int r);
/* 1 when the backend picks every token of smp itself (never leaves a row to the host), so
 * the next step may be fed on the device before the host reads this one. */
int dsample_certain(const dsample *d, const sampler *smp);
/* res (the backend's result of the step's row r) as the host sampler gives it. A row left
 * to the host is downloaded from rows (model_out.sampled_rows) and picked from there; the
 * token is then counted in the slot's counts on the backend, as the device counts its own.
 * Returns 0, or -1 when the row cannot be had (rows NULL). */
int dsample_result(dsample *d, const bk_sample_res *res, int r, int slot, sampler *smp,
                   const float *rows, sampler_result *out);

#endif
