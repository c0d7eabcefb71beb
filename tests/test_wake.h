/* test_wake.h - how an engine test sleeps until the engine has news: the engine's
 * callbacks (a sequence's on_wake, the engine's on_slot_free) are test_wake_signal, and a
 * test reads test_wake_count before it looks at the engine, then test_wake_wait(that count)
 * when it found nothing, so a wake in between is never lost. Shared by
 * tests/unit/test_engine.c and tests/unit/test_prefix_cache.c. Test-only. */
#ifndef STRATA_TEST_WAKE_H
#define STRATA_TEST_WAKE_H

#include <pthread.h>

/* Waits of their own (an idle engine, a timed nap) take mu and wait on cv directly. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int wakes;
} test_wakes = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static inline void test_wake_signal(void *ud) {
    (void)ud;
    pthread_mutex_lock(&test_wakes.mu);
    test_wakes.wakes++;
    pthread_cond_broadcast(&test_wakes.cv);
    pthread_mutex_unlock(&test_wakes.mu);
}

static inline int test_wake_count(void) {
    pthread_mutex_lock(&test_wakes.mu);
    int n = test_wakes.wakes;
    pthread_mutex_unlock(&test_wakes.mu);
    return n;
}

static inline void test_wake_wait(int seen) {
    pthread_mutex_lock(&test_wakes.mu);
    while (test_wakes.wakes == seen) pthread_cond_wait(&test_wakes.cv, &test_wakes.mu);
    pthread_mutex_unlock(&test_wakes.mu);
}

#endif
