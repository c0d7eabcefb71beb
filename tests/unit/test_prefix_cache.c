/* test_prefix_cache.c - the paged kv pool and the prefix cache are exact: logits after a
 * restored prefix equal, bit for bit, those of the same tokens computed from the start.
 *
 * Model level, on the golden checkpoints of all three families and the demo model: a
 * prompt computed whole in one slot, against its prefix computed in another slot whose
 * blocks and state are then handed to a third (model_kv_attach, model_state_save / load),
 * which computes only the rest. Gemma's sliding rings travel in the state, so the golden
 * Gemma's window of 8 is crossed.
 *
 * Engine level, on the demo model: the same request twice, a multi-turn chat whose turns
 * extend the previous one's prompt and answer, two prompts sharing a prefix of a length
 * that is no block multiple, and a cache too small for what goes through it (snapshots and
 * kv blocks evicted): every output (greedy tokens and their logprobs, alternatives
 * included) equals an engine's without the cache, and cached_tokens says what was reused. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/model.h"
#include "tests/test.h"
#include "tests/test_wake.h"
#include "tests/test_model.h"

static backend *B;

/* ---- model level ---- */

static model *open_model_kv(const char *dir, int slots, int ctx, int block, int64_t kv_bytes) {
    model_opts o = test_model_opts(dir, slots, ctx, 64);
    o.kv_block = block;
    o.kv_memory = kv_bytes;
    model *m = test_model_open(B, &o);
    CHECK(m != NULL);
    return m;
}

static model *open_model(const char *dir, int slots, int ctx, int block) {
    return open_model_kv(dir, slots, ctx, block, 0);
}

/* One sequence's tokens [pos0, pos0 + n) in slot, logits of every row into lg. */
static int forward_try(model *m, int slot, const int32_t *ids, int pos0, int n, float *lg,
                       strata_err *err) {
    int32_t slots[1] = {slot}, start[1] = {0}, len[1] = {n}, p0[1] = {pos0};
    int32_t tp[64], ts[64], rows[64];
    for (int i = 0; i < n; i++) {
        tp[i] = pos0 + i;
        ts[i] = 0;
        rows[i] = i;
    }
    bk_batch bt = {.n_tokens = n,
                   .n_seqs = 1,
                   .slot = slots,
                   .start = start,
                   .len = len,
                   .pos0 = p0,
                   .tok_pos = tp,
                   .tok_seq = ts};
    return model_forward(m, &bt, ids + pos0, rows, n, lg, err);
}

static int forward_run(model *m, int slot, const int32_t *ids, int pos0, int n, float *lg) {
    strata_err err = {0};
    int rc = forward_try(m, slot, ids, pos0, n, lg, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    return rc;
}

/* n tokens of a prompt whose prefix of pre (a block multiple) is restored. */
static void check_restored_prefix(const char *dir, int n, int pre, int block) {
    model *m = open_model(dir, 3, 64, block);
    if (!m) return;
    const model_info *mi = model_get_info(m);
    CHECK(mi->kv_block == block && mi->kv_blocks > 0 && mi->slot_state_bytes > 0);
    int32_t ids[64];
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 37 + 11) % mi->vocab);
    size_t V = (size_t)mi->vocab;
    float *ref = malloc(sizeof(float) * V * (size_t)n),
          *got = malloc(sizeof(float) * V * (size_t)n);
    void *snap = B->ops->alloc(B, (size_t)mi->slot_state_bytes);
    if (!ref || !got || !snap) abort();

    /* slot 2: the whole prompt, computed */
    model_reset_slot(m, 2);
    forward_run(m, 2, ids, 0, n, ref);
    /* slot 0: the prefix, then its state saved; slot 1 starts from slot 0's blocks */
    model_reset_slot(m, 0);
    forward_run(m, 0, ids, 0, pre, got);
    model_state_save(m, 0, snap);
    const int32_t *tbl;
    int n_blk = model_kv_table(m, 0, &tbl);
    CHECK_EQ_INT(n_blk, pre / block);
    int used = model_kv_used(m);
    model_reset_slot(m, 1);
    model_kv_attach(m, 1, tbl, pre / block);
    CHECK_EQ_INT(model_kv_used(m), used); /* shared, not copied */
    model_state_load(m, 1, snap);
    /* slot 0 moves on with other tokens: slot 1 must not see them (its blocks are
     * read-only for it, its own positions land in new blocks) */
    int32_t other[64];
    for (int i = 0; i < n; i++) other[i] = (int32_t)((i * 101 + 3) % mi->vocab);
    memcpy(other, ids, sizeof(int32_t) * (size_t)pre);
    forward_run(m, 0, other, pre, n - pre, got);
    forward_run(m, 1, ids, pre, n - pre, got);
    size_t diff = 0;
    for (size_t i = 0; i < (size_t)(n - pre) * V; i++)
        diff += memcmp(&got[i], &ref[(size_t)pre * V + i], sizeof(float)) != 0;
    CHECK_MSG(diff == 0, "%s: %zu logits differ after a restored prefix of %d", dir, diff, pre);
    /* releasing both slots gives every block back */
    model_release_slot(m, 0);
    model_release_slot(m, 1);
    model_release_slot(m, 2);
    CHECK_EQ_INT(model_kv_used(m), 0);
    B->ops->free(B, snap);
    free(ref);
    free(got);
    model_close(m);
}

static void test_model_restore_exact(void) {
    check_restored_prefix("tests/golden/qwen35_tiny", 29, 16, 8);
    check_restored_prefix("tests/golden/nemotron_h_tiny", 29, 16, 8);
    check_restored_prefix("tests/golden/gemma4_tiny", 29, 16, 4);
    check_restored_prefix("tests/golden/qwen35_tiny_bf16", 21, 12, 4);
    check_restored_prefix("models/demo", 40, 32, 16);
}

/* A pool too small for a request fails its step with a clear error and corrupts nothing;
 * the context a model reports is what its pool holds. */
static void test_pool_limits(void) {
    model *m = NULL;
    strata_err err = {0};
    model_opts o = test_model_opts("tests/golden/qwen35_tiny", 2, 0, 64);
    o.kv_block = 8;
    CHECK(model_open(&m, &o, B, &err) == 0);
    if (!m) return;
    const model_info *mi = model_get_info(m);
    CHECK_EQ_INT(mi->ctx_size, 512); /* max_position_embeddings by default */
    int64_t blk = mi->kv_block_bytes;
    model_close(m);
    m = NULL;
    o.kv_memory = blk * 5; /* 40 positions */
    CHECK(model_open(&m, &o, B, &err) == 0);
    if (!m) return;
    mi = model_get_info(m);
    CHECK_EQ_INT(mi->kv_blocks, 5);
    CHECK_EQ_INT(mi->ctx_size, 40);
    int32_t ids[64] = {0};
    float *lg = malloc(sizeof(float) * (size_t)mi->vocab * 64);
    if (!lg) abort();
    model_reset_slot(m, 0);
    forward_run(m, 0, ids, 0, 24, lg); /* 3 blocks */
    CHECK_EQ_INT(model_kv_free(m), 2);
    CHECK_EQ_INT(model_kv_need(m, 1, 24), 3);
    /* 24 more positions in slot 1 need 3 blocks; 2 are free */
    CHECK_EQ_INT(forward_try(m, 1, ids, 0, 24, lg, &err), STRATA_EBUSY);
    CHECK(strstr(err.msg, "kv-cache-memory") != NULL);
    model_reset_slot(m, 0);
    CHECK_EQ_INT(model_kv_free(m), 5);
    free(lg);
    model_close(m);
    /* a budget below one block is refused at open, naming the option */
    o.kv_memory = blk - 1;
    CHECK(model_open(&m, &o, B, &err) == STRATA_ENOMEM);
    CHECK(strstr(err.msg, "kv-cache-memory") != NULL);
}

/* ---- engine level ---- */

typedef struct out {
    int32_t ids[64];
    sampler_result res[64];
    int n, finish, cached;
} out;

/* Runs one greedy request of n_gen tokens with logprobs to its end. */
static void generate(engine *e, const int32_t *prompt, int n, int n_gen, out *o) {
    engine_seq_params p;
    memset(&p, 0, sizeof p);
    p.prompt = prompt;
    p.n_prompt = n;
    p.max_tokens = n_gen;
    p.logprobs = 1;
    p.ignore_eos = 1;
    sampler_params_default(&p.sampling);
    p.sampling.top_logprobs = 5;
    engine_seq *s = NULL;
    strata_err err = {0};
    memset(o, 0, sizeof *o);
    CHECK(engine_seq_create(e, &p, test_wake_signal, NULL, NULL, &s, &err) == 0);
    CHECK_MSG(engine_submit(e, s, &err) == 0, "%s", err.msg);
    engine_chunk c;
    engine_chunk_init(&c);
    while (!o->finish) {
        int seen = test_wake_count();
        if (engine_seq_take(s, &c)) {
            for (int i = 0; i < c.n_tok && o->n < 64; i++) {
                o->res[o->n] = c.tok[i];
                o->ids[o->n++] = c.tok[i].token;
            }
            o->finish = c.finish;
            continue;
        }
        test_wake_wait(seen);
    }
    CHECK_MSG(o->finish == ENGINE_FINISH_LENGTH, "finish %d: %s", o->finish, c.error);
    o->cached = engine_seq_cached_tokens(s);
    engine_chunk_deinit(&c);
    engine_seq_release(s);
    /* the slot (and the pending snapshot's commit) is done between steps */
    for (;;) {
        engine_stats st;
        engine_get_stats(e, &st);
        if (!st.active) break;
        pthread_mutex_lock(&test_wakes.mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 2000000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&test_wakes.cv, &test_wakes.mu, &ts);
        pthread_mutex_unlock(&test_wakes.mu);
    }
}

typedef struct job {
    engine *e;
    const int32_t *p;
    out *o;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    generate(j->e, j->p, 40, 50, j->o);
    return NULL;
}

static int same(const out *a, const out *b) {
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++) {
        const sampler_result *x = &a->res[i], *y = &b->res[i];
        if (x->token != y->token || memcmp(&x->logprob, &y->logprob, sizeof(float)) ||
            x->n_top != y->n_top)
            return 0;
        for (int k = 0; k < x->n_top; k++)
            if (x->top[k].token != y->top[k].token ||
                memcmp(&x->top[k].logprob, &y->top[k].logprob, sizeof(float)))
                return 0;
    }
    return 1;
}

static model *DEMO;

static engine *make_engine_on(model *m, int prefix, int64_t snap_bytes) {
    engine_opts o = {.max_seqs = 2,
                     .prefill_chunk = 48,
                     .on_slot_free = test_wake_signal,
                     .prefix_cache = prefix,
                     .prefix_cache_memory = snap_bytes,
                     .prefix_interval = 32};
    engine *e = NULL;
    strata_err err = {0};
    CHECK_MSG(engine_create(&e, m, NULL, &o, &err) == 0, "%s", err.msg);
    return e;
}

static engine *make_engine(int prefix, int64_t snap_bytes) {
    return make_engine_on(DEMO, prefix, snap_bytes);
}

static void prompt_ids(int32_t *p, int n, int seed) {
    for (int i = 0; i < n; i++)
        p[i] = (int32_t)(((i + 1) * (seed * 2 + 31) + seed * 7) % 4000 + 10);
}

static void test_engine_same_prompt_twice(void) {
    int32_t p[100];
    prompt_ids(p, 100, 1);
    engine *plain = make_engine(0, 0), *e = make_engine(1, 0);
    out ref, a, b;
    generate(plain, p, 100, 20, &ref);
    CHECK_EQ_INT(ref.cached, 0);
    generate(e, p, 100, 20, &a);
    CHECK_EQ_INT(a.cached, 0);
    generate(e, p, 100, 20, &b);
    CHECK_EQ_INT(b.cached, 96); /* the last block boundary before the prompt's last token */
    CHECK_MSG(same(&ref, &a) && same(&ref, &b), "outputs differ with the prefix cache");
    engine_stats st;
    engine_get_stats(e, &st);
    CHECK(st.prefix_cache == 1 && st.prefix_queries == 2 && st.prefix_hits == 1);
    CHECK(st.prefix_hit_tokens == 96 && st.prefix_query_tokens == 200);
    CHECK(st.prefix_snapshots >= 2); /* at 32, 64 (interval), 96 (end of prompt), 112 (end) */
    engine_destroy(plain);
    engine_destroy(e);
}

/* Each turn's prompt is the last turn's prompt and answer plus new tokens: the state the
 * answer ended at is found (its last block boundary), not only the prompt's. */
static void test_engine_multi_turn(void) {
    engine *plain = make_engine(0, 0), *e = make_engine(1, 0);
    int32_t conv[400];
    int n = 40;
    prompt_ids(conv, n, 2);
    for (int turn = 0; turn < 4; turn++) {
        out ref, got;
        generate(plain, conv, n, 24, &ref);
        generate(e, conv, n, 24, &got);
        CHECK_MSG(same(&ref, &got), "turn %d differs with the prefix cache", turn);
        if (turn > 0) /* the previous turn's prompt + answer, to its last block boundary */
            CHECK_MSG(got.cached >= (n - 24 - 17) / 16 * 16, "turn %d: %d cached of %d", turn,
                      got.cached, n);
        memcpy(conv + n, got.ids, sizeof(int32_t) * 24);
        n += 24;
        int32_t extra[17];
        prompt_ids(extra, 17, 10 + turn);
        memcpy(conv + n, extra, sizeof extra);
        n += 17;
    }
    engine_destroy(plain);
    engine_destroy(e);
}

/* Two prompts share 37 tokens: the second restores 32 (two whole blocks and the snapshot
 * there) and computes the rest. */
static void test_engine_shared_prefix(void) {
    int32_t a[60], b[60];
    prompt_ids(a, 60, 3);
    memcpy(b, a, sizeof a);
    prompt_ids(b + 37, 23, 4);
    engine *plain = make_engine(0, 0), *e = make_engine(1, 0);
    out ra, rb, ga, gb;
    generate(plain, a, 60, 12, &ra);
    generate(plain, b, 60, 12, &rb);
    generate(e, a, 60, 12, &ga);
    generate(e, b, 60, 12, &gb);
    CHECK_EQ_INT(gb.cached, 32);
    CHECK(same(&ra, &ga) && same(&rb, &gb));
    engine_destroy(plain);
    engine_destroy(e);
}

/* The demo model again, 2 slots, with a kv pool of only n_blocks blocks of 16 positions. */
static model *open_demo_pool(int n_blocks) {
    int64_t blk = model_get_info(DEMO)->kv_block_bytes;
    return open_model_kv("models/demo", 2, 512, 16, blk * n_blocks);
}

/* Room for one snapshot and a pool of a few blocks: what is evicted is recomputed, and
 * nothing changes an output. */
static void test_engine_eviction(void) {
    model *small = open_demo_pool(12); /* 192 positions */
    if (!small) return;
    const model_info *mi = model_get_info(small);
    CHECK_EQ_INT(mi->kv_blocks, 12);
    engine *plain = make_engine(0, 0), *e = make_engine_on(small, 1, 1);
    int32_t p[4][70];
    out ref[4], got[4];
    for (int i = 0; i < 4; i++) {
        prompt_ids(p[i], 70, 20 + i);
        generate(plain, p[i], 70, 10, &ref[i]);
    }
    for (int i = 0; i < 4; i++) {
        generate(e, p[i], 70, 10, &got[i]);
        CHECK_MSG(same(&ref[i], &got[i]), "prompt %d differs", i);
    }
    /* again, newest first: the last prompt's snapshot (at 64, its last block boundary) is
     * the one the budget kept; the others were evicted and are recomputed */
    for (int i = 3; i >= 0; i--) {
        generate(e, p[i], 70, 10, &got[i]);
        CHECK_MSG(same(&ref[i], &got[i]), "prompt %d differs the second time", i);
        CHECK_EQ_INT(got[i].cached, i == 3 ? 64 : 0);
    }
    engine_stats st;
    engine_get_stats(e, &st);
    CHECK_EQ_INT(st.prefix_snapshots, 1);
    CHECK_EQ_INT(st.prefix_hits, 1);
    /* four prompts of 4 cached blocks each do not fit 12 with a sequence running: the
     * cache gave blocks back */
    CHECK(st.kv_blocks == 12 && st.kv_blocks_peak == 12 && st.prefix_blocks < 16);
    engine_destroy(plain);
    engine_destroy(e);
    model_close(small);
}

/* Two sequences that together outgrow the pool: the younger gives its blocks up, is
 * computed again once the older one is done, and both outputs are the ones of a pool that
 * holds everything (with and without the prefix cache to recompute from). */
static void test_engine_preemption(void) {
    model *small = open_demo_pool(8); /* 128 positions */
    if (!small) return;
    engine *plain = make_engine(0, 0);
    int32_t a[40], b[40];
    prompt_ids(a, 40, 30);
    prompt_ids(b, 40, 31);
    out ra, rb;
    generate(plain, a, 40, 50, &ra);
    generate(plain, b, 40, 50, &rb);
    for (int prefix = 0; prefix < 2; prefix++) {
        engine *e = make_engine_on(small, prefix, 0);
        /* both at once: 2 x 90 positions need 12 blocks of the 8 */
        out got[2];
        pthread_t th[2];
        job jobs[2] = {{e, a, &got[0]}, {e, b, &got[1]}};
        for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, run_job, &jobs[i]);
        for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
        CHECK_MSG(same(&ra, &got[0]) && same(&rb, &got[1]),
                  "prefix %d: a preempted sequence "
                  "came out different",
                  prefix);
        engine_stats st;
        engine_get_stats(e, &st);
        CHECK_MSG(st.kv_evictions >= 1, "prefix %d: no preemption (%lld)", prefix,
                  (long long)st.kv_evictions);
        engine_destroy(e);
    }
    engine_destroy(plain);
    model_close(small);
}

int main(void) {
    strata_err err = {0};
    int rc = backend_cpu_create(2, &B, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) TEST_DONE();
    RUN(test_model_restore_exact);
    RUN(test_pool_limits);
    DEMO = open_model("models/demo", 2, 512, 16);
    if (DEMO) {
        RUN(test_engine_same_prompt_twice);
        RUN(test_engine_multi_turn);
        RUN(test_engine_shared_prefix);
        RUN(test_engine_eviction);
        RUN(test_engine_preemption);
        model_close(DEMO);
    }
    backend_destroy(B);
    TEST_DONE();
}
