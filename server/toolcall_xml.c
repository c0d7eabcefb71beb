/* toolcall_xml.c - the XML form of a tool call (Qwen3.5 and Nemotron 3 Nano; vLLM's
 * "qwen3_coder"), with its arguments typed by the request's tool schema.
 *
 * The templates render a call as
 *   <tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n...</function>\n</tool_call>
 * with VALUE the argument as text (a string as is, anything else as JSON or Python's str()),
 * so the newline after <parameter=ARG> and the one before </parameter> are the template's,
 * not the value's. Whitespace between the tags is accepted; anything else where a tag
 * belongs makes the call malformed. This reads calls, it does not accept every variant
 * vLLM's recovery heuristics do (a missing </parameter> or </function> is malformed). */
#include <string.h>

#include "server/toolcall_internal.h"

#define PARAM_OPEN "<parameter="
#define PARAM_CLOSE "</parameter>"
#define FUNC_CLOSE "</function>"

/* The JSON schema types an argument may take, in the order the schema lists them. */
enum { XT_STRING, XT_INTEGER, XT_NUMBER, XT_BOOLEAN, XT_NULL, XT_OBJECT, XT_ARRAY, XT_N };
static const char *const xt_names[XT_N] = {"string", "integer", "number", "boolean",
                                           "null",   "object",  "array"};
#define TYPES_MAX 8

/* properties of the tool named name[0..len) in tools, or NULL (no such tool or schema). */
static const json_t *tool_props(const json_t *tools, const char *name, size_t len) {
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        const json_t *nm = json_object_get(fn, "name");
        if (json_is_string(nm) && json_string_length(nm) == len &&
            !memcmp(json_string_value(nm), name, len))
            return json_object_get(json_object_get(fn, "parameters"), "properties");
    }
    return NULL;
}

static void add_type(int *types, int *nt, const json_t *name) {
    if (!json_is_string(name) || *nt >= TYPES_MAX) return;
    for (int k = 0; k < XT_N; k++)
        if (!strcmp(json_string_value(name), xt_names[k])) types[(*nt)++] = k;
}

/* A "type" that is a name or a list of names. */
static void add_types(int *types, int *nt, const json_t *type) {
    size_t i;
    const json_t *v;
    if (json_is_array(type)) {
        json_array_foreach(type, i, v) add_type(types, nt, v);
    } else {
        add_type(types, nt, type);
    }
}

/* The types the schema prop allows: its "type", or its anyOf / oneOf alternatives'
 * (the form pydantic writes an Optional[int] in). */
static int prop_types(const json_t *prop, int *types) {
    int nt = 0;
    size_t i;
    const json_t *alt;
    if (json_object_get(prop, "type")) {
        add_types(types, &nt, json_object_get(prop, "type"));
        return nt;
    }
    json_array_foreach(json_object_get(prop, "anyOf"), i, alt) {
        add_types(types, &nt, json_object_get(alt, "type"));
    }
    json_array_foreach(json_object_get(prop, "oneOf"), i, alt) {
        add_types(types, &nt, json_object_get(alt, "type"));
    }
    return nt;
}

static int ieq(const char *s, size_t n, const char *lit) {
    if (strlen(lit) != n) return 0;
    for (size_t k = 0; k < n; k++)
        if ((s[k] | 0x20) != lit[k]) return 0;
    return 1;
}

/* Appends the argument v[0..n) typed by its schema prop (NULL: none). The first type it
 * reads as wins; a string, or no type it reads as, keeps the text exactly. A nullable
 * argument written null or None (Python's str() of it, which the templates render) is
 * null. Numbers, objects and arrays are copied as written once checked to be JSON. */
static int add_value(strbuf *b, const json_t *prop, const char *v, size_t n) {
    int types[TYPES_MAX], nt = prop ? prop_types(prop, types) : 0, integral;
    size_t tn = n;
    const char *t = toolcall_json_trim(v, &tn);
    for (int k = 0; k < nt; k++)
        if (types[k] == XT_NULL && (ieq(t, tn, "null") || ieq(t, tn, "none")))
            return strbuf_adds(b, "null");
    for (int k = 0; k < nt; k++) {
        switch (types[k]) {
        case XT_STRING: return toolcall_json_add_string(b, v, n);
        case XT_INTEGER:
            if (toolcall_json_number(t, tn, &integral) && integral) return strbuf_add(b, t, tn);
            break;
        case XT_NUMBER:
            if (toolcall_json_number(t, tn, &integral)) return strbuf_add(b, t, tn);
            break;
        case XT_BOOLEAN:
            if (ieq(t, tn, "true")) return strbuf_adds(b, "true");
            if (ieq(t, tn, "false")) return strbuf_adds(b, "false");
            break;
        case XT_OBJECT:
        case XT_ARRAY:
            if (tn && t[0] == (types[k] == XT_OBJECT ? '{' : '[') && toolcall_json_valid(t, tn))
                return strbuf_add(b, t, tn);
            break;
        }
    }
    return toolcall_json_add_string(b, v, n);
}

/* The value after <parameter=ARG>: up to the first </parameter> that a tag follows (after
 * whitespace), the next <parameter= or </function>, so a value may contain the text
 * "</parameter>" itself. *v, *n: the value without the template's two newlines. */
static int param_value(toolcall_cur *c, size_t *v, size_t *n) {
    size_t start = c->i, from;
    if (start >= c->n) return toolcall_cur_out(c);
    if (c->s[start] == '\n') start++;
    for (from = toolcall_cur_resume(c, start);;) {
        const char *p = memmem(c->s + from, c->n - from, PARAM_CLOSE, strlen(PARAM_CLOSE));
        if (!p) return toolcall_cur_wait(c, start, toolcall_cur_tail(c, from, strlen(PARAM_CLOSE)));
        size_t end = (size_t)(p - c->s);
        toolcall_cur look = *c;
        look.i = end + strlen(PARAM_CLOSE);
        toolcall_cur_ws(&look);
        int a = toolcall_cur_at(&look, look.i, PARAM_OPEN);
        int f = toolcall_cur_at(&look, look.i, FUNC_CLOSE);
        if (a == 1 || f == 1) {
            *v = start;
            *n = end - start;
            if (*n && c->s[end - 1] == '\n') --*n;
            c->i = end + strlen(PARAM_CLOSE);
            return TOOLCALL_DONE;
        }
        /* a tag may still follow: only the end of the output says it will not */
        if ((a < 0 || f < 0) && !c->final) return toolcall_cur_wait(c, start, end);
        from = end + 1;
    }
}

int toolcall_xml_parse(toolcall_cur *c, const json_t *tools, strbuf *name, strbuf *args) {
    const json_t *props = NULL;
    size_t at, len, v, vn;
    char key[TOOLCALL_NAME_MAX + 1];
    int r, n_args = 0;
    if ((r = toolcall_cur_lit(c, "<tool_call>")) != TOOLCALL_DONE) return r;
    toolcall_cur_ws(c);
    if ((r = toolcall_cur_lit(c, "<function=")) != TOOLCALL_DONE) return r;
    if ((r = toolcall_cur_name(c, '>', &at, &len)) != TOOLCALL_DONE) return r;
    c->i++;
    if (name) {
        props = tool_props(tools, c->s + at, len);
        if ((r = strbuf_add(name, c->s + at, len)) || (r = strbuf_addc(args, '{'))) return r;
    }
    for (;;) {
        toolcall_cur_ws(c);
        int a = toolcall_cur_at(c, c->i, PARAM_OPEN), f = toolcall_cur_at(c, c->i, FUNC_CLOSE);
        if (f == 1) break;
        if (a != 1) return a < 0 || f < 0 ? toolcall_cur_out(c) : TOOLCALL_BAD;
        c->i += strlen(PARAM_OPEN);
        if ((r = toolcall_cur_name(c, '>', &at, &len)) != TOOLCALL_DONE) return r;
        c->i++;
        if ((r = param_value(c, &v, &vn)) != TOOLCALL_DONE) return r;
        if (!args) continue;
        memcpy(key, c->s + at, len);
        key[len] = 0;
        if ((n_args++ && (r = strbuf_addc(args, ','))) ||
            (r = toolcall_json_add_string(args, key, len)) || (r = strbuf_addc(args, ':')) ||
            (r = add_value(args, json_object_get(props, key), c->s + v, vn)))
            return r;
    }
    c->i += strlen(FUNC_CLOSE);
    toolcall_cur_ws(c);
    if ((r = toolcall_cur_lit(c, "</tool_call>")) != TOOLCALL_DONE) return r;
    if (args && (r = strbuf_addc(args, '}'))) return r;
    return TOOLCALL_DONE;
}
