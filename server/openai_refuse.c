/* openai_refuse.c - request fields that would change the output in ways this server
 * does not honour yet.
 *
 * The rule is to refuse rather than ignore: a client that asks for beam search or a
 * sampler we lack and gets unconstrained text back has been lied to.
 * Each refused field has a neutral value (what a client sends when it means "off"),
 * which stays accepted so that clients spelling out their defaults keep working.
 * Fields that change nothing a client can see (metadata, store, prediction, ...) are
 * ignored as unknown fields are. */
#include <string.h>

#include "server/openai.h"

#define BAD(e, param, ...)                                                                         \
    openai_error_set(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

/* What a field's neutral value is. */
enum {
    NEUTRAL_NULL,
    NEUTRAL_FALSE,
    NEUTRAL_TRUE,
    NEUTRAL_ZERO,
    NEUTRAL_ONE,
    NEUTRAL_NONPOS,
    NEUTRAL_EMPTY
};

static const struct {
    const char *name;
    int neutral;
    const char *why;
} refused[] = {
    {"structural_tag", NEUTRAL_NULL, "structural tags are not supported"},
    /* decoding we do not implement */
    {"use_beam_search", NEUTRAL_FALSE, "beam search is not supported"},
    {"length_penalty", NEUTRAL_ONE, "beam search is not supported"},
    {"min_tokens", NEUTRAL_ZERO, "a minimum length is not supported"},
    {"bad_words", NEUTRAL_EMPTY, "banned words are not supported (use logit_bias)"},
    {"allowed_token_ids", NEUTRAL_NULL, "token allow-lists are not supported (use logit_bias)"},
    {"logits_processors", NEUTRAL_EMPTY, "logits processors are not supported"},
    {"typical_p", NEUTRAL_ONE, "typical sampling is not supported"},
    {"tfs_z", NEUTRAL_ONE, "tail-free sampling is not supported"},
    {"mirostat", NEUTRAL_ZERO, "mirostat sampling is not supported"},
    {"dynatemp_range", NEUTRAL_ZERO, "dynamic temperature is not supported"},
    {"dry_multiplier", NEUTRAL_ZERO, "DRY sampling is not supported"},
    {"xtc_probability", NEUTRAL_ZERO, "XTC sampling is not supported"},
    {"top_n_sigma", NEUTRAL_NONPOS, "top-n-sigma sampling is not supported"},
    {"repeat_penalty", NEUTRAL_ONE, "use 'repetition_penalty'"},
    /* prompt and output shaping */
    {"truncate_prompt_tokens", NEUTRAL_NULL, "prompts are never truncated here"},
    {"prompt_logprobs", NEUTRAL_NULL, "use 'echo' with 'logprobs' (completions)"},
    {"include_stop_str_in_output", NEUTRAL_FALSE, "stop strings are never included"},
    {"spaces_between_special_tokens", NEUTRAL_TRUE, "special tokens are always spaced as decoded"},
    {"functions", NEUTRAL_EMPTY, "use 'tools'"},
    {"function_call", NEUTRAL_NULL, "use 'tools'"},
    {"audio", NEUTRAL_NULL, "audio output is not supported"},
    {"web_search_options", NEUTRAL_NULL, "web search is not supported"},
};

static int is_neutral(json_t *v, int neutral) {
    if (json_is_null(v)) return 1;
    switch (neutral) {
    case NEUTRAL_FALSE: return json_is_false(v);
    case NEUTRAL_TRUE: return json_is_true(v);
    case NEUTRAL_ZERO: return json_is_number(v) && json_number_value(v) == 0;
    case NEUTRAL_ONE: return json_is_number(v) && json_number_value(v) == 1;
    case NEUTRAL_NONPOS: return json_is_number(v) && json_number_value(v) <= 0;
    case NEUTRAL_EMPTY:
        return (json_is_array(v) && !json_array_size(v)) ||
               (json_is_string(v) && !json_string_length(v)) ||
               (json_is_object(v) && !json_object_size(v));
    default: return 0;
    }
}

int openai_refuse_fields(json_t *root, int kind, openai_error *e) {
    json_t *v;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if ((v = json_object_get(root, refused[i].name)) && !is_neutral(v, refused[i].neutral))
            return BAD(e, refused[i].name, "'%s' is not supported by this server: %s",
                       refused[i].name, refused[i].why);
    if ((v = json_object_get(root, "modalities")) && !json_is_null(v)) {
        size_t j;
        json_t *m;
        if (!json_is_array(v)) return BAD(e, "modalities", "'modalities' must be a list");
        json_array_foreach(v, j, m) {
            if (!json_is_string(m) || strcmp(json_string_value(m), "text"))
                return BAD(e, "modalities", "'modalities' may only hold \"text\"");
        }
    }
    if (kind == OPENAI_CHAT && (v = json_object_get(root, "echo")) && !is_neutral(v, NEUTRAL_FALSE))
        return BAD(e, "echo", "'echo' is only supported on /v1/completions");
    if ((v = json_object_get(root, "suffix")) && !is_neutral(v, NEUTRAL_EMPTY))
        return BAD(e, "suffix", "'suffix' is not supported");
    if ((v = json_object_get(root, "tools")) && !json_is_null(v) && !json_is_array(v))
        return BAD(e, "tools", "'tools' must be a list");
    if (kind == OPENAI_COMPLETION && (v = json_object_get(root, "best_of")) && !json_is_null(v)) {
        json_t *n = json_object_get(root, "n");
        long long nn = json_is_integer(n) ? json_integer_value(n) : 1;
        if (!json_is_integer(v) || json_integer_value(v) != nn)
            return BAD(e, "best_of", "'best_of' other than n is not supported");
    }
    if ((v = json_object_get(root, "user")) && !json_is_null(v) && !json_is_string(v))
        return BAD(e, "user", "'user' must be a string");
    if ((v = json_object_get(root, "model")) && !json_is_null(v) && !json_is_string(v))
        return BAD(e, "model", "'model' must be a string");
    return 0;
}
