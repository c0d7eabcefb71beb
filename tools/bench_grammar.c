/* bench_grammar.c - what a grammar's token mask costs through a whole generation on a real
 * vocabulary: JSON schemas compiled by server/schema_gbnf.c and a hand-written GBNF grammar,
 * run by engine/constrain's grammar matcher.
 *
 * For each grammar, a valid document is tokenized with the model's tokenizer and fed token
 * by token as a generation would be: before each token the mask is computed (timed), then
 * the token accepted. The matcher's tables start empty, so the figures include their
 * filling, as a request's first tokens pay it. Prints per grammar the tokens, the mean,
 * median and max mask, and the first (coldest) one.
 *
 * Build and run from the repo root (after `make`, which builds build/libstrata.a):
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -I. -pthread tools/bench_grammar.c build/libstrata.a \
 *       -o build/bench_grammar -ljansson -lonig -lsentencepiece -lstdc++ -lm -ldl
 *   d=$(mktemp -d) && (cd tests/data/tokenizers/qwen35 &&
 *       zstd -dq --long=27 tokenizer.json.zst -o $d/tokenizer.json) && build/bench_grammar $d */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/bench_clock.h"

#include "engine/constrain/constrain.h"
#include "engine/constrain/constrain_internal.h"
#include "server/schema_gbnf.h"

static const char JSON_GBNF[] =
    "root ::= object\n"
    "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" "
    "[0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,3})? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static const struct {
    const char *name, *schema, *gbnf, *doc;
} cases[] = {
    {"flat object",
     "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
     "\"integer\"},\"email\":{\"type\":\"string\",\"format\":\"email\"},\"active\":{\"type\":"
     "\"boolean\"},\"score\":{\"type\":\"number\"},\"bio\":{\"type\":\"string\"}},\"required\":"
     "[\"name\",\"age\",\"email\",\"active\",\"score\",\"bio\"]}",
     NULL,
     "{\"name\": \"Ada Lovelace\", \"age\": 36, \"email\": \"ada@analytical.example.org\", "
     "\"active\": true, \"score\": 98.25, \"bio\": \"Mathematician and writer, chiefly known "
     "for her work on Charles Babbage's proposed mechanical general-purpose computer, the "
     "Analytical Engine. She was the first to recognise that the machine had applications "
     "beyond pure calculation.\"}"},
    {"nested, arrays",
     "{\"type\":\"object\",\"properties\":{\"user\":{\"type\":\"object\",\"properties\":{\"id\":"
     "{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
     "\"required\":[\"id\",\"tags\"]},\"orders\":{\"type\":\"array\",\"items\":{\"type\":"
     "\"object\",\"properties\":{\"sku\":{\"type\":\"string\"},\"qty\":{\"type\":\"integer\","
     "\"minimum\":1,\"maximum\":99},\"notes\":{\"type\":\"string\"},\"lines\":{\"type\":\"array\","
     "\"items\":{\"type\":\"number\"},\"maxItems\":8}},\"required\":[\"sku\",\"qty\"]}}},"
     "\"required\":[\"user\",\"orders\"]}",
     NULL,
     "{\"user\": {\"id\": 7, \"tags\": [\"admin\", \"early adopter\", \"beta\"]}, \"orders\": "
     "[{\"sku\": \"X-100\", \"qty\": 2, \"notes\": \"leave at the front door, please\", "
     "\"lines\": [1.5, 2, 3.25]}, {\"sku\": \"Y-7\", \"qty\": 12, \"lines\": []}, {\"sku\": "
     "\"Z-42\", \"qty\": 1, \"notes\": \"gift wrap\"}]}"},
    {"enum-heavy",
     "{\"type\":\"object\",\"properties\":{"
     "\"color\":{\"enum\":[\"red\",\"orange\",\"yellow\",\"green\",\"blue\",\"indigo\",\"violet\","
     "\"black\",\"white\",\"grey\"]},"
     "\"size\":{\"enum\":[\"xs\",\"s\",\"m\",\"l\",\"xl\",\"xxl\"]},"
     "\"country\":{\"enum\":[\"France\",\"Germany\",\"Italy\",\"Spain\",\"Portugal\",\"Norway\","
     "\"Sweden\",\"Finland\",\"Denmark\",\"Poland\",\"Austria\",\"Greece\"]},"
     "\"status\":{\"enum\":[\"pending\",\"shipped\",\"delivered\",\"returned\",\"lost\"]},"
     "\"priority\":{\"enum\":[1,2,3,4,5]},"
     "\"channel\":{\"enum\":[\"web\",\"mobile\",\"phone\",\"store\",null]}},"
     "\"required\":[\"color\",\"size\",\"country\",\"status\",\"priority\",\"channel\"]}",
     NULL,
     "{\"color\": \"indigo\", \"size\": \"xl\", \"country\": \"Portugal\", \"status\": "
     "\"delivered\", \"priority\": 3, \"channel\": null}"},
    {"GBNF (JSON grammar)", NULL, JSON_GBNF,
     "{\"title\": \"The Analytical Engine\", \"year\": 1843, \"notes\": [\"A\", \"B\", "
     "{\"by\": \"Ada\", \"text\": \"It might act upon other things besides number, were "
     "objects found whose mutual fundamental relations could be expressed by those of the "
     "abstract science of operations.\"}], \"ok\": true, \"ratio\": -0.125e2}"},
};

/* The grammar text of case k into g. */
static int grammar_text(int k, strbuf *g, strata_err *err) {
    if (cases[k].gbnf) return strbuf_adds(g, cases[k].gbnf);
    json_error_t je;
    json_t *s = json_loads(cases[k].schema, 0, &je);
    if (!s) return strata_err_set(err, STRATA_EINVALID, "schema: %s", je.text);
    int rc = schema_gbnf_root(s, g, err);
    json_decref(s);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s TOKENIZER_DIR\n", argv[0]);
        return 2;
    }
    strata_err err;
    tokenizer *t;
    constrain_vocab *v;
    if (tok_load(&t, argv[1], &err) || constrain_vocab_build(&v, t, tok_vocab_size(t), &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int n = tok_vocab_size(t);
    uint8_t *allow = malloc((size_t)n);
    printf("%-22s %6s %9s %9s %9s %9s %9s  (us per mask)\n", "grammar", "tokens", "create", "first",
           "mean", "median", "max");
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        strbuf g = {0};
        int32_t *ids = NULL;
        size_t n_ids = 0;
        constrain *c = NULL;
        if (grammar_text(k, &g, &err) ||
            tok_encode(t, cases[k].doc, strlen(cases[k].doc), 0, &ids, &n_ids, &err)) {
            fprintf(stderr, "%s: %s\n", cases[k].name, err.msg);
            return 1;
        }
        double t0 = bench_now_us();
        if (constrain_grammar(&c, v, g.p, g.len, NULL, &err)) {
            fprintf(stderr, "%s: %s\n", cases[k].name, err.msg);
            return 1;
        }
        double create = bench_now_us() - t0, *us = malloc(sizeof(double) * (n_ids + 1)), sum = 0;
        for (size_t i = 0; i < n_ids; i++) {
            double a = bench_now_us();
            int allowed = constrain_mask(c, allow, n);
            us[i] = bench_now_us() - a;
            sum += us[i];
            if (allowed <= 0 || !allow[ids[i]] || constrain_accept(c, ids[i])) {
                fprintf(stderr, "%s: token %zu (%d) refused\n", cases[k].name, i, ids[i]);
                return 1;
            }
        }
        if (constrain_complete(c) == 0) {
            fprintf(stderr, "%s: the document is not complete\n", cases[k].name);
            return 1;
        }
        double first = us[0];
        qsort(us, n_ids, sizeof *us, bench_cmp_double);
        printf("%-22s %6zu %9.0f %9.0f %9.0f %9.0f %9.0f\n", cases[k].name, n_ids, create, first,
               sum / (double)n_ids, us[n_ids / 2], us[n_ids - 1]);
        free(us);
        free(ids);
        constrain_free(c);
        strbuf_free(&g);
    }
    free(allow);
    constrain_vocab_free(v);
    tok_free(t);
    return 0;
}
