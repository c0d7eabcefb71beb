/* serve.h - the daemon's door: `strata serve`, run by the command dispatcher
 * (server/cli), and how a model's tokenizer and chat template are found, which the
 * offline commands share with it. Everything else of server/ is internal to the daemon. */
#ifndef STRATA_SERVE_H
#define STRATA_SERVE_H

#include "engine/template/chat_template.h"
#include "engine/text/tokenizer.h"

/* Runs the OpenAI-compatible daemon until it drains; returns the SERVE_EXIT_* status
 * (server_internal.h, README "Running it in production"). */
int cmd_serve(int argc, char **argv);

/* ---- model_text.c ---- */

/* 1 when path names a file (a .gguf) rather than a checkpoint directory. */
int model_text_is_gguf(const char *path);

/* The tokenizer and (tmpl not NULL) chat template of model: a checkpoint directory, or a
 * .gguf file. For a .gguf, a tokenizer.json / tokenizer.model beside it wins over its
 * tokenizer.ggml.* keys, and a template in a chat_template.jinja / tokenizer_config.json
 * beside it over its tokenizer.chat_template. STRATA_ENOTFOUND when there is no tokenizer; no template
 * is not an error (*tmpl = NULL). Caller frees with tok_free / chat_template_free.
 * Thread: any (it reads files). */
int model_text_open(const char *model, tokenizer **tok, chat_template **tmpl, strata_err *err);

struct gguf;
/* The same from an opened GGUF's keys alone (tests, fuzzing): STRATA_ENOTFOUND when it
 * has no tokenizer.ggml.model / tokenizer.chat_template; tok gives the template its
 * bos_token / eos_token (NULL: none). */
int model_text_gguf_tokenizer(tokenizer **out, const struct gguf *g, strata_err *err);
int model_text_gguf_template(chat_template **out, const struct gguf *g, const tokenizer *tok,
                             strata_err *err);

#endif
