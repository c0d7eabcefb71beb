/* responses_fmt.c - engine output as a /v1/responses Response, whole or as typed SSE events.
 *
 * The request ran as a chat (responses_req.c); here its one choice becomes output items in
 * openai-python's types (openai/types/responses): a reasoning item (summary [] and the text
 * as one reasoning_text part) when the model reasoned, a message item with one output_text
 * part when it wrote text, a function_call item per parsed tool call. The skeleton
 * responses_req.c built supplies the echoed request fields. A stream is
 * `event: TYPE\ndata: {...}` events numbered by sequence_number: response.created and
 * response.in_progress, then per item output_item.added, content_part.added, the
 * text/reasoning_text deltas, their .done, content_part.done and output_item.done (a call:
 * added, function_call_arguments.delta and .done, done), and response.completed, or
 * response.incomplete when max_output_tokens cut it; no `data: [DONE]`, which OpenAI does
 * not send here either. A failure mid-stream is one `error` event. Caller holds req->mu
 * (MHD thread). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

enum { RS_NONE, RS_REASONING, RS_MESSAGE };

/* A stream's progress: the item open for deltas and the items finished. */
struct resp_stream {
    long long seq;  /* sequence_number of the next event */
    int started;    /* response.created sent */
    int n_items;    /* output_index of the next item */
    json_t *output; /* the finished items, in order: the final Response's output */
    int open;       /* RS_*: the item taking deltas */
    int open_index;
    char open_id[48];
    strbuf open_text; /* the open item's text so far (its .done events repeat it) */
};

void responses_free(srv_req *r) {
    json_decref(r->resp_echo);
    if (!r->resp_st) return;
    json_decref(r->resp_st->output);
    strbuf_free(&r->resp_st->open_text);
    free(r->resp_st);
}

static void resp_id(char *buf, size_t n, const char *prefix) {
    snprintf(buf, n, "%s_%016llx%016llx", prefix, (unsigned long long)req_random_u64(),
             (unsigned long long)req_random_u64());
}

static json_t *resp_usage(const srv_req *r) {
    const srv_choice *ch = &r->ch[0];
    return json_pack("{s:i, s:i, s:i, s:{s:i}, s:{s:i}}", "input_tokens", r->prompt_tokens,
                     "output_tokens", ch->n_gen, "total_tokens", r->prompt_tokens + ch->n_gen,
                     "input_tokens_details", "cached_tokens", fmt_cached_tokens(r),
                     "output_tokens_details", "reasoning_tokens", ch->n_reasoning);
}

/* The Response: the echoed fields plus these; output is stolen. A finished one (status
 * other than in_progress) carries usage. */
static json_t *resp_object(srv_req *r, const char *status, json_t *output) {
    json_t *o = json_copy(r->resp_echo);
    if (!o) {
        json_decref(output);
        return NULL;
    }
    int done = strcmp(status, "in_progress") != 0;
    int incomplete = !strcmp(status, "incomplete");
    if (json_object_set_new(o, "id", json_string(r->id)) ||
        json_object_set_new(o, "created_at", json_integer(r->created)) ||
        json_object_set_new(o, "model", json_string(r->S->model_name)) ||
        json_object_set_new(o, "status", json_string(status)) ||
        json_object_set_new(o, "output", output) ||
        json_object_set_new(o, "usage", done ? resp_usage(r) : json_null()) ||
        json_object_set_new(o, "incomplete_details",
                            incomplete ? json_pack("{s:s}", "reason", "max_output_tokens")
                                       : json_null())) {
        json_decref(o);
        return NULL;
    }
    if (done) json_object_set_new(o, "completed_at", json_integer(r->created));
    return o;
}

static json_t *resp_text_part(const char *type, const char *s, size_t n) {
    json_t *p = json_pack("{s:s, s:o}", "type", type, "text", fmt_str(s, n));
    if (p && !strcmp(type, "output_text")) {
        json_object_set_new(p, "annotations", json_array());
        json_object_set_new(p, "logprobs", json_array());
    }
    return p;
}

/* An item of kind RS_* (status in_progress: no content yet). */
static json_t *resp_item(int kind, const char *id, const char *status, const char *s, size_t n) {
    int open = !strcmp(status, "in_progress");
    if (kind == RS_REASONING)
        return json_pack(
            "{s:s, s:s, s:[], s:o, s:s}", "type", "reasoning", "id", id, "summary", "content",
            open ? json_array() : json_pack("[o]", resp_text_part("reasoning_text", s, n)),
            "status", status);
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "type", "message", "id", id, "role", "assistant",
                     "status", status, "content",
                     open ? json_array() : json_pack("[o]", resp_text_part("output_text", s, n)));
}

static json_t *resp_call_item(const toolcall_call *c, const char *id, const char *status,
                              int with_args) {
    return json_pack("{s:s, s:s, s:s, s:o, s:o, s:s}", "type", "function_call", "id", id, "call_id",
                     c->id, "name", fmt_str(c->name, strlen(c->name)), "arguments",
                     with_args ? fmt_str(c->arguments, strlen(c->arguments)) : json_string(""),
                     "status", status);
}

json_t *responses_format_full(srv_req *r) {
    if (fmt_check_failure(r)) return NULL;
    srv_choice *ch = &r->ch[0];
    const char *text = ch->text.p;
    size_t len = ch->text.len;
    if (ch->tc) {
        if (fmt_tool_feed(r, ch, text, len, 1)) return NULL;
        text = ch->td.content.p, len = ch->td.content.len;
    }
    int cut = ch->finish == ENGINE_FINISH_LENGTH;
    json_t *out = json_array();
    char id[48];
    int rc = !out;
    if (ch->reasoning.len) {
        resp_id(id, sizeof id, "rs");
        rc |= json_array_append_new(
            out, resp_item(RS_REASONING, id, "completed", ch->reasoning.p, ch->reasoning.len));
    }
    if (len) {
        resp_id(id, sizeof id, "msg");
        rc |= json_array_append_new(
            out, resp_item(RS_MESSAGE, id, cut ? "incomplete" : "completed", text, len));
    }
    for (int k = 0; k < ch->td.n_calls; k++) {
        resp_id(id, sizeof id, "fc");
        rc |= json_array_append_new(out, resp_call_item(&ch->td.calls[k], id, "completed", 1));
    }
    if (rc) {
        json_decref(out);
        openai_error_set(&r->err, 503, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    return resp_object(r, cut ? "incomplete" : "completed", out);
}

/* Appends `event: TYPE` with obj (stolen) as its data, numbered. */
static int rs_event(srv_req *r, const char *type, json_t *obj) {
    struct resp_stream *st = r->resp_st;
    char *s = NULL;
    if (obj && !json_object_set_new(obj, "type", json_string(type)) &&
        !json_object_set_new(obj, "sequence_number", json_integer(st->seq++)))
        s = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!s) return STRATA_ENOMEM;
    int rc = strbuf_addf(&r->out, "event: %s\ndata: %s\n\n", type, s);
    free(s);
    return rc ? STRATA_ENOMEM : 0;
}

/* The open reasoning or message item's .done events, then the item itself. */
static int rs_close(srv_req *r, const char *status) {
    struct resp_stream *st = r->resp_st;
    if (st->open == RS_NONE) return 0;
    int reasoning = st->open == RS_REASONING, rc = 0, k = st->open_index;
    const char *id = st->open_id, *s = st->open_text.p ? st->open_text.p : "";
    size_t n = st->open_text.len;
    json_t *done = json_pack("{s:s, s:i, s:i, s:o}", "item_id", id, "output_index", k,
                             "content_index", 0, "text", fmt_str(s, n));
    if (done && !reasoning) json_object_set_new(done, "logprobs", json_array());
    rc |=
        rs_event(r, reasoning ? "response.reasoning_text.done" : "response.output_text.done", done);
    rc |= rs_event(r, "response.content_part.done",
                   json_pack("{s:s, s:i, s:i, s:o}", "item_id", id, "output_index", k,
                             "content_index", 0, "part",
                             resp_text_part(reasoning ? "reasoning_text" : "output_text", s, n)));
    json_t *item = resp_item(st->open, id, reasoning ? "completed" : status, s, n);
    rc |= json_array_append(st->output, item) ? STRATA_ENOMEM : 0;
    rc |= rs_event(r, "response.output_item.done",
                   json_pack("{s:i, s:o}", "output_index", k, "item", item));
    st->open = RS_NONE;
    strbuf_reset(&st->open_text);
    return rc;
}

/* A delta for an item of kind: opens the item first when another one takes deltas. */
static int rs_delta(srv_req *r, int kind, const char *s, size_t n) {
    struct resp_stream *st = r->resp_st;
    int reasoning = kind == RS_REASONING, rc = 0;
    if (st->open != kind) {
        rc |= rs_close(r, "completed");
        st->open = kind;
        st->open_index = st->n_items++;
        resp_id(st->open_id, sizeof st->open_id, reasoning ? "rs" : "msg");
        rc |= rs_event(r, "response.output_item.added",
                       json_pack("{s:i, s:o}", "output_index", st->open_index, "item",
                                 resp_item(kind, st->open_id, "in_progress", NULL, 0)));
        rc |= rs_event(
            r, "response.content_part.added",
            json_pack("{s:s, s:i, s:i, s:o}", "item_id", st->open_id, "output_index",
                      st->open_index, "content_index", 0, "part",
                      resp_text_part(reasoning ? "reasoning_text" : "output_text", "", 0)));
    }
    json_t *d = json_pack("{s:s, s:i, s:i, s:o}", "item_id", st->open_id, "output_index",
                          st->open_index, "content_index", 0, "delta", fmt_str(s, n));
    if (d && !reasoning) json_object_set_new(d, "logprobs", json_array());
    rc |=
        rs_event(r, reasoning ? "response.reasoning_text.delta" : "response.output_text.delta", d);
    rc |= strbuf_add(&st->open_text, s, n);
    return rc;
}

/* One parsed call: its item added, the arguments in one delta, done. */
static int rs_call(srv_req *r, const toolcall_call *c) {
    struct resp_stream *st = r->resp_st;
    int rc = rs_close(r, "completed"), k = st->n_items++;
    char id[48];
    resp_id(id, sizeof id, "fc");
    json_t *args = fmt_str(c->arguments, strlen(c->arguments));
    rc |= rs_event(r, "response.output_item.added",
                   json_pack("{s:i, s:o}", "output_index", k, "item",
                             resp_call_item(c, id, "in_progress", 0)));
    rc |= rs_event(r, "response.function_call_arguments.delta",
                   json_pack("{s:s, s:i, s:O}", "item_id", id, "output_index", k, "delta", args));
    rc |=
        rs_event(r, "response.function_call_arguments.done",
                 json_pack("{s:s, s:i, s:O}", "item_id", id, "output_index", k, "arguments", args));
    json_decref(args);
    json_t *item = resp_call_item(c, id, "completed", 1);
    rc |= json_array_append(st->output, item) ? STRATA_ENOMEM : 0;
    rc |= rs_event(r, "response.output_item.done",
                   json_pack("{s:i, s:o}", "output_index", k, "item", item));
    return rc;
}

/* The end of the one choice: open items closed, then the final Response, or the error. */
static int rs_finish(srv_req *r, srv_choice *ch) {
    struct resp_stream *st = r->resp_st;
    if (ch->finish != ENGINE_FINISH_STOP && ch->finish != ENGINE_FINISH_LENGTH) {
        fmt_check_failure(r);
        return rs_event(r, "error",
                        json_pack("{s:s, s:s, s:o}", "code",
                                  r->err.code ? r->err.code : r->err.type, "message",
                                  r->err.message, "param",
                                  r->err.param[0] ? json_string(r->err.param) : json_null()));
    }
    int cut = ch->finish == ENGINE_FINISH_LENGTH;
    int rc = rs_close(r, cut ? "incomplete" : "completed");
    json_t *resp = resp_object(r, cut ? "incomplete" : "completed", json_incref(st->output));
    return rc | rs_event(r, cut ? "response.incomplete" : "response.completed",
                         json_pack("{s:o}", "response", resp));
}

int responses_format_stream(srv_req *r, int *all_done) {
    int rc = 0;
    srv_choice *ch = &r->ch[0];
    if (!r->resp_st) {
        if (!(r->resp_st = calloc(1, sizeof *r->resp_st)) || !(r->resp_st->output = json_array()))
            return STRATA_ENOMEM; /* req_free frees a half-made state */
    }
    struct resp_stream *st = r->resp_st;
    if (!st->started) {
        st->started = 1;
        rc |= rs_event(r, "response.created",
                       json_pack("{s:o}", "response", resp_object(r, "in_progress", json_array())));
        rc |= rs_event(r, "response.in_progress",
                       json_pack("{s:o}", "response", resp_object(r, "in_progress", json_array())));
    }
    if (!ch->finish && engine_seq_take(ch->seq, &ch->chunk)) {
        engine_chunk *c = &ch->chunk;
        ch->n_gen = c->n_generated;
        if (c->reasoning.len && !c->text.len) ch->n_reasoning += c->n_new;
        if (c->reasoning.len) rc |= rs_delta(r, RS_REASONING, c->reasoning.p, c->reasoning.len);
        const char *text = c->text.p;
        size_t len = c->text.len;
        if (ch->tc) {
            if (fmt_tool_feed(r, ch, text, len, c->finish != 0)) {
                rc |= STRATA_ENOMEM; /* the parser fails only for memory */
                len = 0;
            } else {
                text = ch->td.content.p, len = ch->td.content.len;
            }
        }
        if (len) rc |= rs_delta(r, RS_MESSAGE, text, len);
        for (int k = 0; ch->tc && k < ch->td.n_calls; k++) rc |= rs_call(r, &ch->td.calls[k]);
        if (c->finish) {
            ch->finish = c->finish;
            snprintf(ch->err, sizeof ch->err, "%s", c->error);
            r->n_finished++;
            rc |= rs_finish(r, ch);
        }
    }
    *all_done = r->n_finished == r->n_choices;
    if (*all_done && !r->stream_done) {
        r->stream_done = 1;
        r->phase = REQ_FINISHED;
    }
    return rc ? STRATA_ENOMEM : 0;
}
