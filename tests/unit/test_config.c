/* test_config.c - config/config.c: defaults, file < env < CLI, errors, and that
 * config/schema.json and the example describe exactly the options the code has. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "tests/test.h"

static const char *write_tmp(const char *text) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/strata-test-config-%d.jsonc", (int)getpid());
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static int load(config *c, int argc, char **argv, char **envp, strata_err *err) {
    int help = 0;
    config_init(c, err);
    return config_load(c, argc, argv, envp, &help, err);
}

static void test_defaults(void) {
    config c;
    strata_err err = {0};
    char *argv[] = {"serve", NULL};
    CHECK_EQ_INT(load(&c, 1, argv, NULL, &err), 0);
    CHECK(!strcmp(c.host, "127.0.0.1"));
    CHECK_EQ_INT(c.port, 8080);
    CHECK_EQ_INT(c.max_seqs, 8);
    CHECK(c.api_key.n == 0 && c.api_key.v == NULL && c.model == NULL);
    CHECK(c.allowed_origins.n == 0 && !c.metrics_auth && c.api_key_file == NULL);
    CHECK(!strcmp(c.load_format, "auto"));
    CHECK_EQ_INT(c.sse_keepalive, 15);
    CHECK(!strcmp(c.quantization, "none"));
    config_deinit(&c);
    /* --quantization from the environment and the command line, either case */
    char *env[] = {"STRATA_QUANTIZATION=q4_k", NULL},
         *argv2[] = {"serve", "--quantization=Q8_0", NULL};
    CHECK_EQ_INT(load(&c, 1, argv, env, &err), 0);
    CHECK(!strcmp(c.quantization, "q4_k"));
    config_deinit(&c);
    CHECK_EQ_INT(load(&c, 2, argv2, env, &err), 0);
    CHECK(!strcmp(c.quantization, "Q8_0"));
    config_deinit(&c);
}

/* --sse-keepalive through all four sources, and its range. */
static void test_sse_keepalive(void) {
    config c;
    strata_err err = {0};
    const char *path = write_tmp("{ \"sse-keepalive\": 5 }");
    char cfg_arg[128];
    snprintf(cfg_arg, sizeof cfg_arg, "--config=%s", path);
    char *argv_file[] = {"serve", cfg_arg, NULL};
    CHECK_MSG(load(&c, 2, argv_file, NULL, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(c.sse_keepalive, 5); /* file beats default */
    config_deinit(&c);
    char *env[] = {"STRATA_SSE_KEEPALIVE=7", NULL};
    CHECK_MSG(load(&c, 2, argv_file, env, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(c.sse_keepalive, 7); /* env beats file */
    config_deinit(&c);
    char *argv_cli[] = {"serve", cfg_arg, "--sse-keepalive", "0", NULL};
    CHECK_MSG(load(&c, 4, argv_cli, env, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(c.sse_keepalive, 0); /* CLI beats env; 0 turns it off */
    config_deinit(&c);
    unlink(path);
    const char *bad[] = {"--sse-keepalive=-1", "--sse-keepalive=86401", "--sse-keepalive=1.5"};
    for (size_t i = 0; i < 3; i++) {
        char *argv[] = {"serve", (char *)bad[i], NULL};
        err.msg[0] = 0;
        CHECK_MSG(load(&c, 2, argv, NULL, &err) == STRATA_EINVALID, "%s", bad[i]);
        CHECK_MSG(strstr(err.msg, "sse-keepalive") != NULL, "%s: %s", bad[i], err.msg);
        config_deinit(&c);
    }
}

static void test_precedence(void) {
    config c;
    strata_err err = {0};
    const char *path =
        write_tmp("// comment\n{ \"port\": 9000, /* c */ \"max-seqs\": 3,\n"
                  "  \"served_model_name\": \"file\", \"host\": \"0.0.0.0\",\n"
                  "  \"log-requests\": true, \"api-key\": \"k // not a comment\" }\n");
    char cfg_arg[128];
    snprintf(cfg_arg, sizeof cfg_arg, "--config=%s", path);
    char *env[] = {"STRATA_PORT=9100", "STRATA_MAX_SEQS=5", "OTHER=1", "STRATA_NOPE=1", NULL};
    char *argv[] = {"serve", cfg_arg, "--port", "9200", "--no-log-requests", "--model=/m", NULL};
    CHECK_MSG(load(&c, 6, argv, env, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(c.port, 9200);                  /* CLI beats env and file */
    CHECK_EQ_INT(c.max_seqs, 5);                 /* env beats file */
    CHECK(!strcmp(c.served_model_name, "file")); /* file beats default, snake_case key */
    CHECK(!strcmp(c.host, "0.0.0.0"));
    CHECK(c.api_key.n == 1 && !strcmp(c.api_key.v[0], "k // not a comment"));
    CHECK_EQ_INT(c.log_requests, 0);
    CHECK(!strcmp(c.model, "/m"));
    config_deinit(&c);
    /* STRATA_CONFIG names the file too */
    char env2[200];
    snprintf(env2, sizeof env2, "STRATA_CONFIG=%s", path);
    char *envp2[] = {env2, NULL};
    char *argv2[] = {"serve", NULL};
    CHECK_EQ_INT(load(&c, 1, argv2, envp2, &err), 0);
    CHECK_EQ_INT(c.port, 9000);
    config_deinit(&c);
    unlink(path);
}

static const char *write_file(const char *name, const char *text) {
    static char path[96];
    snprintf(path, sizeof path, "/tmp/strata-test-%s-%d", name, (int)getpid());
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static int has(const config_list *l, const char *s) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->v[i], s)) return 1;
    return 0;
}

/* Repeatable options (LIST): each source's list replaces the earlier source's, within
 * the command line every occurrence adds, commas separate items, the file takes a
 * string or an array; --api-key-file adds its keys after all of them. */
static void test_lists(void) {
    config c;
    strata_err err = {0};
    const char *path =
        write_tmp("{ \"api-key\": [\"f1\", \"f2\"], "
                  "\"allowed-origins\": \"http://a.example, https://b.example:8443\" }");
    char cfg_arg[128];
    snprintf(cfg_arg, sizeof cfg_arg, "--config=%s", path);
    char *argv_file[] = {"serve", cfg_arg, NULL};
    CHECK_MSG(load(&c, 2, argv_file, NULL, &err) == 0, "%s", err.msg);
    CHECK(c.api_key.n == 2 && has(&c.api_key, "f1") && has(&c.api_key, "f2"));
    CHECK(c.allowed_origins.n == 2 && has(&c.allowed_origins, "https://b.example:8443"));
    config_deinit(&c);
    char *env[] = {"STRATA_API_KEY=e1,e2,e3", "STRATA_METRICS_AUTH=1", NULL};
    CHECK_MSG(load(&c, 2, argv_file, env, &err) == 0, "%s", err.msg);
    CHECK(c.api_key.n == 3 && has(&c.api_key, "e3") && !has(&c.api_key, "f1")); /* env replaces */
    CHECK(c.allowed_origins.n == 2 && c.metrics_auth == 1);
    config_deinit(&c);
    char *argv_cli[] = {"serve", cfg_arg, "--api-key", "c1", "--api-key=c2", "--allowed-origins=*",
                        NULL};
    CHECK_MSG(load(&c, 6, argv_cli, env, &err) == 0, "%s", err.msg);
    CHECK(c.api_key.n == 2 && has(&c.api_key, "c1") && has(&c.api_key, "c2")); /* CLI replaces */
    CHECK(c.allowed_origins.n == 1 && !strcmp(c.allowed_origins.v[0], "*"));
    config_deinit(&c);
    unlink(path);

    /* the key file: comments, blank lines, blanks around keys; adds to --api-key */
    const char *keys = write_file("keys", "# team keys\n\n  k-one  \r\nk-two\n   # indented\n\t\n");
    char kf[160];
    snprintf(kf, sizeof kf, "--api-key-file=%s", keys);
    char *argv_kf[] = {"serve", kf, "--api-key", "cli", NULL};
    CHECK_MSG(load(&c, 4, argv_kf, NULL, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(c.api_key.n, 3);
    CHECK(has(&c.api_key, "k-one") && has(&c.api_key, "k-two") && has(&c.api_key, "cli"));
    config_deinit(&c);
    /* a file with no key is an error naming it */
    keys = write_file("keys", "# nothing here\n\n");
    CHECK_EQ_INT(load(&c, 2, argv_kf, NULL, &err), STRATA_EINVALID);
    CHECK_MSG(strstr(err.msg, keys) && strstr(err.msg, "no key"), "%s", err.msg);
    config_deinit(&c);
    unlink(keys);
    /* the file's list must hold strings */
    path = write_tmp("{ \"api-key\": [\"a\", 1] }");
    snprintf(cfg_arg, sizeof cfg_arg, "--config=%s", path);
    CHECK_EQ_INT(load(&c, 2, argv_file, NULL, &err), STRATA_EINVALID);
    CHECK_MSG(strstr(err.msg, "api-key") != NULL, "%s", err.msg);
    config_deinit(&c);
    unlink(path);
}

static void test_errors(void) {
    config c;
    strata_err err = {0};
    struct {
        const char *arg, *want;
    } bad[] = {
        {"--bogus", "unknown option"},
        {"--port=abc", "integer"},
        {"--port=70000", "port"},
        {"--max-seqs=0", "max-seqs"},
        {"--log-requests=maybe", "true or false"},
        {"--load-format=gguf", "load-format"},
        {"--api-key=", "api-key"},
        {"--api-key=a,,b", "empty item"},
        {"--allowed-origins=example.com", "allowed-origins"},
        {"--allowed-origins=http://a.example/", "allowed-origins"},
        {"--allowed-origins=http://*.example", "allowed-origins"},
        {"--api-key-file=/nonexistent/keys", "/nonexistent/keys"},
        {"stray", "unexpected argument"},
        {"--device=tpu", "device"},
        {"--quantization=q4_0", "--quantization is 'q4_0'; allowed none, q8_0, q4_k"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[] = {"serve", (char *)bad[i].arg, NULL};
        err.msg[0] = 0;
        CHECK_MSG(load(&c, 2, argv, NULL, &err) == STRATA_EINVALID, "%s", bad[i].arg);
        CHECK_MSG(strstr(err.msg, bad[i].want) != NULL, "%s: %s", bad[i].arg, err.msg);
        config_deinit(&c);
    }
    char *argv[] = {"serve", "--port", NULL};
    CHECK_EQ_INT(load(&c, 2, argv, NULL, &err), STRATA_EINVALID);
    config_deinit(&c);
    char *env[] = {"STRATA_THREADS=lots", NULL};
    char *argv1[] = {"serve", NULL};
    CHECK_EQ_INT(load(&c, 1, argv1, env, &err), STRATA_EINVALID);
    CHECK(strstr(err.msg, "STRATA_THREADS") != NULL);
    config_deinit(&c);
    const char *files[] = {"{\"port\": \"80\"}", "{\"nope\": 1}", "[1]", "{\"port\": 1,}",
                           "{\"config\": \"x\"}"};
    for (size_t i = 0; i < 5; i++) {
        char arg[128];
        snprintf(arg, sizeof arg, "--config=%s", write_tmp(files[i]));
        char *argv2[] = {"serve", arg, NULL};
        CHECK_MSG(load(&c, 2, argv2, NULL, &err) != 0, "%s", files[i]);
        config_deinit(&c);
    }
    char *argv3[] = {"serve", "--config=/nonexistent/x.json", NULL};
    CHECK_EQ_INT(load(&c, 2, argv3, NULL, &err), STRATA_EIO);
    config_deinit(&c);
}

/* config/schema.json lists exactly the options; the example loads. */
static void test_schema_and_example(void) {
    json_error_t je;
    json_t *schema = json_load_file("config/schema.json", 0, &je);
    CHECK_MSG(schema != NULL, "config/schema.json: %s", je.text);
    if (!schema) return;
    json_t *props = json_object_get(schema, "properties");
    int n = 0;
    for (int i = 0; i < config_count(); i++) {
        if (!strcmp(config_flag_name(i), "config")) continue;
        n++;
        CHECK_MSG(json_object_get(props, config_flag_name(i)) != NULL, "schema lacks %s",
                  config_flag_name(i));
    }
    CHECK_EQ_INT(json_object_size(props), n + 1); /* + "$schema" */
    json_decref(schema);
    config c;
    strata_err err = {0};
    char *argv[] = {"serve", "--config", "config/example.jsonc", NULL};
    CHECK_MSG(load(&c, 3, argv, NULL, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(c.prefill_chunk, 512);
    CHECK_EQ_INT(c.sse_keepalive, 15);
    config_deinit(&c);
    char help[8192];
    config_format_help(help, sizeof help);
    for (int i = 0; i < config_count(); i++) CHECK(strstr(help, config_flag_name(i)) != NULL);
    CHECK(strstr(help, "STRATA_MAX_SEQS") != NULL);
}

int main(void) {
    RUN(test_defaults);
    RUN(test_precedence);
    RUN(test_sse_keepalive);
    RUN(test_lists);
    RUN(test_errors);
    RUN(test_schema_and_example);
    TEST_DONE();
}
