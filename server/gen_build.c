/* gen_build.c - a generation request's body to engine sequences.
 *
 * Parses and validates the body (openai.c), checks the model name, renders the chat
 * template, tokenizes, checks prompt + max_tokens against the context and creates
 * one engine sequence per choice (n per prompt). It runs on a preparation worker
 * (prep.c), never on an HTTP thread, since template and tokenizer work grows with
 * the body; the unit test and the request fuzzer call it directly. Every failure
 * returns with r in a state req_unref frees: choices are counted only once
 * their array exists, and a choice without a sequence holds nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server_internal.h"

/* Step thread: a sequence has new output (or finished). */
static void gen_wake(void *ud) {
    srv_choice *ch = ud;
    srv_req *r = ch->req;
    pthread_mutex_lock(&r->mu);
    if (!r->detached && (r->oai.stream || req_all_finished(r))) req_resume_locked(r);
    pthread_mutex_unlock(&r->mu);
}

static void gen_seq_released(void *ud) { req_mem_unref(((srv_choice *)ud)->req); }

static int gen_nomem(openai_error *e) {
    openai_error_set(e, 503, "server_error", NULL, NULL, "out of memory");
    return -1;
}

/* The chat prompt: rendered, think-block state noted, tokenized into ids[0]. */
static int gen_tokenize_chat(srv *S, srv_req *r, int32_t **ids, int *n, openai_error *e) {
    strata_err err = {0};
    char *text = NULL;
    if (chat_prompt_render(S, &r->oai, &text, e)) return -1;
    if (S->has_think) {
        /* the generation prompt opened a think block the model continues */
        char *open = NULL, *close = NULL;
        for (char *p = text; (p = strstr(p, "<think>")); p++) open = p;
        for (char *p = text; (p = strstr(p, "</think>")); p++) close = p;
        r->split_reasoning = 1;
        if (open && (!close || close < open)) r->split_reasoning = 2;
    }
    size_t n_ids = 0;
    int rc = tok_encode(S->tok, text, strlen(text), 0, &ids[0], &n_ids, &err);
    free(text);
    if (rc) {
        openai_error_from_strata(e, &err, "messages");
        return -1;
    }
    n[0] = (int)n_ids;
    return 0;
}

/* Turns the prompts of r into token ids; ids[i] malloc'ed. */
static int gen_tokenize(srv *S, srv_req *r, int32_t **ids, int *n, openai_error *e) {
    openai_request *o = &r->oai;
    strata_err err = {0};
    if (o->kind == OPENAI_CHAT) return gen_tokenize_chat(S, r, ids, n, e);
    if (o->echo && !(r->echo = calloc((size_t)o->n_prompts, sizeof *r->echo))) return gen_nomem(e);
    for (int i = 0; i < o->n_prompts; i++) {
        openai_prompt *p = &o->prompts[i];
        if (p->ids) {
            if (!(ids[i] = malloc((size_t)p->n_ids * sizeof(int32_t)))) return gen_nomem(e);
            memcpy(ids[i], p->ids, (size_t)p->n_ids * sizeof(int32_t));
            n[i] = p->n_ids;
            if (r->echo && S->tok) {
                size_t tl;
                if (tok_decode(S->tok, p->ids, (size_t)p->n_ids, 0, &r->echo[i], &tl, &err)) {
                    openai_error_from_strata(e, &err, "prompt");
                    return -1;
                }
            }
        } else {
            if (!S->tok) {
                openai_error_set(e, 400, "invalid_request_error", "prompt", NULL,
                                 "This model has no tokenizer; send the prompt as token ids");
                return -1;
            }
            size_t n_ids = 0;
            if (tok_encode(S->tok, p->text, p->text_len, 1, &ids[i], &n_ids, &err)) {
                openai_error_from_strata(e, &err, "prompt");
                return -1;
            }
            n[i] = (int)n_ids;
            if (r->echo && !(r->echo[i] = strdup(p->text))) return gen_nomem(e);
        }
    }
    return 0;
}

/* The generation budget of a prompt of n tokens, or -1 with e when it does not fit. */
static int gen_budget(srv *S, const openai_request *o, int n, openai_error *e) {
    const char *what = o->kind == OPENAI_CHAT ? "messages" : "prompt";
    if (n < 1) {
        openai_error_set(e, 400, "invalid_request_error", what, NULL,
                         "The prompt is empty after tokenization");
        return -1;
    }
    /* max_tokens 0 (completions with echo only): prefill, score the prompt, stop */
    int max_tokens = o->max_tokens >= 0 ? o->max_tokens : S->ctx - n;
    if ((long long)n + max_tokens <= S->ctx && (o->max_tokens >= 0 || max_tokens >= 1))
        return max_tokens;
    int asked = o->max_tokens > 0 ? o->max_tokens : 0;
    openai_error_set(
        e, 400, "invalid_request_error", what, "context_length_exceeded",
        "This model's maximum context length is %d tokens. However, you requested %lld "
        "tokens (%d in the %s, %d in the completion). Please reduce the length of the "
        "%s or completion.",
        S->ctx, (long long)n + asked, n, what, asked, what);
    return -1;
}

static void gen_sampling(const openai_request *o, int j, sampler_params *sp) {
    sampler_params_default(sp);
    sp->temperature = (float)o->temperature;
    sp->top_k = o->top_k;
    sp->top_p = (float)o->top_p;
    sp->min_p = (float)o->min_p;
    sp->repetition_penalty = (float)o->repetition_penalty;
    sp->presence_penalty = (float)o->presence_penalty;
    sp->frequency_penalty = (float)o->frequency_penalty;
    /* a seeded request gives choice j the stream seed + j: reproducible, distinct */
    sp->seed = o->has_seed ? o->seed + (uint64_t)j : (uint64_t)req_random_u64();
    sp->n_logit_bias = o->n_bias;
    sp->bias_ids = o->bias_ids;
    sp->bias_vals = o->bias_vals;
    sp->top_logprobs = o->logprobs ? o->top_logprobs : 0;
    sp->logprobs = o->logprobs;
}

static int gen_make_choices(srv *S, srv_req *r, int32_t **ids, const int *n, openai_error *e) {
    openai_request *o = &r->oai;
    int n_prompts = o->kind == OPENAI_CHAT ? 1 : o->n_prompts;
    int32_t stop_ids[OPENAI_MAX_STOP + 1];
    int n_stop_ids = 0;
    for (int i = 0; i < o->n_stop_ids; i++) stop_ids[n_stop_ids++] = o->stop_ids[i];
    if (o->kind == OPENAI_CHAT && S->im_end >= 0 && !o->ignore_eos)
        stop_ids[n_stop_ids++] = S->im_end;
    /* at most --max-seqs: openai_request_parse refused more (lim.max_n in gen_build) */
    long long n_choices = (long long)n_prompts * o->n;
    if (!(r->ch = calloc((size_t)n_choices, sizeof *r->ch))) return gen_nomem(e);
    r->n_choices = (int)n_choices;
    for (int p = 0; p < n_prompts; p++) {
        int budget = gen_budget(S, o, n[p], e);
        if (budget < 0) return -1;
        r->prompt_tokens += n[p];
        for (int j = 0; j < o->n; j++) {
            srv_choice *ch = &r->ch[p * o->n + j];
            ch->req = r;
            ch->prompt_idx = p;
            ch->n_prompt = n[p];
            toolcall_delta_init(&ch->td);
            if (o->kind == OPENAI_CHAT && o->tools && !o->tool_choice_none &&
                S->tc_fmt != TOOLCALL_NONE) {
                strata_err err = {0};
                if (toolcall_parser_create(&ch->tc, S->tc_fmt, o->tools, &err)) {
                    openai_error_from_strata(e, &err, "tools");
                    return -1;
                }
            }
            engine_seq_params sp = {
                .prompt = ids[p],
                .n_prompt = n[p],
                .max_tokens = budget,
                .logprobs = o->logprobs,
                .n_stop = o->n_stop,
                .prompt_logprobs = o->kind == OPENAI_COMPLETION && o->echo && o->logprobs,
                .stop = (const char *const *)o->stop,
                .n_stop_ids = n_stop_ids,
                .stop_ids = stop_ids,
                .ignore_eos = o->ignore_eos,
                /* Gemma 4 writes its calls with special tokens
                                     * (<|tool_call>, <|"|>): the parser must see them */
                .skip_special = o->skip_special_tokens &&
                                !(o->kind == OPENAI_CHAT && o->tools && !o->tool_choice_none &&
                                  S->tc_fmt == TOOLCALL_GEMMA4),
                .split_reasoning = r->split_reasoning > 0,
                .start_in_reasoning = r->split_reasoning == 2};
            gen_sampling(o, j, &sp.sampling);
            strata_err err = {0};
            if ((o->json_object && constrain_json_object(&sp.cons, S->cvocab, &err)) ||
                (o->grammar && constrain_grammar_ex(&sp.cons, S->cvocab, o->grammar, o->grammar_len,
                                                    r->grammar_start, r->grammar_flags, &err))) {
                openai_error_from_strata(e, &err,
                                         o->grammar ? o->grammar_param : "response_format");
                return -1;
            }
            atomic_fetch_add(&r->mem, 1); /* dropped by gen_seq_released */
            if (engine_seq_create(S->eng, &sp, gen_wake, gen_seq_released, ch, &ch->seq, &err)) {
                constrain_free(sp.cons);
                atomic_fetch_sub(&r->mem, 1);
                ch->seq = NULL;
                openai_error_from_strata(e, &err, o->kind == OPENAI_CHAT ? "messages" : "prompt");
                return -1;
            }
        }
    }
    return 0;
}

int gen_build(srv *S, srv_req *r, openai_error *e) {
    openai_limits lim = {.vocab = S->vocab, .max_n = S->max_seqs};
    int kind = r->job == SRV_JOB_COMPLETION ? OPENAI_COMPLETION : OPENAI_CHAT;
    const char *body = r->body.p ? r->body.p : "";
    size_t len = r->body.len;
    char *chat = NULL; /* a Responses body as the chat body that runs it */
    if (r->job == SRV_JOB_RESPONSES) {
        if (responses_to_chat(body, len, &chat, &r->resp_echo, e)) return -1;
        body = chat, len = strlen(chat);
    }
    int bad = openai_request_parse(&r->oai, kind, body, len, &lim, e);
    free(chat);
    if (bad) {
        if (r->job == SRV_JOB_RESPONSES) responses_error_param(e);
        return -1;
    }
    const char *model = r->oai.model;
    if (model && strcmp(model, S->model_name) && strcmp(model, S->cfg->model)) {
        openai_error_set(e, 404, "not_found_error", "model", "model_not_found",
                         "The model '%.200s' does not exist; this server serves '%.200s'", model,
                         S->model_name);
        return -1;
    }
    if ((r->oai.json_object || r->oai.grammar) && !S->cvocab) {
        openai_error_set(e, 400, "invalid_request_error",
                         r->oai.grammar ? r->oai.grammar_param : "response_format", NULL,
                         "constrained output needs the model's tokenizer");
        return -1;
    }
    if (kind == OPENAI_CHAT && (!S->tok || !S->tmpl)) {
        openai_error_set(e, 400, "invalid_request_error", "messages", NULL,
                         "This model has no %s; use /v1/completions with token ids",
                         S->tok ? "chat template" : "tokenizer");
        return -1;
    }
    int n_prompts = kind == OPENAI_CHAT ? 1 : r->oai.n_prompts;
    int32_t **ids = calloc((size_t)n_prompts, sizeof *ids);
    int *n = calloc((size_t)n_prompts, sizeof *n), rc = -1;
    if (!ids || !n) gen_nomem(e);
    else
        rc = gen_tokenize(S, r, ids, n, e) || gen_grammar(S, r, e) ||
                     gen_make_choices(S, r, ids, n, e)
                 ? -1
                 : 0;
    for (int i = 0; ids && i < n_prompts; i++) free(ids[i]);
    free(ids);
    free(n);
    if (rc) {
        if (r->job == SRV_JOB_RESPONSES) responses_error_param(e);
        return -1;
    }
    uint64_t a = (uint64_t)req_random_u64(), b = (uint64_t)req_random_u64();
    snprintf(r->id, sizeof r->id, "%s%016llx%016llx",
             r->job == SRV_JOB_RESPONSES ? "resp_"
             : kind == OPENAI_CHAT       ? "chatcmpl-"
                                         : "cmpl-",
             (unsigned long long)a, (unsigned long long)b);
    r->created = (long long)time(NULL);
    return 0;
}
