/* err.c - the strata_err message buffer. */
#include "engine/base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int strata_err_set(strata_err *e, int code, const char *fmt, ...) {
    if (!e) return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->code = code;
    return code;
}

int strata_err_wrap(strata_err *e, const char *fmt, ...) {
    if (!e) return STRATA_EINVALID;
    char prefix[256], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    /* Truncation is acceptable: the message is for people, its start matters most. */
    size_t n = strnlen(prefix, sizeof e->msg - 1);
    memcpy(e->msg, prefix, n);
    size_t rest = strnlen(old, sizeof old);
    if (rest > sizeof e->msg - 1 - n) rest = sizeof e->msg - 1 - n;
    memcpy(e->msg + n, old, rest);
    e->msg[n + rest] = 0;
    return e->code;
}

const char *strata_err_name(int code) {
    switch (code) {
#define STRATA_ERR_CASE(name, c, text)                                                             \
    case c: return text;
        STRATA_ERR_LIST(STRATA_ERR_CASE)
#undef STRATA_ERR_CASE
    }
    return "unknown error";
}
