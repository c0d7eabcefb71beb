/* cmd_serve.c - `strata serve`: the OpenAI-compatible daemon.
 *
 * Order of start: configuration (CLI > env > file > defaults), the loop and the HTTP
 * listener (so /health answers 503 "Loading model" at once), then a loader thread
 * that resolves the model (hub id or directory), opens backend, model, tokenizer,
 * chat template and engine (serve_load.c), and flips the state to ready. The main
 * thread runs the libuv loop until a drain completes, then tears down in reverse
 * order. The exit status says why it stopped (SERVE_EXIT_*), so a supervisor can
 * restart what a restart may fix: systemd's Restart=on-failure and Kubernetes'
 * restart policy see every start-up failure as non-zero. Thread: main (the loop
 * thread). */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/serve.h"
#include "server/openapi_doc.h"
#include "server/server_internal.h"

extern char **environ;

static void *serve_loader_main(void *arg) {
    srv *S = arg;
    strata_err err = {0};
    int rc = srv_load(S, &err);
    if (rc) {
        snprintf(S->load_error, sizeof S->load_error, "%s", err.msg);
        fprintf(stderr, "strata: loading %s failed: %s\n", S->cfg->model, err.msg);
        atomic_store(&S->state, SRV_FAILED);
    } else {
        int expect = SRV_LOADING;
        atomic_compare_exchange_strong(&S->state, &expect, SRV_READY);
    }
    atomic_store(&S->loaded, 1);
    uv_async_send(&S->async);
    return NULL;
}

static void serve_close_handle(uv_handle_t *h, void *arg) {
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* glibc gives every thread that allocates under contention an arena of its own and
 * never hands back the top of a thread arena (malloc_trim releases only the main
 * one), so a burst of huge bodies left each HTTP / worker thread holding its peak:
 * RSS went from 87 to 609 MB after 12 bodies of 100k chat messages. With even one
 * thread arena besides the main one, a body parsed there left ~50 MB resident at
 * that arena's top now and then. The main arena alone (the threads' caches keep most
 * small allocations off its lock), and a fixed mmap threshold (the adaptive one
 * serves ever larger blocks from the heap after each large free), keep RSS at its
 * baseline after a burst. The operator's
 * MALLOC_ARENA_MAX / MALLOC_MMAP_THRESHOLD_ win. Before any thread exists. */
static void serve_tune_malloc(void) {
    if (!getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, 1);
    if (!getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 128 * 1024);
}

/* libuv sizes its one thread pool at first use; the preparation workers live there */
static void serve_size_thread_pool(const config *cfg) {
    char n[16];
    if (getenv("UV_THREADPOOL_SIZE")) return; /* the operator's choice */
    snprintf(n, sizeof n, "%lld", cfg->prepare_threads);
    setenv("UV_THREADPOOL_SIZE", n, 0);
}

int cmd_serve(int argc, char **argv) {
    config cfg;
    srv S;
    strata_err err = {0};
    int help = 0, code = SERVE_EXIT_CONFIG;
    memset(&S, 0, sizeof S);
    S.im_end = -1;
    if (config_init(&cfg, &err)) {
        code = SERVE_EXIT_INTERNAL;
        goto out_cfg;
    }
    if (config_load(&cfg, argc, argv, environ, &help, &err)) goto out_cfg;
    if (help) {
        char buf[8192];
        config_format_help(buf, sizeof buf);
        printf("usage: strata serve --model DIR|HUB_ID [options]\n\nOptions (also STRATA_<FLAG> "
               "env vars and --config FILE; CLI > env > file > default):\n%s",
               buf);
        code = SERVE_EXIT_OK;
        goto out_cfg;
    }
    if (!cfg.model) {
        strata_err_set(&err, STRATA_EINVALID,
                       "--model is required (a directory, hub id or preset)");
        goto out_cfg;
    }
    S.cfg = &cfg;
    S.model_name = cfg.served_model_name ? cfg.served_model_name : cfg.model;
    S.created = (long long)time(NULL);
    S.openapi = openapi_doc_start;
    S.openapi_len = openapi_doc_size();
    serve_tune_malloc();
    serve_size_thread_pool(&cfg);
    /* a client that goes away mid-write must not kill the daemon */
    signal(SIGPIPE, SIG_IGN);
    guard_init(&S);
    code = SERVE_EXIT_INTERNAL;
    if (metrics_create(&S.met, S.model_name, &err) || loop_init(&S, &err) || guard_start(&S, &err))
        goto out;
    if (http_start(&S, &err)) {
        code = err.code == STRATA_EINVALID ? SERVE_EXIT_CONFIG : SERVE_EXIT_LISTEN;
        goto out;
    }
    fprintf(stderr, "strata: listening on http://%s:%lld\n", cfg.host, cfg.port);
    if (pthread_create(&S.loader, NULL, serve_loader_main, &S)) {
        strata_err_set(&err, STRATA_ENOMEM, "cannot start the loader thread");
        goto out;
    }
    S.loader_started = 1;
    loop_run(&S);
    /* a failed load is a failure even when a signal came meanwhile: nothing ran */
    code = atomic_load(&S.state) == SRV_FAILED ? SERVE_EXIT_MODEL : SERVE_EXIT_OK;
    if (code) strata_err_set(&err, STRATA_ESTATE, "the model failed to load: %s", S.load_error);
out:
    if (S.loader_started) pthread_join(S.loader, NULL);
    if (S.loop_ready) prep_shutdown(&S); /* no worker may touch the engine after this */
    if (S.mhd) MHD_stop_daemon(S.mhd);   /* completes every connection: conn pointers go NULL */
    engine_destroy(S.eng);               /* aborts what is left; releases their requests */
    S.eng = NULL;
    if (S.loop_ready) {
        loop_shutdown(&S);
        /* run the loop once more so closed handles release their requests */
        uv_walk(&S.loop, serve_close_handle, NULL);
        uv_run(&S.loop, UV_RUN_DEFAULT);
        uv_loop_close(&S.loop);
        pthread_mutex_destroy(&S.inbox_mu);
    }
    guard_deinit(&S);
    srv_unload(&S);
    metrics_destroy(S.met);
out_cfg:
    if (code && err.msg[0]) fprintf(stderr, "strata serve: %s (exit status %d)\n", err.msg, code);
    config_deinit(&cfg);
    return code;
}
