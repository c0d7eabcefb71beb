/* openai.h - OpenAI request bodies in, validated structs out; errors as OpenAI
 * error objects.
 *
 * The parser only reads JSON (jansson) and knows nothing of tokenizers or the engine,
 * so the unit test and the fuzz harness run it alone. What it cannot decide without
 * the model (token counts against the context) the server checks after tokenizing.
 * Semantics follow the OpenAI API with the usual vLLM extensions (top_k, min_p,
 * repetition_penalty, ignore_eos, stop_token_ids, skip_special_tokens,
 * chat_template_kwargs, add_generation_prompt, continue_final_message) and the
 * structured-output fields of vLLM and llama-server (openai_format.c). Fields
 * that would change the output in ways we do not honour (beam search, samplers we lack) are a 400 naming the field (openai_refuse.c); other
 * unknown fields are ignored; known fields with a wrong type or range are a 400
 * naming the param. Thread: any (no shared state). */
#ifndef STRATA_OPENAI_H
#define STRATA_OPENAI_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"

enum { OPENAI_COMPLETION, OPENAI_CHAT };

#define OPENAI_MAX_STOP 16
#define OPENAI_MAX_TOP_LOGPROBS 20
#define OPENAI_MAX_LOGIT_BIAS 1024
/* max_tokens of a completion that sets neither it nor max_completion_tokens (OpenAI's
 * and vLLM's default; a chat without one runs to the end of its turn) */
#define OPENAI_COMPLETION_DEFAULT_TOKENS 16
/* A chat body holds at most this many messages and content parts (all messages
 * together): each costs a few hundred bytes of JSON objects while a request is
 * prepared, so the caps bound a request's memory by more than its byte size. */
#define OPENAI_MAX_MESSAGES 16384
#define OPENAI_MAX_PARTS 16384

/* An error as the API returns it. */
typedef struct openai_error {
    int status;       /* HTTP status */
    const char *type; /* "invalid_request_error", ... (static string) */
    const char *code; /* static string or NULL */
    char param[64];   /* "" = null */
    char message[512];
} openai_error;

/* Fills e and returns -status (so `return openai_error_set(...)` reads well). */
int openai_error_set(openai_error *e, int status, const char *type, const char *param,
                     const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Maps a STRATA_E* code to status + type (the one table of the server). */
void openai_error_from_strata(openai_error *e, const strata_err *err, const char *param);
/* {"error":{"message","type","param","code"}}; caller frees with json_decref. */
json_t *openai_error_json(const openai_error *e);

/* One completions prompt: text (len bytes, NUL-terminated copy) or token ids. */
typedef struct openai_prompt {
    char *text;
    size_t text_len;
    int32_t *ids;
    int n_ids;
} openai_prompt;

typedef struct openai_limits {
    int vocab; /* token ids must be < vocab (0 = unchecked) */
    int max_n; /* most choices per request, prompts x n (the number of slots) */
} openai_limits;

typedef struct openai_request {
    int kind;          /* OPENAI_COMPLETION / OPENAI_CHAT */
    json_t *root;      /* the parsed body (owned) */
    const char *model; /* NULL when absent; points into root */

    openai_prompt *prompts; /* completions: [n_prompts] */
    int n_prompts;
    json_t *messages;             /* chat: normalized copy (owned): content is a string */
    json_t *tools;                /* borrowed from root; NULL when absent */
    int tool_choice_none;         /* tool_choice "none": tools rendered, no calls parsed */
    int tool_choice_required;     /* "required" or a named function: the output is tool calls */
    const char *tool_choice_name; /* the named function, or NULL; points into root */
    int tool_choice_single; /* exactly one forced call (named, or parallel_tool_calls false) */
    int json_object;        /* response_format json_object: the output is one JSON object */
    char *grammar;          /* GBNF the output must follow (owned), or NULL */
    size_t grammar_len;
    const char *grammar_param; /* the field it came from, for errors (static string) */
    json_t *template_kwargs;   /* owned object (chat_template_kwargs), never NULL for chat */
    int add_generation_prompt; /* default 1 */
    int continue_final_message;

    int max_tokens;      /* -1 (chat unset): until the context is full; 0 only with echo */
    double temperature;  /* default 1 */
    double top_p, min_p; /* 1, 0 */
    int top_k;           /* 0 = off */
    double presence_penalty, frequency_penalty, repetition_penalty; /* 0, 0, 1 */
    int has_seed;
    uint64_t seed;
    char **stop; /* [n_stop] */
    int n_stop;
    int32_t *stop_ids; /* stop_token_ids */
    int n_stop_ids;
    int n;            /* choices per prompt */
    int echo;         /* completions: prepend the prompt (and, with logprobs,
                                  score its tokens too) */
    int logprobs;     /* record logprobs */
    int top_logprobs; /* alternatives per token */
    int32_t *bias_ids;
    float *bias_vals;
    int n_bias;
    int stream, include_usage;
    int ignore_eos;
    int skip_special_tokens; /* default 1 */
} openai_request;

/* Parses and validates a body of len bytes (need not be NUL-terminated). On error
 * fills e (400 with the param) and returns its negative status; r is then empty.
 * Caller frees r with openai_request_free in both cases. */
int openai_request_parse(openai_request *r, int kind, const char *body, size_t len,
                         const openai_limits *lim, openai_error *e);
void openai_request_free(openai_request *r);

/* An assistant message's tool_calls (openai_tools.c), checked and with each call's
 * arguments parsed from the OpenAI JSON string into the object chat templates iterate;
 * msg is the request's copy of messages[i] (its list is replaced, the body's untouched). */
int openai_tool_calls_normalize(json_t *msg, size_t i, openai_error *e);

/* The output-format fields of root (openai_format.c): response_format, tool_choice, vLLM's
 * guided_* and structured_outputs, llama-server's grammar and json_schema; fills
 * json_object, grammar, tool_choice_*. tools must be parsed first. 0 or a 400. */
int openai_parse_format(openai_request *r, json_t *root, openai_error *e);

/* The refused fields of root (openai_refuse.c): 0, or a 400 naming the first. */
int openai_refuse_fields(json_t *root, int kind, openai_error *e);

/* Parses body into a JSON object, with the API's error for invalid JSON. Caller
 * decrefs *out. */
int openai_parse_json(json_t **out, const char *body, size_t len, openai_error *e);

#endif
