/* hub_internal.h - what the hub_*.c files share: pure path and name rules
 * (hub_path.c), cache-tree operations (hub_cache.c), the transfer engine on curl multi
 * (hub_fetch.c) and SHA-256 (hub_sha256.c). Not for other rooms: they call hub.h. */
#ifndef STRATA_HUB_INTERNAL_H
#define STRATA_HUB_INTERNAL_H

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/base/clock.h"
#include "engine/base/err.h"
#include "engine/hub/hub.h"

#define HUB_URL_MAX 8192
#define HUB_ETAG_MAX 129 /* 128 characters and the NUL; sha256 is 64 */
#define HUB_COMMIT_LEN 40

/* ---- hub_path.c: pure functions of strings, no I/O ---- */

/* 0 when id is "name" or "namespace/name" as huggingface_hub's validate_repo_id accepts
 * them ([A-Za-z0-9_.-], 1-96 per part, no "--" or "..", starts and ends with a letter,
 * digit or '_', no ".git" suffix); else STRATA_EINVALID with the reason. */
int hub_path_check_repo_id(const char *id, strata_err *err);

/* 0 when rev can name refs/<rev> inside the cache: non-empty, at most 255 bytes, no
 * "." / ".." / empty component, not absolute, no '\\' or control characters. */
int hub_path_check_revision(const char *rev, strata_err *err);

/* 0 when file is a safe repo-relative path (same rules as a revision, 1024 bytes). */
int hub_path_check_file(const char *file, strata_err *err);

/* 1 when s is a full commit id: exactly 40 lowercase hex digits. */
int hub_path_is_commit(const char *s);

/* 1 when s is exactly 64 lowercase hex digits (an LFS etag is the content's sha256). */
int hub_path_is_sha256(const char *s);

/* "models--org--name" for "org/name". 0, or STRATA_ERANGE when it does not fit. */
int hub_path_repo_folder(char *out, size_t len, const char *id);

/* The etag as a blob name, exactly as huggingface_hub's _normalize_etag does it
 * (lstrip of 'W' and '/' characters, then strip of '"'), then checked to be a safe file
 * name ([A-Za-z0-9._-], not starting with '.', 1-128 bytes). STRATA_EFORMAT if not. */
int hub_path_normalize_etag(char *out, size_t len, const char *raw, strata_err *err);

/* The relative symlink target from snapshots/<commit>/<file> to blobs/<etag>:
 * "../../blobs/<etag>" plus one "../" per directory level of file. */
int hub_path_link_target(char *out, size_t len, const char *file, const char *etag);

/* Percent-encodes s for a URL path (RFC 3986 unreserved kept; '/' kept when
 * keep_slash, as Python's quote(s) and quote(s, safe="") do). 0 or STRATA_ERANGE. */
int hub_path_quote(char *out, size_t len, const char *s, int keep_slash);

/* 1 when both URLs have the same scheme, host (case-insensitive) and port (explicit or
 * the scheme's default). Auth headers only go to the endpoint's origin. */
int hub_path_same_origin(const char *a, const char *b);

/* snprintf that reports truncation: 0, or STRATA_ERANGE. */
int hub_path_fmt(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- hub_cache.c: the cache tree on disk ---- */

enum { HUB_FILE_UNKNOWN, HUB_FILE_PRESENT, HUB_FILE_MISSING };

/* repo_dir = cache_dir/models--org--name for the hub id model at revision rev, both checked
 * (hub_path_check_repo_id, hub_path_check_revision). 0, STRATA_EINVALID naming what is
 * wrong, or STRATA_ERANGE when the path does not fit. */
int hub_cache_repo_dir(char *repo_dir, size_t len, const char *cache_dir, const char *model,
                       const char *rev, strata_err *err);

/* mkdir -p of dir (mode 0777 less umask). */
int hub_cache_mkdirs(const char *dir, strata_err *err);
/* mkdir -p of the directory part of path. */
int hub_cache_mkparent(const char *path, strata_err *err);
/* Writes CACHEDIR.TAG into cache_dir when absent (as huggingface_hub does); best effort. */
void hub_cache_tag(const char *cache_dir);
/* Reads refs/<rev> of repo_dir into commit. 0, or STRATA_ENOTFOUND when absent or not a
 * commit id. */
int hub_cache_read_ref(const char *repo_dir, const char *rev, char commit[HUB_COMMIT_LEN + 1]);
/* Writes refs/<rev> = commit atomically (temporary file + rename), without newline. */
int hub_cache_write_ref(const char *repo_dir, const char *rev, const char *commit, strata_err *err);
/* Points snapshots/<commit>/<file> at blobs/<etag> with a relative symlink, replacing
 * whatever was there. The blob must exist. */
int hub_cache_link(const char *repo_dir, const char *commit, const char *file, const char *etag,
                   strata_err *err);
/* Records that file does not exist at commit (.no_exist/<commit>/<file>); best effort. */
void hub_cache_mark_missing(const char *repo_dir, const char *commit, const char *file);
/* HUB_FILE_PRESENT when snapshots/<commit>/<file> resolves to a regular file,
 * HUB_FILE_MISSING when .no_exist records it, else HUB_FILE_UNKNOWN. */
int hub_cache_file_state(const char *repo_dir, const char *commit, const char *file);
/* The distinct shard names of a model.safetensors.index.json's weight_map, in order
 * of first appearance, each checked with hub_path_check_file. Caller frees with
 * hub_cache_free_list. */
int hub_cache_read_index(const char *path, char ***out, int *n_out, strata_err *err);
void hub_cache_free_list(char **list, int n);

/* ---- hub_sha256.c: libcrypto's SHA-256 ---- */

typedef struct hub_sha256 {
    struct evp_md_ctx_st *ctx; /* EVP_MD_CTX, created by the first init */
} hub_sha256;

/* Starts (or restarts) a hash: 0, or STRATA_ENOMEM. A zeroed hub_sha256 is ready. */
int hub_sha256_init(hub_sha256 *s);
void hub_sha256_update(hub_sha256 *s, const void *data, size_t n);
/* Finishes s (init it again before reuse) and writes 64 hex digits + NUL. */
void hub_sha256_hex(hub_sha256 *s, char out[65]);
void hub_sha256_free(hub_sha256 *s);

/* ---- hub_fetch.c: HEAD + GET of repo files through curl multi ---- */

typedef struct hub_fetch hub_fetch;

/* repo_id and revision are copied. cb may be NULL. Caller frees with hub_fetch_destroy. */
int hub_fetch_create(hub_fetch **out, const hub_opts *o, const char *repo_id, const char *repo_dir,
                     const char *revision, hub_progress_fn cb, void *ud, strata_err *err);
void hub_fetch_destroy(hub_fetch *f);

/* One HEAD of probe_file at the revision: returns the commit the revision points to
 * (X-Repo-Commit) and raises the repo-level errors (not found, gated, no token). With
 * fast set, a transient failure is not retried (the caller has a cache to fall back on). */
int hub_fetch_commit(hub_fetch *f, const char *probe_file, int fast,
                     char commit[HUB_COMMIT_LEN + 1], strata_err *err);

/* Brings files[0..n) into snapshots/<commit>/ (in parallel). An optional file the hub
 * does not have is recorded in .no_exist and gets present[i] = 0; a required one is an
 * error. present[i] = 1 for the others. */
int hub_fetch_files(hub_fetch *f, const char *commit, const char *const *files, const int *optional,
                    int n, int *present, strata_err *err);

/* Reports HUB_EV_DONE through the callback. */
void hub_fetch_report_done(hub_fetch *f);

/* ---- shared by hub_fetch.c (the network side) and hub_blob.c (the disk side); the
 * reporting and retry functions live in hub_job.c ---- */

/* A file's steps: HEAD (running), metadata known, waiting for the blob lock, GET
 * (running), verify, backoff before a retry, then done or absent on the hub. */
enum {
    HUB_J_HEAD,
    HUB_J_HEAD_RUN,
    HUB_J_META,
    HUB_J_LOCK,
    HUB_J_GET,
    HUB_J_GET_RUN,
    HUB_J_VERIFY,
    HUB_J_WAIT,
    HUB_J_DONE,
    HUB_J_ABSENT
};

typedef struct hub_resp { /* what the header callback keeps of the last response */
    long status;
    char commit[64], linked_etag[160], etag[160];
    int64_t linked_size, content_length, range_start;
    char error_code[64], error_message[200];
} hub_resp;

typedef struct hub_job {
    hub_fetch *f;
    const char *file; /* borrowed from the caller's list */
    int optional, state, after_wait, hops, attempts, lfs;
    int rehead_done, restart_done, counted, body_started, write_errno;
    const char *abort_reason;
    double wake_at;
    char url[HUB_URL_MAX];      /* resolve URL being HEADed */
    char location[HUB_URL_MAX]; /* where the content is (the CDN for LFS files) */
    char commit[HUB_COMMIT_LEN + 1], etag[HUB_ETAG_MAX];
    int64_t size; /* -1 until known */
    char incomplete[HUB_PATH_MAX];
    int fd, lock_fd;
    int64_t written, attempt_start, resumed_from;
    hub_sha256 sha;
    CURL *easy;
    struct curl_slist *hdrs;
    hub_resp r;
} hub_job;

#define HUB_RATE_SAMPLES 10

struct hub_fetch {
    const hub_opts *o;
    char repo_id[256], revision[256], folder[320];
    char repo_dir[HUB_PATH_MAX];
    hub_progress_fn cb;
    void *ud;
    CURLM *multi;
    int max_parallel, max_retries, running;
    hub_job *jobs; /* the batch being run, for the disk-space sum */
    int n_jobs;
    hub_job probe; /* metadata of the file hub_fetch_commit probed */
    int have_probe;
    hub_progress prog;
    double t0, last_tick, rate_t[HUB_RATE_SAMPLES];
    int64_t session_bytes, rate_b[HUB_RATE_SAMPLES];
    int rate_n;
    int failed;
    strata_err ferr;
};

/* Records the first fatal error of a run (later ones are its consequences). */
int hub_fetch_fail(hub_fetch *f, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int hub_fetch_fail_sys(hub_fetch *f, const char *what, const char *path);
/* Calls the progress callback with f's counters. */
void hub_fetch_emit(hub_fetch *f, int ev, const char *file, const char *msg);
/* Schedules another try of j in state next after a backoff, or fails once the tries
 * without progress are spent. why: what went wrong, for the message. */
void hub_fetch_retry(hub_fetch *f, hub_job *j, int next, const char *why);
/* Stops j's transfer and closes its partial file and lock. */
void hub_fetch_release(hub_fetch *f, hub_job *j);
/* Ends j's curl transfer (if any), keeping its files. */
void hub_job_stop_transfer(hub_fetch *f, hub_job *j);
/* CLOCK_MONOTONIC seconds. */

/* hub_blob.c: the blob store side of a job. meta: metadata known -> done (cached) or
 * HUB_J_LOCK; lock: take the blob lock, open and check the partial file -> HUB_J_GET or
 * HUB_J_VERIFY; verify: size and sha256, then rename and link -> done; restart: drop
 * the partial file's bytes. */
void hub_blob_meta(hub_fetch *f, hub_job *j);
void hub_blob_lock(hub_fetch *f, hub_job *j);
void hub_blob_verify(hub_fetch *f, hub_job *j);
int hub_blob_restart(hub_fetch *f, hub_job *j);

#endif
