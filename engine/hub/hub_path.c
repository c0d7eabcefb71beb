/* hub_path.c - the naming rules of the hub and its cache, as pure string functions:
 * repo ids, revisions and file names that may become paths, etags that become blob
 * names, relative symlink targets, URL quoting and origins. Everything that comes from
 * the user or the server passes through here before it touches the file system. */
#include "engine/hub/hub_internal.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hub_path_fmt(char *out, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, len, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= len ? STRATA_ERANGE : 0;
}

static int id_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.'; }
static int word_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* One part of an id: [\w.-]{1,96} between word boundaries, i.e. first and last are \w. */
static const char *check_id_part(const char *p, size_t n) {
    if (n == 0) return "an empty name";
    if (n > 96) return "a name longer than 96 characters";
    for (size_t i = 0; i < n; i++)
        if (!id_char(p[i])) return "a character other than letters, digits, '-', '_' or '.'";
    if (!word_char(p[0]) || !word_char(p[n - 1]))
        return "a name that starts or ends with '-' or '.'";
    return NULL;
}

int hub_path_check_repo_id(const char *id, strata_err *err) {
    const char *why = NULL;
    if (!id || !*id) return strata_err_set(err, STRATA_EINVALID, "empty repo id");
    const char *slash = strchr(id, '/');
    if (slash && strchr(slash + 1, '/')) {
        why = "more than one '/' (expected 'name' or 'namespace/name')";
    } else if (slash) {
        why = check_id_part(id, (size_t)(slash - id));
        if (!why) why = check_id_part(slash + 1, strlen(slash + 1));
    } else {
        why = check_id_part(id, strlen(id));
    }
    size_t n = strlen(id);
    if (!why && (strstr(id, "--") || strstr(id, ".."))) why = "'--' or '..'";
    if (!why && n >= 4 && !strcmp(id + n - 4, ".git")) why = "a '.git' suffix";
    if (why)
        return strata_err_set(err, STRATA_EINVALID, "invalid repo id '%.200s': it has %s", id, why);
    return 0;
}

/* Shared by revisions and file names: both become paths under the cache. */
static int check_rel_path(const char *what, const char *s, size_t max, strata_err *err) {
    const char *why = NULL;
    size_t n = s ? strlen(s) : 0;
    if (n == 0) why = "is empty";
    else if (n > max) why = "is too long";
    else if (s[0] == '/') why = "is an absolute path";
    else if (s[n - 1] == '/') why = "ends with '/'";
    for (size_t i = 0; !why && i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) why = "has a control character";
        else if (c == '\\') why = "has a '\\'";
    }
    /* Each '/'-separated component must be a real name: "", "." and ".." would let the
     * path leave (or alias inside) its directory. */
    for (const char *p = s; !why && p && *p;) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
            why = "has an empty, '.' or '..' component";
        p = e ? e + 1 : NULL;
    }
    if (why)
        return strata_err_set(err, STRATA_EINVALID, "invalid %s '%.200s': it %s", what, s ? s : "",
                              why);
    return 0;
}

int hub_path_check_revision(const char *rev, strata_err *err) {
    return check_rel_path("revision", rev, 255, err);
}

int hub_path_check_file(const char *file, strata_err *err) {
    return check_rel_path("file name", file, 1024, err);
}

static int is_hex_n(const char *s, size_t n) {
    if (!s || strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

int hub_path_is_commit(const char *s) { return is_hex_n(s, HUB_COMMIT_LEN); }
int hub_path_is_sha256(const char *s) { return is_hex_n(s, 64); }

int hub_path_repo_folder(char *out, size_t len, const char *id) {
    const char *slash = strchr(id, '/');
    if (slash) return hub_path_fmt(out, len, "models--%.*s--%s", (int)(slash - id), id, slash + 1);
    return hub_path_fmt(out, len, "models--%s", id);
}

int hub_path_normalize_etag(char *out, size_t len, const char *raw, strata_err *err) {
    if (!raw) return strata_err_set(err, STRATA_EFORMAT, "the response has no ETag");
    /* Python's str.lstrip("W/") removes any run of 'W' and '/' characters, and
     * .strip('"') every leading and trailing quote; the blob name must be the same
     * string huggingface_hub computes, or the two tools would not share blobs. */
    const char *b = raw;
    while (*b == 'W' || *b == '/') b++;
    while (*b == '"') b++;
    const char *e = b + strlen(b);
    while (e > b && e[-1] == '"') e--;
    size_t n = (size_t)(e - b);
    const char *why = NULL;
    if (n == 0) why = "is empty";
    else if (n >= HUB_ETAG_MAX || n >= len) why = "is too long";
    else if (b[0] == '.') why = "starts with '.'";
    for (size_t i = 0; !why && i < n; i++)
        if (!(isalnum((unsigned char)b[i]) || b[i] == '-' || b[i] == '_' || b[i] == '.'))
            why = "has characters that cannot name a file";
    if (why) return strata_err_set(err, STRATA_EFORMAT, "the server's ETag '%.80s' %s", raw, why);
    memcpy(out, b, n);
    out[n] = '\0';
    return 0;
}

int hub_path_link_target(char *out, size_t len, const char *file, const char *etag) {
    size_t pos = 0;
    int depth = 2; /* snapshots/<commit>/ */
    for (const char *p = file; *p; p++) depth += *p == '/';
    for (int i = 0; i < depth; i++) {
        if (pos + 3 >= len) return STRATA_ERANGE;
        memcpy(out + pos, "../", 3);
        pos += 3;
    }
    return hub_path_fmt(out + pos, len - pos, "blobs/%s", etag);
}

int hub_path_quote(char *out, size_t len, const char *s, int keep_slash) {
    static const char hex[] = "0123456789ABCDEF";
    size_t pos = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int keep = isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~' ||
                   (keep_slash && *p == '/');
        if (pos + (keep ? 1 : 3) >= len) return STRATA_ERANGE;
        if (keep) {
            out[pos++] = (char)*p;
        } else {
            out[pos++] = '%';
            out[pos++] = hex[*p >> 4];
            out[pos++] = hex[*p & 15];
        }
    }
    if (pos >= len) return STRATA_ERANGE;
    out[pos] = '\0';
    return 0;
}

/* Splits "scheme://[user@]host[:port]/..." into scheme, lower-case host and port. */
static int url_origin(const char *url, char *scheme, size_t slen, char *host, size_t hlen,
                      long *port) {
    const char *sep = strstr(url, "://");
    if (!sep || (size_t)(sep - url) >= slen) return -1;
    for (size_t i = 0; url + i < sep; i++) scheme[i] = (char)tolower((unsigned char)url[i]);
    scheme[sep - url] = '\0';
    const char *h = sep + 3;
    size_t auth_end = strcspn(h, "/?#");
    const char *at = memchr(h, '@', auth_end);
    if (at) {
        auth_end -= (size_t)(at + 1 - h);
        h = at + 1;
    }
    size_t hn = auth_end;
    const char *colon = NULL;
    if (h[0] == '[') { /* IPv6 literal: the port follows the ']' */
        const char *rb = memchr(h, ']', auth_end);
        if (!rb) return -1;
        hn = (size_t)(rb + 1 - h);
        if (hn < auth_end && h[hn] == ':') colon = h + hn;
    } else {
        colon = memchr(h, ':', auth_end);
        if (colon) hn = (size_t)(colon - h);
    }
    if (hn == 0 || hn >= hlen) return -1;
    for (size_t i = 0; i < hn; i++) host[i] = (char)tolower((unsigned char)h[i]);
    host[hn] = '\0';
    *port = !strcmp(scheme, "https") ? 443 : !strcmp(scheme, "http") ? 80 : 0;
    if (colon && colon + 1 < h + auth_end) *port = strtol(colon + 1, NULL, 10);
    return 0;
}

int hub_path_same_origin(const char *a, const char *b) {
    char sa[16], sb[16], ha[256], hb[256];
    long pa, pb;
    if (url_origin(a, sa, sizeof sa, ha, sizeof ha, &pa) ||
        url_origin(b, sb, sizeof sb, hb, sizeof hb, &pb))
        return 0;
    return !strcmp(sa, sb) && !strcmp(ha, hb) && pa == pb;
}
