/* http_cors.c - CORS, so that a browser page served from another origin may call the
 * API (--allowed-origins: a list of origins, or "*"; none by default, and then no CORS
 * header is ever sent and browsers keep other origins' pages out).
 *
 * A request whose Origin is allowed gets Access-Control-Allow-Origin on every answer
 * (JSON, errors, SSE streams): its own origin echoed with Vary: Origin (caches must
 * keep one copy per origin), or "*" under the wildcard. No credentials header is ever
 * sent: the API key travels in Authorization, which needs no cookies, and "*" would
 * forbid them anyway. A browser sends a preflight (OPTIONS with
 * Access-Control-Request-Method) before a request with Authorization or a JSON
 * Content-Type; the preflight carries no credentials, so it is answered before the API
 * key check, and the real request that follows is checked as usual. A request from an
 * origin not on the list gets no CORS header (a preflight gets a 403): the browser
 * withholds the answer from the page. Thread: MHD threads. */
#include <string.h>
#include <strings.h>

#include "server/server_internal.h"

#define CORS_METHODS "GET, POST, OPTIONS"
#define CORS_BASE_HEADERS "Authorization, Content-Type"
#define CORS_MAX_AGE "600" /* seconds a browser may reuse a preflight's answer */
#define CORS_MAX_REQUESTED 512

static const char *cors_origin(struct MHD_Connection *c) {
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
}

int cors_mode(const srv *S, struct MHD_Connection *c) {
    const config_list *allowed = &S->cfg->allowed_origins;
    const char *o = allowed->n ? cors_origin(c) : NULL;
    if (!o || !*o) return CORS_NONE;
    for (int i = 0; i < allowed->n; i++) {
        if (!strcmp(allowed->v[i], "*")) return CORS_ANY;
        /* scheme and host are case-insensitive; browsers send them in lower case */
        if (!strcasecmp(allowed->v[i], o)) return CORS_ORIGIN;
    }
    return CORS_NONE;
}

int cors_is_preflight(const srv *S, struct MHD_Connection *c, const char *method) {
    return S->cfg->allowed_origins.n && !strcmp(method, "OPTIONS") && cors_origin(c) &&
           MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method");
}

void cors_add_headers(struct MHD_Connection *c, struct MHD_Response *resp) {
    int mode = guard_cors(c);
    const char *o = cors_origin(c);
    if (mode == CORS_NONE || !o) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", mode == CORS_ANY ? "*" : o);
    MHD_add_response_header(resp, "Vary", "Origin");
}

/* The requested header names, if they are a plain comma list of tokens short enough
 * to echo; NULL otherwise (then only the base headers are allowed). */
static const char *cors_requested_headers(struct MHD_Connection *c) {
    const char *h =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    if (!h || !*h || strlen(h) > CORS_MAX_REQUESTED) return NULL;
    for (const char *p = h; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_., ", *p))
            return NULL;
    return h;
}

enum MHD_Result cors_preflight(struct MHD_Connection *c) {
    char allow[sizeof CORS_BASE_HEADERS + 2 + CORS_MAX_REQUESTED];
    const char *req = cors_requested_headers(c);
    strcpy(allow, CORS_BASE_HEADERS);
    if (req) strcat(strcat(allow, ", "), req);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    cors_add_headers(c, resp);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", CORS_METHODS);
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", allow);
    MHD_add_response_header(resp, "Access-Control-Max-Age", CORS_MAX_AGE);
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, resp);
    MHD_destroy_response(resp);
    return rc;
}
