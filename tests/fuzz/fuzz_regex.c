/* fuzz_regex.c - the regex to GBNF compiler (engine/constrain/regex_gbnf.c) on arbitrary
 * patterns.
 *
 * Input: the pattern's bytes. Whatever the compiler accepts must come out as plain ASCII
 * GBNF that the grammar parser (gbnf.c) accepts, under a root rule, within the parser's
 * limits; whatever it refuses must be STRATA_EUNSUPPORTED or STRATA_EINVALID with a
 * message. Memory is checked by ASan. */
// fuzz-sources: engine/constrain/regex_gbnf.c engine/constrain/gbnf.c engine/base/err.c engine/base/strbuf.c
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/constrain/constrain.h"
#include "engine/constrain/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    strbuf b = {0};
    strata_err err = {0};
    if (strbuf_adds(&b, "root ::= re\n")) abort();
    int rc = constrain_regex_gbnf((const char *)data, size, "re", &b, &err);
    if (rc) {
        if ((rc != STRATA_EUNSUPPORTED && rc != STRATA_EINVALID) || !err.msg[0]) abort();
        strbuf_free(&b);
        return 0;
    }
    for (size_t i = 0; i < b.len; i++)
        if ((b.p[i] < 0x20 && b.p[i] != '\n') || (unsigned char)b.p[i] >= 0x7F) abort();
    grammar *g = NULL;
    if (grammar_parse(&g, b.p, b.len, &err)) abort();
    grammar_free(g);
    strbuf_free(&b);
    return 0;
}
