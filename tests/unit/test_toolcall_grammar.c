/* test_toolcall_grammar.c - server/toolcall_grammar.c and toolcall_grammar_gemma.c: the
 * grammars of forced tool calls, checked against the parser that reads the calls back
 * (server/toolcall.c), and the special-token opt-in of engine/constrain (Gemma 4 writes its
 * call markers as single special tokens).
 *
 * For the XML and Gemma 4 forms, on tools with string, bounded string, integer, number,
 * boolean, enum, type-list, array and object parameters, required and optional: random walks
 * through each grammar give texts the parser reads as calls of the right tools whose
 * arguments have the schema's types, bounds and keys; calls rendered by the real templates
 * (tests/data/chat_templates/real/) are accepted whole; broken calls are refused. Then a
 * small byte-level tokenizer with <|tool_call>, <tool_call|> and <|"|> as special tokens:
 * with CONSTRAIN_SPECIALS they are allowed exactly where the Earley oracle says their text
 * fits and accepted there; without it, never. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/constrain/constrain.h"
#include "engine/constrain/constrain_internal.h"
#include "engine/template/chat_template.h"
#include "engine/text/tokenizer.h"
#include "server/toolcall.h"
#include "server/toolcall_grammar.h"
#include "tests/test.h"
#include "tests/unit/grammar_oracle.h"

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"
    "\"type\":\"object\",\"properties\":{"
    "\"city\":{\"type\":\"string\",\"maxLength\":12},"
    "\"Days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":14},"
    "\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]},"
    "\"detail\":{\"type\":\"boolean\"},"
    "\"lat\":{\"type\":\"number\"},"
    "\"note\":{\"type\":\"string\"},"
    "\"level\":{\"type\":\"integer\",\"enum\":[1,2,3]},"
    "\"maybe\":{\"type\":[\"integer\",\"null\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":6},"
    "\"maxItems\":3},"
    "\"where\":{\"type\":\"object\",\"properties\":{\"zip\":{\"type\":\"string\","
    "\"minLength\":2,\"maxLength\":5},\"n\":{\"type\":\"integer\"}},\"required\":[\"zip\"]}},"
    "\"required\":[\"city\",\"Days\",\"unit\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"q\":{\"type\":\"string\",\"maxLength\":20},\"opts\":{"
    "\"type\":\"object\"}},\"required\":[\"q\"]}}},"
    /* Gemma only: the XML form types an untyped enum's value as text */
    "{\"type\":\"function\",\"function\":{\"name\":\"pick\",\"parameters\":{\"properties\":{"
    "\"v\":{\"enum\":[1,2.5,\"hi\",null,true,{\"k\":[\"x\"]}]}},\"required\":[\"v\"]}}}]";

/* ---- checking arguments against the schema ------------------------------------------- */

static size_t utf8_chars(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static int value_ok(const json_t *s, const json_t *v);

static int type_ok(const json_t *s, const char *t, const json_t *v) {
    const json_t *lo = json_object_get(s, "minimum"), *hi = json_object_get(s, "maximum");
    if (!strcmp(t, "string")) {
        if (!json_is_string(v)) return 0;
        size_t n = utf8_chars(json_string_value(v), json_string_length(v));
        const json_t *mx = json_object_get(s, "maxLength"), *mn = json_object_get(s, "minLength");
        return (!mx || n <= (size_t)json_integer_value(mx)) &&
               (!mn || !mx || n >= (size_t)json_integer_value(mn));
    }
    if (!strcmp(t, "integer"))
        return json_is_integer(v) && (!lo || json_integer_value(v) >= json_integer_value(lo)) &&
               (!hi || json_integer_value(v) <= json_integer_value(hi));
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "array")) {
        const json_t *mx = json_object_get(s, "maxItems"), *it = json_object_get(s, "items"), *x;
        size_t i;
        if (!json_is_array(v) || (mx && json_array_size(v) > (size_t)json_integer_value(mx)))
            return 0;
        json_array_foreach(v, i, x)
            if (it && !value_ok(it, x)) return 0;
        return 1;
    }
    if (!strcmp(t, "object")) {
        const json_t *props = json_object_get(s, "properties"), *r;
        const char *k;
        json_t *x;
        size_t i;
        if (!json_is_object(v)) return 0;
        if (!props) return 1;
        json_object_foreach((json_t *)v, k, x) {
            const json_t *ps = json_object_get(props, k);
            if (!ps || !value_ok(ps, x)) return 0;
        }
        json_array_foreach(json_object_get(s, "required"), i, r) {
            if (!json_object_get(v, json_string_value(r))) return 0;
        }
        return 1;
    }
    return 1;
}

static int value_ok(const json_t *s, const json_t *v) {
    const json_t *en = json_object_get(s, "enum"), *t = json_object_get(s, "type"), *x;
    size_t i;
    if (en) {
        json_array_foreach(en, i, x)
            if (json_equal((json_t *)x, (json_t *)v)) return 1;
        return 0;
    }
    if (json_is_string(t)) return type_ok(s, json_string_value(t), v);
    json_array_foreach(t, i, x)
        if (type_ok(s, json_string_value(x), v)) return 1;
    return !json_is_array(t);
}

/* The calls in text: how many parsed (-1: some text was content), each checked against
 * tools (only: the one tool allowed, or NULL). */
static int parse_calls(toolcall_format f, const json_t *tools, const char *text, size_t len,
                       const char *only, int *bad) {
    toolcall_parser *p = NULL;
    toolcall_delta d;
    strata_err err;
    toolcall_delta_init(&d);
    if (toolcall_parser_create(&p, f, tools, &err) || toolcall_feed(p, text, len, 1, &d, &err)) {
        *bad = 1;
        toolcall_parser_free(p);
        toolcall_delta_deinit(&d);
        return -1;
    }
    int n = d.content.len ? -1 : d.n_calls;
    for (int k = 0; k < d.n_calls; k++) {
        const json_t *params = NULL, *t;
        size_t i;
        json_array_foreach(tools, i, t) {
            const json_t *fn = json_object_get(t, "function");
            if (!strcmp(json_string_value(json_object_get(fn, "name")), d.calls[k].name))
                params = json_object_get(fn, "parameters");
        }
        json_t *args = json_loads(d.calls[k].arguments, JSON_ALLOW_NUL, NULL);
        if (!params || (only && strcmp(only, d.calls[k].name)) || !args ||
            !type_ok(params, "object", args)) {
            fprintf(stderr, "  call %s %s does not fit\n", d.calls[k].name, d.calls[k].arguments);
            *bad = 1;
        }
        json_decref(args);
    }
    toolcall_parser_free(p);
    toolcall_delta_deinit(&d);
    return n;
}

/* ---- random walks ------------------------------------------------------------------------- */

static grammar *make_grammar(toolcall_format f, const json_t *tools, const char *name, int single) {
    strbuf g = {0};
    strata_err err;
    grammar *gr = NULL;
    if (toolcall_grammar(f, tools, name, single, &g, &err)) {
        fprintf(stderr, "  toolcall_grammar: %s\n", err.msg);
        return NULL;
    }
    if (grammar_parse(&gr, g.p, g.len, &err)) fprintf(stderr, "  grammar: %s\n%s\n", err.msg, g.p);
    strbuf_free(&g);
    return gr;
}

/* Bytes a shortest-end search takes only where nothing else may come: each opens a
 * container, which multiplies the sets to search for nothing. */
static int costly(int b) { return b == '{' || b == '['; }

/* Appends to s (from n, at most cap) a short way from set to a complete set; returns the new
 * length, or 0 when the search found none. */
static size_t finish(gmatch *m, uint32_t set, uint8_t *s, size_t n, size_t cap) {
    enum { MAXQ = 1 << 18 };
    uint32_t *q = malloc(MAXQ * sizeof *q), *par = malloc(MAXQ * sizeof *par);
    uint8_t *by = malloc(MAXQ), *seen = calloc(MAXQ, 1); /* by set id */
    size_t head = 0, tail = 0, hit = SIZE_MAX;
    q[tail++] = set;
    for (; head < tail && hit == SIZE_MAX; head++) {
        uint32_t x = q[head], next[0xC0];
        if (gmatch_complete(m, x)) hit = head;
        /* ASCII and continuation bytes (to end a character under way): lead bytes would
         * multiply the sets for nothing */
        int cheap = 0;
        for (int b = 0; b < 0xC0; b++) {
            uint8_t c = (uint8_t)b;
            next[b] = gmatch_feed(m, x, &c, 1);
            cheap |= next[b] && !costly(b);
        }
        for (int b = 0; b < 0xC0 && tail < MAXQ && hit == SIZE_MAX; b++) {
            uint32_t y = next[b];
            if (!y || (cheap && costly(b)) || (y < MAXQ && seen[y])) continue;
            if (y < MAXQ) seen[y] = 1;
            q[tail] = y, par[tail] = (uint32_t)head, by[tail++] = (uint8_t)b;
        }
    }
    size_t k = 0;
    uint8_t path[4096];
    for (size_t i = hit; i != SIZE_MAX && i && k < sizeof path; i = par[i]) path[k++] = by[i];
    while (k && n < cap) s[n++] = path[--k];
    free(q);
    free(par);
    free(by);
    free(seen);
    return hit == SIZE_MAX ? 0 : n;
}

/* A random text of the grammar: random allowed bytes for a while, then the shortest end. */
static size_t walk(gmatch *m, uint8_t *s, size_t cap) {
    uint32_t set = gmatch_start(m);
    size_t n = 0, budget = 10 + rnd(250);
    while (n < budget) {
        uint8_t ok[256];
        int n_ok = 0;
        for (int b = 0; b < 256; b++) {
            uint8_t c = (uint8_t)b;
            if (gmatch_feed(m, set, &c, 1)) ok[n_ok++] = c;
        }
        int comp = gmatch_complete(m, set);
        if (!n_ok || (comp && rnd(6) == 0)) return n;
        s[n] = ok[rnd((uint32_t)n_ok)];
        set = gmatch_feed(m, set, s + n++, 1);
    }
    size_t r = finish(m, set, s, n, cap);
    if (!r) fprintf(stderr, "  no end after %.*s\n", (int)n, s);
    return r;
}

static void walks_for(toolcall_format f, const json_t *tools, const char *name, int single) {
    grammar *g = make_grammar(f, tools, name, single);
    CHECK(g != NULL);
    gmatch *m = NULL;
    if (!g || gmatch_create(&m, g)) {
        grammar_free(g);
        return;
    }
    int bad = 0, calls = 0;
    static uint8_t s[8192];
    for (int run = 0; run < 300 && !bad; run++) {
        size_t n = walk(m, s, sizeof s);
        CHECK(n > 0);
        int k = parse_calls(f, tools, (const char *)s, n, name, &bad);
        if (k < 1 || (single && k != 1)) bad = 1;
        if (bad)
            fprintf(stderr, "  %s: %d calls from %.*s\n", toolcall_format_name(f), k, (int)n, s);
        calls += k;
    }
    CHECK_MSG(!bad, "%s", toolcall_format_name(f));
    CHECK(calls >= 300);
    gmatch_free(m);
    grammar_free(g);
}

static void test_walks(void) {
    json_t *tools = json_loads(TOOLS, 0, NULL);
    CHECK(tools != NULL);
    json_t *xml_tools = json_array();
    for (size_t i = 0; i < 3; i++) json_array_append(xml_tools, json_array_get(tools, i));
    for (int i = 0; i < 2; i++) {
        toolcall_format f = i ? TOOLCALL_XML : TOOLCALL_GEMMA4;
        json_t *t = i ? xml_tools : tools;
        walks_for(f, t, NULL, 1);
        walks_for(f, t, NULL, 0);
        walks_for(f, t, "get_weather", 1);
        walks_for(f, t, "search", 0);
    }
    json_decref(xml_tools);
    json_decref(tools);
}

/* ---- calls as the real templates render them ------------------------------------------- */

/* The calls the template renders for an assistant turn with these calls: from the first
 * opening marker after the turn's start to the last closing one. */
static char *render_calls(const char *tmpl_path, const char *calls_json, const char *turn,
                          const char *open, const char *close) {
    FILE *fp = fopen(tmpl_path, "rb");
    static char src[65536];
    size_t n = fp ? fread(src, 1, sizeof src - 1, fp) : 0;
    if (fp) fclose(fp);
    src[n] = 0;
    chat_template *ct = NULL;
    strata_err err;
    char *out = NULL, *res = NULL;
    char msgs[4096];
    snprintf(msgs, sizeof msgs,
             "[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"\","
             "\"tool_calls\":%s}]",
             calls_json);
    json_t *m = json_loads(msgs, 0, NULL), *tools = json_loads(TOOLS, 0, NULL);
    if (!n || chat_template_parse(&ct, src, "<bos>", "<eos>", &err) ||
        chat_template_render(ct, m, tools, 0, NULL, &out, &err)) {
        fprintf(stderr, "  render: %s\n", n ? err.msg : tmpl_path);
    } else {
        char *a = strstr(out, turn), *b = NULL;
        a = a ? strstr(a, open) : NULL;
        b = a ? strstr(a, close) : NULL;
        for (char *c = b; c; c = strstr(c + 1, close)) b = c;
        if (b) res = strndup(a, (size_t)(b - a) + strlen(close));
    }
    free(out);
    chat_template_free(ct);
    json_decref(m);
    json_decref(tools);
    return res;
}

static const char *const CALLS[] = {
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":{"
    "\"city\":\"Paris\",\"Days\":3,\"unit\":\"celsius\"}}}]",
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":{"
    "\"city\":\"Tel Aviv\",\"Days\":14,\"unit\":\"fahrenheit\",\"lat\":-32.5,"
    "\"note\":\"two\\nlines <b>bold</b> 10 < 20\",\"level\":2,\"maybe\":7,"
    "\"tags\":[\"a\",\"bc\"],\"where\":{\"zip\":\"12345\",\"n\":5}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\",\"arguments\":{}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"arguments\":{\"q\":\"x y\","
    "\"opts\":{\"deep\":[1,{\"k\":\"v\"}],\"a\":\"b\"}}}}]",
};

static int grammar_takes(toolcall_format f, const char *text) {
    json_t *tools = json_loads(TOOLS, 0, NULL);
    grammar *g = make_grammar(f, tools, NULL, 0);
    int ok = g && grammar_oracle_accepts(g, (const uint8_t *)text, strlen(text));
    grammar_free(g);
    json_decref(tools);
    return ok;
}

static void test_rendered_calls(void) {
    for (size_t i = 0; i < sizeof CALLS / sizeof CALLS[0]; i++) {
        char *gem = render_calls("tests/data/chat_templates/real/gemma4.jinja", CALLS[i],
                                 "<|turn>model", "<|tool_call>", "<tool_call|>");
        char *xml = render_calls("tests/data/chat_templates/real/qwen35.jinja", CALLS[i],
                                 "<|im_start|>assistant", "<tool_call>", "</tool_call>");
        CHECK(gem && xml);
        CHECK_MSG(gem && grammar_takes(TOOLCALL_GEMMA4, gem), "%s", gem ? gem : "");
        CHECK_MSG(xml && grammar_takes(TOOLCALL_XML, xml), "%s", xml ? xml : "");
        free(gem);
        free(xml);
    }
    /* the Gemma form as the parser's comment and the template describe it, by hand */
    static const char *const good[] = {
        "<|tool_call>call:ping{}<tool_call|>",
        "<|tool_call>call:get_weather{city:<|\"|><|\"|>,Days:1,detail:true,level:3,maybe:null,"
        "tags:[],unit:<|\"|>celsius<|\"|>,where:{zip:<|\"|>ab<|\"|>}}<tool_call|>"
        "<|tool_call>call:search{opts:{},q:<|\"|>x<|\"|>}<tool_call|>",
    };
    static const char *const bad[] = {
        "<|tool_call>call:ping{} <tool_call|>",                                     /* space */
        "<|tool_call>call:search{q:<|\"|>x<|\"|>,opts:{}}<tool_call|>",             /* order */
        "<|tool_call>call:search{opts:{}}<tool_call|>",                             /* required */
        "<|tool_call>call:search{q:<|\"|>123456789012345678901<|\"|>}<tool_call|>", /* length */
        "<|tool_call>call:search{q:<|\"|>x<|\"|>,z:1}<tool_call|>",                 /* unknown */
        "<|tool_call>call:get_weather{city:<|\"|>a<|\"|>,Days:0,unit:<|\"|>celsius<|\"|>}"
        "<tool_call|>", /* minimum */
        "<|tool_call>call:get_weather{city:<|\"|>a<|\"|>,Days:2,unit:<|\"|>kelvin<|\"|>}"
        "<tool_call|>", /* enum */
        "<|tool_call>call:nope{}<tool_call|>",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECK_MSG(grammar_takes(TOOLCALL_GEMMA4, good[i]), "%s", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(!grammar_takes(TOOLCALL_GEMMA4, bad[i]), "%s", bad[i]);
}

/* Tool schemas the Gemma form cannot write are refused, naming the tool. */
static void test_refusals(void) {
    static const char *const tools[] = {
        "[{\"type\":\"function\",\"function\":{\"name\":\"a{b\",\"parameters\":{}}}]",
        "[{\"type\":\"function\",\"function\":{\"name\":\"t\",\"parameters\":{\"properties\":"
        "{\"x\":{\"enum\":[\"<|\\\"|>\"]}}}}}]",
        "[{\"type\":\"function\",\"function\":{\"name\":\"t\",\"parameters\":{\"properties\":"
        "{\"x\":{\"type\":\"array\",\"maxItems\":1000}}}}}]",
    };
    for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++) {
        json_t *t = json_loads(tools[i], 0, NULL);
        strbuf g = {0};
        strata_err err;
        int rc = toolcall_grammar(TOOLCALL_GEMMA4, t, NULL, 1, &g, &err);
        CHECK_MSG(rc == STRATA_EUNSUPPORTED && strstr(err.msg, "tool '"), "%d %s", rc, err.msg);
        strbuf_free(&g);
        json_decref(t);
    }
    json_t *t = json_loads(TOOLS, 0, NULL);
    strbuf g = {0};
    strata_err err;
    CHECK(toolcall_grammar(TOOLCALL_GEMMA4, t, "nope", 1, &g, &err) == STRATA_EINVALID);
    CHECK(toolcall_grammar(TOOLCALL_NONE, t, NULL, 1, &g, &err) == STRATA_EUNSUPPORTED);
    strbuf_free(&g);
    json_decref(t);
}

/* ---- special tokens ------------------------------------------------------------------------- */

static const char *const SPECIALS[] = {"<|tool_call>", "<tool_call|>", "<|\"|>", "<eos>"};
#define N_SPECIALS 4

/* A byte-level BPE over printable ASCII, space and newline, with the specials after it. */
static tokenizer *special_tokenizer(void) {
    json_t *vocab = json_object(), *added = json_array();
    int id = 0;
    for (int c = '!'; c <= '~'; c++) {
        char piece[2] = {(char)c, 0};
        json_object_set_new(vocab, piece, json_integer(id++));
    }
    json_object_set_new(vocab, "\xC4\xA0", json_integer(id++)); /* Ġ: space */
    json_object_set_new(vocab, "\xC4\x8A", json_integer(id++)); /* Ċ: newline */
    for (int k = 0; k < N_SPECIALS; k++) {
        json_object_set_new(vocab, SPECIALS[k], json_integer(id));
        json_array_append_new(added, json_pack("{s:i,s:s,s:b,s:b}", "id", id, "content",
                                               SPECIALS[k], "special", 1, "normalized", 0));
        id++;
    }
    json_t *tj = json_pack("{s:o,s:{s:s,s:b},s:{s:s},s:{s:s,s:o,s:[]}}", "added_tokens", added,
                           "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "decoder",
                           "type", "ByteLevel", "model", "type", "BPE", "vocab", vocab, "merges");
    char *s = json_dumps(tj, 0);
    tokenizer *t = NULL;
    strata_err err;
    if (!s || tok_load_json(&t, s, strlen(s), NULL, 0, &err))
        fprintf(stderr, "  tok: %s\n", err.msg);
    free(s);
    json_decref(tj);
    return t;
}

/* A walk over the tiny vocabulary: at each step the specials are allowed exactly where the
 * oracle says their text keeps a prefix (flags set) or never (flags 0). */
static void specials_walk(const constrain_vocab *v, const grammar *g, const char *gbnf, int flags,
                          int *bad, int *seen) {
    constrain *c = NULL;
    strata_err err;
    if (constrain_grammar_ex(&c, v, gbnf, strlen(gbnf), NULL, flags, &err)) {
        *bad = 1;
        return;
    }
    uint8_t allow[128], text[4096];
    size_t n = 0;
    for (int step = 0; step < 600 && constrain_complete(c) != 2; step++) {
        int k = constrain_mask(c, allow, v->n_ids);
        if (k <= 0) break;
        for (int s = 0; s < N_SPECIALS; s++) {
            int32_t id = v->n_ids - N_SPECIALS + s;
            size_t len = strlen(SPECIALS[s]);
            memcpy(text + n, SPECIALS[s], len);
            int fits = flags && grammar_oracle_prefix(g, text, n + len);
            if (allow[id] != fits) {
                fprintf(stderr, "  %s after %.*s: allowed %d, fits %d\n", SPECIALS[s], (int)n, text,
                        allow[id], fits);
                *bad = 1;
            }
            if (!fits && constrain_accept(c, id) == 0) *bad = 1;
        }
        /* a special half the time it may come, else any allowed token */
        int32_t pick = -1;
        for (int s = 0; s < N_SPECIALS && rnd(2); s++)
            if (allow[v->n_ids - N_SPECIALS + s]) pick = v->n_ids - N_SPECIALS + s;
        for (int r = (int)rnd((uint32_t)k); pick < 0; r--)
            for (int32_t id = 0; id < v->n_ids && pick < 0; id++)
                if (allow[id] && r-- == 0) pick = id;
        const char *piece = pick >= v->n_ids - N_SPECIALS ? SPECIALS[pick - (v->n_ids - N_SPECIALS)]
                                                          : (const char *)v->bytes + v->off[pick];
        size_t len = pick >= v->n_ids - N_SPECIALS ? strlen(piece) : v->len[pick];
        if (n + len > sizeof text - 16 || constrain_accept(c, pick)) break;
        *seen += pick >= v->n_ids - N_SPECIALS;
        memcpy(text + n, piece, len);
        n += len;
    }
    if (flags && constrain_complete(c) != 2) *bad = 1;
    constrain_free(c);
}

static void test_specials(void) {
    tokenizer *t = special_tokenizer();
    constrain_vocab *v = NULL;
    strata_err err;
    if (!t || constrain_vocab_build(&v, t, tok_vocab_size(t), &err)) {
        CHECK_MSG(0, "%s", t ? err.msg : "tokenizer");
        tok_free(t);
        return;
    }
    CHECK_EQ_INT(v->n_specials, N_SPECIALS);
    CHECK_EQ_INT(v->n_ids, 96 + N_SPECIALS);
    const char *tools_json =
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"properties\":{"
        "\"a\":{\"type\":\"string\",\"maxLength\":3},\"b\":{\"type\":\"string\"},"
        "\"c\":{\"type\":\"integer\"}},\"required\":[\"a\"]}}}]";
    json_t *tools = json_loads(tools_json, 0, NULL);
    strbuf gb = {0};
    grammar *g = NULL;
    CHECK(!toolcall_grammar(TOOLCALL_GEMMA4, tools, NULL, 1, &gb, &err));
    CHECK(!grammar_parse(&g, gb.p, gb.len, &err));
    int bad = 0, seen = 0;
    for (int run = 0; run < 40 && g; run++)
        specials_walk(v, g, gb.p, CONSTRAIN_SPECIALS, &bad, &seen);
    CHECK(!bad);
    CHECK(seen > 40); /* the markers were taken as special tokens */
    for (int run = 0; run < 5 && g; run++) specials_walk(v, g, gb.p, 0, &bad, &seen);
    CHECK(!bad);
    /* the same with constrain_grammar: no special, ever */
    constrain *c = NULL;
    uint8_t allow[128];
    CHECK(!constrain_grammar(&c, v, gb.p, gb.len, NULL, &err));
    CHECK(constrain_mask(c, allow, v->n_ids) > 0);
    for (int s = 0; s < N_SPECIALS; s++) CHECK(!allow[v->n_ids - N_SPECIALS + s]);
    CHECK(constrain_accept(c, v->n_ids - N_SPECIALS) == -1);
    constrain_free(c);
    grammar_free(g);
    strbuf_free(&gb);
    json_decref(tools);
    constrain_vocab_free(v);
    tok_free(t);
}

int main(void) {
    RUN(test_walks);
    RUN(test_rendered_calls);
    RUN(test_refusals);
    RUN(test_specials);
    TEST_DONE();
}
