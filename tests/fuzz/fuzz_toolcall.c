/* fuzz_toolcall.c - the tool-call parsers (server/toolcall.c) on arbitrary model output.
 *
 * Input: one byte picking the form (XML or Gemma 4) and the cut points, then the output
 * text. The text is fed whole, then again cut into pieces at character boundaries; both
 * must settle the same content and the same calls, every call's arguments must be a JSON
 * object jansson reads (the server hands them back to clients, and reads them again on
 * the next turn), and the parser must free to nothing (ASan checks the memory). */
// fuzz-lib: strata
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/utf8.h"
#include "server/toolcall.h"

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"i\":{\"type\":\"integer\"},\"n\":{\"type\":\"number\"},\"b\":{\"type\":"
    "\"boolean\"},\"o\":{\"type\":\"object\"},\"a\":{\"type\":\"array\"},\"s\":{\"type\":"
    "\"string\"},\"u\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}]}}}}}]";

/* Feeds text in pieces ending at the cut points step apart (0: whole), finally empty. */
static void run(toolcall_format f, const json_t *tools, const char *text, size_t n, size_t step,
                toolcall_delta *out) {
    toolcall_parser *p;
    strata_err err;
    if (toolcall_parser_create(&p, f, tools, &err)) abort();
    size_t at = 0;
    while (step && at < n) {
        size_t end = at + step < n ? at + step : n;
        while (end < n && ((unsigned char)text[end] & 0xC0) == 0x80) end++; /* whole chars */
        if (toolcall_feed(p, text + at, end - at, 0, out, &err)) abort();
        at = end;
    }
    if (toolcall_feed(p, text + at, n - at, 1, out, &err)) abort();
    if (toolcall_count(p) != out->n_calls) abort();
    toolcall_parser_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    toolcall_format f = data[0] & 1 ? TOOLCALL_GEMMA4 : TOOLCALL_XML;
    size_t step = 1 + (data[0] >> 1);
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    if (!unicode_utf8_valid(text, n)) return 0; /* the detokenizer emits UTF-8 only */
    json_t *tools = json_loads(TOOLS, 0, NULL);
    if (!tools) abort();
    toolcall_delta whole, cut;
    toolcall_delta_init(&whole);
    toolcall_delta_init(&cut);
    run(f, tools, text, n, 0, &whole);
    run(f, tools, text, n, step, &cut);
    if (whole.content.len != cut.content.len ||
        (whole.content.len && memcmp(whole.content.p, cut.content.p, whole.content.len)) ||
        whole.n_calls != cut.n_calls)
        abort();
    for (int k = 0; k < whole.n_calls; k++) {
        if (strcmp(whole.calls[k].name, cut.calls[k].name) ||
            strcmp(whole.calls[k].arguments, cut.calls[k].arguments))
            abort();
        json_t *args =
            json_loads(whole.calls[k].arguments, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
        if (!json_is_object(args)) abort();
        json_decref(args);
    }
    toolcall_delta_deinit(&whole);
    toolcall_delta_deinit(&cut);
    json_decref(tools);
    return 0;
}
