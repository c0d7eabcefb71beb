/* test_engine.c - continuous batching over the real tiny Qwen3.5 checkpoint.
 *
 * Runs engine/engine.c + engine/sched.c against models/qwen35.c on the CPU backend
 * (tests/golden/qwen35_tiny, vocab 512, eos 1) with no tokenizer, so each token comes
 * back as "[id]" text. Checks: greedy tokens of a prompt are the same alone, among
 * other sequences and with a small prefill chunk; max_tokens ends with "length";
 * stop ids end with "stop"; a cancel frees the slot and the slot is reused; a seeded
 * sample repeats; prompt + max_tokens over the context is refused up front; prompt
 * logprobs equal the log-softmax of a plain model_forward over the prompt, whatever the
 * chunking, and leave the generated tokens alone; max_tokens 0 only prefills; the device
 * loop (padded and chained decode steps) where the backend has one. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels/cpu/cpu_backend.h"
#include "engine/batch.h"
#include "engine/engine.h"
#include "tests/test.h"
#include "tests/test_wake.h"

#define MODEL_DIR "tests/golden/qwen35_tiny"

static int released;

static void on_release(void *ud) {
    (void)ud;
    __atomic_add_fetch(&released, 1, __ATOMIC_SEQ_CST);
}

typedef struct run {
    engine_seq *s;
    engine_chunk c;
    char text[4096];
    size_t len;
    int finish, n_gen;
    sampler_result plp[32]; /* prompt logprobs, when asked for */
    int n_plp, prompt_done, prompt_takes;
} run;

/* Collects output of every run until all finished. */
static void wait_all(run *r, int n) {
    for (;;) {
        int seen = test_wake_count();
        int open = 0;
        for (int i = 0; i < n; i++) {
            if (r[i].finish) continue;
            if (engine_seq_take(r[i].s, &r[i].c)) {
                size_t k = r[i].c.text.len;
                if (k && r[i].len + k < sizeof r[i].text) {
                    memcpy(r[i].text + r[i].len, r[i].c.text.p, k);
                    r[i].len += k;
                    r[i].text[r[i].len] = 0;
                }
                r[i].n_gen = r[i].c.n_generated;
                r[i].finish = r[i].c.finish;
                if (r[i].c.prompt_done) {
                    r[i].prompt_done = 1;
                    r[i].prompt_takes++;
                    r[i].n_plp = r[i].c.n_prompt_tok;
                    /* the first token arrives with or after the prompt, never before */
                    CHECK(r[i].n_gen <= (int)(r[i].c.n_new));
                    if (r[i].n_plp <= 32)
                        memcpy(r[i].plp, r[i].c.prompt_tok,
                               sizeof(sampler_result) * (size_t)r[i].n_plp);
                }
            }
            if (!r[i].finish) open++;
        }
        if (!open) return;
        /* a wake after `seen` was read means new output: no lost wakeups */
        test_wake_wait(seen);
    }
}

/* Waits until every slot is free again: a sequence reports its finish before the
 * step thread frees its slot (between steps). */
static int busy(engine *e) {
    engine_stats st;
    engine_get_stats(e, &st);
    return st.active;
}

static void wait_idle(engine *e) {
    pthread_mutex_lock(&test_wakes.mu);
    while (busy(e)) pthread_cond_wait(&test_wakes.cv, &test_wakes.mu);
    pthread_mutex_unlock(&test_wakes.mu);
}

static model *M;
static backend *B;

static engine *make_engine_rows(int max_seqs, int chunk, int plp_rows) {
    strata_err err = {0};
    engine *e = NULL;
    engine_opts o = {.max_seqs = max_seqs,
                     .prefill_chunk = chunk,
                     .on_slot_free = test_wake_signal,
                     .prompt_logprob_rows = plp_rows};
    int rc = engine_create(&e, M, NULL, &o, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    return e;
}

static engine *make_engine(int max_seqs, int chunk) { return make_engine_rows(max_seqs, chunk, 0); }

static void seq_params(engine_seq_params *p, const int32_t *prompt, int n, int max_tokens) {
    memset(p, 0, sizeof *p);
    p->prompt = prompt;
    p->n_prompt = n;
    p->max_tokens = max_tokens;
    sampler_params_default(&p->sampling);
    p->ignore_eos = 1;
}

static void start(engine *e, run *r, const engine_seq_params *p) {
    strata_err err = {0};
    memset(r, 0, sizeof *r);
    engine_chunk_init(&r->c);
    int rc = engine_seq_create(e, p, test_wake_signal, on_release, NULL, &r->s, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    rc = engine_submit(e, r->s, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
}

static void finish(run *r) {
    engine_seq_release(r->s);
    engine_chunk_deinit(&r->c);
}

static const int32_t P0[] = {5, 77, 300, 12, 9, 410, 33, 2, 250, 8, 91, 17, 64};
static const int32_t P1[] = {100, 200, 300};
static const int32_t P2[] = {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 45};

static void test_greedy_batch_invariant(void) {
    engine_seq_params p;
    run alone, mixed[4], chunked;
    engine *e = make_engine(4, 512);
    seq_params(&p, P0, 13, 24);
    start(e, &alone, &p);
    wait_all(&alone, 1);
    CHECK_EQ_INT(alone.finish, ENGINE_FINISH_LENGTH);
    CHECK_EQ_INT(alone.n_gen, 24);
    wait_idle(e);

    /* the same prompt among three others that arrive together */
    seq_params(&p, P1, 3, 30);
    start(e, &mixed[0], &p);
    seq_params(&p, P0, 13, 24);
    start(e, &mixed[1], &p);
    seq_params(&p, P2, 21, 10);
    start(e, &mixed[2], &p);
    seq_params(&p, P1, 3, 5);
    start(e, &mixed[3], &p);
    wait_all(mixed, 4);
    CHECK_MSG(!strcmp(alone.text, mixed[1].text), "alone %s\nmixed %s", alone.text, mixed[1].text);
    CHECK(!strncmp(mixed[0].text, mixed[3].text, strlen(mixed[3].text)));
    engine_destroy(e);

    /* prefill in chunks of 4 tokens */
    e = make_engine(4, 4);
    seq_params(&p, P0, 13, 24);
    start(e, &chunked, &p);
    wait_all(&chunked, 1);
    wait_idle(e);
    CHECK_MSG(!strcmp(alone.text, chunked.text), "alone %s\nchunk %s", alone.text, chunked.text);
    engine_stats st;
    engine_get_stats(e, &st);
    CHECK_EQ_INT(st.active, 0);
    CHECK_EQ_INT(st.cached_tokens, 0);
    engine_destroy(e);
    finish(&alone);
    finish(&chunked);
    for (int i = 0; i < 4; i++) finish(&mixed[i]);
}

static void test_stop_and_limits(void) {
    engine_seq_params p;
    run a, b;
    strata_err err = {0};
    engine *e = make_engine(2, 8);
    seq_params(&p, P0, 13, 6);
    start(e, &a, &p);
    wait_all(&a, 1);
    int32_t first = -1;
    CHECK(sscanf(a.text, "[%d]", &first) == 1);
    wait_idle(e);
    /* the first generated token as a stop id: one token, finish "stop", no text */
    seq_params(&p, P0, 13, 6);
    p.stop_ids = &first;
    p.n_stop_ids = 1;
    start(e, &b, &p);
    wait_all(&b, 1);
    CHECK_EQ_INT(b.finish, ENGINE_FINISH_STOP);
    CHECK_EQ_INT(b.n_gen, 1);
    CHECK_EQ_INT(b.len, 0);
    finish(&a);
    finish(&b);

    /* over the context: refused before admission, with both counts */
    engine_seq *s = NULL;
    seq_params(&p, P0, 13, 600);
    int rc = engine_seq_create(e, &p, NULL, NULL, NULL, &s, &err);
    CHECK_EQ_INT(rc, STRATA_ERANGE);
    CHECK(strstr(err.msg, "13 in the prompt") && strstr(err.msg, "600"));
    /* out-of-vocab prompt id */
    int32_t bad[] = {3, 100000};
    seq_params(&p, bad, 2, 4);
    CHECK_EQ_INT(engine_seq_create(e, &p, NULL, NULL, NULL, &s, &err), STRATA_EINVALID);
    engine_destroy(e);
}

static void test_cancel_frees_slot(void) {
    engine_seq_params p;
    run r[3];
    strata_err err = {0};
    engine *e = make_engine(2, 8);
    seq_params(&p, P2, 21, 400);
    start(e, &r[0], &p);
    start(e, &r[1], &p);
    /* both slots taken: a third submit is refused */
    engine_seq *extra = NULL;
    seq_params(&p, P1, 3, 4);
    CHECK_EQ_INT(engine_seq_create(e, &p, NULL, NULL, NULL, &extra, &err), 0);
    CHECK_EQ_INT(engine_submit(e, extra, &err), STRATA_EBUSY);
    engine_seq_release(extra);
    engine_seq_cancel(r[0].s);
    engine_seq_cancel(r[1].s);
    wait_all(r, 2);
    CHECK_EQ_INT(r[0].finish, ENGINE_FINISH_ABORT);
    CHECK_EQ_INT(r[1].finish, ENGINE_FINISH_ABORT);
    CHECK(r[0].n_gen < 400);
    /* the freed slot is reused at once */
    wait_idle(e);
    seq_params(&p, P1, 3, 4);
    start(e, &r[2], &p);
    wait_all(&r[2], 1);
    wait_idle(e);
    CHECK_EQ_INT(r[2].finish, ENGINE_FINISH_LENGTH);
    engine_stats st;
    engine_get_stats(e, &st);
    CHECK_EQ_INT(st.active, 0);
    CHECK(st.prompt_tokens >= 3);
    engine_destroy(e);
    for (int i = 0; i < 3; i++) finish(&r[i]);
}

static void test_seeded_sampling(void) {
    engine_seq_params p;
    run a[2];
    engine *e = make_engine(2, 16);
    for (int i = 0; i < 2; i++) {
        seq_params(&p, P1, 3, 20);
        p.sampling.temperature = 1.0f;
        p.sampling.top_p = 0.9f;
        p.sampling.seed = 1234;
        p.logprobs = 1;
        p.sampling.top_logprobs = 3;
        start(e, &a[i], &p);
    }
    wait_all(a, 2);
    CHECK_MSG(!strcmp(a[0].text, a[1].text), "%s vs %s", a[0].text, a[1].text);
    CHECK_EQ_INT(a[0].n_gen, 20);
    engine_destroy(e);
    for (int i = 0; i < 2; i++) finish(&a[i]);
}

/* The device loop where the backend has one (tests/device/test_cuda_engine.c runs this file
 * on the CUDA backend; on the CPU the counts below are 0): decode steps padded to their
 * batch-size bucket and chained behind each other with the tokens fed on the device give
 * each sequence the tokens it gets alone, as sequences finish at different steps (the
 * bucket shrinks: 3 -> 4 rows, then 2, then 1), for greedy, a seeded top-k and a seeded
 * top-p (at this 512-token vocabulary the device picks all of them for sure; the demo
 * model's larger one, where top-p steps wait for the host, is tests/cuda-host/sampling.sh).
 * A stop id ends a sequence at once although the step behind it already ran. */
static void test_device_loop(void) {
    engine_seq_params p[4];
    run alone[4], together[4], stop;
    const int max_tokens[4] = {9, 17, 5, 12};
    const int32_t *prompts[4] = {P0, P2, P0, P2};
    const int n_prompt[4] = {13, 21, 13, 21};
    engine *e = make_engine(4, 512);
    for (int i = 0; i < 4; i++) {
        seq_params(&p[i], prompts[i], n_prompt[i], max_tokens[i]);
        p[i].sampling.seed = 77 + i;
        if (i == 1) p[i].sampling.temperature = 1.0f, p[i].sampling.top_k = 8;
        if (i == 3) p[i].sampling.temperature = 0.9f, p[i].sampling.top_p = 0.8f;
        start(e, &alone[i], &p[i]);
        wait_all(&alone[i], 1);
        wait_idle(e);
    }
    engine_stats st0, st;
    engine_get_stats(e, &st0);
    for (int i = 0; i < 4; i++) start(e, &together[i], &p[i]);
    wait_all(together, 4);
    wait_idle(e);
    engine_get_stats(e, &st);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ_INT(together[i].n_gen, max_tokens[i]);
        CHECK_MSG(!strcmp(alone[i].text, together[i].text), "seq %d alone %s\ntogether %s", i,
                  alone[i].text, together[i].text);
    }
    int64_t chained = st.chained_decode_steps - st0.chained_decode_steps;
    int64_t pads = st.pad_rows - st0.pad_rows;
    if (backend_supports(B, BK_OP_GRAPHS, DTYPE_COUNT) &&
        backend_supports(B, BK_OP_SAMPLE, DTYPE_COUNT)) {
        CHECK_MSG(pads > 0 && chained > 0, "pads %lld, chained %lld", (long long)pads,
                  (long long)chained);
        CHECK_EQ_INT(st.eager_decode_steps - st0.eager_decode_steps, 0);
        CHECK_EQ_INT(st.sampled_host, 0);
    } else {
        CHECK(pads == 0 && chained == 0);
    }
    /* the second token of the greedy run as a stop id, on a chained run: two tokens */
    int32_t second = -1, first = -1;
    CHECK(sscanf(alone[0].text, "[%d][%d]", &first, &second) == 2);
    seq_params(&p[0], P0, 13, 9);
    p[0].stop_ids = &second;
    p[0].n_stop_ids = first != second;
    start(e, &stop, &p[0]);
    wait_all(&stop, 1);
    wait_idle(e);
    if (first != second) {
        CHECK_EQ_INT(stop.finish, ENGINE_FINISH_STOP);
        CHECK_EQ_INT(stop.n_gen, 2);
    }
    engine_get_stats(e, &st);
    CHECK_EQ_INT(st.cached_tokens, 0);
    engine_destroy(e);
    for (int i = 0; i < 4; i++) finish(&alone[i]), finish(&together[i]);
    finish(&stop);
}

static void test_destroy_aborts(void) {
    engine_seq_params p;
    run r;
    engine *e = make_engine(1, 8);
    seq_params(&p, P2, 21, 450);
    start(e, &r, &p);
    engine_destroy(e);
    CHECK(engine_seq_take(r.s, &r.c) == 1);
    CHECK(r.c.finish == ENGINE_FINISH_ABORT || r.c.finish == ENGINE_FINISH_LENGTH);
    finish(&r);
}

/* log-softmax of every prompt row from one model_forward over the whole prompt in
 * slot 0 (the engine is not running, so the model is ours): ref[i][v] = log p(v |
 * prompt[<=i]). */
static void reference_logprobs(const int32_t *prompt, int n, double (*ref)[512]) {
    strata_err err = {0};
    batch_buf bb;
    static float logits[32 * 512];
    int32_t rows[32];
    CHECK(n <= 32 && model_get_info(M)->vocab == 512);
    CHECK_EQ_INT(batch_buf_init(&bb, n, 1, &err), 0);
    batch_buf_add(&bb, 0, 0, n);
    for (int i = 0; i < n; i++) rows[i] = i;
    model_reset_slot(M, 0);
    CHECK_MSG(model_forward(M, &bb.bt, prompt, rows, n, logits, &err) == 0, "%s", err.msg);
    model_reset_slot(M, 0);
    batch_buf_deinit(&bb);
    for (int i = 0; i < n; i++) {
        const float *r = logits + (size_t)i * 512;
        double mx = r[0], z = 0;
        for (int v = 1; v < 512; v++) mx = r[v] > mx ? r[v] : mx;
        for (int v = 0; v < 512; v++) z += exp(r[v] - mx);
        for (int v = 0; v < 512; v++) ref[i][v] = r[v] - mx - log(z);
    }
}

/* r's prompt logprobs against ref: token i's logprob is ref[i-1][prompt[i]], its
 * alternatives are the n_top largest of ref[i-1] in order. */
static void check_prompt_logprobs(const run *r, const int32_t *prompt, int n, double (*ref)[512],
                                  int n_top) {
    CHECK(r->prompt_done && r->prompt_takes == 1);
    CHECK_EQ_INT(r->n_plp, n);
    CHECK_EQ_INT(r->plp[0].token, prompt[0]);
    CHECK_EQ_INT(r->plp[0].n_top, -1);
    for (int i = 1; i < n && i < r->n_plp; i++) {
        const sampler_result *t = &r->plp[i];
        CHECK_EQ_INT(t->token, prompt[i]);
        /* 1e-4: f32 log-softmax of the same logits; the batch layout changes only
         * the summation order inside the kernels */
        CHECK_NEAR(t->logprob, ref[i - 1][prompt[i]], 1e-4);
        CHECK_EQ_INT(t->n_top, n_top);
        for (int k = 0; k < t->n_top; k++) {
            int above = 0;
            for (int v = 0; v < 512; v++)
                if (ref[i - 1][v] > ref[i - 1][t->top[k].token] + 1e-6) above++;
            CHECK_MSG(above == k, "token %d alternative %d has %d above it", i, k, above);
            CHECK_NEAR(t->top[k].logprob, ref[i - 1][t->top[k].token], 1e-4);
        }
    }
}

static void test_prompt_logprobs(void) {
    static double ref0[32][512], ref2[32][512];
    engine_seq_params p;
    run plain, a, both[2], d, z, one;
    reference_logprobs(P0, 13, ref0);
    reference_logprobs(P2, 21, ref2);

    /* whole prompt in one step; generated tokens as without prompt logprobs */
    engine *e = make_engine(4, 512);
    seq_params(&p, P0, 13, 8);
    start(e, &plain, &p);
    wait_all(&plain, 1);
    CHECK(!plain.prompt_done);
    seq_params(&p, P0, 13, 8);
    p.prompt_logprobs = 1;
    p.sampling.top_logprobs = 3;
    start(e, &a, &p);
    wait_all(&a, 1);
    check_prompt_logprobs(&a, P0, 13, ref0, 3);
    CHECK_MSG(!strcmp(plain.text, a.text), "%s vs %s", plain.text, a.text);
    wait_idle(e);
    engine_destroy(e);

    /* chunks of 8 tokens, 5 prompt rows a step shared by two prompts: the chunks are
     * cut to the rows left, both still come out whole and equal to the reference */
    e = make_engine_rows(4, 8, 5);
    seq_params(&p, P0, 13, 8);
    p.prompt_logprobs = 1;
    p.sampling.top_logprobs = 2;
    start(e, &both[0], &p);
    seq_params(&p, P2, 21, 4);
    p.prompt_logprobs = 1;
    start(e, &both[1], &p);
    wait_all(both, 2);
    check_prompt_logprobs(&both[0], P0, 13, ref0, 2);
    check_prompt_logprobs(&both[1], P2, 21, ref2, 0);
    CHECK_MSG(!strcmp(plain.text, both[0].text), "%s vs %s", plain.text, both[0].text);
    wait_idle(e);

    /* max_tokens 0: the prompt's logprobs, no token, finish "length" */
    seq_params(&p, P2, 21, 0);
    p.prompt_logprobs = 1;
    p.sampling.top_logprobs = 1;
    start(e, &d, &p);
    wait_all(&d, 1);
    CHECK_EQ_INT(d.finish, ENGINE_FINISH_LENGTH);
    CHECK_EQ_INT(d.n_gen, 0);
    CHECK_EQ_INT((int)d.len, 0);
    check_prompt_logprobs(&d, P2, 21, ref2, 1);
    /* ... and without prompt logprobs it only prefills */
    seq_params(&p, P1, 3, 0);
    start(e, &z, &p);
    wait_all(&z, 1);
    CHECK(z.finish == ENGINE_FINISH_LENGTH && z.n_gen == 0 && !z.prompt_done);
    /* a one-token prompt: one entry, nothing predicts it */
    seq_params(&p, P1, 1, 2);
    p.prompt_logprobs = 1;
    start(e, &one, &p);
    wait_all(&one, 1);
    CHECK(one.prompt_done && one.n_plp == 1 && one.plp[0].n_top == -1 && one.n_gen == 2);
    wait_idle(e);
    engine_stats st;
    engine_get_stats(e, &st);
    CHECK_EQ_INT(st.cached_tokens, 0);
    engine_destroy(e);
    finish(&plain);
    finish(&a);
    finish(&both[0]);
    finish(&both[1]);
    finish(&d);
    finish(&z);
    finish(&one);
}

int main(void) {
    strata_err err = {0};
    int rc = backend_cpu_create(2, &B, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    model_opts mo = {.path = MODEL_DIR,
                     .weight_dtype = DTYPE_COUNT,
                     .max_seqs = 4,
                     .ctx_size = 512,
                     .step_tokens = 4 + 512};
    rc = model_open(&M, &mo, B, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) TEST_DONE();
    RUN(test_greedy_batch_invariant);
    RUN(test_stop_and_limits);
    RUN(test_cancel_frees_slot);
    RUN(test_seeded_sampling);
    RUN(test_device_loop);
    RUN(test_destroy_aborts);
    RUN(test_prompt_logprobs);
    model_close(M);
    backend_destroy(B);
    CHECK_EQ_INT(released, 30);
    TEST_DONE();
}
