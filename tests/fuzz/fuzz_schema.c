/* fuzz_schema.c - the JSON Schema compiler (server/schema_gbnf.c) on arbitrary JSON.
 *
 * Input: JSON text taken as a schema. Whenever schema_gbnf_root succeeds, the grammar parser
 * (engine/constrain/gbnf.c) must accept its output: a request's schema never turns into a
 * grammar the server then fails on. A refusal must be STRATA_EINVALID or STRATA_EUNSUPPORTED
 * with a message naming it; ASan checks that either path frees what it took. */
// fuzz-sources: server/schema_gbnf.c server/schema_gbnf_value.c server/schema_gbnf_object.c
// fuzz-sources: engine/constrain/gbnf.c engine/constrain/regex_gbnf.c
// fuzz-sources: engine/base/err.c engine/base/strbuf.c
// fuzz-libs: -ljansson -lm
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/constrain/grammar.h"
#include "server/schema_gbnf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *schema = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!schema) return 0;
    strbuf out = {0};
    strata_err err = {0};
    int rc = schema_gbnf_root(schema, &out, &err);
    if (rc) {
        if ((rc != STRATA_EINVALID && rc != STRATA_EUNSUPPORTED) ||
            strncmp(err.msg, "json_schema: ", 13))
            abort();
    } else {
        grammar *g = NULL;
        if (grammar_parse(&g, out.p, out.len, &err)) abort();
        grammar_free(g);
    }
    strbuf_free(&out);
    json_decref(schema);
    return 0;
}
