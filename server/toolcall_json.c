/* toolcall_json.c - the JSON pieces tool-call arguments are written with.
 *
 * An argument the schema says is a number, object or array is copied into the arguments
 * as the model wrote it once it is checked to be JSON, so it keeps its exact digits
 * (jansson would print 0.1 as 0.10000000000000001) and the check allocates nothing (a
 * parse that fails halfway through an allocation cannot go wrong either). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/toolcall_internal.h"

#define JSON_DEPTH_MAX 128

typedef struct jscan {
    const char *s;
    size_t n, i;
} jscan;

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static void js_ws(jscan *j) {
    while (j->i < j->n && is_ws(j->s[j->i])) j->i++;
}

static int js_digits(jscan *j) {
    size_t at = j->i;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') j->i++;
    return j->i > at;
}

/* Whether jansson reads the number s[0..n) back: the server does when a client returns a
 * call's arguments (server/openai_tools.c), and jansson refuses an integer past 64 bits
 * or a number past double's range where Python would not, so such a number is not taken
 * as one (an argument holding it stays a string). */
static int js_in_range(const char *s, size_t n, int integral) {
    char buf[64];
    if (n >= sizeof buf) return 0;
    memcpy(buf, s, n);
    buf[n] = 0;
    errno = 0;
    if (integral) return strtoll(buf, NULL, 10), errno != ERANGE;
    return isfinite(strtod(buf, NULL));
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int js_number(jscan *j, int *integral) {
    size_t at = j->i;
    *integral = 1;
    if (j->i < j->n && j->s[j->i] == '-') j->i++;
    if (j->i < j->n && j->s[j->i] == '0') j->i++;
    else if (!js_digits(j)) return 0;
    if (j->i < j->n && j->s[j->i] == '.') {
        j->i++;
        if (!js_digits(j)) return 0;
        *integral = 0;
    }
    if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
        j->i++;
        if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-')) j->i++;
        if (!js_digits(j)) return 0;
        *integral = 0;
    }
    return js_in_range(j->s + at, j->i - at, *integral);
}

static int js_hex4(jscan *j) {
    for (int k = 0; k < 4; k++, j->i++)
        if (j->i >= j->n || !strchr("0123456789abcdefABCDEF", j->s[j->i]) || !j->s[j->i]) return 0;
    return 1;
}

/* A string from its opening quote; control characters must be escaped. */
static int js_string(jscan *j) {
    j->i++;
    while (j->i < j->n) {
        unsigned char ch = (unsigned char)j->s[j->i++];
        if (ch == '"') return 1;
        if (ch < 0x20) return 0;
        if (ch != '\\') continue;
        if (j->i >= j->n) return 0;
        ch = (unsigned char)j->s[j->i++];
        if (ch == 'u') {
            if (!js_hex4(j)) return 0;
        } else if (!strchr("\"\\/bfnrt", ch) || !ch) {
            return 0;
        }
    }
    return 0;
}

static int js_lit(jscan *j, const char *lit) {
    size_t k = strlen(lit);
    if (j->n - j->i < k || memcmp(j->s + j->i, lit, k)) return 0;
    j->i += k;
    return 1;
}

static int js_value(jscan *j, int depth);

/* An object or array from its opening bracket. */
static int js_container(jscan *j, int depth) {
    char close = j->s[j->i] == '{' ? '}' : ']';
    if (depth >= JSON_DEPTH_MAX) return 0;
    j->i++;
    js_ws(j);
    if (j->i < j->n && j->s[j->i] == close) return j->i++, 1;
    for (;;) {
        if (close == '}') {
            if (j->i >= j->n || j->s[j->i] != '"' || !js_string(j)) return 0;
            js_ws(j);
            if (j->i >= j->n || j->s[j->i] != ':') return 0;
            j->i++;
        }
        if (!js_value(j, depth + 1)) return 0;
        js_ws(j);
        if (j->i >= j->n) return 0;
        char ch = j->s[j->i++];
        if (ch == close) return 1;
        if (ch != ',') return 0;
        js_ws(j);
    }
}

static int js_value(jscan *j, int depth) {
    int integral;
    js_ws(j);
    if (j->i >= j->n) return 0;
    switch (j->s[j->i]) {
    case '{':
    case '[': return js_container(j, depth);
    case '"': return js_string(j);
    case 't': return js_lit(j, "true");
    case 'f': return js_lit(j, "false");
    case 'n': return js_lit(j, "null");
    default: return js_number(j, &integral);
    }
}

int toolcall_json_valid(const char *s, size_t n) {
    jscan j = {s, n, 0};
    if (!js_value(&j, 0)) return 0;
    js_ws(&j);
    return j.i == n;
}

int toolcall_json_number(const char *s, size_t n, int *integral) {
    jscan j = {s, n, 0};
    int in = 1;
    if (!js_number(&j, &in) || j.i != n) return 0;
    *integral = in;
    return 1;
}

int toolcall_json_add_string(strbuf *b, const char *s, size_t n) {
    int rc = strbuf_reserve(b, n + 2);
    if (rc) return rc;
    rc = strbuf_addc(b, '"');
    for (size_t k = 0; k < n && !rc; k++) {
        size_t run = k;
        /* copy the run that needs no escape in one go */
        while (run < n && (unsigned char)s[run] >= 0x20 && s[run] != '"' && s[run] != '\\') run++;
        if (run > k) {
            rc = strbuf_add(b, s + k, run - k);
            k = run;
            if (k >= n || rc) break;
        }
        unsigned char ch = (unsigned char)s[k];
        switch (ch) {
        case '"': rc = strbuf_add(b, "\\\"", 2); break;
        case '\\': rc = strbuf_add(b, "\\\\", 2); break;
        case '\n': rc = strbuf_add(b, "\\n", 2); break;
        case '\r': rc = strbuf_add(b, "\\r", 2); break;
        case '\t': rc = strbuf_add(b, "\\t", 2); break;
        case '\b': rc = strbuf_add(b, "\\b", 2); break;
        case '\f': rc = strbuf_add(b, "\\f", 2); break;
        default: rc = strbuf_addf(b, "\\u%04x", ch); break;
        }
    }
    return rc ? rc : strbuf_addc(b, '"');
}

const char *toolcall_json_trim(const char *s, size_t *n) {
    size_t a = 0, b = *n;
    while (a < b && is_ws(s[a])) a++;
    while (b > a && is_ws(s[b - 1])) b--;
    *n = b - a;
    return s + a;
}

/* The end of the JSON value starting at s[i] (valid JSON: no checks), iteratively. */
static size_t json_skip(const char *s, size_t n, size_t i) {
    int depth = 0;
    do {
        char c = s[i];
        if (c == '"') {
            for (i++; i < n && s[i] != '"'; i++)
                if (s[i] == '\\') i++;
            i++;
        } else if (c == '{' || c == '[') {
            depth++, i++;
        } else if (c == '}' || c == ']') {
            depth--, i++;
        } else if (c == ',' || c == ':' || c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            i++;
        } else {
            while (i < n && !strchr(",:}] \t\r\n", s[i])) i++;
        }
    } while (depth > 0 && i < n);
    return i;
}

static size_t json_ws(const char *s, size_t n, size_t i) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
    return i;
}

/* 1 when the object at s[o] has two members whose keys are written alike. */
static int json_object_dup(const char *s, size_t n, size_t o) {
    for (size_t k = json_ws(s, n, o + 1); k < n && s[k] == '"';) {
        size_t kend = json_skip(s, n, k);
        for (size_t j = json_ws(s, n, o + 1); j < k;) { /* the members before this one */
            size_t jend = json_skip(s, n, j);
            if (jend - j == kend - k && !memcmp(s + j, s + k, kend - k)) return 1;
            j = json_ws(s, n, json_skip(s, n, json_ws(s, n, json_ws(s, n, jend) + 1)));
            j = j < n && s[j] == ',' ? json_ws(s, n, j + 1) : n;
        }
        k = json_ws(s, n, json_skip(s, n, json_ws(s, n, json_ws(s, n, kend) + 1)));
        k = k < n && s[k] == ',' ? json_ws(s, n, k + 1) : n;
    }
    return 0;
}

int toolcall_json_dup_keys(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"') { /* a string: braces inside are text */
            for (i++; i < n && s[i] != '"'; i++)
                if (s[i] == '\\') i++;
        } else if (s[i] == '{' && json_object_dup(s, n, i)) {
            return 1;
        }
    }
    return 0;
}
