/* cpu_pool.c - condition-variable thread pool (see cpu_pool.h).
 *
 * A job is published under the mutex with a new generation number; each worker wakes,
 * takes tasks from the shared atomic counter until it runs dry, then reports done. The
 * caller takes tasks too and finally sleeps on `done` until every woken worker has
 * reported, so no worker can still be reading the job when the next one is published. */
#include "kernels/cpu/cpu_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct cpu_pool {
    int n_threads; /* workers + the caller */
    int n_started; /* workers actually running (for destroy after a failed create) */
    pthread_t *th; /* [n_threads - 1] */
    pthread_mutex_t mu;
    pthread_cond_t wake; /* workers wait here for a new generation */
    pthread_cond_t done; /* the caller waits here for busy == 0 */
    /* the current job, written under mu */
    cpu_pool_fn fn;
    void *ctx;
    int n_tasks;
    unsigned gen;
    int busy; /* workers that have not finished the current generation */
    int stop;
    atomic_int next; /* next task index to hand out */
};

typedef struct {
    cpu_pool *p;
    int worker;
} cpu_pool_arg;

static void cpu_pool_drain(cpu_pool *p, cpu_pool_fn fn, void *ctx, int n_tasks, int worker) {
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= n_tasks) break;
        fn(ctx, t, worker);
    }
}

static void *cpu_pool_main(void *arg) {
    cpu_pool_arg a = *(cpu_pool_arg *)arg;
    free(arg);
    cpu_pool *p = a.p;
    unsigned seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->stop)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        cpu_pool_fn fn = p->fn;
        void *ctx = p->ctx;
        int n = p->n_tasks;
        pthread_mutex_unlock(&p->mu);
        cpu_pool_drain(p, fn, ctx, n, a.worker);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
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
    atomic_init(&p->next, 0);
    int rc = 0;
    if (n_threads > 1) {
        p->th = calloc((size_t)n_threads - 1, sizeof *p->th);
        if (!p->th) {
            rc = strata_err_set(err, STRATA_ENOMEM, "cpu pool: out of memory");
            goto fail;
        }
    }
    for (int i = 1; i < n_threads; i++) {
        cpu_pool_arg *a = malloc(sizeof *a);
        if (!a) {
            rc = strata_err_set(err, STRATA_ENOMEM, "cpu pool: out of memory");
            goto fail;
        }
        a->p = p;
        a->worker = i;
        if (pthread_create(&p->th[i - 1], NULL, cpu_pool_main, a) != 0) {
            free(a);
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
    p->stop = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++)
        pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->th);
    free(p);
}

int cpu_pool_threads(const cpu_pool *p) { return p->n_threads; }

void cpu_pool_run(cpu_pool *p, cpu_pool_fn fn, void *ctx, int n_tasks) {
    if (n_tasks <= 0) return;
    if (n_tasks == 1 || p->n_started == 0) {
        /* Waking workers costs more than a lone task gains from them. */
        for (int t = 0; t < n_tasks; t++)
            fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->busy = p->n_started;
    p->gen++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    cpu_pool_drain(p, fn, ctx, n_tasks, 0);

    pthread_mutex_lock(&p->mu);
    while (p->busy > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
