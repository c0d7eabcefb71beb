/* cmd_pull.c - `strata pull <id> [--revision R]`: put a hub model into the Hugging Face
 * cache without serving it, and print the snapshot directory on stdout; with
 * --gguf-file NAME just that file of a GGUF repository, and its path (what serve
 * --gguf-file fetches, so `strata tokenize --model "$(strata pull ...)"` can read it). Progress goes
 * to stderr: a bar redrawn in place on a terminal, a log line every few seconds
 * otherwise (CI logs, journald). Ctrl-C stops cleanly and keeps partial files. */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/hub/hub.h"
#include "server/cli/commands.h"

/* The one thing a signal handler may touch; hub_resolve polls it through opts.cancel. */
static atomic_int pull_cancel;

static void pull_on_signal(int sig) {
    (void)sig;
    atomic_store(&pull_cancel, 1);
}

typedef struct pull_ui {
    int tty, quiet;
    double last_log; /* elapsed seconds at the last log line (non-terminal) */
    int drawn;       /* a bar is on the current terminal line */
} pull_ui;

static void pull_progress(const hub_progress *p, void *ud) {
    pull_ui *ui = ud;
    char line[256];
    if (ui->quiet) return;
    hub_progress_format(p, line, sizeof line);
    if (p->event == HUB_EV_RETRY || p->event == HUB_EV_WARN) {
        fprintf(stderr, "%spull: %s: %s\n", ui->drawn ? "\r\033[K" : "",
                p->event == HUB_EV_WARN ? "warning" : p->file, p->message);
        ui->drawn = 0;
        return;
    }
    if (ui->tty) {
        char bar[25];
        int fill =
            p->bytes_total > 0 ? (int)(24.0 * (double)p->bytes_done / (double)p->bytes_total) : 0;
        for (int i = 0; i < 24; i++) bar[i] = i < fill ? '#' : '-';
        bar[24] = '\0';
        fprintf(stderr, "\r\033[K[%s] %s", bar, line);
        ui->drawn = 1;
        if (p->event == HUB_EV_DONE) {
            fputc('\n', stderr);
            ui->drawn = 0;
        }
        fflush(stderr);
        return;
    }
    if (p->event == HUB_EV_FILE_DONE) {
        fprintf(stderr, "pull: %s ready (%s)\n", p->file, line);
    } else if (p->event == HUB_EV_DONE || p->elapsed - ui->last_log >= 5.0) {
        fprintf(stderr, "pull: %s%s\n", p->event == HUB_EV_DONE ? "done, " : "", line);
        ui->last_log = p->elapsed;
    }
}

static void pull_usage(FILE *f) {
    fprintf(f, "usage: strata pull <org/name> [--revision R] [--gguf-file NAME] [--cache-dir DIR]\n"
               "                   [--offline] [--refresh] [--quiet]\n"
               "Downloads config, tokenizer and safetensors files of a hub model into the\n"
               "Hugging Face cache (HF_HUB_CACHE, HF_HOME, HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE)\n"
               "and prints the snapshot directory.\n"
               "  --revision R     branch, tag or commit (default main)\n"
               "  --gguf-file NAME only this file of a GGUF repository; prints its path\n"
               "  --cache-dir DIR  cache root instead of HF_HUB_CACHE\n"
               "  --offline        use the cache only (as HF_HUB_OFFLINE=1)\n"
               "  --refresh        ask the hub even when the snapshot is cached\n"
               "  --retries N      tries per file without progress before giving up (5)\n"
               "  --quiet          no progress output\n");
}

int cmd_pull(int argc, char **argv) {
    hub_opts o;
    strata_err err = {0};
    pull_ui ui = {.tty = isatty(STDERR_FILENO)};
    const char *model = NULL, *revision = NULL, *cache_dir = NULL, *gguf_file = NULL;
    int offline = 0, refresh = 0, retries = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            pull_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--revision") && i + 1 < argc) {
            revision = argv[++i];
        } else if (!strcmp(a, "--gguf-file") && i + 1 < argc) {
            gguf_file = argv[++i];
        } else if (!strcmp(a, "--cache-dir") && i + 1 < argc) {
            cache_dir = argv[++i];
        } else if (!strcmp(a, "--retries") && i + 1 < argc) {
            retries = atoi(argv[++i]);
            if (retries < 1) {
                fprintf(stderr, "strata pull: --retries needs a number >= 1\n");
                return 2;
            }
        } else if (!strcmp(a, "--offline")) {
            offline = 1;
        } else if (!strcmp(a, "--refresh")) {
            refresh = 1;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            ui.quiet = 1;
        } else if (a[0] != '-' && !model) {
            model = a;
        } else {
            fprintf(stderr, "strata pull: unexpected argument '%s'\n", a);
            pull_usage(stderr);
            return 2;
        }
    }
    if (!model) {
        pull_usage(stderr);
        return 2;
    }
    if (hub_opts_from_env(&o, &err)) {
        fprintf(stderr, "strata pull: %s\n", err.msg);
        return 1;
    }
    if (cache_dir) snprintf(o.cache_dir, sizeof o.cache_dir, "%s", cache_dir);
    o.offline |= offline;
    o.refresh = refresh;
    o.max_retries = retries;
    o.cancel = &pull_cancel;
    struct sigaction sa = {.sa_handler = pull_on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    char dir[HUB_PATH_MAX];
    int rc = gguf_file
                 ? hub_resolve_file(&o, model, revision, gguf_file, dir, sizeof dir, pull_progress,
                                    &ui, &err)
                 : hub_resolve(&o, model, revision, dir, sizeof dir, pull_progress, &ui, &err);
    if (ui.drawn) fputc('\n', stderr);
    if (rc) {
        fprintf(stderr, "strata pull: %s\n", err.msg);
        return rc == STRATA_ECANCELLED ? 130 : 1;
    }
    printf("%s\n", dir);
    return 0;
}
