/* hub_cache.c - the huggingface_hub cache tree on disk: refs, snapshot symlinks,
 * .no_exist markers and the shard list of a safetensors index. Every write is atomic
 * (temporary name + rename), so a reader (ours or Python's) never sees half a ref or a
 * dangling pointer to a blob that is still being written. */
#include "engine/hub/hub_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int sys_err(strata_err *err, const char *what, const char *path) {
    char buf[128];
    return strata_err_set(err, STRATA_EIO, "%s %s: %s", what, path,
                          strerror_r(errno, buf, sizeof buf));
}

int hub_cache_mkdirs(const char *dir, strata_err *err) {
    char p[HUB_PATH_MAX];
    if (hub_path_fmt(p, sizeof p, "%s", dir))
        return strata_err_set(err, STRATA_ERANGE, "path too long: %.200s", dir);
    for (char *s = p + 1;; s++) {
        char c = *s;
        if (c != '/' && c != '\0') continue;
        *s = '\0';
        struct stat st;
        if (mkdir(p, 0777) != 0 && !(errno == EEXIST && stat(p, &st) == 0 && S_ISDIR(st.st_mode)))
            return sys_err(err, "cannot create directory", p);
        *s = c;
        if (c == '\0') break;
    }
    return 0;
}

int hub_cache_mkparent(const char *path, strata_err *err) {
    char p[HUB_PATH_MAX];
    if (hub_path_fmt(p, sizeof p, "%s", path))
        return strata_err_set(err, STRATA_ERANGE, "path too long: %.200s", path);
    char *slash = strrchr(p, '/');
    if (!slash || slash == p) return 0;
    *slash = '\0';
    return hub_cache_mkdirs(p, err);
}

void hub_cache_tag(const char *cache_dir) {
    static const char tag[] = "Signature: 8a477f597d28d172789f06886806bc55\n"
                              "# This file is a cache directory tag created by huggingface_hub.\n"
                              "# For information about cache directory tags, see:\n"
                              "#\thttps://bford.info/cachedir/\n";
    char p[HUB_PATH_MAX];
    if (hub_path_fmt(p, sizeof p, "%s/CACHEDIR.TAG", cache_dir)) return;
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) return; /* exists already, or read-only cache: both fine */
    ssize_t w = write(fd, tag, sizeof tag - 1);
    (void)w;
    close(fd);
}

int hub_cache_repo_dir(char *repo_dir, size_t len, const char *cache_dir, const char *model,
                       const char *rev, strata_err *err) {
    char folder[320];
    int rc;
    if ((rc = hub_path_check_repo_id(model, err))) {
        strata_err_wrap(err, "'%.200s' is neither a local directory nor a hub id: ", model);
        return rc;
    }
    if ((rc = hub_path_check_revision(rev, err))) return rc;
    if (hub_path_repo_folder(folder, sizeof folder, model) ||
        hub_path_fmt(repo_dir, len, "%s/%s", cache_dir, folder))
        return strata_err_set(err, STRATA_ERANGE, "cache path too long: %.200s", cache_dir);
    return 0;
}

int hub_cache_read_ref(const char *repo_dir, const char *rev, char commit[HUB_COMMIT_LEN + 1]) {
    char p[HUB_PATH_MAX], buf[HUB_COMMIT_LEN + 2];
    if (hub_path_fmt(p, sizeof p, "%s/refs/%s", repo_dir, rev)) return STRATA_ENOTFOUND;
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return STRATA_ENOTFOUND;
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n < HUB_COMMIT_LEN) return STRATA_ENOTFOUND;
    /* huggingface_hub writes the bare id; tolerate a trailing newline from other tools. */
    if (n == HUB_COMMIT_LEN + 1 && buf[HUB_COMMIT_LEN] != '\n') return STRATA_ENOTFOUND;
    buf[HUB_COMMIT_LEN] = '\0';
    if (!hub_path_is_commit(buf)) return STRATA_ENOTFOUND;
    memcpy(commit, buf, HUB_COMMIT_LEN + 1);
    return 0;
}

/* A temporary name next to path, unique per process and thread. */
static int tmp_name(char *out, size_t len, const char *path) {
    return hub_path_fmt(out, len, "%s.%ld.%lx.tmp", path, (long)getpid(),
                        (unsigned long)pthread_self());
}

int hub_cache_write_ref(const char *repo_dir, const char *rev, const char *commit,
                        strata_err *err) {
    char p[HUB_PATH_MAX], tmp[HUB_PATH_MAX + 64];
    char old[HUB_COMMIT_LEN + 1];
    if (hub_path_fmt(p, sizeof p, "%s/refs/%s", repo_dir, rev) || tmp_name(tmp, sizeof tmp, p))
        return strata_err_set(err, STRATA_ERANGE, "ref path too long in %.200s", repo_dir);
    /* Unchanged refs are not rewritten: the cache may be shared read-only. */
    if (hub_cache_read_ref(repo_dir, rev, old) == 0 && !strcmp(old, commit)) return 0;
    int rc = hub_cache_mkparent(p, err);
    if (rc) return rc;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return sys_err(err, "cannot write", tmp);
    ssize_t w = write(fd, commit, strlen(commit));
    if (close(fd) != 0 || w != (ssize_t)strlen(commit) || rename(tmp, p) != 0) {
        rc = sys_err(err, "cannot write", p);
        unlink(tmp);
        return rc;
    }
    return 0;
}

int hub_cache_link(const char *repo_dir, const char *commit, const char *file, const char *etag,
                   strata_err *err) {
    char dst[HUB_PATH_MAX], tmp[HUB_PATH_MAX + 64], target[HUB_PATH_MAX];
    if (hub_path_fmt(dst, sizeof dst, "%s/snapshots/%s/%s", repo_dir, commit, file) ||
        tmp_name(tmp, sizeof tmp, dst) || hub_path_link_target(target, sizeof target, file, etag))
        return strata_err_set(err, STRATA_ERANGE, "snapshot path too long for %.200s", file);
    int rc = hub_cache_mkparent(dst, err);
    if (rc) return rc;
    unlink(tmp);
    if (symlink(target, tmp) != 0) return sys_err(err, "cannot create symlink", tmp);
    if (rename(tmp, dst) != 0) {
        rc = sys_err(err, "cannot create symlink", dst);
        unlink(tmp);
        return rc;
    }
    return 0;
}

void hub_cache_mark_missing(const char *repo_dir, const char *commit, const char *file) {
    char p[HUB_PATH_MAX];
    if (hub_path_fmt(p, sizeof p, "%s/.no_exist/%s/%s", repo_dir, commit, file)) return;
    if (hub_cache_mkparent(p, NULL)) return;
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd >= 0) close(fd);
}

int hub_cache_file_state(const char *repo_dir, const char *commit, const char *file) {
    char p[HUB_PATH_MAX];
    struct stat st;
    if (hub_path_fmt(p, sizeof p, "%s/snapshots/%s/%s", repo_dir, commit, file) == 0 &&
        stat(p, &st) == 0 && S_ISREG(st.st_mode))
        return HUB_FILE_PRESENT;
    if (hub_path_fmt(p, sizeof p, "%s/.no_exist/%s/%s", repo_dir, commit, file) == 0 &&
        stat(p, &st) == 0)
        return HUB_FILE_MISSING;
    return HUB_FILE_UNKNOWN;
}

void hub_cache_free_list(char **list, int n) {
    for (int i = 0; list && i < n; i++) free(list[i]);
    free(list);
}

int hub_cache_read_index(const char *path, char ***out, int *n_out, strata_err *err) {
    json_error_t je;
    char **list = NULL;
    int n = 0, cap = 0, rc = 0;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        rc = strata_err_set(err, STRATA_EFORMAT, "%s: %s (line %d)", path, je.text, je.line);
        goto fail;
    }
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map) || json_object_size(map) == 0) {
        rc = strata_err_set(err, STRATA_EFORMAT, "%s: no weight_map object", path);
        goto fail;
    }
    const char *key;
    json_t *val;
    json_object_foreach(map, key, val) {
        const char *shard = json_string_value(val);
        if (!shard) {
            rc = strata_err_set(err, STRATA_EFORMAT, "%s: weight_map[\"%.100s\"] is not a string",
                                path, key);
            goto fail;
        }
        int seen = 0;
        for (int i = 0; i < n && !seen; i++) seen = !strcmp(list[i], shard);
        if (seen) continue;
        if ((rc = hub_path_check_file(shard, err))) {
            strata_err_wrap(err, "%s: ", path);
            goto fail;
        }
        if (n == cap) {
            int ncap = cap ? 2 * cap : 8;
            char **nl = realloc(list, (size_t)ncap * sizeof *nl);
            if (!nl) goto nomem;
            list = nl;
            cap = ncap;
        }
        if (!(list[n] = strdup(shard))) goto nomem;
        n++;
    }
    json_decref(root);
    *out = list;
    *n_out = n;
    return 0;
nomem:
    rc = strata_err_set(err, STRATA_ENOMEM, "%s: out of memory", path);
fail:
    json_decref(root);
    hub_cache_free_list(list, n);
    return rc;
}
