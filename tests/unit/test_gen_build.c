/* test_gen_build.c - every way a request can fail while it is built, on the real
 * request builder (server/gen_build.c) over the demo model.
 *
 * One bad body per check of the completion and chat parsers (server/openai.c,
 * openai_refuse.c) and of the builder itself (model name, tokenizer, template,
 * prompts x n against the slots, empty prompts, the context), each run through
 * gen_build and freed through req_unref like a request the daemon prepared.
 * Run under ASan by `make test`, so an error path that leaves the request in a state
 * its destructor cannot free, or frees twice, or leaks, fails here. Before the fix a
 * completion whose prompts x n exceeded --max-seqs crashed the daemon (the choice
 * count was set before the choice array existed). */
#include <stdlib.h>
#include <string.h>

#include "tests/srv_fixture.h"
#include "tests/test.h"

#define MAX_SEQS 4
#define CTX 64

static srv_fixture F;

typedef struct bad_case {
    int job;
    const char *body, *param;
    int status;
    const char *says; /* a piece of the message */
} bad_case;

#define U "{\"role\": \"user\", \"content\": \"x\"}"
#define CHAT(extra) "{\"messages\": [" U "]" extra "}"
#define CMPL(extra) "{\"prompt\": \"x\"" extra "}"

static const bad_case bad[] = {
    /* the body */
    {SRV_JOB_COMPLETION, "{", "", 400, "Invalid JSON"},
    {SRV_JOB_COMPLETION, "[1]", "", 400, "JSON object"},
    {SRV_JOB_COMPLETION, "{\"prompt\": \"x\", \"prompt\": \"y\"}", "", 400, "duplicate"},
    /* completions: the prompt */
    {SRV_JOB_COMPLETION, "{}", "prompt", 400, "required"},
    {SRV_JOB_COMPLETION, "{\"prompt\": null}", "prompt", 400, "required"},
    {SRV_JOB_COMPLETION, "{\"prompt\": []}", "prompt", 400, "not empty"},
    {SRV_JOB_COMPLETION, "{\"prompt\": 5}", "prompt", 400, "must be a string"},
    {SRV_JOB_COMPLETION, "{\"prompt\": [\"a\", 1]}", "prompt", 400, "all be strings"},
    {SRV_JOB_COMPLETION, "{\"prompt\": [[1], 2]}", "prompt", 400, "token id lists"},
    {SRV_JOB_COMPLETION, "{\"prompt\": [1, \"a\"]}", "prompt", 400, "token ids"},
    {SRV_JOB_COMPLETION, "{\"prompt\": [4096]}", "prompt", 400, "[0, 4096)"},
    {SRV_JOB_COMPLETION, "{\"prompt\": [-1]}", "prompt", 400, "[0, 4096)"},
    {SRV_JOB_COMPLETION, "{\"prompt\": [[]]}", "prompt", 400, "must not be empty"},
    /* the slots: prompts x n (the daemon's SIGSEGV) */
    {SRV_JOB_COMPLETION, "{\"prompt\": [\"a\",\"a\",\"a\",\"a\",\"a\"], \"max_tokens\": 1}",
     "prompt", 400, "exceed the 4 sequences"},
    {SRV_JOB_COMPLETION, "{\"prompt\": [\"a\", \"b\"], \"n\": 3}", "n", 400, "--max-seqs"},
    {SRV_JOB_COMPLETION, "{\"prompt\": [[1], [2], [3]], \"n\": 2}", "n", 400, "6 choices"},
    {SRV_JOB_COMPLETION, CMPL(", \"n\": 5"), "n", 400, "between 1 and 4"},
    {SRV_JOB_COMPLETION, CMPL(", \"n\": 0"), "n", 400, "between 1 and 4"},
    /* sampling and length fields */
    {SRV_JOB_COMPLETION, CMPL(", \"max_tokens\": 0"), "max_tokens", 400, "at least 1"},
    {SRV_JOB_COMPLETION, CMPL(", \"max_tokens\": -1"), "max_tokens", 400, "between"},
    {SRV_JOB_COMPLETION, CMPL(", \"max_tokens\": 1.5"), "max_tokens", 400, "integer"},
    {SRV_JOB_COMPLETION, CMPL(", \"max_completion_tokens\": 0"), "max_completion_tokens", 400,
     "between"},
    {SRV_JOB_COMPLETION, CMPL(", \"temperature\": 2.5"), "temperature", 400, "between 0 and 2"},
    {SRV_JOB_COMPLETION, CMPL(", \"temperature\": \"1\""), "temperature", 400, "number"},
    {SRV_JOB_COMPLETION, CMPL(", \"top_p\": 0"), "top_p", 400, "(0, 1]"},
    {SRV_JOB_COMPLETION, CMPL(", \"top_p\": 1.5"), "top_p", 400, "between"},
    {SRV_JOB_COMPLETION, CMPL(", \"min_p\": 2"), "min_p", 400, "between"},
    {SRV_JOB_COMPLETION, CMPL(", \"top_k\": -2"), "top_k", 400, "between"},
    {SRV_JOB_COMPLETION, CMPL(", \"presence_penalty\": 3"), "presence_penalty", 400, "between"},
    {SRV_JOB_COMPLETION, CMPL(", \"frequency_penalty\": -3"), "frequency_penalty", 400, "between"},
    {SRV_JOB_COMPLETION, CMPL(", \"repetition_penalty\": 0"), "repetition_penalty", 400, "(0, 10]"},
    {SRV_JOB_COMPLETION, CMPL(", \"repetition_penalty\": 11"), "repetition_penalty", 400,
     "between"},
    {SRV_JOB_COMPLETION, CMPL(", \"seed\": 1.5"), "seed", 400, "integer"},
    {SRV_JOB_COMPLETION, CMPL(", \"stop\": 1"), "stop", 400, "string or a list"},
    {SRV_JOB_COMPLETION, CMPL(", \"stop\": [1]"), "stop", 400, "items must be strings"},
    {SRV_JOB_COMPLETION,
     CMPL(", \"stop\": [\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\","
          "\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]"),
     "stop", 400, "at most 16"},
    {SRV_JOB_COMPLETION, CMPL(", \"stop_token_ids\": [-1]"), "stop_token_ids", 400, "token ids"},
    {SRV_JOB_COMPLETION, CMPL(", \"stop_token_ids\": 5"), "stop_token_ids", 400, "a list"},
    {SRV_JOB_COMPLETION, CMPL(", \"logit_bias\": []"), "logit_bias", 400, "an object"},
    {SRV_JOB_COMPLETION, CMPL(", \"logit_bias\": {\"x\": 1}"), "logit_bias", 400, "keys must be"},
    {SRV_JOB_COMPLETION, CMPL(", \"logit_bias\": {\"4096\": 1}"), "logit_bias", 400,
     "keys must be"},
    {SRV_JOB_COMPLETION, CMPL(", \"logit_bias\": {\"1\": 101}"), "logit_bias", 400,
     "between -100 and 100"},
    {SRV_JOB_COMPLETION, CMPL(", \"logprobs\": 21"), "logprobs", 400, "between"},
    {SRV_JOB_COMPLETION, CMPL(", \"echo\": \"yes\""), "echo", 400, "boolean"},
    {SRV_JOB_COMPLETION, CMPL(", \"stream\": 1"), "stream", 400, "boolean"},
    {SRV_JOB_COMPLETION, CMPL(", \"stream_options\": {}"), "stream_options", 400, "only allowed"},
    {SRV_JOB_COMPLETION, CMPL(", \"stream\": true, \"stream_options\": 1"), "stream_options", 400,
     "an object"},
    {SRV_JOB_COMPLETION, CMPL(", \"stream\": true, \"stream_options\": {\"include_usage\": 1}"),
     "include_usage", 400, "boolean"},
    {SRV_JOB_COMPLETION, CMPL(", \"ignore_eos\": 1"), "ignore_eos", 400, "boolean"},
    {SRV_JOB_COMPLETION, CMPL(", \"skip_special_tokens\": 1"), "skip_special_tokens", 400,
     "boolean"},
    {SRV_JOB_COMPLETION, CMPL(", \"suffix\": \"s\""), "suffix", 400, "not supported"},
    {SRV_JOB_COMPLETION, CMPL(", \"best_of\": 3"), "best_of", 400, "not supported"},
    {SRV_JOB_COMPLETION, CMPL(", \"user\": 5"), "user", 400, "string"},
    {SRV_JOB_COMPLETION, CMPL(", \"model\": 5"), "model", 400, "string"},
    {SRV_JOB_COMPLETION, CMPL(", \"model\": \"gpt-4\""), "model", 404, "does not exist"},
    {SRV_JOB_COMPLETION, CMPL(", \"response_format\": 1"), "response_format", 400, "with a type"},
    {SRV_JOB_COMPLETION, CMPL(", \"tools\": 1"), "tools", 400, "a list"},
    {SRV_JOB_COMPLETION, CMPL(", \"tool_choice\": \"required\""), "tool_choice", 400,
     "needs 'tools'"},
    {SRV_JOB_COMPLETION, CMPL(", \"tool_choice\": \"sometimes\""), "tool_choice", 400,
     "\"required\""},
    {SRV_JOB_COMPLETION, CMPL(", \"modalities\": [\"audio\"]"), "modalities", 400, "\"text\""},
    {SRV_JOB_COMPLETION, CMPL(", \"modalities\": \"text\""), "modalities", 400, "a list"},
    /* output formats: each checked when the request is read, and only one at a time */
    {SRV_JOB_COMPLETION, CMPL(", \"guided_grammar\": \"root ::= x\""), "guided_grammar", 400,
     "not defined"},
    {SRV_JOB_CHAT, CHAT(", \"grammar\": \"root ::= x\""), "grammar", 400, "not defined"},
    {SRV_JOB_COMPLETION, CMPL(", \"guided_regex\": \"a(?=b)\""), "guided_regex", 400, "offset"},
    {SRV_JOB_COMPLETION, CMPL(", \"guided_json\": {\"type\": \"object\", \"not\": {}}"),
     "guided_json", 400, "\"not\""},
    {SRV_JOB_COMPLETION, CMPL(", \"guided_json\": \"{oops\""), "guided_json", 400,
     "not valid JSON"},
    {SRV_JOB_COMPLETION, CMPL(", \"guided_choice\": []"), "guided_choice", 400, "non-empty"},
    {SRV_JOB_COMPLETION, CMPL(", \"guided_choice\": [\"a\"], \"regex\": \"b\""), "regex", 400,
     "only one"},
    {SRV_JOB_CHAT, CHAT(", \"structured_outputs\": {\"json\": {}, \"regex\": \"a\"}"),
     "structured_outputs", 400, "only one"},
    {SRV_JOB_CHAT, CHAT(", \"structural_tag\": \"{}\""), "structural_tag", 400, "structural"},
    {SRV_JOB_COMPLETION, CMPL(", \"use_beam_search\": true"), "use_beam_search", 400, "beam"},
    {SRV_JOB_COMPLETION, CMPL(", \"length_penalty\": 2"), "length_penalty", 400, "beam"},
    {SRV_JOB_COMPLETION, CMPL(", \"min_tokens\": 4"), "min_tokens", 400, "minimum length"},
    {SRV_JOB_COMPLETION, CMPL(", \"bad_words\": [\"a\"]"), "bad_words", 400, "logit_bias"},
    {SRV_JOB_COMPLETION, CMPL(", \"allowed_token_ids\": [1]"), "allowed_token_ids", 400,
     "logit_bias"},
    {SRV_JOB_COMPLETION, CMPL(", \"logits_processors\": [\"x\"]"), "logits_processors", 400,
     "processors"},
    {SRV_JOB_COMPLETION, CMPL(", \"typical_p\": 0.5"), "typical_p", 400, "typical"},
    {SRV_JOB_COMPLETION, CMPL(", \"tfs_z\": 0.5"), "tfs_z", 400, "tail-free"},
    {SRV_JOB_COMPLETION, CMPL(", \"mirostat\": 2"), "mirostat", 400, "mirostat"},
    {SRV_JOB_COMPLETION, CMPL(", \"dynatemp_range\": 0.5"), "dynatemp_range", 400, "dynamic"},
    {SRV_JOB_COMPLETION, CMPL(", \"dry_multiplier\": 0.8"), "dry_multiplier", 400, "DRY"},
    {SRV_JOB_COMPLETION, CMPL(", \"xtc_probability\": 0.5"), "xtc_probability", 400, "XTC"},
    {SRV_JOB_COMPLETION, CMPL(", \"top_n_sigma\": 1"), "top_n_sigma", 400, "sigma"},
    {SRV_JOB_COMPLETION, CMPL(", \"repeat_penalty\": 1.1"), "repeat_penalty", 400,
     "repetition_penalty"},
    {SRV_JOB_COMPLETION, CMPL(", \"truncate_prompt_tokens\": 8"), "truncate_prompt_tokens", 400,
     "truncated"},
    {SRV_JOB_COMPLETION, CMPL(", \"prompt_logprobs\": 1"), "prompt_logprobs", 400, "echo"},
    {SRV_JOB_COMPLETION, CMPL(", \"include_stop_str_in_output\": true"),
     "include_stop_str_in_output", 400, "stop"},
    {SRV_JOB_COMPLETION, CMPL(", \"spaces_between_special_tokens\": false"),
     "spaces_between_special_tokens", 400, "special"},
    {SRV_JOB_CHAT, CHAT(", \"functions\": [{\"name\": \"f\"}]"), "functions", 400, "tools"},
    {SRV_JOB_CHAT, CHAT(", \"function_call\": \"auto\""), "function_call", 400, "tools"},
    {SRV_JOB_CHAT, CHAT(", \"audio\": {\"voice\": \"x\"}"), "audio", 400, "audio"},
    {SRV_JOB_CHAT, CHAT(", \"web_search_options\": {}"), "web_search_options", 400, "web search"},
    /* chat: the messages */
    {SRV_JOB_CHAT, "{}", "messages", 400, "non-empty list"},
    {SRV_JOB_CHAT, "{\"messages\": []}", "messages", 400, "non-empty list"},
    {SRV_JOB_CHAT, "{\"messages\": \"hi\"}", "messages", 400, "non-empty list"},
    {SRV_JOB_CHAT, "{\"messages\": [1]}", "messages", 400, "must be an object"},
    {SRV_JOB_CHAT, "{\"messages\": [{\"content\": \"x\"}]}", "messages", 400,
     "role must be a string"},
    {SRV_JOB_CHAT, "{\"messages\": [{\"role\": \"god\", \"content\": \"x\"}]}", "messages", 400,
     "is not one of"},
    {SRV_JOB_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "messages", 400,
     "content must be"},
    {SRV_JOB_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [5]}]}", "messages", 400,
     "content part"},
    {SRV_JOB_CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", "messages",
     400, "text only"},
    {SRV_JOB_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}",
     "messages", 400, "text must be a string"},
    {SRV_JOB_CHAT, CHAT(", \"echo\": true"), "echo", 400, "completions"},
    {SRV_JOB_CHAT, CHAT(", \"max_tokens\": 0"), "max_tokens", 400, "at least 1"},
    {SRV_JOB_CHAT, CHAT(", \"logprobs\": 1"), "logprobs", 400, "boolean"},
    {SRV_JOB_CHAT, CHAT(", \"top_logprobs\": 1"), "top_logprobs", 400, "requires 'logprobs'"},
    {SRV_JOB_CHAT, CHAT(", \"logprobs\": true, \"top_logprobs\": 21"), "top_logprobs", 400,
     "between"},
    {SRV_JOB_CHAT, CHAT(", \"response_format\": {\"type\": \"json_schema\"}"), "response_format",
     400, "needs a 'json_schema' object"},
    {SRV_JOB_CHAT,
     CHAT(", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}],"
          " \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}"),
     "tool_choice", 400, "not among"},
    {SRV_JOB_CHAT,
     CHAT(", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}],"
          " \"tool_choice\": \"required\", \"guided_regex\": \"a\""),
     "tool_choice", 400, "cannot be combined"},
    {SRV_JOB_CHAT, CHAT(", \"chat_template_kwargs\": []"), "chat_template_kwargs", 400,
     "an object"},
    {SRV_JOB_CHAT, CHAT(", \"add_generation_prompt\": 1"), "add_generation_prompt", 400, "boolean"},
    {SRV_JOB_CHAT, CHAT(", \"continue_final_message\": 1"), "continue_final_message", 400,
     "boolean"},
    {SRV_JOB_CHAT, CHAT(", \"add_generation_prompt\": true, \"continue_final_message\": true"),
     "continue_final_message", 400, "cannot both"},
    {SRV_JOB_CHAT, CHAT(", \"n\": 5"), "n", 400, "between 1 and 4"},
    /* the builder: template, tokenizer, context */
    {SRV_JOB_CHAT, "{\"messages\": [{\"role\": \"assistant\", \"content\": null}]}", "messages",
     400, ""},
    {SRV_JOB_CHAT, CHAT(", \"chat_template_kwargs\": {\"add_generation_prompt\": false}"),
     "messages", 400, "reserved variable"},
    {SRV_JOB_CHAT,
     "{\"messages\": [{\"role\": \"assistant\", \"content\": \"zzz\"}], "
     "\"continue_final_message\": "
     "true}",
     NULL, 0, NULL},
    {SRV_JOB_COMPLETION, "{\"prompt\": \"\"}", "prompt", 400, "empty after tokenization"},
    {SRV_JOB_COMPLETION, "{\"prompt\": [\"And\", \"\"], \"n\": 2}", "prompt", 400,
     "empty after tokenization"},
    {SRV_JOB_COMPLETION, CMPL(", \"max_tokens\": 64"), "prompt", 400,
     "maximum context length is 64"},
    {SRV_JOB_COMPLETION,
     "{\"prompt\": [[1], [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
     "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]]}",
     "prompt", 400, "maximum context length"},
    {SRV_JOB_CHAT, CHAT(", \"max_tokens\": 60"), "messages", 400, "maximum context length"},
};

/* Runs one body through the builder; returns its error (status 0 = built). */
static openai_error build(int job, const char *body, size_t len, int *n_choices) {
    openai_error e;
    memset(&e, 0, sizeof e);
    srv_req *r = srv_fixture_request(&F, job, body, len);
    CHECK(r != NULL);
    if (!r) return e;
    if (gen_build(&F.S, r, &e) == 0) {
        memset(&e, 0, sizeof e);
        for (int i = 0; i < r->n_choices; i++) CHECK(r->ch[i].seq != NULL);
    }
    *n_choices = r->n_choices;
    req_unref(r); /* the only holder: everything the build made goes here */
    return e;
}

static void test_every_failure(void) {
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int nc = 0;
        openai_error e = build(bad[i].job, bad[i].body, strlen(bad[i].body), &nc);
        if (!bad[i].status) {
            /* a row that must build (and free) cleanly */
            CHECK_MSG(e.status == 0, "%s: %d %s", bad[i].body, e.status, e.message);
            continue;
        }
        CHECK_MSG(e.status == bad[i].status, "%s: status %d (%s)", bad[i].body, e.status,
                  e.message);
        CHECK_MSG(!strcmp(e.param, bad[i].param), "%s: param '%s' (%s)", bad[i].body, e.param,
                  e.message);
        CHECK_MSG(e.message[0] && strstr(e.message, bad[i].says), "%s: message '%s'", bad[i].body,
                  e.message);
        json_t *j = openai_error_json(&e);
        CHECK(j != NULL);
        json_decref(j);
    }
    /* every request was freed: nothing is left live */
    CHECK_EQ_INT(atomic_load(&F.S.live_reqs), 0);
    CHECK_EQ_INT(engine_free_slots(F.S.eng), MAX_SEQS);
}

/* The caps on a chat body's messages and parts, built as the body would come. */
static void test_caps(void) {
    for (int parts = 0; parts < 2; parts++) {
        strbuf b = {0};
        int n = (parts ? OPENAI_MAX_PARTS / 2 : OPENAI_MAX_MESSAGES) + 1;
        strbuf_adds(&b, "{\"messages\": [");
        for (int i = 0; i < n; i++)
            strbuf_adds(
                &b,
                parts ? "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"},"
                        " {\"type\": \"text\", \"text\": \"b\"}]},"
                      : U ",");
        b.p[--b.len] = 0;
        strbuf_adds(&b, "]}");
        int nc = 0;
        openai_error e = build(SRV_JOB_CHAT, b.p, b.len, &nc);
        CHECK_MSG(e.status == 400 && !strcmp(e.param, "messages") && strstr(e.message, "at most"),
                  "%s", e.message);
        strbuf_free(&b);
    }
}

/* Bodies that build: the choices exist and are freed with the request. */
static void test_builds(void) {
    static const struct {
        int job;
        const char *body;
        int n_choices;
    } ok[] = {
        {SRV_JOB_COMPLETION, "{\"prompt\": \"And the LORD said\", \"max_tokens\": 4}", 1},
        {SRV_JOB_COMPLETION, "{\"prompt\": [\"a\", \"b\"], \"n\": 2, \"max_tokens\": 1}", 4},
        {SRV_JOB_COMPLETION,
         "{\"prompt\": [[1, 2], [3]], \"echo\": true, \"logprobs\": 2, \"max_tokens\": 0}", 2},
        {SRV_JOB_COMPLETION,
         CMPL(", \"guided_json\": null, \"min_tokens\": 0, \"use_beam_search\": false,"
              " \"typical_p\": 1, \"bad_words\": [], \"top_n_sigma\": -1,"
              " \"spaces_between_special_tokens\": true, \"modalities\": [\"text\"]"),
         1},
        {SRV_JOB_COMPLETION, CMPL(", \"guided_json\": {\"type\": \"object\"}"), 1},
        {SRV_JOB_COMPLETION, CMPL(", \"guided_regex\": \"a+\", \"grammar\": \"\""), 1},
        {SRV_JOB_COMPLETION, CMPL(", \"guided_choice\": [\"a\", \"b\"], \"n\": 2"), 2},
        {SRV_JOB_CHAT, CHAT(", \"structured_outputs\": {\"json\": {}}"), 1},
        {SRV_JOB_CHAT, CHAT(", \"json_schema\": {}, \"response_format\": {\"type\": \"text\"}"), 1},
        {SRV_JOB_CHAT, CHAT(", \"regex\": \"a\""), 1},
        {SRV_JOB_CHAT,
         CHAT(", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
              "\"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": "
              "\"integer\"}}}}}], \"tool_choice\": \"required\""),
         1},
        {SRV_JOB_CHAT,
         "{\"messages\": [" U
         "], \"n\": 4, \"stream\": true, \"stream_options\": {\"include_usage\":"
         " true}, \"model\": \"models/demo\", \"max_tokens\": 2}",
         4},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int nc = -1;
        openai_error e = build(ok[i].job, ok[i].body, strlen(ok[i].body), &nc);
        CHECK_MSG(e.status == 0, "%s: %s", ok[i].body, e.message);
        CHECK_MSG(nc == ok[i].n_choices, "%s: %d choices", ok[i].body, nc);
    }
    CHECK_EQ_INT(atomic_load(&F.S.live_reqs), 0);
}

int main(void) {
    if (srv_fixture_open(&F, "models/demo", MAX_SEQS, CTX)) return 1;
    RUN(test_every_failure);
    RUN(test_caps);
    RUN(test_builds);
    srv_fixture_close(&F);
    TEST_DONE();
}
