/* gen_grammar.c - the one grammar a request's choices follow, made once per request after
 * its prompt is rendered: a forced tool call in the model's call syntax, the format the
 * request asked for (openai_format.c already wrote it as GBNF), or, when the model starts
 * inside a think block, the same preceded by free reasoning up to </think> so that thinking
 * models think first and the constrained answer follows. json_object alone keeps its fast
 * recognizer (engine/constrain/json_pda.c); with reasoning first it becomes a grammar too. */
#include <stdlib.h>
#include <string.h>

#include "server/gbnf_text.h"
#include "server/schema_gbnf.h"
#include "server/server_internal.h"
#include "server/toolcall_grammar.h"

/* The rule the output starts from when reasoning comes first. */
#define THINK_START "strata-reasoned"

static int gen_grammar_fail(openai_error *e, const strata_err *err, const char *param) {
    openai_error_from_strata(e, err, param);
    return -1;
}

int gen_grammar(srv *S, srv_req *r, openai_error *e) {
    openai_request *o = &r->oai;
    strata_err err = {0};
    strbuf g = {0};
    int think = r->split_reasoning == 2;
    if (!o->tool_choice_required && !o->grammar && !(o->json_object && think)) return 0;
    if (!S->cvocab) {
        openai_error_set(e, 400, "invalid_request_error",
                         o->tool_choice_required ? "tool_choice" : o->grammar_param, NULL,
                         "constrained output needs the model's tokenizer");
        return -1;
    }
    int rc = 0;
    const char *param = o->grammar_param;
    if (o->tool_choice_required) {
        param = "tool_choice";
        rc = toolcall_grammar(S->tc_fmt, o->tools, o->tool_choice_name, o->tool_choice_single, &g,
                              &err);
    } else if (o->grammar) {
        rc = strbuf_add(&g, o->grammar, o->grammar_len)
                 ? strata_err_set(&err, STRATA_ENOMEM, "out of memory")
                 : 0;
    } else {
        param = "response_format";
        json_t *obj = json_pack("{s:s}", "type", "object");
        rc = obj ? schema_gbnf_root(obj, &g, &err)
                 : strata_err_set(&err, STRATA_ENOMEM, "out of memory");
        json_decref(obj);
    }
    if (!rc && think &&
        (strbuf_adds(&g, "\n" THINK_START " ::= strata-think \"\\n\"? \"\\n\"? root\n") ||
         gbnf_until(&g, "strata-think", "</think>")))
        rc = strata_err_set(&err, STRATA_ENOMEM, "out of memory");
    if (rc) {
        strbuf_free(&g);
        return gen_grammar_fail(e, &err, param);
    }
    free(o->grammar);
    o->grammar = g.p;
    o->grammar_len = g.len;
    o->grammar_param = param;
    o->json_object = 0;
    r->grammar_start = think ? THINK_START : NULL;
    /* Gemma 4 writes <|tool_call>, <|"|> and <tool_call|> as single special tokens */
    r->grammar_flags =
        o->tool_choice_required && S->tc_fmt == TOOLCALL_GEMMA4 ? CONSTRAIN_SPECIALS : 0;
    return 0;
}
