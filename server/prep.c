/* prep.c - the preparation queue: request bodies to engine sequences (or to the
 * /tokenize answers) on libuv's worker threads, at most --prepare-threads at once.
 *
 * Parsing a 4 MiB body, rendering a long conversation through the chat template and
 * tokenizing the result take seconds of CPU; on the HTTP threads that stalled
 * /health past the readiness probe's timeout. Here they run on workers whose nice
 * value is raised, so neither the HTTP threads nor the engine's step thread wait
 * behind them. Bodies beyond the running ones wait in a FIFO of at most --max-queue
 * entries (429 past it). After a large body the worker hands free heap pages back
 * to the system (malloc_trim), since glibc keeps freed heap pages mapped otherwise.
 * Every request that entered goes to S->on_prepared exactly once (prepared, answered
 * or failed), so this file knows nothing of admission. Thread: the loop thread,
 * except prep_work. */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "server/server_internal.h"

/* bodies from this size up are followed by a malloc_trim */
#define PREP_TRIM_BYTES (256u * 1024)
/* how much nicer than the rest of the process a worker runs */
#define PREP_NICE 5

static void prep_lower_priority(void) {
    static _Thread_local int done;
    if (done) return;
    done = 1;
    /* on Linux the nice value is per thread: this worker only */
    pid_t tid = (pid_t)syscall(SYS_gettid);
    errno = 0;
    int cur = getpriority(PRIO_PROCESS, (id_t)tid);
    if (!errno) setpriority(PRIO_PROCESS, (id_t)tid, cur + PREP_NICE);
}

/* Worker thread. */
static void prep_work(uv_work_t *w) {
    srv_req *r = w->data;
    srv *S = r->S;
    openai_error e;
    json_t *answer = NULL;
    int rc;
    size_t body_len = r->body.len;
    memset(&e, 0, sizeof e);
    prep_lower_priority();
    pthread_mutex_lock(&r->mu);
    int gone = r->gone;
    pthread_mutex_unlock(&r->mu);
    if (gone) {
        rc = -1; /* nobody to answer: skip the work */
        openai_error_set(&e, 499, "cancelled", NULL, NULL, "the client went away");
    } else if (r->job == SRV_JOB_TOKENIZE) {
        rc = route_tokenize_json(S, r->body.p ? r->body.p : "", r->body.len, &answer, &e);
    } else if (r->job == SRV_JOB_DETOKENIZE) {
        rc = route_detokenize_json(S, r->body.p ? r->body.p : "", r->body.len, &answer, &e);
    } else {
        rc = gen_build(S, r, &e);
    }
    strbuf_free(&r->body);
    pthread_mutex_lock(&r->mu);
    if (rc) {
        r->phase = REQ_FAILED;
        r->err = e;
    } else {
        r->phase = answer ? REQ_ANSWERED : REQ_PARSED;
        r->answer = answer;
    }
    pthread_mutex_unlock(&r->mu);
    if (body_len >= PREP_TRIM_BYTES) malloc_trim(0);
}

static void prep_start(srv *S, srv_req *r);

/* Hands r to the loop's handler and drops the worker's reference. */
static void prep_done(srv *S, srv_req *r) {
    S->on_prepared(S, r);
    atomic_fetch_sub(&S->n_preparing, 1);
    req_unref(r);
}

/* Fails r before it reached a worker (its connection gets the error). */
static void prep_fail(srv *S, srv_req *r, int status, const char *type, const char *msg) {
    pthread_mutex_lock(&r->mu);
    r->phase = REQ_FAILED;
    openai_error_set(&r->err, status, type, NULL, NULL, "%s", msg);
    pthread_mutex_unlock(&r->mu);
    prep_done(S, r);
}

static void prep_start_next(srv *S) {
    while (S->prep_head && S->prep_running < S->cfg->prepare_threads) {
        srv_req *r = S->prep_head;
        if (!(S->prep_head = r->prep_next)) S->prep_tail = NULL;
        r->prep_next = NULL;
        S->prep_queued--;
        prep_start(S, r);
    }
}

/* Loop thread: a worker finished r (or it was cancelled before it started). */
static void prep_after(uv_work_t *w, int status) {
    srv_req *r = w->data;
    srv *S = r->S;
    S->prep_running--;
    pthread_mutex_lock(&r->mu);
    if (status == UV_ECANCELED && r->phase == REQ_PREPARING) {
        r->phase = REQ_FAILED;
        openai_error_set(&r->err, 503, "unavailable_error", NULL, NULL,
                         "The server is shutting down");
    }
    pthread_mutex_unlock(&r->mu);
    prep_done(S, r);
    if (!S->stopping) prep_start_next(S);
}

static void prep_start(srv *S, srv_req *r) {
    r->work.data = r;
    S->prep_running++;
    if (uv_queue_work(&S->loop, &r->work, prep_work, prep_after)) {
        S->prep_running--;
        prep_fail(S, r, 503, "server_error", "cannot start the request's preparation");
    }
}

int prep_submit(srv *S, srv_req *r) {
    if (S->stopping) return PREP_STOPPING;
    if (S->prep_running >= S->cfg->prepare_threads && S->prep_queued >= S->cfg->max_queue)
        return PREP_BUSY;
    req_ref(r); /* the worker's reference, dropped in prep_done */
    atomic_fetch_add(&S->n_preparing, 1);
    if (S->prep_running < S->cfg->prepare_threads) {
        prep_start(S, r);
        return PREP_OK;
    }
    r->prep_next = NULL;
    if (S->prep_tail) S->prep_tail->prep_next = r;
    else S->prep_head = r;
    S->prep_tail = r;
    S->prep_queued++;
    return PREP_OK;
}

void prep_shutdown(srv *S) {
    while (S->prep_head) {
        srv_req *r = S->prep_head;
        S->prep_head = r->prep_next;
        S->prep_queued--;
        prep_fail(S, r, 503, "unavailable_error", "The server is shutting down");
    }
    S->prep_tail = NULL;
    while (S->prep_running > 0) uv_run(&S->loop, UV_RUN_ONCE);
}
