/* http.c - the libmicrohttpd daemon: bodies, limits, auth and routing.
 *
 * MHD runs its own polling threads (a pool of --http-threads) with suspend/resume
 * enabled. The request's framing is checked first (http_guard.c: one Content-Length,
 * not both it and Transfer-Encoding), a request body is collected up to
 * --max-body-bytes (413 past it, refused from Content-Length before reading when
 * possible), the API key is checked in constant time (against every key), and the
 * route table sends the request on; a path not in it is a 404 that lists the routes,
 * and a CORS preflight is answered before the key check (http_cors.c). Every error
 * leaves as the OpenAI error object. Generation, tokenize and detokenize requests are
 * handed to gen.c, which suspends the connection while a worker prepares them and
 * until the engine has output; what a silent SSE stream sends meanwhile
 * (gen_format_sse_idle_locked) is here. Thread: MHD threads. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/chat_page.h"
#include "server/server_internal.h"

typedef struct srv_conn {
    strbuf body;
    int too_big;
    srv_req *req; /* generation request, once started */
} srv_conn;

static enum MHD_Result http_error(struct MHD_Connection *c, int status, const char *type,
                                  const char *code, const char *msg) {
    openai_error e;
    openai_error_set(&e, status, type, NULL, code, "%s", msg);
    return http_respond_error(c, &e);
}

/* 0 when the hl bytes at h equal key, in time that depends only on hl. */
static unsigned http_key_diff(const char *h, size_t hl, const char *key) {
    size_t kl = strlen(key);
    if (!kl) return 1; /* config_check refuses empty keys */
    volatile unsigned char diff = (unsigned char)(hl != kl);
    for (size_t i = 0; i < hl; i++) diff |= (unsigned char)(h[i] ^ key[i % kl]);
    return diff;
}

/* Compares the Authorization header with "Bearer KEY" for every key (--api-key,
 * --api-key-file), never stopping at a match, so the time depends only on the
 * header's length and the number of keys, and no key can be found byte by byte. */
static int http_auth_ok(const srv *S, struct MHD_Connection *c) {
    const config_list *keys = &S->cfg->api_key;
    if (!keys->n) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return 0;
    h += 7;
    size_t hl = strlen(h);
    unsigned ok = 0;
    for (int i = 0; i < keys->n; i++) ok |= http_key_diff(h, hl, keys->v[i]) == 0;
    return ok != 0;
}

enum {
    R_HEALTH,
    R_MODELS,
    R_MODEL,
    R_METRICS,
    R_OPENAPI,
    R_COMPLETIONS,
    R_CHAT,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_CHAT_PAGE,
    R_RESPONSES,
    R_RESPONSE,
    R_NONE
};

static const struct {
    const char *path;
    const char *method;
    int auth;
} http_routes[] = {
    [R_HEALTH] = {"/health", "GET", 0},
    [R_MODELS] = {"/v1/models", "GET", 1},
    [R_MODEL] = {"/v1/models/", "GET", 1}, /* prefix */
    [R_METRICS] = {"/metrics", "GET", 0},
    [R_OPENAPI] = {"/openapi.json", "GET", 0},
    [R_COMPLETIONS] = {"/v1/completions", "POST", 1},
    [R_CHAT] = {"/v1/chat/completions", "POST", 1},
    [R_TOKENIZE] = {"/tokenize", "POST", 1},
    [R_DETOKENIZE] = {"/detokenize", "POST", 1},
    [R_RESPONSES] = {"/v1/responses", "POST", 1},
    [R_RESPONSE] = {"/v1/responses/", "GET", 1}, /* prefix; nothing is stored: a 404 */
    [R_CHAT_PAGE] = {"/", "GET", 0},
};

static int http_find_route(const char *url) {
    for (int i = 0; i < R_NONE; i++) {
        if (i == R_MODEL || i == R_RESPONSE) {
            if (!strncmp(url, http_routes[i].path, strlen(http_routes[i].path)) &&
                url[strlen(http_routes[i].path)])
                return i;
        } else if (!strcmp(url, http_routes[i].path)) {
            return i;
        }
    }
    return R_NONE;
}

/* The 404 of a path strata does not serve (an OpenAI route it lacks, such as
 * /v1/embeddings, or a typo), naming the routes it does serve, so a client written
 * for a larger server learns what is there rather than just "not found". */
static enum MHD_Result http_not_served(struct MHD_Connection *c, const char *method,
                                       const char *url) {
    char msg[512]; /* openai_error's message */
    int n =
        snprintf(msg, sizeof msg, "%.16s %.160s is not served here; the routes are:", method, url);
    for (int i = 0; i < R_NONE && n > 0 && (size_t)n < sizeof msg; i++)
        n += snprintf(msg + n, sizeof msg - (size_t)n, "%s %s %s%s", i ? "," : "",
                      http_routes[i].method, http_routes[i].path,
                      i == R_MODEL      ? "{model}"
                      : i == R_RESPONSE ? "{id}"
                                        : "");
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f) *p = '?';
    return http_error(c, 404, "not_found_error", "route_not_found", msg);
}

static enum MHD_Result http_dispatch(srv *S, struct MHD_Connection *c, srv_conn *sc,
                                     const char *url, const char *method, const char *version) {
    int r = http_find_route(url);
    if (r == R_NONE) return http_not_served(c, method, url);
    /* a browser's preflight carries no key: answered before the key check */
    if (cors_is_preflight(S, c, method)) {
        if (guard_cors(c) != CORS_NONE) return cors_preflight(c);
        return http_error(c, 403, "permission_error", "origin_not_allowed",
                          "This origin may not call the API (--allowed-origins)");
    }
    int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (r != R_RESPONSE && !(is_get && !strcmp(http_routes[r].method, "GET")) &&
        strcmp(method, http_routes[r].method)) {
        openai_error e;
        openai_error_set(&e, 405, "invalid_request_error", NULL, "method_not_allowed",
                         "Method %.16s is not allowed on %s; use %s", method, http_routes[r].path,
                         http_routes[r].method);
        return http_respond_error_hdr(c, &e, MHD_HTTP_HEADER_ALLOW, http_routes[r].method);
    }
    /* a connection taken beyond --max-connections serves the probes only */
    if (guard_is_reserve(c) && r != R_HEALTH && r != R_METRICS)
        return http_respond_error_close(
            c, 503, "unavailable_error", NULL,
            "Too many open connections (--max-connections); retry later");
    int auth = http_routes[r].auth || (r == R_METRICS && S->cfg->metrics_auth);
    if (auth && !http_auth_ok(S, c))
        return http_error(c, 401, "authentication_error", "invalid_api_key",
                          "Incorrect or missing API key; send 'Authorization: Bearer <key>'");
    switch (r) {
    case R_HEALTH: return route_health(S, c);
    case R_METRICS: return route_metrics(S, c);
    case R_OPENAPI: return route_openapi(S, c);
    case R_RESPONSE: /* GET, DELETE, POST .../cancel of a stored response */
        return http_error(c, 404, "not_found_error", "response_not_found",
                          "Responses are not stored here (store is always false), so none "
                          "can be retrieved, cancelled or deleted");
    case R_CHAT_PAGE: return route_chat_page(c);
    default: break;
    }
    /* the rest needs the model */
    int st = atomic_load(&S->state);
    if (st == SRV_LOADING) return http_error(c, 503, "unavailable_error", NULL, "Loading model");
    if (st == SRV_FAILED)
        return http_error(c, 503, "unavailable_error", NULL, "The model failed to load");
    int http11 = !strcmp(version, MHD_HTTP_VERSION_1_1);
    switch (r) {
    case R_MODELS: return route_models(S, c, NULL);
    case R_MODEL: return route_models(S, c, url + strlen(http_routes[R_MODEL].path));
    case R_TOKENIZE: return gen_start(S, c, SRV_JOB_TOKENIZE, &sc->body, http11, &sc->req);
    case R_DETOKENIZE: return gen_start(S, c, SRV_JOB_DETOKENIZE, &sc->body, http11, &sc->req);
    default: break;
    }
    if (st == SRV_DRAINING)
        return http_error(c, 503, "unavailable_error", NULL, "The server is shutting down");
    int job = r == R_CHAT        ? SRV_JOB_CHAT
              : r == R_RESPONSES ? SRV_JOB_RESPONSES
                                 : SRV_JOB_COMPLETION;
    return gen_start(S, c, job, &sc->body, http11, &sc->req);
}

static enum MHD_Result http_access(void *cls, struct MHD_Connection *c, const char *url,
                                   const char *method, const char *version, const char *upload_data,
                                   size_t *upload_data_size, void **con_cls) {
    srv *S = cls;
    srv_conn *sc = *con_cls;
    if (!sc) {
        if (!(sc = calloc(1, sizeof *sc))) return MHD_NO;
        *con_cls = sc;
        guard_set_cors(c, cors_mode(S, c)); /* before any answer, early errors included */
        char msg[160];
        if (guard_check_framing(c, msg, sizeof msg)) {
            guard_request_received(S, c);
            return http_respond_error_close(c, 400, "invalid_request_error", "bad_framing", msg);
        }
        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > (unsigned long long)S->cfg->max_body_bytes) {
            sc->too_big = 1;
            guard_request_received(S, c);
            snprintf(msg, sizeof msg, "Request body over the limit of %lld bytes",
                     S->cfg->max_body_bytes);
            return http_respond_error_close(c, 413, "invalid_request_error", "request_too_large",
                                            msg);
        }
        return MHD_YES;
    }
    if (sc->req) return gen_resume(sc->req, c);
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (sc->too_big || sc->body.len + n > (size_t)S->cfg->max_body_bytes) {
            sc->too_big = 1;
            strbuf_free(&sc->body);
            /* a chunked upload far past the limit is not worth reading to its end */
            return MHD_YES;
        }
        return strbuf_add(&sc->body, upload_data, n) ? MHD_NO : MHD_YES;
    }
    guard_request_received(S, c);
    if (sc->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "Request body over the limit of %lld bytes",
                 S->cfg->max_body_bytes);
        return http_respond_error_close(c, 413, "invalid_request_error", "request_too_large", msg);
    }
    return http_dispatch(S, c, sc, url, method, version);
}

static void http_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                           enum MHD_RequestTerminationCode toe) {
    srv_conn *sc = *con_cls;
    (void)toe;
    guard_request_done(cls, c);
    if (!sc) return;
    if (sc->req) {
        gen_connection_closed(sc->req);
        req_unref(sc->req);
    }
    strbuf_free(&sc->body);
    free(sc);
    *con_cls = NULL;
}

static void http_log(void *cls, const char *fmt, va_list ap) {
    (void)cls, (void)fmt, (void)ap; /* MHD's own messages are not useful to operators */
}

int http_start(srv *S, strata_err *err) {
    const config *cfg = S->cfg;
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)cfg->port);
    if (inet_pton(AF_INET, cfg->host, &addr.sin_addr) != 1)
        return strata_err_set(err, STRATA_EINVALID, "--host '%s' is not an IPv4 address",
                              cfg->host);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_EPOLL |
                     MHD_USE_ERROR_LOG;
    /* MHD's own limit leaves room for the reserve that keeps /health answering when
     * --max-connections are taken (http_guard.c refuses the rest there) */
    S->mhd = MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, http_access, S, MHD_OPTION_SOCK_ADDR, &addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->http_threads, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(cfg->max_connections + SRV_RESERVE_CONNS), MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)cfg->max_connections_per_ip, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)cfg->idle_timeout, MHD_OPTION_NOTIFY_COMPLETED, http_completed, S,
        MHD_OPTION_NOTIFY_CONNECTION, guard_on_connection, S, MHD_OPTION_URI_LOG_CALLBACK,
        guard_on_request_line, S, MHD_OPTION_EXTERNAL_LOGGER, http_log, S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024, MHD_OPTION_END);
    if (!S->mhd)
        return strata_err_set(err, STRATA_EIO,
                              "cannot listen on %s:%lld (in use, or no permission)", cfg->host,
                              cfg->port);
    return 0;
}
