/* server_internal.h - what the files of server/ share: the server, a generation
 * request and the functions that cross files. Not for use outside server/.
 *
 * Threads and what they own:
 *   - MHD worker threads: parse, validate, render the template, tokenize, create the
 *     engine sequences, then post the request to the loop and suspend the
 *     connection; later they format output (JSON or SSE) when resumed.
 *   - the loop thread (main): admission, the waiting queue, timeouts, disconnect
 *     watches, signals, draining. Everything under "loop thread" below is touched
 *     by it only.
 *   - the engine step thread: appends output to sequences and calls gen_wake, which
 *     resumes the connection.
 * A request's mutable shared state is under its mu; the lock order is req->mu, then
 * a sequence's internal lock (engine_seq_take); never the reverse. */
#ifndef STRATA_SERVER_INTERNAL_H
#define STRATA_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

#include "config/config.h"
#include "engine/chat_template.h"
#include "engine/engine.h"
#include "engine/tokenizer.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/sbuf.h"

#define STRATA_VERSION "0.1.0"
#define STRATA_FINGERPRINT "fp_strata_" STRATA_VERSION

enum { SRV_LOADING, SRV_READY, SRV_DRAINING, SRV_FAILED };

/* inbox bits: what the loop thread has to do for a request */
enum { SRV_IN_NEW = 1, SRV_IN_CANCEL = 2, SRV_IN_DONE = 4 };

/* request phases (under req->mu) */
enum { REQ_PARSED, REQ_QUEUED, REQ_RUNNING, REQ_FINISHED, REQ_FAILED };

typedef struct srv srv;
typedef struct srv_req srv_req;

typedef struct srv_choice {
    srv_req *req;
    engine_seq *seq;
    engine_chunk chunk;      /* consumer buffers (MHD thread, under req->mu) */
    int prompt_idx;
    int n_prompt;
    int finish;              /* ENGINE_FINISH_* once seen by the consumer */
    int n_gen;
    int started;             /* stream: first chunk (role / echo) sent */
    char err[256];
    sbuf text, reasoning;    /* non-stream: the whole output */
    json_t *lp;              /* logprobs accumulated (non-stream) */
    size_t text_offset;      /* completions logprobs text_offset */
} srv_choice;

struct srv_req {
    srv *S;
    atomic_int refs;             /* holders of the output: connection, loop, inbox */
    atomic_int mem;              /* 1 for all of those + 1 per live engine sequence */
    pthread_mutex_t mu;
    struct MHD_Connection *conn; /* NULL once MHD completed the request */
    int sock;                    /* dup of the client socket, watched for hangups; -1 */
    openai_request oai;
    char id[48];
    long long created;
    int n_choices;
    srv_choice *ch;
    int prompt_tokens;           /* usage: every prompt counted once */
    char **echo;                 /* completions echo text per prompt (or NULL) */
    int split_reasoning;

    /* under mu */
    int phase;
    int suspended;               /* the connection is suspended by us */
    int detached;                /* refs reached 0: sequences released */
    int response_queued;
    openai_error err;               /* phase REQ_FAILED */
    int gone;                    /* the client went away */
    int timed_out, shutdown;     /* why sequences were cancelled */
    int n_finished;
    int stream_done;
    int done_posted;
    sbuf out;                    /* stream: bytes not yet handed to MHD */
    size_t out_off;
    double t_out;                /* stream: when bytes last went to MHD (or arrival) */
    int ka_due;                  /* stream: the loop asks for a ': keep-alive' comment */

    /* inbox (under S->inbox_mu) */
    unsigned inbox_bits;
    int in_inbox;
    srv_req *inbox_next;

    /* loop thread */
    int tracked, waiting, handles;
    srv_req *wait_prev, *wait_next;
    srv_req *trk_prev, *trk_next;
    uv_timer_t timer;
    uv_timer_t ka_timer;         /* stream: --sse-keepalive */
    uv_poll_t poll;
    double t_arrival, t_admit;
};

struct srv {
    config *cfg;
    const char *model_name;      /* served name */
    char model_dir[4096];
    atomic_int state;
    char load_error[512];
    long long created;

    backend *b;
    model *m;
    tokenizer *tok;
    chat_template *tmpl;
    engine *eng;
    int ctx, vocab, max_seqs;
    int has_think;               /* the vocab has <think> and </think> */
    int32_t im_end;              /* <|im_end|> / end-of-turn id for chat, -1 */

    struct MHD_Daemon *mhd;
    metrics *met;
    const char *openapi;         /* the OpenAPI document */
    size_t openapi_len;

    uv_loop_t loop;
    uv_async_t async;
    uv_signal_t sig_term, sig_int;
    uv_timer_t drain_timer;
    int loop_ready;
    pthread_mutex_t inbox_mu;
    srv_req *inbox_head, *inbox_tail;
    atomic_int loaded;           /* loader thread finished (success or not) */
    atomic_int slots_freed;

    srv_req *wait_head, *wait_tail;
    srv_req *trk_head;           /* every tracked request */
    atomic_int n_waiting;
    int n_tracked;
    atomic_int live_reqs;
    int draining;
    atomic_int stopping;         /* 1: drained, waiting for connections; 2: stopped */
    pthread_t loader;
    int loader_started;
};

/* http.c: response helpers (MHD threads) */
enum MHD_Result http_respond_json(struct MHD_Connection *c, int status, json_t *body);
enum MHD_Result http_respond_error(struct MHD_Connection *c, const openai_error *e);
enum MHD_Result http_respond_text(struct MHD_Connection *c, int status, const char *type,
                                 const char *body, size_t len);
int http_start(srv *S, strata_err *err);
/* The SSE reader has nothing to send (r->mu held): appends a keep-alive comment the
 * loop asked for, or the error of a request that failed in the queue after its
 * headers went out early. Returns 1 when it appended something. */
int http_sse_idle_locked(srv_req *r);

/* routes.c: the small routes (MHD threads) */
enum MHD_Result route_health(srv *S, struct MHD_Connection *c);
enum MHD_Result route_models(srv *S, struct MHD_Connection *c, const char *id);
enum MHD_Result route_metrics(srv *S, struct MHD_Connection *c);
enum MHD_Result route_tokenize(srv *S, struct MHD_Connection *c, const char *body, size_t len);
enum MHD_Result route_detokenize(srv *S, struct MHD_Connection *c, const char *body, size_t len);
enum MHD_Result route_openapi(srv *S, struct MHD_Connection *c);
/* Renders a chat request's messages with the template; *out malloc'ed. */
int route_render_chat(srv *S, const openai_request *r, char **out, openai_error *e);

/* gen.c: generation requests */
enum MHD_Result gen_start(srv *S, struct MHD_Connection *c, int kind, const char *body,
                          size_t len, srv_req **out);
enum MHD_Result gen_resume(srv_req *r, struct MHD_Connection *c);
void gen_connection_closed(srv_req *r);
void gen_req_ref(srv_req *r);
void gen_req_unref(srv_req *r);
/* Resumes r's connection if we suspended it. Caller holds r->mu. Any thread. */
void gen_req_resume_locked(srv_req *r);

/* gen_format.c: OpenAI JSON of outputs (MHD threads, req->mu held) */
int gen_format_stream(srv_req *r, int *all_done);
json_t *gen_format_full(srv_req *r);
void gen_take_all(srv_req *r);

/* loop.c: the loop thread */
int loop_init(srv *S, strata_err *err);
void loop_post(srv *S, srv_req *r, unsigned bits); /* any thread */
void loop_run(srv *S);
/* After the loop stopped and MHD and the engine are gone: drops what the loop still
 * holds (tracked requests, inbox entries). */
void loop_shutdown(srv *S);
int64_t gen_random_u64(void);

#endif
