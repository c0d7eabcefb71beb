/* openai.c - validates /v1/completions and /v1/chat/completions bodies.
 *
 * Every known field is checked for type and range here, with the OpenAI message
 * style ("'temperature' must be between 0 and 2"), so the rest of the server works
 * on plain C values. Chat messages are copied into a normalized array whose content
 * is always a string (text parts joined by "\n", as vLLM renders them), which is what
 * chat templates expect. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/openai.h"

#define BAD(e, param, ...)                                                                         \
    openai_error_set(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

int openai_parse_json(json_t **out, const char *body, size_t len, openai_error *e) {
    json_error_t je;
    /* jansson rejects invalid UTF-8, NUL escapes, duplicate keys (with the flag) and
     * caps nesting depth (2048), so hostile bodies fail here with a 400. */
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return BAD(e, NULL, "Invalid JSON body at line %d, column %d: %s", je.line, je.column,
                   je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return BAD(e, NULL, "The request body must be a JSON object");
    }
    *out = root;
    return 0;
}

/* Field getters: absent or null -> leave the default. Return 0 or -400. */
static int get_bool(json_t *o, const char *k, int *out, openai_error *e) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return BAD(e, k, "'%s' must be a boolean", k);
    *out = json_is_true(v);
    return 0;
}

static int get_num(json_t *o, const char *k, double lo, double hi, double *out, openai_error *e) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return BAD(e, k, "'%s' must be a number", k);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return BAD(e, k, "'%s' must be between %g and %g, got %g", k, lo, hi, x);
    *out = x;
    return 0;
}

static int get_int(json_t *o, const char *k, long long lo, long long hi, long long *out,
                   openai_error *e) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return BAD(e, k, "'%s' must be an integer", k);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return BAD(e, k, "'%s' must be between %lld and %lld, got %lld", k, lo, hi, x);
    *out = x;
    return 0;
}

static int parse_ids(json_t *arr, const char *param, const openai_limits *lim, int32_t **ids,
                     int *n, openai_error *e) {
    size_t m = json_array_size(arr);
    int32_t *p = malloc((m ? m : 1) * sizeof *p);
    if (!p) return openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < m; i++) {
        json_t *v = json_array_get(arr, i);
        long long x = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v) || x < 0 || x > INT32_MAX || (lim->vocab && x >= lim->vocab)) {
            free(p);
            return BAD(e, param, "'%s' token ids must be integers in [0, %d)", param,
                       lim->vocab ? lim->vocab : INT32_MAX);
        }
        p[i] = (int32_t)x;
    }
    *ids = p;
    *n = (int)m;
    return 0;
}

static int parse_prompt(openai_request *r, json_t *v, const openai_limits *lim, openai_error *e) {
    if (!v || json_is_null(v)) return BAD(e, "prompt", "'prompt' is required");
    size_t np = 1;
    int kind; /* 0 one string, 1 strings, 2 one id list, 3 lists of ids */
    if (json_is_string(v)) kind = 0;
    else if (!json_is_array(v) || !json_array_size(v))
        return BAD(e, "prompt",
                   "'prompt' must be a string, a list of strings, a list of token "
                   "ids or a list of token id lists, and not empty");
    else if (json_is_string(json_array_get(v, 0))) kind = 1, np = json_array_size(v);
    else if (json_is_array(json_array_get(v, 0))) kind = 3, np = json_array_size(v);
    else kind = 2;
    if (np > 1024) return BAD(e, "prompt", "at most 1024 prompts per request");
    if (!(r->prompts = calloc(np, sizeof *r->prompts)))
        return openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    r->n_prompts = (int)np;
    for (size_t i = 0; i < np; i++) {
        json_t *x = kind == 0 || kind == 2 ? v : json_array_get(v, i);
        openai_prompt *p = &r->prompts[i];
        if (kind <= 1) {
            if (!json_is_string(x))
                return BAD(e, "prompt", "'prompt' list items must all be strings");
            p->text_len = json_string_length(x);
            if (!(p->text = malloc(p->text_len + 1)))
                return openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
            memcpy(p->text, json_string_value(x), p->text_len + 1);
        } else {
            if (!json_is_array(x))
                return BAD(e, "prompt", "'prompt' items must all be token id lists");
            int rc = parse_ids(x, "prompt", lim, &p->ids, &p->n_ids, e);
            if (rc) return rc;
            if (!p->n_ids) return BAD(e, "prompt", "'prompt' token id lists must not be empty");
        }
    }
    return 0;
}

/* A shallow copy of an object that fails instead of silently dropping keys when an
 * allocation fails (json_copy ignores those failures). */
static json_t *copy_object(json_t *o) {
    json_t *c = json_object();
    const char *k;
    json_t *v;
    if (!c) return NULL;
    json_object_foreach(o, k, v) {
        if (json_object_set(c, k, v)) {
            json_decref(c);
            return NULL;
        }
    }
    return c;
}

/* Copies messages into r->messages with string contents. */
static int parse_messages(openai_request *r, json_t *v, openai_error *e) {
    static const char *roles[] = {"system", "user", "assistant", "tool", "developer", "function"};
    if (!json_is_array(v) || !json_array_size(v))
        return BAD(e, "messages", "'messages' must be a non-empty list of message objects");
    if (json_array_size(v) > OPENAI_MAX_MESSAGES)
        return BAD(e, "messages", "'messages' holds at most %d messages, got %zu",
                   OPENAI_MAX_MESSAGES, json_array_size(v));
    if (!(r->messages = json_array()))
        return openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    size_t i, n_parts = 0;
    json_t *m;
    json_array_foreach(v, i, m) {
        if (!json_is_object(m)) return BAD(e, "messages", "messages[%zu] must be an object", i);
        json_t *role = json_object_get(m, "role");
        if (!json_is_string(role))
            return BAD(e, "messages", "messages[%zu].role must be a string", i);
        size_t k = 0;
        while (k < 6 && strcmp(json_string_value(role), roles[k])) k++;
        if (k == 6)
            return BAD(e, "messages",
                       "messages[%zu].role '%.40s' is not one of system, user, "
                       "assistant, tool, developer",
                       i, json_string_value(role));
        json_t *c = json_object_get(m, "content"), *text = NULL;
        if (!c || json_is_null(c)) {
            text = json_null();
        } else if (json_is_string(c)) {
            text = json_incref(c);
        } else if (json_is_array(c)) {
            /* list of parts: text parts only */
            size_t j, total = 0;
            json_t *part;
            if ((n_parts += json_array_size(c)) > OPENAI_MAX_PARTS)
                return BAD(e, "messages", "the messages hold at most %d content parts together",
                           OPENAI_MAX_PARTS);
            json_array_foreach(c, j, part) {
                json_t *t = json_object_get(part, "type"), *s = json_object_get(part, "text");
                if (!json_is_object(part) || !json_is_string(t))
                    return BAD(e, "messages",
                               "messages[%zu].content[%zu] must be a content part "
                               "object with a type",
                               i, j);
                if (strcmp(json_string_value(t), "text"))
                    return BAD(e, "messages",
                               "messages[%zu].content[%zu]: content type '%.40s' is "
                               "not supported (text only)",
                               i, j, json_string_value(t));
                if (!json_is_string(s))
                    return BAD(e, "messages", "messages[%zu].content[%zu].text must be a string", i,
                               j);
                total += json_string_length(s) + 1;
            }
            char *buf = malloc(total + 1), *at = buf;
            if (!buf) return openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
            json_array_foreach(c, j, part) {
                json_t *s = json_object_get(part, "text");
                if (j) *at++ = '\n';
                memcpy(at, json_string_value(s), json_string_length(s));
                at += json_string_length(s);
            }
            text = json_stringn_nocheck(buf, (size_t)(at - buf));
            free(buf);
        } else {
            return BAD(e, "messages",
                       "messages[%zu].content must be a string, a list of content "
                       "parts or null",
                       i);
        }
        json_t *copy = copy_object(m);
        if (!copy || !text) {
            json_decref(copy);
            json_decref(text);
            return openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        }
        /* both calls take their argument's reference, also when they fail */
        if (json_object_set_new(copy, "content", text)) {
            json_decref(copy);
            return openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        }
        int rc = openai_tool_calls_normalize(copy, i, e);
        if (rc) {
            json_decref(copy);
            return rc;
        }
        if (json_array_append_new(r->messages, copy))
            return openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    return 0;
}

static int parse_stop(openai_request *r, json_t *root, openai_error *e) {
    json_t *v = json_object_get(root, "stop");
    if (!v || json_is_null(v)) return 0;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if (!json_is_string(v) && !json_is_array(v))
        return BAD(e, "stop", "'stop' must be a string or a list of strings");
    if (n > OPENAI_MAX_STOP)
        return BAD(e, "stop", "'stop' holds at most %d strings", OPENAI_MAX_STOP);
    if (!(r->stop = calloc(n ? n : 1, sizeof *r->stop)))
        return openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(s)) return BAD(e, "stop", "'stop' items must be strings");
        if (!json_string_length(s)) continue; /* an empty stop string never matches */
        if (json_string_length(s) > 1024)
            return BAD(e, "stop", "'stop' strings are at most 1024 bytes");
        if (!(r->stop[r->n_stop++] = strdup(json_string_value(s))))
            return openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    return 0;
}

static int parse_logit_bias(openai_request *r, json_t *root, const openai_limits *lim,
                            openai_error *e) {
    json_t *v = json_object_get(root, "logit_bias");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v))
        return BAD(e, "logit_bias", "'logit_bias' must be an object of token id -> bias");
    size_t n = json_object_size(v);
    if (n > OPENAI_MAX_LOGIT_BIAS)
        return BAD(e, "logit_bias", "'logit_bias' holds at most %d entries", OPENAI_MAX_LOGIT_BIAS);
    r->bias_ids = malloc((n ? n : 1) * sizeof *r->bias_ids);
    r->bias_vals = malloc((n ? n : 1) * sizeof *r->bias_vals);
    if (!r->bias_ids || !r->bias_vals)
        return openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x) {
        char *end;
        long id = strtol(key, &end, 10);
        if (!*key || *end || id < 0 || id > INT32_MAX || (lim->vocab && id >= lim->vocab))
            return BAD(e, "logit_bias",
                       "'logit_bias' keys must be token ids in [0, %d), got '%.40s'",
                       lim->vocab ? lim->vocab : INT32_MAX, key);
        if (!json_is_number(x) || json_number_value(x) < -100 || json_number_value(x) > 100)
            return BAD(e, "logit_bias", "'logit_bias' values must be numbers between -100 and 100");
        r->bias_ids[r->n_bias] = (int32_t)id;
        r->bias_vals[r->n_bias++] = (float)json_number_value(x);
    }
    return 0;
}

static int parse_body(openai_request *r, json_t *root, const openai_limits *lim, openai_error *e) {
    long long ll;
    int rc, b;
    json_t *v;
    if ((rc = openai_refuse_fields(root, r->kind, e))) return rc;
    if ((v = json_object_get(root, "model")) && json_is_string(v)) r->model = json_string_value(v);
    if (r->kind == OPENAI_COMPLETION) {
        if ((rc = parse_prompt(r, json_object_get(root, "prompt"), lim, e))) return rc;
        if ((rc = get_bool(root, "echo", &r->echo, e))) return rc;
        ll = -1;
        if ((rc = get_int(root, "logprobs", 0, OPENAI_MAX_TOP_LOGPROBS, &ll, e))) return rc;
        if (ll >= 0) r->logprobs = 1, r->top_logprobs = (int)ll;
    } else {
        if ((rc = parse_messages(r, json_object_get(root, "messages"), e))) return rc;
        v = json_object_get(root, "tools");
        r->tools = v && json_is_array(v) && json_array_size(v) ? v : NULL;
        if ((rc = get_bool(root, "add_generation_prompt", &r->add_generation_prompt, e))) return rc;
        if ((rc = get_bool(root, "continue_final_message", &r->continue_final_message, e)))
            return rc;
        if (r->add_generation_prompt && r->continue_final_message &&
            json_object_get(root, "add_generation_prompt") &&
            json_is_true(json_object_get(root, "add_generation_prompt")))
            return BAD(e, "continue_final_message",
                       "'continue_final_message' and 'add_generation_prompt' cannot both be true");
        if (r->continue_final_message) r->add_generation_prompt = 0;
        v = json_object_get(root, "chat_template_kwargs");
        if (v && !json_is_null(v) && !json_is_object(v))
            return BAD(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
        r->template_kwargs = v && json_is_object(v) ? copy_object(v) : json_object();
        if (!r->template_kwargs)
            return openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        b = 0;
        if ((rc = get_bool(root, "logprobs", &b, e))) return rc;
        r->logprobs = b;
        ll = 0;
        if ((rc = get_int(root, "top_logprobs", 0, OPENAI_MAX_TOP_LOGPROBS, &ll, e))) return rc;
        if (ll > 0 && !r->logprobs)
            return BAD(e, "top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
        r->top_logprobs = (int)ll;
    }
    /* unset: a chat runs to the end of its turn (or of the context); a completion,
     * which has no turn to end, stops after 16 tokens as OpenAI's and vLLM's do */
    ll = r->kind == OPENAI_COMPLETION ? OPENAI_COMPLETION_DEFAULT_TOKENS : -1;
    if ((rc = get_int(root, "max_tokens", 0, INT32_MAX, &ll, e))) return rc;
    /* 0 generates nothing: OpenAI and vLLM accept it with echo, to score a prompt */
    if (ll == 0 && !(r->kind == OPENAI_COMPLETION && r->echo))
        return BAD(e, "max_tokens", "'max_tokens' must be at least 1 (0 only with 'echo')");
    if ((rc = get_int(root, "max_completion_tokens", 1, INT32_MAX, &ll, e))) return rc;
    r->max_tokens = (int)ll;
    if ((rc = get_num(root, "temperature", 0, 2, &r->temperature, e))) return rc;
    if ((rc = get_num(root, "top_p", 0, 1, &r->top_p, e))) return rc;
    if (r->top_p <= 0) return BAD(e, "top_p", "'top_p' must be in (0, 1]");
    if ((rc = get_num(root, "min_p", 0, 1, &r->min_p, e))) return rc;
    ll = 0;
    if ((rc = get_int(root, "top_k", -1, INT32_MAX, &ll, e))) return rc;
    r->top_k = ll < 0 ? 0 : (int)ll;
    if ((rc = get_num(root, "presence_penalty", -2, 2, &r->presence_penalty, e))) return rc;
    if ((rc = get_num(root, "frequency_penalty", -2, 2, &r->frequency_penalty, e))) return rc;
    if ((rc = get_num(root, "repetition_penalty", 0, 10, &r->repetition_penalty, e))) return rc;
    if (r->repetition_penalty <= 0)
        return BAD(e, "repetition_penalty", "'repetition_penalty' must be in (0, 10]");
    if ((v = json_object_get(root, "seed")) && !json_is_null(v)) {
        if (!json_is_integer(v)) return BAD(e, "seed", "'seed' must be an integer");
        r->has_seed = 1;
        r->seed = (uint64_t)json_integer_value(v);
    }
    ll = 1;
    int max_n = lim->max_n > 0 ? lim->max_n : 1;
    if ((rc = get_int(root, "n", 1, max_n, &ll, e))) return rc;
    r->n = (int)ll;
    /* every choice is a sequence slot: more than the slots could never be admitted */
    if (r->kind == OPENAI_COMPLETION && (long long)r->n_prompts * r->n > max_n)
        return BAD(e, r->n > 1 ? "n" : "prompt",
                   "%d prompts x n=%d = %lld choices exceed the %d sequences this server runs at "
                   "once (--max-seqs)",
                   r->n_prompts, r->n, (long long)r->n_prompts * r->n, max_n);
    if ((rc = parse_stop(r, root, e))) return rc;
    if ((v = json_object_get(root, "stop_token_ids")) && !json_is_null(v)) {
        if (!json_is_array(v) || json_array_size(v) > OPENAI_MAX_STOP)
            return BAD(e, "stop_token_ids", "'stop_token_ids' must be a list of at most %d ids",
                       OPENAI_MAX_STOP);
        if ((rc = parse_ids(v, "stop_token_ids", lim, &r->stop_ids, &r->n_stop_ids, e))) return rc;
    }
    if ((rc = parse_logit_bias(r, root, lim, e))) return rc;
    if ((rc = get_bool(root, "stream", &r->stream, e))) return rc;
    if ((v = json_object_get(root, "stream_options")) && !json_is_null(v)) {
        if (!json_is_object(v))
            return BAD(e, "stream_options", "'stream_options' must be an object");
        if (!r->stream)
            return BAD(e, "stream_options",
                       "'stream_options' is only allowed when 'stream' is true");
        if ((rc = get_bool(v, "include_usage", &r->include_usage, e))) return rc;
    }
    if ((rc = get_bool(root, "ignore_eos", &r->ignore_eos, e))) return rc;
    if ((rc = get_bool(root, "skip_special_tokens", &r->skip_special_tokens, e))) return rc;
    return openai_parse_format(r, root, e);
}

int openai_request_parse(openai_request *r, int kind, const char *body, size_t len,
                         const openai_limits *lim, openai_error *e) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->add_generation_prompt = 1;
    r->max_tokens = -1;
    r->temperature = 1;
    r->top_p = 1;
    r->repetition_penalty = 1;
    r->n = 1;
    r->skip_special_tokens = 1;
    int rc = openai_parse_json(&r->root, body, len, e);
    if (!rc) rc = parse_body(r, r->root, lim, e);
    if (rc) {
        openai_request_free(r);
        r->kind = kind;
    }
    return rc;
}

void openai_request_free(openai_request *r) {
    if (!r) return;
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].ids);
    }
    free(r->prompts);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->stop_ids);
    free(r->bias_ids);
    free(r->bias_vals);
    json_decref(r->messages);
    json_decref(r->template_kwargs);
    json_decref(r->root);
    free(r->grammar);
    memset(r, 0, sizeof *r);
}
