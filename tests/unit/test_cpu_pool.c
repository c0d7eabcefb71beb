/* test_cpu_pool.c - the CPU backend's thread pool (kernels/cpu/cpu_pool.c): every task runs
 * exactly once, tasks really run concurrently, worker ids are in range, and thousands of
 * back-to-back jobs never lose a wake-up (a lost one hangs; alarm() turns that into a
 * failure). */
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/cpu_pool.h"
#include "tests/test.h"

typedef struct {
    atomic_int count[2000];
    atomic_int bad_worker;
    int threads;
} count_job;

static void count_task(void *ctx, int task, int worker) {
    count_job *j = ctx;
    atomic_fetch_add(&j->count[task], 1);
    if (worker < 0 || worker >= j->threads) atomic_fetch_add(&j->bad_worker, 1);
}

static void test_each_task_once(void) {
    static const int threads[] = {1, 2, 3, 8};
    static const int tasks[] = {0, 1, 2, 3, 7, 100, 2000};
    strata_err err = {0};
    for (size_t ti = 0; ti < sizeof threads / sizeof *threads; ti++) {
        cpu_pool *p = NULL;
        CHECK_EQ_INT(cpu_pool_create(threads[ti], &p, &err), 0);
        if (!p) continue;
        CHECK_EQ_INT(cpu_pool_threads(p), threads[ti]);
        for (size_t ni = 0; ni < sizeof tasks / sizeof *tasks; ni++) {
            static count_job j;
            memset(&j, 0, sizeof j);
            j.threads = threads[ti];
            cpu_pool_run(p, count_task, &j, tasks[ni]);
            int wrong = 0;
            for (int t = 0; t < 2000; t++)
                wrong += atomic_load(&j.count[t]) != (t < tasks[ni] ? 1 : 0);
            CHECK_MSG(wrong == 0, "threads=%d tasks=%d: %d tasks ran != once", threads[ti],
                      tasks[ni], wrong);
            CHECK_EQ_INT(atomic_load(&j.bad_worker), 0);
        }
        cpu_pool_destroy(p);
    }
}

/* Each of n tasks waits (sleeping, up to 10 s) until all n have started: only a pool that
 * runs n tasks at once on n threads gets through. */
typedef struct {
    atomic_int started;
    atomic_int timed_out;
    int n;
    atomic_int used_worker[8];
} meet_job;

static void meet_task(void *ctx, int task, int worker) {
    (void)task;
    meet_job *j = ctx;
    atomic_fetch_add(&j->used_worker[worker], 1);
    atomic_fetch_add(&j->started, 1);
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < 10000 && atomic_load(&j->started) < j->n; i++)
        nanosleep(&ms, NULL);
    if (atomic_load(&j->started) < j->n) atomic_fetch_add(&j->timed_out, 1);
}

static void test_concurrent(void) {
    strata_err err = {0};
    cpu_pool *p = NULL;
    CHECK_EQ_INT(cpu_pool_create(4, &p, &err), 0);
    if (!p) return;
    meet_job j;
    memset(&j, 0, sizeof j);
    j.n = 4;
    cpu_pool_run(p, meet_task, &j, 4);
    CHECK_EQ_INT(atomic_load(&j.timed_out), 0);
    for (int w = 0; w < 4; w++)
        CHECK_EQ_INT(atomic_load(&j.used_worker[w]), 1);
    cpu_pool_destroy(p);
}

static atomic_long sum_total;
static void sum_task(void *ctx, int task, int worker) {
    (void)ctx;
    (void)worker;
    atomic_fetch_add(&sum_total, task + 1);
}

static void test_many_runs(void) {
    strata_err err = {0};
    cpu_pool *p = NULL;
    CHECK_EQ_INT(cpu_pool_create(3, &p, &err), 0);
    if (!p) return;
    atomic_store(&sum_total, 0);
    long want = 0;
    for (int r = 0; r < 20000; r++) {
        int n = 1 + r % 5;
        cpu_pool_run(p, sum_task, NULL, n);
        want += (long)n * (n + 1) / 2;
    }
    CHECK_EQ_INT(atomic_load(&sum_total), want);
    cpu_pool_destroy(p);
}

static void test_create_errors(void) {
    strata_err err = {0};
    cpu_pool *p = (cpu_pool *)&err; /* must stay untouched on failure */
    CHECK_EQ_INT(cpu_pool_create(0, &p, &err), STRATA_EINVALID);
    CHECK(p == (cpu_pool *)&err);
    CHECK(err.msg[0] != 0);
    cpu_pool_destroy(NULL);
}

int main(void) {
    alarm(120);
    RUN(test_each_task_once);
    RUN(test_concurrent);
    RUN(test_many_runs);
    RUN(test_create_errors);
    TEST_DONE();
}
