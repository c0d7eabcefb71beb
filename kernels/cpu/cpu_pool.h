/* cpu_pool.h - the CPU backend's thread pool: run n tasks of one function on N threads.
 *
 * N-1 workers plus the calling thread take tasks one at a time from a shared counter, so
 * uneven tasks balance themselves and a pool of 1 thread runs everything inline. A run
 * returns once every task has finished; it never waits for a worker that has not started
 * a task (on a shared machine a worker may be descheduled for milliseconds: the caller
 * then runs its tasks instead).
 *
 * Between jobs a worker spins for a bounded time (CPU_POOL_SPIN_US by default) before it
 * sleeps on a condition variable: a decode step runs ~300 jobs of 10-500 us each with gaps
 * of a few microseconds, and waking a sleeping thread costs 5-50 us (more when another
 * process holds its core), which is as long as many of those jobs; a sleeping worker is
 * also often woken onto the caller's core and preempts it. The caller likewise spins
 * briefly for the last task before it sleeps. After the spin nothing polls, so an idle
 * pool (between requests) uses no CPU. Measured on the 2-core dev machine, Qwen3.5-0.8B
 * decode: +15% tok/s against sleeping at once, quiet or next to nice-19 CPU hogs. */
#ifndef STRATA_CPU_POOL_H
#define STRATA_CPU_POOL_H

#include "engine/base/err.h"

/* Default spin before sleeping, in microseconds: longer than the gap between two jobs of
 * one forward step (almost all are under 16 us, measured on Qwen3.5-0.8B decode), short
 * next to the pause between steps or requests. */
#define CPU_POOL_SPIN_US 50

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
/* Sets how long workers and the caller spin before sleeping (0: sleep at once); for
 * benchmarks and tests. Call between runs, from the thread that runs jobs. */
void cpu_pool_set_spin(cpu_pool *p, int spin_us);
/* Runs fn for every task and returns when all have finished. One caller at a time
 * (the backend's step thread); fn must not call cpu_pool_run itself. */
void cpu_pool_run(cpu_pool *p, cpu_pool_fn fn, void *ctx, int n_tasks);

#endif
