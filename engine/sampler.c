/* sampler.c - per-sequence token choice (see sampler.h for the order of operations).
 *
 * Truncation works on a candidate list instead of sorting the whole vocabulary: the
 * candidates are the top-k (or the 1024 most likely), and when top-p needs more mass
 * than they hold the list grows eightfold until it does. The passes over the whole row
 * are engine/sampler_scan.c's. Sampling allocates nothing: the sort is our own merge sort
 * over scratch allocated at create (glibc's qsort_r mallocs a buffer for every array over
 * 1 KiB, which would be an allocation per token). */
#include "engine/sampler.h"

#include "engine/base/philox.h"
#include "engine/sampler_scan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLER_FAST_CANDIDATES 1024

struct sampler {
    sampler_params p;
    int vocab;
    int32_t *bias_ids;
    float *bias_vals;
    uint32_t *count_gen; /* [vocab] generated-token counts (presence/frequency) */
    uint8_t *seen;       /* [vocab] prompt or generated (repetition) */
    int32_t *seen_list;  /* distinct tokens with count_gen or seen set */
    int n_seen_list;
    uint8_t *listed; /* [vocab] token is in seen_list */
    int32_t *idx;    /* [vocab] candidate scratch */
    int32_t *tmp;    /* [vocab] merge sort scratch */
    float *prob;     /* [vocab] scratch */
    uint64_t n_gen;  /* tokens generated so far: the counter of the next draw */
};

void sampler_params_default(sampler_params *p) {
    memset(p, 0, sizeof *p);
    p->top_p = 1.0f;
    p->repetition_penalty = 1.0f;
    p->logprobs = 1;
}

int sampler_create(sampler **out, const sampler_params *p, int vocab, strata_err *err) {
    if (!(p->temperature >= 0.0f) || p->temperature > 100.0f)
        return strata_err_set(err, STRATA_EINVALID, "temperature must be in [0, 100]");
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f) && !(p->top_p > 1.0f))
        return strata_err_set(err, STRATA_EINVALID, "top_p must be in (0, 1]");
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return strata_err_set(err, STRATA_EINVALID, "min_p must be in [0, 1]");
    if (!(p->repetition_penalty > 0.0f) || p->repetition_penalty > 100.0f)
        return strata_err_set(err, STRATA_EINVALID, "repetition_penalty must be in (0, 100]");
    if (!(fabsf(p->presence_penalty) <= 2.0f))
        return strata_err_set(err, STRATA_EINVALID, "presence_penalty must be in [-2, 2]");
    if (!(fabsf(p->frequency_penalty) <= 2.0f))
        return strata_err_set(err, STRATA_EINVALID, "frequency_penalty must be in [-2, 2]");
    if (p->top_logprobs < 0 || p->top_logprobs > SAMPLER_MAX_TOP_LOGPROBS)
        return strata_err_set(err, STRATA_EINVALID, "top_logprobs must be in [0, %d]",
                              SAMPLER_MAX_TOP_LOGPROBS);
    if (p->n_logit_bias < 0 || (p->n_logit_bias && (!p->bias_ids || !p->bias_vals)))
        return strata_err_set(err, STRATA_EINVALID, "logit_bias: invalid list");
    for (int i = 0; i < p->n_logit_bias; i++) {
        if (p->bias_ids[i] < 0 || p->bias_ids[i] >= vocab)
            return strata_err_set(err, STRATA_EINVALID,
                                  "logit_bias: token id %d is outside the vocabulary [0, %d)",
                                  p->bias_ids[i], vocab);
        if (!(fabsf(p->bias_vals[i]) <= 100.0f))
            return strata_err_set(err, STRATA_EINVALID,
                                  "logit_bias: values must be in [-100, 100]");
    }
    sampler *s = calloc(1, sizeof *s);
    if (!s) return strata_err_set(err, STRATA_ENOMEM, "sampler: out of memory");
    s->p = *p;
    s->vocab = vocab;
    s->idx = malloc(sizeof(int32_t) * (size_t)vocab);
    s->tmp = malloc(sizeof(int32_t) * (size_t)vocab);
    s->prob = malloc(sizeof(float) * (size_t)vocab);
    int penalties = p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f ||
                    p->frequency_penalty != 0.0f;
    if (penalties) {
        s->count_gen = calloc((size_t)vocab, sizeof(uint32_t));
        s->seen = calloc((size_t)vocab, 1);
        s->listed = calloc((size_t)vocab, 1);
        s->seen_list = malloc(sizeof(int32_t) * (size_t)vocab);
    }
    if (p->n_logit_bias) {
        s->bias_ids = malloc(sizeof(int32_t) * (size_t)p->n_logit_bias);
        s->bias_vals = malloc(sizeof(float) * (size_t)p->n_logit_bias);
    }
    if (!s->idx || !s->tmp || !s->prob ||
        (penalties && (!s->count_gen || !s->seen || !s->listed || !s->seen_list)) ||
        (p->n_logit_bias && (!s->bias_ids || !s->bias_vals))) {
        sampler_destroy(s);
        return strata_err_set(err, STRATA_ENOMEM, "sampler: out of memory");
    }
    if (p->n_logit_bias) {
        memcpy(s->bias_ids, p->bias_ids, sizeof(int32_t) * (size_t)p->n_logit_bias);
        memcpy(s->bias_vals, p->bias_vals, sizeof(float) * (size_t)p->n_logit_bias);
    }
    s->p.bias_ids = s->bias_ids;
    s->p.bias_vals = s->bias_vals;
    *out = s;
    return 0;
}

void sampler_destroy(sampler *s) {
    if (!s) return;
    free(s->bias_ids);
    free(s->bias_vals);
    free(s->count_gen);
    free(s->seen);
    free(s->listed);
    free(s->seen_list);
    free(s->idx);
    free(s->tmp);
    free(s->prob);
    free(s);
}

static void note(sampler *s, int32_t t) {
    if (!s->listed || t < 0 || t >= s->vocab || s->listed[t]) return;
    s->listed[t] = 1;
    s->seen_list[s->n_seen_list++] = t;
}

void sampler_accept_prompt(sampler *s, int32_t token) {
    if (!s->seen || token < 0 || token >= s->vocab) return;
    s->seen[token] = 1;
    note(s, token);
}

void sampler_accept(sampler *s, int32_t token) {
    s->n_gen++;
    if (!s->seen || token < 0 || token >= s->vocab) return;
    s->seen[token] = 1;
    s->count_gen[token]++;
    note(s, token);
}

/* Descending by value, ties by lower id, so results never depend on sort stability;
 * NaN after every number (sampler_scan.h's order). */
static int cmp_desc(int32_t i, int32_t j, const float *vals) {
    float x = vals[i], y = vals[j];
    if (x != y && (x == x || y == y)) return x > y || y != y ? -1 : 1;
    return i < j ? -1 : (i > j);
}

/* Sorts idx[0..n) by cmp_desc: insertion sort of runs of 16, then bottom-up merges
 * between idx and tmp (both [n]). */
static void sort_desc(int32_t *idx, int32_t *tmp, int n, const float *vals) {
    enum { RUN = 16 };
    for (int lo = 0; lo < n; lo += RUN) {
        int hi = lo + RUN < n ? lo + RUN : n;
        for (int i = lo + 1; i < hi; i++) {
            int32_t v = idx[i];
            int j = i;
            for (; j > lo && cmp_desc(v, idx[j - 1], vals) < 0; j--) idx[j] = idx[j - 1];
            idx[j] = v;
        }
    }
    int32_t *src = idx, *dst = tmp;
    for (int w = RUN; w < n; w *= 2) {
        for (int lo = 0; lo < n; lo += 2 * w) {
            int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int a = lo, b = mid, k = lo;
            while (a < mid && b < hi) /* b wins only when strictly first: stable */
                dst[k++] = cmp_desc(src[b], src[a], vals) < 0 ? src[b++] : src[a++];
            while (a < mid) dst[k++] = src[a++];
            while (b < hi) dst[k++] = src[b++];
        }
        int32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != idx) memcpy(idx, src, sizeof(int32_t) * (size_t)n);
}

/* Puts the k largest logits' ids first in idx (sorted), k <= n. */
static int top_candidates(sampler *s, const float *logits, int k) {
    vocab_top_k(logits, s->vocab, k, s->idx, s->tmp);
    if (k > VOCAB_TOP_FEW) sort_desc(s->idx, s->tmp, k, logits); /* fewer come sorted */
    return k;
}

const sampler_params *sampler_get_params(const sampler *s) { return &s->p; }

uint64_t sampler_draws(const sampler *s) { return s->n_gen; }

int sampler_counts_on(const sampler *s) { return s->seen != NULL; }

uint32_t sampler_count_of(const sampler *s, int32_t t) {
    if (!s->seen || t < 0 || t >= s->vocab) return 0;
    return (uint32_t)s->seen[t] | s->count_gen[t] << 1;
}

int sampler_counts(const sampler *s, uint32_t *out) {
    if (!s->seen) return 0;
    memset(out, 0, sizeof(uint32_t) * (size_t)s->vocab);
    for (int i = 0; i < s->n_seen_list; i++)
        out[s->seen_list[i]] = sampler_count_of(s, s->seen_list[i]);
    return 1;
}

void sampler_sample(sampler *s, float *logits, sampler_result *out) {
    sampler_process(s, logits);
    sampler_pick(s, logits, out);
}

void sampler_process(const sampler *s, float *logits) {
    const sampler_params *p = &s->p;
    for (int i = 0; i < p->n_logit_bias; i++) logits[p->bias_ids[i]] += p->bias_vals[i];
    if (s->seen) {
        for (int i = 0; i < s->n_seen_list; i++) {
            int32_t t = s->seen_list[i];
            float l = logits[t];
            if (p->repetition_penalty != 1.0f && s->seen[t])
                l = l > 0 ? l / p->repetition_penalty : l * p->repetition_penalty;
            if (s->count_gen[t])
                l -= p->presence_penalty + p->frequency_penalty * (float)s->count_gen[t];
            logits[t] = l;
        }
    }
}

void sampler_pick(sampler *s, float *logits, sampler_result *out) {
    const sampler_params *p = &s->p;
    int V = s->vocab;
    /* log-softmax of the processed logits, for logprobs. The arg-max is the greedy pick and
     * the normaliser's shift; a sampled pick without logprobs needs neither (its largest
     * candidate comes first from the selection). The normaliser is a pass of exp over the
     * whole vocabulary: only when reported. */
    int want_lp = p->logprobs || p->top_logprobs > 0;
    int32_t arg = 0;
    float mx = want_lp || p->temperature <= 0.0f ? vocab_argmax(logits, V, &arg) : 0.0f;
    float lse = 0.0f;
    if (want_lp) lse = mx + (float)log(vocab_sum_exp(logits, V, (double)mx, 1.0));

    int32_t chosen = arg;
    if (p->temperature > 0.0f) {
        int k = p->top_k > 0 && p->top_k < V
                    ? p->top_k
                    : (V < SAMPLER_FAST_CANDIDATES ? V : SAMPLER_FAST_CANDIDATES);
        int n = top_candidates(s, logits, k);
        double inv_t = 1.0 / p->temperature, tot = 0;
        double top = logits[s->idx[0]];
        /* The whole vocabulary's mass at this temperature, which top-p's share is of (with
         * top-k, of the k candidates' mass instead): another pass of exp, so only then. */
        int need_all = p->top_p < 1.0f && !(p->top_k > 0);
        double all = need_all ? vocab_sum_exp(logits, V, top, inv_t) : 0.0;
        for (int i = 0; i < n; i++) {
            s->prob[i] = (float)exp(((double)logits[s->idx[i]] - top) * inv_t);
            tot += s->prob[i];
        }
        /* not enough mass for top-p: eight times the candidates, up to the vocabulary */
        while (need_all && tot < p->top_p * all && n < V) {
            n = top_candidates(s, logits, n > V / 8 ? V : n * 8);
            tot = 0;
            for (int i = 0; i < n; i++) {
                s->prob[i] = (float)exp(((double)logits[s->idx[i]] - top) * inv_t);
                tot += s->prob[i];
            }
        }
        double denom = (p->top_k > 0) ? tot : all;
        if (p->top_p < 1.0f) { /* smallest prefix whose mass reaches top_p */
            double c = 0;
            int keep = n;
            for (int i = 0; i < n; i++) {
                c += s->prob[i] / denom;
                if (c >= p->top_p) {
                    keep = i + 1;
                    break;
                }
            }
            n = keep;
        }
        if (p->min_p > 0.0f) { /* prob[0] is the largest: relative threshold */
            int keep = 1;
            while (keep < n && s->prob[keep] >= p->min_p * s->prob[0]) keep++;
            n = keep;
        }
        tot = 0;
        for (int i = 0; i < n; i++) tot += s->prob[i];
        /* keyed by the seed, counted by the token's place in the output (philox.h) */
        double r = philox_uniform(s->p.seed, s->n_gen) * tot, c = 0;
        chosen = s->idx[n - 1];
        for (int i = 0; i < n; i++) {
            c += s->prob[i];
            if (r < c) {
                chosen = s->idx[i];
                break;
            }
        }
    }
    out->token = chosen;
    out->logprob = p->logprobs || p->top_logprobs > 0 ? logits[chosen] - lse : 0.0f;
    out->n_top = p->top_logprobs;
    if (p->top_logprobs > 0) {
        int n = top_candidates(s, logits, p->top_logprobs < V ? p->top_logprobs : V);
        out->n_top = n;
        for (int i = 0; i < n; i++) {
            out->top[i].token = s->idx[i];
            out->top[i].logprob = logits[s->idx[i]] - lse;
        }
    }
}
