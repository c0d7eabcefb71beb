/* openai_error.c - errors as the OpenAI API returns them: the status, type, param and
 * message of an error, made from a message or from a STRATA_E* code, and its JSON. */
#include <stdarg.h>
#include <stdio.h>

#include "server/openai.h"

int openai_error_set(openai_error *e, int status, const char *type, const char *param,
                     const char *code, const char *fmt, ...) {
    va_list ap;
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -status;
}

void openai_error_from_strata(openai_error *e, const strata_err *err, const char *param) {
    static const struct {
        int code, status;
        const char *type;
    } map[] = {
        {STRATA_ENOMEM, 503, "server_error"},
        {STRATA_EIO, 500, "server_error"},
        {STRATA_EFORMAT, 400, "invalid_request_error"},
        {STRATA_EUNSUPPORTED, 400, "invalid_request_error"},
        {STRATA_EINVALID, 400, "invalid_request_error"},
        {STRATA_ENOTFOUND, 404, "not_found_error"},
        {STRATA_ERANGE, 400, "invalid_request_error"},
        {STRATA_EBUSY, 429, "rate_limit_error"},
        {STRATA_ESTATE, 503, "unavailable_error"},
        {STRATA_EDEVICE, 500, "server_error"},
        {STRATA_ENETWORK, 502, "server_error"},
        {STRATA_EAUTH, 401, "authentication_error"},
        {STRATA_ECANCELLED, 499, "cancelled"},
    };
    int status = 500;
    const char *type = "server_error";
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].code == err->code) status = map[i].status, type = map[i].type;
    openai_error_set(e, status, type, param,
                     err->code == STRATA_ERANGE ? "context_length_exceeded" : NULL, "%s",
                     err->msg[0] ? err->msg : strata_err_name(err->code));
}

json_t *openai_error_json(const openai_error *e) {
    json_t *o = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", e->message, "type",
                          e->type ? e->type : "server_error", "param",
                          e->param[0] ? json_string(e->param) : json_null(), "code",
                          e->code ? json_string(e->code) : json_null());
    if (!o) {
        /* message not valid UTF-8 (it quoted input): send it escaped-free */
        o = json_pack("{s:{s:s, s:s, s:n, s:n}}", "error", "message", "invalid request", "type",
                      e->type ? e->type : "server_error", "param", "code");
    }
    return o;
}
