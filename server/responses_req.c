/* responses_req.c - a /v1/responses body turned into the chat completions body that runs it.
 *
 * The Responses API is another spelling of a chat turn: `input` (a string, or items:
 * messages, function calls and their outputs), `instructions`, function tools in a flatter
 * shape, `text.format` for response_format, `max_output_tokens` for max_tokens. Writing
 * the equivalent chat body and sending it through openai_request_parse keeps one set of
 * limits, checks and engine behaviour for both routes. What cannot be honoured is a 400
 * naming the field: stored state (previous_response_id, conversation, prompt,
 * item_reference: strata keeps nothing, so store is always false), background runs,
 * include values, non-function tools, non-text content. The fields a Response echoes
 * back are collected into a skeleton that responses_fmt.c completes.
 * Thread: a preparation worker (no shared state). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

#define BAD(e, param, ...)                                                                         \
    openai_error_set(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)
#define NOMEM(e) openai_error_set(e, 503, "server_error", NULL, NULL, "out of memory")

/* Fields whose every value but a neutral one asks for something not done here. */
static int resp_refuse(json_t *root, openai_error *e) {
    static const struct {
        const char *name, *why;
    } refused[] = {
        {"previous_response_id", "stored responses are not supported (store is always false "
                                 "here); send the whole conversation in 'input'"},
        {"conversation", "conversations are not stored here; send the whole conversation in "
                         "'input'"},
        {"prompt", "stored prompts are not supported; send 'instructions' and 'input'"},
        {"max_tool_calls", "a limit on tool calls is not supported"},
    };
    json_t *v;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if ((v = json_object_get(root, refused[i].name)) && !json_is_null(v))
            return BAD(e, refused[i].name, "'%s' is not supported: %s", refused[i].name,
                       refused[i].why);
    if ((v = json_object_get(root, "background")) && !json_is_null(v) && !json_is_false(v))
        return BAD(e, "background",
                   "'background' is not supported: responses run while the "
                   "request is open");
    if ((v = json_object_get(root, "include")) && !json_is_null(v) &&
        !(json_is_array(v) && !json_array_size(v)))
        return BAD(e, "include",
                   "'include' is not supported: nothing extra (logprobs, "
                   "encrypted reasoning, tool results) can be included");
    if ((v = json_object_get(root, "top_logprobs")) && !json_is_null(v) &&
        !(json_is_integer(v) && json_integer_value(v) == 0))
        return BAD(e, "top_logprobs", "'top_logprobs' is not supported on /v1/responses");
    if ((v = json_object_get(root, "truncation")) && !json_is_null(v) &&
        !(json_is_string(v) && !strcmp(json_string_value(v), "disabled")))
        return BAD(e, "truncation",
                   "'truncation' must be \"disabled\": inputs are never "
                   "truncated here");
    if ((v = json_object_get(root, "store")) && !json_is_null(v) && !json_is_boolean(v))
        return BAD(e, "store", "'store' must be a boolean");
    if ((v = json_object_get(root, "metadata")) && !json_is_null(v)) {
        const char *k;
        json_t *x;
        if (!json_is_object(v)) return BAD(e, "metadata", "'metadata' must be an object");
        json_object_foreach(v, k, x) {
            if (!json_is_string(x)) return BAD(e, "metadata", "'metadata' values must be strings");
        }
    }
    if ((v = json_object_get(root, "instructions")) && !json_is_null(v) && !json_is_string(v))
        return BAD(e, "instructions", "'instructions' must be a string");
    return 0;
}

/* A content string, or a list of input_text / output_text parts as chat's text parts. */
static int resp_content(json_t *c, size_t i, json_t **out, openai_error *e) {
    if (json_is_string(c)) {
        *out = json_incref(c);
        return 0;
    }
    if (!json_is_array(c))
        return BAD(e, "input", "input[%zu].content must be a string or a list of parts", i);
    json_t *parts = json_array();
    if (!parts) return NOMEM(e);
    size_t j;
    json_t *p;
    json_array_foreach(c, j, p) {
        const char *t = json_string_value(json_object_get(p, "type"));
        json_t *s = json_object_get(p, !t || strcmp(t, "refusal") ? "text" : "refusal");
        if (!t || (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text") &&
                   strcmp(t, "refusal"))) {
            json_decref(parts);
            return BAD(e, "input",
                       "input[%zu].content[%zu]: type '%.40s' is not supported (input_text, "
                       "output_text)",
                       i, j, t ? t : "(none)");
        }
        if (!json_is_string(s)) {
            json_decref(parts);
            return BAD(e, "input", "input[%zu].content[%zu].text must be a string", i, j);
        }
        if (json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", s))) {
            json_decref(parts);
            return NOMEM(e);
        }
    }
    *out = parts;
    return 0;
}

/* A function_call item: a tool call on the assistant message just before (the same turn's
 * text or calls), or on a new assistant message. */
static int resp_call(json_t *msgs, json_t *it, size_t i, openai_error *e) {
    json_t *id = json_object_get(it, "call_id"), *name = json_object_get(it, "name"),
           *args = json_object_get(it, "arguments");
    if (!json_is_string(id) || !json_is_string(name) || !json_is_string(args))
        return BAD(e, "input",
                   "input[%zu]: a function_call needs call_id, name and arguments "
                   "(strings)",
                   i);
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *role = json_string_value(json_object_get(last, "role"));
    if (!role || strcmp(role, "assistant")) {
        last = json_pack("{s:s, s:n}", "role", "assistant", "content");
        if (json_array_append_new(msgs, last)) return NOMEM(e);
    }
    json_t *calls = json_object_get(last, "tool_calls");
    if (!calls && (!(calls = json_array()) || json_object_set_new(last, "tool_calls", calls)))
        return NOMEM(e);
    if (json_array_append_new(calls,
                              json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type", "function",
                                        "function", "name", name, "arguments", args)))
        return NOMEM(e);
    return 0;
}

/* One input item appended to the chat messages. */
static int resp_item(json_t *msgs, json_t *it, size_t i, openai_error *e) {
    if (!json_is_object(it)) return BAD(e, "input", "input[%zu] must be an object", i);
    const char *type = json_string_value(json_object_get(it, "type"));
    json_t *c = NULL;
    int rc;
    if (!type || !strcmp(type, "message")) {
        static const char *const roles[] = {"user", "system", "developer", "assistant"};
        const char *role = json_string_value(json_object_get(it, "role"));
        size_t k = 0;
        while (role && k < 4 && strcmp(role, roles[k])) k++;
        if (!role || k == 4)
            return BAD(e, "input", "input[%zu].role must be user, system, developer or assistant",
                       i);
        if ((rc = resp_content(json_object_get(it, "content"), i, &c, e))) return rc;
        if (json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", role, "content", c)))
            return NOMEM(e);
        return 0;
    }
    if (!strcmp(type, "function_call")) return resp_call(msgs, it, i, e);
    if (!strcmp(type, "function_call_output")) {
        json_t *id = json_object_get(it, "call_id");
        if (!json_is_string(id))
            return BAD(e, "input", "input[%zu]: a function_call_output needs a call_id", i);
        if ((rc = resp_content(json_object_get(it, "output"), i, &c, e))) return rc;
        if (json_array_append_new(msgs, json_pack("{s:s, s:O, s:o}", "role", "tool", "tool_call_id",
                                                  id, "content", c)))
            return NOMEM(e);
        return 0;
    }
    /* a reasoning item sent back: chat templates drop past turns' reasoning anyway */
    if (!strcmp(type, "reasoning")) return 0;
    if (!strcmp(type, "item_reference"))
        return BAD(e, "input",
                   "input[%zu]: item references are not supported (nothing is "
                   "stored here)",
                   i);
    return BAD(e, "input",
               "input[%zu]: item type '%.40s' is not supported (message, function_call, "
               "function_call_output, reasoning)",
               i, type);
}

static int resp_messages(json_t *root, json_t *chat, openai_error *e) {
    json_t *msgs = json_array(), *in = json_object_get(root, "input"),
           *ins = json_object_get(root, "instructions");
    if (!msgs || json_object_set_new(chat, "messages", msgs)) return NOMEM(e);
    if (json_is_string(ins) &&
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", ins)))
        return NOMEM(e);
    if (json_is_string(in)) {
        if (json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", in)))
            return NOMEM(e);
        return 0;
    }
    if (!json_is_array(in) || !json_array_size(in))
        return BAD(e, "input", "'input' is required: a string or a non-empty list of items");
    if (json_array_size(in) > OPENAI_MAX_MESSAGES)
        return BAD(e, "input", "'input' holds at most %d items", OPENAI_MAX_MESSAGES);
    size_t i;
    json_t *it;
    int rc;
    json_array_foreach(in, i, it) {
        if ((rc = resp_item(msgs, it, i, e))) return rc;
    }
    return 0;
}

/* tools (function tools, flat) and tool_choice ({type: function, name}) in chat's shape. */
static int resp_tools(json_t *root, json_t *chat, openai_error *e) {
    json_t *v = json_object_get(root, "tools");
    if (v && !json_is_null(v)) {
        if (!json_is_array(v)) return BAD(e, "tools", "'tools' must be a list");
        json_t *tools = json_array();
        if (!tools || json_object_set_new(chat, "tools", tools)) return NOMEM(e);
        size_t i;
        json_t *t;
        json_array_foreach(v, i, t) {
            const char *type = json_string_value(json_object_get(t, "type"));
            json_t *name = json_object_get(t, "name"), *fn;
            if (!type || strcmp(type, "function"))
                return BAD(e, "tools", "tools[%zu]: type '%.40s' is not supported (function only)",
                           i, type ? type : "(none)");
            if (!json_is_string(name))
                return BAD(e, "tools", "tools[%zu].name must be a string", i);
            if (!(fn = json_pack("{s:O}", "name", name)) ||
                json_array_append_new(tools,
                                      json_pack("{s:s, s:o}", "type", "function", "function", fn)))
                return NOMEM(e);
            static const char *const keep[] = {"description", "parameters", "strict"};
            for (size_t k = 0; k < 3; k++) {
                json_t *x = json_object_get(t, keep[k]);
                if (x && !json_is_null(x) && json_object_set(fn, keep[k], x)) return NOMEM(e);
            }
        }
    }
    v = json_object_get(root, "tool_choice");
    if (!v || json_is_null(v) || json_is_string(v))
        return v && json_object_set(chat, "tool_choice", v) ? NOMEM(e) : 0;
    const char *type = json_string_value(json_object_get(v, "type"));
    json_t *name = json_object_get(v, "name");
    if (!type || strcmp(type, "function") || !json_is_string(name))
        return BAD(e, "tool_choice",
                   "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                   "\"function\", \"name\": ...}");
    if (json_object_set_new(
            chat, "tool_choice",
            json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name)))
        return NOMEM(e);
    return 0;
}

/* text.format as response_format. */
static int resp_format(json_t *root, json_t *chat, openai_error *e) {
    json_t *text = json_object_get(root, "text");
    if (!text || json_is_null(text)) return 0;
    if (!json_is_object(text)) return BAD(e, "text", "'text' must be an object");
    json_t *f = json_object_get(text, "format");
    if (!f || json_is_null(f)) return 0;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!type) return BAD(e, "text.format", "'text.format' must be an object with a type");
    if (!strcmp(type, "text")) return 0;
    json_t *rf = NULL;
    if (!strcmp(type, "json_object")) {
        rf = json_pack("{s:s}", "type", "json_object");
    } else if (!strcmp(type, "json_schema")) {
        json_t *s = json_object_get(f, "schema"), *name = json_object_get(f, "name"),
               *strict = json_object_get(f, "strict");
        if (!json_is_object(s))
            return BAD(e, "text.format", "'text.format' json_schema needs a 'schema' object");
        rf = json_pack("{s:s, s:{s:O, s:o, s:o}}", "type", "json_schema", "json_schema", "schema",
                       s, "name", json_is_string(name) ? json_incref(name) : json_string("schema"),
                       "strict", json_is_boolean(strict) ? json_incref(strict) : json_false());
    } else {
        return BAD(e, "text.format",
                   "'text.format' type '%.40s' is not supported (text, json_object, json_schema)",
                   type);
    }
    return !rf || json_object_set_new(chat, "response_format", rf) ? NOMEM(e) : 0;
}

/* The fields chat spells the same, and max_output_tokens; reasoning.effort "none" turns
 * the template's thinking off (enable_thinking), the other efforts change nothing here. */
static int resp_sampling(json_t *root, json_t *chat, openai_error *e) {
    static const char *const same[] = {"model",
                                       "temperature",
                                       "top_p",
                                       "parallel_tool_calls",
                                       "stream",
                                       "user",
                                       "seed",
                                       "top_k",
                                       "min_p",
                                       "presence_penalty",
                                       "frequency_penalty",
                                       "repetition_penalty",
                                       "stop",
                                       "stop_token_ids",
                                       "logit_bias",
                                       "ignore_eos",
                                       "skip_special_tokens",
                                       "chat_template_kwargs"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        json_t *v = json_object_get(root, same[i]);
        if (v && json_object_set(chat, same[i], v)) return NOMEM(e);
    }
    json_t *v = json_object_get(root, "max_output_tokens");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1)
            return BAD(e, "max_output_tokens",
                       "'max_output_tokens' must be an integer of at least 1");
        if (json_object_set(chat, "max_tokens", v)) return NOMEM(e);
    }
    json_t *rs = json_object_get(root, "reasoning");
    if (!rs || json_is_null(rs)) return 0;
    if (!json_is_object(rs)) return BAD(e, "reasoning", "'reasoning' must be an object");
    const char *effort = json_string_value(json_object_get(rs, "effort"));
    if (!effort || strcmp(effort, "none")) return 0;
    json_t *kw = json_object_get(chat, "chat_template_kwargs");
    if (kw && !json_is_object(kw)) return 0; /* the chat parse names the error */
    if (!kw && (!(kw = json_object()) || json_object_set_new(chat, "chat_template_kwargs", kw)))
        return NOMEM(e);
    if (!json_object_get(kw, "enable_thinking") &&
        json_object_set_new(kw, "enable_thinking", json_false()))
        return NOMEM(e);
    return 0;
}

/* A field of root, or dflt (a new reference either way; NULL only out of memory). */
static json_t *resp_or(json_t *root, const char *k, json_t *dflt) {
    json_t *v = json_object_get(root, k);
    if (!v || json_is_null(v)) return dflt;
    json_decref(dflt);
    return json_incref(v);
}

/* The request fields a Response echoes; responses_fmt.c adds id, status, output, usage. */
static json_t *resp_echo(json_t *root) {
    json_t *pt = json_object_get(root, "parallel_tool_calls");
    return json_pack(
        "{s:s, s:n, s:n, s:o, s:o, s:o, s:b, s:n, s:o, s:b, s:o, s:o, s:o, s:o, s:o, s:s, s:o, "
        "s:b}",
        "object", "response", "error", "incomplete_details", "instructions",
        resp_or(root, "instructions", json_null()), "max_output_tokens",
        resp_or(root, "max_output_tokens", json_null()), "metadata",
        resp_or(root, "metadata", json_object()), "parallel_tool_calls", !json_is_false(pt),
        "previous_response_id", "reasoning",
        resp_or(root, "reasoning", json_pack("{s:n, s:n}", "effort", "summary")), "store", 0,
        "temperature", resp_or(root, "temperature", json_real(1.0)), "top_p",
        resp_or(root, "top_p", json_real(1.0)), "text",
        resp_or(root, "text", json_pack("{s:{s:s}}", "format", "type", "text")), "tool_choice",
        resp_or(root, "tool_choice", json_string("auto")), "tools",
        resp_or(root, "tools", json_array()), "truncation", "disabled", "user",
        resp_or(root, "user", json_null()), "background", 0);
}

int responses_to_chat(const char *body, size_t len, char **chat_out, json_t **echo,
                      openai_error *e) {
    json_t *root = NULL, *chat = NULL;
    int rc = openai_parse_json(&root, body, len, e);
    if (!rc && !(chat = json_object())) rc = NOMEM(e);
    if (!rc) rc = resp_refuse(root, e);
    if (!rc) rc = resp_messages(root, chat, e);
    if (!rc) rc = resp_tools(root, chat, e);
    if (!rc) rc = resp_format(root, chat, e);
    if (!rc) rc = resp_sampling(root, chat, e);
    if (!rc && !(*echo = resp_echo(root))) rc = NOMEM(e);
    if (!rc && !(*chat_out = json_dumps(chat, JSON_COMPACT))) {
        json_decref(*echo);
        *echo = NULL;
        rc = NOMEM(e);
    }
    json_decref(chat);
    json_decref(root);
    return rc ? -1 : 0;
}

void responses_error_param(openai_error *e) {
    static const char *const map[][2] = {{"messages", "input"},
                                         {"max_tokens", "max_output_tokens"},
                                         {"max_completion_tokens", "max_output_tokens"},
                                         {"response_format", "text.format"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(e->param, map[i][0])) {
            snprintf(e->param, sizeof e->param, "%s", map[i][1]);
            return;
        }
}
