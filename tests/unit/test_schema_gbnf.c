/* test_schema_gbnf.c - server/schema_gbnf.c: JSON Schemas compiled to GBNF, parsed by
 * engine/constrain/gbnf.c and run by the Earley oracle (tests/unit/grammar_oracle.h).
 *
 * For each schema of tests/data/schema_gbnf_cases.json, instances that must be accepted
 * (valid per Python's jsonschema, written in the grammar's form) and ones that must be
 * rejected: invalid instances, and valid ones outside the documented form (another property
 * order, more whitespace, "-0", 19 digits, extra keys where additionalProperties is absent).
 * Every accepted instance must also be JSON that jansson reads. Then the errors of
 * tests/data/schema_gbnf_errors.json (codes and messages naming keyword and path), the limits, rules from two schemas in one grammar,
 * "pattern" through the regex compiler, and every allocation failing in turn (STRATA_ENOMEM,
 * nothing leaked). */
#define ALLOC_HOOK_WITH_ASAN
#include "tests/alloc_hook.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/constrain/grammar.h"
#include "server/schema_gbnf.h"
#include "tests/test.h"
#include "tests/unit/grammar_oracle.h"

/* The schemas and their instances, one object a case: {"name", "schema" (the schema itself),
 * "ok" and "bad" (the instances, as text)}. Read at start; the tests run from the repo root. */
#define CASES_FILE "tests/data/schema_gbnf_cases.json"
#define ERRORS_FILE "tests/data/schema_gbnf_errors.json"

static json_t *cases;       /* the file's array, or NULL */
static char cases_why[256]; /* why it is NULL: the file cannot be read, or is not of that form */

/* 1 when a is an array of strings. */
static int strings(const json_t *a) {
    int good = json_is_array(a);
    for (size_t i = 0; good && i < json_array_size(a); i++)
        good = json_is_string(json_array_get(a, i));
    return good;
}

/* 1 when all is a non-empty array of cases of that form; else 0, cases_why saying which not. */
static int cases_form(const json_t *all) {
    if (!json_array_size(all)) {
        snprintf(cases_why, sizeof cases_why, "not a non-empty array of cases");
        return 0;
    }
    for (size_t k = 0; k < json_array_size(all); k++) {
        const json_t *c = json_array_get(all, k);
        const char *name = json_string_value(json_object_get(c, "name"));
        if (!name || !json_object_get(c, "schema") || !strings(json_object_get(c, "ok")) ||
            !strings(json_object_get(c, "bad"))) {
            snprintf(cases_why, sizeof cases_why,
                     "case %zu (%s) needs a string \"name\", a \"schema\" and arrays of strings "
                     "\"ok\" and \"bad\"",
                     k, name ? name : "no name");
            return 0;
        }
    }
    return 1;
}

static void load_cases(void) {
    json_error_t je;
    cases = json_load_file(CASES_FILE, 0, &je);
    if (!cases) {
        snprintf(cases_why, sizeof cases_why, "%s", je.text);
        if (je.line > 0) /* else the file cannot be opened: no line */
            snprintf(cases_why + strlen(cases_why), sizeof cases_why - strlen(cases_why),
                     " (line %d)", je.line);
    } else if (!cases_form(cases)) {
        json_decref(cases);
        cases = NULL;
    }
}

/* The grammar for schema s (NULL, with a failed check, when any step fails). */
static grammar *compile(const char *name, const json_t *schema) {
    CHECK_MSG(schema != NULL, "%s: no schema", name);
    strbuf out = {0};
    strata_err err = {0};
    grammar *g = NULL;
    int rc = schema ? schema_gbnf_root(schema, &out, &err) : -1;
    CHECK_MSG(rc == 0, "%s: schema_gbnf_root %d: %s", name, rc, err.msg);
    if (!rc) {
        rc = grammar_parse(&g, out.p, out.len, &err);
        CHECK_MSG(rc == 0, "%s: grammar_parse %d: %s\n%s", name, rc, err.msg, out.p);
    }
    strbuf_free(&out);
    return rc ? NULL : g;
}

static int accepts(const grammar *g, const char *s) {
    return grammar_oracle_accepts(g, (const uint8_t *)s, strlen(s));
}

static void test_instances(void) {
    CHECK_MSG(cases != NULL, "%s: %s", CASES_FILE, cases_why);
    for (size_t k = 0; k < json_array_size(cases); k++) {
        const json_t *c = json_array_get(cases, k);
        const char *name = json_string_value(json_object_get(c, "name"));
        const json_t *ok = json_object_get(c, "ok"), *bad = json_object_get(c, "bad");
        grammar *g = compile(name, json_object_get(c, "schema"));
        if (!g) continue;
        for (size_t i = 0; i < json_array_size(ok); i++) {
            const char *s = json_string_value(json_array_get(ok, i));
            CHECK_MSG(accepts(g, s), "%s: rejects %s", name, s);
            json_t *v = json_loads(s, JSON_DECODE_ANY, NULL);
            CHECK_MSG(v != NULL, "%s: jansson cannot read %s", name, s);
            json_decref(v);
        }
        for (size_t i = 0; i < json_array_size(bad); i++) {
            const char *s = json_string_value(json_array_get(bad, i));
            CHECK_MSG(!accepts(g, s), "%s: accepts %s", name, s);
        }
        grammar_free(g);
    }
}

/* Checks that schema_gbnf_root refuses schema with the error named error (strata_err_name)
 * and a message holding says; label names the case in a failure. */
static void check_refused(const char *label, const json_t *schema, const char *error,
                          const char *says) {
    strbuf out = {0};
    strata_err err = {0};
    int rc = schema_gbnf_root(schema, &out, &err);
    CHECK_MSG(rc != 0 && !strcmp(strata_err_name(rc), error) && strstr(err.msg, says), "%s: %d %s",
              label, rc, err.msg);
    strbuf_free(&out);
}

/* The same for a schema written as text (it must be JSON). */
static void check_refused_text(const char *text, int code, const char *says) {
    json_t *schema = json_loads(text, JSON_DECODE_ANY, NULL);
    CHECK_MSG(schema != NULL, "schema JSON %s", text);
    if (schema) check_refused(text, schema, strata_err_name(code), says);
    json_decref(schema);
}

/* Every refusal of ERRORS_FILE: {"schema", "error" (the code's strata_err_name), "says" (a
 * piece of the message: the keyword and its JSON pointer, or the limit)}. */
static void test_errors(void) {
    json_error_t je;
    json_t *all = json_load_file(ERRORS_FILE, 0, &je);
    CHECK_MSG(json_array_size(all) > 0, "%s: %s (line %d)", ERRORS_FILE,
              all ? "not a non-empty array" : je.text, je.line);
    for (size_t k = 0; k < json_array_size(all); k++) {
        const json_t *c = json_array_get(all, k);
        const json_t *schema = json_object_get(c, "schema");
        const char *error = json_string_value(json_object_get(c, "error"));
        const char *says = json_string_value(json_object_get(c, "says"));
        CHECK_MSG(schema && error && says, "%s: case %zu needs \"schema\", \"error\", \"says\"",
                  ERRORS_FILE, k);
        if (!schema || !error || !says) continue;
        char *label = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
        check_refused(label ? label : "?", schema, error, says);
        free(label);
    }
    json_decref(all);
    /* 65 nested arrays */
    char deep[1024] = "";
    for (int i = 0; i < 65; i++) strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 65; i++) strcat(deep, "}");
    check_refused_text(deep, STRATA_EUNSUPPORTED, "deeper than 64");
    /* an enum of 40000 long strings: past 1 MiB of grammar */
    strbuf big = {0};
    strbuf_adds(&big, "{\"enum\":[");
    for (int i = 0; i < 40000; i++)
        strbuf_addf(&big, "%s\"value number %d of a very long enumeration\"", i ? "," : "", i);
    strbuf_adds(&big, "]}");
    check_refused_text(big.p, STRATA_EUNSUPPORTED, "past 1048576 bytes");
    strbuf_free(&big);
    strbuf out = {0};
    strata_err err;
    CHECK_EQ_INT(schema_gbnf(json_true(), "bad name", &out, &err), STRATA_EINVALID);
    strbuf_free(&out);
}

/* Two schemas' rules in one grammar (tool calls: one rule per tool's arguments). */
static void test_shared_grammar(void) {
    json_t *a = json_loads("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},"
                           "\"required\":[\"x\"]}",
                           0, NULL);
    json_t *b = json_loads("{\"type\":\"array\",\"items\":{\"type\":\"string\"}}", 0, NULL);
    strbuf out = {0};
    strata_err err;
    grammar *g = NULL;
    strbuf_adds(&out, "root ::= \"A\" tool-a | \"B\" tool-b\n");
    CHECK(!schema_gbnf(a, "tool-a", &out, &err));
    CHECK(!schema_gbnf(b, "tool-b", &out, &err));
    CHECK_MSG(!grammar_parse(&g, out.p, out.len, &err), "%s\n%s", err.msg, out.p);
    if (g) {
        CHECK(accepts(g, "A{\"x\":1}"));
        CHECK(accepts(g, "B[\"s\"]"));
        CHECK(!accepts(g, "A[\"s\"]"));
        grammar_free(g);
    }
    strbuf_free(&out);
    json_decref(a);
    json_decref(b);
}

/* "pattern": the regex's match is the raw string content; what JSON must escape is written
 * escaped (a literal quote) or cannot be matched (classes, `.`), so "\u00e9" does not match
 * `.` while a raw "\xc3\xa9" does. */
static void test_pattern(void) {
    static const struct {
        const char *re, *ok[6], *bad[6];
    } P[] = {
        {"^[A-Z]{2}-\\d{3}$", {"\"AB-123\"", NULL}, {"\"AB-12\"", "\"ab-123\"", "AB-123", NULL}},
        {"^say \"hi\"$", {"\"say \\\"hi\\\"\"", NULL}, {"\"say \"hi\"\"", NULL}},
        {"^.+@.+$", {"\"a@b\"", "\"\xc3\xa9@x\"", NULL}, {"\"a\\\"@b\"", "\"@b\"", NULL}},
        {"^(cat|dog)s?$", {"\"cat\"", "\"dogs\"", NULL}, {"\"cow\"", "\"cats?\"", NULL}},
        {"[^0-9]*", {"\"abc\"", "\"\"", NULL}, {"\"a1\"", "\"a\\nb\"", NULL}},
    };
    for (size_t k = 0; k < sizeof P / sizeof *P; k++) {
        json_t *s = json_pack("{s:s,s:s}", "type", "string", "pattern", P[k].re);
        grammar *g = compile(P[k].re, s);
        for (int i = 0; g && P[k].ok[i]; i++)
            CHECK_MSG(accepts(g, P[k].ok[i]), "%s: rejects %s", P[k].re, P[k].ok[i]);
        for (int i = 0; g && P[k].bad[i]; i++)
            CHECK_MSG(!accepts(g, P[k].bad[i]), "%s: accepts %s", P[k].re, P[k].bad[i]);
        grammar_free(g);
        json_decref(s);
    }
    check_refused_text("{\"type\":\"string\",\"pattern\":\"(?=a)b\"}", STRATA_EUNSUPPORTED,
                       "\"pattern\" (");
    check_refused_text("{\"type\":\"string\",\"pattern\":\"[\\\\n\\\"]\"}", STRATA_EUNSUPPORTED,
                       "only characters JSON must escape");
}

/* Every allocation failing in turn: STRATA_ENOMEM with a message and nothing leaked, until
 * the whole compile succeeds with the same text. */
static void test_alloc_failures(void) {
    if (!alloc_hook_on()) return;
    const char *name = "pydantic nested with refs"; /* $ref, anyOf, nested objects and arrays */
    const json_t *schema = NULL;
    for (size_t k = 0; k < json_array_size(cases); k++) {
        const json_t *c = json_array_get(cases, k);
        if (!strcmp(json_string_value(json_object_get(c, "name")), name))
            schema = json_object_get(c, "schema");
    }
    strbuf want = {0};
    strata_err err = {0};
    CHECK_MSG(schema && !schema_gbnf_root(schema, &want, &err), "%s: %s", name,
              schema ? err.msg : "no such case in " CASES_FILE);
    if (!schema) return;
    int fails = 0;
    for (long n = 1; n < 100000; n++) {
        strbuf out = {0};
        strata_err e = {0};
        alloc_hook_start(n);
        int rc = schema_gbnf_root(schema, &out, &e);
        int failed = alloc_hook_failed();
        strbuf_free(&out);
        long live = alloc_hook_live();
        alloc_hook_stop();
        CHECK_MSG(live == 0, "allocation %ld failed: %ld blocks leaked", n, live);
        if (!failed) {
            CHECK_EQ_INT(rc, 0);
            break;
        }
        fails++;
        CHECK_MSG(rc == STRATA_ENOMEM && e.msg[0], "allocation %ld: %d %s", n, rc, e.msg);
    }
    CHECK(fails > 10);
    strbuf_free(&want);
}

int main(void) {
    load_cases();
    RUN(test_instances);
    RUN(test_errors);
    RUN(test_shared_grammar);
    RUN(test_pattern);
    RUN(test_alloc_failures);
    json_decref(cases);
    TEST_DONE();
}
