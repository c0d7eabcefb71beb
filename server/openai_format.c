/* openai_format.c - the request fields that constrain the output's form, read into one
 * grammar: OpenAI's response_format (json_object, json_schema) and tool_choice (required,
 * a named function); vLLM's guided_json / guided_regex / guided_choice / guided_grammar and
 * structured_outputs {json, regex, choice, grammar, json_object}; llama-server's grammar
 * and json_schema.
 *
 * Everything but json_object and tool_choice becomes GBNF text here (JSON schemas through
 * server/schema_gbnf.c, regular expressions through engine/constrain), so the engine runs
 * one matcher for all of them; the forced tool call's grammar needs the model's tool-call
 * format and is made in gen_build.c. Asking for two forms at once is a 400: there is no
 * single answer that is both. */
#include <string.h>

#include "engine/constrain/constrain.h"
#include "server/gbnf_text.h"
#include "server/openai.h"
#include "server/schema_gbnf.h"

#define BAD(e, param, ...)                                                                         \
    openai_error_set(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

/* GBNF text whose root matches one of the strings of choices. */
static int choice_gbnf(json_t *choices, strbuf *out, const char *param, openai_error *e) {
    size_t i;
    json_t *c;
    if (!json_is_array(choices) || !json_array_size(choices))
        return BAD(e, param, "'%s' must be a non-empty list of strings", param);
    if (strbuf_adds(out, "root ::= ")) goto nomem;
    json_array_foreach(choices, i, c) {
        if (!json_is_string(c))
            return BAD(e, param, "'%s' must be a non-empty list of strings", param);
        if ((i && strbuf_adds(out, " | ")) ||
            gbnf_literal(out, json_string_value(c), json_string_length(c)))
            goto nomem;
    }
    if (strbuf_addc(out, '\n')) goto nomem;
    return 0;
nomem:
    return openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

/* A schema given as an object, or as JSON text (vLLM accepts both). */
static int schema_of(json_t *v, json_t **out, const char *param, openai_error *e) {
    if (json_is_string(v)) {
        json_error_t je;
        *out = json_loadb(json_string_value(v), json_string_length(v), 0, &je);
        if (!*out) return BAD(e, param, "'%s' is not valid JSON: %.200s", param, je.text);
        return 0;
    }
    if (!json_is_object(v) && !json_is_boolean(v))
        return BAD(e, param, "'%s' must be a JSON schema (an object)", param);
    *out = json_incref(v);
    return 0;
}

static int schema_to(json_t *v, strbuf *out, const char *param, openai_error *e) {
    json_t *schema;
    int rc = schema_of(v, &schema, param, e);
    if (rc) return rc;
    strata_err err = {0};
    rc = schema_gbnf_root(schema, out, &err);
    json_decref(schema);
    if (rc) openai_error_from_strata(e, &err, param);
    return rc ? -e->status : 0;
}

static int regex_to(json_t *v, strbuf *out, const char *param, openai_error *e) {
    if (!json_is_string(v)) return BAD(e, param, "'%s' must be a string", param);
    strata_err err = {0};
    if (strbuf_adds(out, "root ::= re\n") ||
        constrain_regex_gbnf(json_string_value(v), json_string_length(v), "re", out, &err)) {
        if (!err.code) err.code = STRATA_ENOMEM, strcpy(err.msg, "out of memory");
        openai_error_from_strata(e, &err, param);
        return -e->status;
    }
    return 0;
}

static int grammar_to(json_t *v, strbuf *out, const char *param, openai_error *e) {
    if (!json_is_string(v) || !json_string_length(v))
        return BAD(e, param, "'%s' must be a non-empty GBNF grammar", param);
    strata_err err = {0};
    if (constrain_grammar_check(json_string_value(v), json_string_length(v), &err)) {
        openai_error_from_strata(e, &err, param);
        return -e->status;
    }
    if (strbuf_add(out, json_string_value(v), json_string_length(v)))
        return openai_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

/* response_format: text (nothing), json_object (with llama-server's optional schema),
 * json_schema. *set: 1 when it asked for a form. */
static int response_format(openai_request *r, json_t *v, strbuf *g, openai_error *e) {
    const char *P = "response_format";
    json_t *t = json_object_get(v, "type");
    if (!json_is_object(v) || !json_is_string(t))
        return BAD(e, P, "'response_format' must be an object with a type");
    const char *type = json_string_value(t);
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        json_t *s = json_object_get(v, "schema");
        if (s && !json_is_null(s)) return schema_to(s, g, P, e);
        r->json_object = 1;
        return 0;
    }
    if (!strcmp(type, "json_schema")) {
        json_t *js = json_object_get(v, "json_schema");
        if (!json_is_object(js))
            return BAD(e, P, "response_format json_schema needs a 'json_schema' object");
        json_t *s = json_object_get(js, "schema");
        if (!s || json_is_null(s))
            return BAD(e, P, "response_format json_schema needs 'json_schema.schema'");
        return schema_to(s, g, P, e);
    }
    return BAD(e, P,
               "response_format type '%.40s' is not supported (text, json_object or "
               "json_schema)",
               type);
}

/* vLLM's structured_outputs object: exactly one of json, regex, choice, grammar,
 * json_object. */
static int structured_outputs(openai_request *r, json_t *v, strbuf *g, openai_error *e) {
    const char *P = "structured_outputs";
    if (!json_is_object(v)) return BAD(e, P, "'structured_outputs' must be an object");
    static const char *const keys[] = {"json", "regex", "choice", "grammar", "json_object"};
    const char *key = NULL;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        json_t *x = json_object_get(v, keys[i]);
        if (!x || json_is_null(x) || (i == 4 && json_is_false(x))) continue;
        if (key)
            return BAD(e, P,
                       "'structured_outputs' may set only one of json, regex, "
                       "choice, grammar, json_object");
        key = keys[i];
    }
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (!json_is_null(x) && (!strcmp(k, "structural_tag") || !strcmp(k, "whitespace_pattern")))
            return BAD(e, P, "structured_outputs.%s is not supported", k);
    }
    if (!key) return 0;
    x = json_object_get(v, key);
    if (!strcmp(key, "json")) return schema_to(x, g, P, e);
    if (!strcmp(key, "regex")) return regex_to(x, g, P, e);
    if (!strcmp(key, "choice")) return choice_gbnf(x, g, P, e);
    if (!strcmp(key, "grammar")) return grammar_to(x, g, P, e);
    if (!json_is_true(x)) return BAD(e, P, "structured_outputs.json_object must be true");
    r->json_object = 1;
    return 0;
}

static int get_parallel(json_t *root, int *out, openai_error *e) {
    json_t *v = json_object_get(root, "parallel_tool_calls");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v))
        return BAD(e, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    *out = json_is_true(v);
    return 0;
}

/* tool_choice: "none", "auto", "required" or {"type":"function","function":{"name"}}. */
static int tool_choice(openai_request *r, json_t *root, openai_error *e) {
    json_t *v = json_object_get(root, "tool_choice");
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (!strcmp(s, "none")) r->tool_choice_none = 1;
        else if (!strcmp(s, "required")) r->tool_choice_required = 1;
        else if (strcmp(s, "auto"))
            return BAD(e, "tool_choice",
                       "'tool_choice' must be \"none\", \"auto\", \"required\" "
                       "or a named function");
    } else {
        json_t *fn = json_object_get(v, "function");
        json_t *name = json_object_get(fn, "name");
        if (!json_is_object(v) || !json_is_string(name))
            return BAD(e, "tool_choice",
                       "a named 'tool_choice' is {\"type\": \"function\", "
                       "\"function\": {\"name\": ...}}");
        r->tool_choice_name = json_string_value(name);
        r->tool_choice_required = 1;
    }
    if (!r->tool_choice_required) return 0;
    int parallel = 1, rc = get_parallel(root, &parallel, e);
    if (rc) return rc;
    r->tool_choice_single = !parallel || r->tool_choice_name;
    if (r->kind != OPENAI_CHAT || !r->tools)
        return BAD(e, "tool_choice", "tool_choice '%s' needs 'tools'",
                   r->tool_choice_name ? r->tool_choice_name : "required");
    if (r->tool_choice_name) {
        size_t i;
        json_t *t;
        json_array_foreach(r->tools, i, t) {
            const char *n =
                json_string_value(json_object_get(json_object_get(t, "function"), "name"));
            if (n && !strcmp(n, r->tool_choice_name)) return 0;
        }
        return BAD(e, "tool_choice", "tool_choice names '%.100s', which is not among 'tools'",
                   r->tool_choice_name);
    }
    return 0;
}

typedef int (*form_fn)(openai_request *, json_t *, strbuf *, const char *, openai_error *);

static int f_schema(openai_request *r, json_t *v, strbuf *g, const char *p, openai_error *e) {
    (void)r;
    return schema_to(v, g, p, e);
}
static int f_regex(openai_request *r, json_t *v, strbuf *g, const char *p, openai_error *e) {
    (void)r;
    return regex_to(v, g, p, e);
}
static int f_choice(openai_request *r, json_t *v, strbuf *g, const char *p, openai_error *e) {
    (void)r;
    return choice_gbnf(v, g, p, e);
}
static int f_grammar(openai_request *r, json_t *v, strbuf *g, const char *p, openai_error *e) {
    (void)r;
    return grammar_to(v, g, p, e);
}
static int f_response(openai_request *r, json_t *v, strbuf *g, const char *p, openai_error *e) {
    (void)p;
    return response_format(r, v, g, e);
}
static int f_structured(openai_request *r, json_t *v, strbuf *g, const char *p, openai_error *e) {
    (void)p;
    return structured_outputs(r, v, g, e);
}

int openai_parse_format(openai_request *r, json_t *root, openai_error *e) {
    static const struct {
        const char *name;
        form_fn fn;
    } forms_tab[] = {{"response_format", f_response},
                     {"structured_outputs", f_structured},
                     {"guided_json", f_schema},
                     {"guided_regex", f_regex},
                     {"guided_choice", f_choice},
                     {"guided_grammar", f_grammar},
                     {"json_schema", f_schema},
                     {"grammar", f_grammar},
                     {"regex", f_regex}};
    strbuf g = {0}, tmp = {0};
    int rc = 0, forms = 0;
    const char *param = NULL;
    for (size_t i = 0; i < sizeof forms_tab / sizeof forms_tab[0] && !rc; i++) {
        json_t *v = json_object_get(root, forms_tab[i].name);
        /* llama-server clients send "grammar": "" to mean none */
        if (!v || json_is_null(v) || (json_is_string(v) && !json_string_length(v))) continue;
        int was = r->json_object;
        strbuf_reset(&tmp);
        if ((rc = forms_tab[i].fn(r, v, &tmp, forms_tab[i].name, e))) break;
        if (!tmp.len && r->json_object == was) continue; /* "text", or nothing asked */
        if (forms++) {
            rc = BAD(e, forms_tab[i].name,
                     "only one output format may be asked for: '%s' and '%s' both constrain "
                     "the output",
                     param, forms_tab[i].name);
            break;
        }
        param = forms_tab[i].name;
        strbuf t = g;
        g = tmp, tmp = t;
    }
    strbuf_free(&tmp);
    if (!rc) rc = tool_choice(r, root, e);
    if (!rc && r->tool_choice_required && forms)
        rc = BAD(e, "tool_choice", "a forced tool call cannot be combined with '%s'", param);
    if (rc || !g.len) {
        strbuf_free(&g);
        if (rc) r->json_object = 0;
        return rc;
    }
    r->grammar = g.p;
    r->grammar_len = g.len;
    r->grammar_param = param;
    return 0;
}
