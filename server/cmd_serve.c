/* cmd_serve.c - `strata serve`: the OpenAI-compatible daemon.
 *
 * Order of start: configuration (CLI > env > file > defaults), the loop and the HTTP
 * listener (so /health answers 503 "Loading model" at once), then a loader thread
 * that resolves the model (hub id or directory), opens backend, model, tokenizer,
 * chat template and engine, and flips the state to ready. The main thread runs the
 * libuv loop until a drain completes, then tears down in reverse order and returns
 * 0. Thread: main (the loop thread). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/backend_select.h"
#include "engine/hub.h"
#include "server/commands.h"
#include "server/openapi_doc.h"
#include "server/server_internal.h"

extern char **environ;

static int serve_is_dir(const char *p) {
    struct stat st;
    return p && !stat(p, &st) && S_ISDIR(st.st_mode);
}

static int serve_has_file(const char *dir, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return !access(path, R_OK);
}

static void serve_on_slot_free(void *ud) {
    srv *S = ud;
    uv_async_send(&S->async);
}

static void serve_on_token_gap(void *ud, double s) { metrics_observe(((srv *)ud)->met, METRICS_ITL, s); }

/* Loads everything the engine needs; on failure sets load_error. Loader thread. */
static int serve_load(srv *S, strata_err *err) {
    const config *cfg = S->cfg;
    int dummy = cfg->load_format && !strcmp(cfg->load_format, "dummy");
    int rc;
    const char *path = cfg->model;
    if (!dummy && !serve_is_dir(path)) {
        /* a hub id: resolve into the Hugging Face cache (downloads when missing) */
        hub_opts ho;
        if ((rc = hub_opts_from_env(&ho, err))) return rc;
        if ((rc = hub_resolve(&ho, path, cfg->revision, S->model_dir, sizeof S->model_dir, NULL,
                              NULL, err)))
            return rc;
        path = S->model_dir;
    } else {
        snprintf(S->model_dir, sizeof S->model_dir, "%s", path);
    }
    if ((rc = backend_create(cfg->device, (int)cfg->threads, &S->b, err))) return rc;
    model_opts mo = {.path = path,
                     .load_dummy = dummy,
                     .weight_dtype = DTYPE_COUNT,
                     .max_seqs = (int)cfg->max_seqs,
                     .ctx_size = (int)cfg->ctx_size,
                     .max_tokens = (int)(cfg->max_seqs + cfg->prefill_chunk),
                     .seed = (uint64_t)cfg->seed,
                     .ple_on_device = cfg->ple_on_device};
    if ((rc = model_open(&S->m, &mo, S->b, err))) return rc;
    const model_info *mi = model_get_info(S->m);
    const char *tdir = cfg->tokenizer ? cfg->tokenizer : dummy ? NULL : path;
    if (tdir && (serve_has_file(tdir, "tokenizer.json") || serve_has_file(tdir, "tokenizer.model"))) {
        if ((rc = tok_load(&S->tok, tdir, err))) return strata_err_wrap(err, "tokenizer: ");
        rc = chat_template_load(&S->tmpl, tdir, err);
        if (rc == STRATA_ENOTFOUND) {
            fprintf(stderr, "strata: %s has no chat template; /v1/chat/completions is off\n", tdir);
            rc = 0;
        } else if (rc) {
            return strata_err_wrap(err, "chat template: ");
        }
        S->has_think = tok_piece_to_id(S->tok, "<think>") >= 0 && tok_piece_to_id(S->tok, "</think>") >= 0;
        S->im_end = tok_piece_to_id(S->tok, "<|im_end|>");
    } else if (cfg->tokenizer) {
        return strata_err_set(err, STRATA_ENOTFOUND, "--tokenizer %s: no tokenizer.json or tokenizer.model",
                              cfg->tokenizer);
    } else {
        fprintf(stderr, "strata: no tokenizer; prompts must be token ids and text is [id]\n");
    }
    engine_opts eo = {.max_seqs = (int)cfg->max_seqs,
                      .prefill_chunk = (int)cfg->prefill_chunk,
                      .on_slot_free = serve_on_slot_free,
                      .on_token_gap = serve_on_token_gap,
                      .ud = S};
    if ((rc = engine_create(&S->eng, S->m, S->tok, &eo, err))) return rc;
    S->ctx = mi->ctx_size;
    S->vocab = mi->vocab;
    S->max_seqs = eo.max_seqs < mi->max_seqs ? eo.max_seqs : mi->max_seqs;
    fprintf(stderr, "strata: %s ready (%s on %s, vocab %d, ctx %d, %d slots)\n", S->model_name,
            mi->arch, backend_name(S->b), mi->vocab, mi->ctx_size, S->max_seqs);
    return 0;
}

static void *serve_loader_main(void *arg) {
    srv *S = arg;
    strata_err err = {0};
    int rc = serve_load(S, &err);
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

int cmd_serve(int argc, char **argv) {
    config cfg;
    srv S;
    strata_err err = {0};
    int help = 0, code = 1;
    memset(&S, 0, sizeof S);
    S.im_end = -1;
    if (config_init(&cfg, &err)) goto out_cfg;
    if (config_load(&cfg, argc, argv, environ, &help, &err)) goto out_cfg;
    if (help) {
        char buf[8192];
        config_format_help(buf, sizeof buf);
        printf("usage: strata serve --model DIR|HUB_ID [options]\n\nOptions (also STRATA_<FLAG> "
               "env vars and --config FILE; CLI > env > file > default):\n%s", buf);
        code = 0;
        goto out_cfg;
    }
    if (!cfg.model) {
        strata_err_set(&err, STRATA_EINVALID, "--model is required (a directory, hub id or preset)");
        goto out_cfg;
    }
    S.cfg = &cfg;
    S.model_name = cfg.served_model_name ? cfg.served_model_name : cfg.model;
    S.created = (long long)time(NULL);
    S.openapi = openapi_doc_start;
    S.openapi_len = openapi_doc_size();
    /* a client that goes away mid-write must not kill the daemon */
    signal(SIGPIPE, SIG_IGN);
    if (metrics_create(&S.met, S.model_name, &err) || loop_init(&S, &err) ||
        http_start(&S, &err))
        goto out;
    fprintf(stderr, "strata: listening on http://%s:%lld\n", cfg.host, cfg.port);
    if (pthread_create(&S.loader, NULL, serve_loader_main, &S)) {
        strata_err_set(&err, STRATA_ENOMEM, "cannot start the loader thread");
        goto out;
    }
    S.loader_started = 1;
    loop_run(&S);
    code = atomic_load(&S.state) == SRV_FAILED && !S.draining ? 1 : 0;
out:
    if (S.loader_started) pthread_join(S.loader, NULL);
    if (S.mhd) MHD_stop_daemon(S.mhd); /* completes every connection: conn pointers go NULL */
    engine_destroy(S.eng);             /* aborts what is left; releases their requests */
    if (S.loop_ready) {
        loop_shutdown(&S);
        /* run the loop once more so closed handles release their requests */
        uv_walk(&S.loop, serve_close_handle, NULL);
        uv_run(&S.loop, UV_RUN_DEFAULT);
        uv_loop_close(&S.loop);
        pthread_mutex_destroy(&S.inbox_mu);
    }
    chat_template_free(S.tmpl);
    tok_free(S.tok);
    model_close(S.m);
    backend_destroy(S.b);
    metrics_destroy(S.met);
out_cfg:
    if (code && err.msg[0]) fprintf(stderr, "strata serve: %s\n", err.msg);
    config_deinit(&cfg);
    return code;
}
