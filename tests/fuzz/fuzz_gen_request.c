/* fuzz_gen_request.c - the request builder (server/gen_build.c) over the demo model,
 * on requests that know the API's fields.
 *
 * Raw bytes almost never get past the JSON parser, so this harness reads its input
 * as a sequence of choices instead: completion or chat, then field after field from
 * a table of every field the parser knows (and some it refuses, and some it has
 * never heard of), each with a value from that field's own pool of valid, boundary
 * and wrong-typed values. The body is built with jansson and handed to gen_build
 * exactly as a preparation worker would; on success the choices must respect the
 * slots and every one must hold a sequence, on failure the error must be a 4xx/5xx
 * with a message, and either way the request must free to nothing (live count back
 * to zero; ASan checks the memory). A bug of the prompts x n class is one mutation
 * away here. */
// fuzz-lib: strata
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/srv_fixture.h"

#define MAX_SEQS 4
#define CTX 128

static srv_fixture F;

typedef struct rd {
    const uint8_t *p;
    size_t n;
} rd;

static unsigned take(rd *r, unsigned mod) {
    if (!r->n) return 0;
    unsigned v = *r->p++;
    r->n--;
    return mod ? v % mod : v;
}

enum {
    K_BOOL,
    K_INT,
    K_NUM,
    K_STR,
    K_PROMPT,
    K_MESSAGES,
    K_STOP,
    K_IDS,
    K_BIAS,
    K_STREAM_OPT,
    K_KWARGS,
    K_FORMAT,
    K_TOOLS,
    K_ANY
};

static const struct {
    const char *name;
    int kind;
} fields[] = {
    {"prompt", K_PROMPT},
    {"messages", K_MESSAGES},
    {"model", K_STR},
    {"max_tokens", K_INT},
    {"max_completion_tokens", K_INT},
    {"temperature", K_NUM},
    {"top_p", K_NUM},
    {"min_p", K_NUM},
    {"top_k", K_INT},
    {"presence_penalty", K_NUM},
    {"frequency_penalty", K_NUM},
    {"repetition_penalty", K_NUM},
    {"seed", K_INT},
    {"n", K_INT},
    {"stop", K_STOP},
    {"stop_token_ids", K_IDS},
    {"logit_bias", K_BIAS},
    {"logprobs", K_INT},
    {"top_logprobs", K_INT},
    {"echo", K_BOOL},
    {"stream", K_BOOL},
    {"stream_options", K_STREAM_OPT},
    {"ignore_eos", K_BOOL},
    {"skip_special_tokens", K_BOOL},
    {"add_generation_prompt", K_BOOL},
    {"continue_final_message", K_BOOL},
    {"chat_template_kwargs", K_KWARGS},
    {"response_format", K_FORMAT},
    {"tools", K_TOOLS},
    {"tool_choice", K_STR},
    {"user", K_STR},
    {"suffix", K_STR},
    {"best_of", K_INT},
    {"guided_json", K_ANY},
    {"grammar", K_STR},
    {"min_tokens", K_INT},
    {"use_beam_search", K_BOOL},
    {"typical_p", K_NUM},
    {"modalities", K_ANY},
    {"functions", K_TOOLS},
    {"top_n_sigma", K_NUM},
    {"spaces_between_special_tokens", K_BOOL},
    {"metadata", K_ANY},
    {"store", K_BOOL},
    {"no_such_field", K_ANY},
};
#define N_FIELDS (sizeof fields / sizeof fields[0])

static json_t *gen_value(rd *r, int kind, int depth);

static json_t *gen_int(rd *r) {
    static const long long pool[] = {
        0,  1,  2,   3,   4,    5,    8,  16, 20,           21,           63,
        64, 65, 127, 128, 4095, 4096, -1, -2, 2147483647LL, 2147483648LL, 1000000000000000LL};
    return json_integer(pool[take(r, sizeof pool / sizeof pool[0])]);
}

static json_t *gen_num(rd *r) {
    static const double pool[] = {0,  0.5, 1,  1.5, 2,     2.5,    -0.5,
                                  -2, -3,  10, 11,  1e300, 1e-300, 0.05};
    return json_real(pool[take(r, sizeof pool / sizeof pool[0])]);
}

static json_t *gen_str(rd *r) {
    static const char *pool[] = {"",
                                 "x",
                                 "And the LORD said",
                                 "<|im_end|>",
                                 "<think>",
                                 "</think>",
                                 "\xc3\xa9",
                                 "\n",
                                 "none",
                                 "auto",
                                 "required",
                                 "text",
                                 "models/demo",
                                 "json_object"};
    unsigned k = take(r, 16);
    if (k < sizeof pool / sizeof pool[0]) return json_string(pool[k]);
    /* a string of the input's own bytes (valid UTF-8 or dropped) */
    char buf[48];
    size_t n = take(r, sizeof buf);
    for (size_t i = 0; i < n; i++) buf[i] = (char)(0x20 + take(r, 0x5f));
    return json_stringn(buf, n);
}

static json_t *gen_array(rd *r, int kind, unsigned max, int depth) {
    json_t *a = json_array();
    unsigned n = take(r, max + 1);
    for (unsigned i = 0; i < n; i++) json_array_append_new(a, gen_value(r, kind, depth + 1));
    return a;
}

static json_t *gen_ids(rd *r) {
    json_t *a = json_array();
    unsigned n = take(r, 9);
    for (unsigned i = 0; i < n; i++)
        json_array_append_new(a, take(r, 8) ? json_integer(take(r, 0) * 16 + take(r, 16))
                                            : gen_int(r));
    return a;
}

static json_t *gen_message(rd *r, int depth) {
    static const char *roles[] = {"user",      "assistant", "system", "tool",
                                  "developer", "function",  "god"};
    json_t *m = json_object();
    if (take(r, 8)) json_object_set_new(m, "role", json_string(roles[take(r, 7)]));
    else json_object_set_new(m, "role", gen_value(r, K_ANY, depth + 1));
    switch (take(r, 5)) {
    case 0: json_object_set_new(m, "content", json_null()); break;
    case 1: {
        json_t *parts = json_array();
        unsigned n = take(r, 4);
        for (unsigned i = 0; i < n; i++) {
            json_t *p = json_object();
            json_object_set_new(p, "type", json_string(take(r, 4) ? "text" : "image_url"));
            if (take(r, 5)) json_object_set_new(p, "text", take(r, 6) ? gen_str(r) : gen_int(r));
            json_array_append_new(parts, take(r, 10) ? p : (json_decref(p), gen_int(r)));
        }
        json_object_set_new(m, "content", parts);
        break;
    }
    case 2: json_object_set_new(m, "content", gen_int(r)); break;
    case 3: break; /* no content */
    default: json_object_set_new(m, "content", gen_str(r)); break;
    }
    if (!take(r, 6)) json_object_set_new(m, "name", gen_str(r));
    if (!take(r, 8)) json_object_set_new(m, "tool_calls", json_array());
    if (!take(r, 8)) json_object_set_new(m, "reasoning_content", gen_str(r));
    return m;
}

static json_t *gen_value(rd *r, int kind, int depth) {
    /* one value in eight is of an unexpected type */
    if (kind != K_ANY && !take(r, 8)) kind = K_ANY;
    if (depth > 3) kind = K_INT;
    switch (kind) {
    case K_BOOL: return json_boolean(take(r, 2));
    case K_INT: return gen_int(r);
    case K_NUM: return take(r, 3) ? gen_num(r) : gen_int(r);
    case K_STR: return gen_str(r);
    case K_PROMPT:
        switch (take(r, 4)) {
        case 0: return gen_str(r);
        case 1: return gen_array(r, K_STR, 6, depth);
        case 2: return gen_ids(r);
        default: {
            json_t *a = json_array();
            unsigned n = take(r, 6);
            for (unsigned i = 0; i < n; i++) json_array_append_new(a, gen_ids(r));
            return a;
        }
        }
    case K_MESSAGES: {
        json_t *a = json_array();
        unsigned n = take(r, 6);
        for (unsigned i = 0; i < n; i++) json_array_append_new(a, gen_message(r, depth));
        return a;
    }
    case K_STOP: return take(r, 2) ? gen_str(r) : gen_array(r, K_STR, 18, depth);
    case K_IDS: return gen_ids(r);
    case K_BIAS: {
        json_t *o = json_object();
        unsigned n = take(r, 5);
        for (unsigned i = 0; i < n; i++) {
            char key[24];
            snprintf(key, sizeof key, take(r, 6) ? "%u" : "x%u", take(r, 0) * 17);
            json_object_set_new(o, key, take(r, 4) ? gen_num(r) : gen_int(r));
        }
        return o;
    }
    case K_STREAM_OPT: {
        json_t *o = json_object();
        if (take(r, 4)) json_object_set_new(o, "include_usage", gen_value(r, K_BOOL, depth + 1));
        return o;
    }
    case K_KWARGS: {
        json_t *o = json_object();
        if (take(r, 2)) json_object_set_new(o, "enable_thinking", json_boolean(take(r, 2)));
        if (!take(r, 6)) json_object_set_new(o, "add_generation_prompt", json_true());
        if (!take(r, 4)) json_object_set_new(o, "x", gen_str(r));
        return o;
    }
    case K_FORMAT: {
        json_t *o = json_object();
        json_object_set_new(
            o, "type", take(r, 3) ? json_string(take(r, 2) ? "text" : "json_object") : gen_int(r));
        return o;
    }
    case K_TOOLS: {
        json_t *a = json_array();
        unsigned n = take(r, 3);
        for (unsigned i = 0; i < n; i++)
            json_array_append_new(a, json_pack("{s:s, s:{s:s, s:{s:s}}}", "type", "function",
                                               "function", "name", "f", "parameters", "type",
                                               "object"));
        return a;
    }
    default:
        switch (take(r, 7)) {
        case 0: return json_null();
        case 1: return json_boolean(take(r, 2));
        case 2: return gen_int(r);
        case 3: return gen_str(r);
        case 4: return json_object();
        case 5: return gen_array(r, K_INT, 3, depth);
        default: return gen_num(r);
        }
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    if (srv_fixture_open(&F, "models/demo", MAX_SEQS, CTX)) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rd r = {data, size};
    int job = take(&r, 2) ? SRV_JOB_CHAT : SRV_JOB_COMPLETION;
    json_t *body = json_object();
    /* the main field first, most of the time, so most bodies get past it */
    if (take(&r, 8))
        json_object_set_new(body, job == SRV_JOB_CHAT ? "messages" : "prompt",
                            gen_value(&r, job == SRV_JOB_CHAT ? K_MESSAGES : K_PROMPT, 0));
    unsigned n = take(&r, 10);
    for (unsigned i = 0; i < n; i++) {
        unsigned f = take(&r, N_FIELDS);
        json_object_set_new(body, fields[f].name, gen_value(&r, fields[f].kind, 0));
    }
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text) return 0;
    srv_req *q = srv_fixture_request(&F, job, text, strlen(text));
    free(text);
    if (!q) abort();
    openai_error e;
    memset(&e, 0, sizeof e);
    if (gen_build(&F.S, q, &e) == 0) {
        int per = q->oai.kind == OPENAI_CHAT ? 1 : q->oai.n_prompts;
        if (q->n_choices != per * q->oai.n || q->n_choices < 1 || q->n_choices > MAX_SEQS) abort();
        for (int i = 0; i < q->n_choices; i++)
            if (!q->ch[i].seq || q->ch[i].n_prompt < 1 || q->ch[i].n_prompt > CTX) abort();
        if (!q->id[0]) abort();
    } else {
        if (e.status < 400 || e.status > 599 || !e.message[0] || !e.type) abort();
        json_t *j = openai_error_json(&e);
        if (!j) abort();
        json_decref(j);
    }
    req_unref(q);
    if (atomic_load(&F.S.live_reqs) != 0) abort(); /* the request did not free */
    return 0;
}
