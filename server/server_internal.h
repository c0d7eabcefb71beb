/* server_internal.h - what the files of server/ share: the server, a generation
 * request and the functions that cross files. Not for use outside server/.
 *
 * Threads and what they own:
 *   - MHD worker threads: I/O only. They read the body, suspend the connection and
 *     post the request to the loop; later they format output (JSON or SSE) when
 *     resumed. Nothing proportional to the body's size runs on them, so /health
 *     answers while large requests are being prepared.
 *   - the preparation workers (libuv's thread pool, at most --prepare-threads at
 *     once, prep.c): parse, validate, render the template, tokenize, create the
 *     engine sequences (gen_build.c), or answer /tokenize and /detokenize.
 *   - the loop thread (main): the preparation queue, admission, the waiting queue,
 *     timeouts, disconnect watches, the header deadline sweep, signals, draining.
 *     Everything under "loop thread" below is touched by it only.
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
#include "engine/template/chat_template.h"
#include "engine/engine.h"
#include "engine/text/tokenizer.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/toolcall.h"
#include "engine/base/strbuf.h"

#define STRATA_VERSION "0.1.0"
#define STRATA_FINGERPRINT "fp_strata_" STRATA_VERSION

enum { SRV_LOADING, SRV_READY, SRV_DRAINING, SRV_FAILED };

/* `strata serve` exit statuses (README "Running it in production") */
enum {
    SERVE_EXIT_OK = 0,       /* drained after SIGTERM / SIGINT */
    SERVE_EXIT_INTERNAL = 1, /* out of memory, a library failed: worth a restart */
    SERVE_EXIT_CONFIG = 2,   /* a bad flag, value or config file: a restart cannot help */
    SERVE_EXIT_LISTEN = 3,   /* the port is in use or not ours to take */
    SERVE_EXIT_MODEL = 4,    /* the model did not load (missing, broken, no device, download) */
};

/* connections accepted beyond --max-connections for /health and /metrics only */
#define SRV_RESERVE_CONNS 8

/* inbox bits: what the loop thread has to do for a request */
enum { SRV_IN_PREPARE = 1, SRV_IN_CANCEL = 2, SRV_IN_DONE = 4 };

/* what a request asks for (the first two are OPENAI_COMPLETION / OPENAI_CHAT) */
enum {
    SRV_JOB_COMPLETION = OPENAI_COMPLETION,
    SRV_JOB_CHAT = OPENAI_CHAT,
    SRV_JOB_TOKENIZE,
    SRV_JOB_DETOKENIZE,
    SRV_JOB_RESPONSES /* /v1/responses: runs as a chat (responses_req.c) */
};

/* request phases (under req->mu) */
enum { REQ_PREPARING, REQ_PARSED, REQ_ANSWERED, REQ_QUEUED, REQ_RUNNING, REQ_FINISHED, REQ_FAILED };

typedef struct srv srv;
typedef struct srv_req srv_req;

typedef struct srv_choice {
    srv_req *req;
    engine_seq *seq;
    engine_chunk chunk; /* consumer buffers (MHD thread, under req->mu) */
    int prompt_idx;
    int n_prompt;
    int finish; /* ENGINE_FINISH_* once seen by the consumer */
    int n_gen;
    int n_reasoning; /* tokens of takes that held only reasoning (Responses usage) */
    int started;     /* stream: first chunk (role / echo) sent */
    char err[256];
    strbuf text, reasoning; /* non-stream: the whole output */
    json_t *lp;             /* logprobs accumulated (non-stream) */
    toolcall_parser *tc;    /* a chat with tools: the output's calls; NULL otherwise */
    toolcall_delta td;      /* what the parser settled, not yet sent */
    int n_calls_sent;       /* stream: tool_calls deltas sent (their index) */
    int tc_final;           /* the parser had its final feed */
    size_t text_offset;     /* completions logprobs text_offset */
} srv_choice;

struct srv_req {
    srv *S;
    atomic_int refs; /* holders of the output: connection, loop, inbox */
    atomic_int mem;  /* 1 for all of those + 1 per live engine sequence */
    pthread_mutex_t mu;
    struct MHD_Connection *conn; /* NULL once MHD completed the request */
    int sock;                    /* dup of the client socket, watched for hangups; -1 */
    int job;                     /* SRV_JOB_* */
    int http11;                  /* the client speaks HTTP/1.1 (may get a 1xx) */
    strbuf body;                 /* the request body, until prepared */
    json_t *answer;              /* REQ_ANSWERED: the 200 body (tokenize, detokenize) */
    openai_request oai;
    char id[48];
    long long created;
    int n_choices;
    srv_choice *ch;
    int prompt_tokens; /* usage: every prompt counted once */
    char **echo;       /* completions echo text per prompt (or NULL) */
    int split_reasoning;
    const char *grammar_start;   /* the rule oai.grammar starts from (NULL: root) */
    int grammar_flags;           /* constrain_grammar_ex's: CONSTRAIN_SPECIALS for Gemma 4 calls */
    json_t *resp_echo;           /* SRV_JOB_RESPONSES: the Response's echoed request fields */
    struct resp_stream *resp_st; /* SRV_JOB_RESPONSES stream: its progress (responses_fmt.c) */

    /* under mu */
    int phase;
    int suspended;           /* the connection is suspended by us */
    int detached;            /* refs reached 0: sequences released */
    int response_queued;     /* stream: the SSE response is queued */
    int answered;            /* a response is queued: only MHD writes the socket */
    openai_error err;        /* phase REQ_FAILED */
    int gone;                /* the client went away */
    int timed_out, shutdown; /* why sequences were cancelled */
    int n_finished;
    int stream_done;
    int done_posted;
    strbuf out; /* stream: bytes not yet handed to MHD */
    size_t out_off;
    double t_out; /* stream: when bytes last went to MHD (or arrival) */
    int ka_due;   /* stream: the loop asks for a ': keep-alive' comment */

    /* inbox (under S->inbox_mu) */
    unsigned inbox_bits;
    int in_inbox;
    srv_req *inbox_next;

    /* loop thread */
    uv_work_t work;     /* preparation (prep.c) */
    srv_req *prep_next; /* the preparation queue */
    int probed;         /* the peer half-closed: probed with a 100 Continue */
    int tracked, waiting, handles;
    srv_req *wait_prev, *wait_next;
    srv_req *trk_prev, *trk_next;
    uv_timer_t timer;
    uv_timer_t ka_timer; /* stream: --sse-keepalive */
    uv_poll_t poll;
    double t_arrival, t_admit;
};

struct srv {
    config *cfg;
    const char *model_name; /* served name */
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
    int has_think;           /* the vocab has <think> and </think> */
    toolcall_format tc_fmt;  /* how a chat with tools reads calls from the output */
    constrain_vocab *cvocab; /* the tokens' bytes for grammars (NULL without a tokenizer) */
    int32_t im_end;          /* <|im_end|> / end-of-turn id for chat, -1 */

    struct MHD_Daemon *mhd;
    metrics *met;
    const char *openapi; /* the OpenAPI document */
    size_t openapi_len;

    uv_loop_t loop;
    uv_async_t async;
    uv_signal_t sig_term, sig_int;
    uv_timer_t drain_timer;
    int loop_ready;
    pthread_mutex_t inbox_mu;
    srv_req *inbox_head, *inbox_tail;
    atomic_int loaded; /* loader thread finished (success or not) */
    atomic_int slots_freed;

    srv_req *wait_head, *wait_tail;
    srv_req *trk_head; /* every tracked request */
    atomic_int n_waiting;
    int n_tracked;
    atomic_int live_reqs;
    int draining;
    atomic_int stopping; /* 1: drained, waiting for connections; 2: stopped */
    pthread_t loader;
    int loader_started;

    /* preparation (loop thread) */
    void (*on_prepared)(srv *S, srv_req *r); /* set by loop_init */
    srv_req *prep_head, *prep_tail;          /* bodies waiting for a worker */
    int prep_queued, prep_running;
    atomic_int n_preparing; /* both, for /metrics (any thread reads it) */

    /* the connection guard (http_guard.c), under guard_mu */
    pthread_mutex_t guard_mu;
    struct guard_conn *guard_head;
    int n_conns;
    uv_timer_t guard_timer; /* loop thread: the deadline sweep */
    atomic_llong n_head_timeouts;
};

/* ---- the daemon's files, leaves first: each calls only files listed above it ---- */

/* serve_load.c: the model, tokenizer, chat template and engine of S->cfg (loader
 * thread; tests and the request fuzzer call it too). srv_unload frees what loaded. */
int srv_load(srv *S, strata_err *err);
void srv_unload(srv *S);

/* http_guard.c: deadlines and limits per connection (MHD threads, sweep on the loop) */
typedef struct guard_conn guard_conn;
void guard_init(srv *S);
void guard_deinit(srv *S);
void guard_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                         enum MHD_ConnectionNotificationCode code);
void *guard_on_request_line(void *cls, const char *uri, struct MHD_Connection *c);
/* The request is fully read, or answered early: its head deadline is off. */
void guard_request_received(srv *S, struct MHD_Connection *c);
/* The response went out: the connection idles until its next request line. */
void guard_request_done(srv *S, struct MHD_Connection *c);
/* The connection was accepted beyond --max-connections: /health and /metrics only. */
int guard_is_reserve(struct MHD_Connection *c);
/* The header checks RFC 9112 asks of a server: 0, or a 400 message in msg. */
int guard_check_framing(struct MHD_Connection *c, char *msg, size_t len);
/* Loop thread: starts the sweep timer. */
int guard_start(srv *S, strata_err *err);
/* The CORS answer of the connection's current request (CORS_*; http_cors.c): the
 * respond functions see only the connection, so it is kept on its guard record. */
void guard_set_cors(struct MHD_Connection *c, int mode);
int guard_cors(struct MHD_Connection *c);

/* http_cors.c: CORS for browser pages served from other origins (MHD threads) */
enum { CORS_NONE, CORS_ORIGIN, CORS_ANY };
/* What the request's Origin gets under --allowed-origins: CORS_NONE (no headers),
 * CORS_ORIGIN (its own origin echoed) or CORS_ANY ("*"). */
int cors_mode(const srv *S, struct MHD_Connection *c);
/* A preflight (OPTIONS with Access-Control-Request-Method) while CORS is on. */
int cors_is_preflight(const srv *S, struct MHD_Connection *c, const char *method);
/* Answers the preflight of an allowed origin: 204 with the Access-Control-Allow-*
 * headers (http.c refuses the others). */
enum MHD_Result cors_preflight(struct MHD_Connection *c);
/* Adds Access-Control-Allow-Origin and Vary: Origin to resp when the request's
 * origin is allowed (every answer: JSON, errors, SSE). */
void cors_add_headers(struct MHD_Connection *c, struct MHD_Response *resp);

/* respond.c: queueing an answer on a connection (MHD threads) */
enum MHD_Result http_respond_json(struct MHD_Connection *c, int status, json_t *body);
enum MHD_Result http_respond_error(struct MHD_Connection *c, const openai_error *e);
enum MHD_Result http_respond_text(struct MHD_Connection *c, int status, const char *type,
                                  const char *body, size_t len);
/* The error object with one more header (Allow on a 405, Connection: close). */
enum MHD_Result http_respond_error_hdr(struct MHD_Connection *c, const openai_error *e,
                                       const char *name, const char *value);
/* An error after which the connection must not be reused: its body was not read (so
 * its bytes cannot be told from the next request's), or its framing was bad. */
enum MHD_Result http_respond_error_close(struct MHD_Connection *c, int status, const char *type,
                                         const char *code, const char *msg);

/* req.c: a request's lifetime (any thread) */
srv_req *req_new(srv *S, int job);
void req_ref(srv_req *r);
void req_unref(srv_req *r);
/* The memory count: one per live engine sequence besides the holders' one. */
void req_mem_unref(srv_req *r);
/* Resumes r's connection if we suspended it. Caller holds r->mu. */
void req_resume_locked(srv_req *r);
/* Every choice's sequence has finished. */
int req_all_finished(srv_req *r);
int64_t req_random_u64(void);

/* responses_req.c: a /v1/responses body to the chat completions body that runs it
 * (*chat, malloc'ed JSON text) and the fields its Response echoes (*echo). 0, or -1
 * with e. Any thread. */
int responses_to_chat(const char *body, size_t len, char **chat, json_t **echo, openai_error *e);
/* Renames an error's param from the chat field to the Responses one it came from. */
void responses_error_param(openai_error *e);

/* chat_prompt.c: a chat request's messages through the template; *out malloc'ed. */
int chat_prompt_render(srv *S, const openai_request *r, char **out, openai_error *e);

/* gen_build.c: r->body to engine sequences (parse, model check, template, tokenize,
 * context check, one sequence per choice). 0, or -1 with e filled; either way r is
 * in a state req_unref frees. Any thread but MHD's (it is the heavy part). */
int gen_build(srv *S, srv_req *r, openai_error *e);
/* The grammar r's choices follow, once its prompt is rendered (gen_grammar.c): replaces
 * r->oai.grammar and sets r->grammar_start. 0, or -1 with e. */
int gen_grammar(srv *S, srv_req *r, openai_error *e);

/* routes.c: the small routes (MHD threads), and the /tokenize and /detokenize answers
 * (preparation workers: 0 and the 200 body in *out, or -1 with e) */
enum MHD_Result route_health(srv *S, struct MHD_Connection *c);
enum MHD_Result route_models(srv *S, struct MHD_Connection *c, const char *id);
enum MHD_Result route_metrics(srv *S, struct MHD_Connection *c);
enum MHD_Result route_openapi(srv *S, struct MHD_Connection *c);
int route_tokenize_json(srv *S, const char *body, size_t len, json_t **out, openai_error *e);
int route_detokenize_json(srv *S, const char *body, size_t len, json_t **out, openai_error *e);

/* prep.c: the bounded preparation queue (loop thread). A prepared request (or one
 * that failed, or a /tokenize answer) goes to S->on_prepared, which the loop sets. */
enum { PREP_OK, PREP_BUSY, PREP_STOPPING };
/* PREP_OK: r runs or waits for a worker; otherwise the caller answers r. */
int prep_submit(srv *S, srv_req *r);
/* After the loop stopped: fails what waits and runs the loop until the running
 * preparations are back, so nothing touches the engine after it is destroyed. */
void prep_shutdown(srv *S);

/* loop.c: the loop thread */
int loop_init(srv *S, strata_err *err);
void loop_post(srv *S, srv_req *r, unsigned bits); /* any thread */
void loop_run(srv *S);
/* After the loop stopped and MHD and the engine are gone: drops what the loop still
 * holds (tracked requests, inbox entries). */
void loop_shutdown(srv *S);

/* gen_format.c: what responses_fmt.c shares with it (req->mu held): a JSON string of
 * n bytes (invalid UTF-8 as U+FFFD), r->err set when a choice failed or was cut short
 * (1), a chat choice's output fed to its tool-call parser (ch->td), the prompt tokens
 * the prefix cache restored */
json_t *fmt_str(const char *s, size_t n);
int fmt_check_failure(srv_req *r);
int fmt_tool_feed(srv_req *r, srv_choice *ch, const char *text, size_t len, int final);
int fmt_cached_tokens(const srv_req *r);

/* responses_fmt.c: the one choice of a /v1/responses request as a Response (NULL with
 * r->err on failure) or as its typed SSE events (MHD threads, req->mu held) */
json_t *responses_format_full(srv_req *r);
int responses_format_stream(srv_req *r, int *all_done);
void responses_free(srv_req *r); /* what r holds for it (req_free) */

/* gen_format.c: OpenAI JSON of outputs (MHD threads, req->mu held) */
int gen_format_stream(srv_req *r, int *all_done);
json_t *gen_format_full(srv_req *r);
void gen_take_all(srv_req *r);
/* The SSE reader has nothing to send (r->mu held): appends a keep-alive comment the
 * loop asked for, or the error of a request that failed in the queue after its
 * headers went out early. Returns 1 when it appended something. */
int gen_format_sse_idle_locked(srv_req *r);

/* gen.c: a request from the connection's side: created with the body an MHD thread
 * read, handed to the loop for preparation, answered when resumed (MHD threads) */
/* Takes the body (moved out of *body), suspends c and posts the request to the loop
 * for preparation. *out is the connection's reference. */
enum MHD_Result gen_start(srv *S, struct MHD_Connection *c, int job, strbuf *body, int http11,
                          srv_req **out);
enum MHD_Result gen_resume(srv_req *r, struct MHD_Connection *c);
void gen_connection_closed(srv_req *r);

/* http.c: the libmicrohttpd daemon, routing (MHD threads) */
int http_start(srv *S, strata_err *err);

#endif
