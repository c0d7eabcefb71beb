/* loop.c - the libuv loop thread: admission, the waiting queue, timeouts,
 * disconnect watches, signals and draining.
 *
 * Other threads talk to the loop only through the inbox (a locked list of requests
 * with bits saying what happened) and one uv_async, which coalesces wakeups: the
 * data travels in the inbox, never in the wakeup. A tracked request has a timer
 * (--request-timeout) and a poll on its own dup of the client socket, so a client
 * that hangs up while its connection is suspended (queued, in prefill, or waiting
 * for a non-streamed answer) is noticed at once and its sequences cancelled. A
 * tracked stream also has a keep-alive timer (--sse-keepalive): after that many
 * seconds without a byte it resumes the connection with ka_due set, and the SSE
 * reader sends a comment, so proxies that close idle connections (nginx and AWS ALB
 * after 60 s) keep a queued or prefilling stream open. The first one sends the 200
 * headers of a stream still in the queue.
 * Thread: the loop thread, except loop_post. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "server/server_internal.h"

void loop_post(srv *S, srv_req *r, unsigned bits) {
    pthread_mutex_lock(&S->inbox_mu);
    r->inbox_bits |= bits;
    if (!r->in_inbox) {
        r->in_inbox = 1;
        req_ref(r); /* the inbox's reference */
        r->inbox_next = NULL;
        if (S->inbox_tail) S->inbox_tail->inbox_next = r;
        else S->inbox_head = r;
        S->inbox_tail = r;
    }
    pthread_mutex_unlock(&S->inbox_mu);
    uv_async_send(&S->async);
}

static void loop_handle_closed(uv_handle_t *h) { req_unref(h->data); }

/* Fails a request that never reached the engine: its connection gets the error. */
static void loop_fail(srv *S, srv_req *r, int status, const char *type, const char *msg) {
    pthread_mutex_lock(&r->mu);
    r->phase = REQ_FAILED;
    openai_error_set(&r->err, status, type, NULL, NULL, "%s", msg);
    req_resume_locked(r);
    pthread_mutex_unlock(&r->mu);
    metrics_count_rejected(S->met, status);
}

static void loop_unlink_waiting(srv *S, srv_req *r) {
    if (!r->waiting) return;
    if (r->wait_prev) r->wait_prev->wait_next = r->wait_next;
    else S->wait_head = r->wait_next;
    if (r->wait_next) r->wait_next->wait_prev = r->wait_prev;
    else S->wait_tail = r->wait_prev;
    r->wait_prev = r->wait_next = NULL;
    r->waiting = 0;
    atomic_fetch_sub(&S->n_waiting, 1);
}

static void loop_on_drain_timeout(uv_timer_t *t);
static void loop_check_drained(srv *S);

static void loop_untrack(srv *S, srv_req *r) {
    if (!r->tracked) return;
    loop_unlink_waiting(S, r);
    r->tracked = 0;
    S->n_tracked--;
    if (r->trk_prev) r->trk_prev->trk_next = r->trk_next;
    else S->trk_head = r->trk_next;
    if (r->trk_next) r->trk_next->trk_prev = r->trk_prev;
    r->trk_prev = r->trk_next = NULL;
    if (r->handles & 1) uv_close((uv_handle_t *)&r->timer, loop_handle_closed);
    if (r->handles & 2) uv_close((uv_handle_t *)&r->poll, loop_handle_closed);
    if (r->handles & 4) uv_close((uv_handle_t *)&r->ka_timer, loop_handle_closed);
    r->handles = 0;
    req_unref(r); /* the tracking reference */
    loop_check_drained(S);
}

static void loop_cancel(srv *S, srv_req *r) {
    for (int i = 0; i < r->n_choices; i++) engine_seq_cancel(r->ch[i].seq);
    for (int i = 0; i < r->n_choices; i++) metrics_count_finish(S->met, "abort");
    loop_untrack(S, r);
}

/* Records the metrics of a request whose choices all finished. */
static void loop_record(srv *S, srv_req *r) {
    for (int i = 0; i < r->n_choices; i++) {
        srv_choice *ch = &r->ch[i];
        engine_seq_times t;
        engine_seq_get_times(ch->seq, &t);
        metrics_count_finish(S->met, engine_finish_name(ch->finish));
        if (t.scheduled) metrics_observe(S->met, METRICS_QUEUE, t.scheduled - r->t_arrival);
        if (t.first_token) {
            metrics_observe(S->met, METRICS_TTFT, t.first_token - r->t_arrival);
            if (t.scheduled) metrics_observe(S->met, METRICS_PREFILL, t.first_token - t.scheduled);
        }
        if (t.finished) {
            metrics_observe(S->met, METRICS_E2E, t.finished - r->t_arrival);
            if (t.first_token) metrics_observe(S->met, METRICS_DECODE, t.finished - t.first_token);
            if (t.first_token && ch->n_gen > 1)
                metrics_observe(S->met, METRICS_TPOT,
                                (t.finished - t.first_token) / (ch->n_gen - 1));
        }
        metrics_observe(S->met, METRICS_PROMPT_LEN, ch->n_prompt);
        metrics_observe(S->met, METRICS_GEN_LEN, ch->n_gen);
        /* one line per choice; never the content, never the key */
        if (S->cfg->log_requests)
            fprintf(stderr,
                    "strata: %s choice %d: prompt %d, generated %d, %s, queue %.3f s, "
                    "ttft %.3f s, e2e %.3f s\n",
                    r->id, i, ch->n_prompt, ch->n_gen, engine_finish_name(ch->finish),
                    t.scheduled ? t.scheduled - r->t_arrival : 0,
                    t.first_token ? t.first_token - r->t_arrival : 0,
                    t.finished ? t.finished - r->t_arrival : 0);
    }
}

/* Moves waiting requests to the engine while it has slots for all their choices. */
static void loop_admit(srv *S) {
    while (S->wait_head && S->eng && engine_free_slots(S->eng) >= S->wait_head->n_choices) {
        srv_req *r = S->wait_head;
        loop_unlink_waiting(S, r);
        pthread_mutex_lock(&r->mu);
        /* RUNNING before submit: the first wake may come before we return */
        r->phase = REQ_RUNNING;
        r->t_admit = strata_now();
        pthread_mutex_unlock(&r->mu);
        int failed = 0;
        for (int i = 0; i < r->n_choices; i++) {
            strata_err err = {0};
            if (engine_submit(S->eng, r->ch[i].seq, &err)) failed = 1;
        }
        pthread_mutex_lock(&r->mu);
        if (failed) {
            for (int i = 0; i < r->n_choices; i++) engine_seq_cancel(r->ch[i].seq);
            r->shutdown = 1;
        }
        if (r->oai.stream) req_resume_locked(r); /* headers + role chunk go out now */
        pthread_mutex_unlock(&r->mu);
    }
}

static void loop_on_timeout(uv_timer_t *t) {
    srv_req *r = t->data;
    srv *S = r->S;
    char msg[128];
    snprintf(msg, sizeof msg, "The request did not start within %lld s (--request-timeout)",
             S->cfg->request_timeout);
    if (r->waiting) {
        loop_unlink_waiting(S, r);
        loop_fail(S, r, 408, "timeout_error", msg);
        loop_untrack(S, r);
        return;
    }
    pthread_mutex_lock(&r->mu);
    r->timed_out = 1;
    pthread_mutex_unlock(&r->mu);
    loop_cancel(S, r);
}

/* Fires when the stream may have been silent for --sse-keepalive seconds; re-arms
 * itself for the rest of the interval when bytes went out meanwhile. A flag, not a
 * count: a client that does not read gets no pile of comments. */
static void loop_on_keepalive(uv_timer_t *t) {
    srv_req *r = t->data;
    double k = (double)r->S->cfg->sse_keepalive, next = k;
    pthread_mutex_lock(&r->mu);
    if (r->stream_done || r->gone || !r->conn || r->phase == REQ_FAILED) {
        pthread_mutex_unlock(&r->mu); /* ends here; untracking closes the timer */
        return;
    }
    double idle = strata_now() - r->t_out;
    if (idle >= k - 0.005) {
        r->ka_due = 1;
        req_resume_locked(r);
    } else {
        next = k - idle;
    }
    pthread_mutex_unlock(&r->mu);
    uv_update_time(t->loop); /* time the next interval from now, not from a stale loop time */
    uv_timer_start(t, loop_on_keepalive, (uint64_t)(next * 1000.0 + 0.999), 0);
}

/* The client's socket reported its peer's FIN, or an error. A FIN alone does not
 * tell a client that went away from one that half-closed after sending its request
 * (RFC 9112 lets it, and it still reads the answer), so the first one is probed:
 * an HTTP/1.1 client must skip an interim 100 response, and the kernel of a client
 * that closed answers the write with a reset, which the poll then reports. Without
 * a probe (HTTP/1.0, or a response already under way) only an error counts, and a
 * closed client is noticed when the answer is written. */
static void loop_on_hangup(uv_poll_t *p, int status, int events) {
    srv_req *r = p->data;
    if (!r->probed && status == 0 && (events & UV_DISCONNECT)) {
        static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
        r->probed = 1;
        pthread_mutex_lock(&r->mu);
        /* under r->mu: no response can be queued while the probe is written */
        if (r->http11 && !r->answered && r->conn)
            (void)!send(r->sock, probe, sizeof probe - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        pthread_mutex_unlock(&r->mu);
        /* from now on only an error or a hangup wakes the poll (a FIN stays readable) */
        if (!uv_poll_start(p, UV_PRIORITIZED, loop_on_hangup)) return;
    }
    pthread_mutex_lock(&r->mu);
    r->gone = 1;
    req_resume_locked(r); /* MHD then notices the closed socket and completes it */
    pthread_mutex_unlock(&r->mu);
    loop_cancel(r->S, r);
}

static void loop_on_new(srv *S, srv_req *r) {
    pthread_mutex_lock(&r->mu);
    int gone = r->gone;
    pthread_mutex_unlock(&r->mu);
    if (gone) return;
    if (atomic_load(&S->state) != SRV_READY) {
        loop_fail(S, r, 503, "unavailable_error", "The server is shutting down");
        return;
    }
    int fits_now = !S->wait_head && engine_free_slots(S->eng) >= r->n_choices;
    if (!fits_now && atomic_load(&S->n_waiting) >= S->cfg->max_queue) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "The server is busy: %d requests are waiting (--max-queue); "
                 "retry later",
                 atomic_load(&S->n_waiting));
        loop_fail(S, r, 429, "rate_limit_error", msg);
        return;
    }
    req_ref(r); /* the tracking reference */
    r->tracked = 1;
    S->n_tracked++;
    r->trk_prev = NULL;
    r->trk_next = S->trk_head;
    if (S->trk_head) S->trk_head->trk_prev = r;
    S->trk_head = r;
    pthread_mutex_lock(&r->mu);
    r->phase = REQ_QUEUED;
    r->t_out = r->t_arrival; /* the client has waited since it sent the request */
    pthread_mutex_unlock(&r->mu);
    if (S->cfg->request_timeout > 0 && !uv_timer_init(&S->loop, &r->timer)) {
        r->timer.data = r;
        req_ref(r);
        r->handles |= 1;
        uv_timer_start(&r->timer, loop_on_timeout, (uint64_t)S->cfg->request_timeout * 1000, 0);
    }
    if (r->oai.stream && S->cfg->sse_keepalive > 0 && !uv_timer_init(&S->loop, &r->ka_timer)) {
        double left = (double)S->cfg->sse_keepalive - (strata_now() - r->t_arrival);
        r->ka_timer.data = r;
        req_ref(r);
        r->handles |= 4;
        uv_timer_start(&r->ka_timer, loop_on_keepalive, left > 0 ? (uint64_t)(left * 1000.0) : 0,
                       0);
    }
    if (r->sock >= 0 && !uv_poll_init(&S->loop, &r->poll, r->sock)) {
        r->poll.data = r;
        req_ref(r);
        r->handles |= 2;
        uv_poll_start(&r->poll, UV_DISCONNECT, loop_on_hangup);
    }
    r->waiting = 1;
    r->wait_prev = S->wait_tail;
    r->wait_next = NULL;
    if (S->wait_tail) S->wait_tail->wait_next = r;
    else S->wait_head = r;
    S->wait_tail = r;
    atomic_fetch_add(&S->n_waiting, 1);
}

static void loop_stop_now(srv *S) {
    if (S->stopping == 2) return;
    S->stopping = 2;
    uv_stop(&S->loop);
}

/* Drained: no request is tracked. Wait for the last connections to finish writing
 * (live_reqs reaches 0, signalled through the async) or a short grace, then stop. */
static void loop_check_drained(srv *S) {
    /* a request still being prepared gets its answer (a 503) before we stop */
    if (!S->draining || S->n_tracked || S->prep_running || S->prep_head) return;
    if (!S->stopping) {
        S->stopping = 1;
        uv_timer_stop(&S->drain_timer);
        uv_timer_start(&S->drain_timer, loop_on_drain_timeout, 2000, 0);
    }
    if (atomic_load(&S->live_reqs) == 0) loop_stop_now(S);
}

/* Cancels every tracked request: queued ones get a 503, running ones end with an
 * error event (stream) or a 503 (non-stream) once their sequences stop. */
static void loop_cancel_all(srv *S) {
    while (S->trk_head) {
        srv_req *r = S->trk_head;
        pthread_mutex_lock(&r->mu);
        r->shutdown = 1;
        pthread_mutex_unlock(&r->mu);
        if (r->waiting) {
            loop_unlink_waiting(S, r);
            loop_fail(S, r, 503, "unavailable_error", "The server is shutting down");
            loop_untrack(S, r);
        } else {
            loop_cancel(S, r);
        }
    }
}

static void loop_on_drain_timeout(uv_timer_t *t) {
    srv *S = t->data;
    if (S->stopping) {
        loop_stop_now(S);
        return;
    }
    fprintf(stderr, "strata: shutdown timeout: cancelling %d requests\n", S->n_tracked);
    loop_cancel_all(S);
}

static void loop_on_signal(uv_signal_t *h, int signum) {
    srv *S = h->data;
    if (S->draining) {
        fprintf(stderr, "strata: second signal %d: cancelling every request now\n", signum);
        loop_cancel_all(S);
        return;
    }
    fprintf(stderr, "strata: signal %d: draining (up to %lld s)\n", signum,
            S->cfg->shutdown_timeout);
    S->draining = 1;
    if (atomic_load(&S->state) != SRV_FAILED) atomic_store(&S->state, SRV_DRAINING);
    uv_timer_start(&S->drain_timer, loop_on_drain_timeout,
                   (uint64_t)S->cfg->shutdown_timeout * 1000, 0);
    loop_check_drained(S);
}

/* A request comes in: to the preparation queue, or refused when it is full. */
static void loop_prepare(srv *S, srv_req *r) {
    char msg[160];
    switch (prep_submit(S, r)) {
    case PREP_OK: return;
    case PREP_BUSY:
        snprintf(msg, sizeof msg,
                 "The server is busy: %d requests wait to be prepared (--max-queue); "
                 "retry later",
                 S->prep_queued);
        loop_fail(S, r, 429, "rate_limit_error", msg);
        return;
    default: loop_fail(S, r, 503, "unavailable_error", "The server is shutting down"); return;
    }
}

/* prep.c hands every request back here once: to admission when it was prepared; its
 * error or its answer (/tokenize) to the connection otherwise. */
static void loop_on_prepared(srv *S, srv_req *r) {
    pthread_mutex_lock(&r->mu);
    int phase = r->phase, status = r->err.status, job = r->job;
    if (phase != REQ_PARSED) req_resume_locked(r);
    pthread_mutex_unlock(&r->mu);
    if (phase == REQ_FAILED && (job <= SRV_JOB_CHAT || job == SRV_JOB_RESPONSES))
        metrics_count_rejected(S->met, status);
    if (phase == REQ_PARSED) {
        loop_on_new(S, r);
        if (!S->draining || !S->stopping) loop_admit(S);
    }
    loop_check_drained(S);
}

static void loop_on_async(uv_async_t *a) {
    srv *S = a->data;
    if (atomic_exchange(&S->loaded, 0) && atomic_load(&S->state) == SRV_FAILED) {
        /* nothing to serve: exit non-zero so a supervisor sees the failure */
        S->draining = 1;
        loop_check_drained(S);
    }
    pthread_mutex_lock(&S->inbox_mu);
    srv_req *r = S->inbox_head;
    S->inbox_head = S->inbox_tail = NULL;
    pthread_mutex_unlock(&S->inbox_mu);
    /* A node keeps in_inbox set until it is processed, so a post meanwhile only adds
     * bits; its link is read under the lock before in_inbox is cleared. */
    while (r) {
        pthread_mutex_lock(&S->inbox_mu);
        srv_req *next = r->inbox_next;
        unsigned bits = r->inbox_bits;
        r->inbox_bits = 0;
        r->in_inbox = 0;
        r->inbox_next = NULL;
        pthread_mutex_unlock(&S->inbox_mu);
        if (bits & SRV_IN_PREPARE) loop_prepare(S, r);
        if ((bits & SRV_IN_DONE) && r->tracked) {
            loop_record(S, r);
            loop_untrack(S, r);
        }
        if ((bits & SRV_IN_CANCEL) && r->tracked) loop_cancel(S, r);
        req_unref(r); /* the inbox's reference */
        r = next;
    }
    if (!S->draining || !S->stopping) loop_admit(S);
    loop_check_drained(S);
}

int loop_init(srv *S, strata_err *err) {
    pthread_mutex_init(&S->inbox_mu, NULL);
    S->on_prepared = loop_on_prepared;
    if (uv_loop_init(&S->loop)) return strata_err_set(err, STRATA_EIO, "uv_loop_init failed");
    S->async.data = S;
    S->sig_term.data = S;
    S->sig_int.data = S;
    S->drain_timer.data = S;
    if (uv_async_init(&S->loop, &S->async, loop_on_async) ||
        uv_signal_init(&S->loop, &S->sig_term) || uv_signal_init(&S->loop, &S->sig_int) ||
        uv_timer_init(&S->loop, &S->drain_timer))
        return strata_err_set(err, STRATA_EIO, "libuv handle init failed");
    uv_signal_start(&S->sig_term, loop_on_signal, SIGTERM);
    uv_signal_start(&S->sig_int, loop_on_signal, SIGINT);
    S->loop_ready = 1;
    return 0;
}

void loop_run(srv *S) { uv_run(&S->loop, UV_RUN_DEFAULT); }

void loop_shutdown(srv *S) {
    while (S->trk_head) {
        srv_req *r = S->trk_head;
        pthread_mutex_lock(&r->mu);
        r->shutdown = 1;
        pthread_mutex_unlock(&r->mu);
        loop_cancel(S, r);
    }
    pthread_mutex_lock(&S->inbox_mu);
    srv_req *r = S->inbox_head;
    S->inbox_head = S->inbox_tail = NULL;
    pthread_mutex_unlock(&S->inbox_mu);
    while (r) {
        srv_req *next = r->inbox_next;
        r->in_inbox = 0;
        req_unref(r);
        r = next;
    }
}
