/* fuzz_jinja.c - parse and render arbitrary template bytes with a fixed conversation.
 *
 * Every input must either be refused with an error or render; nothing may crash,
 * leak or run away (the limits below keep a hostile template to a few MB and steps).
 * Seeds: tests/fuzz/corpus/jinja/ (the conformance templates and small snippets). */
// fuzz-lib: strata
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

#include "engine/template/chat_template.h"

static const char *const MESSAGES =
    "[{\"role\":\"system\",\"content\":\"You are terse.\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Look \"},{\"type\":\"image\"}]},"
    "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"hm\",\"tool_calls\":[{"
    "\"type\":\"function\","
    "\"function\":{\"name\":\"f\",\"arguments\":{\"a\":[1,2.5,true,null],\"b\":{\"c\":\"\\u00e9\"}}"
    "}}]},"
    "{\"role\":\"tool\",\"content\":\"{\\\"ok\\\": 1}\"},"
    "{\"role\":\"user\",\"content\":\"<think>x</think>y \\\"q\\\" \\ud83d\\ude00\"}]";
static const char *const TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":[\"array\",\"null\"]}},\"required\":["
    "\"a\"]}}}]";
static const char *const KWARGS = "{\"enable_thinking\":false,\"bos_token\":\"<bos>\",\"n\":3}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static json_t *messages, *tools, *kwargs;
    if (!messages) {
        messages = json_loads(MESSAGES, 0, NULL);
        tools = json_loads(TOOLS, 0, NULL);
        kwargs = json_loads(KWARGS, 0, NULL);
    }
    chat_template_limits lim;
    chat_template_limits_default(&lim);
    lim.max_output = 1 << 20;
    lim.max_memory = 64 << 20;
    lim.max_iterations = 100000;
    lim.max_depth = 64;
    chat_template *ct = NULL;
    strata_err err;
    if (chat_template_parse_ex(&ct, (const char *)data, size, NULL, NULL, &lim, &err) < 0) return 0;
    for (int agp = 0; agp < 2; agp++) {
        char *out = NULL;
        if (chat_template_render(ct, messages, agp ? tools : NULL, agp, kwargs, &out, &err) == 0)
            free(out);
    }
    chat_template_free(ct);
    return 0;
}
