/* hub.h - models by name: a local directory, or a Hugging Face hub id downloaded into
 * the standard hub cache.
 *
 * The cache is the one huggingface_hub writes ($HF_HUB_CACHE/models--org--name/ with
 * blobs/<etag>, refs/<revision> and snapshots/<commit>/<file> relative symlinks), so a
 * model fetched by Python tools is used without a request and ours is found by them.
 * Downloads go to blobs/<etag>.incomplete, resume with Range requests, are checked
 * (size; sha256 for LFS files) and only then renamed into place: a snapshot never
 * holds a partial or corrupt file. This module is not the loader: it only returns the
 * directory that holds config.json, the tokenizer files and the safetensors. */
#ifndef STRATA_HUB_H
#define STRATA_HUB_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"

#define HUB_PATH_MAX 4096

/* Where and how to fetch. Fill with hub_opts_from_env, then override fields. */
typedef struct hub_opts {
    char endpoint[512];           /* HF_ENDPOINT without trailing '/'; default huggingface.co */
    char cache_dir[HUB_PATH_MAX]; /* HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/... */
    char token[512];              /* HF_TOKEN, else the token file under HF_HOME; "" = anonymous */
    int offline;                  /* HF_HUB_OFFLINE=1: the cache only, no request at all */
    int refresh;                  /* ask the hub even when a complete snapshot is cached */
    int max_parallel;             /* concurrent transfers; 0 = 8 */
    int max_retries;              /* attempts per file without progress; 0 = 5 */
    const atomic_int *cancel;     /* borrowed; when set non-zero, hub_resolve stops soon */
} hub_opts;

/* Fills o from the environment (HF_ENDPOINT, HF_HUB_CACHE / HUGGINGFACE_HUB_CACHE,
 * HF_HOME, XDG_CACHE_HOME, HOME, HF_TOKEN, HF_TOKEN_PATH, HF_HUB_OFFLINE). Reads
 * getenv and the token file, so call it from the main thread before starting others. */
int hub_opts_from_env(hub_opts *o, strata_err *err);

enum {
    HUB_EV_TICK,      /* periodic, at most ~10 per second */
    HUB_EV_FILE_DONE, /* a file is in the snapshot (downloaded or already there) */
    HUB_EV_RETRY,     /* a transient failure; message says why, the file is retried */
    HUB_EV_WARN,      /* message: the hub is unreachable, the cached snapshot is used */
    HUB_EV_DONE       /* everything is in place */
};

typedef struct hub_progress {
    int event;           /* HUB_EV_* */
    const char *file;    /* repo path of the file the event is about, or NULL */
    const char *message; /* HUB_EV_RETRY, HUB_EV_WARN: the reason; else NULL */
    int files_done;      /* files in the snapshot so far */
    int files_total;     /* files known to be needed (grows once an index is read) */
    int64_t bytes_done;  /* bytes on disk of the files being downloaded */
    int64_t bytes_total; /* their total size */
    double rate;         /* bytes per second over the last seconds */
    double elapsed;      /* seconds since hub_resolve started */
} hub_progress;

/* Called on the thread that runs hub_resolve; p is valid during the call only. */
typedef void (*hub_progress_fn)(const hub_progress *p, void *ud);

/* Resolves model into a directory and writes its path to dir_out.
 * model: an existing local directory (returned as is), or a hub id ("org/name" or
 * "name"). revision: branch, tag or 40-hex commit; NULL or "" = "main".
 * Files fetched: config.json, generation_config.json, tokenizer.json, tokenizer.model,
 * tokenizer_config.json, chat_template.jinja where present, and model.safetensors or
 * model.safetensors.index.json with every shard it names. A snapshot whose files are
 * all cached (or recorded missing in .no_exist) is returned without a request unless
 * o->refresh; when the hub cannot be reached, a snapshot that has config.json and the
 * weights is used as it is (HUB_EV_WARN says so), as huggingface_hub does. Errors: STRATA_EAUTH
 * (gated/private, token missing or refused), STRATA_ENOTFOUND (repo, revision or file),
 * STRATA_ENETWORK (retries exhausted; the partial file is kept and the next call resumes it),
 * STRATA_EIO (disk full, ...), STRATA_EFORMAT (corrupt content: discarded), STRATA_ECANCELLED. The
 * message says what to do. Thread: any; no global state besides libcurl's one-time init. */
int hub_resolve(const hub_opts *o, const char *model, const char *revision, char *dir_out,
                size_t dir_len, hub_progress_fn cb, void *ud, strata_err *err);

/* One file of a hub repository into the cache (hub_file.c): a GGUF repository's one
 * .gguf, which hub_resolve cannot fetch (it probes config.json and wants safetensors).
 * Writes the file's path in the snapshot to path_out. The cache, offline mode, the
 * progress callback and the errors are hub_resolve's. A model that is a local directory
 * gives DIR/file without a request (STRATA_ENOTFOUND when that is not a file); a local
 * file is STRATA_EINVALID (it is the model itself). Thread: any. */
int hub_resolve_file(const hub_opts *o, const char *model, const char *revision, const char *file,
                     char *path_out, size_t path_len, hub_progress_fn cb, void *ud,
                     strata_err *err);

/* One human line for p: "3/7 files, 1.2 GB of 2.7 GB (44%), 85.3 MB/s, ETA 18 s". */
void hub_progress_format(const hub_progress *p, char *buf, size_t len);

#endif
