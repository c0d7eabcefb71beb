/* http_guard.c - what keeps one client from holding the daemon: a deadline for
 * receiving each request, a reserve of connections for the probes, and the framing
 * checks of RFC 9112.
 *
 * MHD's idle timeout restarts with every byte, so a client that sends its head one
 * byte every few seconds (slowloris) would keep a connection for ever, and a few
 * dozen such clients exhaust --max-connections. Here every connection has a
 * deadline: its first request line, head and body must arrive within
 * --header-timeout of the connection's start; each later request's within
 * --header-timeout of its request line (and its request line within --idle-timeout
 * plus that of the previous answer). The loop thread sweeps the deadlines four
 * times a second; a connection past its deadline gets a 408 and is shut down, and
 * MHD then closes it. Connections are tracked from MHD's start / close
 * notifications under guard_mu, and the close notification comes before MHD closes
 * the socket, so the sweep never touches a descriptor that was reused.
 *
 * MHD accepts SRV_RESERVE_CONNS connections beyond --max-connections; those serve
 * /health and /metrics only and get a short deadline, so a probe still answers when
 * the pool is full. --max-connections-per-ip caps one address (MHD enforces it).
 * The record also carries the current request's CORS answer (http_cors.c), since
 * the respond functions are handed only the connection.
 * Thread: MHD threads, the sweep on the loop thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "server/server_internal.h"

/* seconds a reserve connection has to send its request (or --header-timeout if less) */
#define GUARD_RESERVE_SECONDS 2.0
#define GUARD_SWEEP_MS 250

struct guard_conn {
    int fd;
    int in_head; /* a request (or the wait for one) is being received */
    int reserve;
    double deadline; /* strata_now() seconds, while in_head */
    int cors;        /* CORS_* of the current request (its MHD thread only) */
    guard_conn *prev, *next;
};

static double guard_limit(const srv *S, const guard_conn *g) {
    double t = (double)S->cfg->header_timeout;
    return g->reserve && GUARD_RESERVE_SECONDS < t ? GUARD_RESERVE_SECONDS : t;
}

static guard_conn *guard_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void guard_init(srv *S) {
    pthread_mutex_init(&S->guard_mu, NULL);
    S->guard_head = NULL;
    S->n_conns = 0;
}

void guard_deinit(srv *S) {
    /* MHD is stopped: every close notification has come */
    pthread_mutex_destroy(&S->guard_mu);
}

void guard_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                         enum MHD_ConnectionNotificationCode code) {
    srv *S = cls;
    guard_conn *g = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!(g = calloc(1, sizeof *g))) return; /* untracked: MHD's idle timeout still applies */
        g->fd = ci ? ci->connect_fd : -1;
        g->in_head = 1;
        pthread_mutex_lock(&S->guard_mu);
        g->reserve = S->n_conns >= S->cfg->max_connections;
        g->deadline = strata_now() + guard_limit(S, g);
        S->n_conns++;
        g->next = S->guard_head;
        if (S->guard_head) S->guard_head->prev = g;
        S->guard_head = g;
        pthread_mutex_unlock(&S->guard_mu);
        *socket_context = g;
        return;
    }
    if (!g) return;
    pthread_mutex_lock(&S->guard_mu);
    if (g->prev) g->prev->next = g->next;
    else S->guard_head = g->next;
    if (g->next) g->next->prev = g->prev;
    S->n_conns--;
    pthread_mutex_unlock(&S->guard_mu);
    free(g);
    *socket_context = NULL;
}

void *guard_on_request_line(void *cls, const char *uri, struct MHD_Connection *c) {
    srv *S = cls;
    guard_conn *g = guard_of(c);
    (void)uri;
    if (g) {
        pthread_mutex_lock(&S->guard_mu);
        double d = strata_now() + guard_limit(S, g);
        /* the first request's clock started with the connection */
        if (!g->in_head || d < g->deadline) g->deadline = d;
        g->in_head = 1;
        pthread_mutex_unlock(&S->guard_mu);
    }
    return NULL; /* the access handler's first call sees no request state yet */
}

void guard_request_received(srv *S, struct MHD_Connection *c) {
    guard_conn *g = guard_of(c);
    if (!g) return;
    pthread_mutex_lock(&S->guard_mu);
    g->in_head = 0;
    pthread_mutex_unlock(&S->guard_mu);
}

void guard_request_done(srv *S, struct MHD_Connection *c) {
    guard_conn *g = guard_of(c);
    if (!g) return;
    pthread_mutex_lock(&S->guard_mu);
    /* a kept-alive connection may idle for --idle-timeout (MHD's timer), then its
     * next request line must come at the usual pace */
    g->in_head = 1;
    g->deadline = strata_now() + (double)S->cfg->idle_timeout + guard_limit(S, g);
    pthread_mutex_unlock(&S->guard_mu);
}

int guard_is_reserve(struct MHD_Connection *c) {
    guard_conn *g = guard_of(c);
    return g && g->reserve; /* set before MHD hands the connection to us, never changed */
}

void guard_set_cors(struct MHD_Connection *c, int mode) {
    guard_conn *g = guard_of(c);
    if (g) g->cors = mode; /* untracked: no CORS headers, the browser refuses the answer */
}

int guard_cors(struct MHD_Connection *c) {
    guard_conn *g = guard_of(c);
    return g ? g->cors : CORS_NONE;
}

#define GUARD_408_BODY                                                                             \
    "{\"error\":{\"message\":\"The request was not received in time (--header-timeout)\","         \
    "\"type\":\"timeout_error\",\"param\":null,\"code\":null}}"

/* Loop thread. */
static void guard_sweep(uv_timer_t *t) {
    char resp[384];
    int n = snprintf(resp, sizeof resp,
                     "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     sizeof GUARD_408_BODY - 1, GUARD_408_BODY);
    srv *S = t->data;
    double now = strata_now();
    pthread_mutex_lock(&S->guard_mu);
    for (guard_conn *g = S->guard_head; g; g = g->next) {
        if (!g->in_head || now < g->deadline || g->fd < 0) continue;
        g->in_head = 0;
        /* MHD is reading this connection and writes nothing before the request is
         * complete: the answer cannot interleave with one of its own */
        (void)!send(g->fd, resp, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
        shutdown(g->fd, SHUT_RDWR); /* MHD sees the end and closes it */
        atomic_fetch_add(&S->n_head_timeouts, 1);
    }
    pthread_mutex_unlock(&S->guard_mu);
}

int guard_start(srv *S, strata_err *err) {
    S->guard_timer.data = S;
    if (uv_timer_init(&S->loop, &S->guard_timer) ||
        uv_timer_start(&S->guard_timer, guard_sweep, GUARD_SWEEP_MS, GUARD_SWEEP_MS))
        return strata_err_set(err, STRATA_EIO, "libuv timer init failed");
    uv_unref((uv_handle_t *)&S->guard_timer); /* the sweep alone keeps no loop alive */
    return 0;
}

/* Collects what a header iteration saw. */
typedef struct framing {
    int n_length, bad_length, n_te;
    unsigned long long length;
    int conflict;
} framing;

static enum MHD_Result guard_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value) {
    framing *f = cls;
    (void)kind;
    if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) f->n_te++;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) return MHD_YES;
    /* a comma list of equal values is one value (RFC 9110 8.6); anything else is bad */
    const char *p = value ? value : "";
    do {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        if (*p < '0' || *p > '9') {
            f->bad_length = 1;
            break;
        }
        unsigned long long x = 0;
        while (*p >= '0' && *p <= '9') {
            if (x > (~0ull - 9) / 10) f->bad_length = 1;
            x = x * 10 + (unsigned)(*p++ - '0');
        }
        while (*p == ' ' || *p == '\t') p++;
        if (*p && *p != ',') f->bad_length = 1;
        if (f->n_length++ && x != f->length) f->conflict = 1;
        f->length = x;
    } while (*p && !f->bad_length);
    return MHD_YES;
}

int guard_check_framing(struct MHD_Connection *c, char *msg, size_t len) {
    framing f;
    memset(&f, 0, sizeof f);
    MHD_get_connection_values(c, MHD_HEADER_KIND, guard_header, &f);
    /* a proxy that reads the other value would frame the next request differently:
     * request smuggling (RFC 9112 6.3) */
    if (f.bad_length) return snprintf(msg, len, "Invalid Content-Length header"), -1;
    if (f.conflict) return snprintf(msg, len, "Conflicting Content-Length headers"), -1;
    if (f.n_te && f.n_length)
        return snprintf(msg, len, "Transfer-Encoding and Content-Length must not both be sent"), -1;
    if (f.n_te > 1) return snprintf(msg, len, "More than one Transfer-Encoding header"), -1;
    return 0;
}
