/* cpu_pool.h - the CPU backend's thread pool: run n tasks of one function on N threads.
 *
 * N-1 workers sleep on a condition variable between jobs; the calling thread works too,
 * so a pool of 1 thread runs everything inline. Tasks are handed out one at a time from
 * an atomic counter, so uneven tasks balance themselves. Nothing spins. */
#ifndef STRATA_CPU_POOL_H
#define STRATA_CPU_POOL_H

#include "engine/err.h"

typedef struct cpu_pool cpu_pool;

/* Runs task number `task` (0 <= task < n_tasks) on thread number `worker`
 * (0 <= worker < cpu_pool_threads(); 0 is the caller), e.g. to pick per-thread scratch. */
typedef void (*cpu_pool_fn)(void *ctx, int task, int worker);

/* Starts n_threads - 1 workers (n_threads >= 1). Caller frees with cpu_pool_destroy. */
int cpu_pool_create(int n_threads, cpu_pool **out, strata_err *err);
/* Stops and joins the workers; accepts NULL. Must not run concurrently with a run. */
void cpu_pool_destroy(cpu_pool *p);
/* Threads that run tasks, the caller included. */
int cpu_pool_threads(const cpu_pool *p);
/* Runs fn for every task and returns when all have finished. One caller at a time
 * (the backend's step thread); fn must not call cpu_pool_run itself. */
void cpu_pool_run(cpu_pool *p, cpu_pool_fn fn, void *ctx, int n_tasks);

#endif
