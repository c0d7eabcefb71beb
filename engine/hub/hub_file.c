/* hub_file.c - hub_resolve_file: one named file of a hub repository, such as one .gguf of
 * a GGUF repository, which has no config.json for hub_resolve to probe and whose other
 * files are the same model at other quantizations (gigabytes each, not wanted). A local
 * directory stands for the repository, as it does for hub_resolve, so serve and pull
 * take `--model DIR --gguf-file NAME` through the same call.
 *
 * The file itself is the probe: one HEAD of it at the revision gives the commit, and the
 * GET reuses that answer. The cache layout, offline mode and the fall back to a cached
 * copy when the hub cannot be reached are hub_resolve's. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/hub/hub_internal.h"

static int file_path(char *out, size_t len, const char *repo_dir, const char *commit,
                     const char *file, strata_err *err) {
    if (hub_path_fmt(out, len, "%s/snapshots/%s/%s", repo_dir, commit, file))
        return strata_err_set(err, STRATA_ERANGE, "output buffer too small for the file's path");
    return 0;
}

/* model is a path on disk: the file in a directory, without any request. */
static int local_file(const char *model, const char *file, char *path_out, size_t path_len,
                      strata_err *err) {
    struct stat st;
    if (stat(model, &st) == 0 && !S_ISDIR(st.st_mode))
        return strata_err_set(err, STRATA_EINVALID,
                              "--gguf-file %.200s: %.200s is a file, not a directory or hub id: "
                              "give the file as --model alone",
                              file, model);
    if (stat(model, &st) != 0)
        return strata_err_set(err, STRATA_ENOTFOUND, "no model directory at %.200s", model);
    if (hub_path_fmt(path_out, path_len, "%s/%s", model, file))
        return strata_err_set(err, STRATA_ERANGE, "model path too long: %.200s", model);
    if (stat(path_out, &st) != 0 || !S_ISREG(st.st_mode))
        return strata_err_set(err, STRATA_ENOTFOUND, "--gguf-file: no file %.400s", path_out);
    return 0;
}

int hub_resolve_file(const hub_opts *o, const char *model, const char *revision, const char *file,
                     char *path_out, size_t path_len, hub_progress_fn cb, void *ud,
                     strata_err *err) {
    hub_fetch *f = NULL;
    char repo_dir[HUB_PATH_MAX], commit[HUB_COMMIT_LEN + 1] = "";
    const char *rev = revision && *revision ? revision : "main";
    int rc, present = 0;
    const int required = 0;
    struct stat st;
    if (!o || !model || !*model || !file || !path_out)
        return strata_err_set(err, STRATA_EINVALID, "hub_resolve_file: no model or file given");
    if ((rc = hub_path_check_file(file, err))) {
        strata_err_wrap(err, "--gguf-file '%.200s': ", file);
        return rc;
    }
    if (stat(model, &st) == 0 || model[0] == '/' || model[0] == '.' || model[0] == '~')
        return local_file(model, file, path_out, path_len, err);
    if ((rc = hub_cache_repo_dir(repo_dir, sizeof repo_dir, o->cache_dir, model, rev, err)))
        return rc;

    if (hub_path_is_commit(rev)) memcpy(commit, rev, sizeof commit);
    else hub_cache_read_ref(repo_dir, rev, commit);
    int usable = commit[0] && hub_cache_file_state(repo_dir, commit, file) == HUB_FILE_PRESENT;
    if (usable && (o->offline || !o->refresh)) {
        if ((rc = file_path(path_out, path_len, repo_dir, commit, file, err))) return rc;
        if (cb) cb(&(hub_progress){.event = HUB_EV_DONE}, ud);
        return 0;
    }
    if (o->offline)
        return strata_err_set(err, STRATA_ENOTFOUND,
                              "%s of %s (revision '%s') is not in the cache %s and HF_HUB_OFFLINE "
                              "is set: unset it where the hub is reachable",
                              file, model, rev, o->cache_dir);
    if ((rc = hub_fetch_create(&f, o, model, repo_dir, rev, cb, ud, err))) return rc;
    char cached[HUB_COMMIT_LEN + 1];
    strata_err probe_err = {0};
    memcpy(cached, commit, sizeof cached);
    if ((rc = hub_fetch_commit(f, file, usable, commit, &probe_err))) {
        /* only "cannot reach a hub" falls back to the cached copy; an answer is final */
        if ((rc != STRATA_ENETWORK && rc != STRATA_EFORMAT) || !usable) {
            if (err) *err = probe_err;
            goto done;
        }
        rc = file_path(path_out, path_len, repo_dir, cached, file, err);
        if (!rc && cb) {
            hub_progress p = {.event = HUB_EV_WARN, .message = probe_err.msg};
            cb(&p, ud);
        }
        goto done;
    }
    if ((rc = hub_cache_mkdirs(repo_dir, err))) goto done;
    hub_cache_tag(o->cache_dir);
    if (strcmp(rev, commit) && (rc = hub_cache_write_ref(repo_dir, rev, commit, err))) goto done;
    if ((rc = hub_fetch_files(f, commit, &file, &required, 1, &present, err))) goto done;
    if ((rc = file_path(path_out, path_len, repo_dir, commit, file, err))) goto done;
    hub_fetch_report_done(f);
done:
    hub_fetch_destroy(f);
    return rc;
}
