/* hub_blob.c - the disk side of a download: the per-blob lock huggingface_hub also
 * takes (.locks/<repo>/<etag>.lock, flock), the partial file blobs/<etag>.incomplete
 * (resumed where it stopped, hashed again when it is resumed), the checks of size and
 * sha256, and the atomic rename and snapshot link that make a file visible only once
 * it is known good. */
#include "engine/hub/hub_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

int hub_blob_restart(hub_fetch *f, hub_job *j) {
    /* Bytes past what is rewritten would survive into the blob: truncation must work. */
    if (ftruncate(j->fd, 0) != 0) return hub_fetch_fail_sys(f, "cannot truncate", j->incomplete);
    f->prog.bytes_done -= j->written;
    j->written = j->attempt_start = j->resumed_from = 0;
    if (hub_sha256_init(&j->sha))
        return hub_fetch_fail(f, STRATA_ENOMEM, "out of memory for a hash");
    return 0;
}

static void file_done(hub_fetch *f, hub_job *j) {
    j->state = HUB_J_DONE;
    f->prog.files_done++;
    hub_fetch_emit(f, HUB_EV_FILE_DONE, j->file, NULL);
}

static int blob_path(hub_fetch *f, const hub_job *j, char *out, size_t len) {
    return hub_path_fmt(out, len, "%s/blobs/%s", f->repo_dir, j->etag);
}

static void link_done(hub_fetch *f, hub_job *j) {
    strata_err e;
    if (hub_cache_link(f->repo_dir, j->commit, j->file, j->etag, &e)) {
        hub_fetch_fail(f, e.code, "%s", e.msg);
        return;
    }
    hub_fetch_release(f, j);
    file_done(f, j);
}

void hub_blob_meta(hub_fetch *f, hub_job *j) {
    char blob[HUB_PATH_MAX];
    struct stat st;
    j->lfs = hub_path_is_sha256(j->etag);
    if (hub_cache_file_state(f->repo_dir, j->commit, j->file) == HUB_FILE_PRESENT) {
        file_done(f, j);
    } else if (blob_path(f, j, blob, sizeof blob)) {
        hub_fetch_fail(f, STRATA_ERANGE, "cache path too long in %s", f->repo_dir);
    } else if (stat(blob, &st) == 0 && S_ISREG(st.st_mode)) {
        link_done(f, j); /* same content already cached for another revision */
    } else {
        j->state = HUB_J_LOCK;
    }
}

/* Bytes the running downloads other than j still need. */
static int64_t others_remaining(const hub_fetch *f, const hub_job *j) {
    int64_t sum = 0;
    for (int i = 0; i < f->n_jobs; i++) {
        const hub_job *o = &f->jobs[i];
        if (o != j && o->fd >= 0 && o->size > o->written) sum += o->size - o->written;
    }
    return sum;
}

static int hash_existing(hub_fetch *f, hub_job *j) {
    enum { CHUNK = 1 << 20 };
    char *buf = malloc(CHUNK);
    if (!buf) return hub_fetch_fail(f, STRATA_ENOMEM, "out of memory hashing %s", j->incomplete);
    for (int64_t off = 0; off < j->written;) {
        ssize_t n = pread(j->fd, buf, CHUNK, (off_t)off);
        if (n <= 0) {
            free(buf);
            return hub_fetch_fail_sys(f, "cannot read", j->incomplete);
        }
        hub_sha256_update(&j->sha, buf, (size_t)n);
        off += n;
    }
    free(buf);
    return 0;
}

void hub_blob_lock(hub_fetch *f, hub_job *j) {
    char p[HUB_PATH_MAX], blob[HUB_PATH_MAX];
    strata_err e;
    struct stat st;
    if (j->fd >= 0) { /* back from a fresh HEAD: everything is open already */
        j->state = HUB_J_GET;
        return;
    }
    if (j->lock_fd < 0) {
        if (hub_path_fmt(p, sizeof p, "%s/.locks/%s/%s.lock", f->o->cache_dir, f->folder,
                         j->etag)) {
            hub_fetch_fail(f, STRATA_ERANGE, "lock path too long in %s", f->repo_dir);
            return;
        }
        if (hub_cache_mkparent(p, &e)) {
            hub_fetch_fail(f, e.code, "%s", e.msg);
            return;
        }
        if ((j->lock_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0666)) < 0) {
            hub_fetch_fail_sys(f, "cannot open lock", p);
            return;
        }
    }
    if (flock(j->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) hub_fetch_fail_sys(f, "cannot lock the blob", j->etag);
        return; /* another download of this blob runs (here or in another process): wait */
    }
    blob_path(f, j, blob, sizeof blob);
    if (stat(blob, &st) == 0 && S_ISREG(st.st_mode)) { /* it finished while we waited */
        link_done(f, j);
        return;
    }
    hub_path_fmt(j->incomplete, sizeof j->incomplete, "%s.incomplete", blob);
    if (hub_cache_mkparent(blob, &e)) {
        hub_fetch_fail(f, e.code, "%s", e.msg);
        return;
    }
    if ((j->fd = open(j->incomplete, O_RDWR | O_CREAT | O_CLOEXEC, 0666)) < 0 ||
        fstat(j->fd, &st)) {
        hub_fetch_fail_sys(f, "cannot open", j->incomplete);
        return;
    }
    j->written = st.st_size;
    if (j->size >= 0 && j->written > j->size) j->written = 0; /* not ours: start over */
    if (j->written == 0 && st.st_size > 0 && ftruncate(j->fd, 0) != 0) {
        hub_fetch_fail_sys(f, "cannot truncate", j->incomplete);
        return;
    }
    if (hub_sha256_init(&j->sha)) {
        hub_fetch_fail(f, STRATA_ENOMEM, "out of memory for a hash");
        return;
    }
    if (j->lfs && j->written > 0 && hash_existing(f, j)) return;
    j->resumed_from = j->written;
    if (!j->counted) {
        j->counted = 1;
        f->prog.bytes_total += j->size > 0 ? j->size : 0;
        f->prog.bytes_done += j->written;
    }
    struct statvfs vs;
    if (j->size >= 0 && fstatvfs(j->fd, &vs) == 0) {
        int64_t avail = (int64_t)vs.f_bavail * (int64_t)vs.f_frsize;
        int64_t need = j->size - j->written + others_remaining(f, j);
        if (avail < need) {
            hub_fetch_fail(
                f, STRATA_EIO,
                "not enough disk space for %s: %lld more bytes are needed in %s/blobs but only "
                "%lld are free; free some space or set HF_HUB_CACHE to a larger disk",
                j->file, (long long)need, f->repo_dir, (long long)avail);
            return;
        }
    }
    j->state = j->size >= 0 && j->written == j->size ? HUB_J_VERIFY : HUB_J_GET;
}

void hub_blob_verify(hub_fetch *f, hub_job *j) {
    char why[200], hex[65], blob[HUB_PATH_MAX];
    if (j->size >= 0 && j->written != j->size) {
        snprintf(why, sizeof why, "the transfer ended after %lld of %lld bytes",
                 (long long)j->written, (long long)j->size);
        hub_fetch_retry(f, j, HUB_J_GET, why);
        return;
    }
    if (j->lfs) {
        hub_sha256_hex(&j->sha, hex);
        if (strcmp(hex, j->etag)) {
            if (j->resumed_from > 0 && !j->restart_done) {
                /* The bad bytes may be an old partial file's: one fresh download decides. */
                j->restart_done = 1;
                if (hub_blob_restart(f, j) == 0)
                    hub_fetch_retry(f, j, HUB_J_GET,
                                    "sha256 mismatch after resuming a partial file");
                return;
            }
            unlink(j->incomplete);
            hub_fetch_fail(f, STRATA_EFORMAT,
                           "%s of %s is corrupt: its sha256 is %s, the hub says %s; the download "
                           "was discarded, run the command again (if it repeats, the server or a "
                           "proxy alters the file)",
                           j->file, f->repo_id, hex, j->etag);
            return;
        }
    }
    /* On disk before it is visible under its final name: a crash never leaves a
     * truncated blob that looks complete. */
    struct stat st;
    if (fstat(j->fd, &st) != 0 || st.st_size != j->written) {
        hub_fetch_fail(f, STRATA_EIO, "%s holds %lld bytes, %lld were written", j->incomplete,
                       (long long)st.st_size, (long long)j->written);
        return;
    }
    blob_path(f, j, blob, sizeof blob);
    if (fdatasync(j->fd) != 0 || rename(j->incomplete, blob) != 0) {
        hub_fetch_fail_sys(f, "cannot store", blob);
        return;
    }
    link_done(f, j);
}
