/* chat_prompt.c - a chat request's messages rendered through the model's chat
 * template into the prompt text, with continue_final_message cut after the final
 * message. Preparation workers (generation and /tokenize). */
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

int chat_prompt_render(srv *S, const openai_request *r, char **out, openai_error *e) {
    strata_err err = {0};
    char *text = NULL;
    if (chat_template_render(S->tmpl, r->messages, r->tools, r->add_generation_prompt,
                             r->template_kwargs, &text, &err)) {
        openai_error_from_strata(e, &err, "messages");
        if (e->status >= 500 && err.code != STRATA_ENOMEM)
            e->status = 400, e->type = "invalid_request_error";
        return -1;
    }
    if (r->continue_final_message) {
        /* cut after the final message's content so the model continues it */
        json_t *last = json_array_get(r->messages, json_array_size(r->messages) - 1);
        const char *content = json_string_value(json_object_get(last, "content"));
        char *at = NULL;
        if (content && *content)
            for (char *p = text; (p = strstr(p, content)); p++) at = p;
        if (!at) {
            free(text);
            openai_error_set(e, 400, "invalid_request_error", "messages", NULL,
                             "continue_final_message: the final message's content is not in the "
                             "rendered prompt");
            return -1;
        }
        at[strlen(content)] = 0;
    }
    *out = text;
    return 0;
}
