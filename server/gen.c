/* gen.c - a request's life, from the body an HTTP thread read to the answer.
 *
 * gen_start (MHD thread) takes the body, suspends the connection and posts the
 * request to the loop, which hands it to a preparation worker (prep.c): parsing,
 * template and tokenizer work run there (gen_build.c), never on an HTTP thread. A
 * prepared generation request is admitted by the loop; output comes back through
 * gen_wake on the step thread, which resumes the connection; MHD then calls
 * gen_resume (non-stream: the whole JSON once every choice finished; errors and the
 * /tokenize answers likewise) or gen_reader (stream: SSE events as they come). The
 * references that keep a request alive are counted in req.c. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/server_internal.h"

enum MHD_Result gen_start(srv *S, struct MHD_Connection *c, int job, strbuf *body, int http11,
                          srv_req **out) {
    srv_req *r = req_new(S, job);
    if (!r) return MHD_NO;
    r->body = *body; /* moved: the worker parses it, then frees it */
    memset(body, 0, sizeof *body);
    r->http11 = http11;
    /* our own handle on the socket: the loop watches it for a hangup while MHD
     * does not look at the suspended connection */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) r->sock = fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 0);
    r->conn = c;
    *out = r; /* the connection's reference */
    pthread_mutex_lock(&r->mu);
    r->suspended = 1;
    MHD_suspend_connection(c);
    pthread_mutex_unlock(&r->mu);
    loop_post(S, r, SRV_IN_PREPARE);
    return MHD_YES;
}

static ssize_t gen_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    srv_req *r = cls;
    (void)pos;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (r->out_off < r->out.len) {
            size_t k = r->out.len - r->out_off;
            if (k > max) k = max;
            memcpy(buf, r->out.p + r->out_off, k);
            r->out_off += k;
            if (r->out_off == r->out.len) strbuf_reset(&r->out), r->out_off = 0;
            r->t_out = strata_now(), r->ka_due = 0; /* the loop's keep-alive clock */
            pthread_mutex_unlock(&r->mu);
            return (ssize_t)k;
        }
        if (r->stream_done) {
            pthread_mutex_unlock(&r->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (r->gone || !r->conn) {
            pthread_mutex_unlock(&r->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        int all_done = 0;
        /* headers sent early by a keep-alive: nothing to format before admission */
        if (r->phase != REQ_QUEUED && r->phase != REQ_FAILED && gen_format_stream(r, &all_done)) {
            pthread_mutex_unlock(&r->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (r->stream_done && !r->done_posted) {
            r->done_posted = 1;
            loop_post(r->S, r, SRV_IN_DONE);
        }
        if (r->out.len > r->out_off || r->stream_done) continue;
        if (gen_format_sse_idle_locked(r)) continue; /* keep-alive comment, or queue failure */
        /* nothing to send: sleep until gen_wake resumes us */
        r->suspended = 1;
        MHD_suspend_connection(r->conn);
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
}

static void gen_reader_free(void *cls) { req_unref(cls); }

enum MHD_Result gen_resume(srv_req *r, struct MHD_Connection *c) {
    pthread_mutex_lock(&r->mu);
    if (r->phase == REQ_FAILED) {
        openai_error e = r->err;
        r->answered = 1;
        pthread_mutex_unlock(&r->mu);
        return http_respond_error(c, &e);
    }
    if (r->phase == REQ_ANSWERED) {
        json_t *j = r->answer;
        r->answer = NULL;
        r->answered = 1;
        pthread_mutex_unlock(&r->mu);
        return http_respond_json(c, 200, j);
    }
    if (r->gone) {
        pthread_mutex_unlock(&r->mu);
        return MHD_NO;
    }
    if (r->oai.stream && (r->phase == REQ_RUNNING || r->phase == REQ_FINISHED ||
                          (r->phase == REQ_QUEUED && r->ka_due))) {
        if (r->response_queued) {
            pthread_mutex_unlock(&r->mu);
            return MHD_YES;
        }
        r->response_queued = r->answered = 1;
        /* MHD locks the response while it calls gen_reader, which takes r->mu: create
         * and queue the response without holding r->mu, keeping one lock order */
        pthread_mutex_unlock(&r->mu);
        struct MHD_Response *resp = MHD_create_response_from_callback(
            MHD_SIZE_UNKNOWN, 16 * 1024, gen_reader, r, gen_reader_free);
        if (!resp) return MHD_NO;
        req_ref(r); /* the response's reference */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                                "text/event-stream; charset=utf-8");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        cors_add_headers(c, resp); /* a page reading the stream needs them too */
        enum MHD_Result rc = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return rc;
    }
    if (!r->oai.stream && r->phase == REQ_RUNNING && req_all_finished(r)) {
        gen_take_all(r);
        r->phase = REQ_FINISHED;
        json_t *j = gen_format_full(r);
        openai_error e = r->err;
        int failed = r->err.status != 0;
        r->answered = 1;
        if (!r->done_posted) {
            r->done_posted = 1;
            loop_post(r->S, r, SRV_IN_DONE);
        }
        pthread_mutex_unlock(&r->mu);
        if (failed) {
            json_decref(j);
            return http_respond_error(c, &e);
        }
        return http_respond_json(c, 200, j);
    }
    /* woken before there is anything to send: wait again */
    r->suspended = 1;
    MHD_suspend_connection(c);
    pthread_mutex_unlock(&r->mu);
    return MHD_YES;
}

void gen_connection_closed(srv_req *r) {
    pthread_mutex_lock(&r->mu);
    r->conn = NULL;
    r->suspended = 0;
    int unfinished = !r->stream_done && r->phase != REQ_FINISHED && r->phase != REQ_FAILED &&
                     r->phase != REQ_ANSWERED;
    if (unfinished) r->gone = 1;
    pthread_mutex_unlock(&r->mu);
    if (unfinished)
        for (int i = 0; i < r->n_choices; i++) engine_seq_cancel(r->ch[i].seq);
    loop_post(r->S, r, SRV_IN_CANCEL);
}
