/* fuzz_request.c - the OpenAI request parser/validator on arbitrary bytes.
 *
 * The first byte picks the route (even: completions, odd: chat), the rest is the
 * body. Any input must parse or fail with a 4xx/5xx openai_error, and free cleanly;
 * on success the struct must be consistent (ids in range, n within the limit). */
// fuzz-sources: server/openai.c server/openai_refuse.c server/openai_tools.c server/openai_error.c server/openai_format.c server/schema_gbnf.c server/schema_gbnf_value.c server/schema_gbnf_object.c server/gbnf_text.c engine/constrain/constrain.c engine/constrain/grammar_match.c engine/constrain/json_pda.c engine/constrain/gbnf.c engine/constrain/regex_gbnf.c engine/base/strbuf.c engine/base/err.c
// fuzz-libs: -ljansson -lm
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "server/openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    openai_limits lim = {.vocab = 512, .max_n = 8};
    openai_request r;
    openai_error e;
    int kind = data[0] & 1 ? OPENAI_CHAT : OPENAI_COMPLETION;
    int rc = openai_request_parse(&r, kind, (const char *)data + 1, size - 1, &lim, &e);
    if (rc) {
        if (e.status < 400 || e.status > 599 || !e.message[0] || rc != -e.status) __builtin_trap();
        json_t *j = openai_error_json(&e);
        if (!j) __builtin_trap();
        json_decref(j);
    } else {
        if (r.n < 1 || r.n > lim.max_n || r.top_logprobs > OPENAI_MAX_TOP_LOGPROBS)
            __builtin_trap();
        for (int i = 0; i < r.n_prompts; i++)
            for (int k = 0; k < r.prompts[i].n_ids; k++)
                if (r.prompts[i].ids[k] < 0 || r.prompts[i].ids[k] >= lim.vocab) __builtin_trap();
        for (int i = 0; i < r.n_bias; i++)
            if (r.bias_ids[i] < 0 || r.bias_ids[i] >= lim.vocab) __builtin_trap();
        if (kind == OPENAI_CHAT && (!r.messages || !r.template_kwargs)) __builtin_trap();
    }
    openai_request_free(&r);
    return 0;
}
