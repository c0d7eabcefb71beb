/* test_sampler.c - engine/sampler.c: each filter and penalty on small hand-made
 * distributions, seeded reproducibility, and the logprobs it reports. */
#include <math.h>
#include <string.h>

#include "engine/sampler.h"
#include "tests/test.h"

#define V 64

static void fill(float *l, unsigned seed) {
    for (int i = 0; i < V; i++) {
        seed = seed * 1103515245u + 12345u;
        l[i] = (float)((seed >> 16) % 1000) / 100.0f - 5.0f;
    }
}

static int32_t sample_once(const sampler_params *p, const float *base, sampler **keep) {
    sampler *s = keep ? *keep : NULL;
    strata_err err = {0};
    if (!s && sampler_create(&s, p, V, &err)) return -1;
    float l[V];
    memcpy(l, base, sizeof l);
    sampler_result r;
    sampler_sample(s, l, &r);
    if (keep) {
        sampler_accept(s, r.token); /* as the engine does: the next draw is the next position's */
        *keep = s;
    } else {
        sampler_destroy(s);
    }
    return r.token;
}

static void test_greedy(void) {
    sampler_params p;
    sampler_params_default(&p);
    float l[V];
    fill(l, 1);
    int best = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best]) best = i;
    CHECK_EQ_INT(sample_once(&p, l, NULL), best);
    /* ties go to the lowest id, as torch.argmax */
    for (int i = 0; i < V; i++) l[i] = 1.0f;
    l[9] = l[40] = 3.0f;
    CHECK_EQ_INT(sample_once(&p, l, NULL), 9);
}

static void test_seed_reproducible(void) {
    sampler_params p;
    sampler_params_default(&p);
    p.temperature = 1.5f;
    p.seed = 42;
    float l[V];
    fill(l, 7);
    sampler *a = NULL, *b = NULL, *c = NULL;
    int same_ab = 1, same_ac = 1;
    for (int i = 0; i < 50; i++) {
        int32_t x = sample_once(&p, l, &a), y = sample_once(&p, l, &b);
        p.seed = 43;
        int32_t z = sample_once(&p, l, &c);
        p.seed = 42;
        same_ab &= x == y;
        same_ac &= x == z;
    }
    CHECK(same_ab);  /* same seed, same stream */
    CHECK(!same_ac); /* another seed draws differently over 50 draws */
    /* a draw belongs to the token's position, not to the call: sampling the same position
     * twice (nothing accepted between) draws the same number */
    {
        sampler *d = NULL;
        strata_err err = {0};
        CHECK(sampler_create(&d, &p, V, &err) == 0);
        int same = 1;
        for (int i = 0; i < 20; i++) {
            float l1[V], l2[V];
            memcpy(l1, l, sizeof l1);
            memcpy(l2, l, sizeof l2);
            sampler_result r1, r2;
            sampler_sample(d, l1, &r1);
            sampler_sample(d, l2, &r2);
            same &= r1.token == r2.token;
            sampler_accept(d, r1.token);
        }
        CHECK(same);
        sampler_destroy(d);
    }
    sampler_destroy(a);
    sampler_destroy(b);
    sampler_destroy(c);
}

static void test_top_k_top_p_min_p(void) {
    float l[V];
    for (int i = 0; i < V; i++) l[i] = -10.0f;
    l[3] = 2.0f;  /* p ~ 0.64 */
    l[8] = 1.0f;  /* p ~ 0.24 */
    l[20] = 0.0f; /* p ~ 0.09 */
    sampler_params p;
    sampler_params_default(&p);
    p.temperature = 1.0f;
    sampler *s = NULL;
    int seen[V] = {0};
    p.top_k = 2;
    for (int i = 0; i < 400; i++) seen[sample_once(&p, l, &s)]++;
    sampler_destroy(s);
    s = NULL;
    CHECK(seen[3] > 0 && seen[8] > 0 && seen[20] == 0);
    CHECK(seen[3] + seen[8] == 400);
    memset(seen, 0, sizeof seen);
    p.top_k = 0;
    p.top_p = 0.5f; /* the first token alone reaches 0.5 */
    for (int i = 0; i < 200; i++) seen[sample_once(&p, l, &s)]++;
    sampler_destroy(s);
    s = NULL;
    CHECK_EQ_INT(seen[3], 200);
    memset(seen, 0, sizeof seen);
    p.top_p = 0.8f; /* needs the two most likely */
    for (int i = 0; i < 400; i++) seen[sample_once(&p, l, &s)]++;
    sampler_destroy(s);
    s = NULL;
    CHECK(seen[3] + seen[8] == 400 && seen[8] > 0);
    memset(seen, 0, sizeof seen);
    p.top_p = 1.0f;
    p.min_p = 0.3f; /* keeps p >= 0.3 · 0.64: tokens 3 and 8 */
    for (int i = 0; i < 400; i++) seen[sample_once(&p, l, &s)]++;
    sampler_destroy(s);
    CHECK(seen[3] + seen[8] == 400 && seen[8] > 0);
    /* top_k = 1 at any temperature is greedy */
    p.min_p = 0;
    p.top_k = 1;
    p.temperature = 5.0f;
    CHECK_EQ_INT(sample_once(&p, l, NULL), 3);
}

static void test_frequency_of_draws(void) {
    /* Two tokens with logits ln 3 and 0: draws follow 3:1 (4000 draws, 4 sigma ~ 0.03). */
    float l[V];
    for (int i = 0; i < V; i++) l[i] = -1e9f;
    l[1] = logf(3.0f);
    l[2] = 0.0f;
    sampler_params p;
    sampler_params_default(&p);
    p.temperature = 1.0f;
    p.seed = 9;
    sampler *s = NULL;
    int n1 = 0;
    for (int i = 0; i < 4000; i++) n1 += sample_once(&p, l, &s) == 1;
    sampler_destroy(s);
    CHECK_NEAR(n1 / 4000.0, 0.75, 0.03);
}

static void test_penalties_and_bias(void) {
    float l[V];
    for (int i = 0; i < V; i++) l[i] = 0.0f;
    l[5] = 3.0f;
    l[6] = 2.5f;
    sampler_params p;
    sampler_params_default(&p);
    sampler *s = NULL;
    strata_err err = {0};
    /* presence penalty 1 on a generated 5 lets 6 win */
    p.presence_penalty = 1.0f;
    CHECK(sampler_create(&s, &p, V, &err) == 0);
    sampler_accept(s, 5);
    float x[V];
    memcpy(x, l, sizeof x);
    sampler_result r;
    sampler_sample(s, x, &r);
    CHECK_EQ_INT(r.token, 6);
    sampler_destroy(s);
    /* repetition penalty 2 divides positive logits of prompt tokens: 3 -> 1.5 < 2.5 */
    sampler_params_default(&p);
    p.repetition_penalty = 2.0f;
    CHECK(sampler_create(&s, &p, V, &err) == 0);
    sampler_accept_prompt(s, 5);
    memcpy(x, l, sizeof x);
    sampler_sample(s, x, &r);
    CHECK_EQ_INT(r.token, 6);
    sampler_destroy(s);
    /* frequency penalty scales with the count: 0.3 x 2 = 0.6 > the 0.5 gap */
    sampler_params_default(&p);
    p.frequency_penalty = 0.3f;
    CHECK(sampler_create(&s, &p, V, &err) == 0);
    sampler_accept(s, 5);
    memcpy(x, l, sizeof x);
    sampler_sample(s, x, &r);
    CHECK_EQ_INT(r.token, 5);
    sampler_accept(s, 5);
    memcpy(x, l, sizeof x);
    sampler_sample(s, x, &r);
    CHECK_EQ_INT(r.token, 6);
    sampler_destroy(s);
    /* logit_bias -100 bans a token */
    sampler_params_default(&p);
    int32_t ids[1] = {5};
    float vals[1] = {-100.0f};
    p.n_logit_bias = 1;
    p.bias_ids = ids;
    p.bias_vals = vals;
    CHECK_EQ_INT(sample_once(&p, l, NULL), 6);
}

static void test_logprobs(void) {
    float l[V];
    fill(l, 3);
    sampler_params p;
    sampler_params_default(&p);
    p.top_logprobs = 5;
    sampler *s = NULL;
    strata_err err = {0};
    CHECK(sampler_create(&s, &p, V, &err) == 0);
    float x[V];
    memcpy(x, l, sizeof x);
    sampler_result r;
    sampler_sample(s, x, &r);
    double z = 0, mx = -1e30;
    for (int i = 0; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < V; i++) z += exp(l[i] - mx);
    CHECK_NEAR(r.logprob, l[r.token] - mx - log(z), 1e-5);
    CHECK_EQ_INT(r.n_top, 5);
    CHECK_EQ_INT(r.top[0].token, r.token); /* greedy picks the most likely */
    for (int i = 1; i < 5; i++) CHECK(r.top[i].logprob <= r.top[i - 1].logprob);
    sampler_destroy(s);
    /* Without logprobs the same token comes out, and no normaliser is computed. */
    p.top_logprobs = 0;
    p.logprobs = 0;
    for (int t = 0; t < 2; t++) {
        p.temperature = t ? 0.8f : 0.0f;
        p.seed = 11;
        sampler_result a, b;
        CHECK(sampler_create(&s, &p, V, &err) == 0);
        memcpy(x, l, sizeof x);
        sampler_sample(s, x, &a);
        sampler_destroy(s);
        p.logprobs = 1;
        CHECK(sampler_create(&s, &p, V, &err) == 0);
        memcpy(x, l, sizeof x);
        sampler_sample(s, x, &b);
        sampler_destroy(s);
        p.logprobs = 0;
        CHECK_EQ_INT(a.token, b.token);
        CHECK(a.logprob == 0.0f && a.n_top == 0 && b.logprob < 0.0f);
    }
}

static void test_invalid_params(void) {
    sampler_params p;
    sampler *s = NULL;
    strata_err err = {0};
    sampler_params_default(&p);
    p.temperature = -1;
    CHECK(sampler_create(&s, &p, V, &err) == STRATA_EINVALID && strstr(err.msg, "temperature"));
    sampler_params_default(&p);
    p.top_p = 0;
    CHECK(sampler_create(&s, &p, V, &err) == STRATA_EINVALID && strstr(err.msg, "top_p"));
    sampler_params_default(&p);
    p.presence_penalty = 3;
    CHECK(sampler_create(&s, &p, V, &err) == STRATA_EINVALID);
    sampler_params_default(&p);
    int32_t ids[1] = {V};
    float vals[1] = {1};
    p.n_logit_bias = 1;
    p.bias_ids = ids;
    p.bias_vals = vals;
    CHECK(sampler_create(&s, &p, V, &err) == STRATA_EINVALID && strstr(err.msg, "logit_bias"));
    sampler_params_default(&p);
    p.top_logprobs = 21;
    CHECK(sampler_create(&s, &p, V, &err) == STRATA_EINVALID);
    CHECK(s == NULL);
}

int main(void) {
    RUN(test_greedy);
    RUN(test_seed_reproducible);
    RUN(test_top_k_top_p_min_p);
    RUN(test_frequency_of_draws);
    RUN(test_penalties_and_bias);
    RUN(test_logprobs);
    RUN(test_invalid_params);
    TEST_DONE();
}
