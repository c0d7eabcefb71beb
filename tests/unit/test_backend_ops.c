/* test_backend_ops.c - every backend fills every mandatory slot of the ops table
 * (kernels/backend.h), and answers backend_supports() as its slots say.
 *
 * The mandatory slots are the function pointers from destroy through ssd, laid out one
 * after another; a backend that leaves one NULL would crash the first model that calls
 * it, so each is checked here on every backend this machine can make: the CPU backend
 * at every ISA it runs, and CUDA when a GPU is there. */
#include <stddef.h>
#include <string.h>

#include "kernels/backend_select.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/test.h"

typedef void (*slot_fn)(void);

/* The mandatory slots, in order, for the messages. */
static const char *const mandatory[] = {"destroy",
                                        "alloc",
                                        "free",
                                        "upload",
                                        "download",
                                        "zero",
                                        "copy",
                                        "weight_prepare",
                                        "weight_release",
                                        "batch_prepare",
                                        "embed",
                                        "rmsnorm",
                                        "rmsnorm_gated",
                                        "residual",
                                        "l2norm",
                                        "add",
                                        "silu_mul",
                                        "sigmoid_mul",
                                        "split_halves",
                                        "gather_rows",
                                        "matmul",
                                        "matmul_n",
                                        "matmul_glu",
                                        "matmul_gnorm",
                                        "rope",
                                        "kv_store",
                                        "attention",
                                        "attn_prep",
                                        "conv1d",
                                        "gdn_gates",
                                        "gated_delta",
                                        "gdn",
                                        "gelu_tanh_mul",
                                        "relu2",
                                        "scale",
                                        "softcap",
                                        "rmsnorm_gated_grouped",
                                        "ssd"};

static void check_backend(const backend *b, const char *what) {
    const backend_ops *o = b->ops;
    size_t first = offsetof(backend_ops, destroy), last = offsetof(backend_ops, ssd);
    size_t n = (last - first) / sizeof(slot_fn) + 1;
    CHECK_MSG(n == sizeof mandatory / sizeof mandatory[0],
              "%zu mandatory slots in backend_ops, %zu named here: update the list", n,
              sizeof mandatory / sizeof mandatory[0]);
    for (size_t i = 0; i < n; i++) {
        slot_fn f;
        memcpy(&f, (const char *)o + first + i * sizeof(slot_fn), sizeof f);
        CHECK_MSG(f != NULL, "%s backend: mandatory slot %s is NULL", what,
                  i < sizeof mandatory / sizeof mandatory[0] ? mandatory[i] : "?");
    }
    CHECK(o->name && o->name[0]);
    /* every mandatory op takes the checkpoint dtypes */
    for (int op = 0; op < BK_OP_FIRST_OPTIONAL; op++) {
        CHECK_MSG(backend_supports(b, op, DTYPE_COUNT), "%s: op %d", what, op);
        CHECK_MSG(backend_supports(b, op, DTYPE_BF16) && backend_supports(b, op, DTYPE_F32),
                  "%s: op %d", what, op);
    }
    /* optional slots: supported exactly when filled */
    CHECK(backend_supports(b, BK_OP_GRAPHS, DTYPE_COUNT) ==
          (o->graph_begin && o->graph_end && o->graph_sync));
    CHECK(backend_supports(b, BK_OP_SAMPLE, DTYPE_COUNT) == (o->sample != NULL));
    CHECK(backend_supports(b, BK_OP_EMBED_FED, DTYPE_COUNT) == (o->embed_fed != NULL));
    CHECK(backend_supports(b, BK_OP_MEMORY, DTYPE_COUNT) == (o->memory != NULL));
    CHECK(backend_supports(b, BK_OP_READ_BANDWIDTH, DTYPE_COUNT) == (o->read_bandwidth != NULL));
    CHECK(backend_supports(b, BK_OP_PROFILE, DTYPE_COUNT) == (o->profile && o->profile_read));
    CHECK(backend_supports(b, BK_OP_HOST_TASKS, DTYPE_COUNT) == (o->host_tasks != NULL));
    CHECK(!backend_supports(b, BK_OP_COUNT, DTYPE_COUNT) && !backend_supports(b, -1, DTYPE_COUNT));
    backend_mem m;
    CHECK((backend_memory(b, &m) == 0) == (o->memory != NULL));
}

static void test_cpu_every_isa(void) {
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_backend_isa_supported((cpu_isa)isa)) continue;
        backend *b = NULL;
        strata_err err = {0};
        CHECK_MSG(cpu_backend_create_isa(1, (cpu_isa)isa, &b, &err) == 0, "%s", err.msg);
        if (!b) continue;
        check_backend(b, cpu_backend_isa_name((cpu_isa)isa));
        /* the CPU has no graphs or device sampling; it measures its bandwidth */
        CHECK(!b->ops->graph_begin && !b->ops->sample && b->ops->read_bandwidth);
        backend_destroy(b);
    }
}

static void test_cuda_when_present(void) {
    backend *b = NULL;
    strata_err err = {0};
    if (backend_create("cuda", 0, &b, &err)) {
        fprintf(stderr, "  (no CUDA backend here: %s)\n", err.msg);
        return;
    }
    check_backend(b, "cuda");
    CHECK(b->ops->graph_begin && b->ops->sample && b->ops->embed_fed && b->ops->memory);
    backend_destroy(b);
}

static int op_count(const bk_op_time *t, int n, const char *op) {
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].op, op)) return t[i].count;
    return 0;
}

/* The CPU's profile: while on, every op of a forward goes through a timing wrapper (a new
 * op that the profile does not wrap would be missing from every profile, so each compute
 * slot must differ from the backend's own), the ops' results are the backend's, bit for
 * bit, and the times restart at each batch_prepare. */
static void test_cpu_profile(void) {
    backend *b = NULL;
    strata_err err = {0};
    CHECK_MSG(backend_cpu_create(2, &b, &err) == 0, "%s", err.msg);
    if (!b) return;
    const backend_ops *own = b->ops;
    bk_op_time t[8];
    CHECK(own->profile_read(b, t, 8) == -1); /* not on: nothing timed */
    own->profile(b, 1);
    const backend_ops *p = b->ops;
    CHECK(p != own && p->profile == own->profile && p->alloc == own->alloc);
    size_t first = offsetof(backend_ops, embed), last = offsetof(backend_ops, ssd);
    for (size_t off = first; off <= last; off += sizeof(slot_fn)) {
        slot_fn a, w;
        memcpy(&a, (const char *)own + off, sizeof a);
        memcpy(&w, (const char *)p + off, sizeof w);
        CHECK_MSG(a != w, "profile: the op at slot %zu is not timed",
                  (off - offsetof(backend_ops, destroy)) / sizeof(slot_fn));
    }
    CHECK(p->copy != own->copy && p->zero != own->zero && p->batch_prepare != own->batch_prepare);
    b->ops->profile(b, 1); /* on twice: still the one table */
    CHECK(b->ops == p);
    CHECK(p->profile_read(b, t, 8) == -1); /* on, but no op yet */

    enum { N = 96, K = 160, M = 3 };
    static float wv[N * K], x[M * K], y0[M * N], y1[M * N], r0[M * K], r1[M * K];
    for (int i = 0; i < N * K; i++) wv[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    for (int i = 0; i < M * K; i++) x[i] = (float)((i * 13) % 29) / 7.0f - 2.0f;
    bk_weight w = {.data = wv, .dt = DTYPE_F32, .ndim = 2, .shape = {N, K}};
    int32_t one = 0, tok[M] = {0, 0, 0}, pos[M] = {0, 1, 2}, len = M;
    bk_batch bt = {.n_tokens = M,
                   .n_seqs = 1,
                   .slot = &one,
                   .start = &one,
                   .len = &len,
                   .pos0 = &one,
                   .tok_pos = pos,
                   .tok_seq = tok};
    CHECK(b->ops->batch_prepare(b, &bt, &err) == 0);
    b->ops->matmul(b, y0, x, &w, M);
    b->ops->matmul(b, y0, x, &w, M);
    b->ops->rmsnorm(b, r0, x, NULL, M, K, K, 1e-6f, BK_NORM_NONE);
    int n = b->ops->profile_read(b, t, 8);
    CHECK_MSG(n == 2, "%d kinds timed, 2 expected", n);
    if (n == 2) {
        CHECK(op_count(t, n, "MATMUL") == 2 && op_count(t, n, "RMSNORM") == 1);
        CHECK(t[0].ms >= t[1].ms && t[1].ms >= 0);
    }
    CHECK(b->ops->profile_read(b, t, 1) == 1); /* max kinds */
    own->matmul(b, y1, x, &w, M);
    own->rmsnorm(b, r1, x, NULL, M, K, K, 1e-6f, BK_NORM_NONE);
    CHECK(!memcmp(y0, y1, sizeof y0) && !memcmp(r0, r1, sizeof r0));
    CHECK(b->ops->batch_prepare(b, &bt, &err) == 0); /* a new forward: its times restart */
    CHECK(b->ops->profile_read(b, t, 8) == -1);
    b->ops->profile(b, 0);
    CHECK(b->ops == own);
    CHECK(b->ops->profile_read(b, t, 8) == -1);
    b->ops->profile(b, 1); /* destroyed while on: nothing leaks (the ASan build) */
    backend_destroy(b);
}

#include <pthread.h>
#include <stdatomic.h>

typedef struct {
    atomic_int ran[97];
    pthread_t caller;
    atomic_int elsewhere; /* tasks run off the caller's thread */
} host_tasks_probe;

static void host_task(void *ctx, int i) {
    host_tasks_probe *p = ctx;
    atomic_fetch_add(&p->ran[i], 1);
    if (!pthread_equal(pthread_self(), p->caller)) atomic_fetch_add(&p->elsewhere, 1);
    volatile double x = 0; /* long enough that a spinning worker takes some */
    for (int k = 0; k < 20000; k++) x += k;
}

/* backend_host_tasks runs every task once: on the CPU's pool (its workers take some), and
 * on the caller's thread in turn where a backend has no slot. */
static void test_host_tasks(void) {
    backend *b = NULL;
    strata_err err = {0};
    CHECK_MSG(backend_cpu_create(2, &b, &err) == 0, "%s", err.msg);
    if (!b) return;
    static host_tasks_probe p;
    int elsewhere = 0;
    for (int round = 0; round < 20; round++) {
        memset(&p, 0, sizeof p);
        p.caller = pthread_self();
        backend_host_tasks(b, host_task, &p, 97);
        for (int i = 0; i < 97; i++) CHECK_EQ_INT(atomic_load(&p.ran[i]), 1);
        elsewhere += atomic_load(&p.elsewhere);
    }
    CHECK_MSG(elsewhere > 0, "no task ran on a pool worker in 20 rounds");
    backend_ops plain = *b->ops;
    plain.host_tasks = NULL;
    const backend_ops *own = b->ops;
    b->ops = &plain;
    memset(&p, 0, sizeof p);
    p.caller = pthread_self();
    backend_host_tasks(b, host_task, &p, 5);
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(atomic_load(&p.ran[i]), 1);
    CHECK_EQ_INT(atomic_load(&p.ran[5]), 0);
    CHECK_EQ_INT(atomic_load(&p.elsewhere), 0);
    b->ops = own;
    backend_destroy(b);
}

int main(void) {
    RUN(test_cpu_every_isa);
    RUN(test_host_tasks);
    RUN(test_cpu_profile);
    RUN(test_cuda_when_present);
    TEST_DONE();
}
