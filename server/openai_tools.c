/* openai_tools.c - the tool-call turns of a chat, as the chat templates take them.
 *
 * Clients send an assistant turn's calls the OpenAI way: function.arguments is a JSON
 * *string* (the SDKs echo back what the server returned), while the model families'
 * templates iterate the arguments as a mapping (Qwen3.5 and Nemotron `|items`, Gemma 4 its
 * own value syntax) and fail or render the string raw. So each call is checked and its
 * arguments parsed into the object the template expects, as vLLM does before rendering. */
#include <string.h>

#include "server/openai.h"

#define BAD(e, param, ...)                                                                         \
    openai_error_set(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

/* One call of messages[i].tool_calls[j], normalised in place. */
static int tool_call_normalize(json_t *call, size_t i, size_t j, openai_error *e) {
    if (!json_is_object(call))
        return BAD(e, "messages", "messages[%zu].tool_calls[%zu] must be an object", i, j);
    json_t *type = json_object_get(call, "type");
    if (type && !json_is_null(type) &&
        (!json_is_string(type) || strcmp(json_string_value(type), "function")))
        return BAD(e, "messages", "messages[%zu].tool_calls[%zu].type must be \"function\"", i, j);
    json_t *fn = json_object_get(call, "function");
    if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
        return BAD(e, "messages",
                   "messages[%zu].tool_calls[%zu].function must be an object with a name", i, j);
    json_t *args = json_object_get(fn, "arguments");
    if (!args || json_is_null(args) || json_is_object(args)) return 0;
    if (!json_is_string(args))
        return BAD(e, "messages",
                   "messages[%zu].tool_calls[%zu].function.arguments must be a JSON string", i, j);
    json_error_t je;
    json_t *obj =
        json_loadb(json_string_value(args), json_string_length(args), JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(obj)) {
        json_decref(obj);
        return BAD(e, "messages",
                   "messages[%zu].tool_calls[%zu].function.arguments must hold a JSON object", i,
                   j);
    }
    /* the copy's function object is the client's: replace it, not the shared one */
    json_t *fn2 = json_copy(fn);
    if (!fn2 || json_object_set_new(fn2, "arguments", obj) ||
        json_object_set_new(call, "function", fn2)) {
        if (!fn2) json_decref(obj);
        return openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    return 0;
}

int openai_tool_calls_normalize(json_t *msg, size_t i, openai_error *e) {
    json_t *calls = json_object_get(msg, "tool_calls");
    if (!calls || json_is_null(calls)) return 0;
    if (!json_is_array(calls))
        return BAD(e, "messages", "messages[%zu].tool_calls must be a list", i);
    /* copy the list too: the request body's array stays as the client sent it */
    json_t *copy = json_array();
    json_incref(calls); /* msg's reference goes with the replacement */
    int rc = !copy || json_object_set_new(msg, "tool_calls", copy)
                 ? openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory")
                 : 0;
    size_t j;
    json_t *call;
    json_array_foreach(calls, j, call) {
        if (rc) break;
        json_t *c = json_is_object(call) ? json_copy(call) : json_incref(call);
        if (!c || json_array_append_new(copy, c))
            rc = openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        else rc = tool_call_normalize(c, i, j, e);
    }
    json_decref(calls);
    return rc;
}
