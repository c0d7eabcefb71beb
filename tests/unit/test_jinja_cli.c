/* test_jinja_cli.c - `strata chat-template` (server/cli/cmd_chat_template.c): the printed
 * prompt equals transformers' for fixture cases, errors exit non-zero. */
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/cli/commands.h"
#include "tests/test.h"

#define DATA "tests/data/chat_templates"

/* Runs cmd_chat_template with stdout captured into *out (malloc'ed). */
static int run_cli(int argc, char **argv, char **out) {
    char path[] = "/tmp/strata_cli_XXXXXX";
    int fd = mkstemp(path);
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    dup2(fd, STDOUT_FILENO);
    int rc = cmd_chat_template(argc, argv);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    off_t n = lseek(fd, 0, SEEK_END);
    *out = calloc(1, (size_t)n + 1);
    if (*out && n > 0) {
        lseek(fd, 0, SEEK_SET);
        if (read(fd, *out, (size_t)n) != n) (*out)[0] = 0;
    }
    close(fd);
    unlink(path);
    return rc;
}

/* The first fixture case for model with tools present (or not) and a generation prompt. */
static json_t *find_case(const char *model, int with_tools) {
    FILE *f = fopen(DATA "/cases.jsonl", "r");
    char *line = NULL;
    size_t cap = 0;
    json_t *found = NULL;
    while (f && !found && getline(&line, &cap, f) > 0) {
        json_t *c = json_loads(line, 0, NULL);
        const char *m = json_string_value(json_object_get(c, "model"));
        if (m && !strcmp(m, model) && json_is_true(json_object_get(c, "add_generation_prompt")) &&
            json_object_get(c, "expected") &&
            json_is_array(json_object_get(c, "tools")) == with_tools &&
            json_object_size(json_object_get(c, "kwargs")) == 1)
            found = c;
        else json_decref(c);
    }
    free(line);
    if (f) fclose(f);
    return found;
}

static void test_prompt_matches_fixture(void) {
    for (int with_tools = 0; with_tools < 2; with_tools++) {
        json_t *c = find_case("qwen3", with_tools);
        CHECK(c != NULL);
        if (!c) return;
        char msgs[] = "/tmp/strata_msgs_XXXXXX", tools[] = "/tmp/strata_tools_XXXXXX";
        close(mkstemp(msgs));
        close(mkstemp(tools));
        json_dump_file(json_object_get(c, "messages"), msgs, 0);
        json_dump_file(json_object_get(c, "tools"), tools, 0);
        char *kwargs = json_dumps(json_object_get(c, "kwargs"), 0);
        char *argv[] = {"chat-template", "--model", DATA "/qwen3",
                        "--messages",    msgs,      "--add-generation-prompt",
                        "--kwargs",      kwargs,    "--tools",
                        tools,           NULL};
        char *out = NULL;
        CHECK_EQ_INT(run_cli(with_tools ? 10 : 8, argv, &out), 0);
        CHECK_MSG(out && !strcmp(out, json_string_value(json_object_get(c, "expected"))), "case %s",
                  json_string_value(json_object_get(c, "id")));
        free(out);
        free(kwargs);
        unlink(msgs);
        unlink(tools);
        json_decref(c);
    }
}

static void test_errors(void) {
    char msgs[] = "/tmp/strata_msgs_XXXXXX";
    int fd = mkstemp(msgs);
    const char *two_users =
        "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}]";
    if (write(fd, two_users, strlen(two_users)) < 0) CHECK(0);
    close(fd);
    char *out = NULL;
    /* Gemma 3's template raises on roles that do not alternate */
    char *argv1[] = {"chat-template", "--model", DATA "/gemma3", "--messages", msgs, NULL};
    CHECK_EQ_INT(run_cli(5, argv1, &out), 1);
    CHECK(out && out[0] == 0);
    free(out);
    char *argv2[] = {"chat-template", "--messages", msgs, NULL};
    CHECK_EQ_INT(run_cli(3, argv2, &out), 2);
    free(out);
    char *argv3[] = {"chat-template", "--model", "/nonexistent", "--messages", msgs, NULL};
    CHECK_EQ_INT(run_cli(5, argv3, &out), 1);
    free(out);
    char *argv4[] = {"chat-template", "--model", DATA "/qwen3", "--messages", msgs,
                     "--kwargs",      "[1]",     NULL};
    CHECK_EQ_INT(run_cli(7, argv4, &out), 1);
    free(out);
    unlink(msgs);
}

int main(void) {
    RUN(test_prompt_matches_fixture);
    RUN(test_errors);
    TEST_DONE();
}
