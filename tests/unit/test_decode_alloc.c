/* test_decode_alloc.c - a steady-state decode step allocates nothing (style.md §12).
 *
 * tests/alloc_hook.h interposes malloc & co in this executable and counts every call
 * made, on any thread, while counting is on. For each tiny golden checkpoint (Qwen3.5,
 * Gemma 4, Nemotron-H) on the CPU backend: prefill four sequences, run a few warm-up
 * decode steps (first-use growth is allowed there), then count over N steps of
 *  - model_forward + sampler at batch 1,
 *  - model_forward + sampler at batch 4 (four slots, one token each),
 *  - a mixed step: three decodes plus a prefill chunk of a fresh sequence,
 *  - the engine's own step loop (engine/engine.c + sched.c: batch building, forward,
 *    sampler with penalties / top-p / logprobs, output buffers), without a tokenizer on
 *    qwen35_tiny and with the detokenizer (stop strings, reasoning split) on models/demo,
 * and require zero allocation (and free) calls, the CPU pool's worker threads included.
 * The detokenizer alone in its WINDOW mode (which re-decodes a window of recent ids per
 * token) on the synthetic Llama-style tokenizer.json synth_sp: zero calls too; on the
 * real sentencepiece model spm_tiny: zero calls from our own code (ALLOC_HOOK_EXE; the
 * shim's std::vector / std::string go through libstdc++'s operator new and cannot be
 * told apart from libsentencepiece's own, so the total is only printed).
 * Under AddressSanitizer nothing is interposed: the same steps run (ASan still checks
 * them) and only the counting is skipped. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_backend.h"
#include "engine/batch.h"
#include "engine/text/detok.h"
#include "engine/engine.h"
#include "models/model.h"
#include "engine/sampler.h"
#include "engine/text/tokenizer.h"
#include "tests/alloc_hook.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* only the unpacking is used here */
#include "tests/data/tokenizers/tok_fixture.h"
#pragma GCC diagnostic pop
#include "tests/test.h"
#include "tests/test_model.h"

enum {
    N_SEQ = 4, /* slots, sequences of the batched steps */
    CTX = 256,
    MAX_TOKENS = 64,
    WARM = 3,   /* warm-up steps before counting */
    STEPS = 16, /* counted steps */
};

static model *open_model(backend *b, const char *dir) {
    model_opts o = test_model_opts(dir, N_SEQ, CTX, MAX_TOKENS);
    model *m = test_model_open(b, &o);
    CHECK(m != NULL);
    return m;
}

/* Prompt i: n_prompt(i) ids spread over the vocabulary. */
static int n_prompt(int i) { return 5 + 4 * i; }
static void make_prompt(int32_t *p, int i, int vocab) {
    for (int k = 0; k < n_prompt(i); k++) p[k] = (int32_t)((7 + 31 * k + 101 * i) % vocab);
}

/* Counting window: prints the call sites when something allocated. */
static void count_begin(void) {
    if (alloc_hook_on()) alloc_hook_start(0);
}

static void count_end(const char *what) {
    if (!alloc_hook_on()) return;
    alloc_hook_stop();
    long a = alloc_hook_allocs(), f = alloc_hook_frees();
    CHECK_MSG(a == 0 && f == 0, "%s: %ld allocation and %ld free calls", what, a, f);
    if (a) alloc_hook_print_sites(stderr);
}

/* ---- model_forward + sampler ------------------------------------------------------------ */

typedef struct dec {
    model *m;
    int vocab;
    batch_buf bb;
    float *logits; /* [N_SEQ + MAX_TOKENS, vocab] */
    int32_t tokens[MAX_TOKENS], rows[MAX_TOKENS];
    sampler *smp[N_SEQ];
    int32_t last[N_SEQ];
    int pos[N_SEQ];
} dec;

/* Samplers that reach every branch the engine uses: greedy, and temperature with top-p,
 * min-p, penalties and top logprobs (the candidate sort). */
static int dec_sampler(sampler **out, int i, int vocab) {
    sampler_params p;
    strata_err err = {0};
    sampler_params_default(&p);
    if (i % 2) {
        p.temperature = 0.8f;
        p.top_p = i == 1 ? 0.9f : 0.999f; /* 0.999: more mass than the candidates: full sort */
        p.min_p = 0.01f;
        p.repetition_penalty = 1.1f;
        p.presence_penalty = 0.2f;
        p.frequency_penalty = 0.1f;
        p.top_logprobs = 5;
        p.seed = 42 + (uint64_t)i;
    }
    int rc = sampler_create(out, &p, vocab, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    return rc;
}

/* One step over the slots in which[0..n): each contributes one token (its last sample) or,
 * for prefill_slot, the chunk prompt[0..n_prompt). Samples every sequence with a row. */
static int dec_step(dec *d, const int *which, int n, int prefill_slot, const int32_t *prompt,
                    int n_prompt) {
    strata_err err = {0};
    batch_buf_clear(&d->bb);
    int n_out = 0, owner[N_SEQ];
    for (int k = 0; k < n; k++) {
        int s = which[k], len = s == prefill_slot ? n_prompt : 1;
        int first = batch_buf_add(&d->bb, s, d->pos[s], len);
        if (first < 0) return -1;
        if (s == prefill_slot) memcpy(d->tokens + first, prompt, sizeof(int32_t) * (size_t)len);
        else d->tokens[first] = d->last[s];
        d->rows[n_out] = first + len - 1;
        owner[n_out++] = s;
    }
    if (model_forward(d->m, &d->bb.bt, d->tokens, d->rows, n_out, d->logits, &err)) {
        fprintf(stderr, "forward: %s\n", err.msg);
        return -1;
    }
    for (int k = 0; k < n_out; k++) {
        int s = owner[k];
        sampler_result res;
        sampler_sample(d->smp[s], d->logits + (size_t)k * (size_t)d->vocab, &res);
        sampler_accept(d->smp[s], res.token);
        d->last[s] = res.token;
        d->pos[s] += s == prefill_slot ? n_prompt : 1;
    }
    return 0;
}

static void check_forward(backend *b, const char *dir) {
    const char *name = strrchr(dir, '/') + 1;
    dec d = {0};
    char what[128];
    int32_t prompt[32];
    d.m = open_model(b, dir);
    if (!d.m) return;
    d.vocab = model_get_info(d.m)->vocab;
    strata_err err = {0};
    CHECK(batch_buf_init(&d.bb, MAX_TOKENS, N_SEQ, &err) == 0);
    d.logits = malloc(sizeof(float) * (size_t)(N_SEQ + MAX_TOKENS) * (size_t)d.vocab);
    for (int s = 0; s < N_SEQ; s++) {
        if (dec_sampler(&d.smp[s], s, d.vocab)) goto done;
        make_prompt(prompt, s, d.vocab);
        for (int i = 0; i < n_prompt(s); i++) sampler_accept_prompt(d.smp[s], prompt[i]);
        CHECK(dec_step(&d, &s, 1, s, prompt, n_prompt(s)) == 0);
    }
    /* batch 1: slot 0 alone */
    int one[] = {0}, all[] = {0, 1, 2, 3}, mixed[] = {0, 1, 2, 3};
    int ok = 1;
    for (int i = 0; i < WARM; i++) ok &= dec_step(&d, one, 1, -1, NULL, 0) == 0;
    count_begin();
    for (int i = 0; i < STEPS; i++) ok &= dec_step(&d, one, 1, -1, NULL, 0) == 0;
    snprintf(what, sizeof what, "%s: decode at batch 1", name);
    count_end(what);
    /* batch 4: every slot one token */
    for (int i = 0; i < WARM; i++) ok &= dec_step(&d, all, N_SEQ, -1, NULL, 0) == 0;
    count_begin();
    for (int i = 0; i < STEPS; i++) ok &= dec_step(&d, all, N_SEQ, -1, NULL, 0) == 0;
    snprintf(what, sizeof what, "%s: decode at batch %d", name, N_SEQ);
    count_end(what);
    /* continuous batching: three decodes plus an 8-token prompt chunk of a new sequence
     * in slot 3, which then decodes along */
    model_reset_slot(d.m, 3);
    d.pos[3] = 0;
    make_prompt(prompt, 3, d.vocab); /* 17 ids: the chunk takes the first 8 */
    ok &= dec_step(&d, mixed, N_SEQ, 3, prompt, 8) == 0;
    model_reset_slot(d.m, 3);
    d.pos[3] = 0;
    count_begin();
    ok &= dec_step(&d, mixed, N_SEQ, 3, prompt, 8) == 0;
    for (int i = 0; i < STEPS; i++) ok &= dec_step(&d, all, N_SEQ, -1, NULL, 0) == 0;
    snprintf(what, sizeof what, "%s: prefill chunk + decodes", name);
    count_end(what);
    CHECK_MSG(ok, "%s: a step failed", name);
    for (int s = 0; s < N_SEQ; s++) CHECK(d.last[s] >= 0 && d.last[s] < d.vocab);
done:
    for (int s = 0; s < N_SEQ; s++) sampler_destroy(d.smp[s]);
    free(d.logits);
    batch_buf_deinit(&d.bb);
    model_close(d.m);
}

/* ---- the engine's step loop -------------------------------------------------------------- */

/* The step thread calls wake after each token; once `limit` tokens were sampled in all it
 * waits there until the test moves the limit, so counting starts and stops between two
 * known tokens and the step thread cannot run ahead of the counting window. */
static struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    engine *e;
    long limit; /* 0: open */
} G = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0};

static long generated(engine *e) {
    engine_stats st;
    engine_get_stats(e, &st);
    return (long)st.generated_tokens;
}

static void gate_wake(void *ud) {
    (void)ud;
    pthread_mutex_lock(&G.mu);
    pthread_cond_broadcast(&G.cv);
    while (G.limit && generated(G.e) >= G.limit) pthread_cond_wait(&G.cv, &G.mu);
    pthread_mutex_unlock(&G.mu);
}

/* Moves the limit to `limit` and returns once the step thread waits at it (or, with
 * limit 0, opens the gate). */
static void gate_run_to(long limit) {
    pthread_mutex_lock(&G.mu);
    G.limit = limit;
    pthread_cond_broadcast(&G.cv);
    while (limit && generated(G.e) < limit) pthread_cond_wait(&G.cv, &G.mu);
    pthread_mutex_unlock(&G.mu);
}

static int engine_idle(engine *e) {
    engine_stats st;
    engine_get_stats(e, &st);
    return st.active == 0;
}

static void check_engine(const char *dir, const char *tok_dir) {
    backend *b = NULL;
    model *m = NULL;
    tokenizer *tok = NULL;
    engine *e = NULL;
    engine_seq *seq[N_SEQ] = {0};
    engine_chunk out[N_SEQ];
    strata_err err = {0};
    char what[160];
    int rc = backend_cpu_create(2, &b, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    for (int i = 0; i < N_SEQ; i++) engine_chunk_init(&out[i]);
    if (!(m = open_model(b, dir))) goto done;
    if (tok_dir) {
        rc = tok_load(&tok, tok_dir, &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
        if (rc) goto done;
    }
    engine_opts eo = {.max_seqs = N_SEQ, .prefill_chunk = 16, .on_slot_free = gate_wake};
    rc = engine_create(&e, m, tok, &eo, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) goto done;
    G.e = e;
    int vocab = model_get_info(m)->vocab;
    /* Hold the step thread at 1 token per sequence until all four are admitted. */
    pthread_mutex_lock(&G.mu);
    G.limit = 1;
    pthread_mutex_unlock(&G.mu);
    static const char *stops[] = {"LORD God of Zion zzz", "\x01"}; /* held back, never hit */
    for (int i = 0; i < N_SEQ; i++) {
        int32_t prompt[32];
        make_prompt(prompt, i, vocab);
        engine_seq_params p = {.prompt = prompt,
                               .n_prompt = n_prompt(i),
                               .max_tokens = 200,
                               .ignore_eos = 1,
                               .logprobs = i % 2};
        sampler_params_default(&p.sampling);
        if (i % 2) {
            p.sampling.temperature = 0.9f;
            p.sampling.top_p = 0.9f;
            p.sampling.repetition_penalty = 1.05f;
            p.sampling.frequency_penalty = 0.1f;
            p.sampling.top_logprobs = 3;
            p.sampling.seed = 7 + (uint64_t)i;
        }
        if (tok) {
            p.n_stop = 2;
            p.stop = stops;
            p.split_reasoning = i == 2;
            p.skip_special = i == 3;
        }
        rc = engine_seq_create(e, &p, gate_wake, NULL, NULL, &seq[i], &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
        if (!rc) rc = engine_submit(e, seq[i], &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
        if (rc) goto done;
    }
    /* Warm-up: twice 64 tokens a sequence without taking the output, so that both
     * buffers a sequence swaps with its consumer have grown past what the 16 counted
     * tokens add (the output buffers grow to a fixed size, then only swap). */
    long at = 0;
    for (int phase = 0; phase < 2; phase++) {
        at += 64 * N_SEQ;
        gate_run_to(at);
        for (int i = 0; i < N_SEQ; i++) engine_seq_take(seq[i], &out[i]);
    }
    count_begin();
    gate_run_to(at + STEPS * N_SEQ);
    snprintf(what, sizeof what, "%s: engine step loop%s", strrchr(dir, '/') + 1,
             tok ? " with the detokenizer" : "");
    count_end(what);
    for (int i = 0; i < N_SEQ; i++) {
        engine_seq_take(seq[i], &out[i]);
        CHECK_MSG(out[i].finish == ENGINE_FINISH_NONE, "%s: sequence %d ended early (%s)", what, i,
                  engine_finish_name(out[i].finish));
        CHECK(out[i].n_generated >= 64 * 2);
    }
done:
    gate_run_to(0);
    for (int i = 0; i < N_SEQ; i++) engine_seq_cancel(seq[i]);
    if (e) {
        pthread_mutex_lock(&G.mu);
        while (!engine_idle(e)) pthread_cond_wait(&G.cv, &G.mu);
        pthread_mutex_unlock(&G.mu);
    }
    engine_destroy(e);
    G.e = NULL;
    for (int i = 0; i < N_SEQ; i++) {
        engine_seq_release(seq[i]);
        engine_chunk_deinit(&out[i]);
    }
    tok_free(tok);
    model_close(m);
    backend_destroy(b);
}

/* ---- the detokenizer alone, WINDOW mode --------------------------------------------------- */

enum { DETOK_WARM = 600, DETOK_COUNT = 300 }; /* ids pushed before / while counting */

/* Streams a long text's ids through a detok: warm-up pushes first, then counts
 * DETOK_COUNT pushes in scope. Returns the allocation calls made by those pushes (-1 when
 * counting is off); the streamed text must equal tok_decode of the same ids. */
static long detok_window_allocs(const char *name, int scope) {
    static const char para[] =
        "And the LORD said unto Moses, Go in unto Pharaoh, and tell him. Caf\xc3\xa9 "
        "na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac don't stop , it 's 42 ! Then they went "
        "out of the city, and the people followed them into the wilderness of Zin. ";
    tokfx_dir dir;
    tokenizer *t = NULL;
    detok *d = NULL;
    strata_err err = {0};
    char *text = NULL, *full = NULL, *got = NULL;
    int32_t *ids = NULL;
    size_t n = 0, tl = 0, flen = 0, gl = 0;
    long calls = -1;
    int rc = tokfx_unpack(&dir, name);
    CHECK_MSG(rc == 0, "%s: cannot unpack", name);
    if (rc) return -1;
    rc = tok_load(&t, dir.path, &err);
    CHECK_MSG(rc == 0, "%s: %s", name, err.msg);
    if (rc) goto done;
    text = malloc(sizeof para * 40);
    for (int i = 0; i < 40; i++) memcpy(text + tl, para, sizeof para - 1), tl += sizeof para - 1;
    rc = tok_encode(t, text, tl, 0, &ids, &n, &err);
    CHECK_MSG(rc == 0 && n >= DETOK_WARM + DETOK_COUNT, "%s: %zu ids", name, n);
    if (rc || n < DETOK_WARM + DETOK_COUNT) goto done;
    n = DETOK_WARM + DETOK_COUNT;
    static const char *stops[] = {"wilderness of Zinc", "\x01"}; /* held back, never hit */
    detok_opts o = {.n_stop = 2, .stop = stops};
    rc = detok_create(&d, t, &o, &err);
    CHECK_MSG(rc == 0, "%s: %s", name, err.msg);
    if (rc) goto done;
    got = malloc(16 * n + 64);
    detok_out out;
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        if (i == DETOK_WARM && alloc_hook_on()) alloc_hook_start_scope(0, scope);
        ok &= detok_push(d, ids[i], &out, &err) == 0;
        memcpy(got + gl, out.text, out.text_len); /* memcpy: nothing allocates here */
        gl += out.text_len;
    }
    if (alloc_hook_on()) {
        alloc_hook_stop();
        calls = alloc_hook_allocs();
        if (alloc_hook_allocs() && scope == ALLOC_HOOK_EXE) alloc_hook_print_sites(stderr);
    }
    ok &= detok_finish(d, &out, &err) == 0;
    memcpy(got + gl, out.text, out.text_len);
    gl += out.text_len;
    CHECK_MSG(ok, "%s: %s", name, err.msg);
    CHECK(!tok_decode(t, ids, n, 0, &full, &flen, &err));
    CHECK_MSG(full && gl == flen && !memcmp(got, full, gl), "%s: streamed text differs", name);
done:
    detok_free(d);
    free(text);
    free(full);
    free(got);
    free(ids);
    tok_free(t);
    tokfx_cleanup(&dir);
    return calls;
}

static void test_detok_window(void) {
    /* synth_sp: a Llama decoder (Strip after Fuse) forces the WINDOW mode */
    long all = detok_window_allocs("synth_sp", ALLOC_HOOK_ALL);
    if (alloc_hook_on()) {
        fprintf(stderr, "  synth_sp detok (WINDOW): %ld allocation calls in %d tokens\n", all,
                DETOK_COUNT);
        CHECK_MSG(all == 0, "synth_sp detok: %ld allocation calls", all);
    }
    /* spm_tiny: tokenizer.model through libsentencepiece */
    long ours = detok_window_allocs("spm_tiny", ALLOC_HOOK_EXE);
    all = detok_window_allocs("spm_tiny", ALLOC_HOOK_ALL);
    if (alloc_hook_on()) {
        fprintf(stderr,
                "  spm_tiny detok (WINDOW): %ld allocation calls in %d tokens from our "
                "code, %.1f per token in all (libsentencepiece's Decode, see spm.h)\n",
                ours, DETOK_COUNT, (double)all / DETOK_COUNT);
        CHECK_MSG(ours == 0, "spm_tiny detok: %ld allocation calls from our code", ours);
    }
}

static void test_forward_families(void) {
    static const char *dirs[] = {"tests/golden/qwen35_tiny", "tests/golden/gemma4_tiny",
                                 "tests/golden/nemotron_h_tiny"};
    backend *b = NULL;
    strata_err err = {0};
    int rc = backend_cpu_create(2, &b, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    for (int i = 0; i < 3; i++) check_forward(b, dirs[i]);
    backend_destroy(b);
}

static void test_engine_loop(void) { check_engine("tests/golden/qwen35_tiny", NULL); }

static void test_engine_loop_detok(void) { check_engine("models/demo", "models/demo"); }

int main(void) {
    if (!alloc_hook_on())
        fprintf(stderr, "  AddressSanitizer build: the decode steps run, allocation counting "
                        "is skipped\n");
    RUN(test_detok_window);
    RUN(test_forward_families);
    RUN(test_engine_loop);
    RUN(test_engine_loop_detok);
    TEST_DONE();
}
