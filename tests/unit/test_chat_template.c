/* test_chat_template.c - engine/template/chat_template.c and the Jinja interpreter against
 * Python Jinja2 3.1 / transformers.
 *
 * The conformance part replays tests/data/chat_templates/cases.jsonl (written by
 * tools/jinja_conformance/gen.py from transformers' apply_chat_template on the real
 * Qwen3 and Gemma 3 templates, three model-style templates and one template per
 * construct family) and requires the same bytes, or an error where Jinja2 raised one
 * (on the line Jinja2 blamed, when it named one). The rest covers loading from a
 * checkpoint directory, the runaway guards, every allocation failure, malformed
 * input and concurrent renders. */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/template/chat_template.h"
#include "tests/test.h"
#include "tests/test_file.h"

#define DATA "tests/data/chat_templates"

/* Prints where two renders part, with a little context on each side. */
static void show_diff(const char *id, const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "case %s: first difference at byte %zu\n  want: %.80s\n  got:  %.80s\n", id, i,
            want + from, got + from);
}

/* ---- conformance fixtures ---------------------------------------------------------- */

typedef struct {
    char key[512];
    chat_template *ct;
    int rc;
    strata_err err;
} cached;

static cached cache[64];
static int ncache;
static cached inline_src; /* an inline source is parsed for its case only */

/* Loads (once) the template a case names: a model directory, a template file or an
 * inline source. A parse error is remembered as the outcome. */
static cached *template_for(json_t *c) {
    const char *model = json_string_value(json_object_get(c, "model"));
    const char *file = json_string_value(json_object_get(c, "template"));
    const char *src = json_string_value(json_object_get(c, "source"));
    char key[512];
    snprintf(key, sizeof key, "%s:%s",
             model  ? "m"
             : file ? "t"
                    : "s",
             model  ? model
             : file ? file
                    : src);
    cached *e;
    if (src) {
        chat_template_free(inline_src.ct);
        memset(&inline_src, 0, sizeof inline_src);
        e = &inline_src;
    } else {
        for (int i = 0; i < ncache; i++)
            if (!strcmp(cache[i].key, key)) return &cache[i];
        if (ncache == (int)(sizeof cache / sizeof cache[0])) return NULL;
        e = &cache[ncache++];
    }
    snprintf(e->key, sizeof e->key, "%s", key);
    char path[1024];
    if (model) {
        snprintf(path, sizeof path, DATA "/%s", model);
        e->rc = chat_template_load(&e->ct, path, &e->err);
    } else if (file) {
        size_t len;
        snprintf(path, sizeof path, DATA "/%s", file);
        char *text = test_file_read(path, &len);
        e->rc = text ? chat_template_parse_ex(&e->ct, text, len, NULL, NULL, NULL, &e->err) : -1;
        free(text);
    } else {
        e->rc = chat_template_parse_ex(&e->ct, src, strlen(src), NULL, NULL, NULL, &e->err);
    }
    return e;
}

static void test_conformance(void) {
    FILE *f = fopen(DATA "/cases.jsonl", "r");
    CHECK(f != NULL);
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    int ncases = 0, nerr = 0, failed = 0, line_checked = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t jerr;
        json_t *c = json_loads(line, 0, &jerr);
        CHECK_MSG(c != NULL, "bad fixture line: %s", jerr.text);
        if (!c) continue;
        const char *id = json_string_value(json_object_get(c, "id"));
        const char *want = json_string_value(json_object_get(c, "expected"));
        json_t *want_line = json_object_get(c, "error_line");
        cached *t = template_for(c);
        char *got = NULL;
        strata_err err = {0};
        int rc = t ? t->rc : -1;
        if (t && rc == 0)
            rc = chat_template_render(t->ct, json_object_get(c, "messages"),
                                      json_object_get(c, "tools"),
                                      json_is_true(json_object_get(c, "add_generation_prompt")),
                                      json_object_get(c, "kwargs"), &got, &err);
        else if (t) err = t->err;
        ncases++;
        if (want) {
            int ok = rc == 0 && !strcmp(want, got);
            if (!ok && failed < 10) {
                if (rc) fprintf(stderr, "case %s: unexpected error: %s\n", id, err.msg);
                else show_diff(id, want, got);
            }
            failed += !ok;
            CHECK(ok);
        } else {
            nerr++;
            int ok = rc < 0;
            if (ok && json_is_integer(want_line)) { /* same line as Jinja2 */
                char needle[32];
                snprintf(needle, sizeof needle,
                         "line %lld:", (long long)json_integer_value(want_line));
                ok = strstr(err.msg, needle) != NULL;
                line_checked++;
            }
            if (!ok && failed < 10)
                fprintf(stderr, "case %s: want error %s (line %lld), got rc %d: %s\n", id,
                        json_string_value(json_object_get(c, "error")),
                        (long long)json_integer_value(want_line), rc, rc ? err.msg : got);
            failed += !ok;
            CHECK(ok);
        }
        free(got);
        json_decref(c);
    }
    free(line);
    fclose(f);
    fprintf(stderr, "  conformance: %d cases (%d expected errors, %d with their line), %d failed\n",
            ncases, nerr, line_checked, failed);
    CHECK(ncases > 1000);
    for (int i = 0; i < ncache; i++) chat_template_free(cache[i].ct);
    ncache = 0;
    chat_template_free(inline_src.ct);
    memset(&inline_src, 0, sizeof inline_src);
}

/* ---- loading ------------------------------------------------------------------------- */

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static int render_simple(const chat_template *ct, const char *messages, json_t *tools, char **out,
                         strata_err *err) {
    json_t *m = json_loads(messages, 0, NULL);
    int rc = chat_template_render(ct, m, tools, 1, NULL, out, err);
    json_decref(m);
    return rc;
}

static void test_load_dirs(void) {
    char dir[] = "/tmp/strata_ct_XXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL);
    chat_template *ct = NULL;
    strata_err err = {0};
    char *out = NULL;

    /* empty directory: not found */
    CHECK_EQ_INT(chat_template_load(&ct, dir, &err), STRATA_ENOTFOUND);

    /* a list of named templates with AddedToken dicts; tools pick "tool_use" */
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    write_file(path,
               "{\"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}, \"eos_token\": \"</s>\","
               " \"chat_template\": [{\"name\": \"default\", \"template\": \"{{ bos_token }}D{{ "
               "messages|length }}{{ eos_token }}\"},"
               " {\"name\": \"tool_use\", \"template\": \"T{{ tools|length }}\"}]}");
    CHECK_EQ_INT(chat_template_load(&ct, dir, &err), 0);
    CHECK(ct && !strcmp(chat_template_bos(ct), "<s>") && !strcmp(chat_template_eos(ct), "</s>"));
    CHECK_EQ_INT(render_simple(ct, "[{\"role\":\"user\",\"content\":\"x\"}]", NULL, &out, &err), 0);
    CHECK(out && !strcmp(out, "<s>D1</s>"));
    free(out);
    json_t *tools = json_loads("[{\"type\":\"function\"}]", 0, NULL);
    CHECK_EQ_INT(render_simple(ct, "[{\"role\":\"user\",\"content\":\"x\"}]", tools, &out, &err),
                 0);
    CHECK(out && !strcmp(out, "T1"));
    free(out);
    json_decref(tools);
    chat_template_free(ct);

    /* chat_template.jinja wins over tokenizer_config.json; its syntax errors name the line */
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    write_file(path, "J{{ bos_token }}\n");
    CHECK_EQ_INT(chat_template_load(&ct, dir, &err), 0);
    CHECK_EQ_INT(render_simple(ct, "[{\"role\":\"user\",\"content\":\"x\"}]", NULL, &out, &err), 0);
    CHECK(out && !strcmp(out, "J<s>"));
    free(out);
    chat_template_free(ct);
    write_file(path, "ok\n\n{% if %}");
    CHECK_EQ_INT(chat_template_load(&ct, dir, &err), STRATA_EFORMAT);
    CHECK(strstr(err.msg, "line 3") != NULL);
    unlink(path);

    /* malformed tokenizer_config.json */
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    write_file(path, "{\"chat_template\": ");
    CHECK_EQ_INT(chat_template_load(&ct, dir, &err), STRATA_EFORMAT);
    unlink(path);
    rmdir(dir);
}

/* ---- guards ------------------------------------------------------------------------------ */

static int render_src(const char *src, const chat_template_limits *lim, char **out,
                      strata_err *err) {
    chat_template *ct = NULL;
    int rc = chat_template_parse_ex(&ct, src, strlen(src), NULL, NULL, lim, err);
    if (rc == 0) {
        rc = render_simple(ct, "[{\"role\":\"user\",\"content\":\"hi\"}]", NULL, out, err);
        chat_template_free(ct);
    }
    return rc;
}

static void test_limits(void) {
    chat_template_limits lim;
    chat_template_limits_default(&lim);
    lim.max_output = 1 << 20;
    lim.max_memory = 32 << 20;
    char *out = NULL;
    strata_err err = {0};
    CHECK_EQ_INT(
        render_src("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", &lim, &out, &err),
        STRATA_ERANGE);
    CHECK(strstr(err.msg, "recursion") != NULL);
    CHECK_EQ_INT(
        render_src("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", &lim, &out, &err),
        STRATA_ERANGE);
    CHECK(strstr(err.msg, "output limit") != NULL);
    CHECK_EQ_INT(
        render_src(
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            &lim, &out, &err),
        STRATA_ERANGE);
    CHECK_MSG(strstr(err.msg, "iterations") != NULL, "%s", err.msg);
    CHECK_EQ_INT(render_src("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = "
                            "ns.s ~ ns.s %}{% endfor %}",
                            &lim, &out, &err),
                 STRATA_ERANGE);
    CHECK(strstr(err.msg, "memory") != NULL);
    CHECK_EQ_INT(render_src("{{ range(100001)|length }}", &lim, &out, &err), STRATA_ERANGE);
    /* deep nesting is refused while parsing, not by running out of stack */
    char deep[20000];
    size_t n = (size_t)sprintf(deep, "{{ ");
    for (int i = 0; i < 5000; i++) deep[n++] = '(';
    memcpy(deep + n, "1", 2);
    CHECK_EQ_INT(render_src(deep, &lim, &out, &err), STRATA_EFORMAT);
    n = 0;
    for (int i = 0; i < 2000 && n + 20 < sizeof deep; i++)
        n += (size_t)sprintf(deep + n, "{%% if 1 %%}");
    deep[n] = 0;
    CHECK_EQ_INT(render_src(deep, &lim, &out, &err), STRATA_EFORMAT);
    /* callers may pass no error buffer */
    chat_template *ct = NULL;
    CHECK_EQ_INT(chat_template_parse(&ct, "{{ x.y.z }}", NULL, NULL, NULL), 0);
    json_t *m = json_loads("[{\"role\":\"user\",\"content\":\"hi\"}]", 0, NULL);
    CHECK_EQ_INT(chat_template_render(ct, m, NULL, 0, NULL, &out, NULL), STRATA_EINVALID);
    CHECK_EQ_INT(chat_template_parse(&ct, "{% if %}", NULL, NULL, NULL), STRATA_EFORMAT);
    json_decref(m);
    chat_template_free(ct);
    /* strftime_now reads the local clock */
    CHECK_EQ_INT(render_src("{{ strftime_now('%Y') }}", &lim, &out, &err), 0);
    time_t now = time(NULL);
    struct tm tm;
    char year[16];
    localtime_r(&now, &tm);
    strftime(year, sizeof year, "%Y", &tm);
    CHECK(out && !strcmp(out, year));
    free(out);
}

/* Every allocation of a parse and a render fails in turn: the call must fail cleanly
 * (ASan checks for leaks) until the budget of allocations suffices. */
static void test_alloc_failures(void) {
    size_t len;
    char *src = test_file_read(DATA "/templates/gemma4_style.jinja", &len);
    CHECK(src != NULL);
    if (!src) return;
    json_t *m = json_loads(
        "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"hi\"},"
        "{\"role\":\"assistant\",\"content\":\"x\",\"tool_calls\":[{\"function\":{\"name\":\"f\","
        "\"arguments\":{\"a\":[1,{\"b\":true}],\"c\":\"d\"}}}]}]",
        0, NULL);
    json_t *kw = json_loads("{\"bos_token\": \"<bos>\", \"enable_thinking\": true}", 0, NULL);
    char *want = NULL;
    strata_err err = {0};
    chat_template *ct = NULL;
    CHECK_EQ_INT(chat_template_parse_ex(&ct, src, len, NULL, NULL, NULL, &err), 0);
    CHECK_EQ_INT(chat_template_render(ct, m, NULL, 1, kw, &want, &err), 0);
    chat_template_free(ct);
    int parse_ok_at = 0, render_ok_at = 0;
    for (long k = 1; k < 100000 && !parse_ok_at; k++) {
        chat_template_limits lim;
        chat_template_limits_default(&lim);
        lim.fail_alloc_at = k;
        ct = NULL;
        int rc = chat_template_parse_ex(&ct, src, len, NULL, NULL, &lim, &err);
        if (rc < 0) {
            CHECK_MSG(rc == STRATA_ENOMEM, "allocation %ld: rc %d: %s", k, rc, err.msg);
            CHECK(ct == NULL);
        } else {
            parse_ok_at = (int)k;
        }
        chat_template_free(ct);
    }
    CHECK_EQ_INT(chat_template_parse_ex(&ct, src, len, NULL, NULL, NULL, &err), 0);
    for (long k = 1; k < 100000 && !render_ok_at && ct; k++) {
        chat_template_limits lim;
        chat_template_limits_default(&lim);
        lim.fail_alloc_at = k;
        chat_template_set_limits(ct, &lim);
        char *got = NULL;
        int rc = chat_template_render(ct, m, NULL, 1, kw, &got, &err);
        if (rc < 0) {
            CHECK_MSG(rc == STRATA_ENOMEM, "allocation %ld: rc %d: %s", k, rc, err.msg);
            CHECK(got == NULL);
        } else {
            render_ok_at = (int)k;
            CHECK(want && got && !strcmp(want, got));
        }
        free(got);
    }
    chat_template_free(ct);
    CHECK(parse_ok_at > 100 && render_ok_at > 100);
    fprintf(
        stderr,
        "  allocation failures: parse needs %d allocations, render %d; every failure is clean\n",
        parse_ok_at - 1, render_ok_at - 1);
    free(want);
    free(src);
    json_decref(m);
    json_decref(kw);
}

/* Broken templates must fail (or render) without crashing; the fuzzer does more. */
static void test_malformed(void) {
    static const char *const bad[] = {
        "{{",
        "{%",
        "{#",
        "{{ x",
        "{% if",
        "{% for %}",
        "{% for x in %}",
        "{% set %}",
        "{{ x.}}",
        "{{ x[ }}",
        "{{ 'a' ~ }}",
        "{% macro %}",
        "{% macro m( %}",
        "{% call %}",
        "{% filter %}x",
        "{{ x|",
        "{{ x is }}",
        "{% endraw %}",
        "}}",
        "%}",
        "{{ {'a': } }}",
        "{{ [1,, 2] }}",
        "{% if x %}{% else %}{% else %}{% endif %}",
        "{% for x in y %}{% endfor %}{% endfor %}",
        "{{ 0x }}",
        "{{ 1e }}",
        "{{ \"\\u12\" }}",
        "{{ '\\ud800' }}",
        "\xff\xfe{{ x }}",
        "{{ x }}\xc3",
        "{% set x.y.z = 1 %}",
        "{{ (((((( }}",
        "{% with %}{% endwith %}",
        "{{ a if }}",
        "{{ not }}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out = NULL;
        strata_err err = {0};
        int rc = render_src(bad[i], NULL, &out, &err);
        CHECK_MSG(rc < 0 || out != NULL, "template %zu", i);
        if (rc < 0) CHECK_MSG(err.msg[0] != 0, "template %zu has no message", i);
        free(out);
    }
    /* random bytes from a fixed generator, biased towards template syntax */
    static const char alphabet[] = "{}%#-+|.,:()[]'\"~*/ \n\tabcxyz01ifforendsetmacro=<>!";
    unsigned seed = 12345;
    for (int t = 0; t < 300; t++) {
        char buf[200];
        size_t n = 1 + (size_t)(t % 180);
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            buf[i] = alphabet[(seed >> 16) % (sizeof alphabet - 1)];
        }
        buf[n] = 0;
        char *out = NULL;
        strata_err err = {0};
        render_src(buf, NULL, &out, &err);
        free(out);
    }
}

/* ---- concurrency ----------------------------------------------------------------------- */

typedef struct {
    const chat_template *ct;
    json_t *messages;
    const char *want;
    int mismatches;
} render_job;

static void *render_thread(void *arg) {
    render_job *j = arg;
    for (int i = 0; i < 50; i++) {
        char *out = NULL;
        strata_err err = {0};
        if (chat_template_render(j->ct, j->messages, NULL, 1, NULL, &out, &err) < 0 ||
            strcmp(out, j->want))
            j->mismatches++;
        free(out);
    }
    return NULL;
}

static void test_threads(void) {
    chat_template *ct = NULL;
    strata_err err = {0};
    CHECK_EQ_INT(chat_template_load(&ct, DATA "/qwen3", &err), 0);
    if (!ct) return;
    json_t *m = json_loads(
        "[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"hello\"}]", 0,
        NULL);
    char *want = NULL;
    CHECK_EQ_INT(chat_template_render(ct, m, NULL, 1, NULL, &want, &err), 0);
    render_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (render_job){ct, m, want, 0};
        pthread_create(&th[i], NULL, render_thread, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(jobs[i].mismatches, 0);
    }
    free(want);
    json_decref(m);
    chat_template_free(ct);
}

int main(void) {
    RUN(test_conformance);
    RUN(test_load_dirs);
    RUN(test_limits);
    RUN(test_alloc_failures);
    RUN(test_malformed);
    RUN(test_threads);
    TEST_DONE();
}
