/* toolcall_grammar.h - the grammar of a forced tool call (tool_choice "required" or a
 * named function): the model's own call syntax, with each argument's value constrained by
 * the tool's JSON schema, so the output parses as calls (server/toolcall.c) every time. */
#ifndef STRATA_TOOLCALL_GRAMMAR_H
#define STRATA_TOOLCALL_GRAMMAR_H

#include <jansson.h>

#include "engine/base/err.h"
#include "engine/base/strbuf.h"
#include "server/toolcall.h"

/* Appends GBNF text whose rule `root` is calls of the tools in tools (name NULL) or of the
 * tool named name: exactly one when single, else one or more, separated as the template
 * separates them. Formats: TOOLCALL_XML, TOOLCALL_GEMMA4 (toolcall_grammar_gemma.c). Others,
 * and a tool schema the grammar cannot follow, are STRATA_EUNSUPPORTED / STRATA_EINVALID
 * naming the tool. */
int toolcall_grammar(toolcall_format f, const json_t *tools, const char *name, int single,
                     strbuf *out, strata_err *err);

#endif
