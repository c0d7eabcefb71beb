/* gen_format.c - engine output as OpenAI JSON: whole responses and SSE chunks.
 *
 * Shapes follow openai-python's types: chat.completion / chat.completion.chunk with
 * a role chunk first, content (and reasoning, named both reasoning_content and
 * reasoning) deltas, an empty-delta chunk carrying finish_reason, an optional
 * choices:[] usage chunk, then `data: [DONE]`; text_completion likewise. An error after the stream started is one
 * `data: {"error":{...}}` event, then [DONE]. Caller holds req->mu (MHD thread).
 *
 * Completions with echo and logprobs also cover the prompt, as vLLM: the first prompt
 * token has null token_logprob and top_logprobs, text_offset runs over prompt then
 * completion (in characters, as Python's len), and a stream holds the echo back until
 * the prompt's logprobs are there, so one chunk carries the prompt text and its
 * logprobs (plus whatever was generated in the same step). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/utf8.h"
#include "server/server_internal.h"

/* A JSON string of n bytes; invalid UTF-8 (never expected from the detokenizer)
 * becomes U+FFFD rather than failing the response. */
json_t *fmt_str(const char *s, size_t n) {
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    if (j) return j;
    strbuf b = {0};
    j = unicode_utf8_lossy(&b, s, n) ? NULL : json_stringn(b.p ? b.p : "", b.len);
    strbuf_free(&b);
    return j;
}

/* The reasoning text under both names: vLLM renamed reasoning_content to reasoning,
 * and clients read one or the other. */
static void fmt_set_reasoning(json_t *obj, const char *s, size_t n) {
    json_t *j = fmt_str(s, n);
    json_object_set(obj, "reasoning_content", j);
    json_object_set_new(obj, "reasoning", j);
}

static double fmt_lp(float x) { return isfinite(x) ? (double)x : -9999.0; }

static json_t *fmt_tok(const srv *S, int32_t id) {
    if (!S->tok) {
        char b[24];
        snprintf(b, sizeof b, "[%d]", id);
        return json_string(b);
    }
    char *t = NULL;
    size_t n = 0;
    strata_err e;
    if (tok_decode(S->tok, &id, 1, 0, &t, &n, &e)) return json_string("");
    json_t *j = fmt_str(t, n);
    free(t);
    return j;
}

/* Characters (code points) of a UTF-8 JSON string: what text_offset counts. */
static size_t fmt_chars(json_t *str) {
    const unsigned char *s = (const unsigned char *)json_string_value(str);
    size_t n = 0;
    for (size_t i = 0; i < json_string_length(str); i++) n += (s[i] & 0xC0) != 0x80;
    return n;
}

static json_t *fmt_bytes(json_t *str) {
    json_t *a = json_array();
    const unsigned char *s = (const unsigned char *)json_string_value(str);
    for (size_t i = 0; i < json_string_length(str); i++)
        json_array_append_new(a, json_integer(s[i]));
    return a;
}

/* Appends the logprobs of toks to lp (chat: {content:[...]}; completions: the four
 * parallel arrays). Creates lp on first use. An entry with n_top < 0 (the first prompt
 * token) has no logprob: null in both arrays. */
static void fmt_logprobs(const srv_req *r, srv_choice *ch, const sampler_result *toks, int n,
                         json_t **lp) {
    const srv *S = r->S;
    if (!*lp)
        *lp = r->oai.kind == OPENAI_CHAT
                  ? json_pack("{s:[], s:n}", "content", "refusal")
                  : json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs",
                              "top_logprobs", "text_offset");
    for (int i = 0; i < n; i++) {
        const sampler_result *t = &toks[i];
        json_t *tok = fmt_tok(S, t->token);
        if (r->oai.kind == OPENAI_CHAT) {
            json_t *top = json_array();
            for (int k = 0; k < t->n_top && k < r->oai.top_logprobs; k++) {
                json_t *s = fmt_tok(S, t->top[k].token);
                json_array_append_new(top,
                                      json_pack("{s:o, s:f, s:o}", "token", s, "logprob",
                                                fmt_lp(t->top[k].logprob), "bytes", fmt_bytes(s)));
            }
            json_array_append_new(json_object_get(*lp, "content"),
                                  json_pack("{s:o, s:f, s:o, s:o}", "token", json_incref(tok),
                                            "logprob", fmt_lp(t->logprob), "bytes", fmt_bytes(tok),
                                            "top_logprobs", top));
        } else if (t->n_top < 0) {
            json_array_append(json_object_get(*lp, "tokens"), tok);
            json_array_append_new(json_object_get(*lp, "token_logprobs"), json_null());
            json_array_append_new(json_object_get(*lp, "top_logprobs"), json_null());
            json_array_append_new(json_object_get(*lp, "text_offset"),
                                  json_integer((json_int_t)ch->text_offset));
            ch->text_offset += fmt_chars(tok);
        } else {
            json_t *top = json_object();
            for (int k = 0; k < t->n_top && k < r->oai.top_logprobs; k++) {
                json_t *s = fmt_tok(S, t->top[k].token);
                /* distinct tokens can share a text (byte pieces): keep the likelier */
                if (!json_object_get(top, json_string_value(s)))
                    json_object_set_new(top, json_string_value(s),
                                        json_real(fmt_lp(t->top[k].logprob)));
                json_decref(s);
            }
            json_array_append(json_object_get(*lp, "tokens"), tok);
            json_array_append_new(json_object_get(*lp, "token_logprobs"),
                                  json_real(fmt_lp(t->logprob)));
            json_array_append_new(json_object_get(*lp, "top_logprobs"), top);
            json_array_append_new(json_object_get(*lp, "text_offset"),
                                  json_integer((json_int_t)ch->text_offset));
            ch->text_offset += fmt_chars(tok);
        }
        json_decref(tok);
    }
}

/* The prompt tokens the prefix cache restored, once per prompt as prompt_tokens counts
 * them (the n choices of one prompt share it: the first one's). */
int fmt_cached_tokens(const srv_req *r) {
    int cached = 0;
    for (int i = 0; i < r->n_choices; i++) {
        int first = 1;
        for (int j = 0; j < i && first; j++)
            if (r->ch[j].prompt_idx == r->ch[i].prompt_idx) first = 0;
        if (first && r->ch[i].seq) cached += engine_seq_cached_tokens(r->ch[i].seq);
    }
    return cached;
}

static json_t *fmt_usage(const srv_req *r) {
    int gen = 0;
    for (int i = 0; i < r->n_choices; i++) gen += r->ch[i].n_gen;
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", r->prompt_tokens,
                     "completion_tokens", gen, "total_tokens", r->prompt_tokens + gen,
                     "prompt_tokens_details", "cached_tokens", fmt_cached_tokens(r));
}

static const char *fmt_finish(int f) {
    return f == ENGINE_FINISH_STOP ? "stop" : f == ENGINE_FINISH_LENGTH ? "length" : "abort";
}

/* A choice that made tool calls finished for them (vLLM reports so also when the length
 * limit came after a complete call: the calls are there to run). */
static const char *fmt_finish_choice(const srv_choice *ch) {
    if (ch->tc && toolcall_count(ch->tc) > 0 &&
        (ch->finish == ENGINE_FINISH_STOP || ch->finish == ENGINE_FINISH_LENGTH))
        return "tool_calls";
    return fmt_finish(ch->finish);
}

/* Feeds a chat choice's new content to its tool-call parser: ch->td then holds the content
 * to send and the calls completed. */
int fmt_tool_feed(srv_req *r, srv_choice *ch, const char *text, size_t len, int final) {
    strata_err err = {0};
    if (ch->tc_final) return 0; /* a response formatted again: td holds it */
    ch->tc_final = final;
    toolcall_delta_clear(&ch->td);
    if (!toolcall_feed(ch->tc, text ? text : "", text ? len : 0, final, &ch->td, &err)) return 0;
    openai_error_set(&r->err, 500, "server_error", NULL, NULL, "tool calls: %s", err.msg);
    return -1;
}

/* One call as OpenAI's message.tool_calls entry. */
static json_t *fmt_call(const toolcall_call *c) {
    return json_pack("{s:s, s:s, s:{s:o, s:o}}", "id", c->id, "type", "function", "function",
                     "name", fmt_str(c->name, strlen(c->name)), "arguments",
                     fmt_str(c->arguments, strlen(c->arguments)));
}

/* Sets r->err when a choice ended in an error or was cut short; 0 when all is well. */
int fmt_check_failure(srv_req *r) {
    for (int i = 0; i < r->n_choices; i++) {
        srv_choice *ch = &r->ch[i];
        if (ch->finish == ENGINE_FINISH_ERROR) {
            openai_error_set(&r->err, 500, "server_error", NULL, NULL, "%s",
                             ch->err[0] ? ch->err : "generation failed");
            return 1;
        }
        if (ch->finish == ENGINE_FINISH_ABORT) {
            if (r->timed_out)
                openai_error_set(&r->err, 408, "timeout_error", NULL, "request_timeout",
                                 "The request did not finish within %lld s (--request-timeout)",
                                 r->S->cfg->request_timeout);
            else if (r->shutdown)
                openai_error_set(&r->err, 503, "unavailable_error", NULL, NULL,
                                 "The server is shutting down");
            else
                openai_error_set(&r->err, 499, "cancelled", NULL, NULL,
                                 "The request was cancelled");
            return 1;
        }
    }
    return 0;
}

void gen_take_all(srv_req *r) {
    for (int i = 0; i < r->n_choices; i++) {
        srv_choice *ch = &r->ch[i];
        while (engine_seq_take(ch->seq, &ch->chunk)) {
            engine_chunk *c = &ch->chunk;
            strbuf_add(&ch->text, c->text.p, c->text.len);
            strbuf_add(&ch->reasoning, c->reasoning.p, c->reasoning.len);
            /* the prompt's entries come in the take before or with the first token's */
            if (r->oai.logprobs && c->prompt_done)
                fmt_logprobs(r, ch, c->prompt_tok, c->n_prompt_tok, &ch->lp);
            if (r->oai.logprobs) fmt_logprobs(r, ch, c->tok, c->n_tok, &ch->lp);
            ch->n_gen = c->n_generated;
            if (c->reasoning.len && !c->text.len) ch->n_reasoning += c->n_new;
            if (c->finish) {
                ch->finish = c->finish;
                snprintf(ch->err, sizeof ch->err, "%s", c->error);
                break;
            }
        }
    }
}

json_t *gen_format_full(srv_req *r) {
    const srv *S = r->S;
    if (r->job == SRV_JOB_RESPONSES) return responses_format_full(r);
    if (fmt_check_failure(r)) return NULL;
    json_t *choices = json_array();
    for (int i = 0; i < r->n_choices; i++) {
        srv_choice *ch = &r->ch[i];
        json_t *lp = ch->lp ? json_incref(ch->lp) : json_null(), *c;
        if (r->oai.kind == OPENAI_CHAT) {
            const char *text = ch->text.p;
            size_t len = ch->text.len;
            if (ch->tc) {
                if (fmt_tool_feed(r, ch, text, len, 1)) {
                    json_decref(lp);
                    json_decref(choices);
                    return NULL;
                }
                text = ch->td.content.p, len = ch->td.content.len;
            }
            /* a turn of only calls has null content, as OpenAI's */
            json_t *content = ch->td.n_calls && !len ? json_null() : fmt_str(text, len);
            json_t *msg =
                json_pack("{s:s, s:o, s:n}", "role", "assistant", "content", content, "refusal");
            if (ch->reasoning.len) fmt_set_reasoning(msg, ch->reasoning.p, ch->reasoning.len);
            if (ch->td.n_calls) {
                json_t *calls = json_array();
                for (int k = 0; k < ch->td.n_calls; k++)
                    json_array_append_new(calls, fmt_call(&ch->td.calls[k]));
                json_object_set_new(msg, "tool_calls", calls);
            }
            c = json_pack("{s:i, s:o, s:o, s:s}", "index", i, "message", msg, "logprobs", lp,
                          "finish_reason", fmt_finish_choice(ch));
        } else {
            strbuf t = {0};
            if (r->echo && r->echo[ch->prompt_idx]) strbuf_adds(&t, r->echo[ch->prompt_idx]);
            strbuf_add(&t, ch->text.p ? ch->text.p : "", ch->text.len);
            c = json_pack("{s:i, s:o, s:o, s:s}", "index", i, "text", fmt_str(t.p, t.len),
                          "logprobs", lp, "finish_reason", fmt_finish(ch->finish));
            strbuf_free(&t);
        }
        json_array_append_new(choices, c);
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o}", "id", r->id, "object",
                     r->oai.kind == OPENAI_CHAT ? "chat.completion" : "text_completion", "created",
                     (json_int_t)r->created, "model", S->model_name, "system_fingerprint",
                     STRATA_FINGERPRINT, "choices", choices, "usage", fmt_usage(r));
}

/* Appends one `data: {...}` event with the envelope around choices (or usage). */
static int fmt_event(srv_req *r, json_t *choices, json_t *usage) {
    json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o}", "id", r->id, "object",
                          r->oai.kind == OPENAI_CHAT ? "chat.completion.chunk" : "text_completion",
                          "created", (json_int_t)r->created, "model", r->S->model_name,
                          "system_fingerprint", STRATA_FINGERPRINT, "choices", choices);
    if (j && usage) json_object_set_new(j, "usage", usage);
    else json_decref(usage);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) return STRATA_ENOMEM;
    int rc =
        strbuf_adds(&r->out, "data: ") | strbuf_adds(&r->out, s) | strbuf_add(&r->out, "\n\n", 2);
    free(s);
    return rc ? STRATA_ENOMEM : 0;
}

static int fmt_choice_event(srv_req *r, int i, const char *text, size_t text_len,
                            const char *reasoning, size_t reasoning_len, json_t *lp,
                            const char *finish, int role) {
    json_t *c;
    if (!lp) lp = json_null();
    if (r->oai.kind == OPENAI_CHAT) {
        json_t *delta = json_object();
        if (role) json_object_set_new(delta, "role", json_string("assistant"));
        if (text_len || role) json_object_set_new(delta, "content", fmt_str(text, text_len));
        if (reasoning_len) fmt_set_reasoning(delta, reasoning, reasoning_len);
        c = json_pack("{s:i, s:o, s:o, s:o}", "index", i, "delta", delta, "logprobs", lp,
                      "finish_reason", finish ? json_string(finish) : json_null());
    } else {
        c = json_pack("{s:i, s:o, s:o, s:o}", "index", i, "text", fmt_str(text, text_len),
                      "logprobs", lp, "finish_reason", finish ? json_string(finish) : json_null());
    }
    return fmt_event(r, json_pack("[o]", c), NULL);
}

/* The stream deltas of one tool call: its id, type and name with empty arguments, then
 * the arguments (OpenAI's shape; clients concatenate the argument fragments by index). */
static int fmt_call_events(srv_req *r, int i, srv_choice *ch, const toolcall_call *call) {
    int k = ch->n_calls_sent++, rc = 0;
    json_t *head = json_pack("{s:[{s:i, s:s, s:s, s:{s:o, s:s}}]}", "tool_calls", "index", k, "id",
                             call->id, "type", "function", "function", "name",
                             fmt_str(call->name, strlen(call->name)), "arguments", "");
    json_t *args = json_pack("{s:[{s:i, s:{s:o}}]}", "tool_calls", "index", k, "function",
                             "arguments", fmt_str(call->arguments, strlen(call->arguments)));
    json_t *deltas[2] = {head, args};
    for (int d = 0; d < 2; d++) {
        json_t *c = deltas[d] ? json_pack("{s:i, s:o, s:n, s:n}", "index", i, "delta", deltas[d],
                                          "logprobs", "finish_reason")
                              : NULL;
        rc |= c ? fmt_event(r, json_pack("[o]", c), NULL) : STRATA_ENOMEM;
    }
    return rc;
}

int gen_format_stream(srv_req *r, int *all_done) {
    int rc = 0, failed = 0;
    if (r->job == SRV_JOB_RESPONSES) return responses_format_stream(r, all_done);
    for (int i = 0; i < r->n_choices && !failed; i++) {
        srv_choice *ch = &r->ch[i];
        if (ch->finish) continue;
        const char *echo = r->echo ? r->echo[ch->prompt_idx] : NULL;
        /* echo with logprobs: the echo waits for the prompt's logprobs (the engine
         * delivers them all in one take, before or with the first token) */
        int prompt_lp = r->echo && r->oai.logprobs;
        if (!ch->started && !prompt_lp) {
            ch->started = 1;
            if (r->oai.kind == OPENAI_CHAT)
                rc |= fmt_choice_event(r, i, "", 0, NULL, 0, NULL, NULL, 1);
            else if (echo) rc |= fmt_choice_event(r, i, echo, strlen(echo), NULL, 0, NULL, NULL, 0);
        }
        if (!engine_seq_take(ch->seq, &ch->chunk)) continue;
        engine_chunk *c = &ch->chunk;
        ch->n_gen = c->n_generated;
        json_t *lp = NULL;
        const char *text = c->text.p;
        size_t text_len = c->text.len;
        strbuf first = {0};
        if (!ch->started && c->prompt_done) {
            ch->started = 1;
            fmt_logprobs(r, ch, c->prompt_tok, c->n_prompt_tok, &lp);
            rc |=
                strbuf_adds(&first, echo ? echo : "") | strbuf_add(&first, c->text.p, c->text.len);
            text = first.p, text_len = first.len;
        }
        if (r->oai.logprobs && c->n_tok) fmt_logprobs(r, ch, c->tok, c->n_tok, &lp);
        if (ch->tc && !failed) {
            if (fmt_tool_feed(r, ch, text, text_len, c->finish != 0)) {
                rc |= STRATA_ENOMEM; /* the parser fails only for memory */
                text_len = 0;
            } else {
                text = ch->td.content.p, text_len = ch->td.content.len;
            }
        }
        if (text_len || c->reasoning.len || lp)
            rc |= fmt_choice_event(r, i, text, text_len, c->reasoning.p, c->reasoning.len, lp, NULL,
                                   0);
        for (int k = 0; ch->tc && k < ch->td.n_calls; k++)
            rc |= fmt_call_events(r, i, ch, &ch->td.calls[k]);
        strbuf_free(&first);
        if (!c->finish) continue;
        ch->finish = c->finish;
        snprintf(ch->err, sizeof ch->err, "%s", c->error);
        r->n_finished++;
        if (c->finish == ENGINE_FINISH_STOP || c->finish == ENGINE_FINISH_LENGTH)
            rc |= fmt_choice_event(r, i, NULL, 0, NULL, 0, NULL, fmt_finish_choice(ch), 0);
        else failed = 1;
    }
    if (failed) {
        /* one error event ends the whole stream; the other choices are dropped */
        fmt_check_failure(r);
        for (int i = 0; i < r->n_choices; i++)
            if (!r->ch[i].finish) {
                engine_seq_cancel(r->ch[i].seq);
                r->ch[i].finish = ENGINE_FINISH_ABORT;
                r->n_finished++;
            }
        json_t *e = openai_error_json(&r->err);
        char *s = e ? json_dumps(e, JSON_COMPACT) : NULL;
        json_decref(e);
        if (s)
            rc |= strbuf_adds(&r->out, "data: ") | strbuf_adds(&r->out, s) |
                  strbuf_adds(&r->out, "\n\n");
        free(s);
    } else if (r->n_finished == r->n_choices && r->oai.include_usage) {
        rc |= fmt_event(r, json_array(), fmt_usage(r));
    }
    *all_done = r->n_finished == r->n_choices;
    if (*all_done && !r->stream_done) {
        rc |= strbuf_adds(&r->out, "data: [DONE]\n\n");
        r->stream_done = 1;
        r->phase = REQ_FINISHED;
    }
    return rc ? STRATA_ENOMEM : 0;
}

/* Only called with r->out drained, so a comment always falls between two complete
 * events. SSE parsers (browsers, openai-python) skip lines starting with ':'. */
int gen_format_sse_idle_locked(srv_req *r) {
    if (r->phase == REQ_FAILED && !r->stream_done) {
        /* failed while queued (408, 503) after a keep-alive had sent the 200 headers:
         * the error goes in the stream, as for one that fails while running */
        json_t *e = openai_error_json(&r->err);
        char *s = e ? json_dumps(e, JSON_COMPACT) : NULL;
        json_decref(e);
        if (s) strbuf_addf(&r->out, "data: %s\n\n", s); /* whole or not at all */
        free(s);
        strbuf_adds(&r->out, "data: [DONE]\n\n");
        r->stream_done = 1;
        r->ka_due = 0;
        return 1;
    }
    if (!r->ka_due) return 0;
    r->ka_due = 0;
    return strbuf_adds(&r->out, ": keep-alive\n\n") == 0;
}
