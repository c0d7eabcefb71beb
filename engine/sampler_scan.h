/* sampler_scan.h - the sampler's passes over a whole row of logits: the arg-max, the sum
 * of exponentials behind logprobs and top-p, and the selection of the k most likely ids.
 *
 * A token sampled at a temperature crosses the row three times (selection, its mass, the
 * arg-max of greedy or logprobs), and on the CPU backend the engine thread does that
 * while the workers wait: with libm's exp and a quickselect through an index array it
 * cost ~5 ms a token at a vocabulary of 248,320 (Qwen3.5), a tenth of a 0.8B decode step.
 * These passes run in fixed blocks the compiler vectorizes, cloned per ISA.
 *
 * Order of values everywhere: larger first, equal values by the lower id, -0 equal to +0,
 * NaN below every number (it never wins). */
#ifndef STRATA_SAMPLER_SCAN_H
#define STRATA_SAMPLER_SCAN_H

#include <stdint.h>

/* The largest value of x[0..n) and its lowest id in *arg; -INFINITY and id 0 when no
 * value is above -INFINITY. */
float vocab_argmax(const float *x, int n, int32_t *arg);

/* Σ exp((x[i] - top) * inv_t) in double, for top >= every x[i] and inv_t >= 0: each term
 * within 4 ulps of libm's exp; an exponent under -708 (or NaN) counts as -708, a term of
 * 3e-308, far below the rounding of a sum that holds the term of top, 1. */
double vocab_sum_exp(const float *x, int n, double top, double inv_t);

/* The ids of the k largest values (0 < k <= n) into idx[0..k): exactly the first k of the
 * order above. Up to VOCAB_TOP_FEW of them come sorted in that order and tmp is not used
 * (may be NULL); more come in no particular order, tmp scratch of n ids. */
enum { VOCAB_TOP_FEW = 64 };
void vocab_top_k(const float *x, int n, int k, int32_t *idx, int32_t *tmp);

#endif
