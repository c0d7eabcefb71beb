/* test_gbnf.c - engine/constrain/gbnf.c: GBNF text into grammar.h's flat form.
 *
 * Each syntax feature is parsed and the language it gives is checked with the Earley
 * oracle (tests/unit/grammar_oracle.h) on strings it must accept and reject, and on
 * prefixes; a few checks look at the elements themselves (what grammar.h promises: class*
 * is GK_STAR, classes deduplicated and normalised, auxiliary rules named "<rule>-<n>").
 * JSON, arithmetic and list grammars in llama.cpp's style run whole documents. Every error
 * comes back as STRATA_EINVALID naming the line and column or the rule, and a failure of
 * any allocation as STRATA_ENOMEM with nothing leaked. */
#define ALLOC_HOOK_WITH_ASAN
#include "tests/alloc_hook.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/constrain/grammar.h"
#include "tests/test.h"
#include "tests/unit/grammar_oracle.h"

/* Parses text; NULL (with the message printed) when it fails. */
static grammar *parse(const char *text) {
    grammar *g = NULL;
    strata_err err = {0};
    int rc = grammar_parse(&g, text, strlen(text), &err);
    CHECK_MSG(rc == 0, "%s\n--- %s", err.msg, text);
    return rc ? NULL : g;
}

static int acc(const grammar *g, const char *s) {
    return grammar_oracle_accepts(g, (const uint8_t *)s, strlen(s));
}

static int pre(const grammar *g, const char *s) {
    return grammar_oracle_prefix(g, (const uint8_t *)s, strlen(s));
}

/* Checks that g accepts each of yes and rejects each of no (NULL-terminated lists), and that
 * every prefix of an accepted string is a prefix. */
static void lang(const char *text, const char *const *yes, const char *const *no) {
    grammar *g = parse(text);
    if (!g) return;
    for (; *yes; yes++) {
        CHECK_MSG(acc(g, *yes), "should accept '%s' in\n%s", *yes, text);
        for (size_t k = 0; k <= strlen(*yes); k++)
            CHECK_MSG(grammar_oracle_prefix(g, (const uint8_t *)*yes, k), "prefix %zu of '%s'", k,
                      *yes);
    }
    for (; *no; no++) CHECK_MSG(!acc(g, *no), "should reject '%s' in\n%s", *no, text);
    grammar_free(g);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})
#define NONE ((const char *const[]){NULL})

/* Expects text to fail with code and a message holding want (and want2 when not NULL). */
static void fails(const char *text, int code, const char *want, const char *want2) {
    grammar *g = NULL;
    strata_err err = {0};
    int rc = grammar_parse(&g, text, strlen(text), &err);
    CHECK_MSG(rc == code, "got %d (%s), want %d for\n%s", rc, err.msg, code, text);
    CHECK_MSG(strstr(err.msg, want) && (!want2 || strstr(err.msg, want2)),
              "message '%s' lacks '%s' / '%s'", err.msg, want, want2 ? want2 : "");
    CHECK(g == NULL);
    if (!rc) grammar_free(g);
}

static void test_literals_alternatives(void) {
    lang("root ::= \"ab\" \"c\"", L("abc"), L("", "ab", "abcd", "abd"));
    lang("root ::= \"a\" | \"bc\" | \"\"", L("a", "bc", ""), L("b", "abc", "c"));
    lang("root ::= x y\nx ::= \"1\"\ny ::= x | \"2\"", L("11", "12"), L("1", "21", "112"));
    lang("root ::= \"x\" | ", L("x", ""), L("xx"));
    lang("root ::=", L(""), L("a"));
    lang("root ::= a_b\na_b ::= \"q\"", L("q"), L(""));
    /* Rules that can be empty, in front of each other (the oracle's empty completions). */
    lang("root ::= a a \"x\"\na ::= \"\" | \"y\"", L("x", "yx", "yyx"), L("yyyx", "y"));
    lang("root ::= e \"x\" e\ne ::= f f\nf ::= [a]* | \"b\"", L("x", "aaxb", "baxaab", "bxbb"),
         L("bbbx", "xbbb"));
}

/* Many rules and classes: the name and class tables grow; identical classes are shared. */
static void test_many(void) {
    char *text = malloc(64 * 1024);
    int n = 0;
    n += sprintf(text + n, "root ::= r0\n");
    for (int i = 0; i < 300; i++)
        n += sprintf(text + n, "r%d ::= [\\u%04X] [\\u%04X] %s%d\n", i, 0x100 + i, 0x100 + i,
                     i + 1 < 300 ? "r" : "\"!\" # ", i + 1);
    grammar *g = parse(text);
    if (g) {
        CHECK_EQ_INT(g->n_classes, 300);
        CHECK_EQ_INT(g->n_rules, 301);
        uint8_t s[1300];
        size_t k = 0;
        for (int i = 0; i < 300; i++) {
            char u[4];
            int len = unicode_utf8_encode(0x100 + (uint32_t)i, u);
            memcpy(s + k, u, (size_t)len), memcpy(s + k + len, u, (size_t)len);
            k += 2 * (size_t)len;
        }
        s[k++] = '!';
        CHECK(grammar_oracle_accepts(g, s, k));
        s[3] ^= 1;
        CHECK(!grammar_oracle_accepts(g, s, k));
        grammar_free(g);
    }
    free(text);
}

static void test_escapes_utf8(void) {
    lang("root ::= \"\\x41\\u00e9\\U0001F600\\n\\r\\t\\\\\\\"\\[\\]\\-\"",
         L("A\xc3\xa9\xf0\x9f\x98\x80\n\r\t\\\"[]-"), L("A"));
    lang("root ::= \"é😀\"", L("\xc3\xa9\xf0\x9f\x98\x80"), L("\xc3\xa9"));
    lang("root ::= \"\\x00\\x7f\" [\\x00]", NONE, L("\x7f"));
    /* A literal is its UTF-8 bytes: half a character is a prefix. */
    grammar *g = parse("root ::= \"é\"");
    if (g) {
        CHECK_EQ_INT(g->n_elems, 3);
        CHECK(g->elems[0].kind == GK_BYTE && g->elems[0].arg == 0xC3);
        CHECK(g->elems[1].kind == GK_BYTE && g->elems[1].arg == 0xA9);
        CHECK(pre(g, "\xc3") && !pre(g, "\xc4"));
        grammar_free(g);
    }
}

static void test_classes(void) {
    lang("root ::= [a-cx]", L("a", "b", "c", "x"), L("d", "", "ab", "A"));
    lang("root ::= [^a-c]", L("d", "\xc3\xa9", "\xf0\x9f\x98\x80", "\n"),
         L("a", "c", "", "\x80", "\xc3"));
    lang("root ::= [^\"\\\\]", L("\xc3\xa9", "\xf0\x9f\x98\x80", "a"),
         L("\"", "\\", "\x80", "\xed\xa0\x80", "\xc0\x80"));
    lang("root ::= [α-ω]", L("\xce\xb1", "\xcf\x89", "\xce\xbb"), L("a", "\xce\x91"));
    lang("root ::= [a-]", L("a", "-"), L("b"));
    lang("root ::= [-a]", L("a", "-"), L("b"));
    lang("root ::= [\\]\\[\\-]", L("]", "[", "-"), L("\\"));
    lang("root ::= [\\x00-\\x7F]", L("a", "\x7f"), L("\xc3\xa9"));
    lang("root ::= [😀-😂]", L("\xf0\x9f\x98\x80", "\xf0\x9f\x98\x82"), L("\xf0\x9f\x98\x83"));
    lang("root ::= .", L("a", "\xc3\xa9", "\xf4\x8f\xbf\xbf"), L("", "\x80", "\xed\xa0\x80"));
    lang("root ::= [^]", L("a", "\xc3\xa9"), L(""));
    /* Normalised: sorted, merged (adjacent too), surrogates cut out, identical ones shared. */
    grammar *g = parse("root ::= [c-ea-b] [a-e] [\\uD700-\\uE100] . [^\\x00-\\x7f]");
    if (g) {
        CHECK_EQ_INT(g->n_classes, 4);
        CHECK(g->elems[0].kind == GK_CLASS && g->elems[1].kind == GK_CLASS);
        CHECK_EQ_INT(g->elems[0].arg, g->elems[1].arg);
        const uint32_t *r = g->ranges + 2 * g->class_off[g->elems[0].arg];
        CHECK_EQ_INT(g->class_off[g->elems[0].arg + 1] - g->class_off[g->elems[0].arg], 1);
        CHECK(r[0] == 'a' && r[1] == 'e');
        uint32_t k = g->elems[2].arg;
        r = g->ranges + 2 * g->class_off[k];
        CHECK_EQ_INT(g->class_off[k + 1] - g->class_off[k], 2);
        CHECK(r[0] == 0xD700 && r[1] == 0xD7FF && r[2] == 0xE000 && r[3] == 0xE100);
        k = g->elems[3].arg;
        r = g->ranges + 2 * g->class_off[k];
        CHECK(r[0] == 0 && r[1] == 0xD7FF && r[2] == 0xE000 && r[3] == 0x10FFFF);
        k = g->elems[4].arg;
        r = g->ranges + 2 * g->class_off[k];
        CHECK(r[0] == 0x80 && r[1] == 0xD7FF && r[2] == 0xE000 && r[3] == 0x10FFFF);
        grammar_free(g);
    }
    /* Prefixes that end inside a character: only when the class holds a completion. */
    g = parse("root ::= [é-ê] \"!\"");
    if (g) {
        CHECK(pre(g, "\xc3") && !pre(g, "\xc4") && !pre(g, "\xe2") && !pre(g, "\x80"));
        CHECK(pre(g, "\xc3\xa9") && !pre(g, "\xc3\xa8") && pre(g, "\xc3\xa9!"));
        CHECK(!pre(g, "\xc3\xa9!!"));
        grammar_free(g);
    }
    g = parse("root ::= [\\U0001F600-\\U0001F64F]*");
    if (g) {
        CHECK(pre(g, "\xf0") && pre(g, "\xf0\x9f") && pre(g, "\xf0\x9f\x98"));
        CHECK(!pre(g, "\xf0\x9e") && !pre(g, "\xf1") && pre(g, "\xf0\x9f\x98\x80\xf0"));
        grammar_free(g);
    }
    g = parse("root ::= [\\u0800-\\u0801]");
    if (g) { /* E0 must be followed by A0..BF: E0 A0 80 is U+0800 */
        CHECK(pre(g, "\xe0") && pre(g, "\xe0\xa0") && !pre(g, "\xe0\x80") && !pre(g, "\xe1"));
        grammar_free(g);
    }
}

/* The language of x{m,n} over counts 0..7 of "a"-like units. */
static void rep_counts(const char *text, const char *unit, int m, int n) {
    grammar *g = parse(text);
    if (!g) return;
    char s[64] = "";
    for (int k = 0; k <= 7; k++) {
        int want = k >= m && (n < 0 || k <= n);
        CHECK_MSG(acc(g, s) == want, "%s: %d units: got %d", text, k, !want);
        strcat(s, unit);
    }
    grammar_free(g);
}

static void test_repetitions(void) {
    const char *units[] = {"[a]", "\"a\"", "\"ab\"", "x", "(\"a\" | \"b\")", "(x)", "[a-b]"};
    const char *strs[] = {"a", "a", "ab", "a", "b", "a", "b"};
    struct {
        const char *op;
        int m, n;
    } ops[] = {{"*", 0, -1},        {"+", 1, -1},    {"?", 0, 1},     {"{3}", 3, 3},
               {"{2,}", 2, -1},     {"{2,4}", 2, 4}, {"{0,2}", 0, 2}, {"{0}", 0, 0},
               {"{ 1 , 3 }", 1, 3}, {"{0,}", 0, -1}};
    for (size_t u = 0; u < sizeof units / sizeof *units; u++)
        for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
            char text[128];
            snprintf(text, sizeof text, "root ::= %s%s\nx ::= \"a\"", units[u], ops[o].op);
            rep_counts(text, strs[u], ops[o].m, ops[o].n);
        }
    /* Postfixes chain: each applies to what is left of it. */
    rep_counts("root ::= \"a\"{2}{2}", "a", 4, 4);
    rep_counts("root ::= [a]+?", "a", 0, -1);
    rep_counts("root ::= (\"a\"{1,2}){2}", "a", 2, 4);
    rep_counts("root ::= \"\"* \"a\"", "a", 1, 1);
    lang("root ::= \"x\"[0-9]*\"y\"", L("xy", "x0y", "x123y"), L("x", "xay", "y"));
    lang("root ::= (\"a\" | \"b\" \"c\")+ \"!\"", L("a!", "bc!", "abca!"), L("!", "b!", "ac!"));
    /* Shapes: class* is GK_STAR; class+ is GK_CLASS GK_STAR; x{2,4} is x x R1 with
     * R1 ::= x R2 | () and R2 ::= x | (). */
    grammar *g = parse("root ::= [a]* [b]+ \"c\"{2,4}");
    if (g) {
        const gram_elem *e = g->elems + g->alts[g->rules[g->root]];
        CHECK(e[0].kind == GK_STAR && e[1].kind == GK_CLASS && e[2].kind == GK_STAR);
        CHECK_EQ_INT(e[1].arg, e[2].arg);
        CHECK(e[3].kind == GK_BYTE && e[4].kind == GK_BYTE && e[5].kind == GK_RULE);
        CHECK(e[6].kind == GK_END);
        uint32_t r1 = e[5].arg;
        CHECK_EQ_INT(g->n_rules, 3);
        CHECK(!strcmp(g->names[r1], "root-1"));
        CHECK(!strcmp(g->names[r1 + 1], "root-2"));
        CHECK_EQ_INT(g->rules[r1 + 1] - g->rules[r1], 2);
        const gram_elem *a = g->elems + g->alts[g->rules[r1]];
        CHECK(a[0].kind == GK_BYTE && a[1].kind == GK_RULE && a[1].arg == r1 + 1);
        CHECK(g->elems[g->alts[g->rules[r1] + 1]].kind == GK_END);
        grammar_free(g);
    }
    /* Unbounded repetition is right-recursive: R ::= x R | (). */
    g = parse("root ::= \"ab\"*");
    if (g) {
        uint32_t r = g->elems[g->alts[g->rules[g->root]]].arg;
        const gram_elem *a = g->elems + g->alts[g->rules[r]];
        CHECK(a[0].kind == GK_BYTE && a[1].kind == GK_BYTE && a[2].kind == GK_RULE);
        CHECK_EQ_INT(a[2].arg, r);
        grammar_free(g);
    }
}

static void test_layout(void) {
    /* Comments, newlines inside groups, after '|' and '::=', before a leading '|'. */
    lang("# a comment\n\nroot ::= # here too\n  \"a\" |   # and here\n  \"b\"\n"
         "  | \"c\" # a line starting with | continues\n\n# end",
         L("a", "b", "c"), L("d", ""));
    lang("root ::= (\n  \"a\"\n  \"b\" # inside\n  |\n  \"c\"\n)\n", L("ab", "c"), L("a", "abc"));
    lang("root ::= x\r\nx ::= \"q\"\r\n", L("q"), L(""));
    lang("root::=\"a\"(\"b\")?[c]", L("ac", "abc"), L("a"));
    lang("root ::= ()", L(""), L("a"));
    lang("root ::= (\"a\" | )  \"b\"", L("ab", "b"), L("a"));
    /* Rules may come in any order; references are by index; root is found by name. */
    grammar *g = parse("b ::= \"b\"\nroot ::= b a\na ::= \"a\"");
    if (g) {
        CHECK_EQ_INT(g->n_rules, 3);
        CHECK(!strcmp(g->names[g->root], "root"));
        const gram_elem *e = g->elems + g->alts[g->rules[g->root]];
        CHECK(e[0].kind == GK_RULE && !strcmp(g->names[e[0].arg], "b"));
        CHECK(e[1].kind == GK_RULE && !strcmp(g->names[e[1].arg], "a"));
        CHECK(acc(g, "ba") && !acc(g, "ab"));
        grammar_free(g);
    }
}

static const char JSON_GBNF[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "            string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "\n"
    "array  ::=\n"
    "  \"[\" ws (\n"
    "            value\n"
    "    (\",\" ws value)*\n"
    "  )? \"]\" ws\n"
    "\n"
    "string ::=\n"
    "  \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
    "  )* \"\\\"\" ws\n"
    "\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,3})? "
    "ws\n"
    "\n"
    "# Optional space: by convention, applied in this grammar after literal chars when allowed\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static void test_json(void) {
    lang(JSON_GBNF,
         L("{}", "{ }", "{\"a\":1}", "{\"a\": [1, 2.5, -3e10, true, null, \"x\\u00e9\\n\"]}",
           "{\"k\":{\"n\":{}}, \"s\":\"\xc3\xa9\xf0\x9f\x98\x80\"}", "{\"a\":[]}\n"),
         L("", "[]", "{", "{\"a\"}", "{\"a\":01}", "{\"a\":\"\x01\"}", "{\"a\":\"\\q\"}",
           "{\"a\":1,}", "{} {}", "{\"a\":\"\x80\"}"));
    grammar *g = parse(JSON_GBNF);
    if (g) {
        CHECK(pre(g, "{\"a\": [1, tr") && pre(g, "{\"a\":\"\xc3") && !pre(g, "{\"a\":\"\x80"));
        CHECK(!pre(g, "{\"a\": [1,]") && !pre(g, "x") && pre(g, ""));
        grammar_free(g);
    }
}

static void test_arith_list(void) {
    const char *arith = "root  ::= (expr \"=\" ws term \"\\n\")+\n"
                        "expr  ::= term ([-+*/] term)*\n"
                        "term  ::= ident | num | \"(\" ws expr \")\" ws\n"
                        "ident ::= [a-z] [a-z0-9_]* ws\n"
                        "num   ::= [0-9]+ ws\n"
                        "ws    ::= [ \\t\\n]*\n";
    lang(arith, L("1+2=3\n", "(a+b1)*c = 42\n", "x=y\nz=1\n", "((1))=2\n"),
         L("", "1+2\n", "1+=3\n", "(1=2\n", "A=1\n"));
    const char *list = "root ::= item+\n"
                       "# Excludes various line break characters\n"
                       "item ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n";
    lang(list, L("- a\n", "- one\n- two \xc3\xa9\n"), L("", "- \n", "-a\n", "- a", "- a\x0b\n"));
}

static void test_errors(void) {
    int E = STRATA_EINVALID;
    fails("", E, "no rule named 'root'", NULL);
    fails("x ::= \"a\"", E, "no rule named 'root'", NULL);
    fails("root ::= x\n\ny ::= \"a\" zz", E, "line 1 col 10", "rule 'x' is not defined");
    fails("root ::= \"a\"\nroot ::= \"b\"", E, "line 2 col 1", "rule 'root' is defined twice");
    fails("root ::= \"a\" x ::= \"b\"", E, "line 1 col 16", "expecting a newline");
    fails("root = \"a\"", E, "line 1 col 6", "expecting '::='");
    fails("root\n::= \"a\"", E, "line 1 col 5", "expecting '::='");
    fails("::= \"a\"", E, "line 1 col 1", "expecting a rule name");
    fails("root ::= \"abc", E, "line 1 col 10", "unterminated string");
    fails("root ::= [abc", E, "line 1 col 10", "unterminated class");
    fails("root ::= (\"a\"", E, "line 1 col 14", "expecting ')'");
    fails("root ::= \"a\")", E, "line 1 col 13", "')' closes no group");
    fails("root ::= \"a\"\n| \"b\" )", E, "line 2 col 7", "')' closes no group");
    fails("root ::= * \"a\"", E, "line 1 col 10", "'*' follows nothing to repeat");
    fails("root ::= (+)", E, "line 1 col 11", "'+' follows nothing");
    fails("root ::= \"a\"{", E, "line 1 col 14", "expecting a number");
    fails("root ::= \"a\"{2 3}", E, "line 1 col 16", "expecting ',' or '}'");
    fails("root ::= \"a\"{2,3", E, "line 1 col 17", "expecting '}'");
    fails("root ::= \"a\"{3,2}", E, "line 1 col 13", "backwards");
    fails("root ::= \"a\"{1001}", E, "line 1 col 14", "GRAMMAR_MAX_REPEAT");
    fails("root ::= \"a\"{0,99999999999999999999}", E, "line 1 col 16", "GRAMMAR_MAX_REPEAT");
    fails("root ::= \"\\q\"", E, "line 1 col 11", "unknown escape '\\q'");
    fails("root ::= \"\\x4\"", E, "line 1 col 13", "expecting 2 hex digits");
    fails("root ::= \"\\u12G4\"", E, "line 1 col 13", "expecting 4 hex digits");
    fails("root ::= \"\\", E, "line 1 col 11", "unexpected end");
    fails("root ::= \"\\uD800\"", E, "line 1 col 11", "U+D800 is not a character");
    fails("root ::= \"\\U00110000\"", E, "line 1 col 11", "U+110000");
    fails("root ::= [\\U00110000]", E, "line 1 col 11", "above U+10FFFF");
    fails("root ::= [z-a]", E, "line 1 col 11", "backwards");
    fails("root ::= []", E, "line 1 col 10", "matches no character");
    fails("root ::= [\\uD800-\\uDFFF]", E, "line 1 col 10", "matches no character");
    fails("root ::= \"\xc3\"", E, "line 1 col 11", "invalid UTF-8");
    fails("root ::= [\xff]", E, "line 1 col 11", "invalid UTF-8");
    fails("root ::= <tok>", E, "line 1 col 10", "expecting a newline");
    fails("root ::= \"a\"\n\n  é ::= \"b\"", E, "line 3 col 3", "expecting a rule name");
    /* Left recursion, directly, through other rules, through nullable prefixes. */
    fails("root ::= root \"a\" | \"b\"", E, "rule 'root' is left-recursive", NULL);
    fails("root ::= x\nx ::= y \"a\" | \"b\"\ny ::= x", E, "left-recursive", "'x'");
    fails("root ::= e x \"a\" | \"b\"\ne ::= [a]* | \"\"\nx ::= root", E, "'root' is left-rec",
          NULL);
    fails("root ::= (\"a\" | root) \"b\"", E, "rule 'root' is left-recursive", NULL);
    fails("root ::= (\"a\"?)*", E, "rule 'root' is left-recursive", "repeats");
    fails("root ::= \"x\" y\ny ::= (\"a\" | [b]*)+", E, "rule 'y' is left-recursive", NULL);
    /* Right recursion and recursion behind a byte are fine. */
    lang("root ::= \"a\" root | \"b\"", L("b", "ab", "aaab"), L("a", ""));
    lang("root ::= \"(\" root \")\" root | ", L("", "()", "(())()"), L("(", ")("));
    /* Unproductive rules. */
    fails("root ::= \"a\" root", E, "rule 'root' can derive no finite text", NULL);
    fails("root ::= \"a\" | x\nx ::= \"b\" x", E, "rule 'x' can derive no finite text", NULL);
    /* Limits. */
    fails("root ::= \"abcd\"{1000}{1000}", E, "GRAMMAR_MAX_ELEMS", "'root'");
    fails("root ::= x{1000}\nx ::= (\"a\"{0,9}){1000}{1000}{2}", E, "GRAMMAR_MAX_ELEMS", "'x'");
    char *deep = malloc(2000);
    int d = 0;
    d += sprintf(deep, "root ::= ");
    for (int i = 0; i < 300; i++) deep[d++] = '(';
    deep[d++] = '"', deep[d++] = 'a', deep[d++] = '"';
    for (int i = 0; i < 300; i++) deep[d++] = ')';
    deep[d] = 0;
    fails(deep, E, "line 1 col 266", "nested more than 256");
    free(deep);
    size_t big = GRAMMAR_MAX_TEXT + 1;
    char *huge = malloc(big);
    memset(huge, ' ', big);
    grammar *g = NULL;
    strata_err err = {0};
    CHECK_EQ_INT(grammar_parse(&g, huge, big, &err), E);
    CHECK(strstr(err.msg, "GRAMMAR_MAX_TEXT") != NULL);
    free(huge);
}

static void test_nesting_ok(void) {
    char text[1200];
    int d = sprintf(text, "root ::= ");
    for (int i = 0; i < 256; i++) text[d++] = '(';
    text[d++] = '"', text[d++] = 'a', text[d++] = '"';
    for (int i = 0; i < 256; i++) text[d++] = ')';
    text[d] = 0;
    lang(text, L("a"), L("", "aa"));
}

/* The largest grammar within the limits parses, and not being NUL-terminated is fine. */
static void test_limits_ok(void) {
    grammar *g = NULL;
    strata_err err = {0};
    const char text[] = "root ::= [a]{1000} \"b\"{0,1000}XXXX";
    CHECK(!grammar_parse(&g, text, sizeof text - 5, &err));
    if (g) {
        CHECK(g->n_elems > 3000);
        grammar_free(g);
    }
    grammar_free(NULL);
}

/* Each allocation in turn fails: STRATA_ENOMEM with a message and nothing leaked, until the
 * parse succeeds. */
static void test_alloc_failures(void) {
    if (!alloc_hook_on()) return;
    const char *texts[] = {
        JSON_GBNF, "root ::= x x\nx ::= [a-z]{2,3} | (\"q\")* [^\\n]+ y\ny ::= ", "root ::= root"};
    for (size_t t = 0; t < sizeof texts / sizeof *texts; t++) {
        int fails_seen = 0, want = t == 2 ? STRATA_EINVALID : 0;
        for (long n = 1;; n++) {
            grammar *g = NULL;
            strata_err err = {0};
            alloc_hook_start_scope(n, ALLOC_HOOK_EXE);
            int rc = grammar_parse(&g, texts[t], strlen(texts[t]), &err);
            grammar_free(g);
            int failed = alloc_hook_failed();
            long live = alloc_hook_live();
            alloc_hook_stop();
            CHECK_MSG(live == 0, "text %zu: allocation %ld failed, %ld blocks leaked", t, n, live);
            if (!failed) {
                CHECK_EQ_INT(rc, want);
                break;
            }
            fails_seen++;
            CHECK_MSG(rc == STRATA_ENOMEM && strstr(err.msg, "out of memory"),
                      "text %zu: allocation %ld: %d %s", t, n, rc, err.msg);
            if (n > 100000) break;
        }
        CHECK(fails_seen > 5);
    }
}

int main(void) {
    RUN(test_literals_alternatives);
    RUN(test_escapes_utf8);
    RUN(test_classes);
    RUN(test_repetitions);
    RUN(test_layout);
    RUN(test_many);
    RUN(test_json);
    RUN(test_arith_list);
    RUN(test_errors);
    RUN(test_nesting_ok);
    RUN(test_limits_ok);
    RUN(test_alloc_failures);
    TEST_DONE();
}
