/* test_hub.c - the pure parts of the hub module: name rules, etag normalisation, cache
 * paths, URL quoting and origins, SHA-256, the cache tree operations on a temporary
 * directory, hub_opts_from_env, and hub_resolve's paths that need no network.
 * The network side runs against a real HTTP mock in tests/hub/test_hub.sh. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/hub/hub.h"
#include "engine/hub/hub_internal.h"
#include "tests/test.h"
#include "tests/test_file.h"

static char tmp_root[256];

static void test_repo_id(void) {
    static const char *const ok[] = {"gpt2", "Qwen/Qwen3.5-2B", "a_b/c.d-e",
                                     "123",  "_x_/y",           "google/gemma-4-E2B-it"};
    static const char *const bad[] = {"",     "../x", "a/../b", "/abs", "a/b/c", "a--b",
                                      "a..b", "-a",   "a-",     ".a",   "a.",    "a/b.git",
                                      "a b",  "a/",   "/a",     "a\\b", "a/-b",  "org/na\xc3\xa9me",
                                      "a/b\n"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        CHECK_MSG(hub_path_check_repo_id(ok[i], NULL) == 0, "%s", ok[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(hub_path_check_repo_id(bad[i], NULL) == STRATA_EINVALID, "'%s'", bad[i]);
    char longname[100];
    memset(longname, 'a', 97);
    longname[97] = '\0';
    CHECK(hub_path_check_repo_id(longname, NULL) == STRATA_EINVALID);
    longname[96] = '\0';
    CHECK(hub_path_check_repo_id(longname, NULL) == 0);
    strata_err e = {0};
    CHECK(hub_path_check_repo_id("a/b/c", &e) == STRATA_EINVALID && strstr(e.msg, "a/b/c"));
}

static void test_revision_and_file(void) {
    static const char *const ok[] = {"main",
                                     "refs/pr/1",
                                     "v1.0",
                                     "0123456789abcdef0123456789abcdef01234567",
                                     "sub/dir/file.json",
                                     ".hidden",
                                     "a..b"};
    static const char *const bad[] = {"",     "..",   "../x", "a/../b", "/x",  "a//b", "a/",
                                      "a\\b", "a\nb", ".",    "./a",    "a/.", "x\x7f"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        CHECK_MSG(hub_path_check_revision(ok[i], NULL) == 0, "%s", ok[i]);
        CHECK_MSG(hub_path_check_file(ok[i], NULL) == 0, "%s", ok[i]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_MSG(hub_path_check_revision(bad[i], NULL) == STRATA_EINVALID, "'%s'", bad[i]);
        CHECK_MSG(hub_path_check_file(bad[i], NULL) == STRATA_EINVALID, "'%s'", bad[i]);
    }
    CHECK(hub_path_is_commit("0123456789abcdef0123456789abcdef01234567"));
    CHECK(!hub_path_is_commit("0123456789ABCDEF0123456789abcdef01234567"));
    CHECK(!hub_path_is_commit("0123456789abcdef0123456789abcdef0123456"));
    CHECK(!hub_path_is_commit("main"));
    CHECK(hub_path_is_sha256("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    CHECK(!hub_path_is_sha256("0123456789abcdef0123456789abcdef01234567"));
}

static void test_repo_folder(void) {
    char b[64];
    CHECK(hub_path_repo_folder(b, sizeof b, "org/name") == 0 && !strcmp(b, "models--org--name"));
    CHECK(hub_path_repo_folder(b, sizeof b, "gpt2") == 0 && !strcmp(b, "models--gpt2"));
    CHECK(hub_path_repo_folder(b, 10, "org/name") == STRATA_ERANGE);
}

static void test_etag(void) {
    static const char *const cases[][2] = {
        {"\"abc\"", "abc"},
        {"W/\"abc\"", "abc"},
        {"abc", "abc"},
        {"W/\"W123\"", "W123"}, /* Python: 'W/"W123"'.lstrip("W/").strip('"') */
        {"\"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\"",
         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"\"\"abc\"\"", "abc"},
    };
    char out[HUB_ETAG_MAX];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        CHECK_MSG(hub_path_normalize_etag(out, sizeof out, cases[i][0], NULL) == 0 &&
                      !strcmp(out, cases[i][1]),
                  "%s -> %s", cases[i][0], out);
    static const char *const bad[] = {"\"\"",        "W/",      "\"../x\"", "\"a/b\"",
                                      "\".hidden\"", "\"a b\"", "\"a\\nb\""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(hub_path_normalize_etag(out, sizeof out, bad[i], NULL) == STRATA_EFORMAT, "%s",
                  bad[i]);
    CHECK(hub_path_normalize_etag(out, sizeof out, NULL, NULL) == STRATA_EFORMAT);
    char longtag[200];
    memset(longtag, 'a', 150);
    longtag[150] = '\0';
    CHECK(hub_path_normalize_etag(out, sizeof out, longtag, NULL) == STRATA_EFORMAT);
}

static void test_link_target_and_quote(void) {
    char b[256];
    CHECK(hub_path_link_target(b, sizeof b, "a.json", "E") == 0 && !strcmp(b, "../../blobs/E"));
    CHECK(hub_path_link_target(b, sizeof b, "sub/a.json", "E") == 0 &&
          !strcmp(b, "../../../blobs/E"));
    CHECK(hub_path_link_target(b, sizeof b, "a/b/c", "E") == 0 &&
          !strcmp(b, "../../../../blobs/E"));
    CHECK(hub_path_link_target(b, 8, "a/b/c", "E") == STRATA_ERANGE);
    CHECK(hub_path_quote(b, sizeof b, "refs/pr/1", 0) == 0 && !strcmp(b, "refs%2Fpr%2F1"));
    CHECK(hub_path_quote(b, sizeof b, "sub dir/f+1.json", 1) == 0 &&
          !strcmp(b, "sub%20dir/f%2B1.json"));
    CHECK(hub_path_quote(b, sizeof b, "A~._-z", 0) == 0 && !strcmp(b, "A~._-z"));
    CHECK(hub_path_quote(b, sizeof b, "\xc3\xa9", 1) == 0 && !strcmp(b, "%C3%A9"));
    CHECK(hub_path_quote(b, 4, "a b", 1) == STRATA_ERANGE);
}

static void test_origin(void) {
    CHECK(hub_path_same_origin("http://127.0.0.1:8080/a", "http://127.0.0.1:8080/b?x=1"));
    CHECK(!hub_path_same_origin("http://127.0.0.1:8080/a", "http://127.0.0.1:8081/a"));
    CHECK(hub_path_same_origin("https://huggingface.co/x", "https://HuggingFace.co:443/y"));
    CHECK(!hub_path_same_origin("http://huggingface.co/x", "https://huggingface.co/x"));
    CHECK(!hub_path_same_origin("https://huggingface.co/x", "https://cdn-lfs.huggingface.co/x"));
    CHECK(hub_path_same_origin("http://u:p@host/x", "http://host:80"));
    CHECK(hub_path_same_origin("http://[::1]:80/x", "http://[::1]/y"));
    CHECK(!hub_path_same_origin("http://[::1]:81/x", "http://[::1]/y"));
    CHECK(!hub_path_same_origin("not a url", "not a url"));
}

static void sha_hex(const void *d, size_t n, char out[65]) {
    hub_sha256 s = {0};
    CHECK(hub_sha256_init(&s) == 0);
    hub_sha256_update(&s, d, n);
    hub_sha256_hex(&s, out);
    hub_sha256_free(&s);
}

/* FIPS 180-4's examples, and a million 'a' fed in uneven pieces through one context
 * that is restarted after each use, as a resumed download restarts its hash. */
static void test_sha256(void) {
    char hex[65];
    sha_hex("", 0, hex);
    CHECK(!strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    sha_hex("abc", 3, hex);
    CHECK(!strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 56 bytes */
    sha_hex(two, strlen(two), hex);
    CHECK(!strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
    char *m = malloc(1000000);
    memset(m, 'a', 1000000);
    hub_sha256 s = {0};
    for (int rep = 0; rep < 2; rep++) {
        CHECK(hub_sha256_init(&s) == 0);
        for (size_t off = 0, step = 1; off < 1000000; off += step, step = step % 97 + 1)
            hub_sha256_update(&s, m + off, off + step > 1000000 ? 1000000 - off : step);
        hub_sha256_hex(&s, hex);
        CHECK(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
    }
    hub_sha256_free(&s);
    free(m);
}

static void test_progress_format(void) {
    char b[200];
    hub_progress p = {.files_done = 3,
                      .files_total = 7,
                      .bytes_done = 1200000000,
                      .bytes_total = 2700000000,
                      .rate = 85300000};
    hub_progress_format(&p, b, sizeof b);
    CHECK_MSG(!strcmp(b, "3/7 files, 1.2 GB of 2.7 GB (44%), 85.3 MB/s, ETA 18s"), "%s", b);
    hub_progress q = {.files_done = 1, .files_total = 2};
    hub_progress_format(&q, b, sizeof b);
    CHECK_MSG(!strcmp(b, "1/2 files"), "%s", b);
    hub_progress r = {.event = HUB_EV_DONE};
    hub_progress_format(&r, b, sizeof b);
    CHECK_MSG(!strcmp(b, "all files were in the cache"), "%s", b);
    p.rate = 0;
    hub_progress_format(&p, b, sizeof b);
    CHECK_MSG(strstr(b, "ETA ?") != NULL, "%s", b);
    hub_progress_format(&p, b, 12); /* truncates, never overflows */
    CHECK(strlen(b) == 11);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_cache_tree(void) {
    char repo[512], p[600], buf[600], commit[HUB_COMMIT_LEN + 1];
    const char *c = "0123456789abcdef0123456789abcdef01234567";
    snprintf(repo, sizeof repo, "%s/hub/models--o--n", tmp_root);
    CHECK(hub_cache_mkdirs(repo, NULL) == 0);
    CHECK(hub_cache_read_ref(repo, "main", commit) == STRATA_ENOTFOUND);
    CHECK(hub_cache_write_ref(repo, "refs/pr/1", c, NULL) == 0);
    CHECK(hub_cache_read_ref(repo, "refs/pr/1", commit) == 0 && !strcmp(commit, c));
    snprintf(p, sizeof p, "%s/refs/refs/pr/1", repo);
    struct stat st;
    CHECK(stat(p, &st) == 0 && st.st_size == 40); /* no newline, as huggingface_hub writes */
    write_file(p, "not a commit");
    CHECK(hub_cache_read_ref(repo, "refs/pr/1", commit) == STRATA_ENOTFOUND);

    snprintf(p, sizeof p, "%s/blobs/E1", repo);
    CHECK(hub_cache_mkparent(p, NULL) == 0);
    write_file(p, "x");
    CHECK(hub_cache_file_state(repo, c, "sub/f.json") == HUB_FILE_UNKNOWN);
    CHECK(hub_cache_link(repo, c, "sub/f.json", "E1", NULL) == 0);
    snprintf(p, sizeof p, "%s/snapshots/%s/sub/f.json", repo, c);
    ssize_t n = readlink(p, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = '\0';
    CHECK_MSG(!strcmp(buf, "../../../blobs/E1"), "%s", buf);
    CHECK(hub_cache_file_state(repo, c, "sub/f.json") == HUB_FILE_PRESENT);
    CHECK(hub_cache_link(repo, c, "sub/f.json", "E1", NULL) == 0); /* replaces */
    CHECK(hub_cache_link(repo, c, "dangling", "E2", NULL) == 0);
    CHECK(hub_cache_file_state(repo, c, "dangling") == HUB_FILE_UNKNOWN); /* blob missing */
    hub_cache_mark_missing(repo, c, "tokenizer.model");
    CHECK(hub_cache_file_state(repo, c, "tokenizer.model") == HUB_FILE_MISSING);

    char **list = NULL;
    int cnt = 0;
    snprintf(p, sizeof p, "%s/index.json", tmp_root);
    write_file(p,
               "{\"metadata\":{},\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\","
               "\"c\":\"s1.safetensors\"}}");
    CHECK(hub_cache_read_index(p, &list, &cnt, NULL) == 0 && cnt == 2);
    CHECK(cnt == 2 && !strcmp(list[0], "s1.safetensors") && !strcmp(list[1], "s2.safetensors"));
    hub_cache_free_list(list, cnt);
    static const char *const bad[] = {"{\"weight_map\":{\"a\":\"../../etc/passwd\"}}",
                                      "{\"weight_map\":{\"a\":\"/abs\"}}",
                                      "{\"weight_map\":{\"a\":1}}",
                                      "{\"weight_map\":{}}",
                                      "{\"metadata\":{}}",
                                      "[1,2",
                                      "",
                                      "{\"weight_map\":{\"a\":\"x\",\"a\":\"y\"}}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_file(p, bad[i]);
        list = NULL;
        cnt = 0;
        CHECK_MSG(hub_cache_read_index(p, &list, &cnt, NULL) != 0 && !list, "%s", bad[i]);
    }
}

static void test_opts_env(void) {
    hub_opts o;
    char want[600];
    static const char *const vars[] = {"HF_ENDPOINT",
                                       "HF_HUB_CACHE",
                                       "HUGGINGFACE_HUB_CACHE",
                                       "HF_HOME",
                                       "XDG_CACHE_HOME",
                                       "HF_TOKEN",
                                       "HUGGING_FACE_HUB_TOKEN",
                                       "HF_TOKEN_PATH",
                                       "HF_HUB_OFFLINE",
                                       "TRANSFORMERS_OFFLINE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
    setenv("HOME", tmp_root, 1);
    CHECK(hub_opts_from_env(&o, NULL) == 0);
    snprintf(want, sizeof want, "%s/.cache/huggingface/hub", tmp_root);
    CHECK_MSG(!strcmp(o.cache_dir, want), "%s", o.cache_dir);
    CHECK(!strcmp(o.endpoint, "https://huggingface.co") && !o.token[0] && !o.offline);
    setenv("XDG_CACHE_HOME", "/x", 1);
    CHECK(hub_opts_from_env(&o, NULL) == 0 && !strcmp(o.cache_dir, "/x/huggingface/hub"));
    setenv("HF_HOME", tmp_root, 1);
    snprintf(want, sizeof want, "%s/hub", tmp_root);
    CHECK(hub_opts_from_env(&o, NULL) == 0 && !strcmp(o.cache_dir, want));
    setenv("HUGGINGFACE_HUB_CACHE", "/legacy", 1);
    CHECK(hub_opts_from_env(&o, NULL) == 0 && !strcmp(o.cache_dir, "/legacy"));
    setenv("HF_HUB_CACHE", "~/c", 1);
    snprintf(want, sizeof want, "%s/c", tmp_root);
    CHECK(hub_opts_from_env(&o, NULL) == 0 && !strcmp(o.cache_dir, want));
    /* The token file under HF_HOME, trimmed; HF_TOKEN wins over it. */
    snprintf(want, sizeof want, "%s/token", tmp_root);
    write_file(want, "  hf_from_file\n");
    CHECK(hub_opts_from_env(&o, NULL) == 0 && !strcmp(o.token, "hf_from_file"));
    setenv("HF_TOKEN", "hf_env", 1);
    CHECK(hub_opts_from_env(&o, NULL) == 0 && !strcmp(o.token, "hf_env"));
    setenv("HF_TOKEN", "hf_a\r\nX-Evil: 1", 1);
    CHECK(hub_opts_from_env(&o, NULL) == STRATA_EINVALID);
    unsetenv("HF_TOKEN");
    setenv("HF_ENDPOINT", "http://127.0.0.1:9/", 1);
    CHECK(hub_opts_from_env(&o, NULL) == 0 && !strcmp(o.endpoint, "http://127.0.0.1:9"));
    setenv("HF_ENDPOINT", "ftp://x", 1);
    CHECK(hub_opts_from_env(&o, NULL) == STRATA_EINVALID);
    unsetenv("HF_ENDPOINT");
    static const char *const truthy[] = {"1", "ON", "yes", "True"};
    for (size_t i = 0; i < 4; i++) {
        setenv("HF_HUB_OFFLINE", truthy[i], 1);
        CHECK(hub_opts_from_env(&o, NULL) == 0 && o.offline == 1);
    }
    setenv("HF_HUB_OFFLINE", "0", 1);
    CHECK(hub_opts_from_env(&o, NULL) == 0 && o.offline == 0);
    unsetenv("HF_HUB_OFFLINE");
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
}

static void count_warnings(const hub_progress *p, void *ud) {
    if (p->event == HUB_EV_WARN && p->message && strstr(p->message, "using the cached snapshot"))
        (*(int *)ud)++;
}

static void test_resolve_no_network(void) {
    hub_opts o;
    char dir[HUB_PATH_MAX];
    strata_err e = {0};
    memset(&o, 0, sizeof o);
    snprintf(o.endpoint, sizeof o.endpoint, "http://127.0.0.1:9"); /* nothing listens there */
    snprintf(o.cache_dir, sizeof o.cache_dir, "%s/empty-cache", tmp_root);
    CHECK(hub_resolve(&o, tmp_root, NULL, dir, sizeof dir, NULL, NULL, &e) == 0 &&
          !strcmp(dir, tmp_root));
    CHECK(hub_resolve(&o, tmp_root, NULL, dir, 4, NULL, NULL, &e) == STRATA_ERANGE);
    CHECK(hub_resolve(&o, "./no/such/dir", NULL, dir, sizeof dir, NULL, NULL, &e) ==
          STRATA_ENOTFOUND);
    CHECK(hub_resolve(&o, "a/b/c", NULL, dir, sizeof dir, NULL, NULL, &e) == STRATA_EINVALID);
    CHECK(strstr(e.msg, "neither a local directory nor a hub id") != NULL);
    CHECK(hub_resolve(&o, "org/name", "../x", dir, sizeof dir, NULL, NULL, &e) == STRATA_EINVALID);
    o.offline = 1;
    CHECK(hub_resolve(&o, "org/name", NULL, dir, sizeof dir, NULL, NULL, &e) == STRATA_ENOTFOUND);
    CHECK_MSG(strstr(e.msg, "HF_HUB_OFFLINE") != NULL, "%s", e.msg);
    /* A cached snapshot made by hand (as huggingface_hub lays it out) resolves offline. */
    char repo[HUB_PATH_MAX + 32], p[HUB_PATH_MAX + 128];
    const char *c = "89abcdef0123456789abcdef0123456789abcdef";
    snprintf(repo, sizeof repo, "%s/models--org--name", o.cache_dir);
    CHECK(hub_cache_write_ref(repo, "main", c, NULL) == 0);
    snprintf(p, sizeof p, "%s/blobs/cfg", repo);
    hub_cache_mkparent(p, NULL);
    write_file(p, "{}");
    snprintf(p, sizeof p, "%s/blobs/w", repo);
    write_file(p, "weights");
    CHECK(hub_cache_link(repo, c, "config.json", "cfg", NULL) == 0);
    CHECK(hub_resolve(&o, "org/name", NULL, dir, sizeof dir, NULL, NULL, &e) == STRATA_ENOTFOUND);
    CHECK(hub_cache_link(repo, c, "model.safetensors", "w", NULL) == 0);
    CHECK(hub_resolve(&o, "org/name", NULL, dir, sizeof dir, NULL, NULL, &e) == 0);
    snprintf(p, sizeof p, "%s/snapshots/%s", repo, c);
    CHECK_MSG(!strcmp(dir, p), "%s", dir);
    CHECK(hub_resolve(&o, "org/name", c, dir, sizeof dir, NULL, NULL, &e) == 0 && !strcmp(dir, p));
    /* Online, the optional files are undecided, so the hub is asked. It is unreachable
     * here: the usable snapshot is returned with a warning, without retries. */
    int warned = 0;
    o.offline = 0;
    dir[0] = '\0';
    CHECK(hub_resolve(&o, "org/name", NULL, dir, sizeof dir, count_warnings, &warned, &e) == 0);
    CHECK(!strcmp(dir, p) && warned == 1);
    /* A cancelled call stops at once. */
    atomic_int stop = 1;
    o.cancel = &stop;
    CHECK(hub_resolve(&o, "org/name", NULL, dir, sizeof dir, NULL, NULL, &e) == STRATA_ECANCELLED);
}

typedef struct resolve_call {
    hub_opts o;
    int rc;
    char dir[HUB_PATH_MAX];
    strata_err e;
} resolve_call;

static void *resolve_thread(void *arg) {
    resolve_call *c = arg;
    c->rc = hub_resolve(&c->o, "org/other", "main", c->dir, sizeof c->dir, NULL, NULL, &c->e);
    return NULL;
}

/* The server calls hub_resolve on a loader thread and cancels it from another: the
 * call must return promptly even while it waits between retries. */
static void test_resolve_thread_cancel(void) {
    static resolve_call c;
    atomic_int stop = 0;
    memset(&c, 0, sizeof c);
    snprintf(c.o.endpoint, sizeof c.o.endpoint, "http://127.0.0.1:9");
    snprintf(c.o.cache_dir, sizeof c.o.cache_dir, "%s/thread-cache", tmp_root);
    c.o.cancel = &stop;
    pthread_t t;
    struct timespec t0, t1, nap = {0, 300 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(pthread_create(&t, NULL, resolve_thread, &c) == 0);
    nanosleep(&nap, NULL);
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    CHECK_MSG(c.rc == STRATA_ECANCELLED, "rc %d: %s", c.rc, c.e.msg);
    /* 0.3 s of sleep plus at most one 0.1 s poll; 1.5 s leaves room for a slow ASan box. */
    CHECK_MSG(dt < 1.5, "took %.2f s", dt);
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/strata_test_hub_XXXXXX");
    if (test_scratch_dir(tmp_root)) return 1;
    RUN(test_repo_id);
    RUN(test_revision_and_file);
    RUN(test_repo_folder);
    RUN(test_etag);
    RUN(test_link_target_and_quote);
    RUN(test_origin);
    RUN(test_sha256);
    RUN(test_progress_format);
    RUN(test_cache_tree);
    RUN(test_opts_env);
    RUN(test_resolve_no_network);
    RUN(test_resolve_thread_cancel);
    TEST_DONE();
}
