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
/* the one field the smallest good chat and completion bodies have */
#define MESSAGES "\"messages\": [" U "]"
#define PROMPT "\"prompt\": \"x\""
#define CHAT(extra) "{" MESSAGES extra "}"
#define CMPL(extra) "{" PROMPT extra "}"

static const bad_case bad[] = {
    /* the body */
    {SRV_JOB_COMPLETION, "{", "", 400, "Invalid JSON"},
    {SRV_JOB_COMPLETION, "[1]", "", 400, "JSON object"},
    {SRV_JOB_COMPLETION, "{\"prompt\": \"x\", \"prompt\": \"y\"}", "", 400, "duplicate"},
    /* the model: the one 404 */
    {SRV_JOB_COMPLETION, CMPL(", \"model\": \"gpt-4\""), "model", 404, "does not exist"},
    /* the builder: template, tokenizer, context */
    {SRV_JOB_CHAT, "{\"messages\": [{\"role\": \"assistant\", \"content\": null}]}", "messages",
     400, ""},
    {SRV_JOB_CHAT,
     "{\"messages\": [{\"role\": \"assistant\", \"content\": \"zzz\"}], "
     "\"continue_final_message\": "
     "true}",
     NULL, 0, NULL},
    {SRV_JOB_COMPLETION, "{\"prompt\": \"\"}", "prompt", 400, "empty after tokenization"},
    {SRV_JOB_COMPLETION, "{\"prompt\": [\"And\", \"\"], \"n\": 2}", "prompt", 400,
     "empty after tokenization"},
    {SRV_JOB_COMPLETION,
     "{\"prompt\": [[1], [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
     "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]]}",
     "prompt", 400, "maximum context length"},
};

/* A field (or a few) that spoils a body, refused with a 400 that names param. The body is
 * the fields in braces, after the smallest good body's field in the *_fields tables. */
typedef struct field_case {
    const char *fields, *param;
    const char *says; /* a piece of the message */
} field_case;

static const field_case completion_prompts[] = {
    {"", "prompt", "required"},
    {"\"prompt\": null", "prompt", "required"},
    {"\"prompt\": []", "prompt", "not empty"},
    {"\"prompt\": 5", "prompt", "must be a string"},
    {"\"prompt\": [\"a\", 1]", "prompt", "all be strings"},
    {"\"prompt\": [[1], 2]", "prompt", "token id lists"},
    {"\"prompt\": [1, \"a\"]", "prompt", "token ids"},
    {"\"prompt\": [4096]", "prompt", "[0, 4096)"},
    {"\"prompt\": [-1]", "prompt", "[0, 4096)"},
    {"\"prompt\": [[]]", "prompt", "must not be empty"},
    /* the slots: prompts x n (the daemon's SIGSEGV) */
    {"\"prompt\": [\"a\",\"a\",\"a\",\"a\",\"a\"], \"max_tokens\": 1", "prompt",
     "exceed the 4 sequences"},
    {"\"prompt\": [\"a\", \"b\"], \"n\": 3", "n", "--max-seqs"},
    {"\"prompt\": [[1], [2], [3]], \"n\": 2", "n", "6 choices"},
};

static const field_case chat_messages[] = {
    {"", "messages", "non-empty list"},
    {"\"messages\": []", "messages", "non-empty list"},
    {"\"messages\": \"hi\"", "messages", "non-empty list"},
    {"\"messages\": [1]", "messages", "must be an object"},
    {"\"messages\": [{\"content\": \"x\"}]", "messages", "role must be a string"},
    {"\"messages\": [{\"role\": \"god\", \"content\": \"x\"}]", "messages", "is not one of"},
    {"\"messages\": [{\"role\": \"user\", \"content\": 5}]", "messages", "content must be"},
    {"\"messages\": [{\"role\": \"user\", \"content\": [5]}]", "messages", "content part"},
    {"\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]", "messages",
     "text only"},
    {"\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]", "messages",
     "text must be a string"},
};

static const field_case completion_fields[] = {
    /* the slots */
    {"\"n\": 5", "n", "between 1 and 4"},
    {"\"n\": 0", "n", "between 1 and 4"},
    /* sampling and length fields */
    {"\"max_tokens\": 0", "max_tokens", "at least 1"},
    {"\"max_tokens\": -1", "max_tokens", "between"},
    {"\"max_tokens\": 1.5", "max_tokens", "integer"},
    {"\"max_completion_tokens\": 0", "max_completion_tokens", "between"},
    {"\"temperature\": 2.5", "temperature", "between 0 and 2"},
    {"\"temperature\": \"1\"", "temperature", "number"},
    {"\"top_p\": 0", "top_p", "(0, 1]"},
    {"\"top_p\": 1.5", "top_p", "between"},
    {"\"min_p\": 2", "min_p", "between"},
    {"\"top_k\": -2", "top_k", "between"},
    {"\"presence_penalty\": 3", "presence_penalty", "between"},
    {"\"frequency_penalty\": -3", "frequency_penalty", "between"},
    {"\"repetition_penalty\": 0", "repetition_penalty", "(0, 10]"},
    {"\"repetition_penalty\": 11", "repetition_penalty", "between"},
    {"\"seed\": 1.5", "seed", "integer"},
    {"\"stop\": 1", "stop", "string or a list"},
    {"\"stop\": [1]", "stop", "items must be strings"},
    {"\"stop\": [\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\","
     "\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]",
     "stop", "at most 16"},
    {"\"stop_token_ids\": [-1]", "stop_token_ids", "token ids"},
    {"\"stop_token_ids\": 5", "stop_token_ids", "a list"},
    {"\"logit_bias\": []", "logit_bias", "an object"},
    {"\"logit_bias\": {\"x\": 1}", "logit_bias", "keys must be"},
    {"\"logit_bias\": {\"4096\": 1}", "logit_bias", "keys must be"},
    {"\"logit_bias\": {\"1\": 101}", "logit_bias", "between -100 and 100"},
    {"\"logprobs\": 21", "logprobs", "between"},
    {"\"echo\": \"yes\"", "echo", "boolean"},
    {"\"stream\": 1", "stream", "boolean"},
    {"\"stream_options\": {}", "stream_options", "only allowed"},
    {"\"stream\": true, \"stream_options\": 1", "stream_options", "an object"},
    {"\"stream\": true, \"stream_options\": {\"include_usage\": 1}", "include_usage", "boolean"},
    {"\"ignore_eos\": 1", "ignore_eos", "boolean"},
    {"\"skip_special_tokens\": 1", "skip_special_tokens", "boolean"},
    {"\"suffix\": \"s\"", "suffix", "not supported"},
    {"\"best_of\": 3", "best_of", "not supported"},
    {"\"user\": 5", "user", "string"},
    {"\"model\": 5", "model", "string"},
    {"\"response_format\": 1", "response_format", "with a type"},
    {"\"tools\": 1", "tools", "a list"},
    {"\"tool_choice\": \"required\"", "tool_choice", "needs 'tools'"},
    {"\"tool_choice\": \"sometimes\"", "tool_choice", "\"required\""},
    {"\"modalities\": [\"audio\"]", "modalities", "\"text\""},
    {"\"modalities\": \"text\"", "modalities", "a list"},
    /* output formats: each checked when the request is read, and only one at a time */
    {"\"guided_grammar\": \"root ::= x\"", "guided_grammar", "not defined"},
    {"\"guided_regex\": \"a(?=b)\"", "guided_regex", "offset"},
    {"\"guided_json\": {\"type\": \"object\", \"not\": {}}", "guided_json", "\"not\""},
    {"\"guided_json\": \"{oops\"", "guided_json", "not valid JSON"},
    {"\"guided_choice\": []", "guided_choice", "non-empty"},
    {"\"guided_choice\": [\"a\"], \"regex\": \"b\"", "regex", "only one"},
    /* options other servers take and strata refuses */
    {"\"use_beam_search\": true", "use_beam_search", "beam"},
    {"\"length_penalty\": 2", "length_penalty", "beam"},
    {"\"min_tokens\": 4", "min_tokens", "minimum length"},
    {"\"bad_words\": [\"a\"]", "bad_words", "logit_bias"},
    {"\"allowed_token_ids\": [1]", "allowed_token_ids", "logit_bias"},
    {"\"logits_processors\": [\"x\"]", "logits_processors", "processors"},
    {"\"typical_p\": 0.5", "typical_p", "typical"},
    {"\"tfs_z\": 0.5", "tfs_z", "tail-free"},
    {"\"mirostat\": 2", "mirostat", "mirostat"},
    {"\"dynatemp_range\": 0.5", "dynatemp_range", "dynamic"},
    {"\"dry_multiplier\": 0.8", "dry_multiplier", "DRY"},
    {"\"xtc_probability\": 0.5", "xtc_probability", "XTC"},
    {"\"top_n_sigma\": 1", "top_n_sigma", "sigma"},
    {"\"repeat_penalty\": 1.1", "repeat_penalty", "repetition_penalty"},
    {"\"truncate_prompt_tokens\": 8", "truncate_prompt_tokens", "truncated"},
    {"\"prompt_logprobs\": 1", "prompt_logprobs", "echo"},
    {"\"include_stop_str_in_output\": true", "include_stop_str_in_output", "stop"},
    {"\"spaces_between_special_tokens\": false", "spaces_between_special_tokens", "special"},
    /* the builder: the context */
    {"\"max_tokens\": 64", "prompt", "maximum context length is 64"},
};

static const field_case chat_fields[] = {
    /* output formats */
    {"\"grammar\": \"root ::= x\"", "grammar", "not defined"},
    {"\"structured_outputs\": {\"json\": {}, \"regex\": \"a\"}", "structured_outputs", "only one"},
    {"\"structural_tag\": \"{}\"", "structural_tag", "structural"},
    /* options other servers take and strata refuses */
    {"\"functions\": [{\"name\": \"f\"}]", "functions", "tools"},
    {"\"function_call\": \"auto\"", "function_call", "tools"},
    {"\"audio\": {\"voice\": \"x\"}", "audio", "audio"},
    {"\"web_search_options\": {}", "web_search_options", "web search"},
    /* chat fields */
    {"\"echo\": true", "echo", "completions"},
    {"\"max_tokens\": 0", "max_tokens", "at least 1"},
    {"\"logprobs\": 1", "logprobs", "boolean"},
    {"\"top_logprobs\": 1", "top_logprobs", "requires 'logprobs'"},
    {"\"logprobs\": true, \"top_logprobs\": 21", "top_logprobs", "between"},
    {"\"response_format\": {\"type\": \"json_schema\"}", "response_format",
     "needs a 'json_schema' object"},
    {"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}],"
     " \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}",
     "tool_choice", "not among"},
    {"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}],"
     " \"tool_choice\": \"required\", \"guided_regex\": \"a\"",
     "tool_choice", "cannot be combined"},
    {"\"chat_template_kwargs\": []", "chat_template_kwargs", "an object"},
    {"\"add_generation_prompt\": 1", "add_generation_prompt", "boolean"},
    {"\"continue_final_message\": 1", "continue_final_message", "boolean"},
    {"\"add_generation_prompt\": true, \"continue_final_message\": true", "continue_final_message",
     "cannot both"},
    {"\"n\": 5", "n", "between 1 and 4"},
    /* the builder: template, context */
    {"\"chat_template_kwargs\": {\"add_generation_prompt\": false}", "messages",
     "reserved variable"},
    {"\"max_tokens\": 60", "messages", "maximum context length"},
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

/* Builds body and checks how it is refused: status, param and a piece of the message
 * (status 0: it must build, and free, cleanly). */
static void check_refused(int job, const char *body, int status, const char *param,
                          const char *says) {
    int nc = 0;
    openai_error e = build(job, body, strlen(body), &nc);
    if (!status) {
        CHECK_MSG(e.status == 0, "%s: %d %s", body, e.status, e.message);
        return;
    }
    CHECK_MSG(e.status == status, "%s: status %d (%s)", body, e.status, e.message);
    CHECK_MSG(!strcmp(e.param, param), "%s: param '%s' (%s)", body, e.param, e.message);
    CHECK_MSG(e.message[0] && strstr(e.message, says), "%s: message '%s'", body, e.message);
    json_t *j = openai_error_json(&e);
    CHECK(j != NULL);
    json_decref(j);
}

#define FIELD_SET(job, head, cases)                                                                \
    { job, head, cases, sizeof cases / sizeof cases[0] }
static const struct field_set {
    int job;
    const char *head; /* the body up to the fields */
    const field_case *cases;
    size_t n;
} field_sets[] = {
    FIELD_SET(SRV_JOB_COMPLETION, "{", completion_prompts),
    FIELD_SET(SRV_JOB_CHAT, "{", chat_messages),
    FIELD_SET(SRV_JOB_COMPLETION, "{" PROMPT ", ", completion_fields),
    FIELD_SET(SRV_JOB_CHAT, "{" MESSAGES ", ", chat_fields),
};

static void test_every_failure(void) {
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        check_refused(bad[i].job, bad[i].body, bad[i].status, bad[i].param, bad[i].says);
    for (size_t si = 0; si < sizeof field_sets / sizeof field_sets[0]; si++) {
        const struct field_set *set = &field_sets[si];
        for (size_t i = 0; i < set->n; i++) {
            char body[512];
            int len = snprintf(body, sizeof body, "%s%s}", set->head, set->cases[i].fields);
            CHECK_MSG(len > 0 && (size_t)len < sizeof body, "%s: too long", set->cases[i].fields);
            check_refused(set->job, body, 400, set->cases[i].param, set->cases[i].says);
        }
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
