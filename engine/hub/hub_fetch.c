/* hub_fetch.c - HEAD and GET of repo files through one curl multi handle, the way
 * huggingface_hub's hf_hub_download does them, several files at a time.
 *
 * Each file is a small state machine: HEAD /<id>/resolve/<rev>/<file> without following
 * a redirect to another origin (the hub answers LFS files with a 302 to the CDN and
 * puts the metadata on that response: X-Repo-Commit, X-Linked-Etag, X-Linked-Size),
 * then, unless the blob is cached, take the per-blob lock that huggingface_hub also
 * takes (.locks/<repo>/<etag>.lock, flock), GET into blobs/<etag>.incomplete (resuming
 * with Range), verify size and the sha256 of LFS content, rename to blobs/<etag> and
 * point the snapshot at it (those disk steps are in hub_blob.c). Transient failures are
 * retried with backoff; the first fatal error stops every transfer and leaves the
 * partial files to resume later. */
#include "engine/hub/hub_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static int cancelled(const hub_fetch *f) { return f->o->cancel && atomic_load(f->o->cancel); }

/* ---- curl callbacks (run inside curl_multi_perform on this thread) ---- */

static void copy_value(char *dst, size_t len, const char *v, size_t n) {
    if (n >= len) n = len - 1;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud) {
    hub_job *j = ud;
    size_t n = size * nitems, len = n;
    while (len && (buf[len - 1] == '\r' || buf[len - 1] == '\n')) len--;
    if (len >= 5 && !strncmp(buf, "HTTP/", 5)) { /* a new response (after a redirect) */
        memset(&j->r, 0, sizeof j->r);
        j->r.linked_size = j->r.content_length = j->r.range_start = -1;
        const char *sp = memchr(buf, ' ', len);
        j->r.status = sp ? strtol(sp + 1, NULL, 10) : 0;
        return n;
    }
    const char *colon = memchr(buf, ':', len);
    if (!colon) return n;
    size_t kn = (size_t)(colon - buf);
    const char *v = colon + 1;
    while (v < buf + len && (*v == ' ' || *v == '\t')) v++;
    size_t vn = (size_t)(buf + len - v);
    char val[256];
    copy_value(val, sizeof val, v, vn);
#define HDR(name) (kn == sizeof(name) - 1 && !strncasecmp(buf, name, kn))
    if (HDR("X-Repo-Commit")) copy_value(j->r.commit, sizeof j->r.commit, v, vn);
    else if (HDR("X-Linked-Etag")) copy_value(j->r.linked_etag, sizeof j->r.linked_etag, v, vn);
    else if (HDR("ETag")) copy_value(j->r.etag, sizeof j->r.etag, v, vn);
    else if (HDR("X-Linked-Size")) j->r.linked_size = strtoll(val, NULL, 10);
    else if (HDR("Content-Length")) j->r.content_length = strtoll(val, NULL, 10);
    else if (HDR("X-Error-Code")) copy_value(j->r.error_code, sizeof j->r.error_code, v, vn);
    else if (HDR("X-Error-Message"))
        copy_value(j->r.error_message, sizeof j->r.error_message, v, vn);
    else if (HDR("Content-Range") && !strncasecmp(val, "bytes ", 6))
        j->r.range_start = strtoll(val + 6, NULL, 10);
#undef HDR
    return n;
}

static size_t on_body(char *buf, size_t size, size_t nitems, void *ud) {
    hub_job *j = ud;
    hub_fetch *f = j->f;
    size_t n = size * nitems;
    long st = 0;
    curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &st);
    if (st != 200 && st != 206) return n; /* an error page: its status decides, not its body */
    if (!j->body_started) {
        j->body_started = 1;
        if (st == 200 && j->written > 0) {
            if (hub_blob_restart(f, j)) return 0; /* the server ignored our Range: start over */
        } else if (st == 206 && j->r.range_start != j->written) {
            j->abort_reason = "the server answered the Range request with another range";
            return 0;
        }
    }
    if (j->size >= 0 && j->written + (int64_t)n > j->size) {
        j->abort_reason = "the server sent more bytes than the file's announced size";
        return 0;
    }
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(j->fd, buf + done, n - done, (off_t)(j->written + (int64_t)done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            j->write_errno = w < 0 ? errno : EIO;
            return 0;
        }
        done += (size_t)w;
    }
    if (j->lfs) hub_sha256_update(&j->sha, buf, n);
    j->written += (int64_t)n;
    f->prog.bytes_done += (int64_t)n;
    f->session_bytes += (int64_t)n;
    return n;
}

static int on_xfer(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    (void)dt, (void)dn, (void)ut, (void)un;
    return cancelled(ud); /* non-zero aborts the transfer with CURLE_ABORTED_BY_CALLBACK */
}

/* ---- transfers ---- */

static int start_transfer(hub_fetch *f, hub_job *j, int head) {
    const char *url = head ? j->url : j->location;
    char line[640];
    CURL *e = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Accept-Encoding: identity"), *t = h;
    /* The token goes to the hub only, never to a CDN (huggingface_hub does the same;
     * curl also drops it itself when a redirect leaves the host). */
    if (t && f->o->token[0] && hub_path_same_origin(url, f->o->endpoint)) {
        snprintf(line, sizeof line, "Authorization: Bearer %s", f->o->token);
        t = curl_slist_append(h, line);
    }
    if (t && !head && j->written > 0) {
        snprintf(line, sizeof line, "Range: bytes=%lld-", (long long)j->written);
        t = curl_slist_append(h, line);
    }
    if (!e || !t) {
        curl_easy_cleanup(e);
        curl_slist_free_all(h);
        return hub_fetch_fail(f, STRATA_ENOMEM, "out of memory starting a transfer");
    }
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L); /* mandatory off the main thread */
    curl_easy_setopt(e, CURLOPT_USERAGENT, "strata/0.1 (huggingface_hub-compatible)");
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 10L);
    /* A stalled connection (no byte for 30 s) counts as a transient failure. */
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, 30L);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, j);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_xfer);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, f);
    if (head) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L); /* redirects are read, see on_head_done */
        curl_easy_setopt(e, CURLOPT_TIMEOUT, 30L);
    } else {
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(e, CURLOPT_MAXREDIRS, 10L);
        curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024); /* fewer, larger writes */
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, j);
        j->attempt_start = j->written;
        j->body_started = 0;
        j->write_errno = 0;
        j->abort_reason = NULL;
    }
    memset(&j->r, 0, sizeof j->r);
    j->r.linked_size = j->r.content_length = j->r.range_start = -1;
    j->easy = e;
    j->hdrs = h;
    if (curl_multi_add_handle(f->multi, e) != CURLM_OK) {
        curl_easy_cleanup(e);
        curl_slist_free_all(h);
        j->easy = NULL;
        j->hdrs = NULL;
        return hub_fetch_fail(f, STRATA_ENETWORK, "cannot start a transfer for %s", j->file);
    }
    f->running++;
    j->state = head ? HUB_J_HEAD_RUN : HUB_J_GET_RUN;
    return 0;
}

/* Schedules another try of the job after a backoff, or fails once the tries without
 * any progress are spent. */

/* Curl failures worth another try: the network, not our configuration. */
static int curl_transient(CURLcode c) {
    switch (c) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_OUT_OF_MEMORY:
    case CURLE_LOGIN_DENIED: return 0;
    default: return 1;
    }
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

/* Maps a hub error response to one sentence saying what to do. */
static void http_error(hub_fetch *f, hub_job *j) {
    const hub_resp *r = &j->r;
    const char *code = r->error_code, *msg = r->error_message;
    const char *sep = msg[0] ? ": " : "";
    int tok = f->o->token[0] != 0;
    if (!strcmp(code, "GatedRepo"))
        hub_fetch_fail(
            f, STRATA_EAUTH,
            tok ? "%s is a gated repo and the token in use has no access to it (HTTP %ld): open "
                  "%s/%s, accept its conditions with the account that owns the token, or set "
                  "HF_TOKEN to a token of an account that has access"
                : "%s is a gated repo (HTTP %ld): open %s/%s, accept its conditions, then set "
                  "HF_TOKEN (or the token file under HF_HOME) to an access token of that account",
            f->repo_id, r->status, f->o->endpoint, f->repo_id);
    else if (!strcmp(code, "RepoNotFound") || (r->status == 401 && !code[0] && !tok))
        hub_fetch_fail(
            f, STRATA_ENOTFOUND,
            "repository %s not found on %s (HTTP %ld%s%s): check the id; if it is private, set "
            "HF_TOKEN to a token that can read it",
            f->repo_id, f->o->endpoint, r->status, sep, msg);
    else if (!strcmp(code, "RevisionNotFound"))
        hub_fetch_fail(f, STRATA_ENOTFOUND,
                       "revision '%s' not found in %s: check the branch, tag or commit id",
                       f->revision, f->repo_id);
    else if (!strcmp(code, "EntryNotFound") || r->status == 404)
        /* a file asked for by name (--gguf-file) is a typo more often than a wrong repo */
        hub_fetch_fail(f, STRATA_ENOTFOUND, "%s has no %s at revision '%s' (HTTP %ld): %s",
                       f->repo_id, j->file, f->revision, r->status,
                       ends_with(j->file, ".gguf")
                           ? "check the name against the repository's file list"
                       : !strcmp(j->file, "config.json")
                           ? "is it a model repo with safetensors weights? (a GGUF repository "
                             "takes --gguf-file NAME)"
                           : "is it a model repo with safetensors weights?");
    else if (r->status == 401 || r->status == 403)
        hub_fetch_fail(
            f, STRATA_EAUTH,
            "%s refused access to %s (HTTP %ld%s%s): check HF_TOKEN or the token file under "
            "HF_HOME",
            f->o->endpoint, f->repo_id, r->status, sep, msg);
    else
        hub_fetch_fail(f, STRATA_ENETWORK, "unexpected HTTP %ld for %s of %s%s%s", r->status,
                       j->file, f->repo_id, sep, msg);
}

static void on_head_done(hub_fetch *f, hub_job *j, CURLcode c) {
    char redirect[HUB_URL_MAX] = "";
    char *loc = NULL;
    if (c == CURLE_OK && curl_easy_getinfo(j->easy, CURLINFO_REDIRECT_URL, &loc) == CURLE_OK && loc)
        snprintf(redirect, sizeof redirect, "%s", loc);
    hub_job_stop_transfer(f, j);
    long st = j->r.status;
    if (c == CURLE_ABORTED_BY_CALLBACK) return; /* cancelled: the loop reports it */
    if (c != CURLE_OK) {
        if (curl_transient(c)) hub_fetch_retry(f, j, HUB_J_HEAD, curl_easy_strerror(c));
        else hub_fetch_fail(f, STRATA_ENETWORK, "%s: %s", j->url, curl_easy_strerror(c));
        return;
    }
    if (st >= 300 && st < 400 && redirect[0] && hub_path_same_origin(j->url, redirect)) {
        /* A renamed repo or a mirror's relative redirect: still the hub, follow it. */
        if (++j->hops > 10) {
            hub_fetch_fail(f, STRATA_ENETWORK, "too many redirects resolving %s of %s", j->file,
                           f->repo_id);
            return;
        }
        snprintf(j->url, sizeof j->url, "%s", redirect);
        j->state = HUB_J_HEAD;
        return;
    }
    if (st == 408 || st == 429 || st >= 500) {
        char why[64];
        snprintf(why, sizeof why, "HTTP %ld", st);
        hub_fetch_retry(f, j, HUB_J_HEAD, why);
        return;
    }
    if (st == 404 && j->optional &&
        (!j->r.error_code[0] || !strcmp(j->r.error_code, "EntryNotFound"))) {
        if (j->r.error_code[0] && hub_path_is_commit(j->r.commit) &&
            !strcmp(j->r.commit, j->commit))
            hub_cache_mark_missing(f->repo_dir, j->commit, j->file);
        j->state = HUB_J_ABSENT;
        f->prog.files_total--;
        return;
    }
    if (!(st >= 200 && st < 300) && !(st >= 300 && st < 400 && redirect[0])) {
        http_error(f, j);
        return;
    }
    /* The metadata, read exactly as huggingface_hub's get_hf_file_metadata does. */
    if (!hub_path_is_commit(j->r.commit)) {
        hub_fetch_fail(
            f, STRATA_EFORMAT,
            "the answer of %s has no X-Repo-Commit header, so it is not a Hugging Face hub: "
            "check HF_ENDPOINT and any proxy in between",
            j->url);
        return;
    }
    strata_err e;
    const char *raw = j->r.linked_etag[0] ? j->r.linked_etag : j->r.etag[0] ? j->r.etag : NULL;
    if (hub_path_normalize_etag(j->etag, sizeof j->etag, raw, &e)) {
        hub_fetch_fail(f, e.code, "%s of %s: %s", j->file, f->repo_id, e.msg);
        return;
    }
    if (j->commit[0] && strcmp(j->commit, j->r.commit)) {
        hub_fetch_fail(f, STRATA_EFORMAT, "%s answered commit %s for a request at commit %s",
                       f->o->endpoint, j->r.commit, j->commit);
        return;
    }
    memcpy(j->commit, j->r.commit, sizeof j->commit);
    j->size = j->r.linked_size >= 0 ? j->r.linked_size : redirect[0] ? -1 : j->r.content_length;
    snprintf(j->location, sizeof j->location, "%s", redirect[0] ? redirect : j->url);
    j->state = HUB_J_META;
}

static void on_get_done(hub_fetch *f, hub_job *j, CURLcode c) {
    long st = 0;
    curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &st);
    hub_job_stop_transfer(f, j);
    char why[128];
    if (j->write_errno) {
        if (j->write_errno == ENOSPC || j->write_errno == EDQUOT)
            hub_fetch_fail(
                f, STRATA_EIO,
                "disk full while writing %s: free some space or set HF_HUB_CACHE to a larger "
                "disk; the %lld bytes written are kept and the next pull resumes them",
                j->incomplete, (long long)j->written);
        else
            hub_fetch_fail(f, STRATA_EIO, "cannot write %s: %s", j->incomplete,
                           strerror_r(j->write_errno, why, sizeof why));
        return;
    }
    if (c == CURLE_ABORTED_BY_CALLBACK) return;
    if (j->abort_reason) {
        /* The data on disk cannot be trusted any more: start the file over, once. */
        if (j->restart_done) {
            unlink(j->incomplete);
            hub_fetch_fail(f, STRATA_EFORMAT, "%s of %s: %s; the partial file was discarded",
                           j->file, f->repo_id, j->abort_reason);
            return;
        }
        j->restart_done = 1;
        if (hub_blob_restart(f, j) == 0) hub_fetch_retry(f, j, HUB_J_GET, j->abort_reason);
        return;
    }
    if (c != CURLE_OK) {
        if (curl_transient(c)) hub_fetch_retry(f, j, HUB_J_GET, curl_easy_strerror(c));
        else hub_fetch_fail(f, STRATA_ENETWORK, "%s: %s", j->location, curl_easy_strerror(c));
        return;
    }
    if (st == 200 || st == 206) {
        j->state = HUB_J_VERIFY;
        return;
    }
    snprintf(why, sizeof why, "HTTP %ld", st);
    if (st == 416) { /* our partial file is longer than the content: start over */
        if (hub_blob_restart(f, j) == 0) hub_fetch_retry(f, j, HUB_J_GET, why);
    } else if ((st == 401 || st == 403 || st == 404 || st == 410) && !j->rehead_done &&
               !hub_path_same_origin(j->location, f->o->endpoint)) {
        /* A signed CDN URL expires: ask the hub for a fresh one, once. */
        j->rehead_done = 1;
        j->state = HUB_J_HEAD;
    } else if (st == 408 || st == 429 || st >= 500) {
        hub_fetch_retry(f, j, HUB_J_GET, why);
    } else {
        http_error(f, j);
    }
}

/* ---- per-file steps outside curl ---- */

static void job_init(hub_fetch *f, hub_job *j, const char *file, int optional, const char *rev) {
    char qrev[1024], qfile[3200];
    memset(j, 0, sizeof *j);
    j->f = f;
    j->file = file;
    j->optional = optional;
    j->fd = j->lock_fd = -1;
    j->size = -1;
    j->state = HUB_J_HEAD;
    if (hub_path_quote(qrev, sizeof qrev, rev, 0) || hub_path_quote(qfile, sizeof qfile, file, 1) ||
        hub_path_fmt(j->url, sizeof j->url, "%s/%s/resolve/%s/%s", f->o->endpoint, f->repo_id, qrev,
                     qfile))
        hub_fetch_fail(f, STRATA_ERANGE, "URL too long for %s", file);
}

/* Runs the batch until every job is done or absent, or one failed. With probe set, a
 * job stops once its metadata is known. */
static int fetch_run(hub_fetch *f, hub_job *jobs, int n, int probe, strata_err *err) {
    f->jobs = jobs;
    f->n_jobs = n;
    while (!f->failed) {
        if (cancelled(f)) {
            hub_fetch_fail(
                f, STRATA_ECANCELLED,
                "download of %s cancelled; partial files are kept and the next pull resumes them",
                f->repo_id);
            break;
        }
        double now = strata_now(), wait = 0.1;
        int open = 0;
        for (int i = 0; i < n && !f->failed; i++) {
            hub_job *j = &jobs[i];
            if (j->state == HUB_J_WAIT && now >= j->wake_at) j->state = j->after_wait;
            if (j->state == HUB_J_WAIT && j->wake_at - now < wait) wait = j->wake_at - now;
            if (j->state == HUB_J_META && probe) j->state = HUB_J_DONE;
            if (j->state == HUB_J_META) hub_blob_meta(f, j);
            if (j->state == HUB_J_LOCK) hub_blob_lock(f, j);
            if (j->state == HUB_J_VERIFY) hub_blob_verify(f, j);
            if (j->state == HUB_J_HEAD && f->running < f->max_parallel) start_transfer(f, j, 1);
            if (j->state == HUB_J_GET && f->running < f->max_parallel) start_transfer(f, j, 0);
            open += j->state != HUB_J_DONE && j->state != HUB_J_ABSENT;
        }
        if (f->failed || !open) break;
        int still = 0, finished = 0;
        curl_multi_perform(f->multi, &still);
        CURLMsg *m;
        while (!f->failed && (m = curl_multi_info_read(f->multi, &still))) {
            if (m->msg != CURLMSG_DONE) continue;
            finished = 1;
            hub_job *j = NULL;
            for (int i = 0; i < n && !j; i++)
                if (jobs[i].easy == m->easy_handle) j = &jobs[i];
            if (!j) continue;
            CURLcode c = m->data.result; /* m is invalid once the handle is removed */
            if (j->state == HUB_J_HEAD_RUN) on_head_done(f, j, c);
            else on_get_done(f, j, c);
        }
        if (f->failed) break;
        if (strata_now() - f->last_tick >= 0.1) hub_fetch_emit(f, HUB_EV_TICK, NULL, NULL);
        /* A finished transfer has a next step to take now, not after the poll. */
        if (!finished) curl_multi_poll(f->multi, NULL, 0, (int)(wait * 1000) + 1, NULL);
    }
    for (int i = 0; i < n; i++) {
        /* Stopped downloads keep their bytes for the next pull; empty ones are clutter. */
        if (jobs[i].fd >= 0 && jobs[i].written == 0) unlink(jobs[i].incomplete);
        hub_fetch_release(f, &jobs[i]);
    }
    f->jobs = NULL;
    f->n_jobs = 0;
    if (f->failed) {
        f->failed = 0;
        if (err) *err = f->ferr;
        return f->ferr.code;
    }
    return 0;
}

int hub_fetch_create(hub_fetch **out, const hub_opts *o, const char *repo_id, const char *repo_dir,
                     const char *revision, hub_progress_fn cb, void *ud, strata_err *err) {
    pthread_once(&curl_once, curl_init_once);
    hub_fetch *f = calloc(1, sizeof *f);
    if (!f) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    f->o = o;
    f->cb = cb;
    f->ud = ud;
    f->max_parallel = o->max_parallel > 0 ? o->max_parallel : 8;
    f->max_retries = o->max_retries > 0 ? o->max_retries : 5;
    f->t0 = f->last_tick = strata_now();
    if (hub_path_fmt(f->repo_id, sizeof f->repo_id, "%s", repo_id) ||
        hub_path_fmt(f->revision, sizeof f->revision, "%s", revision) ||
        hub_path_fmt(f->repo_dir, sizeof f->repo_dir, "%s", repo_dir) ||
        hub_path_repo_folder(f->folder, sizeof f->folder, repo_id)) {
        free(f);
        return strata_err_set(err, STRATA_ERANGE, "repo id or cache path too long");
    }
    if (!(f->multi = curl_multi_init())) {
        free(f);
        return strata_err_set(err, STRATA_ENOMEM, "cannot create a curl multi handle");
    }
    /* One connection per transfer rather than HTTP/2 streams on one: parallel shards
     * then get parallel TCP windows, which is what makes them faster than one. */
    curl_multi_setopt(f->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
    *out = f;
    return 0;
}

void hub_fetch_destroy(hub_fetch *f) {
    if (!f) return;
    curl_multi_cleanup(f->multi);
    free(f);
}

int hub_fetch_commit(hub_fetch *f, const char *probe_file, int fast,
                     char commit[HUB_COMMIT_LEN + 1], strata_err *err) {
    hub_job *j = &f->probe;
    int retries = f->max_retries;
    job_init(f, j, probe_file, 0, f->revision);
    if (fast) f->max_retries = 0;
    int rc = fetch_run(f, j, 1, 1, err);
    f->max_retries = retries;
    if (rc) return rc;
    f->have_probe = 1;
    memcpy(commit, j->commit, HUB_COMMIT_LEN + 1);
    return 0;
}

int hub_fetch_files(hub_fetch *f, const char *commit, const char *const *files, const int *optional,
                    int n, int *present, strata_err *err) {
    hub_job *jobs = calloc((size_t)n, sizeof *jobs);
    if (!jobs) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        job_init(f, &jobs[i], files[i], optional[i], commit);
        memcpy(jobs[i].commit, commit, HUB_COMMIT_LEN + 1);
        if (f->have_probe && !strcmp(files[i], f->probe.file) && !strcmp(commit, f->probe.commit)) {
            /* Already HEADed by hub_fetch_commit: no second request. */
            memcpy(jobs[i].etag, f->probe.etag, sizeof jobs[i].etag);
            /* Content served by the hub itself is fetched at the commit, not at the
             * branch, which may have moved since; a CDN URL is content-addressed. */
            if (!strcmp(f->probe.location, f->probe.url))
                memcpy(jobs[i].location, jobs[i].url, sizeof jobs[i].location);
            else memcpy(jobs[i].location, f->probe.location, sizeof jobs[i].location);
            jobs[i].size = f->probe.size;
            jobs[i].state = HUB_J_META;
        }
    }
    f->prog.files_total += n;
    int rc = fetch_run(f, jobs, n, 0, err);
    for (int i = 0; rc == 0 && i < n; i++) present[i] = jobs[i].state == HUB_J_DONE;
    free(jobs);
    return rc;
}

void hub_fetch_report_done(hub_fetch *f) { hub_fetch_emit(f, HUB_EV_DONE, NULL, NULL); }
