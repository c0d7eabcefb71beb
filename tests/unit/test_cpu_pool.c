/* test_cpu_pool.c - the CPU backend's thread pool (kernels/cpu/cpu_pool.c): every task runs
 * exactly once, tasks really run concurrently, worker ids are in range, and thousands of
 * back-to-back jobs never lose a wake-up (a lost one hangs; alarm() turns that into a
 * failure), both with the default spin and with spinning off (every wait then sleeps).
 * More threads than cores make workers late for jobs, which must never run a task of a
 * job that has returned; and an idle pool must stop spinning and sleep. */
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

static void each_task_once(int spin_us) {
    static const int threads[] = {1, 2, 3, 8};
    static const int tasks[] = {0, 1, 2, 3, 7, 100, 2000};
    strata_err err = {0};
    for (size_t ti = 0; ti < sizeof threads / sizeof *threads; ti++) {
        cpu_pool *p = NULL;
        CHECK_EQ_INT(cpu_pool_create(threads[ti], &p, &err), 0);
        if (!p) continue;
        if (spin_us >= 0) cpu_pool_set_spin(p, spin_us);
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

static void test_each_task_once(void) { each_task_once(-1); }
static void test_each_task_once_no_spin(void) { each_task_once(0); }

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
    for (int i = 0; i < 10000 && atomic_load(&j->started) < j->n; i++) nanosleep(&ms, NULL);
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
    for (int w = 0; w < 4; w++) CHECK_EQ_INT(atomic_load(&j.used_worker[w]), 1);
    cpu_pool_destroy(p);
}

static atomic_long sum_total;
static void sum_task(void *ctx, int task, int worker) {
    (void)ctx;
    (void)worker;
    atomic_fetch_add(&sum_total, task + 1);
}

static void many_runs(int spin_us) {
    strata_err err = {0};
    cpu_pool *p = NULL;
    CHECK_EQ_INT(cpu_pool_create(3, &p, &err), 0);
    if (!p) return;
    if (spin_us >= 0) cpu_pool_set_spin(p, spin_us);
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

static void test_many_runs(void) { many_runs(-1); }
static void test_many_runs_no_spin(void) { many_runs(0); }

/* Jobs whose ctx lives on the caller's stack and is reused at the same address: a worker
 * that read an old job and ran one of its tasks after that job returned would see the
 * wrong id (or count a task twice). With 6 threads on a machine of fewer cores, workers
 * are routinely descheduled between reading a job and claiming from it. */
typedef struct {
    int id;
    atomic_int *current; /* id of the job now running */
    atomic_int *stale;   /* tasks run for a job that was not current */
    atomic_int count[16];
} stale_job;

static void stale_task(void *ctx, int task, int worker) {
    (void)worker;
    stale_job *j = ctx;
    if (atomic_load(j->current) != j->id) atomic_fetch_add(j->stale, 1);
    atomic_fetch_add(&j->count[task], 1);
}

static void test_late_workers(void) {
    strata_err err = {0};
    for (int spin = 0; spin < 2; spin++) {
        cpu_pool *p = NULL;
        CHECK_EQ_INT(cpu_pool_create(6, &p, &err), 0);
        if (!p) return;
        cpu_pool_set_spin(p, spin ? 20 : 0);
        atomic_int current, stale;
        atomic_init(&current, -1);
        atomic_init(&stale, 0);
        int wrong = 0;
        for (int r = 0; r < 20000; r++) {
            stale_job j;
            j.id = r;
            j.current = &current;
            j.stale = &stale;
            for (int t = 0; t < 16; t++) atomic_init(&j.count[t], 0);
            int n = 2 + r % 15;
            atomic_store(&current, r);
            cpu_pool_run(p, stale_task, &j, n);
            atomic_store(&current, -1);
            for (int t = 0; t < 16; t++) wrong += atomic_load(&j.count[t]) != (t < n);
        }
        CHECK_EQ_INT(wrong, 0);
        CHECK_EQ_INT(atomic_load(&stale), 0);
        cpu_pool_destroy(p);
    }
}

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* After a run the workers spin for at most CPU_POOL_SPIN_US, then sleep: over 300 ms of
 * idle the process may burn that spin once per worker, plus scheduling noise, but nowhere
 * near the 300 ms per worker a pool that kept spinning would. */
static void test_idle_sleeps(void) {
    strata_err err = {0};
    cpu_pool *p = NULL;
    CHECK_EQ_INT(cpu_pool_create(3, &p, &err), 0);
    if (!p) return;
    for (int r = 0; r < 100; r++) cpu_pool_run(p, sum_task, NULL, 4);
    struct timespec ms = {0, 20000000};
    nanosleep(&ms, NULL); /* past every spin */
    double c0 = cpu_seconds();
    for (int i = 0; i < 15; i++) nanosleep(&ms, NULL);
    double used = cpu_seconds() - c0;
    CHECK_MSG(used < 0.05, "idle pool used %.3f s of CPU in 0.3 s", used);
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
    RUN(test_each_task_once_no_spin);
    RUN(test_concurrent);
    RUN(test_many_runs);
    RUN(test_many_runs_no_spin);
    RUN(test_late_workers);
    RUN(test_idle_sleeps);
    RUN(test_create_errors);
    TEST_DONE();
}
