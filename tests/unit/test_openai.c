/* test_openai.c - server/openai.c: request bodies to validated structs.
 *
 * Valid bodies in every accepted form, a table of invalid ones with the param each
 * must name, the error object's JSON shape, and every allocation jansson makes
 * failing in turn (no crash, no leak under ASan). */
#include <stdlib.h>
#include <string.h>

#include "server/openai.h"
#include "tests/test.h"

static const openai_limits LIM = {.vocab = 512, .max_n = 4};

static int parse(openai_request *r, int kind, const char *body, openai_error *e) {
    return openai_request_parse(r, kind, body, strlen(body), &LIM, e);
}

static void test_completion_forms(void) {
    openai_request r;
    openai_error e;
    CHECK_EQ_INT(parse(&r, OPENAI_COMPLETION, "{\"prompt\": \"hi there\"}", &e), 0);
    CHECK_EQ_INT(r.n_prompts, 1);
    CHECK(!strcmp(r.prompts[0].text, "hi there") && r.prompts[0].text_len == 8);
    CHECK_EQ_INT(r.max_tokens, 16); /* OpenAI's and vLLM's default for completions */
    CHECK(r.temperature == 1 && r.top_p == 1 && r.repetition_penalty == 1 && r.n == 1);
    CHECK(r.skip_special_tokens == 1 && !r.stream && r.model == NULL);
    openai_request_free(&r);

    CHECK_EQ_INT(parse(&r, OPENAI_COMPLETION,
                       "{\"prompt\": [\"a\", \"b\"], \"n\": 2, \"model\": \"m\"}", &e),
                 0);
    CHECK(r.n_prompts == 2 && !strcmp(r.prompts[1].text, "b") && r.n == 2 && !strcmp(r.model, "m"));
    openai_request_free(&r);

    CHECK_EQ_INT(parse(&r, OPENAI_COMPLETION, "{\"prompt\": [1, 2, 511]}", &e), 0);
    CHECK(r.n_prompts == 1 && r.prompts[0].n_ids == 3 && r.prompts[0].ids[2] == 511 &&
          !r.prompts[0].text);
    openai_request_free(&r);

    CHECK_EQ_INT(parse(&r, OPENAI_COMPLETION,
                       "{\"prompt\": [[1], [2, 3]], \"echo\": true, \"logprobs\": 3,"
                       "\"stop\": [\"x\", \"\", \"yz\"], \"seed\": -5, \"max_tokens\": 9,"
                       "\"logit_bias\": {\"7\": -100, \"8\": 2.5}, \"stream\": true,"
                       "\"stream_options\": {\"include_usage\": true},"
                       "\"stop_token_ids\": [4], \"top_k\": -1}",
                       &e),
                 0);
    CHECK(r.n_prompts == 2 && r.prompts[1].n_ids == 2 && r.echo && r.logprobs &&
          r.top_logprobs == 3);
    CHECK(r.n_stop == 2 && !strcmp(r.stop[1], "yz")); /* the empty stop string is dropped */
    CHECK(r.has_seed && r.seed == (uint64_t)-5 && r.max_tokens == 9);
    CHECK(r.n_bias == 2 && r.bias_ids[0] == 7 && r.bias_vals[0] == -100.0f &&
          r.bias_vals[1] == 2.5f);
    CHECK(r.stream && r.include_usage && r.n_stop_ids == 1 && r.stop_ids[0] == 4 && r.top_k == 0);
    openai_request_free(&r);

    /* max_tokens 0 with echo: score the prompt only (OpenAI, vLLM); echo may come after */
    CHECK_EQ_INT(parse(&r, OPENAI_COMPLETION,
                       "{\"max_tokens\": 0, \"prompt\": \"a\", \"echo\": true,"
                       " \"logprobs\": 0}",
                       &e),
                 0);
    CHECK(r.max_tokens == 0 && r.echo && r.logprobs && r.top_logprobs == 0);
    openai_request_free(&r);
}

static void test_chat_forms(void) {
    openai_request r;
    openai_error e;
    const char *body =
        "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"},"
        " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"},"
        "   {\"type\": \"text\", \"text\": \"b\"}], \"name\": \"n\"},"
        " {\"role\": \"assistant\", \"content\": null}],"
        " \"max_completion_tokens\": 5, \"max_tokens\": 9, \"logprobs\": true, \"top_logprobs\": 2,"
        " \"chat_template_kwargs\": {\"enable_thinking\": false}, \"tools\": [{\"type\": "
        "\"function\"}],"
        " \"tool_choice\": \"auto\", \"response_format\": {\"type\": \"text\"}, \"user\": \"u\"}";
    CHECK_EQ_INT(parse(&r, OPENAI_CHAT, body, &e), 0);
    CHECK_EQ_INT(json_array_size(r.messages), 3);
    json_t *m1 = json_array_get(r.messages, 1);
    CHECK(!strcmp(json_string_value(json_object_get(m1, "content")), "a\nb"));
    CHECK(!strcmp(json_string_value(json_object_get(m1, "name")), "n"));
    CHECK(json_is_null(json_object_get(json_array_get(r.messages, 2), "content")));
    CHECK(r.max_tokens == 5 && r.logprobs && r.top_logprobs == 2 && r.add_generation_prompt);
    CHECK(json_is_false(json_object_get(r.template_kwargs, "enable_thinking")));
    CHECK(r.tools && json_array_size(r.tools) == 1);
    openai_request_free(&r);
    CHECK_EQ_INT(parse(&r, OPENAI_CHAT,
                       "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}],"
                       "\"continue_final_message\": true}",
                       &e),
                 0);
    CHECK(r.continue_final_message && !r.add_generation_prompt &&
          json_object_size(r.template_kwargs) == 0);
    CHECK_EQ_INT(r.max_tokens, -1); /* a chat without a limit runs to the end of its turn */
    openai_request_free(&r);
    /* either limit replaces a completion's default of 16 */
    CHECK_EQ_INT(parse(&r, OPENAI_COMPLETION, "{\"prompt\": \"x\", \"max_tokens\": 40}", &e), 0);
    CHECK_EQ_INT(r.max_tokens, 40);
    openai_request_free(&r);
    CHECK_EQ_INT(
        parse(&r, OPENAI_COMPLETION, "{\"prompt\": \"x\", \"max_completion_tokens\": 3}", &e), 0);
    CHECK_EQ_INT(r.max_tokens, 3);
    openai_request_free(&r);
}

/* A body the parser refuses with a 400 that names param. */
typedef struct invalid_case {
    const char *body, *param; /* body: whole, or the fields a set's head and tail wrap */
} invalid_case;

static const invalid_case completion_bodies[] = {
    {"{", ""},
    {"[]", ""},
    {"{}", "prompt"},
    {"{\"prompt\": []}", "prompt"},
    {"{\"prompt\": [\"a\", 1]}", "prompt"},
    {"{\"prompt\": [1, \"a\"]}", "prompt"},
    {"{\"prompt\": [512]}", "prompt"},
    {"{\"prompt\": [[]]}", "prompt"},
};

static const invalid_case completion_fields[] = {
    {"\"max_tokens\": 0", "max_tokens"},
    {"\"max_tokens\": 0, \"echo\": false", "max_tokens"},
    {"\"max_tokens\": -1, \"echo\": true", "max_tokens"},
    {"\"max_tokens\": 1.5", "max_tokens"},
    {"\"temperature\": 2.5", "temperature"},
    {"\"temperature\": \"1\"", "temperature"},
    {"\"top_p\": 0", "top_p"},
    {"\"min_p\": 2", "min_p"},
    {"\"top_k\": -2", "top_k"},
    {"\"presence_penalty\": 3", "presence_penalty"},
    {"\"frequency_penalty\": -3", "frequency_penalty"},
    {"\"repetition_penalty\": 0", "repetition_penalty"},
    {"\"seed\": 1.5", "seed"},
    {"\"n\": 5", "n"},
    {"\"stop\": 1", "stop"},
    {"\"stop\": [1]", "stop"},
    {"\"logit_bias\": {\"x\": 1}", "logit_bias"},
    {"\"logit_bias\": {\"1\": 101}", "logit_bias"},
    {"\"logit_bias\": {\"600\": 1}", "logit_bias"},
    {"\"logprobs\": 21", "logprobs"},
    {"\"stream\": 1", "stream"},
    {"\"stream_options\": {}", "stream_options"},
    {"\"suffix\": \"s\"", "suffix"},
    {"\"best_of\": 3", "best_of"},
    {"\"echo\": \"yes\"", "echo"},
    {"\"model\": 5", "model"},
    {"\"user\": 5", "user"},
    {"\"stop_token_ids\": [-1]", "stop_token_ids"},
};

static const invalid_case chat_bodies[] = {
    {"{\"messages\": []}", "messages"},
    {"{\"messages\": \"hi\"}", "messages"},
    {"{\"messages\": [1]}", "messages"},
    {"{\"messages\": [{\"content\": \"x\"}]}", "messages"},
    {"{\"messages\": [{\"role\": \"god\", \"content\": \"x\"}]}", "messages"},
    {"{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "messages"},
    {"{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
     "messages"},
    {"{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}", "messages"},
};

static const invalid_case chat_fields[] = {
    {"\"max_tokens\": 0", "max_tokens"},
    {"\"echo\": true", "echo"},
    {"\"top_logprobs\": 1", "top_logprobs"},
    {"\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\"}}",
     "response_format"},
    {"\"tool_choice\": \"required\"", "tool_choice"},
    {"\"chat_template_kwargs\": []", "chat_template_kwargs"},
    {"\"add_generation_prompt\": true, \"continue_final_message\": true", "continue_final_message"},
};

#define U "{\"role\": \"user\", \"content\": \"x\"}"
#define INVALID_SET(kind, head, cases, tail)                                                       \
    { kind, head, cases, sizeof cases / sizeof cases[0], tail }
static const struct invalid_set {
    int kind;
    const char *head;
    const invalid_case *cases;
    size_t n;
    const char *tail;
} invalid_sets[] = {
    INVALID_SET(OPENAI_COMPLETION, "", completion_bodies, ""),
    INVALID_SET(OPENAI_COMPLETION, "{\"prompt\": \"x\", ", completion_fields, "}"),
    INVALID_SET(OPENAI_CHAT, "", chat_bodies, ""),
    INVALID_SET(OPENAI_CHAT, "{\"messages\": [" U "], ", chat_fields, "}"),
};

static void test_invalid(void) {
    for (size_t si = 0; si < sizeof invalid_sets / sizeof invalid_sets[0]; si++) {
        const struct invalid_set *set = &invalid_sets[si];
        for (size_t i = 0; i < set->n; i++) {
            char body[256];
            snprintf(body, sizeof body, "%s%s%s", set->head, set->cases[i].body, set->tail);
            openai_request r;
            openai_error e;
            memset(&e, 0, sizeof e);
            int rc = parse(&r, set->kind, body, &e);
            CHECK_MSG(rc == -400 && e.status == 400, "%s: rc %d", body, rc);
            CHECK_MSG(!strcmp(e.param, set->cases[i].param), "%s: param '%s'", body, e.param);
            CHECK_MSG(e.message[0] && !strcmp(e.type, "invalid_request_error"), "%s", body);
            openai_request_free(&r);
        }
    }
}

static void test_error_json(void) {
    openai_error e;
    openai_error_set(&e, 400, "invalid_request_error", "prompt", "context_length_exceeded",
                     "too %s", "long");
    json_t *j = openai_error_json(&e);
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    CHECK_MSG(!strcmp(s,
                      "{\"error\":{\"code\":\"context_length_exceeded\",\"message\":\"too long\","
                      "\"param\":\"prompt\",\"type\":\"invalid_request_error\"}}"),
              "%s", s);
    free(s);
    json_decref(j);
    strata_err se = {0};
    strata_err_set(&se, STRATA_ENOTFOUND, "no such thing");
    openai_error_from_strata(&e, &se, NULL);
    CHECK(e.status == 404 && !strcmp(e.type, "not_found_error") && !e.param[0]);
    /* a message quoting invalid UTF-8 still yields a JSON object */
    openai_error_set(&e, 400, "invalid_request_error", NULL, NULL, "bad \xff");
    j = openai_error_json(&e);
    CHECK(j && json_object_get(j, "error"));
    json_decref(j);
}

/* jansson allocations made after the body is parsed (the message copies, kwargs,
 * strings) fail one at a time: every path must return an error and free what it
 * made. Failures inside json_loadb itself are left alone: jansson tolerates some of
 * them internally, which is its business, not ours. */
static int fail_at, n_allocs;
static void *counting_malloc(size_t n) { return ++n_allocs == fail_at ? NULL : malloc(n); }

static void test_alloc_failures(void) {
    const char *body =
        "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": "
        "\"a\"}]},"
        " {\"role\": \"assistant\", \"content\": \"b\"}],"
        " \"stop\": [\"x\"], \"logit_bias\": {\"3\": 1}, \"chat_template_kwargs\": {\"a\": 1}}";
    json_error_t je;
    fail_at = -1;
    n_allocs = 0;
    json_set_alloc_funcs(counting_malloc, free);
    json_t *j = json_loadb(body, strlen(body), JSON_REJECT_DUPLICATES, &je);
    int n_load = n_allocs;
    json_decref(j);
    json_set_alloc_funcs(malloc, free);
    int ok = 0, tried = 0;
    for (fail_at = n_load + 1; fail_at < n_load + 200 && !ok; fail_at++) {
        openai_request r;
        openai_error e;
        n_allocs = 0;
        json_set_alloc_funcs(counting_malloc, free);
        int rc = parse(&r, OPENAI_CHAT, body, &e);
        json_set_alloc_funcs(malloc, free);
        openai_request_free(&r);
        if (n_allocs < fail_at) {
            ok = rc == 0;
        } else {
            CHECK_MSG(rc < 0, "fail_at %d: rc %d", fail_at, rc);
            tried++;
        }
    }
    CHECK(ok && tried > 5);
}

int main(void) {
    RUN(test_completion_forms);
    RUN(test_chat_forms);
    RUN(test_invalid);
    RUN(test_error_json);
    RUN(test_alloc_failures);
    TEST_DONE();
}
