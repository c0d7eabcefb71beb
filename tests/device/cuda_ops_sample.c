/* cuda_ops_sample.c - the device sampler (backend_ops.sample) against the host sampler
 * (engine/sampler.c) on the same logits, parameters, history and seed: the same token, the
 * same top alternatives, logprobs within float rounding, the processed row (bias and
 * penalties) bit for bit, and the slot's counts advanced by the chosen token. A row the
 * device leaves to the host (token -1) must be one the host's rule says needs more than
 * BK_SAMPLE_CANDIDATES candidates, and the host's pick from the device's processed row must
 * be the host's own token. A grammar's allow mask on the device equals the host's -inf on
 * the refused tokens before its sampler (engine/take.c). Part of test_cuda_ops (see
 * test_cuda_ops.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dsample.h"
#include "engine/sampler.h"
#include "tests/device/cuda_ops_test.h"

/* Logprobs: lse is a double sum in another order on each side, then float: a few ulp of the
 * largest magnitude. */
#define TOL_LP 1e-5

enum { LOGITS_PLAIN, LOGITS_TIES, LOGITS_FLAT, LOGITS_MASKED };

typedef struct {
    const char *name;
    int n, m, kind;
    int history; /* prompt tokens and generated tokens to feed first */
    /* sampler_params; top_p and repetition 0 here mean off (1) */
    float temperature, top_p, min_p, rep, pres, freq;
    int top_k, logprobs, top_logprobs;
    int32_t bias_ids[4];
    float bias_vals[4];
    int n_bias;
    int expect_host; /* every row goes to the host: the case is there for that path */
    float allow;     /* > 0: a grammar mask (req.allow) lets this share of tokens through */
} sample_case;

static float *case_logits(const sample_case *c) {
    size_t N = (size_t)c->m * (size_t)c->n;
    float *l = hvec(N);
    for (size_t i = 0; i < N; i++) {
        float v = rnd() * 3.0f;
        if (rnd() > 0.996f) v += 10.0f; /* a few likely tokens, as a model's rows have */
        if (c->kind == LOGITS_TIES) v = floorf(v * 2.0f) * 0.5f; /* few values: many ties */
        if (c->kind == LOGITS_FLAT) v = rnd() * 0.01f;
        if (c->kind == LOGITS_MASKED && rnd() < 0.8f) v = -INFINITY;
        l[i] = v;
    }
    return l;
}

static int desc_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* The host's rule for a row the device may not finish (kernels/backend.h, sample): more
 * candidates than BK_SAMPLE_CANDIDATES, or a top_p without top_k whose mass the best
 * BK_SAMPLE_CANDIDATES do not hold. row: processed logits. */
static int needs_host(const sampler_params *p, const float *row, int n) {
    if (!(p->temperature > 0)) return p->top_logprobs > BK_SAMPLE_CANDIDATES;
    if (p->top_k > BK_SAMPLE_CANDIDATES && p->top_k < n) return 1;
    if (!(p->top_p < 1.0f) || p->top_k > 0 || n <= BK_SAMPLE_CANDIDATES) return 0;
    float *v = hdup(row, (size_t)n);
    qsort(v, (size_t)n, sizeof *v, desc_float);
    double all = 0, top = 0;
    for (int i = 0; i < n; i++) {
        double e = exp((double)(v[i] - v[0]) / p->temperature);
        all += e;
        if (i < BK_SAMPLE_CANDIDATES) top += e;
    }
    free(v);
    return top < p->top_p * all;
}

static void run_case(const sample_case *c) {
    const int n = c->n, m = c->m;
    const size_t N = (size_t)m * (size_t)n;
    float *logits = case_logits(c), *dl = gput(logits, N);
    uint32_t *counts = calloc(N, sizeof *counts), *dcounts = NULL;
    int32_t *dbi = NULL;
    float *dbv = NULL;
    sampler **smp = calloc((size_t)m, sizeof *smp);
    bk_sample_req *req = calloc((size_t)m, sizeof *req);
    bk_sample_res *res = calloc((size_t)m, sizeof *res);
    if (!counts || !smp || !req || !res) abort();
    if (c->n_bias) {
        dbi = gpu->ops->alloc(gpu, sizeof c->bias_ids);
        dbv = gpu->ops->alloc(gpu, sizeof c->bias_vals);
        gpu->ops->upload(gpu, dbi, c->bias_ids, sizeof c->bias_ids);
        gpu->ops->upload(gpu, dbv, c->bias_vals, sizeof c->bias_vals);
    }
    int penalties = 0;
    for (int r = 0; r < m; r++) {
        sampler_params p;
        sampler_params_default(&p);
        p.temperature = c->temperature;
        p.top_p = c->top_p > 0 ? c->top_p : 1.0f;
        p.min_p = c->min_p;
        p.top_k = c->top_k;
        p.repetition_penalty = c->rep > 0 ? c->rep : 1.0f;
        p.presence_penalty = c->pres;
        p.frequency_penalty = c->freq;
        p.logprobs = c->logprobs;
        p.top_logprobs = c->top_logprobs;
        p.seed = 0x5eed0000u + 977u * (unsigned)r;
        p.n_logit_bias = c->n_bias;
        p.bias_ids = c->bias_ids;
        p.bias_vals = c->bias_vals;
        if (sampler_create(&smp[r], &p, n, &err)) {
            printf("sample %-17s sampler_create: %s  FAIL\n", c->name, err.msg);
            report("sample", c->name, NULL, NULL, 0, -1);
            goto out;
        }
        for (int i = 0; i < c->history; i++) {
            int32_t t = (int32_t)((rnd() + 1.0f) * 0.5f * (float)(n - 1));
            if (i % 3) sampler_accept_prompt(smp[r], t);
            else sampler_accept(smp[r], t); /* also advances the draw counter */
        }
        penalties |= sampler_counts(smp[r], counts + (size_t)r * n);
    }
    if (penalties) {
        dcounts = gpu->ops->alloc(gpu, N * sizeof *counts);
        gpu->ops->upload(gpu, dcounts, counts, N * sizeof *counts);
    }
    /* each row's pick is fed to its own entry; a row left to the host leaves it alone */
    int32_t *feed = malloc(sizeof(int32_t) * (size_t)m),
            *dfeed = gpu->ops->alloc(gpu, sizeof(int32_t) * (size_t)m);
    if (!feed || !dfeed) abort();
    for (int r = 0; r < m; r++) feed[r] = -7;
    gpu->ops->upload(gpu, dfeed, feed, sizeof(int32_t) * (size_t)m);
    /* the mask: on the device as bits, on the host as -inf before the sampler */
    const size_t W = ((size_t)n + 31) / 32;
    uint32_t *bits = calloc(W * (size_t)m, sizeof *bits), *dbits = NULL;
    if (!bits) abort();
    if (c->allow > 0) {
        for (size_t i = 0; i < N; i++) {
            int ok = (rnd() + 1.0f) * 0.5f < c->allow || i % (size_t)n == 3; /* one always */
            if (ok) bits[(i / (size_t)n) * W + (i % (size_t)n) / 32] |= 1u << (i % (size_t)n % 32);
            else logits[i] = -INFINITY;
        }
        dbits = gpu->ops->alloc(gpu, W * (size_t)m * sizeof *bits);
        gpu->ops->upload(gpu, dbits, bits, W * (size_t)m * sizeof *bits);
    }
    for (int r = 0; r < m; r++) {
        dsample_req_of(smp[r], &req[r]);
        req[r].allow = dbits ? dbits + (size_t)r * W : NULL;
        req[r].feed = dfeed + r;
        req[r].bias_ids = dbi;
        req[r].bias_vals = dbv;
        req[r].counts = dcounts ? dcounts + (size_t)r * n : NULL;
    }
    gpu->ops->sample(gpu, res, dl, req, m, n);
    float *dev_rows = gget(dl, N);
    uint32_t *dev_counts = calloc(N, sizeof *dev_counts);
    if (!dev_counts) abort();
    if (dcounts) gpu->ops->download(gpu, dev_counts, dcounts, N * sizeof *counts);
    gpu->ops->download(gpu, feed, dfeed, sizeof(int32_t) * (size_t)m);
    int feed_ok = 1;
    for (int r = 0; r < m; r++) feed_ok &= feed[r] == (res[r].token < 0 ? -7 : res[r].token);

    float *proc = hdup(logits, N), *want_tok = hvec((size_t)m), *got_tok = hvec((size_t)m);
    float *want_lp = hvec((size_t)m * 21), *got_lp = hvec((size_t)m * 21);
    float *want_id = hvec((size_t)m * 20), *got_id = hvec((size_t)m * 20);
    int to_host = 0, host_ok = 1, counts_ok = 1;
    for (int r = 0; r < m; r++) {
        float *row = proc + (size_t)r * n;
        sampler_process(smp[r], row);
        float *scratch = hdup(row, (size_t)n);
        sampler_result h;
        sampler_pick(smp[r], scratch, &h);
        free(scratch);
        const bk_sample_res *d = &res[r];
        want_tok[r] = (float)h.token;
        int host = needs_host(sampler_get_params(smp[r]), row, n);
        to_host += host;
        if ((d->token < 0) != host) {
            printf("    row %d: the device %s it, the host's rule says %s\n", r,
                   d->token < 0 ? "left" : "sampled", host ? "leave it" : "sample it");
            host_ok = 0;
        }
        if (d->token < 0) { /* left to the host: finish it as the engine does */
            float *drow = hdup(dev_rows + (size_t)r * n, (size_t)n);
            sampler_result f;
            sampler_pick(smp[r], drow, &f);
            free(drow);
            host_ok &= f.token == h.token;
            got_tok[r] = (float)f.token;
            continue;
        }
        got_tok[r] = (float)d->token;
        want_lp[r * 21] = h.logprob, got_lp[r * 21] = d->logprob;
        host_ok &= d->n_top == h.n_top;
        for (int i = 0; i < h.n_top && i < 20; i++) {
            want_lp[r * 21 + 1 + i] = h.top[i].logprob, got_lp[r * 21 + 1 + i] = d->top_lp[i];
            want_id[r * 20 + i] = (float)h.top[i].token, got_id[r * 20 + i] = (float)d->top_id[i];
        }
        if (dcounts) { /* the device counted its token; the host's accept is the reference */
            sampler_accept(smp[r], d->token);
            uint32_t *after = calloc((size_t)n, sizeof *after);
            if (!after) abort();
            sampler_counts(smp[r], after);
            counts_ok &= !memcmp(after, dev_counts + (size_t)r * n, sizeof *after * (size_t)n);
            free(after);
        }
    }
    char shape[96];
    snprintf(shape, sizeof shape, "%s: %d rows of %d", c->name, m, n);
    report("sample token", shape, got_tok, want_tok, (size_t)m, 0);
    report("sample logprobs", shape, got_lp, want_lp, (size_t)m * 21, TOL_LP);
    report("sample top ids", shape, got_id, want_id, (size_t)m * 20, 0);
    float differ = 0, none = 0; /* bit for bit: -inf rows would make a difference NaN */
    for (size_t i = 0; i < N; i++) differ += memcmp(&dev_rows[i], &proc[i], sizeof(float)) != 0;
    report("sample processed row", shape, &differ, &none, 1, 0);
    float okf = (float)(host_ok && counts_ok && feed_ok && (!c->expect_host || to_host == m));
    float one = 1.0f;
    if (okf != 1.0f)
        printf("    %d of %d rows for the host%s, host rows %s, counts %s, fed ids %s\n", to_host,
               m, c->expect_host ? " (all expected)" : "", host_ok ? "ok" : "wrong",
               counts_ok ? "ok" : "differ", feed_ok ? "ok" : "wrong");
    report("sample host rows, counts, feed", shape, &okf, &one, 1, 0);
    free(proc), free(want_tok), free(got_tok), free(want_lp), free(got_lp);
    free(want_id), free(got_id), free(dev_rows), free(dev_counts), free(feed), free(bits);
    gfree(dfeed);
    if (dbits) gfree(dbits);
out:
    for (int r = 0; r < m; r++) sampler_destroy(smp[r]);
    free(smp), free(req), free(res), free(counts), free(logits);
    gfree(dl);
    if (dcounts) gfree(dcounts);
    if (dbi) gfree(dbi), gfree(dbv);
}

void test_sample(void) {
    SKIP_WITHOUT(sample);
    /* a table laid out by hand: clang-format puts each field of a long row on a line */
    /* clang-format off */
    const sample_case cases[] = {
        {.name = "greedy", .n = 3000, .m = 3},
        {.name = "greedy ties, top 20", .n = 20000, .m = 2, .kind = LOGITS_TIES, .logprobs = 1,
         .top_logprobs = 20},
        {.name = "top_p 0.9", .n = 20000, .m = 3, .history = 4, .temperature = 0.8f, .top_p = 0.9f},
        {.name = "top_k 40, top 5", .n = 3000, .m = 3, .history = 7, .temperature = 1.0f,
         .top_k = 40, .logprobs = 1, .top_logprobs = 5},
        {.name = "min_p, top_p", .n = 3000, .m = 3, .history = 2, .temperature = 1.3f,
         .min_p = 0.1f, .top_p = 0.95f},
        {.name = "penalties, bias", .n = 3000, .m = 3, .kind = LOGITS_TIES, .history = 40,
         .temperature = 0.7f, .rep = 1.3f, .pres = 0.4f, .freq = 0.2f, .logprobs = 1,
         .bias_ids = {5, 17, 5, 2999}, /* 5 twice: added twice, in order */
         .bias_vals = {3.0f, -2.5f, 1.25f, 8.0f}, .n_bias = 4},
        {.name = "greedy, penalties", .n = 20000, .m = 2, .history = 60, .rep = 0.8f, .freq = -0.5f,
         .logprobs = 1},
        {.name = "top_k 2000: host", .n = 3000, .m = 2, .temperature = 1.0f, .top_k = 2000,
         .expect_host = 1},
        {.name = "flat top_p: host", .n = 20000, .m = 2, .kind = LOGITS_FLAT, .temperature = 1.0f,
         .top_p = 0.99f, .expect_host = 1},
        {.name = "top_k over vocab", .n = 800, .m = 3, .history = 3, .temperature = 1.0f,
         .top_k = 5000},
        {.name = "masked", .n = 3000, .m = 3, .kind = LOGITS_MASKED, .temperature = 1.0f,
         .top_p = 0.8f, .logprobs = 1, .top_logprobs = 3},
        {.name = "grammar mask", .n = 3000, .m = 3, .history = 5, .temperature = 0.9f,
         .top_p = 0.9f, .rep = 1.2f, .logprobs = 1, .top_logprobs = 3,
         .bias_ids = {3, 4, 5, 6}, /* 3 always allowed, the others mostly refused */
         .bias_vals = {1.0f, 30.0f, -2.0f, 30.0f}, .n_bias = 4, .allow = 0.05f},
        {.name = "grammar mask, greedy", .n = 248320, .m = 2, .logprobs = 1, .allow = 0.002f},
        {.name = "Qwen3.5 vocab", .n = 248320, .m = 2, .history = 9, .temperature = 0.6f,
         .top_p = 0.95f, .top_k = 20, .logprobs = 1, .top_logprobs = 2},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}
