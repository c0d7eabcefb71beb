/* serve_load.c - what `strata serve` loads before it is ready: the model (a local
 * directory or .gguf file, a hub id resolved into the Hugging Face cache, one GGUF file
 * of a hub repository with --gguf-file, or a dummy preset), its
 * backend, tokenizer, chat template and the engine. The loader thread runs it while
 * /health answers 503; the request-building test and fuzzer run it directly. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/backend_select.h"
#include "engine/hub/hub.h"
#include "server/serve.h"
#include "server/server_internal.h"

static int srv_is_dir(const char *p) {
    struct stat st;
    return p && !stat(p, &st) && S_ISDIR(st.st_mode);
}

static void srv_on_slot_free(void *ud) {
    srv *S = ud;
    uv_async_send(&S->async);
}

static void srv_on_token_gap(void *ud, double s) {
    metrics_observe(((srv *)ud)->met, METRICS_ITL, s);
}

/* Where the model is: a local directory or .gguf file as given, a hub id resolved into
 * the Hugging Face cache, or with --gguf-file one GGUF file of a local directory or of a
 * hub repository (a GGUF repository has no config.json, so only that file is fetched).
 * *path points into S->model_dir afterwards, or stays cfg->model. */
static int srv_model_path(srv *S, const char **path, int dummy, strata_err *err) {
    const config *cfg = S->cfg;
    hub_opts ho;
    int rc;
    if (dummy || (!cfg->gguf_file && (srv_is_dir(*path) || model_text_is_gguf(*path)))) {
        snprintf(S->model_dir, sizeof S->model_dir, "%s", *path);
        return 0;
    }
    if ((rc = hub_opts_from_env(&ho, err))) return rc;
    rc = cfg->gguf_file ? hub_resolve_file(&ho, *path, cfg->revision, cfg->gguf_file, S->model_dir,
                                           sizeof S->model_dir, NULL, NULL, err)
                        : hub_resolve(&ho, *path, cfg->revision, S->model_dir, sizeof S->model_dir,
                                      NULL, NULL, err);
    if (rc) return rc;
    *path = S->model_dir;
    return 0;
}

int srv_load(srv *S, strata_err *err) {
    const config *cfg = S->cfg;
    int dummy = cfg->load_format && !strcmp(cfg->load_format, "dummy");
    int rc;
    const char *path = cfg->model;
    if ((rc = srv_model_path(S, &path, dummy, err))) return rc;
    dtype quant;
    if (model_quant_parse(cfg->quantization, &quant))
        return strata_err_set(err, STRATA_EINVALID,
                              "--quantization is '%s'; allowed none, q8_0, q4_k",
                              cfg->quantization);
    if ((rc = backend_create(cfg->device, (int)cfg->threads, &S->b, err))) return rc;
    model_opts mo = {.path = path,
                     .load_dummy = dummy,
                     .weight_dtype = DTYPE_COUNT,
                     .quant = quant,
                     .weights_mmap = cfg->mmap,
                     .max_seqs = (int)cfg->max_seqs,
                     .ctx_size = (int)cfg->ctx_size,
                     .step_tokens = (int)(cfg->max_seqs + cfg->prefill_chunk),
                     .seed = (uint64_t)cfg->seed,
                     .ple_on_device = cfg->ple_on_device,
                     .kv_cache = model_kv_cache_parse(cfg->kv_cache_dtype),
                     .kv_block = (int)cfg->kv_block_size,
                     .kv_memory = cfg->kv_cache_memory,
                     .gpu_util = cfg->gpu_memory_utilization,
                     .reserve_bytes = cfg->prefix_cache ? cfg->prefix_cache_memory : 0};
    if ((rc = model_open(&S->m, &mo, S->b, err))) return rc;
    const model_info *mi = model_get_info(S->m);
    const char *tsrc = cfg->tokenizer ? cfg->tokenizer : dummy ? NULL : path;
    rc = tsrc ? model_text_open(tsrc, &S->tok, &S->tmpl, err) : STRATA_ENOTFOUND;
    if (rc && (rc != STRATA_ENOTFOUND || cfg->tokenizer))
        return strata_err_wrap(err, cfg->tokenizer ? "--tokenizer: " : "tokenizer: ");
    if (S->tok) {
        if (!S->tmpl)
            fprintf(stderr, "strata: %s has no chat template; /v1/chat/completions is off\n", tsrc);
        if ((rc = toolcall_format_pick(cfg->tool_call_parser, mi->arch,
                                       S->tmpl ? chat_template_source(S->tmpl) : NULL, &S->tc_fmt,
                                       err)))
            return rc;
        if ((rc = constrain_vocab_build(&S->cvocab, S->tok, mi->vocab, err)))
            return strata_err_wrap(err, "constrained decoding: ");
        S->has_think =
            tok_piece_to_id(S->tok, "<think>") >= 0 && tok_piece_to_id(S->tok, "</think>") >= 0;
        S->im_end = tok_piece_to_id(S->tok, "<|im_end|>");
    } else {
        fprintf(stderr, "strata: no tokenizer; prompts must be token ids and text is [id]\n");
    }
    engine_opts eo = {.max_seqs = (int)cfg->max_seqs,
                      .prefill_chunk = (int)cfg->prefill_chunk,
                      .host_sampling = cfg->host_sampling,
                      .prefix_cache = cfg->prefix_cache,
                      .prefix_cache_memory = cfg->prefix_cache_memory,
                      .on_slot_free = srv_on_slot_free,
                      .on_token_gap = srv_on_token_gap,
                      .ud = S};
    if ((rc = engine_create(&S->eng, S->m, S->tok, &eo, err))) return rc;
    S->ctx = mi->ctx_size;
    S->vocab = mi->vocab;
    S->max_seqs = eo.max_seqs < mi->max_seqs ? eo.max_seqs : mi->max_seqs;
    fprintf(stderr,
            "strata: %s ready (%s on %s, vocab %d, ctx %d, %d slots, kv cache %d blocks of %d "
            "positions = %lld MiB, prefix cache %s)\n",
            S->model_name, mi->arch, backend_name(S->b), mi->vocab, mi->ctx_size, S->max_seqs,
            mi->kv_blocks, mi->kv_block, (long long)(mi->kv_block_bytes * mi->kv_blocks >> 20),
            cfg->prefix_cache ? "on" : "off");
    return 0;
}

void srv_unload(srv *S) {
    engine_destroy(S->eng);
    constrain_vocab_free(S->cvocab);
    S->cvocab = NULL;
    chat_template_free(S->tmpl);
    tok_free(S->tok);
    model_close(S->m);
    backend_destroy(S->b);
    S->eng = NULL, S->tmpl = NULL, S->tok = NULL, S->m = NULL, S->b = NULL;
}
