/* test_schema_gbnf.c - server/schema_gbnf.c: JSON Schemas compiled to GBNF, parsed by
 * engine/constrain/gbnf.c and run by the Earley oracle (tests/unit/grammar_oracle.h).
 *
 * For each schema, instances that must be accepted (valid per Python's jsonschema, written
 * in the grammar's form) and ones that must be rejected: invalid instances, and valid ones
 * outside the documented form (another property order, more whitespace, "-0", 19 digits,
 * extra keys where additionalProperties is absent). Every accepted instance must also be
 * JSON that jansson reads. Then the errors (codes and messages naming keyword and path),
 * the limits, rules from two schemas in one grammar, "pattern" through the regex compiler,
 * and every allocation failing in turn (STRATA_ENOMEM, nothing leaked). */
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

typedef struct sg_case {
    const char *name, *schema;
    const char *ok[16], *bad[16];
} sg_case;

static const sg_case CASES[] = {
    {"flat object",
     "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
     "\"integer\"},\"ok\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\",\"ok\"],"
     "\"additionalProperties\":false}",
     {"{\"name\":\"Bob\",\"age\":3,\"ok\":true}",
      "{ \"name\": \"B\\u00e9b\\n\", \"age\": -12, \"ok\": false }",
      "{\n  \"name\": \"x\",\n  \"age\": 0,\n  \"ok\": true\n}", NULL},
     {"{\"name\":\"Bob\",\"age\":3}", "{\"age\":3,\"name\":\"Bob\",\"ok\":true}",
      "{\"name\":\"Bob\",\"age\":3.5,\"ok\":true}",
      "{\"name\":\"Bob\",\"age\":3,\"ok\":true,\"x\":1}",
      "{\"name\":\"Bob\",\"age\":3,\"ok\":\"true\"}", "{\"name\":\"Bob\",\"age\":-0,\"ok\":true}",
      "{\"name\":\"Bob\",\"age\":01,\"ok\":true}", "{\"name\":\"a\\u0000\",\"age\":1,\"ok\":true}",
      "{\"name\":\"\\ud800\",\"age\":1,\"ok\":true}", NULL}},
    {"nested object with arrays",
     "{\"type\":\"object\",\"properties\":{\"user\":{\"type\":\"object\",\"properties\":{\"id\":{"
     "\"type\":\"integer\"},\"emails\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
     "\"required\":[\"id\",\"emails\"]},\"scores\":{\"type\":\"array\",\"items\":{\"type\":"
     "\"number\"}}},\"required\":[\"user\"]}",
     {"{\"user\":{\"id\":1,\"emails\":[]}}",
      "{\"user\":{\"id\":1,\"emails\":[\"a@b.c\",\"d\"]},\"scores\":[1,2.5,-3e10,0.125E-2]}",
      "{\"user\": {\"id\": 1, \"emails\": [ \"x\" ]}, \"scores\": [ ]}", NULL},
     {"{\"user\":{\"id\":1}}", "{\"scores\":[1]}", "{\"user\":{\"id\":1,\"emails\":[1]}}",
      "{\"user\":{\"id\":1,\"emails\":[]},\"scores\":[1,]}",
      "{\"user\":{\"id\":1,\"emails\":[]},\"scores\":[NaN]}",
      "{\"user\":{\"id\":1,\"emails\":[]},\"scores\":[1.]}", NULL}},
    {"enum heavy",
     "{\"type\":\"object\",\"properties\":{\"color\":{\"enum\":[\"red\",\"green\",\"blue\"]},"
     "\"size\":{\"type\":\"string\",\"enum\":[\"S\",\"M\",\"L\",1]},\"n\":{\"enum\":[1,2.5,null,"
     "true,[1,\"a\"],{\"k\":\"v\"}]}},\"required\":[\"color\",\"size\",\"n\"]}",
     {"{\"color\":\"red\",\"size\":\"M\",\"n\":1}", "{\"color\":\"blue\",\"size\":\"L\",\"n\":2.5}",
      "{\"color\":\"green\",\"size\":\"S\",\"n\":null}",
      "{\"color\":\"red\",\"size\":\"S\",\"n\":true}",
      "{\"color\":\"red\",\"size\":\"S\",\"n\":[1,\"a\"]}",
      "{\"color\":\"red\",\"size\":\"S\",\"n\":{\"k\":\"v\"}}", NULL},
     {"{\"color\":\"Red\",\"size\":\"M\",\"n\":1}", "{\"color\":\"red\",\"size\":1,\"n\":1}",
      "{\"color\":\"red\",\"size\":\"M\",\"n\":false}",
      "{\"color\":\"red\",\"size\":\"M\",\"n\":3}", NULL}},
    {"anyOf with null",
     "{\"type\":\"object\",\"properties\":{\"v\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":"
     "\"null\"}],\"default\":null,\"title\":\"V\"}},\"required\":[\"v\"]}",
     {"{\"v\":null}", "{\"v\":\"x\"}", NULL},
     {"{\"v\":1}", "{}", "{\"v\":nul}", NULL}},
    {"type list",
     "{\"type\":[\"integer\",\"null\"]}",
     {"5", "null", "-7", NULL},
     {"5.5", "\"5\"", "true", NULL}},
    {"defs recursion",
     "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\"},"
     "\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/"
     "node\"}}},\"required\":[\"value\",\"children\"]}},\"$ref\":\"#/$defs/node\"}",
     {"{\"value\":1,\"children\":[]}",
      "{\"value\":1,\"children\":[{\"value\":2,\"children\":[{\"value\":3,\"children\":[]}]}]}",
      NULL},
     {"{\"value\":1}", "{\"value\":1,\"children\":[{\"value\":2}]}", NULL}},
    {"definitions and root recursion",
     "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"sub\":{\"$ref\":\"#\"},"
     "\"alt\":{\"$ref\":\"#/definitions/"
     "leaf\"}},\"required\":[\"name\"],\"definitions\":{\"leaf\":{\"type\":\"boolean\"}}}",
     {"{\"name\":\"a\"}", "{\"name\":\"a\",\"sub\":{\"name\":\"b\",\"sub\":{\"name\":\"c\"}}}",
      "{\"name\":\"a\",\"alt\":false}", NULL},
     {"{\"name\":\"a\",\"sub\":{}}", "{\"name\":\"a\",\"alt\":1}", NULL}},
    {"linked list recursion",
     "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"next\":"
     "{\"anyOf\":[{\"$ref\":\"#/$defs/"
     "n\"},{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"]}},\"$ref\":\"#/$defs/n\"}",
     {"{\"v\":1,\"next\":null}", "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}", NULL},
     {"{\"v\":1}", "{\"v\":1,\"next\":{\"v\":2}}", NULL}},
    {"string formats",
     "{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"},\"t\":{"
     "\"type\":\"string\",\"format\":\"time\"},\"dt\":{\"type\":\"string\",\"format\":\"date-"
     "time\"},\"u\":{\"type\":\"string\",\"format\":\"uuid\"},\"e\":{\"type\":\"string\","
     "\"format\":\"email\"},\"h\":{\"type\":\"string\",\"format\":\"hostname\"}}}",
     {"{\"d\":\"2024-02-29\"}", "{\"d\":\"2000-02-29\"}", "{\"d\":\"0001-12-31\"}",
      "{\"t\":\"10:20:30.123+05:30\"}", "{\"dt\":\"2024-01-01T00:00:00Z\"}",
      "{\"u\":\"123e4567-e89b-12d3-a456-426614174000\"}", "{\"e\":\"john.doe+x@mail.example.com\"}",
      "{\"h\":\"any string at all\"}", "{}", NULL},
     {"{\"d\":\"2024-2-29\"}", "{\"d\":\"2024-13-01\"}", "{\"t\":\"24:00:00Z\"}",
      "{\"t\":\"12:00:00\"}", "{\"dt\":\"2024-01-01 00:00:00Z\"}",
      "{\"u\":\"123e4567e89b12d3a456426614174000\"}", "{\"e\":\"no-at-sign\"}", "{\"e\":\"a@b\"}",
      "{\"e\":\"a@-b.com\"}", "{\"d\":\"2023-02-29\"}", "{\"d\":\"2024-04-31\"}",
      "{\"d\":\"1900-02-29\"}", "{\"d\":\"0000-01-01\"}", "{\"t\":\"23:59:60Z\"}", NULL}},
    {"string lengths",
     "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":4}}",
     {"[\"ab\",\"abcd\",\"\\u00e9\\n\"]", "[]", "[\"\\ud83d\\ude00x\"]", NULL},
     {"[\"a\"]", "[\"abcde\"]", "[\"\"]", NULL}},
    {"min and max items",
     "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}",
     {"[1,2]", "[1,2,3]", "[ 1 , 2 ]", NULL},
     {"[]", "[1]", "[1,2,3,4]", "[1,\"a\"]", NULL}},
    {"prefixItems",
     "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":"
     "false}",
     {"[]", "[\"a\"]", "[\"a\",1]", NULL},
     {"[1]", "[\"a\",1,2]", "[\"a\",\"b\"]", NULL}},
    {"exact items",
     "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":1}",
     {"[true]", NULL},
     {"[]", "[true,false]", NULL}},
    {"integer bounds",
     "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0},\"b\":{"
     "\"type\":\"integer\",\"minimum\":-5,\"maximum\":17},\"c\":{\"type\":\"integer\","
     "\"exclusiveMinimum\":10,\"exclusiveMaximum\":1000},\"d\":{\"type\":\"integer\",\"maximum\":-"
     "3}}}",
     {"{\"a\":0}", "{\"a\":123456789012345678}", "{\"b\":-5}", "{\"b\":0}", "{\"b\":17}",
      "{\"c\":11}", "{\"c\":999}", "{\"c\":100}", "{\"d\":-3}", "{\"d\":-100}", NULL},
     {"{\"a\":-1}", "{\"b\":-6}", "{\"b\":18}", "{\"b\":-0}", "{\"c\":10}", "{\"c\":1000}",
      "{\"c\":5}", "{\"d\":-2}", "{\"d\":0}", "{\"a\":1234567890123456789}", NULL}},
    {"number bounds",
     "{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"number\",\"minimum\":0},\"q\":{"
     "\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1},\"r\":{\"type\":\"number\","
     "\"minimum\":-2,\"exclusiveMaximum\":3}}}",
     {"{\"p\":0}", "{\"p\":12.5}", "{\"q\":1}", "{\"q\":0.001}", "{\"q\":1.000}", "{\"r\":-2}",
      "{\"r\":-1.5}", "{\"r\":2.999}", "{\"r\":0}", "{\"r\":-0.0}", NULL},
     {"{\"p\":-1}", "{\"p\":-0.5}", "{\"q\":0}", "{\"q\":0.0}", "{\"q\":1.01}", "{\"r\":-2.01}",
      "{\"r\":3}", "{\"r\":3.0}", "{\"r\":-3}", NULL}},
    {"additionalProperties false",
     "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
     "\"integer\"}},\"additionalProperties\":false}",
     {"{}", "{\"a\":1}", "{\"b\":2}", "{\"a\":1,\"b\":2}", NULL},
     {"{\"c\":1}", "{\"b\":2,\"a\":1}", "{\"a\":1,\"c\":3}", NULL}},
    {"additionalProperties absent",
     "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}",
     {"{}", "{\"a\":1}", NULL},
     {"{\"x\":1}", NULL}},
    {"additionalProperties true",
     "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],"
     "\"additionalProperties\":true}",
     {"{\"a\":1}", "{\"a\":1,\"x\":[1,{\"y\":null}],\"z\":\"s\"}", NULL},
     {"{\"x\":1}", "{\"x\":1,\"a\":1}", NULL}},
    {"additionalProperties schema",
     "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"number\"}}",
     {"{}", "{\"x\":1,\"y\":2.5}", NULL},
     {"{\"x\":\"1\"}", "{\"x\":null}", NULL}},
    {"free-form object",
     "{\"type\":\"object\"}",
     {"{}", "{\"a\":{\"b\":[1,true,null,\"x\"]}}", NULL},
     {"[]", "1", "{\"a\":}", NULL}},
    {"const",
     "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":{\"type\":"
     "\"number\"}},\"required\":[\"kind\",\"r\"]}",
     {"{\"kind\":\"circle\",\"r\":1}", NULL},
     {"{\"kind\":\"square\",\"r\":1}", "{\"r\":1}", NULL}},
    {"oneOf discriminated",
     "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":{\"type\":"
     "\"integer\"}},\"required\":[\"kind\",\"x\"]},{\"type\":\"object\",\"properties\":{\"kind\":{"
     "\"const\":\"b\"},\"y\":{\"type\":\"string\"}},\"required\":[\"kind\",\"y\"]}]}",
     {"{\"kind\":\"a\",\"x\":1}", "{\"kind\":\"b\",\"y\":\"s\"}", NULL},
     {"{\"kind\":\"a\",\"y\":\"s\"}", "{\"kind\":\"c\",\"x\":1}", NULL}},
    {"pydantic model",
     "{\"properties\":{\"name\":{\"title\":\"Name\",\"type\":\"string\"}},\"required\":[\"name\"],"
     "\"title\":\"M\",\"type\":\"object\"}",
     {"{\"name\":\"x\"}", NULL},
     {"{}", "{\"name\":1}", "{\"name\":\"x\",\"extra\":1}", NULL}},
    {"pydantic nested with refs",
     "{\"$defs\":{\"Address\":{\"properties\":{\"street\":{\"title\":\"Street\",\"type\":"
     "\"string\"},\"zip\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}],\"default\":null,"
     "\"title\":\"Zip\"}},\"required\":[\"street\"],\"title\":\"Address\",\"type\":\"object\"}},"
     "\"properties\":{\"name\":{\"title\":\"Name\",\"type\":\"string\"},\"address\":{\"$ref\":\"#/"
     "$defs/"
     "Address\",\"description\":\"where\"},\"tags\":{\"items\":{\"type\":\"string\"},\"title\":"
     "\"Tags\",\"type\":\"array\"}},\"required\":[\"name\",\"address\"],\"title\":\"Person\","
     "\"type\":\"object\"}",
     {"{\"name\":\"a\",\"address\":{\"street\":\"s\"}}",
      "{\"name\":\"a\",\"address\":{\"street\":\"s\",\"zip\":null},\"tags\":[\"x\"]}", NULL},
     {"{\"name\":\"a\"}", "{\"name\":\"a\",\"address\":{\"zip\":\"1\"}}", NULL}},
    {"allOf merge",
     "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":["
     "\"a\"]},{\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}]}",
     {"{\"a\":1,\"b\":\"x\"}", NULL},
     {"{\"a\":1}", "{\"b\":\"x\"}", "{\"b\":\"x\",\"a\":1}", NULL}},
    {"allOf single ref",
     "{\"$defs\":{\"X\":{\"type\":\"integer\"}},\"allOf\":[{\"$ref\":\"#/$defs/"
     "X\"}],\"description\":\"d\"}",
     {"1", NULL},
     {"\"1\"", NULL}},
    {"anyOf with object siblings",
     "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
     "\"integer\"}},\"anyOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}",
     {"{\"a\":1}", "{\"b\":1}", "{\"a\":1,\"b\":2}", NULL},
     {"{}", NULL}},
    {"any value",
     "{}",
     {"1", "\"s\"", "{\"a\":[1,2,{\"b\":null}]}", "true", "[ ]", NULL},
     {"", "tru", "{\"a\"}", NULL}},
    {"true schema", "true", {"null", "[1]", NULL}, {"nul", NULL}},
    {"implied types",
     "{\"properties\":{\"a\":{\"minLength\":1},\"b\":{\"minimum\":0}}}",
     {"{\"a\":\"x\",\"b\":1.5}", "{}", NULL},
     {"{\"a\":\"\"}", "{\"b\":-1}", "[]", NULL}},
    {"booleans and null",
     "{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"boolean\"},\"n\":{\"type\":\"null\"}},"
     "\"required\":[\"t\",\"n\"]}",
     {"{\"t\":true,\"n\":null}", "{\"t\":false,\"n\":null}", NULL},
     {"{\"t\":1,\"n\":null}", "{\"t\":true,\"n\":0}", NULL}},
    {"unicode keys",
     "{\"type\":\"object\",\"properties\":{\"caf\xc3\xa9"
     " \\\"q\\\"\":{\"type\":\"integer\"}},\"required\":[\"caf\xc3\xa9"
     " \\\"q\\\"\"]}",
     {"{\"caf\xc3\xa9"
      " \\\"q\\\"\":1}",
      NULL},
     {"{\"cafe \\\"q\\\"\":1}", NULL}},
    {"whitespace limits",
     "{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}",
     {"[1, 2]", "[\n\t1,\n\t2\n]", "[ 1 ]", NULL},
     {"[1,  2]", "[ \n1]", "[1,\n                     2]", "[1 ,\t2]", NULL}},
    {"optional order",
     "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
     "\"integer\"},\"c\":{\"type\":\"integer\"}},\"required\":[\"b\"]}",
     {"{\"b\":1}", "{\"a\":1,\"b\":2}", "{\"b\":2,\"c\":3}", "{\"a\":1,\"b\":2,\"c\":3}", NULL},
     {"{\"a\":1}", "{\"c\":1,\"b\":2}", "{}", "{\"a\":1,\"c\":3}", NULL}},
};

/* The grammar for schema text s (NULL, with a failed check, when any step fails). */
static grammar *compile(const char *name, const char *s) {
    json_error_t je;
    json_t *schema = json_loads(s, JSON_DECODE_ANY, &je);
    CHECK_MSG(schema != NULL, "%s: schema JSON: %s", name, je.text);
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
    json_decref(schema);
    return rc ? NULL : g;
}

static int accepts(const grammar *g, const char *s) {
    return grammar_oracle_accepts(g, (const uint8_t *)s, strlen(s));
}

static void test_instances(void) {
    for (size_t k = 0; k < sizeof CASES / sizeof *CASES; k++) {
        const sg_case *c = &CASES[k];
        grammar *g = compile(c->name, c->schema);
        if (!g) continue;
        for (int i = 0; c->ok[i]; i++) {
            CHECK_MSG(accepts(g, c->ok[i]), "%s: rejects %s", c->name, c->ok[i]);
            json_t *v = json_loads(c->ok[i], JSON_DECODE_ANY, NULL);
            CHECK_MSG(v != NULL, "%s: jansson cannot read %s", c->name, c->ok[i]);
            json_decref(v);
        }
        for (int i = 0; c->bad[i]; i++)
            CHECK_MSG(!accepts(g, c->bad[i]), "%s: accepts %s", c->name, c->bad[i]);
        grammar_free(g);
    }
}

/* Returns schema_gbnf_root's code for schema text s; its message in msg. */
static int compile_err(const char *s, char *msg, size_t cap) {
    json_t *schema = json_loads(s, JSON_DECODE_ANY, NULL);
    strbuf out = {0};
    strata_err err = {0};
    CHECK_MSG(schema != NULL, "schema JSON %s", s);
    int rc = schema ? schema_gbnf_root(schema, &out, &err) : 0;
    snprintf(msg, cap, "%s", err.msg);
    strbuf_free(&out);
    json_decref(schema);
    return rc;
}

#define CHECK_ERR(schema, code, text)                                                              \
    do {                                                                                           \
        char m_[512];                                                                              \
        int rc_ = compile_err(schema, m_, sizeof m_);                                              \
        CHECK_MSG(rc_ == (code) && strstr(m_, text), "%s: %d %s", schema, rc_, m_);                \
    } while (0)

static void test_errors(void) {
    CHECK_ERR("{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}}", STRATA_EUNSUPPORTED,
              "json_schema: unsupported keyword \"not\" at /properties/a");
    CHECK_ERR("{\"if\":{},\"then\":{}}", STRATA_EUNSUPPORTED, "\"if\" at the root");
    CHECK_ERR("{\"type\":\"object\",\"patternProperties\":{}}", STRATA_EUNSUPPORTED,
              "\"patternProperties\"");
    CHECK_ERR("{\"items\":{\"type\":\"integer\",\"multipleOf\":2}}", STRATA_EUNSUPPORTED,
              "\"multipleOf\" at /items");
    CHECK_ERR("{\"type\":\"array\",\"uniqueItems\":true}", STRATA_EUNSUPPORTED, "uniqueItems");
    CHECK_ERR("{\"anyOf\":[{\"type\":\"object\",\"minProperties\":1}]}", STRATA_EUNSUPPORTED,
              "\"minProperties\" at /anyOf/0");
    CHECK_ERR("{\"$defs\":{\"a~b/c\":{\"contains\":{}}},\"$ref\":\"#/$defs/a~0b~1c\"}",
              STRATA_EUNSUPPORTED, "\"contains\" at /$defs/a~0b~1c");
    CHECK_ERR("{\"type\":5}", STRATA_EINVALID, "\"type\" must be");
    CHECK_ERR("{\"type\":\"text\"}", STRATA_EINVALID, "names no JSON Schema type");
    CHECK_ERR("{\"properties\":{\"x\":{\"type\":\"object\",\"required\":\"a\"}}}", STRATA_EINVALID,
              "\"required\" must be an array of strings at /properties/x");
    CHECK_ERR("{\"properties\":[]}", STRATA_EINVALID, "\"properties\" must be an object");
    CHECK_ERR("{\"items\":3}", STRATA_EINVALID,
              "a schema must be an object or a boolean at /items");
    CHECK_ERR("{\"type\":\"array\",\"minItems\":-1}", STRATA_EINVALID, "minItems");
    CHECK_ERR("{\"$ref\":\"#/$defs/missing\"}", STRATA_EINVALID, "names nothing");
    CHECK_ERR("{\"$ref\":\"http://x/s.json\"}", STRATA_EUNSUPPORTED, "not a local");
    CHECK_ERR("{\"$ref\":\"#\"}", STRATA_EINVALID, "comes back to itself");
    CHECK_ERR("{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/b\"},{\"type\":\"null\"}]},"
              "\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}",
              STRATA_EINVALID, "comes back to itself");
    CHECK_ERR("{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}},\"required\":[\"a\"]}",
              STRATA_EINVALID, "no finite JSON value");
    CHECK_ERR("false", STRATA_EINVALID, "no finite JSON value");
    CHECK_ERR("{\"enum\":[1,2],\"type\":\"string\"}", STRATA_EINVALID, "no finite JSON value");
    CHECK_ERR("{\"type\":\"array\",\"maxItems\":101}", STRATA_EUNSUPPORTED, "above 100");
    CHECK_ERR("{\"type\":\"string\",\"maxLength\":5000}", STRATA_EUNSUPPORTED, "above 1000");
    CHECK_ERR("{\"type\":\"number\",\"minimum\":0.5}", STRATA_EUNSUPPORTED, "not an integer");
    CHECK_ERR("{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", STRATA_EUNSUPPORTED,
              "more than one of");
    CHECK_ERR("{\"allOf\":[{\"type\":\"string\"},{\"minLength\":1}]}", STRATA_EUNSUPPORTED,
              "not all object schemas");
    CHECK_ERR("{\"anyOf\":[]}", STRATA_EINVALID, "non-empty array");
    /* 65 nested arrays */
    char deep[1024] = "";
    for (int i = 0; i < 65; i++) strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 65; i++) strcat(deep, "}");
    CHECK_ERR(deep, STRATA_EUNSUPPORTED, "deeper than 64");
    /* an enum of 40000 long strings: past 1 MiB of grammar */
    strbuf big = {0};
    strbuf_adds(&big, "{\"enum\":[");
    for (int i = 0; i < 40000; i++)
        strbuf_addf(&big, "%s\"value number %d of a very long enumeration\"", i ? "," : "", i);
    strbuf_adds(&big, "]}");
    CHECK_ERR(big.p, STRATA_EUNSUPPORTED, "past 1048576 bytes");
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
        char *text = json_dumps(s, JSON_COMPACT);
        grammar *g = compile(P[k].re, text);
        for (int i = 0; g && P[k].ok[i]; i++)
            CHECK_MSG(accepts(g, P[k].ok[i]), "%s: rejects %s", P[k].re, P[k].ok[i]);
        for (int i = 0; g && P[k].bad[i]; i++)
            CHECK_MSG(!accepts(g, P[k].bad[i]), "%s: accepts %s", P[k].re, P[k].bad[i]);
        grammar_free(g);
        free(text);
        json_decref(s);
    }
    CHECK_ERR("{\"type\":\"string\",\"pattern\":\"(?=a)b\"}", STRATA_EUNSUPPORTED, "\"pattern\" (");
    CHECK_ERR("{\"type\":\"string\",\"pattern\":\"[\\\\n\\\"]\"}", STRATA_EUNSUPPORTED,
              "only characters JSON must escape");
}

/* Every allocation failing in turn: STRATA_ENOMEM with a message and nothing leaked, until
 * the whole compile succeeds with the same text. */
static void test_alloc_failures(void) {
    if (!alloc_hook_on()) return;
    size_t k = 0; /* $ref, anyOf, nested objects and arrays */
    while (strcmp(CASES[k].name, "pydantic nested with refs")) k++;
    json_t *schema = json_loads(CASES[k].schema, 0, NULL);
    strbuf want = {0};
    strata_err err;
    CHECK(!schema_gbnf_root(schema, &want, &err));
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
    json_decref(schema);
}

int main(void) {
    RUN(test_instances);
    RUN(test_errors);
    RUN(test_shared_grammar);
    RUN(test_pattern);
    RUN(test_alloc_failures);
    TEST_DONE();
}
