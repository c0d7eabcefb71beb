/* cmd_chat_template.c - `strata chat-template`: render a checkpoint's chat template
 * for a conversation and print the prompt exactly (no newline added), so a prompt
 * can be compared with transformers' apply_chat_template(..., tokenize=False). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/template/chat_template.h"
#include "server/serve.h"

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: strata chat-template --model DIR --messages FILE.json [--add-generation-prompt]\n"
        "                            [--tools FILE.json] [--kwargs JSON] [--template FILE]\n"
        "  --model DIR|FILE   checkpoint directory (chat_template.jinja / tokenizer_config.json)\n"
        "                     or .gguf file (its tokenizer.chat_template)\n"
        "  --messages FILE    JSON array of {role, content, ...} ('-' reads stdin)\n"
        "  --tools FILE       JSON array of tool schemas\n"
        "  --kwargs JSON      object of extra template variables, e.g. '{\"enable_thinking\": "
        "false}'\n"
        "  --template FILE    render this Jinja file instead of the checkpoint's template\n");
}

static json_t *load_json(const char *path, const char *what) {
    json_error_t e;
    json_t *j = !strcmp(path, "-") ? json_loadf(stdin, JSON_ALLOW_NUL, &e)
                                   : json_load_file(path, JSON_ALLOW_NUL, &e);
    if (!j)
        fprintf(stderr, "strata chat-template: %s %s: %s (line %d)\n", what, path, e.text, e.line);
    return j;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0, got;
    if (!f) return NULL;
    do {
        if (n + 4096 > cap) {
            char *nb = realloc(buf, cap = cap * 2 + 8192);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
    } while (got > 0);
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

int cmd_chat_template(int argc, char **argv) {
    const char *model = NULL, *messages_path = NULL, *tools_path = NULL, *kwargs_text = NULL,
               *template_path = NULL;
    int add_gen = 0, status = 1;
    json_t *messages = NULL, *tools = NULL, *kwargs = NULL;
    chat_template *ct = NULL;
    char *out = NULL, *src = NULL;
    strata_err err = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--add-generation-prompt")) {
            add_gen = 1;
        } else if (next && !strcmp(a, "--model")) {
            model = next, i++;
        } else if (next && !strcmp(a, "--messages")) {
            messages_path = next, i++;
        } else if (next && !strcmp(a, "--tools")) {
            tools_path = next, i++;
        } else if (next && !strcmp(a, "--kwargs")) {
            kwargs_text = next, i++;
        } else if (next && !strcmp(a, "--template")) {
            template_path = next, i++;
        } else {
            fprintf(stderr, "strata chat-template: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if ((!model && !template_path) || !messages_path) {
        usage(stderr);
        return 2;
    }
    if (!(messages = load_json(messages_path, "messages"))) goto done;
    if (tools_path && !(tools = load_json(tools_path, "tools"))) goto done;
    if (kwargs_text) {
        json_error_t e;
        if (!(kwargs = json_loads(kwargs_text, 0, &e)) || !json_is_object(kwargs)) {
            fprintf(stderr, "strata chat-template: --kwargs must be a JSON object\n");
            goto done;
        }
    }
    int rc;
    if (template_path) {
        size_t len = 0;
        chat_template *base = NULL;
        if (model && chat_template_load(&base, model, &err) < 0) base = NULL;
        if (!(src = slurp(template_path, &len))) {
            fprintf(stderr, "strata chat-template: cannot read %s\n", template_path);
            chat_template_free(base);
            goto done;
        }
        rc = chat_template_parse_ex(&ct, src, len, base ? chat_template_bos(base) : NULL,
                                    base ? chat_template_eos(base) : NULL, NULL, &err);
        chat_template_free(base);
    } else if (model_text_is_gguf(model)) {
        /* a .gguf: the template beside it, else its tokenizer.chat_template */
        tokenizer *tok = NULL;
        rc = model_text_open(model, &tok, &ct, &err);
        tok_free(tok);
        if (!rc && !ct) rc = strata_err_set(&err, STRATA_ENOTFOUND, "%s: no chat template", model);
    } else {
        rc = chat_template_load(&ct, model, &err);
    }
    if (rc < 0) {
        fprintf(stderr, "strata chat-template: %s\n", err.msg);
        goto done;
    }
    if (chat_template_render(ct, messages, tools, add_gen, kwargs, &out, &err) < 0) {
        fprintf(stderr, "strata chat-template: %s\n", err.msg);
        goto done;
    }
    fputs(out, stdout);
    status = fflush(stdout) == 0 ? 0 : 1;
done:
    free(out);
    free(src);
    chat_template_free(ct);
    json_decref(messages);
    json_decref(tools);
    json_decref(kwargs);
    return status;
}
