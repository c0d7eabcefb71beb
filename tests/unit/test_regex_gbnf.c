/* test_regex_gbnf.c - engine/constrain/regex_gbnf.c: regular expressions compiled to GBNF,
 * parsed by gbnf.c and run by the Earley oracle (tests/unit/grammar_oracle.h).
 *
 * The expected answers come from Python's re.fullmatch (re.ASCII; written out when the
 * table was made, so the test needs no Python): a table of the patterns JSON schemas use,
 * with strings each must accept and reject; and for patterns whose loops can match the
 * empty string (the case the compiler rewrites), every string over "ab" up to 5 long.
 * Also: every accepted string's prefixes are prefixes of the grammar; the text is plain
 * ASCII, one rule per line; each unsupported or malformed pattern fails with its code and
 * an offset; the limits (nesting, bounds, grammar size); failing allocations leak
 * nothing. */
#define ALLOC_HOOK_WITH_ASAN
#include "tests/alloc_hook.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/constrain/constrain.h"
#include "engine/constrain/grammar.h"
#include "tests/test.h"
#include "tests/unit/grammar_oracle.h"

/* Compiles re as rule "re" under a root; NULL (with *rc, err) when it fails. */
static grammar *compile(const char *re, size_t len, int *rc, strata_err *err) {
    strbuf b = {0};
    grammar *g = NULL;
    *rc = strbuf_adds(&b, "root ::= re\n");
    if (!*rc) *rc = constrain_regex_gbnf(re, len, "re", &b, err);
    if (!*rc) {
        int ascii = 1;
        for (size_t i = 0; i < b.len; i++)
            if ((b.p[i] < 0x20 && b.p[i] != '\n') || (unsigned char)b.p[i] >= 0x7F) ascii = 0;
        CHECK_MSG(ascii, "%s: output not plain ASCII", re);
        CHECK_MSG(b.p[b.len - 1] == '\n', "%s: output does not end a line", re);
        for (char *l = b.p; *l; l = strchr(l, '\n') + 1) /* one rule per line */
            CHECK_MSG(strstr(l, " ::= ") && strstr(l, " ::= ") < strchr(l, '\n'),
                      "%s: a line without a rule", re);
        *rc = grammar_parse(&g, b.p, b.len, err);
        CHECK_MSG(!*rc, "%s: the parser refuses its grammar: %s\n%s", re, err->msg, b.p);
    }
    strbuf_free(&b);
    return g;
}

static int accepts(const grammar *g, const char *s) {
    return grammar_oracle_accepts(g, (const uint8_t *)s, strlen(s));
}

/* ---- patterns JSON schemas use ---------------------------------------------------------- */

typedef struct rx_case {
    const char *re;
    const char *yes[8], *no[8];
} rx_case;

/* Made with Python's re.fullmatch(pattern, s, re.ASCII); \u{..} and (?<n>..), which Python
 * lacks, were checked as \U........ and (?P<n>..). */
static const rx_case CASES[] = {
    {"^\\d{4}-\\d{2}-\\d{2}$",
     {"2024-01-31", "0000-00-00"},
     {"2024-1-31", "2024-01-311", "", "2024/01/31", "\331\242\331\240\331\242\331\244-01-31"}},
    {"^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$",
     {"a@b.co", "john.doe+x@mail.example.org"},
     {"a@b.c", "@b.co", "a@b", "a b@c.de", "a@b.c0"}},
    {"^\\+?[1-9]\\d{1,14}$",
     {"+14155552671", "14155552671", "12"},
     {"+0123", "1", "+1234567890123456", "+"}},
    {"^\\(\\d{3}\\) \\d{3}-\\d{4}$",
     {"(555) 123-4567"},
     {"555-123-4567", "(555)123-4567", "(555) 123-45678"}},
    {"^[A-Za-z_][A-Za-z0-9_]*$", {"x", "_a1", "Abc_def9"}, {"1abc", "", "a-b", "\303\251"}},
    {"^(cat|dog|bird)$", {"cat", "dog", "bird"}, {"cats", "", "catdog", "Cat"}},
    {"^(https?|ftp)://[^\\s/$.?#].[^\\s]*$",
     {"http://example.com", "https://a.b/c?d=e", "ftp://x.y"},
     {"http:/x", "https://", "http:// x", "mailto:x"}},
    {"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$",
     {"123e4567-e89b-12d3-a456-426614174000"},
     {"123e4567-e89b-12d3-a456-42661417400", "123e4567e89b12d3a456426614174000",
      "g23e4567-e89b-12d3-a456-426614174000"}},
    {"^\\d+(\\.\\d+)?$", {"0", "12.5"}, {"12.", ".5", "1.2.3", ""}},
    {"-?(0|[1-9]\\d*)(\\.\\d+)?([eE][+-]?\\d+)?",
     {"0", "-0", "10", "1.5e10", "1E-3", "-12.75E+08"},
     {"01", "-", "1e", "2."}},
    {"((a|b)c)*", {"", "ac", "acbc", "bcacbc"}, {"a", "acb", "cc"}},
    {"(a(b(c(d)?)?)?)?", {"", "a", "ab", "abc", "abcd"}, {"b", "abd", "abcde"}},
    {"a||b", {"", "a", "b"}, {"ab", "c"}},
    {"(|x)y", {"y", "xy"}, {"xxy", "x"}},
    {"(a|)+", {"", "a", "aaa"}, {"b"}},
    {"(a?b?)*c", {"c", "abc", "aabbc", "babac"}, {"ab", "ca"}},
    {"(a*)*", {"", "a", "aaaa"}, {"b"}},
    {"(a*b*)+$", {"", "ab", "bbba"}, {"c"}},
    {"x{3}", {"xxx"}, {"xx", "xxxx", ""}},
    {"x{2,}", {"xx", "xxxxxx"}, {"x", ""}},
    {"x{1,3}y{0,2}", {"x", "xxxyy"}, {"xxxx", "y", "xyyy"}},
    {"x{,2}", {"", "x", "xx"}, {"xxx"}},
    {"(ab){2}?c{1,2}+d*?", {"ababc", "ababccddd"}, {"abc", "ababccc"}},
    {"a{", {"a{"}, {"a", "{"}},
    {"a{x}", {"a{x}"}, {"ax"}},
    {"\\.\\\\\\/\\-\\^\\$\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|",
     {".\\/-^$*+?()[]{}|"},
     {".\\/-^$*+?()[]{}"}},
    {"\\n\\r\\t\\f\\v", {"\012\015\011\014\013"}, {" \015\011\014\013"}},
    {"\\x41\\u00e9\\u{1F600}", {"A\303\251\360\237\230\200"}, {"Ae\360\237\230\200", "A\\u00e9"}},
    {"\\uD83D\\uDE00+", {"\360\237\230\200", "\360\237\230\200\360\237\230\200"}, {"\\uD83D"}},
    {"[\\u0400-\\u04FF]+",
     {"\320\277\321\200\320\270\320\262\320\265\321\202", "\323\201"},
     {"hello", "\320\277\321\200\320\270\320\262\320\265\321\202x"}},
    {"[^\\u0000-\\u007F]*",
     {"", "\346\227\245\346\234\254\350\252\236", "\303\251"},
     {"abc", "\346\227\245\346\234\254a"}},
    {"caf\303\251|na\303\257ve|\346\227\245\346\234\254",
     {"caf\303\251", "na\303\257ve", "\346\227\245\346\234\254"},
     {"cafe", "\346\227\245"}},
    {"[\316\261-\317\211\316\221-\316\251]{2,4}",
     {"\316\261\316\262", "\316\251\316\251\316\251\316\251"},
     {"\316\261", "\316\261\316\262\316\263\316\264\316\265", "ab"}},
    {".", {"a", "\303\251", "\360\237\230\200"}, {"\012", "", "ab"}},
    {".*", {"", "abc x", "\015\011"}, {"a\012b"}},
    {"[\\s\\S]*", {"", "a\012b"}, {}},
    {"\\d\\D\\w\\W\\s\\S", {"1a_ \011x", "1aa \011x", "1a_\012 x"}, {"a1_ \011x"}},
    {"[\\d\\s]+", {"1 2\0113"}, {"12a", ""}},
    {"[^\\d\\s]+", {"abc", "\303\251!"}, {"a1", " "}},
    {"[\\w-]+", {"a-b_c", "--"}, {"a.b"}},
    {"[a-]+[-a]", {"a-", "--", "-a-a"}, {"ab"}},
    {"[]a]+", {"]a]", "a", "]"}, {"b"}},
    {"[^]a]", {"b"}, {"a", "]", "bb"}},
    {"[\\]\\\\\\-\\^]+", {"]\\-^"}, {"a"}},
    {"[\\b]", {"\010"}, {"b"}},
    {"(?:ab)+(?P<x>c|d)(?<y>e)", {"abce", "ababde"}, {"ce", "abcde"}},
    {"(a|b|c)(d|e|)(f)?", {"a", "bd", "cef", "af"}, {"ddf", ""}},
    {"((((((((((x))))))))))", {"x"}, {"", "xx"}},
    {"\\}\\{x}", {"}{x}"}, {}},
    {"a\\ b", {"a b"}, {"ab"}},
    {"[^a]", {"b", "\012"}, {"a", ""}},
    {"[\\x00-\\x1F\"\\\\]", {"\001", "\"", "\\"}, {"a"}},
    {"\"[^\"\\\\]*\"", {"\"\"", "\"abc\""}, {"\"a\"b\"", "\"\\\""}},
    {"(true|false|null)", {"true", "false", "null"}, {"nul", "truefalse"}},
    {"^$", {""}, {"a"}},
    {"", {""}, {"a"}},
};

static void test_table(void) {
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        const rx_case *c = &CASES[i];
        strata_err err = {0};
        int rc;
        grammar *g = compile(c->re, strlen(c->re), &rc, &err);
        CHECK_MSG(g, "%s: %d %s", c->re, rc, err.msg);
        if (!g) continue;
        for (int k = 0; k < 8 && c->yes[k]; k++) {
            CHECK_MSG(accepts(g, c->yes[k]), "%s should accept \"%s\"", c->re, c->yes[k]);
            for (size_t n = 0; n <= strlen(c->yes[k]); n++)
                CHECK_MSG(grammar_oracle_prefix(g, (const uint8_t *)c->yes[k], n),
                          "%s: \"%s\" cut at %zu is no prefix", c->re, c->yes[k], n);
        }
        for (int k = 0; k < 8 && c->no[k]; k++)
            CHECK_MSG(!accepts(g, c->no[k]), "%s should reject \"%s\"", c->re, c->no[k]);
        grammar_free(g);
    }
}

/* ---- loops over what can match nothing, exhaustively -------------------------------------- */

/* Each pattern's matches among the strings over "ab" up to 5 long ("-": the empty one). */
static const struct {
    const char *re, *matches;
} EXHAUSTIVE[] = {
    {"(a?b?)*",
     "- a b aa ab ba bb aaa aab aba abb baa bab bba bbb aaaa aaab aaba aabb abaa abab abba abbb "
     "baaa baab baba babb bbaa bbab bbba bbbb aaaaa aaaab aaaba aaabb aabaa aabab aabba aabbb "
     "abaaa abaab ababa ababb abbaa abbab abbba abbbb baaaa baaab baaba baabb babaa babab babba "
     "babbb bbaaa bbaab bbaba bbabb bbbaa bbbab bbbba bbbbb"},
    {"(a|)+b?", "- a b aa ab aaa aab aaaa aaab aaaaa aaaab"},
    {"((a*)(b*))*a",
     "a aa ba aaa aba baa bba aaaa aaba abaa abba baaa baba bbaa bbba aaaaa aaaba aabaa aabba "
     "abaaa ababa abbaa abbba baaaa baaba babaa babba bbaaa bbaba bbbaa bbbba"},
    {"(a?){2,3}b", "b ab aab aaab"},
    {"(a|b?){3,}",
     "- a b aa ab ba bb aaa aab aba abb baa bab bba bbb aaaa aaab aaba aabb abaa abab abba abbb "
     "baaa baab baba babb bbaa bbab bbba bbbb aaaaa aaaab aaaba aaabb aabaa aabab aabba aabbb "
     "abaaa abaab ababa ababb abbaa abbab abbba abbbb baaaa baaab baaba baabb babaa babab babba "
     "babbb bbaaa bbaab bbaba bbabb bbbaa bbbab bbbba bbbbb"},
    {"(a*b|)*",
     "- b ab bb aab abb bab bbb aaab aabb abab abbb baab babb bbab bbbb aaaab aaabb aabab aabbb "
     "abaab ababb abbab abbbb baaab baabb babab babbb bbaab bbabb bbbab bbbbb"},
    {"((a|)(b|)){0,2}", "- a b aa ab ba bb aab aba abb bab abab"},
    {"(ab|a)*(ba|b)?", "- a b aa ab ba aaa aab aba abb aaaa aaab aaba aabb abaa abab abba aaaaa "
                       "aaaab aaaba aaabb aabaa aabab aabba abaaa abaab ababa ababb"},
    {"(a*){2}|b+", "- a b aa bb aaa bbb aaaa bbbb aaaaa bbbbb"},
    {"(?:a?(?:b|)){1,}a{0,1}",
     "- a b aa ab ba bb aaa aab aba abb baa bab bba bbb aaaa aaab aaba aabb abaa abab abba abbb "
     "baaa baab baba babb bbaa bbab bbba bbbb aaaaa aaaab aaaba aaabb aabaa aabab aabba aabbb "
     "abaaa abaab ababa ababb abbaa abbab abbba abbbb baaaa baaab baaba baabb babaa babab babba "
     "babbb bbaaa bbaab bbaba bbabb bbbaa bbbab bbbba bbbbb"},
};

/* 1 when word (n bytes) is one of the space-separated words of list. */
static int listed(const char *list, const char *word, size_t n) {
    if (!n) word = "-", n = 1;
    for (const char *p = list; *p;) {
        size_t k = strcspn(p, " ");
        if (k == n && !memcmp(p, word, n)) return 1;
        p += k + (p[k] == ' ');
    }
    return 0;
}

static void test_exhaustive(void) {
    for (size_t i = 0; i < sizeof EXHAUSTIVE / sizeof *EXHAUSTIVE; i++) {
        strata_err err = {0};
        int rc;
        const char *re = EXHAUSTIVE[i].re;
        grammar *g = compile(re, strlen(re), &rc, &err);
        CHECK_MSG(g, "%s: %d %s", re, rc, err.msg);
        if (!g) continue;
        for (int len = 0; len <= 5; len++)
            for (int bits = 0; bits < 1 << len; bits++) {
                char w[6];
                for (int j = 0; j < len; j++) w[j] = bits >> j & 1 ? 'b' : 'a';
                int want = listed(EXHAUSTIVE[i].matches, w, (size_t)len);
                int got = grammar_oracle_accepts(g, (const uint8_t *)w, (size_t)len);
                CHECK_MSG(got == want, "%s on \"%.*s\": %d, want %d", re, len, w, got, want);
            }
        grammar_free(g);
    }
}

/* ---- errors ------------------------------------------------------------------------------ */

static const struct {
    const char *re;
    int code;
    size_t at; /* the offset the message names */
} ERRORS[] = {
    {"a(?=b)", STRATA_EUNSUPPORTED, 1},
    {"a(?!b)", STRATA_EUNSUPPORTED, 1},
    {"(?<=a)b", STRATA_EUNSUPPORTED, 0},
    {"(?<!a)b", STRATA_EUNSUPPORTED, 0},
    {"(a)\\1", STRATA_EUNSUPPORTED, 3},
    {"(?<n>a)\\k<n>", STRATA_EUNSUPPORTED, 7},
    {"(?P<n>a)(?P=n)", STRATA_EUNSUPPORTED, 8},
    {"\\bword\\b", STRATA_EUNSUPPORTED, 0},
    {"a\\B", STRATA_EUNSUPPORTED, 1},
    {"\\Aa", STRATA_EUNSUPPORTED, 0},
    {"a^b", STRATA_EUNSUPPORTED, 1},
    {"a$b", STRATA_EUNSUPPORTED, 1},
    {"(^a)", STRATA_EUNSUPPORTED, 1},
    {"a|^b", STRATA_EUNSUPPORTED, 2},
    {"(?i)abc", STRATA_EUNSUPPORTED, 0},
    {"(?i:a)", STRATA_EUNSUPPORTED, 0},
    {"(?>a)", STRATA_EUNSUPPORTED, 0},
    {"\\p{L}", STRATA_EUNSUPPORTED, 0},
    {"\\012", STRATA_EUNSUPPORTED, 0},
    {"\\uD800", STRATA_EUNSUPPORTED, 0},
    {"[^\\s\\S]", STRATA_EUNSUPPORTED, 0},
    {"(ab", STRATA_EINVALID, 0},
    {"a(b(c)", STRATA_EINVALID, 1},
    {"ab)", STRATA_EINVALID, 2},
    {"())", STRATA_EINVALID, 2},
    {"[abc", STRATA_EINVALID, 0},
    {"[]", STRATA_EINVALID, 0},
    {"[z-a]", STRATA_EINVALID, 1},
    {"[\\d-z]", STRATA_EINVALID, 1},
    {"[a-\\w]", STRATA_EINVALID, 1},
    {"*a", STRATA_EINVALID, 0},
    {"a|+", STRATA_EINVALID, 2},
    {"^*", STRATA_EINVALID, 1},
    {"{2}", STRATA_EINVALID, 0},
    {"a**", STRATA_EINVALID, 2},
    {"a{2}{3}", STRATA_EINVALID, 4},
    {"a*?+", STRATA_EINVALID, 3},
    {"a{3,2}", STRATA_EINVALID, 1},
    {"a{1001}", STRATA_EINVALID, 1},
    {"a{0,99999999999999999999}", STRATA_EINVALID, 1},
    {"\\", STRATA_EINVALID, 0},
    {"a\\x4", STRATA_EINVALID, 1},
    {"\\u12", STRATA_EINVALID, 0},
    {"\\u{110000}", STRATA_EINVALID, 0},
    {"\\u{}", STRATA_EINVALID, 0},
    {"(?P<>a)", STRATA_EINVALID, 0},
    {"(?P<1a>a)", STRATA_EINVALID, 0},
    {"(?%a)", STRATA_EINVALID, 0},
    {"a\xff", STRATA_EINVALID, 1},
};

static void test_errors(void) {
    for (size_t i = 0; i < sizeof ERRORS / sizeof *ERRORS; i++) {
        const char *re = ERRORS[i].re;
        strbuf b = {0};
        strata_err err = {0};
        int rc = constrain_regex_gbnf(re, strlen(re), "re", &b, &err);
        char at[32];
        snprintf(at, sizeof at, "offset %zu:", ERRORS[i].at);
        CHECK_MSG(rc == ERRORS[i].code, "%s: %d, want %d (%s)", re, rc, ERRORS[i].code, err.msg);
        if (strcmp(re, "[^\\s\\S]")) /* matches nothing: no offset to name */
            CHECK_MSG(strstr(err.msg, at), "%s: \"%s\" names no %s", re, err.msg, at);
        strbuf_free(&b);
    }
    strbuf b = {0};
    strata_err err = {0};
    CHECK_EQ_INT(constrain_regex_gbnf("a", 1, "", &b, &err), STRATA_EINVALID);
    CHECK_EQ_INT(constrain_regex_gbnf("a", 1, "a b", &b, &err), STRATA_EINVALID);
    CHECK_EQ_INT(constrain_regex_gbnf("a", 1, NULL, &b, &err), STRATA_EINVALID);
    strbuf_free(&b);
}

/* ---- limits ------------------------------------------------------------------------------ */

static char *repeat_text(const char *head, const char *unit, int n, const char *tail) {
    size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
    char *s = malloc(hl + ul * (size_t)n + tl + 1);
    if (!s) abort();
    memcpy(s, head, hl);
    for (int i = 0; i < n; i++) memcpy(s + hl + ul * (size_t)i, unit, ul);
    memcpy(s + hl + ul * (size_t)n, tail, tl + 1);
    return s;
}

static void test_limits(void) {
    strata_err err = {0};
    int rc;
    /* groups 256 deep compile (the rules nest no parentheses); 257 do not */
    char *open = repeat_text("", "(", 256, "x"), *re = repeat_text(open, ")", 256, "");
    grammar *g = compile(re, strlen(re), &rc, &err);
    CHECK(g && accepts(g, "x") && !accepts(g, "xx"));
    grammar_free(g);
    free(open);
    free(re);
    open = repeat_text("", "(?:", 257, "x");
    re = repeat_text(open, ")", 257, "");
    strbuf b = {0};
    CHECK_EQ_INT(constrain_regex_gbnf(re, strlen(re), "re", &b, &err), STRATA_EINVALID);
    strbuf_free(&b);
    free(open);
    free(re);
    /* nested bounds multiply nothing: each repetition is expanded in its own rule */
    g = compile("(a{1000}){1000}", 15, &rc, &err);
    CHECK(g != NULL);
    grammar_free(g);
    re = repeat_text("", "a{1000}", 100, "");
    g = compile(re, strlen(re), &rc, &err);
    CHECK(g != NULL);
    grammar_free(g);
    free(re);
    /* past what the parser would expand: refused here, with a message */
    re = repeat_text("", "a{1000}", 200, "");
    CHECK_EQ_INT(constrain_regex_gbnf(re, strlen(re), "re", &b, &err), STRATA_EINVALID);
    CHECK(strstr(err.msg, "too large") != NULL);
    strbuf_free(&b);
    free(re);
    /* a long run of optional parts, each loop rewritten, stays linear */
    re = repeat_text("(", "a?b?", 2000, ")*");
    b = (strbuf){0};
    CHECK(!constrain_regex_gbnf(re, strlen(re), "re", &b, &err));
    CHECK(b.len < 64 * strlen(re));
    strbuf_free(&b);
    free(re);
    re = repeat_text("(", "a?b?", 100, ")*");
    g = compile(re, strlen(re), &rc, &err);
    CHECK(g && accepts(g, "abba") && !accepts(g, "abc"));
    grammar_free(g);
    free(re);
    /* appended after what out already held; the buffer's limit comes back as ERANGE */
    b = (strbuf){0};
    strbuf_adds(&b, "x ::= \"x\"\n");
    CHECK(!constrain_regex_gbnf("(a|b)+", 6, "r", &b, &err));
    CHECK(!strcmp(b.p, "x ::= \"x\"\nr ::= r-1+\nr-1 ::= \"a\" | \"b\"\n"));
    strbuf_free(&b);
    b.max = 8;
    CHECK_EQ_INT(constrain_regex_gbnf("(a|b)+", 6, "r", &b, &err), STRATA_ERANGE);
    strbuf_free(&b);
}

/* Under a failing n-th allocation: STRATA_ENOMEM with a message and nothing leaked, until
 * no allocation fails and the output is the same. */
static void test_alloc_failures(void) {
    if (!alloc_hook_on()) return;
    static const char RE[] = "^(?:[a-z\\d._-]+|\"[^\"]*\")@((a?b?)*|[\\w-]{2,5}\\.){1,3}[^\\s]$";
    strata_err err = {0};
    strbuf want = {0};
    CHECK(!constrain_regex_gbnf(RE, sizeof RE - 1, "re", &want, &err));
    int fails = 0;
    for (long n = 1;; n++) {
        strbuf b = {0};
        alloc_hook_start_scope(n, ALLOC_HOOK_EXE);
        int rc = constrain_regex_gbnf(RE, sizeof RE - 1, "re", &b, &err);
        int same = !rc && b.len == want.len && !memcmp(b.p, want.p, b.len);
        strbuf_free(&b);
        int failed = alloc_hook_failed();
        long live = alloc_hook_live();
        alloc_hook_stop();
        CHECK_MSG(live == 0, "allocation %ld failed, %ld blocks leaked", n, live);
        if (!failed) {
            CHECK(same);
            break;
        }
        fails++;
        CHECK_MSG(rc == STRATA_ENOMEM && err.msg[0], "allocation %ld: %d %s", n, rc, err.msg);
    }
    CHECK(fails > 5);
    strbuf_free(&want);
}

int main(void) {
    RUN(test_table);
    RUN(test_exhaustive);
    RUN(test_errors);
    RUN(test_limits);
    RUN(test_alloc_failures);
    TEST_DONE();
}
