/* err.h - error codes and the message buffer every fallible call fills.
 *
 * A function that can fail returns 0 or a negative STRATA_E* code and writes one
 * sentence naming the file, field or tensor into the caller's strata_err. Nothing
 * below main() prints or exits. */
#ifndef STRATA_ERR_H
#define STRATA_ERR_H

#define STRATA_ERR_LIST(X)                                                                         \
    X(OK, 0, "ok")                                                                                 \
    X(NOMEM, -1, "out of memory")                                                                  \
    X(IO, -2, "i/o error")                                                                         \
    X(FORMAT, -3, "malformed input")                                                               \
    X(UNSUPPORTED, -4, "unsupported")                                                              \
    X(INVALID, -5, "invalid argument")                                                             \
    X(NOTFOUND, -6, "not found")                                                                   \
    X(RANGE, -7, "out of range")                                                                   \
    X(BUSY, -8, "busy")                                                                            \
    X(STATE, -9, "wrong state")                                                                    \
    X(DEVICE, -10, "device error")                                                                 \
    X(NETWORK, -11, "network error")                                                               \
    X(AUTH, -12, "not authorised")                                                                 \
    X(CANCELLED, -13, "cancelled")

enum {
#define STRATA_ERR_ENUM(name, code, text) STRATA_E##name = code,
    STRATA_ERR_LIST(STRATA_ERR_ENUM)
#undef STRATA_ERR_ENUM
};

typedef struct strata_err {
    int code;
    char msg[512];
} strata_err;

/* Formats the message into e (when e is not NULL) and returns code, so a caller
 * can write `return strata_err_set(err, STRATA_EFORMAT, "%s: ...", path);`. */
int strata_err_set(strata_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes an existing message with more context ("loading X: " + old message). */
int strata_err_wrap(strata_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Short name of a code ("out of memory"); never NULL. */
const char *strata_err_name(int code);

#endif
