/* respond.c - queueing an answer on a connection: JSON, text, the OpenAI error object,
 * and an error after which the connection must close; each with the CORS headers its
 * request's origin gets (http_cors.c). MHD threads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

enum MHD_Result http_respond_text(struct MHD_Connection *c, int status, const char *type,
                                  const char *body, size_t len) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 429 || status == 503) MHD_add_response_header(resp, "Retry-After", "1");
    cors_add_headers(c, resp);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return rc;
}

enum MHD_Result http_respond_json(struct MHD_Connection *c, int status, json_t *body) {
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s) return MHD_NO;
    enum MHD_Result rc = http_respond_text(c, status, "application/json", s, strlen(s));
    free(s);
    return rc;
}

enum MHD_Result http_respond_error(struct MHD_Connection *c, const openai_error *e) {
    return http_respond_json(c, e->status, openai_error_json(e));
}

/* The OpenAI error object with one more header: Allow on a 405, Connection: close after
 * an error whose request body was not read. */
enum MHD_Result http_respond_error_hdr(struct MHD_Connection *c, const openai_error *e,
                                       const char *name, const char *value) {
    json_t *j = openai_error_json(e);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) return MHD_NO;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    if (!resp) return free(s), MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(resp, name, value);
    if (e->status == 429 || e->status == 503) MHD_add_response_header(resp, "Retry-After", "1");
    cors_add_headers(c, resp);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)e->status, resp);
    MHD_destroy_response(resp);
    return rc;
}

/* An error after which the connection must not be reused: its body was not read
 * (so its bytes cannot be told from the next request's), or its framing was bad. */
enum MHD_Result http_respond_error_close(struct MHD_Connection *c, int status, const char *type,
                                         const char *code, const char *msg) {
    openai_error e;
    openai_error_set(&e, status, type, NULL, code, "%s", msg);
    return http_respond_error_hdr(c, &e, MHD_HTTP_HEADER_CONNECTION, "close");
}
