/* hub_job.c - what both sides of a download do to a job and to the session: record
 * the first fatal error, schedule a retry with backoff, report progress, and release a
 * job's transfer, files and hash. hub_fetch.c (the network side) and hub_blob.c (the
 * disk side) call these; this file calls neither. */
#include "engine/hub/hub_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Records the first fatal error; later ones are consequences and dropped. */
int hub_fetch_fail(hub_fetch *f, int code, const char *fmt, ...) {
    if (f->failed) return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->ferr.msg, sizeof f->ferr.msg, fmt, ap);
    va_end(ap);
    f->ferr.code = code;
    f->failed = 1;
    return code;
}

int hub_fetch_fail_sys(hub_fetch *f, const char *what, const char *path) {
    char b[128];
    return hub_fetch_fail(f, STRATA_EIO, "%s %s: %s", what, path, strerror_r(errno, b, sizeof b));
}

void hub_fetch_emit(hub_fetch *f, int ev, const char *file, const char *msg) {
    double now = strata_now();
    if (f->rate_n == 0 || now - f->rate_t[(f->rate_n - 1) % HUB_RATE_SAMPLES] >= 0.5) {
        f->rate_t[f->rate_n % HUB_RATE_SAMPLES] = now;
        f->rate_b[f->rate_n % HUB_RATE_SAMPLES] = f->session_bytes;
        f->rate_n++;
    }
    /* Rate over the last ~5 s of samples: steady enough to read, quick to follow. */
    int oldest = f->rate_n > HUB_RATE_SAMPLES ? f->rate_n % HUB_RATE_SAMPLES : 0;
    double dt = now - f->rate_t[oldest];
    if (dt > 0.2) f->prog.rate = (double)(f->session_bytes - f->rate_b[oldest]) / dt;
    f->prog.event = ev;
    f->prog.file = file;
    f->prog.message = msg;
    f->prog.elapsed = now - f->t0;
    f->last_tick = now;
    if (f->cb) f->cb(&f->prog, f->ud);
}

void hub_job_stop_transfer(hub_fetch *f, hub_job *j) {
    if (j->easy) {
        curl_multi_remove_handle(f->multi, j->easy);
        curl_easy_cleanup(j->easy);
        f->running--;
    }
    curl_slist_free_all(j->hdrs);
    j->easy = NULL;
    j->hdrs = NULL;
}

void hub_fetch_release(hub_fetch *f, hub_job *j) {
    hub_job_stop_transfer(f, j);
    if (j->fd >= 0) close(j->fd);
    if (j->lock_fd >= 0) close(j->lock_fd); /* closing drops the flock */
    j->fd = j->lock_fd = -1;
    hub_sha256_free(&j->sha);
}

void hub_fetch_retry(hub_fetch *f, hub_job *j, int next, const char *why) {
    if (j->written > j->attempt_start) j->attempts = 0; /* bytes arrived: not stuck */
    if (++j->attempts > f->max_retries) {
        if (next == HUB_J_HEAD)
            hub_fetch_fail(
                f, STRATA_ENETWORK,
                "cannot get %s of %s from %s after %d attempts (%s): check the network and "
                "HF_ENDPOINT, or set HF_HUB_OFFLINE=1 to use only the cache",
                j->file, f->repo_id, f->o->endpoint, j->attempts, why);
        else
            hub_fetch_fail(
                f, STRATA_ENETWORK,
                "download of %s interrupted after %d attempts (%s); %lld of %lld bytes are kept "
                "in %s and running the same command again resumes them",
                j->file, j->attempts, why, (long long)j->written, (long long)j->size,
                j->incomplete);
        return;
    }
    double delay = 0.5 * (double)(1 << (j->attempts - 1 < 4 ? j->attempts - 1 : 4));
    char msg[400];
    snprintf(msg, sizeof msg, "%s; retry %d of %d in %.1f s", why, j->attempts, f->max_retries,
             delay);
    j->state = HUB_J_WAIT;
    j->after_wait = next;
    j->wake_at = strata_now() + delay;
    hub_fetch_emit(f, HUB_EV_RETRY, j->file, msg);
}
