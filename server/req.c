/* req.c - a request's lifetime: two counts and the free.
 *
 * refs counts the holders of the output (the connection, the loop, the inbox, a
 * worker, the SSE response): when the last goes, the request is detached and its
 * sequences cancelled and released. mem adds one per live engine sequence, whose
 * callbacks point at the request, so the memory outlives the last callback. Any
 * thread. */
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "server/server_internal.h"

int64_t req_random_u64(void) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
        /* never fails on Linux >= 3.17 for 8 bytes; mix the clock as a last resort */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
    }
    return (int64_t)(x >> 1);
}

void req_ref(srv_req *r) { atomic_fetch_add(&r->refs, 1); }

/* Two counts: refs (connection, loop, inbox, worker, response) say whether anyone
 * still wants the output; mem adds one per live engine sequence, whose callbacks
 * point at r, so the memory outlives the last callback. */
srv_req *req_new(srv *S, int job) {
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    atomic_fetch_add(&S->live_reqs, 1);
    atomic_init(&r->refs, 1);
    atomic_init(&r->mem, 1);
    pthread_mutex_init(&r->mu, NULL);
    r->S = S;
    r->job = job;
    r->sock = -1;
    r->phase = REQ_PREPARING;
    r->t_arrival = strata_now();
    return r;
}

static void req_free(srv_req *r) {
    srv *S = r->S;
    for (int i = 0; i < r->n_choices; i++) {
        engine_chunk_deinit(&r->ch[i].chunk);
        strbuf_free(&r->ch[i].text);
        strbuf_free(&r->ch[i].reasoning);
        json_decref(r->ch[i].lp);
        toolcall_parser_free(r->ch[i].tc);
        toolcall_delta_deinit(&r->ch[i].td);
    }
    if (r->echo)
        for (int i = 0; i < r->oai.n_prompts; i++) free(r->echo[i]);
    free(r->echo);
    free(r->ch);
    if (r->sock >= 0) close(r->sock);
    strbuf_free(&r->out);
    strbuf_free(&r->body);
    json_decref(r->answer);
    responses_free(r);
    openai_request_free(&r->oai);
    pthread_mutex_destroy(&r->mu);
    free(r);
    /* the loop waits for the last request to go while it shuts down */
    if (atomic_fetch_sub(&S->live_reqs, 1) == 1 && S->stopping) uv_async_send(&S->async);
}

void req_unref(srv_req *r) {
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
    /* nobody reads the output any more: stop the sequences and drop our hold; a
     * late gen_wake must not look at sequences that may be freed from here on */
    pthread_mutex_lock(&r->mu);
    r->detached = 1;
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < r->n_choices; i++) {
        engine_seq_cancel(r->ch[i].seq);
        engine_seq_release(r->ch[i].seq);
    }
    req_mem_unref(r);
}

void req_mem_unref(srv_req *r) {
    if (atomic_fetch_sub(&r->mem, 1) == 1) req_free(r);
}

void req_resume_locked(srv_req *r) {
    if (r->suspended && r->conn) {
        r->suspended = 0;
        MHD_resume_connection(r->conn);
    }
}

int req_all_finished(srv_req *r) {
    for (int i = 0; i < r->n_choices; i++) {
        engine_seq_times t;
        engine_seq_get_times(r->ch[i].seq, &t);
        if (!t.finished) return 0;
    }
    return 1;
}
