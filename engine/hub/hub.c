/* hub.c - hub_resolve: a model name to a directory on disk.
 *
 * A local directory is returned as is. A hub id is looked up in the cache first: a
 * snapshot whose files are all there is used without any request (so a server starts
 * with the hub unreachable, and a model that Python tools downloaded is reused). Else
 * one HEAD of config.json at the revision gives the commit, and the files are fetched
 * at that commit, so a branch that moves during the download cannot mix two commits. */
#include "engine/hub/hub.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "engine/hub/hub_internal.h"

/* What a model needs besides its weights; each is optional because repos differ
 * (tokenizer.json or tokenizer.model, a chat_template.jinja or the template inside
 * tokenizer_config.json). The two weight layouts are probed the same way. */
static const char *const wanted_files[] = {
    "config.json",       "generation_config.json",       "tokenizer.json",
    "tokenizer.model",   "tokenizer_config.json",        "chat_template.jinja",
    "model.safetensors", "model.safetensors.index.json",
};
enum { N_WANTED = sizeof wanted_files / sizeof wanted_files[0], W_SINGLE = 6, W_INDEX = 7 };

static int env_true(const char *name) {
    const char *v = getenv(name);
    if (!v) return 0;
    return !strcasecmp(v, "1") || !strcasecmp(v, "on") || !strcasecmp(v, "yes") ||
           !strcasecmp(v, "true");
}

/* HF_HOME, or its default $XDG_CACHE_HOME/huggingface, or ~/.cache/huggingface. */
static int env_hf_home(char *out, size_t len, strata_err *err) {
    const char *home = getenv("HOME"), *v = getenv("HF_HOME"), *xdg = getenv("XDG_CACHE_HOME");
    int rc;
    if (v && *v) {
        rc = v[0] == '~' && v[1] == '/' && home ? hub_path_fmt(out, len, "%s%s", home, v + 1)
                                                : hub_path_fmt(out, len, "%s", v);
    } else if (xdg && *xdg) {
        rc = hub_path_fmt(out, len, "%s/huggingface", xdg);
    } else if (home && *home) {
        rc = hub_path_fmt(out, len, "%s/.cache/huggingface", home);
    } else {
        return strata_err_set(err, STRATA_EINVALID,
                              "HOME is not set: set HF_HOME or HF_HUB_CACHE to locate the cache");
    }
    return rc ? strata_err_set(err, STRATA_ERANGE, "HF_HOME path too long") : 0;
}

static int read_token_file(char *out, size_t len, const char *path) {
    FILE *fp = fopen(path, "re");
    if (!fp) return 0; /* no token file: anonymous */
    size_t n = fread(out, 1, len - 1, fp);
    fclose(fp);
    out[n] = '\0';
    return 0;
}

int hub_opts_from_env(hub_opts *o, strata_err *err) {
    char home[HUB_PATH_MAX], path[HUB_PATH_MAX + 16];
    memset(o, 0, sizeof *o);
    const char *ep = getenv("HF_ENDPOINT");
    if (hub_path_fmt(o->endpoint, sizeof o->endpoint, "%s",
                     ep && *ep ? ep : "https://huggingface.co"))
        return strata_err_set(err, STRATA_ERANGE, "HF_ENDPOINT is too long");
    for (size_t n = strlen(o->endpoint); n > 0 && o->endpoint[n - 1] == '/'; n--)
        o->endpoint[n - 1] = '\0';
    if (strncmp(o->endpoint, "http://", 7) && strncmp(o->endpoint, "https://", 8))
        return strata_err_set(err, STRATA_EINVALID, "HF_ENDPOINT '%s' is not an http(s) URL",
                              o->endpoint);
    int rc = env_hf_home(home, sizeof home, err);
    if (rc) return rc;
    const char *cache = getenv("HF_HUB_CACHE");
    if (!cache || !*cache) cache = getenv("HUGGINGFACE_HUB_CACHE"); /* the older name, TGI's */
    const char *uhome = getenv("HOME");
    if (cache && *cache)
        rc = cache[0] == '~' && cache[1] == '/' && uhome
                 ? hub_path_fmt(o->cache_dir, sizeof o->cache_dir, "%s%s", uhome, cache + 1)
                 : hub_path_fmt(o->cache_dir, sizeof o->cache_dir, "%s", cache);
    else rc = hub_path_fmt(o->cache_dir, sizeof o->cache_dir, "%s/hub", home);
    if (rc) return strata_err_set(err, STRATA_ERANGE, "hub cache path too long");
    const char *tok = getenv("HF_TOKEN");
    if (!tok || !*tok) tok = getenv("HUGGING_FACE_HUB_TOKEN");
    if (tok && *tok) {
        snprintf(o->token, sizeof o->token, "%s", tok);
    } else {
        const char *tp = getenv("HF_TOKEN_PATH");
        snprintf(path, sizeof path, "%s", tp && *tp ? tp : "");
        if (!path[0]) snprintf(path, sizeof path, "%s/token", home);
        read_token_file(o->token, sizeof o->token, path);
    }
    /* Trim whitespace; a control character left inside would forge HTTP headers. */
    char *t = o->token;
    while (isspace((unsigned char)*t)) t++;
    memmove(o->token, t, strlen(t) + 1);
    for (size_t n = strlen(o->token); n > 0 && isspace((unsigned char)o->token[n - 1]); n--)
        o->token[n - 1] = '\0';
    for (t = o->token; *t; t++)
        if ((unsigned char)*t < 0x20 || *t == 0x7f)
            return strata_err_set(err, STRATA_EINVALID, "the HF token has a control character");
    o->offline = env_true("HF_HUB_OFFLINE") || env_true("TRANSFORMERS_OFFLINE");
    return 0;
}

/* 1 when snapshots/<commit> holds config.json and complete weights, and (when
 * decided) every optional file is either there or recorded missing. */
static int snapshot_complete(const char *repo_dir, const char *commit, int decided) {
    if (hub_cache_file_state(repo_dir, commit, "config.json") != HUB_FILE_PRESENT) return 0;
    for (int i = 1; decided && i < N_WANTED; i++)
        if (hub_cache_file_state(repo_dir, commit, wanted_files[i]) == HUB_FILE_UNKNOWN) return 0;
    if (hub_cache_file_state(repo_dir, commit, wanted_files[W_SINGLE]) == HUB_FILE_PRESENT)
        return 1;
    if (hub_cache_file_state(repo_dir, commit, wanted_files[W_INDEX]) != HUB_FILE_PRESENT) return 0;
    char p[HUB_PATH_MAX], **shards = NULL;
    int n = 0, ok = 1;
    if (hub_path_fmt(p, sizeof p, "%s/snapshots/%s/%s", repo_dir, commit, wanted_files[W_INDEX]) ||
        hub_cache_read_index(p, &shards, &n, NULL))
        return 0;
    for (int i = 0; i < n && ok; i++)
        ok = hub_cache_file_state(repo_dir, commit, shards[i]) == HUB_FILE_PRESENT;
    hub_cache_free_list(shards, n);
    return ok;
}

static int snapshot_dir(char *out, size_t len, const char *repo_dir, const char *commit,
                        strata_err *err) {
    if (hub_path_fmt(out, len, "%s/snapshots/%s", repo_dir, commit))
        return strata_err_set(err, STRATA_ERANGE, "output buffer too small for the snapshot path");
    return 0;
}

static void report_cached(hub_progress_fn cb, void *ud, const char *warning) {
    hub_progress p = {.event = HUB_EV_WARN, .message = warning};
    if (cb && warning) cb(&p, ud);
    p.event = HUB_EV_DONE;
    p.message = NULL;
    if (cb) cb(&p, ud);
}

int hub_resolve(const hub_opts *o, const char *model, const char *revision, char *dir_out,
                size_t dir_len, hub_progress_fn cb, void *ud, strata_err *err) {
    hub_fetch *f = NULL;
    char **shards = NULL;
    int n_shards = 0, rc = 0, *flags = NULL;
    char repo_dir[HUB_PATH_MAX], commit[HUB_COMMIT_LEN + 1] = "";
    int present[N_WANTED], optional[N_WANTED];
    struct stat st;
    const char *rev = revision && *revision ? revision : "main";
    if (!o || !model || !*model || !dir_out)
        return strata_err_set(err, STRATA_EINVALID, "hub_resolve: no model given");
    if (stat(model, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return strata_err_set(err, STRATA_EINVALID,
                                  "%s is not a directory: give the model's directory", model);
        if (hub_path_fmt(dir_out, dir_len, "%s", model))
            return strata_err_set(err, STRATA_ERANGE, "model path too long: %.200s", model);
        return 0;
    }
    if (model[0] == '/' || model[0] == '.' || model[0] == '~')
        return strata_err_set(err, STRATA_ENOTFOUND, "no model directory at %s", model);
    if ((rc = hub_cache_repo_dir(repo_dir, sizeof repo_dir, o->cache_dir, model, rev, err)))
        return rc;

    /* The cache first: offline, only what must be there; online, everything decided. */
    if (hub_path_is_commit(rev)) memcpy(commit, rev, sizeof commit);
    else hub_cache_read_ref(repo_dir, rev, commit);
    int usable = commit[0] && snapshot_complete(repo_dir, commit, 0);
    if (usable && (o->offline || (!o->refresh && snapshot_complete(repo_dir, commit, 1)))) {
        if ((rc = snapshot_dir(dir_out, dir_len, repo_dir, commit, err))) return rc;
        report_cached(cb, ud, NULL);
        return 0;
    }
    if (o->offline)
        return strata_err_set(err, STRATA_ENOTFOUND,
                              "%s (revision '%s') is not complete in the cache %s and "
                              "HF_HUB_OFFLINE is set: run `strata pull %s` where the hub is "
                              "reachable, or unset HF_HUB_OFFLINE",
                              model, rev, o->cache_dir, model);

    if ((rc = hub_fetch_create(&f, o, model, repo_dir, rev, cb, ud, err))) return rc;
    char cached[HUB_COMMIT_LEN + 1];
    strata_err probe_err = {0};
    memcpy(cached, commit, sizeof cached);
    if ((rc = hub_fetch_commit(f, wanted_files[0], usable, commit, &probe_err))) {
        /* Only "cannot reach a hub" falls back; an answer (not found, gated) is final. */
        if ((rc != STRATA_ENETWORK && rc != STRATA_EFORMAT) || !usable) {
            if (err) *err = probe_err;
            goto fail;
        }
        /* Unreachable, but what the model needs is cached: serve that, as
         * huggingface_hub falls back to its cache when the HEAD call fails. */
        char note[sizeof probe_err.msg + 96];
        snprintf(note, sizeof note, "%s; using the cached snapshot %.40s", probe_err.msg, cached);
        rc = snapshot_dir(dir_out, dir_len, repo_dir, cached, err);
        if (rc == 0) report_cached(cb, ud, note);
        goto fail;
    }
    if ((rc = hub_cache_mkdirs(repo_dir, err))) goto fail;
    hub_cache_tag(o->cache_dir);
    if (strcmp(rev, commit) && (rc = hub_cache_write_ref(repo_dir, rev, commit, err))) goto fail;
    for (int i = 0; i < N_WANTED; i++) optional[i] = i != 0;
    if ((rc = hub_fetch_files(f, commit, wanted_files, optional, N_WANTED, present, err)))
        goto fail;

    if (!present[W_SINGLE]) {
        char p[HUB_PATH_MAX];
        if (!present[W_INDEX]) {
            rc = strata_err_set(err, STRATA_ENOTFOUND,
                                "%s has neither model.safetensors nor model.safetensors.index.json "
                                "at revision '%s': strata loads safetensors weights only",
                                model, rev);
            goto fail;
        }
        if ((rc = snapshot_dir(p, sizeof p, repo_dir, commit, err))) goto fail;
        strncat(p, "/model.safetensors.index.json", sizeof p - strlen(p) - 1);
        if ((rc = hub_cache_read_index(p, &shards, &n_shards, err))) goto fail;
        int *got = calloc((size_t)n_shards * 2, sizeof *got);
        if (!(flags = got)) {
            rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
            goto fail;
        }
        rc = hub_fetch_files(f, commit, (const char *const *)shards, flags, n_shards,
                             flags + n_shards, err);
        if (rc) goto fail;
    }
    if ((rc = snapshot_dir(dir_out, dir_len, repo_dir, commit, err))) goto fail;
    hub_fetch_report_done(f);
fail:
    free(flags);
    hub_cache_free_list(shards, n_shards);
    hub_fetch_destroy(f);
    return rc;
}

static void human_bytes(char *out, size_t len, double b) {
    static const char *const unit[] = {"B", "kB", "MB", "GB", "TB"};
    int u = 0;
    while (b >= 1000 && u < 4) b /= 1000, u++;
    snprintf(out, len, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
}

void hub_progress_format(const hub_progress *p, char *buf, size_t len) {
    char done[32], total[32], rate[32], eta[32] = "?";
    int pos = p->files_total ? snprintf(buf, len, "%d/%d files", p->files_done, p->files_total)
              : p->event == HUB_EV_DONE ? snprintf(buf, len, "all files were in the cache")
                                        : snprintf(buf, len, "asking the hub");
    if (p->bytes_total <= 0 || pos < 0 || (size_t)pos >= len) return;
    human_bytes(done, sizeof done, (double)p->bytes_done);
    human_bytes(total, sizeof total, (double)p->bytes_total);
    human_bytes(rate, sizeof rate, p->rate);
    if (p->rate > 0) {
        long s = (long)((double)(p->bytes_total - p->bytes_done) / p->rate + 0.5);
        if (s >= 3600) snprintf(eta, sizeof eta, "%ldh%02ldm", s / 3600, s / 60 % 60);
        else if (s >= 60) snprintf(eta, sizeof eta, "%ldm%02lds", s / 60, s % 60);
        else snprintf(eta, sizeof eta, "%lds", s);
    }
    snprintf(buf + pos, len - (size_t)pos, ", %s of %s (%d%%), %s/s, ETA %s", done, total,
             (int)(100.0 * (double)p->bytes_done / (double)p->bytes_total), rate, eta);
}
