/* toolcall_grammar.c - forced tool calls as a grammar, in the XML form Qwen3.5's and
 * Nemotron's templates teach (server/toolcall_xml.c reads it back):
 *   <tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n...</function>\n</tool_call>
 * calls separated by one newline. The parameters come in the schema's properties order,
 * the required ones always, the others optionally. A string value is raw text up to the
 * closing tag (an enum of strings: one of its members; with maxLength: that many
 * characters, none of them '<'); any other value is JSON valid for
 * its schema (server/schema_gbnf.c), which is how the XML parser types it. Gemma 4's form
 * is toolcall_grammar_gemma.c's. */
#include <string.h>

#include "server/gbnf_text.h"
#include "server/schema_gbnf.h"
#include "server/toolcall_grammar.h"
#include "server/toolcall_grammar_internal.h"

int toolcall_grammar_required(const json_t *params, const char *key) {
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(params, "required"), i, r) {
        if (json_is_string(r) && !strcmp(json_string_value(r), key)) return 1;
    }
    return 0;
}

/* An enum whose members are all strings: the value is one of them, raw. */
static int string_enum(const json_t *prop) {
    json_t *en = json_object_get(prop, "enum"), *x;
    size_t i;
    if (!json_is_array(en) || !json_array_size(en)) return 0;
    json_array_foreach(en, i, x) {
        if (!json_is_string(x)) return 0;
    }
    return 1;
}

static int is_string_typed(const json_t *prop) {
    return json_is_string(json_object_get(prop, "type")) &&
           !strcmp(json_string_value(json_object_get(prop, "type")), "string");
}

/* The rules of function number k: tc-fK and its parameters' tc-fK-pJ / tc-fK-vJ. */
static int xml_function(strbuf *out, int k, const json_t *fn, strata_err *err) {
    const char *name = json_string_value(json_object_get(fn, "name"));
    const json_t *params = json_object_get(fn, "parameters");
    const json_t *props = json_object_get(params, "properties");
    char rule[64];
    int rc = strbuf_addf(out, "tc-f%d ::= ", k);
    strbuf lit = {0};
    if (!rc) rc = strbuf_addf(&lit, "<function=%s>\n", name);
    if (!rc) rc = gbnf_literal(out, lit.p, lit.len);
    const char *key;
    json_t *prop;
    int j = 0;
    json_object_foreach((json_t *)props, key, prop) {
        if (rc) break;
        rc = strbuf_addf(out, " tc-f%d-p%d%s", k, j++,
                         toolcall_grammar_required(params, key) ? "" : "?");
    }
    if (!rc) rc = strbuf_addc(out, '\n');
    j = 0;
    json_object_foreach((json_t *)props, key, prop) {
        if (rc) break;
        strbuf_reset(&lit);
        rc = strbuf_addf(&lit, "<parameter=%s>\n", key);
        if (!rc) rc = strbuf_addf(out, "tc-f%d-p%d ::= ", k, j);
        if (!rc) rc = gbnf_literal(out, lit.p, lit.len);
        if (rc) break;
        if (string_enum(prop)) {
            size_t i;
            json_t *x;
            rc = strbuf_adds(out, " (");
            json_array_foreach(json_object_get(prop, "enum"), i, x) {
                if (!rc && i) rc = strbuf_adds(out, " | ");
                if (!rc) rc = gbnf_literal(out, json_string_value(x), json_string_length(x));
            }
            if (!rc) rc = strbuf_adds(out, ") \"\\n</parameter>\\n\"\n");
        } else if (is_string_typed(prop) && json_is_integer(json_object_get(prop, "maxLength"))) {
            /* bounded text: no '<' then, so the closing tag cannot hide inside */
            json_int_t lo = json_integer_value(json_object_get(prop, "minLength"));
            json_int_t hi = json_integer_value(json_object_get(prop, "maxLength"));
            if (lo < 0 || lo > hi) lo = 0;
            if (hi > 1000) hi = 1000;
            rc = strbuf_addf(out, " [^<]{%lld,%lld} \"\\n</parameter>\\n\"\n", (long long)lo,
                             (long long)(hi < 0 ? 0 : hi));
        } else if (is_string_typed(prop) || !json_is_object(prop)) {
            rc = strbuf_adds(out, " tc-text \"\\n\"\n");
        } else {
            snprintf(rule, sizeof rule, "tc-f%d-v%d", k, j);
            rc = strbuf_addf(out, " %s \"\\n</parameter>\\n\"\n", rule);
            if (!rc && (rc = schema_gbnf(prop, rule, out, err))) {
                strbuf_free(&lit);
                char msg[sizeof err->msg];
                snprintf(msg, sizeof msg, "%s", err->msg);
                return strata_err_set(err, rc, "tool '%.100s' parameter '%.100s': %s", name, key,
                                      msg);
            }
        }
        j++;
    }
    strbuf_free(&lit);
    return rc ? strata_err_set(err, STRATA_ENOMEM, "tool-call grammar: out of memory") : 0;
}

int toolcall_grammar(toolcall_format f, const json_t *tools, const char *name, int single,
                     strbuf *out, strata_err *err) {
    if (f == TOOLCALL_GEMMA4) return toolcall_grammar_gemma(tools, name, single, out, err);
    if (f != TOOLCALL_XML)
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "forced tool calls are not supported for the '%s' tool-call format",
                              toolcall_format_name(f));
    int rc =
        strbuf_adds(out, single ? "root ::= tc-call\n" : "root ::= tc-call (\"\\n\" tc-call)*\n");
    if (!rc) rc = strbuf_adds(out, "tc-call ::= \"<tool_call>\\n\" (");
    size_t i;
    json_t *t;
    int n = 0;
    json_array_foreach((json_t *)tools, i, t) {
        const char *fn = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (rc || !fn || (name && strcmp(fn, name))) continue;
        rc = strbuf_addf(out, "%stc-f%d", n++ ? " | " : "", (int)i);
    }
    if (!n) return strata_err_set(err, STRATA_EINVALID, "no tool to call");
    if (!rc) rc = strbuf_adds(out, ") \"</function>\\n</tool_call>\"\n");
    if (!rc) rc = gbnf_until(out, "tc-text", "\n</parameter>");
    if (rc) return strata_err_set(err, STRATA_ENOMEM, "tool-call grammar: out of memory");
    json_array_foreach((json_t *)tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        const char *fname = json_string_value(json_object_get(fn, "name"));
        if (!fname || (name && strcmp(fname, name))) continue;
        if ((rc = xml_function(out, (int)i, fn, err))) return rc;
    }
    return 0;
}
