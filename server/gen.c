/* gen.c - a generation request from body to engine sequences and back.
 *
 * gen_start (MHD thread) validates the body, renders the chat template, tokenizes,
 * checks prompt + max_tokens against the context, creates one engine sequence per
 * choice (n per prompt), suspends the connection and posts the request to the loop
 * thread, which admits it. Output comes back through gen_wake on the step thread,
 * which resumes the connection; MHD then calls gen_resume (non-stream: the whole
 * JSON once every choice finished) or gen_reader (stream: SSE events as they come).
 * A request lives while the connection, the loop or a sequence holds a reference. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "server/server_internal.h"

int64_t gen_random_u64(void) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) {
        /* never fails on Linux >= 3.17 for 8 bytes; mix the clock as a last resort */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec;
    }
    return (int64_t)(x >> 1);
}

void gen_req_ref(srv_req *r) { atomic_fetch_add(&r->refs, 1); }

/* Two counts: refs (connection, loop, inbox, response) say whether anyone still
 * wants the output; mem adds one per live engine sequence, whose callbacks point at
 * r, so the memory outlives the last callback. */
static void gen_req_mem_unref(srv_req *r);

static void gen_req_free(srv_req *r) {
    srv *S = r->S;
    for (int i = 0; i < r->n_choices; i++) {
        engine_chunk_deinit(&r->ch[i].chunk);
        sbuf_free(&r->ch[i].text);
        sbuf_free(&r->ch[i].reasoning);
        json_decref(r->ch[i].lp);
    }
    if (r->echo)
        for (int i = 0; i < r->oai.n_prompts; i++) free(r->echo[i]);
    free(r->echo);
    free(r->ch);
    if (r->sock >= 0) close(r->sock);
    sbuf_free(&r->out);
    openai_request_free(&r->oai);
    pthread_mutex_destroy(&r->mu);
    free(r);
    /* the loop waits for the last request to go while it shuts down */
    if (atomic_fetch_sub(&S->live_reqs, 1) == 1 && S->stopping) uv_async_send(&S->async);
}

void gen_req_unref(srv_req *r) {
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
    gen_req_mem_unref(r);
}

static void gen_req_mem_unref(srv_req *r) {
    if (atomic_fetch_sub(&r->mem, 1) == 1) gen_req_free(r);
}

void gen_req_resume_locked(srv_req *r) {
    if (r->suspended && r->conn) {
        r->suspended = 0;
        MHD_resume_connection(r->conn);
    }
}

static int gen_all_finished(srv_req *r) {
    for (int i = 0; i < r->n_choices; i++) {
        engine_seq_times t;
        engine_seq_get_times(r->ch[i].seq, &t);
        if (!t.finished) return 0;
    }
    return 1;
}

/* Step thread: a sequence has new output (or finished). */
static void gen_wake(void *ud) {
    srv_choice *ch = ud;
    srv_req *r = ch->req;
    pthread_mutex_lock(&r->mu);
    if (!r->detached && (r->oai.stream || gen_all_finished(r))) gen_req_resume_locked(r);
    pthread_mutex_unlock(&r->mu);
}

static void gen_seq_released(void *ud) { gen_req_mem_unref(((srv_choice *)ud)->req); }

/* Turns the prompts of r into token ids; ids[i] malloc'ed. */
static int gen_tokenize(srv *S, srv_req *r, int32_t **ids, int *n, openai_error *e) {
    openai_request *o = &r->oai;
    strata_err err = {0};
    if (o->kind == OPENAI_CHAT) {
        char *text = NULL;
        if (route_render_chat(S, o, &text, e)) return -1;
        if (S->has_think) {
            /* the generation prompt opened a think block the model continues */
            char *open = NULL, *close = NULL;
            for (char *p = text; (p = strstr(p, "<think>")); p++) open = p;
            for (char *p = text; (p = strstr(p, "</think>")); p++) close = p;
            r->split_reasoning = 1;
            if (open && (!close || close < open)) r->split_reasoning = 2;
        }
        size_t n_ids = 0;
        int rc = tok_encode(S->tok, text, strlen(text), 0, &ids[0], &n_ids, &err);
        free(text);
        if (rc) {
            openai_error_from_strata(e, &err, "messages");
            return -1;
        }
        n[0] = (int)n_ids;
        return 0;
    }
    if (o->echo && !(r->echo = calloc((size_t)o->n_prompts, sizeof *r->echo))) goto nomem;
    for (int i = 0; i < o->n_prompts; i++) {
        openai_prompt *p = &o->prompts[i];
        if (p->ids) {
            if (!(ids[i] = malloc((size_t)p->n_ids * sizeof(int32_t)))) goto nomem;
            memcpy(ids[i], p->ids, (size_t)p->n_ids * sizeof(int32_t));
            n[i] = p->n_ids;
            if (r->echo && S->tok) {
                size_t tl;
                if (tok_decode(S->tok, p->ids, (size_t)p->n_ids, 0, &r->echo[i], &tl, &err)) {
                    openai_error_from_strata(e, &err, "prompt");
                    return -1;
                }
            }
        } else {
            if (!S->tok) {
                openai_error_set(e, 400, "invalid_request_error", "prompt", NULL,
                              "This model has no tokenizer; send the prompt as token ids");
                return -1;
            }
            size_t n_ids = 0;
            if (tok_encode(S->tok, p->text, p->text_len, 1, &ids[i], &n_ids, &err)) {
                openai_error_from_strata(e, &err, "prompt");
                return -1;
            }
            n[i] = (int)n_ids;
            if (r->echo && !(r->echo[i] = strdup(p->text))) goto nomem;
        }
    }
    return 0;
nomem:
    openai_error_set(e, 503, "server_error", NULL, NULL, "out of memory");
    return -1;
}

static int gen_make_choices(srv *S, srv_req *r, int32_t **ids, const int *n, openai_error *e) {
    openai_request *o = &r->oai;
    int n_prompts = o->kind == OPENAI_CHAT ? 1 : o->n_prompts;
    int32_t stop_ids[OPENAI_MAX_STOP + 1];
    int n_stop_ids = 0;
    for (int i = 0; i < o->n_stop_ids; i++) stop_ids[n_stop_ids++] = o->stop_ids[i];
    if (o->kind == OPENAI_CHAT && S->im_end >= 0 && !o->ignore_eos) stop_ids[n_stop_ids++] = S->im_end;
    r->n_choices = n_prompts * o->n;
    if (r->n_choices > S->max_seqs)
        return openai_error_set(e, 400, "invalid_request_error", "n", NULL,
                             "%d prompts x n=%d choices exceed the %d sequences this server "
                             "runs at once (--max-seqs)", n_prompts, o->n, S->max_seqs);
    if (!(r->ch = calloc((size_t)r->n_choices, sizeof *r->ch)))
        return openai_error_set(e, 503, "server_error", NULL, NULL, "out of memory");
    for (int p = 0; p < n_prompts; p++) {
        const char *param = o->kind == OPENAI_CHAT ? "messages" : "prompt";
        if (n[p] < 1)
            return openai_error_set(e, 400, "invalid_request_error", param, NULL,
                                 "The prompt is empty after tokenization");
        /* max_tokens 0 (completions with echo only): prefill, score the prompt, stop */
        int max_tokens = o->max_tokens >= 0 ? o->max_tokens : S->ctx - n[p];
        if ((long long)n[p] + max_tokens > S->ctx || (o->max_tokens < 0 && max_tokens < 1))
            return openai_error_set(
                e, 400, "invalid_request_error", param, "context_length_exceeded",
                "This model's maximum context length is %d tokens. However, you requested %lld "
                "tokens (%d in the %s, %d in the completion). Please reduce the length of the "
                "%s or completion.", S->ctx, (long long)n[p] + (o->max_tokens > 0 ? o->max_tokens : 0),
                n[p], o->kind == OPENAI_CHAT ? "messages" : "prompt",
                o->max_tokens > 0 ? o->max_tokens : 0, o->kind == OPENAI_CHAT ? "messages" : "prompt");
        r->prompt_tokens += n[p];
        for (int j = 0; j < o->n; j++) {
            srv_choice *ch = &r->ch[p * o->n + j];
            ch->req = r;
            ch->prompt_idx = p;
            ch->n_prompt = n[p];
            engine_chunk_init(&ch->chunk);
            engine_seq_params sp = {.prompt = ids[p], .n_prompt = n[p], .max_tokens = max_tokens,
                                    .logprobs = o->logprobs, .n_stop = o->n_stop,
                                    .prompt_logprobs = o->kind == OPENAI_COMPLETION && o->echo &&
                                                       o->logprobs,
                                    .stop = (const char *const *)o->stop,
                                    .n_stop_ids = n_stop_ids, .stop_ids = stop_ids,
                                    .ignore_eos = o->ignore_eos,
                                    .skip_special = o->skip_special_tokens,
                                    .split_reasoning = r->split_reasoning > 0,
                                    .start_in_reasoning = r->split_reasoning == 2};
            sampler_params_default(&sp.sampling);
            sp.sampling.temperature = (float)o->temperature;
            sp.sampling.top_k = o->top_k;
            sp.sampling.top_p = (float)o->top_p;
            sp.sampling.min_p = (float)o->min_p;
            sp.sampling.repetition_penalty = (float)o->repetition_penalty;
            sp.sampling.presence_penalty = (float)o->presence_penalty;
            sp.sampling.frequency_penalty = (float)o->frequency_penalty;
            /* a seeded request gives choice j the stream seed + j: reproducible, distinct */
            sp.sampling.seed = o->has_seed ? o->seed + (uint64_t)j : (uint64_t)gen_random_u64();
            sp.sampling.n_logit_bias = o->n_bias;
            sp.sampling.bias_ids = o->bias_ids;
            sp.sampling.bias_vals = o->bias_vals;
            sp.sampling.top_logprobs = o->logprobs ? o->top_logprobs : 0;
            sp.sampling.logprobs = o->logprobs;
            strata_err err = {0};
            atomic_fetch_add(&r->mem, 1); /* dropped by gen_seq_released */
            if (engine_seq_create(S->eng, &sp, gen_wake, gen_seq_released, ch, &ch->seq, &err)) {
                atomic_fetch_sub(&r->mem, 1);
                openai_error_from_strata(e, &err, param);
                return -1;
            }
        }
    }
    return 0;
}

enum MHD_Result gen_start(srv *S, struct MHD_Connection *c, int kind, const char *body,
                          size_t len, srv_req **out) {
    openai_error e;
    int32_t **ids = NULL;
    int *n = NULL, n_prompts = 0;
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return MHD_NO;
    atomic_fetch_add(&S->live_reqs, 1);
    atomic_init(&r->refs, 1);
    atomic_init(&r->mem, 1);
    pthread_mutex_init(&r->mu, NULL);
    r->S = S;
    r->sock = -1;
    r->t_arrival = engine_now();
    openai_limits lim = {.vocab = S->vocab, .max_n = S->max_seqs};
    if (openai_request_parse(&r->oai, kind, body, len, &lim, &e)) goto fail;
    if (r->oai.model && strcmp(r->oai.model, S->model_name) && strcmp(r->oai.model, S->cfg->model)) {
        openai_error_set(&e, 404, "not_found_error", "model", "model_not_found",
                      "The model '%.200s' does not exist; this server serves '%.200s'",
                      r->oai.model, S->model_name);
        goto fail;
    }
    n_prompts = kind == OPENAI_CHAT ? 1 : r->oai.n_prompts;
    if (kind == OPENAI_CHAT && (!S->tok || !S->tmpl)) {
        openai_error_set(&e, 400, "invalid_request_error", "messages", NULL,
                      "This model has no %s; use /v1/completions with token ids",
                      S->tok ? "chat template" : "tokenizer");
        goto fail;
    }
    ids = calloc((size_t)n_prompts, sizeof *ids);
    n = calloc((size_t)n_prompts, sizeof *n);
    if (!ids || !n) {
        openai_error_set(&e, 503, "server_error", NULL, NULL, "out of memory");
        goto fail;
    }
    if (gen_tokenize(S, r, ids, n, &e) || gen_make_choices(S, r, ids, n, &e)) goto fail;
    for (int i = 0; i < n_prompts; i++) free(ids[i]);
    free(ids);
    free(n);
    uint64_t a = (uint64_t)gen_random_u64(), b = (uint64_t)gen_random_u64();
    snprintf(r->id, sizeof r->id, "%s-%016llx%016llx", kind == OPENAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)a, (unsigned long long)b);
    r->created = (long long)time(NULL);
    /* our own handle on the socket: the loop watches it for a hangup while MHD
     * does not look at the suspended connection */
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) r->sock = fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 0);
    r->conn = c;
    *out = r; /* the connection's reference */
    pthread_mutex_lock(&r->mu);
    r->phase = REQ_PARSED;
    r->suspended = 1;
    MHD_suspend_connection(c);
    pthread_mutex_unlock(&r->mu);
    loop_post(S, r, SRV_IN_NEW);
    return MHD_YES;
fail:
    for (int i = 0; ids && i < n_prompts; i++) free(ids[i]);
    free(ids);
    free(n);
    metrics_count_rejected(S->met, e.status);
    enum MHD_Result rc = http_respond_error(c, &e);
    gen_req_unref(r);
    return rc;
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
            if (r->out_off == r->out.len) sbuf_reset(&r->out), r->out_off = 0;
            r->t_out = engine_now(), r->ka_due = 0; /* the loop's keep-alive clock */
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
        if (http_sse_idle_locked(r)) continue; /* keep-alive comment, or queue failure */
        /* nothing to send: sleep until gen_wake resumes us */
        r->suspended = 1;
        MHD_suspend_connection(r->conn);
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
}

static void gen_reader_free(void *cls) { gen_req_unref(cls); }

enum MHD_Result gen_resume(srv_req *r, struct MHD_Connection *c) {
    pthread_mutex_lock(&r->mu);
    if (r->phase == REQ_FAILED) {
        openai_error e = r->err;
        pthread_mutex_unlock(&r->mu);
        return http_respond_error(c, &e);
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
        r->response_queued = 1;
        /* MHD locks the response while it calls gen_reader, which takes r->mu: create
         * and queue the response without holding r->mu, keeping one lock order */
        pthread_mutex_unlock(&r->mu);
        struct MHD_Response *resp =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, gen_reader, r, gen_reader_free);
        if (!resp) return MHD_NO;
        gen_req_ref(r); /* the response's reference */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        enum MHD_Result rc = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return rc;
    }
    if (!r->oai.stream && r->phase == REQ_RUNNING && gen_all_finished(r)) {
        gen_take_all(r);
        r->phase = REQ_FINISHED;
        json_t *j = gen_format_full(r);
        openai_error e = r->err;
        int failed = r->err.status != 0;
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
    int unfinished = !r->stream_done && r->phase != REQ_FINISHED && r->phase != REQ_FAILED;
    if (unfinished) r->gone = 1;
    pthread_mutex_unlock(&r->mu);
    if (unfinished)
        for (int i = 0; i < r->n_choices; i++) engine_seq_cancel(r->ch[i].seq);
    loop_post(r->S, r, SRV_IN_CANCEL);
}
