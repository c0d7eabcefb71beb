/* test_toolcall.c - server/toolcall*.c: model output with tool calls into content and
 * OpenAI tool_calls.
 *
 * Outputs written as the real templates render calls (tests/data/chat_templates/real/:
 * Qwen3.5 and Nemotron 3 Nano's XML form, Gemma 4's own): single and several calls, text
 * before and after them, multi-line values, arguments typed by the tool schema, unknown
 * tools and parameters, malformed calls that must stay content byte for byte, and text
 * that only looks like a marker. Each case runs as one feed, cut at every point, cut at
 * pairs of points and fed a byte at a time: every way must give the same content and
 * calls. Then what a stream holds back and when it lets go, the call ids, the format's
 * choice on the three real templates, and every allocation failing in turn (the feed that
 * failed is retried and the result must be that of a clean run, with nothing leaked). */
#define ALLOC_HOOK_WITH_ASAN
#include "tests/alloc_hook.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/toolcall.h"
#include "tests/test.h"
#include "tests/test_file.h"

#define GOT_MAX 8

/* What a run produced, in fixed storage so that collecting it allocates nothing. */
typedef struct got {
    int rc;
    char content[4096];
    size_t len;
    int n, count;
    char name[GOT_MAX][64];
    char args[GOT_MAX][1024];
    char id[GOT_MAX][40];
} got;

static void collect(got *g, toolcall_delta *d) {
    if (g->len + d->content.len < sizeof g->content) {
        if (d->content.len) memcpy(g->content + g->len, d->content.p, d->content.len);
        g->len += d->content.len;
        g->content[g->len] = 0;
    } else {
        g->rc = -100;
    }
    for (int k = 0; k < d->n_calls; k++, g->n++) {
        if (g->n >= GOT_MAX || strlen(d->calls[k].name) >= sizeof g->name[0] ||
            strlen(d->calls[k].arguments) >= sizeof g->args[0]) {
            g->rc = -100;
            break;
        }
        strcpy(g->name[g->n], d->calls[k].name);
        strcpy(g->args[g->n], d->calls[k].arguments);
        strcpy(g->id[g->n], d->calls[k].id);
    }
    toolcall_delta_clear(d);
}

/* Feeds text cut at cuts[0..n_cuts) (ascending), the last piece final; final_apart: the
 * last piece is not final and an empty final feed follows. retry: a feed that fails with
 * STRATA_ENOMEM is fed again once (the allocation test). */
static void run(got *g, toolcall_format f, const json_t *tools, const char *text,
                const size_t *cuts, int n_cuts, int final_apart, int retry) {
    toolcall_parser *p = NULL;
    toolcall_delta d;
    strata_err err = {0};
    size_t len = strlen(text), from = 0;
    memset(g, 0, sizeof *g);
    toolcall_delta_init(&d);
    g->rc = toolcall_parser_create(&p, f, tools, &err);
    if (g->rc) return;
    for (int k = 0; k <= n_cuts + final_apart && !g->rc; k++) {
        size_t to = k < n_cuts ? cuts[k] : len;
        int final = k == n_cuts + final_apart;
        g->rc = toolcall_feed(p, text + from, to - from, final, &d, &err);
        if (g->rc == STRATA_ENOMEM && retry)
            g->rc = toolcall_feed(p, text + from, to - from, final, &d, &err);
        collect(g, &d);
        from = to;
    }
    g->count = toolcall_count(p);
    toolcall_parser_free(p);
    toolcall_delta_deinit(&d);
}

static int same(const got *a, const got *b) {
    if (a->rc != b->rc || a->len != b->len || memcmp(a->content, b->content, a->len) ||
        a->n != b->n || a->count != b->count)
        return 0;
    for (int k = 0; k < a->n; k++)
        if (strcmp(a->name[k], b->name[k]) || strcmp(a->args[k], b->args[k])) return 0;
    return 1;
}

static void show(const char *what, const got *g) {
    fprintf(stderr, "    %s: rc %d, content [%s], %d calls (count %d)\n", what, g->rc, g->content,
            g->n, g->count);
    for (int k = 0; k < g->n; k++) fprintf(stderr, "      %s %s\n", g->name[k], g->args[k]);
}

typedef struct tc_case {
    const char *what;
    toolcall_format f;
    const char *text, *content;
    const char *calls[GOT_MAX][2]; /* name, arguments; ends at a NULL name */
} tc_case;

static const char *TOOLS =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {"
    "\"type\": \"object\", \"properties\": {"
    "\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"},"
    "\"temp\": {\"type\": \"number\"}, \"metric\": {\"type\": \"boolean\"},"
    "\"opts\": {\"type\": \"object\"}, \"tags\": {\"type\": \"array\"},"
    "\"zip\": {\"type\": \"string\", \"description\": \"digits, kept as written\"},"
    "\"limit\": {\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"null\"}]},"
    "\"mixed\": {\"type\": [\"integer\", \"string\"]}, \"any\": {\"description\": \"no type\"}},"
    "\"required\": [\"city\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"write_file\", \"parameters\": {"
    "\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"},"
    "\"content\": {\"type\": \"string\"}}}}}]";

/* The XML form as the Qwen3.5 / Nemotron templates render it. */
#define CALL_OPEN(name) "<tool_call>\n<function=" name ">\n"
#define PARAM(name, value) "<parameter=" name ">\n" value "\n</parameter>\n"
#define CALL_CLOSE "</function>\n</tool_call>"
#define WEATHER CALL_OPEN("get_weather") PARAM("city", "Paris") CALL_CLOSE
#define Q "<|\"|>"
/* Malformed calls and text that only looks like a marker: the whole text comes back as
 * content, byte for byte, and no call. */
#define STAYS_CONTENT(name, format, output)                                                        \
    { .what = name, .f = format, .text = output, .content = output }

static const tc_case cases[] = {
    {"xml single call", TOOLCALL_XML, WEATHER, "", {{"get_weather", "{\"city\":\"Paris\"}"}}},
    {"xml text before a call",
     TOOLCALL_XML,
     "Let me check the weather.\n\n" WEATHER "\n",
     "Let me check the weather.\n\n",
     {{"get_weather", "{\"city\":\"Paris\"}"}}},
    {"xml several calls",
     TOOLCALL_XML,
     WEATHER "\n" CALL_OPEN("get_weather") PARAM("city", "Oslo") PARAM("days", "2") CALL_CLOSE
     "\n \n" CALL_OPEN("write_file") PARAM("path", "a.txt") CALL_CLOSE "\n",
     "",
     {{"get_weather", "{\"city\":\"Paris\"}"},
      {"get_weather", "{\"city\":\"Oslo\",\"days\":2}"},
      {"write_file", "{\"path\":\"a.txt\"}"}}},
    {"xml multi-line value keeps its own newlines",
     TOOLCALL_XML,
     CALL_OPEN("write_file") PARAM("path", "f.py")
         PARAM("content", "def f():\n    return 1\n\n# end\n") CALL_CLOSE,
     "",
     {{"write_file", "{\"path\":\"f.py\",\"content\":\"def f():\\n    return 1\\n\\n# end\\n\"}"}}},
    {"xml typed arguments",
     TOOLCALL_XML,
     CALL_OPEN("get_weather") PARAM("city", "42") PARAM("days", " 3 ") PARAM("temp", "21.5")
         PARAM("metric", "True") PARAM("opts", "{\"unit\": \"C\", \"hours\": [6, 12]}")
             PARAM("tags", "[\"a\", 0.1]") PARAM("zip", "02139") PARAM("limit", "None")
                 PARAM("mixed", "7") PARAM("any", "8") CALL_CLOSE,
     "",
     {{"get_weather",
       "{\"city\":\"42\",\"days\":3,\"temp\":21.5,\"metric\":true,"
       "\"opts\":{\"unit\": \"C\", \"hours\": [6, 12]},\"tags\":[\"a\", 0.1],\"zip\":\"02139\","
       "\"limit\":null,\"mixed\":7,\"any\":\"8\"}"}}},
    /* past jansson's range too: the server reads arguments back with it */
    {"xml values that do not read as their type stay strings",
     TOOLCALL_XML,
     CALL_OPEN("get_weather") PARAM("days", "three") PARAM("temp", "1,5") PARAM("metric", "yes")
         PARAM("opts", "{unit: C}") PARAM("tags", "a, b") PARAM("limit", "12")
             PARAM("mixed", "seven") CALL_CLOSE "\n" CALL_OPEN("get_weather") PARAM("days", "2.5")
                 PARAM("temp", "1e999") PARAM("limit", "99999999999999999999") CALL_CLOSE,
     "",
     {{"get_weather", "{\"days\":\"three\",\"temp\":\"1,5\",\"metric\":\"yes\","
                      "\"opts\":\"{unit: C}\",\"tags\":\"a, b\",\"limit\":12,"
                      "\"mixed\":\"seven\"}"},
      {"get_weather", "{\"days\":\"2.5\",\"temp\":\"1e999\","
                      "\"limit\":\"99999999999999999999\"}"}}},
    {"xml unknown tool and unknown parameter are strings",
     TOOLCALL_XML,
     CALL_OPEN("lookup") PARAM("q", "42") CALL_CLOSE "\n" CALL_OPEN("get_weather")
         PARAM("country", "true") PARAM("days", "1") CALL_CLOSE,
     "",
     {{"lookup", "{\"q\":\"42\"}"}, {"get_weather", "{\"country\":\"true\",\"days\":1}"}}},
    {"xml escapes, an empty value, no parameters",
     TOOLCALL_XML,
     CALL_OPEN("write_file") PARAM("content", "say \"hi\"\\\t\x01") PARAM("path", "")
         CALL_CLOSE CALL_OPEN("now") CALL_CLOSE,
     "",
     {{"write_file", "{\"content\":\"say \\\"hi\\\"\\\\\\t\\u0001\",\"path\":\"\"}"},
      {"now", "{}"}}},
    {"xml a value holding </parameter> itself",
     TOOLCALL_XML,
     CALL_OPEN("write_file") PARAM("content", "close with </parameter> here\n</parameter>x")
         CALL_CLOSE,
     "",
     {{"write_file", "{\"content\":\"close with </parameter> here\\n</parameter>x\"}"}}},
    {"xml text after the calls is content",
     TOOLCALL_XML,
     WEATHER "\nDone, see above.",
     "\nDone, see above.",
     {{"get_weather", "{\"city\":\"Paris\"}"}}},
    STAYS_CONTENT("xml missing </function> stays content", TOOLCALL_XML,
                  CALL_OPEN("get_weather") PARAM("city", "Paris") "</tool_call>\nok"),
    STAYS_CONTENT("xml a parameter given twice stays content (no argument object has a key twice)",
                  TOOLCALL_XML,
                  CALL_OPEN("get_weather") PARAM("city", "Paris")
                      PARAM("city", "Oslo") "</function>\n"
                                            "</tool_call>"),
    STAYS_CONTENT("gemma4 a key given twice stays content", TOOLCALL_GEMMA4,
                  "<|tool_call>call:f{a:1,a:2}<tool_call|>"),
    STAYS_CONTENT("xml wrong closing tag stays content", TOOLCALL_XML,
                  CALL_OPEN("get_weather") PARAM("city", "Paris") "</function>\n</tool>"),
    STAYS_CONTENT("xml unterminated at the end stays content", TOOLCALL_XML,
                  "Sure.\n" CALL_OPEN("get_weather") "<parameter=city>\nPar"),
    {"xml garbage inside stays content, a call after it is read",
     TOOLCALL_XML,
     "<tool_call>\nhello <function=x>\n</function>\n</tool_call>\n" WEATHER,
     "<tool_call>\nhello <function=x>\n</function>\n</tool_call>\n",
     {{"get_weather", "{\"city\":\"Paris\"}"}}},
    {"xml a marker inside a malformed call starts a call",
     TOOLCALL_XML,
     "<tool_call>\n" WEATHER,
     "<tool_call>\n",
     {{"get_weather", "{\"city\":\"Paris\"}"}}},
    {"xml blanks and a malformed call after a call are content",
     TOOLCALL_XML,
     WEATHER "\n\n<tool_call>\n<function=f>\noops",
     "\n\n<tool_call>\n<function=f>\noops",
     {{"get_weather", "{\"city\":\"Paris\"}"}}},
    STAYS_CONTENT("xml markers that are not calls", TOOLCALL_XML,
                  "Use <tool> or <tool_calls> or <function=f> tags; <tool_ca"),
    STAYS_CONTENT("xml a bad name stays content", TOOLCALL_XML,
                  "<tool_call>\n<function=get weather>\n</function>\n</tool_call>"),
    {"gemma single call",
     TOOLCALL_GEMMA4,
     "<|tool_call>call:get_weather{city:" Q "Paris" Q ",days:3}<tool_call|>",
     "",
     {{"get_weather", "{\"city\":\"Paris\",\"days\":3}"}}},
    {"gemma numbers, booleans, null, nesting",
     TOOLCALL_GEMMA4,
     "<|tool_call>call:f{a:1.5,b:-2,c:true,d:false,e:{x:" Q "y" Q ",z:[1,2,{w:None}]},f:[],g:{},"
     "h:1e-05,i:[" Q "p" Q "," Q "q" Q "]}<tool_call|>",
     "",
     {{"f", "{\"a\":1.5,\"b\":-2,\"c\":true,\"d\":false,\"e\":{\"x\":\"y\",\"z\":[1,2,{\"w\":null}]"
            "},\"f\":[],\"g\":{},\"h\":1e-05,\"i\":[\"p\",\"q\"]}"}}},
    {"gemma strings hold anything but the quote token",
     TOOLCALL_GEMMA4,
     "<|tool_call>call:write_file{content:" Q "line 1\nsay \"2\", {x}: [y] <tool_call|>" Q
     ",path:" Q "a.txt" Q "}<tool_call|>",
     "",
     {{"write_file", "{\"content\":\"line 1\\nsay \\\"2\\\", {x}: [y] <tool_call|>\","
                     "\"path\":\"a.txt\"}"}}},
    {"gemma text before, several calls, quoted keys, bare words",
     TOOLCALL_GEMMA4,
     "Sure.\n<|tool_call>call:now{}<tool_call|><|tool_call>call:set{" Q "my key" Q ":1, unit: "
     "celsius }<tool_call|>\n",
     "Sure.\n",
     {{"now", "{}"}, {"set", "{\"my key\":1,\"unit\":\"celsius\"}"}}},
    STAYS_CONTENT("gemma unterminated stays content", TOOLCALL_GEMMA4,
                  "<|tool_call>call:f{a:" Q "x" Q "}"),
    STAYS_CONTENT("gemma malformed calls stay content", TOOLCALL_GEMMA4,
                  "<|tool_call>f{a:1}<tool_call|> <|tool_call>call:f{a:1<tool_call|> "
                  "<|tool_call>call:f{a:1}<tool_call> <|tool_call>call:f{a 1}<tool_call|> "
                  "<|tool_call>call:f{a:[1,}<tool_call|>"),
    STAYS_CONTENT("gemma markers that are not calls", TOOLCALL_GEMMA4, "a <|tool|> b <|tool_call"),
    STAYS_CONTENT("none passes everything", TOOLCALL_NONE, "x " WEATHER),
};
#define N_CASES (int)(sizeof cases / sizeof *cases)

static json_t *tools;

static int matches_case(const got *g, const tc_case *c) {
    int n = 0;
    while (n < GOT_MAX && c->calls[n][0]) n++;
    if (g->rc || strcmp(g->content, c->content) || g->n != n || g->count != n) return 0;
    for (int k = 0; k < n; k++)
        if (strcmp(g->name[k], c->calls[k][0]) || strcmp(g->args[k], c->calls[k][1])) return 0;
    return 1;
}

static void test_cases_one_feed(void) {
    got g;
    for (int i = 0; i < N_CASES; i++) {
        run(&g, cases[i].f, tools, cases[i].text, NULL, 0, 0, 0);
        int ok = matches_case(&g, &cases[i]);
        CHECK_MSG(ok, "%s", cases[i].what);
        if (!ok) show("got", &g);
        for (int k = 0; k < g.n; k++) {
            json_error_t je;
            json_t *a = json_loads(g.args[k], 0, &je);
            CHECK_MSG(json_is_object(a), "%s: arguments %s are not a JSON object", cases[i].what,
                      g.args[k]);
            json_decref(a);
        }
    }
}

/* Every cut point, pairs of them (all on short texts, a fixed sample on long ones), a
 * byte at a time, and an empty final feed: all equal to one feed. */
static void test_cases_streamed(void) {
    got ref, g;
    size_t cuts[4096];
    for (int i = 0; i < N_CASES; i++) {
        const tc_case *c = &cases[i];
        size_t len = strlen(c->text);
        int bad = 0;
        run(&ref, c->f, tools, c->text, NULL, 0, 0, 0);
        for (size_t a = 0; a <= len && !bad; a++) {
            cuts[0] = a;
            run(&g, c->f, tools, c->text, cuts, 1, 0, 0);
            if (!same(&g, &ref)) bad = 1, fprintf(stderr, "    cut at %zu\n", a), show("got", &g);
            run(&g, c->f, tools, c->text, cuts, 1, 1, 0);
            if (!same(&g, &ref)) bad = 1, fprintf(stderr, "    cut at %zu + empty\n", a);
        }
        uint32_t lcg = 12345;
        for (size_t a = 1; a < len && !bad; a++) {
            for (size_t b = a + 1; b < len && !bad; b++) {
                lcg = lcg * 1664525u + 1013904223u;
                if (len > 120 && lcg >> 24 > 12) continue; /* about 1 in 20 pairs */
                cuts[0] = a, cuts[1] = b;
                run(&g, c->f, tools, c->text, cuts, 2, 0, 0);
                if (!same(&g, &ref)) bad = 1, fprintf(stderr, "    cuts at %zu, %zu\n", a, b);
            }
        }
        for (size_t a = 0; a + 1 < len && a < 4096; a++) cuts[a] = a + 1;
        run(&g, c->f, tools, c->text, cuts, (int)(len ? len - 1 : 0), 1, 0);
        if (!same(&g, &ref)) bad = 1, fprintf(stderr, "    a byte at a time\n"), show("got", &g);
        CHECK_MSG(!bad, "%s: a cut stream differs from one feed", c->what);
    }
}

/* What a stream sends before the output ends, and what it holds back. */
static void test_hold_back(void) {
    toolcall_parser *p = NULL;
    toolcall_delta d;
    strata_err err;
    toolcall_delta_init(&d);
#define FEED(s, fin) CHECK_EQ_INT(toolcall_feed(p, s, strlen(s), fin, &d, &err), 0)
#define CONTENT_IS(s)                                                                              \
    CHECK_MSG(!strcmp(d.content.len ? d.content.p : "", s), "[%s]",                                \
              d.content.len ? d.content.p : "")
    CHECK_EQ_INT(toolcall_parser_create(&p, TOOLCALL_XML, tools, &err), 0);
    FEED("Hello", 0);
    CONTENT_IS("Hello"); /* plain text goes at once */
    toolcall_delta_clear(&d);
    FEED(" world <tool", 0);
    CONTENT_IS(" world "); /* "<tool" may open a call */
    toolcall_delta_clear(&d);
    FEED("box>", 0);
    CONTENT_IS("<toolbox>");
    toolcall_delta_clear(&d);
    FEED("<tool_call>\n<function=get_weather>\n", 0);
    CONTENT_IS("");
    FEED("hello", 0); /* no tag where one belongs: content at once, not at the end */
    CONTENT_IS("<tool_call>\n<function=get_weather>\nhello");
    toolcall_delta_clear(&d);
    FEED(WEATHER, 0);
    CHECK(d.n_calls == 1 && toolcall_count(p) == 1); /* a call goes as soon as it closes */
    FEED("\n", 0);
    CONTENT_IS("");
    FEED("", 1);
    CONTENT_IS(""); /* the newline after the last call is not content */
    CHECK_EQ_INT(toolcall_feed(p, "x", 1, 1, &d, &err), STRATA_ESTATE);
    toolcall_parser_free(p);
    toolcall_delta_clear(&d);

    CHECK_EQ_INT(toolcall_parser_create(&p, TOOLCALL_GEMMA4, NULL, &err), 0);
    FEED("x <|tool_c", 0);
    CONTENT_IS("x ");
    FEED("all>call:f{a:" Q "1", 0);
    CONTENT_IS("x ");
    FEED(Q "}<tool_call", 0);
    CHECK_EQ_INT(d.n_calls, 0);
    FEED("|>", 0);
    CHECK(d.n_calls == 1 && !strcmp(d.calls[0].arguments, "{\"a\":\"1\"}"));
    toolcall_parser_free(p);
    toolcall_delta_deinit(&d);
#undef FEED
#undef CONTENT_IS
}

static void test_ids(void) {
    enum { N = 300 };
    static char ids[N][40];
    toolcall_parser *p = NULL;
    toolcall_delta d;
    strata_err err;
    const char *call = "<|tool_call>call:f{}<tool_call|>";
    int n = 0, ok = 1;
    toolcall_delta_init(&d);
    CHECK_EQ_INT(toolcall_parser_create(&p, TOOLCALL_GEMMA4, NULL, &err), 0);
    for (int k = 0; k < N; k++) {
        CHECK_EQ_INT(toolcall_feed(p, call, strlen(call), k == N - 1, &d, &err), 0);
        for (int j = 0; j < d.n_calls && n < N; j++) strcpy(ids[n++], d.calls[j].id);
        toolcall_delta_clear(&d);
    }
    CHECK_EQ_INT(n, N);
    CHECK_EQ_INT(toolcall_count(p), N);
    for (int k = 0; k < n; k++) {
        ok &= strlen(ids[k]) == 29 && !strncmp(ids[k], "call_", 5);
        for (int j = 5; j < 29; j++) ok &= isalnum((unsigned char)ids[k][j]) != 0;
        for (int j = 0; j < k; j++) ok &= strcmp(ids[k], ids[j]) != 0;
    }
    CHECK_MSG(ok, "ids are call_ + 24 alphanumerics, all different (first %s)", ids[0]);
    toolcall_parser_free(p);
    toolcall_delta_deinit(&d);
}

/* A value of half a megabyte fed three bytes at a time: a held call is parsed again at
 * each feed, and this only ends in time if that parse does not search the whole value
 * again each time (toolcall_cur's hint). */
static void test_long_value(void) {
    enum { BIG = 512 * 1024 };
    static const struct {
        toolcall_format f;
        const char *head, *tail, *name;
    } forms[] = {
        {TOOLCALL_XML, CALL_OPEN("write_file") "<parameter=content>\n",
         "\n</parameter>\n" CALL_CLOSE, "write_file"},
        {TOOLCALL_GEMMA4, "<|tool_call>call:write_file{content:" Q, Q "}<tool_call|>",
         "write_file"},
    };
    for (size_t k = 0; k < sizeof forms / sizeof *forms; k++) {
        size_t hl = strlen(forms[k].head), tl = strlen(forms[k].tail), n = hl + BIG + tl;
        char *text = malloc(n + 1);
        toolcall_parser *p = NULL;
        toolcall_delta d;
        strata_err err;
        int ok = text != NULL;
        toolcall_delta_init(&d);
        if (ok) {
            memcpy(text, forms[k].head, hl);
            for (size_t j = 0; j < BIG; j++) text[hl + j] = "ab</>\n x"[j % 8];
            memcpy(text + hl + BIG, forms[k].tail, tl + 1);
            ok = !toolcall_parser_create(&p, forms[k].f, NULL, &err);
        }
        for (size_t at = 0; ok && at < n; at += 3) {
            size_t piece = n - at < 3 ? n - at : 3;
            ok = !toolcall_feed(p, text + at, piece, at + piece == n, &d, &err);
        }
        ok = ok && d.n_calls == 1 && d.content.len == 0 && !strcmp(d.calls[0].name, forms[k].name);
        if (ok) {
            json_t *a = json_loads(d.calls[0].arguments, 0, NULL);
            const char *v = json_string_value(json_object_get(a, "content"));
            ok = v && strlen(v) == BIG && !memcmp(v, text + hl, BIG);
            json_decref(a);
        }
        CHECK_MSG(ok, "%s: a long value streamed", toolcall_format_name(forms[k].f));
        toolcall_parser_free(p);
        toolcall_delta_deinit(&d);
        free(text);
    }
}

static void test_format_pick(void) {
    static const struct {
        const char *path;
        toolcall_format f;
    } real[] = {
        {"tests/data/chat_templates/real/qwen35.jinja", TOOLCALL_XML},
        {"tests/data/chat_templates/real/nemotron3_nano.jinja", TOOLCALL_XML},
        {"tests/data/chat_templates/real/gemma4.jinja", TOOLCALL_GEMMA4},
        {"tests/data/chat_templates/qwen3/tokenizer_config.json", TOOLCALL_NONE}, /* JSON calls */
    };
    toolcall_format f;
    strata_err err = {0};
    for (size_t k = 0; k < sizeof real / sizeof *real; k++) {
        char *src = test_file_read(real[k].path, NULL);
        CHECK_MSG(src != NULL, "%s", real[k].path);
        f = (toolcall_format)-1;
        CHECK_EQ_INT(toolcall_format_pick("auto", "llama", src, &f, &err), 0);
        CHECK_MSG(f == real[k].f, "%s: %s", real[k].path, toolcall_format_name(f));
        free(src);
    }
    static const struct {
        const char *name, *model_type;
        toolcall_format f;
    } named[] = {
        {"auto", "qwen3_5", TOOLCALL_XML},
        {"auto", "qwen3_5_moe", TOOLCALL_XML},
        {"auto", "nemotron_h", TOOLCALL_XML},
        {NULL, "gemma4", TOOLCALL_GEMMA4},
        {"auto", "gemma4_text", TOOLCALL_GEMMA4},
        {"auto", "qwen3", TOOLCALL_NONE},
        {"auto", NULL, TOOLCALL_NONE},
        {"xml", "gemma4", TOOLCALL_XML},
        {"qwen3_coder", NULL, TOOLCALL_XML},
        {"gemma4", NULL, TOOLCALL_GEMMA4},
        {"none", "qwen3_5", TOOLCALL_NONE},
    };
    for (size_t k = 0; k < sizeof named / sizeof *named; k++) {
        f = (toolcall_format)-1;
        CHECK_EQ_INT(toolcall_format_pick(named[k].name, named[k].model_type, NULL, &f, &err), 0);
        CHECK_MSG(f == named[k].f, "%s / %s: %s", named[k].name, named[k].model_type,
                  toolcall_format_name(f));
    }
    f = TOOLCALL_GEMMA4;
    CHECK_EQ_INT(toolcall_format_pick("hermes", "qwen3_5", NULL, &f, &err), STRATA_EINVALID);
    CHECK(f == TOOLCALL_GEMMA4); /* untouched */
    CHECK_MSG(strstr(err.msg, "hermes") && strstr(err.msg, "auto, xml"), "%s", err.msg);
    CHECK(!strcmp(toolcall_format_name(TOOLCALL_XML), "xml"));

    toolcall_parser *p = NULL;
    CHECK_EQ_INT(toolcall_parser_create(&p, (toolcall_format)7, NULL, &err), STRATA_EINVALID);
    CHECK(p == NULL);
    toolcall_parser_free(NULL);
}

/* Every allocation call failing in turn, over a stream of both forms' calls: a failed
 * create leaves nothing, a failed feed leaves the parser and delta as they were (fed again
 * it gives what a clean run gives), and nothing leaks. */
static void test_alloc_failures(void) {
    static const struct {
        toolcall_format f;
        const char *text;
    } streams[] = {
        {TOOLCALL_XML, "Checking.\n\n" WEATHER "\n" CALL_OPEN("get_weather") PARAM("days", "2")
                           PARAM("opts", "{\"a\": 1}") CALL_CLOSE "\n<tool_call>bad"},
        {TOOLCALL_GEMMA4, "Hi <|tool_call>call:f{a:[1,{b:" Q "c" Q "}],d:true}<tool_call|>"
                          "<|tool_call>call:g{}<tool_call|> <|tool_call>x"},
    };
    if (!alloc_hook_on()) {
        fprintf(stderr, "    (no allocation hook in this build: skipped)\n");
        return;
    }
    for (size_t s = 0; s < sizeof streams / sizeof *streams; s++) {
        size_t cuts[256], len = strlen(streams[s].text);
        int n_cuts = 0;
        for (size_t a = 7; a < len && n_cuts < 256; a += 7) cuts[n_cuts++] = a;
        got ref, g;
        run(&ref, streams[s].f, tools, streams[s].text, cuts, n_cuts, 0, 0);
        CHECK_EQ_INT(ref.rc, 0);
        int bad = 0, runs = 0;
        for (long n = 1; n < 100000 && !bad; n++, runs++) {
            alloc_hook_start(n);
            run(&g, streams[s].f, tools, streams[s].text, cuts, n_cuts, 0, 1);
            alloc_hook_stop();
            long live = alloc_hook_live();
            int hit = alloc_hook_failed();
            if (live) bad = 1, fprintf(stderr, "    fail at %ld: %ld blocks leaked\n", n, live);
            if (g.rc == STRATA_ENOMEM && hit) continue; /* the create failed */
            if (!same(&g, &ref)) bad = 1, fprintf(stderr, "    fail at %ld\n", n), show("got", &g);
            if (!hit) break;
        }
        CHECK_MSG(!bad, "%s stream under failing allocations", toolcall_format_name(streams[s].f));
        CHECK_MSG(runs > 5, "only %d allocation calls", runs);
    }
}

int main(void) {
    json_error_t je;
    tools = json_loads(TOOLS, 0, &je);
    if (!tools) {
        fprintf(stderr, "tools: %s\n", je.text);
        return 1;
    }
    RUN(test_cases_one_feed);
    RUN(test_cases_streamed);
    RUN(test_hold_back);
    RUN(test_ids);
    RUN(test_long_value);
    RUN(test_format_pick);
    RUN(test_alloc_failures);
    json_decref(tools);
    TEST_DONE();
}
