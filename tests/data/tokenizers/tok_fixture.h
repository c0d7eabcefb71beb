/* tok_fixture.h - test helper: unpacks the vendored tokenizers and reads the conformance
 * fixtures written by tools/tok_conformance/gen.py (format described there).
 *
 * Files are zstd-compressed; the zstd CLI (installed by tools/install-deps.sh) unpacks
 * them, so the tests need no compression library. Header-only, for tests only. */
#ifndef STRATA_TOK_FIXTURE_H
#define STRATA_TOK_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct tokfx_dir {
    char path[256];
} tokfx_dir;

/* Decompresses tests/data/tokenizers/NAME/{tokenizer.json,tokenizer_config.json}.zst (and
 * copies a tokenizer.model) into a fresh temporary directory. 0 on success. */
static int tokfx_unpack(tokfx_dir *d, const char *name) {
    const char *tmp = getenv("TMPDIR");
    snprintf(d->path, sizeof d->path, "%s/strata-tok-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(d->path)) return -1;
    static const char *files[] = {"tokenizer.json", "tokenizer_config.json", "tokenizer.model"};
    int found = 0;
    for (int i = 0; i < 3; i++) {
        char src[512], cmd[1400];
        snprintf(src, sizeof src, "tests/data/tokenizers/%s/%s%s", name, files[i],
                 i < 2 ? ".zst" : "");
        if (access(src, R_OK)) continue;
        if (i < 2)
            snprintf(cmd, sizeof cmd, "zstd -dqf --long=27 '%s' -o '%s/%s'", src, d->path,
                     files[i]);
        else snprintf(cmd, sizeof cmd, "cp '%s' '%s/%s'", src, d->path, files[i]);
        if (system(cmd)) return -1;
        found += i != 1;
    }
    return found ? 0 : -1;
}

static void tokfx_cleanup(tokfx_dir *d) {
    static const char *files[] = {"tokenizer.json", "tokenizer_config.json", "tokenizer.model"};
    char p[512];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", d->path, files[i]);
        unlink(p);
    }
    rmdir(d->path);
}

typedef struct tokfx_case {
    char kind;  /* 'E' encode case, 'D' decode case */
    char *text; /* E: input bytes */
    size_t text_len;
    int32_t *ids, *ids_sp; /* E: without / with special tokens; D: ids (ids_sp unused) */
    size_t n_ids, n_ids_sp;
    char *dec, *dec_skip; /* decode of ids_sp (E) or ids (D), without / with skipping */
    size_t dec_len, dec_skip_len;
} tokfx_case;

typedef struct tokfx_reader {
    FILE *f;
    char *line;
    size_t cap;
    tokfx_case c;
    size_t cap_text, cap_dec, cap_skip, cap_ids, cap_sp;
} tokfx_reader;

static int tokfx_open(tokfx_reader *r, const char *path) {
    memset(r, 0, sizeof *r);
    if (access(path, R_OK)) return -1;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "zstd -dc --long=27 '%s'", path);
    r->f = popen(cmd, "r");
    return r->f ? 0 : -1;
}

static int tokfx_hex(char **buf, size_t *cap, size_t *len, const char *s, size_t n) {
    if (*cap < n / 2 + 1) {
        char *p = realloc(*buf, n / 2 + 1);
        if (!p) return -1;
        *buf = p;
        *cap = n / 2 + 1;
    }
    for (size_t i = 0; i + 1 < n; i += 2) {
        unsigned v;
        if (sscanf(s + i, "%2x", &v) != 1) return -1;
        (*buf)[i / 2] = (char)v;
    }
    *len = n / 2;
    (*buf)[*len] = 0;
    return 0;
}

static int tokfx_ids(int32_t **buf, size_t *cap, size_t *n, const char *s, size_t len) {
    *n = 0;
    const char *end = s + len;
    while (s < end) {
        char *e;
        long v = strtol(s, &e, 10);
        if (e == s) break;
        if (*n == *cap) {
            size_t c = *cap ? *cap * 2 : 64;
            int32_t *p = realloc(*buf, c * sizeof *p);
            if (!p) return -1;
            *buf = p;
            *cap = c;
        }
        (*buf)[(*n)++] = (int32_t)v;
        s = e;
    }
    return 0;
}

/* 1 and *out filled (valid until the next call), 0 at the end, -1 on a malformed line. */
static int tokfx_next(tokfx_reader *r, tokfx_case *out) {
    ssize_t n = getline(&r->line, &r->cap, r->f);
    if (n <= 0) return 0;
    if (r->line[n - 1] == '\n') r->line[--n] = 0;
    const char *f[6];
    size_t fl[6];
    int nf = 0;
    const char *s = r->line;
    while (nf < 6) {
        const char *t = strchr(s, '\t');
        f[nf] = s;
        fl[nf] = t ? (size_t)(t - s) : strlen(s);
        nf++;
        if (!t) break;
        s = t + 1;
    }
    tokfx_case *c = &r->c;
    c->kind = r->line[0];
    int bad = 0;
    if (c->kind == 'E' && nf == 6) {
        bad |= tokfx_hex(&c->text, &r->cap_text, &c->text_len, f[1], fl[1]);
        bad |= tokfx_ids(&c->ids, &r->cap_ids, &c->n_ids, f[2], fl[2]);
        bad |= tokfx_ids(&c->ids_sp, &r->cap_sp, &c->n_ids_sp, f[3], fl[3]);
        bad |= tokfx_hex(&c->dec, &r->cap_dec, &c->dec_len, f[4], fl[4]);
        bad |= tokfx_hex(&c->dec_skip, &r->cap_skip, &c->dec_skip_len, f[5], fl[5]);
    } else if (c->kind == 'D' && nf == 4) {
        bad |= tokfx_ids(&c->ids, &r->cap_ids, &c->n_ids, f[1], fl[1]);
        bad |= tokfx_hex(&c->dec, &r->cap_dec, &c->dec_len, f[2], fl[2]);
        bad |= tokfx_hex(&c->dec_skip, &r->cap_skip, &c->dec_skip_len, f[3], fl[3]);
    } else bad = 1;
    if (bad) return -1;
    *out = *c;
    return 1;
}

static void tokfx_close(tokfx_reader *r) {
    if (r->f) pclose(r->f);
    free(r->line);
    free(r->c.text);
    free(r->c.ids);
    free(r->c.ids_sp);
    free(r->c.dec);
    free(r->c.dec_skip);
    memset(r, 0, sizeof *r);
}

#endif
