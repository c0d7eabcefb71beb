/* config.c - loads the server configuration: defaults < file < env < CLI.
 *
 * Every option is one row of CONFIG_OPTION_LIST; this file only walks that table. The
 * config file is JSON with // and / * * / comments allowed (stripped here, outside
 * strings), so the shipped example can explain itself. */
#include "config/config.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct config_desc {
    const char *field;
    const char *flag;
    int type;
    size_t off;
    const char *def_str;
    double def_num;
    const char *help;
} config_desc;

#define CONFIG_DEF_STR(def) (def), 0
#define CONFIG_DEF_INT(def) NULL, (double)(def)
#define CONFIG_DEF_BOOL(def) NULL, (double)(def)
#define CONFIG_DEF_NUM(def) NULL, (double)(def)
#define CONFIG_DEF_LIST(def) (def), 0
#define CONFIG_ROW(field, flag, type, def, help)                                                   \
    {#field, flag, CONFIG_##type, offsetof(config, field), CONFIG_DEF_##type(def), help},
static const config_desc config_table[] = {CONFIG_OPTION_LIST(CONFIG_ROW)};
#undef CONFIG_ROW
#define CONFIG_N ((int)(sizeof config_table / sizeof config_table[0]))

int config_count(void) { return CONFIG_N; }
const char *config_flag_name(int i) { return i >= 0 && i < CONFIG_N ? config_table[i].flag : NULL; }
int config_flag_type(int i) { return i >= 0 && i < CONFIG_N ? config_table[i].type : -1; }

static void *config_slot(config *c, const config_desc *d) { return (char *)c + d->off; }

static void config_list_clear(config_list *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* Appends the n bytes at s (trimmed of blanks) to l; the list is unchanged on error. */
static int config_list_add(config_list *l, const char *s, size_t n, strata_err *err) {
    while (n && (*s == ' ' || *s == '\t')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    char **v = realloc(l->v, (size_t)(l->n + 1) * sizeof *v);
    if (!v) return strata_err_set(err, STRATA_ENOMEM, "config: out of memory");
    l->v = v;
    if (!(v[l->n] = strndup(s, n)))
        return strata_err_set(err, STRATA_ENOMEM, "config: out of memory");
    l->n++;
    return 0;
}

/* Appends each comma-separated item of v to option d's list; an empty item is an
 * error (a stray comma, or --api-key= with nothing after it). */
static int config_list_add_text(config_list *l, const config_desc *d, const char *v,
                                const char *src, strata_err *err) {
    for (const char *p = v;;) {
        const char *q = strchr(p, ',');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        int rc = config_list_add(l, p, n, err);
        if (rc) return rc;
        if (!*l->v[l->n - 1])
            return strata_err_set(err, STRATA_EINVALID, "%s: --%s has an empty item in '%s'", src,
                                  d->flag, v);
        if (!q) return 0;
        p = q + 1;
    }
}

int config_init(config *c, strata_err *err) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < CONFIG_N; i++) {
        const config_desc *d = &config_table[i];
        void *p = config_slot(c, d);
        switch (d->type) {
        case CONFIG_STR:
            if (d->def_str && !(*(char **)p = strdup(d->def_str))) {
                config_deinit(c);
                return strata_err_set(err, STRATA_ENOMEM, "config: out of memory");
            }
            break;
        case CONFIG_INT: *(long long *)p = (long long)d->def_num; break;
        case CONFIG_BOOL: *(int *)p = (int)d->def_num; break;
        case CONFIG_NUM: *(double *)p = d->def_num; break;
        case CONFIG_LIST: break; /* empty: zeroed above */
        }
    }
    return 0;
}

void config_deinit(config *c) {
    if (!c) return;
    for (int i = 0; i < CONFIG_N; i++)
        if (config_table[i].type == CONFIG_STR) {
            char **p = config_slot(c, &config_table[i]);
            free(*p);
            *p = NULL;
        } else if (config_table[i].type == CONFIG_LIST) {
            config_list_clear(config_slot(c, &config_table[i]));
        }
}

static const config_desc *config_find_flag(const char *name, size_t len) {
    for (int i = 0; i < CONFIG_N; i++)
        if (strlen(config_table[i].flag) == len && !memcmp(config_table[i].flag, name, len))
            return &config_table[i];
    return NULL;
}

/* Parses text for option d; src names where it came from for the message. */
static int config_set_text(config *c, const config_desc *d, const char *v, const char *src,
                           strata_err *err) {
    void *p = config_slot(c, d);
    switch (d->type) {
    case CONFIG_STR: {
        char *s = strdup(v);
        if (!s) return strata_err_set(err, STRATA_ENOMEM, "config: out of memory");
        free(*(char **)p);
        *(char **)p = s;
        return 0;
    }
    case CONFIG_INT: {
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end)
            return strata_err_set(err, STRATA_EINVALID, "%s: --%s wants an integer, got '%s'", src,
                                  d->flag, v);
        *(long long *)p = x;
        return 0;
    }
    case CONFIG_NUM: {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        if (errno || end == v || *end)
            return strata_err_set(err, STRATA_EINVALID, "%s: --%s wants a number, got '%s'", src,
                                  d->flag, v);
        *(double *)p = x;
        return 0;
    }
    case CONFIG_BOOL: {
        static const char *yes[] = {"1", "true", "on", "yes", "enabled"};
        static const char *no[] = {"0", "false", "off", "no", "disabled"};
        for (size_t i = 0; i < 5; i++) {
            if (!strcasecmp(v, yes[i])) return *(int *)p = 1, 0;
            if (!strcasecmp(v, no[i])) return *(int *)p = 0, 0;
        }
        return strata_err_set(err, STRATA_EINVALID, "%s: --%s wants true or false, got '%s'", src,
                              d->flag, v);
    }
    case CONFIG_LIST: return config_list_add_text(p, d, v, src, err);
    }
    return strata_err_set(err, STRATA_EINVALID, "config: bad option type");
}

/* A list from the file: a string (commas separate items), an array of strings, or null. */
static int config_set_json_list(config *c, const config_desc *d, json_t *v, const char *path,
                                strata_err *err) {
    config_list_clear(config_slot(c, d));
    if (json_is_null(v)) return 0;
    if (json_is_string(v)) return config_set_text(c, d, json_string_value(v), path, err);
    size_t i;
    json_t *x;
    if (json_is_array(v)) {
        json_array_foreach(v, i, x) {
            if (!json_is_string(x)) break;
            int rc = config_set_text(c, d, json_string_value(x), path, err);
            if (rc) return rc;
        }
        if (i == json_array_size(v)) return 0;
    }
    return strata_err_set(err, STRATA_EINVALID, "%s: \"%s\" must be a string or a list of strings",
                          path, d->flag);
}

static int config_set_json(config *c, const config_desc *d, json_t *v, const char *path,
                           strata_err *err) {
    char buf[64];
    if (d->type == CONFIG_LIST) return config_set_json_list(c, d, v, path, err);
    if (d->type == CONFIG_STR && json_is_string(v))
        return config_set_text(c, d, json_string_value(v), path, err);
    if (d->type == CONFIG_STR && json_is_null(v)) {
        char **p = config_slot(c, d);
        free(*p);
        *p = NULL;
        return 0;
    }
    if (d->type == CONFIG_INT && json_is_integer(v)) {
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        return config_set_text(c, d, buf, path, err);
    }
    if (d->type == CONFIG_NUM && json_is_number(v)) {
        snprintf(buf, sizeof buf, "%.17g", json_number_value(v));
        return config_set_text(c, d, buf, path, err);
    }
    if (d->type == CONFIG_BOOL && json_is_boolean(v))
        return config_set_text(c, d, json_is_true(v) ? "true" : "false", path, err);
    static const char *names[] = {"a string", "an integer", "a boolean", "a number"};
    return strata_err_set(err, STRATA_EINVALID, "%s: \"%s\" must be %s", path, d->flag,
                          names[d->type]);
}

/* Blanks // and slash-star comments outside strings, keeping offsets (so jansson's
 * line and column numbers stay right). */
static void config_strip_comments(char *s) {
    int in_str = 0;
    for (char *p = s; *p; p++) {
        if (in_str) {
            if (*p == '\\' && p[1]) p++;
            else if (*p == '"') in_str = 0;
        } else if (*p == '"') {
            in_str = 1;
        } else if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n') *p++ = ' ';
            if (!*p) break;
        } else if (p[0] == '/' && p[1] == '*') {
            *p++ = ' ';
            *p = ' ';
            while (p[1] && !(p[1] == '*' && p[2] == '/')) {
                p++;
                if (*p != '\n') *p = ' ';
            }
            if (!p[1]) break;
            p[1] = p[2] = ' ';
            p += 2;
        }
    }
}

static int config_load_file(config *c, const char *path, strata_err *err) {
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    json_t *root = NULL;
    int rc = 0;
    if (!f) return strata_err_set(err, STRATA_EIO, "config file %s: cannot open", path);
    if (fseek(f, 0, SEEK_END) || ftell(f) < 0 || ftell(f) > (1 << 20)) {
        rc = strata_err_set(err, STRATA_EFORMAT, "config file %s: unreadable or over 1 MiB", path);
        goto fail;
    }
    long n = ftell(f);
    rewind(f);
    if (!(text = malloc((size_t)n + 1))) {
        rc = strata_err_set(err, STRATA_ENOMEM, "config: out of memory");
        goto fail;
    }
    if (fread(text, 1, (size_t)n, f) != (size_t)n) {
        rc = strata_err_set(err, STRATA_EIO, "config file %s: read failed", path);
        goto fail;
    }
    text[n] = 0;
    config_strip_comments(text);
    json_error_t je;
    if (!(root = json_loads(text, JSON_REJECT_DUPLICATES, &je))) {
        rc = strata_err_set(err, STRATA_EFORMAT, "config file %s:%d:%d: %s", path, je.line,
                            je.column, je.text);
        goto fail;
    }
    if (!json_is_object(root)) {
        rc = strata_err_set(err, STRATA_EFORMAT, "config file %s: must hold a JSON object", path);
        goto fail;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (key[0] == '$') continue; /* "$schema" */
        const config_desc *d = config_find_flag(key, strlen(key));
        if (!d) {
            /* accept snake_case spellings too: "max_seqs" */
            char alt[64];
            snprintf(alt, sizeof alt, "%s", key);
            for (char *q = alt; *q; q++)
                if (*q == '_') *q = '-';
            d = config_find_flag(alt, strlen(alt));
        }
        if (!d || !strcmp(d->flag, "config")) {
            rc = strata_err_set(err, STRATA_EINVALID, "config file %s: unknown option \"%s\"", path,
                                key);
            goto fail;
        }
        if ((rc = config_set_json(c, d, v, path, err))) goto fail;
    }
fail:
    json_decref(root);
    free(text);
    fclose(f);
    return rc;
}

static int config_load_env(config *c, char **envp, strata_err *err) {
    for (char **e = envp; e && *e; e++) {
        if (strncmp(*e, "STRATA_", 7)) continue;
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        const char *name = *e + 7;
        size_t len = (size_t)(eq - name);
        for (int i = 0; i < CONFIG_N; i++) {
            const char *f = config_table[i].field;
            if (strlen(f) != len) continue;
            size_t k = 0;
            while (k < len && toupper((unsigned char)f[k]) == name[k]) k++;
            if (k != len) continue;
            char src[96];
            snprintf(src, sizeof src, "environment STRATA_%.60s", name);
            if (config_table[i].type == CONFIG_LIST) /* replaces the file's list */
                config_list_clear(config_slot(c, &config_table[i]));
            int rc = config_set_text(c, &config_table[i], eq + 1, src, err);
            if (rc) return rc;
        }
    }
    return 0;
}

/* Finds --config in argv or STRATA_CONFIG in envp (the file loads before both). */
static const char *config_find_file(int argc, char **argv, char **envp) {
    const char *path = NULL;
    for (char **e = envp; e && *e; e++)
        if (!strncmp(*e, "STRATA_CONFIG=", 14)) path = *e + 14;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) path = argv[i + 1];
        else if (!strncmp(argv[i], "--config=", 9)) path = argv[i] + 9;
    }
    return path && *path ? path : NULL;
}

static int config_load_argv(config *c, int argc, char **argv, int *help, strata_err *err) {
    unsigned char seen[CONFIG_N];
    memset(seen, 0, sizeof seen);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *help = 1;
            continue;
        }
        if (strncmp(a, "--", 2))
            return strata_err_set(err, STRATA_EINVALID, "unexpected argument '%s'", a);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const config_desc *d = config_find_flag(name, len);
        int neg = 0;
        if (!d && len > 3 && !strncmp(name, "no-", 3)) {
            d = config_find_flag(name + 3, len - 3);
            neg = d && d->type == CONFIG_BOOL;
            if (!neg) d = NULL;
        }
        if (!d)
            return strata_err_set(err, STRATA_EINVALID, "unknown option '--%.*s'", (int)len, name);
        const char *v;
        if (eq) v = eq + 1;
        else if (d->type == CONFIG_BOOL) v = neg ? "false" : "true";
        else if (i + 1 < argc) v = argv[++i];
        else return strata_err_set(err, STRATA_EINVALID, "option --%s needs a value", d->flag);
        /* the first of a repeated flag replaces what env and file gave; the rest add */
        if (d->type == CONFIG_LIST && !seen[d - config_table]) {
            seen[d - config_table] = 1;
            config_list_clear(config_slot(c, d));
        }
        int rc = config_set_text(c, d, v, "command line", err);
        if (rc) return rc;
    }
    return 0;
}

/* "*", or scheme://host[:port] as a browser sends it in Origin: no path, no slash. */
static int config_is_origin(const char *o) {
    if (!strcmp(o, "*")) return 1;
    const char *h = strstr(o, "://");
    if (!h || h == o || !h[3]) return 0;
    for (const char *p = o; p < h; p++)
        if (!isalnum((unsigned char)*p) && *p != '+' && *p != '-' && *p != '.') return 0;
    for (const char *p = h + 3; *p; p++)
        if (*p == '/' || *p == '*' || *p <= ' ' || (unsigned char)*p >= 0x7f) return 0;
    return 1;
}

int config_check(const config *c, strata_err *err) {
    struct {
        const char *flag;
        long long v, lo, hi;
    } r[] = {
        {"port", c->port, 0, 65535},
        {"threads", c->threads, 0, 1024},
        {"http-threads", c->http_threads, 1, 256},
        {"max-seqs", c->max_seqs, 1, 4096},
        {"ctx-size", c->ctx_size, 0, 1 << 24},
        {"kv-cache-memory", c->kv_cache_memory, 0, 1LL << 50},
        {"kv-block-size", c->kv_block_size, 1, 4096},
        {"prefix-cache-memory", c->prefix_cache_memory, 1, 1LL << 50},
        {"prefill-chunk", c->prefill_chunk, 1, 1 << 20},
        {"max-queue", c->max_queue, 0, 1 << 20},
        {"max-body-bytes", c->max_body_bytes, 1024, 1LL << 32},
        {"max-connections", c->max_connections, 4, 1 << 20},
        {"max-connections-per-ip", c->max_connections_per_ip, 0, 1 << 20},
        {"idle-timeout", c->idle_timeout, 1, 86400},
        {"header-timeout", c->header_timeout, 1, 86400},
        {"prepare-threads", c->prepare_threads, 1, 128},
        {"request-timeout", c->request_timeout, 0, 7 * 86400},
        {"sse-keepalive", c->sse_keepalive, 0, 86400},
        {"shutdown-timeout", c->shutdown_timeout, 0, 86400},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if (r[i].v < r[i].lo || r[i].v > r[i].hi)
            return strata_err_set(err, STRATA_EINVALID, "--%s is %lld; allowed %lld..%lld",
                                  r[i].flag, r[i].v, r[i].lo, r[i].hi);
    if (c->kv_block_size & (c->kv_block_size - 1))
        return strata_err_set(err, STRATA_EINVALID,
                              "--kv-block-size is %lld; a power of two is "
                              "needed",
                              c->kv_block_size);
    if (!(c->gpu_memory_utilization > 0 && c->gpu_memory_utilization <= 1))
        return strata_err_set(err, STRATA_EINVALID,
                              "--gpu-memory-utilization is %g; allowed (0, 1]",
                              c->gpu_memory_utilization);
    if (c->load_format && strcmp(c->load_format, "auto") && strcmp(c->load_format, "dummy") &&
        strcmp(c->load_format, "safetensors"))
        return strata_err_set(err, STRATA_EINVALID,
                              "--load-format is '%s'; allowed auto, safetensors, dummy",
                              c->load_format);
    if (c->tool_call_parser && strcmp(c->tool_call_parser, "auto") &&
        strcmp(c->tool_call_parser, "xml") && strcmp(c->tool_call_parser, "qwen3_coder") &&
        strcmp(c->tool_call_parser, "gemma4") && strcmp(c->tool_call_parser, "none"))
        return strata_err_set(err, STRATA_EINVALID,
                              "--tool-call-parser is '%s'; allowed auto, xml (qwen3_coder), "
                              "gemma4, none",
                              c->tool_call_parser);
    if (c->quantization && strcasecmp(c->quantization, "none") &&
        strcasecmp(c->quantization, "q8_0") && strcasecmp(c->quantization, "q4_k"))
        return strata_err_set(err, STRATA_EINVALID,
                              "--quantization is '%s'; allowed none, q8_0, q4_k", c->quantization);
    if (c->kv_cache_dtype && strcmp(c->kv_cache_dtype, "auto") &&
        strcmp(c->kv_cache_dtype, "bf16") && strcmp(c->kv_cache_dtype, "f32"))
        return strata_err_set(err, STRATA_EINVALID,
                              "--kv-cache-dtype is '%s'; allowed auto, bf16, f32",
                              c->kv_cache_dtype);
    if (!c->device ||
        (strcmp(c->device, "auto") && strcmp(c->device, "cpu") && strncmp(c->device, "cuda", 4)))
        return strata_err_set(err, STRATA_EINVALID,
                              "--device is '%s'; allowed cpu, cuda, cuda:N, auto",
                              c->device ? c->device : "(null)");
    for (int i = 0; i < c->api_key.n; i++)
        if (!*c->api_key.v[i]) return strata_err_set(err, STRATA_EINVALID, "--api-key is empty");
    for (int i = 0; i < c->allowed_origins.n; i++)
        if (!config_is_origin(c->allowed_origins.v[i]))
            return strata_err_set(err, STRATA_EINVALID,
                                  "--allowed-origins: '%.200s' is not * or an origin "
                                  "(scheme://host[:port], no path)",
                                  c->allowed_origins.v[i]);
    return 0;
}

/* Adds the keys of --api-key-file to api_key: one a line, blanks trimmed, blank lines
 * and lines starting with # skipped. Read once at start: a rotated key needs a restart. */
static int config_load_key_file(config *c, const char *path, strata_err *err) {
    FILE *f = fopen(path, "r");
    if (!f)
        return strata_err_set(err, STRATA_EINVALID, "--api-key-file %s: cannot open (%s)", path,
                              strerror(errno));
    char line[4096];
    int rc = 0, n = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\r\n");
        if (len == sizeof line - 1) {
            rc =
                strata_err_set(err, STRATA_EINVALID, "--api-key-file %s: a line is too long", path);
            break;
        }
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++, len--;
        if (!len || *p == '#') continue;
        if (!(rc = config_list_add(&c->api_key, p, len, err))) n++;
    }
    if (!rc && ferror(f))
        rc = strata_err_set(err, STRATA_EINVALID, "--api-key-file %s: read failed", path);
    if (!rc && !n)
        rc = strata_err_set(err, STRATA_EINVALID, "--api-key-file %s: holds no key", path);
    fclose(f);
    return rc;
}

int config_load(config *c, int argc, char **argv, char **envp, int *help, strata_err *err) {
    int rc, h = 0;
    const char *file = config_find_file(argc, argv, envp);
    if (file && (rc = config_load_file(c, file, err))) return rc;
    if ((rc = config_load_env(c, envp, err))) return rc;
    if ((rc = config_load_argv(c, argc, argv, &h, err))) return rc;
    if (help) *help = h;
    if (h) return 0;
    if (c->api_key_file && (rc = config_load_key_file(c, c->api_key_file, err))) return rc;
    return config_check(c, err);
}

void config_format_help(char *buf, size_t len) {
    size_t at = 0;
    if (!len) return;
    buf[0] = 0;
    for (int i = 0; i < CONFIG_N && at < len; i++) {
        const config_desc *d = &config_table[i];
        char def[64] = "";
        if (d->type == CONFIG_STR && d->def_str) snprintf(def, sizeof def, " [%s]", d->def_str);
        else if (d->type == CONFIG_INT || d->type == CONFIG_BOOL)
            snprintf(def, sizeof def, " [%lld]", (long long)d->def_num);
        else if (d->type == CONFIG_NUM) snprintf(def, sizeof def, " [%g]", d->def_num);
        char upper[64];
        size_t k = 0;
        for (; d->field[k] && k < sizeof upper - 1; k++)
            upper[k] = (char)toupper((unsigned char)d->field[k]);
        upper[k] = 0;
        int w = snprintf(buf + at, len - at, "  --%-20s %s%s (env STRATA_%s)\n", d->flag, d->help,
                         def, upper);
        if (w < 0) break;
        at += (size_t)w;
    }
}
