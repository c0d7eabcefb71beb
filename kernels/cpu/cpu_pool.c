/* cpu_pool.c - spin-then-sleep thread pool (see cpu_pool.h).
 *
 * A job is (fn, ctx, n_tasks) plus a generation number `gen`. Tasks are claimed by a
 * compare-and-swap on `claim`, which holds the generation in its high half and the next
 * task index in its low half, so a worker that read an old job can never claim a task of
 * a newer one: its CAS fails on the generation. The caller therefore only waits for tasks
 * that were claimed (`finished` == n_tasks), never for a worker that is still asleep or
 * descheduled, and that late worker simply finds nothing to claim.
 *
 * Publishing (one writer, the caller): close the claim word for the new generation, write
 * the job, open the claim word, bump gen. Every shared access is seq_cst, so a worker that
 * read any field of the new job is ordered after the close and its CAS on an old
 * generation fails (C11 single total order; on x86 the cost is a few locked instructions
 * per job, nothing next to a job of 10 us or more).
 *
 * Sleeping: after spinning, a worker counts itself in `sleepers` under the mutex and
 * waits on `wake` until gen changes; the caller broadcasts only when sleepers > 0. The
 * caller waits for the last task the same way on `done`, flagged by `caller_waits`. Both
 * pairs are store-then-load on seq_cst atomics, so one side always sees the other and no
 * wake-up is lost. */
#include "kernels/cpu/cpu_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define CPU_POOL_CLOSED 0xffffffffu /* claim index of a job being written */

typedef struct {
    cpu_pool *p;
    int worker;
} cpu_pool_arg;

struct cpu_pool {
    int n_threads;      /* workers + the caller */
    int n_started;      /* workers actually running (for destroy after a failed create) */
    pthread_t *th;      /* [n_threads - 1] */
    cpu_pool_arg *args; /* [n_threads - 1], freed with the pool: a worker that starts late
                         * frees nothing, so no free can land inside a caller's step */
    pthread_mutex_t mu;
    pthread_cond_t wake; /* workers wait here for a new generation */
    pthread_cond_t done; /* the caller waits here for finished == n_tasks */
    /* the current job: written by the caller between close and open of `claim` */
    _Atomic(cpu_pool_fn) fn;
    _Atomic(void *) ctx;
    atomic_int n_tasks;
    atomic_uint gen;         /* bumped after each job is published (and at stop) */
    _Atomic uint64_t claim;  /* gen << 32 | next task index */
    atomic_int finished;     /* tasks of the current job that have returned */
    atomic_int sleepers;     /* workers blocked on wake (changed under mu) */
    atomic_int caller_waits; /* the caller is blocked on done (changed under mu) */
    atomic_int stop;
    atomic_long spin_ns; /* spin budget before sleeping */
};

static int64_t cpu_pool_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_pool_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins until *v != old or the spin budget runs out; returns the last value read. */
static unsigned cpu_pool_spin_gen(cpu_pool *p, unsigned old) {
    long budget = atomic_load(&p->spin_ns);
    unsigned v = atomic_load(&p->gen);
    if (v != old || budget <= 0) return v;
    int64_t end = cpu_pool_now_ns() + budget;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            cpu_pool_pause();
            if ((v = atomic_load(&p->gen)) != old) return v;
        }
        if (cpu_pool_now_ns() > end) return v;
    }
}

/* Claims and runs tasks of generation g until none is left. */
static void cpu_pool_drain(cpu_pool *p, unsigned g, cpu_pool_fn fn, void *ctx, int n, int worker) {
    uint64_t c = atomic_load(&p->claim);
    for (;;) {
        if ((unsigned)(c >> 32) != g) return;
        uint32_t t = (uint32_t)c;
        if (t >= (uint32_t)n) return; /* also CPU_POOL_CLOSED */
        if (!atomic_compare_exchange_weak(&p->claim, &c, c + 1)) continue; /* c reloaded */
        fn(ctx, (int)t, worker);
        if (atomic_fetch_add(&p->finished, 1) + 1 == n && atomic_load(&p->caller_waits)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
        c = atomic_load(&p->claim);
    }
}

static void *cpu_pool_main(void *arg) {
    cpu_pool_arg a = *(cpu_pool_arg *)arg;
    cpu_pool *p = a.p;
    unsigned seen = 0;
    for (;;) {
        unsigned g = cpu_pool_spin_gen(p, seen);
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = g;
        /* Possibly torn if the caller has moved on; then every claim fails (see top). */
        cpu_pool_fn fn = atomic_load(&p->fn);
        void *ctx = atomic_load(&p->ctx);
        int n = atomic_load(&p->n_tasks);
        cpu_pool_drain(p, g, fn, ctx, n, a.worker);
    }
    return NULL;
}

int cpu_pool_create(int n_threads, cpu_pool **out, strata_err *err) {
    if (n_threads < 1)
        return strata_err_set(err, STRATA_EINVALID, "cpu pool: %d threads", n_threads);
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return strata_err_set(err, STRATA_ENOMEM, "cpu pool: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->fn, NULL);
    atomic_init(&p->ctx, NULL);
    atomic_init(&p->n_tasks, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->claim, (uint64_t)CPU_POOL_CLOSED);
    atomic_init(&p->finished, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_waits, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->spin_ns, (long)CPU_POOL_SPIN_US * 1000);
    int rc = 0;
    if (n_threads > 1) {
        p->th = calloc((size_t)n_threads - 1, sizeof *p->th);
        p->args = calloc((size_t)n_threads - 1, sizeof *p->args);
        if (!p->th || !p->args) {
            rc = strata_err_set(err, STRATA_ENOMEM, "cpu pool: out of memory");
            goto fail;
        }
    }
    for (int i = 1; i < n_threads; i++) {
        cpu_pool_arg *a = &p->args[i - 1];
        a->p = p;
        a->worker = i;
        if (pthread_create(&p->th[i - 1], NULL, cpu_pool_main, a) != 0) {
            rc = strata_err_set(err, STRATA_ENOMEM, "cpu pool: cannot start thread %d of %d", i,
                                n_threads);
            goto fail;
        }
        p->n_started++;
    }
    *out = p;
    return 0;
fail:
    cpu_pool_destroy(p);
    return rc;
}

void cpu_pool_destroy(cpu_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->gen, 1); /* ends the spins too */
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->th);
    free(p->args);
    free(p);
}

int cpu_pool_threads(const cpu_pool *p) { return p->n_threads; }

void cpu_pool_set_spin(cpu_pool *p, int spin_us) {
    atomic_store(&p->spin_ns, spin_us > 0 ? (long)spin_us * 1000 : 0);
}

void cpu_pool_run(cpu_pool *p, cpu_pool_fn fn, void *ctx, int n_tasks) {
    if (n_tasks <= 0) return;
    if (n_tasks == 1 || p->n_started == 0) {
        /* Waking workers costs more than a lone task gains from them. */
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    unsigned g = atomic_load(&p->gen) + 1;
    atomic_store(&p->claim, (uint64_t)g << 32 | CPU_POOL_CLOSED);
    atomic_store(&p->fn, fn);
    atomic_store(&p->ctx, ctx);
    atomic_store(&p->n_tasks, n_tasks);
    atomic_store(&p->finished, 0);
    atomic_store(&p->claim, (uint64_t)g << 32);
    atomic_store(&p->gen, g);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }

    cpu_pool_drain(p, g, fn, ctx, n_tasks, 0);

    /* The rest are running on workers: spin briefly for them, then sleep. */
    if (atomic_load(&p->finished) == n_tasks) return;
    long budget = atomic_load(&p->spin_ns);
    if (budget > 0) {
        int64_t end = cpu_pool_now_ns() + budget;
        for (;;) {
            for (int i = 0; i < 64; i++) {
                cpu_pool_pause();
                if (atomic_load(&p->finished) == n_tasks) return;
            }
            if (cpu_pool_now_ns() > end) break;
        }
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_waits, 1);
    while (atomic_load(&p->finished) < n_tasks) pthread_cond_wait(&p->done, &p->mu);
    atomic_store(&p->caller_waits, 0);
    pthread_mutex_unlock(&p->mu);
}
