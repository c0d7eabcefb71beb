/* srv_fixture.h - a server's state without its HTTP listener or loop: the model,
 * tokenizer, chat template and engine of a checkpoint, loaded by the daemon's own
 * srv_load, for the tests and the fuzzer that build requests (gen_build) directly. */
#ifndef STRATA_TESTS_SRV_FIXTURE_H
#define STRATA_TESTS_SRV_FIXTURE_H

#include <stdio.h>
#include <string.h>

#include "server/server_internal.h"

typedef struct srv_fixture {
    config cfg;
    srv S;
} srv_fixture;

/* model: a checkpoint directory; 0 or -1 (the reason on stderr). */
static inline int srv_fixture_open(srv_fixture *f, const char *model, int max_seqs, int ctx) {
    strata_err err = {0};
    memset(f, 0, sizeof *f);
    if (config_init(&f->cfg, &err)) goto fail;
    char *argv[] = {"serve", "--model", (char *)model, "--device", "cpu", "--threads",
                    "1",     NULL,      NULL,          NULL,       NULL,  NULL};
    char seqs[16], ctxs[16];
    snprintf(seqs, sizeof seqs, "%d", max_seqs);
    snprintf(ctxs, sizeof ctxs, "%d", ctx);
    argv[7] = "--max-seqs", argv[8] = seqs, argv[9] = "--ctx-size", argv[10] = ctxs;
    char *envp[] = {NULL};
    int help = 0;
    if (config_load(&f->cfg, 11, argv, envp, &help, &err)) goto fail;
    f->S.cfg = &f->cfg;
    f->S.model_name = f->cfg.model;
    f->S.im_end = -1;
    if (srv_load(&f->S, &err)) goto fail;
    return 0;
fail:
    fprintf(stderr, "srv_fixture: %s: %s\n", model, err.msg);
    return -1;
}

static inline void srv_fixture_close(srv_fixture *f) {
    srv_unload(&f->S);
    config_deinit(&f->cfg);
}

/* A request of job with a copy of body, as gen_start hands it to a worker. */
static inline srv_req *srv_fixture_request(srv_fixture *f, int job, const char *body, size_t len) {
    srv_req *r = req_new(&f->S, job);
    if (r && strbuf_add(&r->body, body, len)) {
        req_unref(r);
        return NULL;
    }
    return r;
}

#endif
