/* test_tokenizer_alloc.c - every allocation failure in the tokenizer is a clean error
 * (style.md §11; SQLite's test_malloc.c).
 *
 * tests/alloc_hook.h interposes malloc & co in this executable (no hook in library code:
 * the tokenizer has no allocator indirection, and jansson, oniguruma and libc allocate
 * on its behalf) and fails the n-th allocation call of a run, for n = 1, 2, ... until a
 * run completes without reaching n. A run is one whole operation on real tokenizer
 * files: tok_load (+ an encode and a decode), tok_encode, tok_decode, or a detok stream
 * (create, push every id, finish, free). Every run that met the failure must return
 * STRATA_ENOMEM with a message (or, if the code recovered, the normal result); every
 * run must release every block it made (counted by the hook; LeakSanitizer checks the
 * same in the ASan build, where the hook forwards to ASan's allocator); the run past the
 * last allocation must give exactly the ids and text of a normal run.
 *
 * Which n are tried: every allocation call of encode, decode and detok (a WINDOW-mode
 * detok of the long text, which decodes its window at each id, is sampled with a stride:
 * OPS_MAX_RUNS). A load makes thousands (jansson builds a node per vocab entry: 1.4 M
 * calls for Qwen3's 151k vocab), so it steps n through every allocation call made by our
 * own code (scope ALLOC_HOOK_EXE: calls from the executable, i.e. engine/tok_*.c) on the
 * small tokenizers, and samples the other calls it makes (libc) with a stride; Qwen3's load,
 * 0.3 s a run, is only sampled. The load's sampling spares the two parsers that do not
 * survive a failed allocation (third-party bugs, so no failure point in them can be a
 * test of ours): jansson 2.14's lexer ignores a failed strbuffer append (lex_save), so a
 * string loses a byte and the parse "succeeds" with other text, asserts, or reads past
 * its buffer; oniguruma 6.9.8's regex parser dereferences NULL after a failed allocation
 * (a SEGV under onig_new) and leaks on a failed realloc (BB_EXPAND). Encode, decode and
 * detok still fail oniguruma's matcher, which handles it. libsentencepiece: see
 * test_sentencepiece. The runs are the same on every machine: strides come from counts. */
#define ALLOC_HOOK_WITH_ASAN
#include "tests/alloc_hook.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/text/detok.h"
#include "engine/text/tok_internal.h"
#include "engine/text/tokenizer.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* only the unpacking is used here */
#include "tests/data/tokenizers/tok_fixture.h"
#pragma GCC diagnostic pop
#include "tests/test.h"

#define MAX_IDS 4096
/* Runs per operation: every allocation call, unless a WINDOW-mode detok of the long text
 * makes more (it decodes its window at each id), which is then sampled with a stride. */
#define OPS_MAX_RUNS 3000
#define ALL_RUNS 1000000 /* no stride */
#define MAX_TEXT 16384

/* A run's output, copied into fixed storage so that comparing it allocates nothing. */
typedef struct result {
    size_t n_ids, len, rlen;
    int32_t ids[MAX_IDS];
    char text[MAX_TEXT];
    char reason[MAX_TEXT];
} result;

typedef struct job job;
struct job {
    const char *what;
    int (*run)(const job *j, result *out, strata_err *err);
    const char *dir;  /* run_load: the tokenizer directory */
    tokenizer *t;     /* the others: a loaded tokenizer */
    const char *text; /* run_load, run_encode */
    size_t len;
    const int32_t *ids; /* run_decode, run_detok */
    size_t n_ids;
    int flags; /* run_decode: skip_special; run_detok: 1 = stops + reasoning */
};

static int put_ids(result *o, const int32_t *ids, size_t n) {
    if (n > MAX_IDS) return -1;
    memcpy(o->ids, ids, n * sizeof *ids);
    o->n_ids = n;
    return 0;
}

static int put_text(char *dst, size_t *len, const char *s, size_t n) {
    if (*len + n > MAX_TEXT) return -1;
    memcpy(dst + *len, s, n);
    *len += n;
    return 0;
}

/* The BPE word cache is the tokenizer's one mutable part: emptied before each encode so
 * that every run takes the same (uncached) path and makes the same allocations. */
static void clear_cache(tokenizer *t) {
    if (t->bpe.cache) memset(t->bpe.cache, 0, TOK_CACHE_SLOTS * sizeof *t->bpe.cache);
}

static int run_encode(const job *j, result *o, strata_err *err) {
    int32_t *ids = NULL;
    size_t n = 0;
    clear_cache(j->t);
    int rc = tok_encode(j->t, j->text, j->len, 1, &ids, &n, err);
    if (!rc && put_ids(o, ids, n)) rc = STRATA_ERANGE;
    free(ids);
    return rc;
}

static int run_decode(const job *j, result *o, strata_err *err) {
    char *s = NULL;
    size_t n = 0;
    int rc = tok_decode(j->t, j->ids, j->n_ids, j->flags, &s, &n, err);
    if (!rc && put_text(o->text, &o->len, s, n)) rc = STRATA_ERANGE;
    free(s);
    return rc;
}

static int detok_take(result *o, const detok_out *d) {
    if (put_text(o->text, &o->len, d->text, d->text_len) ||
        put_text(o->reason, &o->rlen, d->reasoning, d->reasoning_len))
        return STRATA_ERANGE;
    return 0;
}

static int run_detok(const job *j, result *o, strata_err *err) {
    static const char *const stops[] = {"\xE2\x80\x94stop here", "ZQ"};
    detok_opts opts = {0};
    if (j->flags) {
        opts.skip_special = 1;
        opts.n_stop = 2;
        opts.stop = stops;
        opts.split_reasoning = 1;
    }
    detok *d = NULL;
    detok_out out;
    int rc = detok_create(&d, j->t, &opts, err);
    for (size_t i = 0; !rc && i < j->n_ids; i++)
        if (!(rc = detok_push(d, j->ids[i], &out, err))) rc = detok_take(o, &out);
    if (!rc && !(rc = detok_finish(d, &out, err))) rc = detok_take(o, &out);
    detok_free(d);
    return rc;
}

/* Load, encode and decode the job's text, free. */
static int run_load(const job *j, result *o, strata_err *err) {
    tokenizer *t = NULL;
    int32_t *ids = NULL;
    char *s = NULL;
    size_t n = 0, len = 0;
    int rc = tok_load(&t, j->dir, err);
    if (!rc) rc = tok_encode(t, j->text, j->len, 1, &ids, &n, err);
    if (!rc) rc = tok_decode(t, ids, n, 0, &s, &len, err);
    if (!rc && (put_ids(o, ids, n) || put_text(o->text, &o->len, s, len))) rc = STRATA_ERANGE;
    free(ids);
    free(s);
    tok_free(t);
    return rc;
}

static int same(const result *a, const result *b) {
    return a->n_ids == b->n_ids && !memcmp(a->ids, b->ids, a->n_ids * sizeof *a->ids) &&
           a->len == b->len && !memcmp(a->text, b->text, a->len) && a->rlen == b->rlen &&
           !memcmp(a->reason, b->reason, a->rlen);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static result want, got;
static long n_runs, n_errors, n_recovered;

/* Runs j once normally (the reference, which also makes every lazy one-time
 * initialization in the libraries happen before counting), then counts a run's
 * allocation calls in scope. */
static long reference(const job *j, int scope) {
    strata_err err = {0};
    memset(&want, 0, sizeof want);
    int rc = j->run(j, &want, &err);
    CHECK_MSG(rc == 0, "%s: %s", j->what, err.msg);
    if (rc) return -1;
    memset(&got, 0, sizeof got);
    alloc_hook_start_scope(0, scope);
    rc = j->run(j, &got, &err);
    alloc_hook_stop();
    long live = alloc_hook_live();
    CHECK_MSG(rc == 0 && same(&got, &want), "%s: a second run differs", j->what);
    CHECK_MSG(live == 0, "%s: a normal run leaves %ld blocks", j->what, live);
    return alloc_hook_allocs();
}

/* Fails in-scope allocation call n = 1, 1 + stride, ... until a run makes fewer calls than
 * n, with the stride that makes at most max_runs runs; checks each run as the file
 * comment says. */
static void fail_loop(const job *j, int scope, long max_runs) {
    long total = reference(j, scope);
    if (total < 0) return;
    long stride = total <= max_runs ? 1 : (total + max_runs - 1) / max_runs;
    double t0 = now();
    long runs0 = n_runs;
    int bad = 0;
    for (long n = 1; bad < 3; n += stride) {
        strata_err err = {0};
        memset(&got, 0, sizeof got);
        alloc_hook_start_scope(n, scope);
        int rc = j->run(j, &got, &err);
        alloc_hook_stop();
        n_runs++;
        long live = alloc_hook_live();
        int hit = alloc_hook_failed(), ok = 1;
        if (live != 0) {
            fprintf(stderr, "  %s: failing allocation %ld of %ld leaks %ld blocks\n", j->what, n,
                    total, live);
            ok = 0;
        }
        if (!hit) {
            CHECK_MSG(rc == 0 && same(&got, &want),
                      "%s: the run past the last allocation "
                      "(%ld) differs from a normal run (rc %d: %s)",
                      j->what, n, rc, err.msg);
            CHECK_MSG(n > total, "%s: only %ld of %ld allocation calls this time", j->what, n - 1,
                      total);
            CHECK(ok);
            if (stride > 1) /* say what was sampled */
                fprintf(stderr, "  %s: %ld runs (stride %ld), %.1f s\n", j->what, n_runs - runs0,
                        stride, now() - t0);
            return;
        }
        n_errors += rc != 0;
        n_recovered += rc == 0;
        if (rc && (rc != STRATA_ENOMEM || err.code != rc || !err.msg[0])) {
            fprintf(stderr, "  %s: failing allocation %ld of %ld: code %d (want %d), \"%s\"\n",
                    j->what, n, total, rc, STRATA_ENOMEM, err.msg);
            ok = 0;
        } else if (!rc && !same(&got, &want)) {
            fprintf(stderr,
                    "  %s: failing allocation %ld of %ld: succeeded with another "
                    "result\n",
                    j->what, n, total);
            ok = 0;
        }
        if (!ok) {
            alloc_hook_print_fail_site(stderr);
            bad++;
        }
        CHECK(ok);
    }
}

/* Texts: added and special tokens, the reasoning tags, NFD input (NFC rewrites it),
 * invalid UTF-8 (replaced before encoding), CJK, emoji, runs of spaces and newlines,
 * digits; the long one grows every buffer past its first capacity. */
static const char SHORT[] = "Hello world! <|im_start|>user\nna\xC3\xAFve e\xCC\x81t\xC3\xA9 "
                            "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x98\x80 <think>why"
                            "</think> 12345   x      y\n\n\tbad \xFF\xC3 end<|im_end|>";
static char long_text[3000];

static void make_long(void) {
    static const char *parts[] = {"The LORD said unto Moses, ",
                                  "Stra\xC3\x9F"
                                  "e ",
                                  "\xD0\xBA\xD0\xBE\xD1\x88\xD0\xBA\xD0\xB0 ",
                                  "<|im_end|>",
                                  "  \n",
                                  "don't ",
                                  "3.14159 ",
                                  "\xE2\x80\x94",
                                  "<think>",
                                  "</think>",
                                  "\xF0\x9F\x98\x80\xF0\x9F\x98\x81",
                                  "ZQ"};
    unsigned seed = 11;
    size_t len = 0;
    while (len < sizeof long_text - 64) {
        seed = seed * 1103515245u + 12345u;
        const char *p = parts[(seed >> 16) % (sizeof parts / sizeof *parts)];
        memcpy(long_text + len, p, strlen(p));
        len += strlen(p);
    }
    long_text[len] = 0;
}

/* Every allocation (in scope) of encode, decode and detok on t, both texts. */
static void check_ops(const char *name, tokenizer *t, int scope) {
    const char *texts[] = {SHORT, long_text};
    for (int k = 0; k < 2; k++) {
        char what[160];
        int32_t *ids = NULL;
        size_t n = 0;
        strata_err err = {0};
        CHECK_MSG(tok_encode(t, texts[k], strlen(texts[k]), 1, &ids, &n, &err) == 0, "%s: %s", name,
                  err.msg);
        snprintf(what, sizeof what, "%s: encode text %d", name, k);
        job j = {
            .what = what, .run = run_encode, .t = t, .text = texts[k], .len = strlen(texts[k])};
        fail_loop(&j, scope, OPS_MAX_RUNS);
        for (int skip = 0; skip < 2; skip++) {
            snprintf(what, sizeof what, "%s: decode text %d, skip_special %d", name, k, skip);
            job d = {
                .what = what, .run = run_decode, .t = t, .ids = ids, .n_ids = n, .flags = skip};
            fail_loop(&d, scope, OPS_MAX_RUNS);
        }
        for (int opt = 0; opt < 2; opt++) {
            snprintf(what, sizeof what, "%s: detok text %d%s", name, k,
                     opt ? " (stop strings, reasoning, skip_special)" : "");
            job d = {.what = what, .run = run_detok, .t = t, .ids = ids, .n_ids = n, .flags = opt};
            fail_loop(&d, scope, OPS_MAX_RUNS);
        }
        free(ids);
    }
}

/* Fails the load's own allocations (at most own_runs runs: all of them when there are
 * fewer) and all its allocations about `samples` times, spread evenly. */
static void check_load(const char *name, const char *dir, long own_runs, long samples) {
    char what[160];
    snprintf(what, sizeof what, "%s: load", name);
    job j = {.what = what, .run = run_load, .dir = dir, .text = SHORT, .len = strlen(SHORT)};
    fail_loop(&j, ALLOC_HOOK_EXE, own_runs);
    if (!samples) return;
    CHECK(alloc_hook_spare("libjansson") == 0 && alloc_hook_spare("libonig") == 0);
    fail_loop(&j, ALLOC_HOOK_ALL, samples);
    alloc_hook_spare_none();
}

/* One vendored tokenizer (tests/data/tokenizers/NAME): the load, then every operation. */
static void check_fixture(const char *name, long own_runs, long samples, int ops_scope) {
    tokfx_dir dir;
    tokenizer *t = NULL;
    strata_err err = {0};
    double t0 = now();
    long runs0 = n_runs;
    CHECK_MSG(!tokfx_unpack(&dir, name), "cannot unpack %s", name);
    check_load(name, dir.path, own_runs, samples);
    int rc = tok_load(&t, dir.path, &err);
    CHECK_MSG(rc == 0, "%s: %s", name, err.msg);
    if (!rc) check_ops(name, t, ops_scope);
    tok_free(t);
    tokfx_cleanup(&dir);
    fprintf(stderr, "  %s: %ld runs, %.1f s\n", name, n_runs - runs0, now() - t0);
}

static void test_demo(void) {
    tokenizer *t = NULL;
    strata_err err = {0};
    double t0 = now();
    check_load("demo", "models/demo", ALL_RUNS, 200);
    CHECK(tok_load(&t, "models/demo", &err) == 0);
    if (t) check_ops("demo", t, ALLOC_HOOK_ALL);
    tok_free(t);
    fprintf(stderr, "  demo: %ld runs, %.1f s\n", n_runs, now() - t0);
}

/* Prepend/Replace normalizers, byte fallback, Llama decoder (PIECES detok); Metaspace +
 * unk; Split behaviours and added tokens with lstrip/rstrip/single_word/normalized. */
static void test_synthetic(void) {
    check_fixture("synth_sp", ALL_RUNS, 100, ALLOC_HOOK_ALL);
    check_fixture("synth_meta", ALL_RUNS, 100, ALLOC_HOOK_ALL);
    check_fixture("synth_split", ALL_RUNS, 100, ALLOC_HOOK_ALL);
}

/* tokenizer.model through libsentencepiece (WINDOW detok): only our own allocations
 * (tokenizer.c, spm_shim.cc) are failed. libsentencepiece 0.1.97 (Debian 12) is not
 * safe against a failing allocation: a bad_alloc while it parses the model double-frees
 * a ModelProto_SentencePiece in its destructor, one inside Encode ends in a protobuf
 * FATAL check (abort) or leaks; either way inside the library, whatever the caller does. */
static void test_sentencepiece(void) { check_fixture("spm_tiny", ALL_RUNS, 0, ALLOC_HOOK_EXE); }

/* The real 151k-vocab Qwen3 tokenizer: every allocation of the operations; the load
 * (0.3 s a run) sampled: 12 of its own allocations and 8 points over all of them. */
static void test_qwen3(void) { check_fixture("qwen3", 12, 8, ALLOC_HOOK_ALL); }

int main(void) {
    if (!alloc_hook_on()) {
        fprintf(stderr, "  no allocation hook in this build (clang ASan): skipped\n");
        TEST_DONE();
    }
    make_long();
    RUN(test_demo);
    RUN(test_synthetic);
    RUN(test_sentencepiece);
    RUN(test_qwen3);
    fprintf(stderr, "  %ld runs: %ld failed cleanly, %ld recovered from the failure\n", n_runs,
            n_errors, n_recovered);
    TEST_DONE();
}
