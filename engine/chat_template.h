/* chat_template.h - a checkpoint's Jinja chat template, rendered as transformers does.
 *
 * The template comes from chat_template.jinja when present, else the chat_template
 * field of tokenizer_config.json (string, or list of named templates: "default").
 * Rendering matches Python Jinja2 3.1 byte for byte (transformers' apply_chat_template
 * environment: trim_blocks, lstrip_blocks, raise_exception, strftime_now, tojson).
 * Read-only after load: any thread may render. */
#ifndef STRATA_CHAT_TEMPLATE_H
#define STRATA_CHAT_TEMPLATE_H

#include <jansson.h>

#include "engine/err.h"

typedef struct chat_template chat_template;

/* STRATA_ENOTFOUND when the directory has no template; a syntax error is
 * STRATA_EFORMAT naming the template line. Caller frees with chat_template_free. */
int chat_template_load(chat_template **out, const char *dir, strata_err *err);
/* From a template source string (tests, tools). bos / eos may be NULL. */
int chat_template_parse(chat_template **out, const char *source, const char *bos_token,
                        const char *eos_token, strata_err *err);
void chat_template_free(chat_template *ct);

/* messages: JSON array of {role, content, ...}; tools and kwargs may be NULL; kwargs
 * entries (e.g. enable_thinking) become template variables. *out is malloc'ed
 * (caller frees). A raise_exception or runtime error is STRATA_EINVALID with the
 * template line in the message. */
int chat_template_render(const chat_template *ct, json_t *messages, json_t *tools,
                         int add_generation_prompt, json_t *kwargs, char **out,
                         strata_err *err);

#endif
