/* toolcall.h - a model's tool-call text turned into OpenAI tool_calls, while it streams.
 *
 * The families' chat templates prompt the model to write its calls in one of two forms:
 *  - XML (Qwen3.5, Nemotron 3 Nano; vLLM's "qwen3_coder"):
 *    <tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n</function>\n</tool_call>
 *    VALUE is raw text (it may span lines), typed by the request's tool schema;
 *  - Gemma 4: <|tool_call>call:NAME{key:VALUE,...}<tool_call|>, strings quoted by the
 *    <|"|> token, numbers and booleans bare, {...} and [...] nested; typed by that syntax.
 * A parser reads one choice's content as it is generated and splits it into the content
 * to send and the calls completed, holding back text that may still become a call: a
 * stream cut anywhere gives exactly what one feed of the whole text gives. Text before a
 * call is content, verbatim; whitespace between calls and after the last one is dropped
 * (the templates' separators); other text after a call is content, verbatim, with the
 * whitespace before it. A call that
 * is malformed (a wrong or missing closing tag, text where a tag belongs, unterminated when
 * the output ends) is content, verbatim, and the search for calls goes on right after its
 * opening marker. Not thread-safe: one parser per choice, used by one thread at a time. */
#ifndef STRATA_TOOLCALL_H
#define STRATA_TOOLCALL_H

#include <jansson.h>
#include <stddef.h>

#include "engine/base/err.h"
#include "engine/base/strbuf.h"

/* The formats, each with its name: NONE (no calls: every byte is content), XML, GEMMA4. */
#define TOOLCALL_FORMAT_LIST(X) X(NONE, "none") X(XML, "xml") X(GEMMA4, "gemma4")

typedef enum toolcall_format {
#define TOOLCALL_FORMAT_ENUM(id, name) TOOLCALL_##id,
    TOOLCALL_FORMAT_LIST(TOOLCALL_FORMAT_ENUM)
#undef TOOLCALL_FORMAT_ENUM
} toolcall_format;

/* The format for name: "xml" (alias "qwen3_coder"), "gemma4", "none", or "auto": the chat
 * template's source decides when it renders one form (its assistant tool calls), else the
 * model_type ("qwen3_5*", "nemotron_h" -> XML, "gemma4*" -> GEMMA4), else NONE. model_type
 * and template_src may be NULL. An unknown name is STRATA_EINVALID naming the allowed ones;
 * *out is written only on success. Any thread. */
int toolcall_format_pick(const char *name, const char *model_type, const char *template_src,
                         toolcall_format *out, strata_err *err);

/* The name of a format ("none", "xml", "gemma4"); never NULL. */
const char *toolcall_format_name(toolcall_format f);

typedef struct toolcall_parser toolcall_parser;

/* A parser for one choice. tools: the request's OpenAI "tools" array, borrowed for the
 * parser's life (NULL: none); the XML form types each argument by
 * tools[i].function.parameters.properties[ARG] (see toolcall_xml.c). Caller frees with
 * toolcall_parser_free. STRATA_EINVALID (unknown format) or STRATA_ENOMEM. */
int toolcall_parser_create(toolcall_parser **out, toolcall_format f, const json_t *tools,
                           strata_err *err);
void toolcall_parser_free(toolcall_parser *p); /* accepts NULL */

typedef struct toolcall_call {
    char id[40];     /* "call_" + 24 alphanumerics, unique within the parser */
    char *name;      /* as the model wrote it (the tool may not exist) */
    char *arguments; /* a JSON object text: what OpenAI's function.arguments holds */
} toolcall_call;

/* What feeds produced, owned by the caller: content safe to send now and the calls
 * completed, in order. The strings belong to the delta until it is cleared. */
typedef struct toolcall_delta {
    strbuf content;
    toolcall_call *calls;
    int n_calls, cap_calls;
} toolcall_delta;

void toolcall_delta_init(toolcall_delta *d);
void toolcall_delta_clear(toolcall_delta *d);  /* empties it, keeps the memory */
void toolcall_delta_deinit(toolcall_delta *d); /* frees everything; init makes it usable again */

/* Feeds the next piece of the choice's content (len bytes; pieces are whole characters,
 * any other split is fine) and appends to out what it settles. final: the output ended,
 * so nothing stays held back; the choice's last feed must be final (text may be empty),
 * and a feed after it is STRATA_ESTATE. On STRATA_ENOMEM the parser and out are as they
 * were before the call, so it can be retried. */
int toolcall_feed(toolcall_parser *p, const char *text, size_t len, int final, toolcall_delta *out,
                  strata_err *err);

/* Calls completed so far in this choice (for finish_reason "tool_calls"). */
int toolcall_count(const toolcall_parser *p);

#endif
