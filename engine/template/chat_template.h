/* chat_template.h - a checkpoint's Jinja chat template, rendered as transformers does.
 *
 * The template comes from chat_template.jinja when present, else the chat_template
 * field of tokenizer_config.json (string, or list of named templates: "default", and
 * "tool_use" when tools are given), else chat_template.json.
 * Rendering matches Python Jinja2 3.1 byte for byte (transformers' apply_chat_template
 * environment: trim_blocks, lstrip_blocks, raise_exception, strftime_now, tojson),
 * including transformers 5.x's message preparation: keys whose value is null are
 * dropped, and reasoning given as reasoning_content / thinking / reasoning is visible
 * under all of reasoning_content and thinking.
 * Read-only after load: any thread may render. */
#ifndef STRATA_CHAT_TEMPLATE_H
#define STRATA_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>

#include "engine/base/err.h"

typedef struct chat_template chat_template;

/* Guards against runaway templates; chat_template_limits_default fills the defaults. */
typedef struct chat_template_limits {
    size_t max_output;   /* bytes of rendered text (default 16 MiB) */
    size_t max_memory;   /* working memory of one render (default 256 MiB) */
    long max_iterations; /* loop iterations of one render, all loops (default 1,000,000) */
    int max_depth;       /* nested macro calls, and expression nesting when parsing (default 200) */
    long fail_alloc_at;  /* test hook: the n-th allocation of a parse or render fails (0: never) */
} chat_template_limits;

void chat_template_limits_default(chat_template_limits *lim);

/* STRATA_ENOTFOUND when the directory has no template; a syntax error is
 * STRATA_EFORMAT naming the template line. Caller frees with chat_template_free. */
int chat_template_load(chat_template **out, const char *dir, strata_err *err);
/* From a template source string (tests, tools). bos / eos may be NULL. */
int chat_template_parse(chat_template **out, const char *source, const char *bos_token,
                        const char *eos_token, strata_err *err);
/* As chat_template_parse, with explicit length and limits (lim NULL: defaults). */
int chat_template_parse_ex(chat_template **out, const char *source, size_t len,
                           const char *bos_token, const char *eos_token,
                           const chat_template_limits *lim, strata_err *err);
void chat_template_free(chat_template *ct);

/* Replaces the limits later renders use. Not thread-safe: call before sharing ct. */
void chat_template_set_limits(chat_template *ct, const chat_template_limits *lim);
/* The special token strings found at load (NULL when unset). */
const char *chat_template_bos(const chat_template *ct);
const char *chat_template_eos(const chat_template *ct);
/* The source of the template a request with tools renders (the "tool_use" one of a named
 * list, else the default): what a tool-call parser is picked by. */
const char *chat_template_source(const chat_template *ct);

/* messages: JSON array of {role, content, ...}; tools and kwargs may be NULL; kwargs
 * entries (e.g. enable_thinking) become template variables. *out is malloc'ed
 * (caller frees). A raise_exception or runtime error is STRATA_EINVALID with the
 * template line in the message; a limit hit is STRATA_ERANGE. */
int chat_template_render(const chat_template *ct, json_t *messages, json_t *tools,
                         int add_generation_prompt, json_t *kwargs, char **out, strata_err *err);

#endif
