/* jinja_parse.c - Jinja2's statement parser (subparse / parse_statement) and the
 * compile-time checks Jinja2's code generator makes afterwards.
 *
 * Tags: if/elif/else, for (target tuples, loop filter, else), set (plain, tuple,
 * namespace attribute, block form with filters), macro, call, filter, with,
 * break/continue (the loopcontrols extension), print, and transformers'
 * {% generation %} (rendered as a scoped block). Template inheritance and includes
 * need a loader, which transformers' environment does not have: they are refused.
 * After parsing, a walk reports what Jinja2 reports at compile time: unknown filters
 * and tests outside if-blocks (inside them Jinja2 defers the error to run time) and
 * break/continue outside a loop. */
#include <string.h>

#include "engine/template/jinja_internal.h"

static void next_tok(jparser *p) {
    if (p->pos + 1 < p->n) p->pos++;
}

static int expect_type(jparser *p, int type, const char *what) {
    jtok *t = jinja_parse_cur(p);
    if (t->type != type) {
        if (t->type == JT_EOF)
            return jinja_parse_fail(p, t->line, "unexpected end of template, expected %s", what);
        return jinja_parse_fail(p, t->line, "expected %s", what);
    }
    next_tok(p);
    return 0;
}

static int failed(jparser *p) { return p->err->code < 0 ? p->err->code : STRATA_EFORMAT; }

/* Parses statements until a block tag whose name is one of end (NULL-terminated);
 * leaves that name as the current token. */
static int subparse(jparser *p, jnodes *body, const char *const *end);

static int is_end(const jtok *t, const char *const *end) {
    for (; end && *end; end++)
        if (jinja_parse_is_name(t, *end)) return 1;
    return 0;
}

static int parse_statements(jparser *p, jnodes *body, const char *const *end, int drop_needle) {
    if (jinja_parse_is_op(jinja_parse_cur(p), ":")) next_tok(p);
    JTRY(expect_type(p, JT_BLOCK_END, "end of statement block"));
    JTRY(subparse(p, body, end));
    jtok *t = jinja_parse_cur(p);
    if (t->type == JT_EOF)
        return jinja_parse_fail(
            p, t->line,
            "Unexpected end of template. Jinja was looking for the following tags: '%s'.", end[0]);
    if (drop_needle) next_tok(p);
    return 0;
}

static int can_assign(const jnode *n) {
    if (n->type == JN_NAME || n->type == JN_NSREF) return 1;
    if (n->type != JN_TUPLE) return 0;
    for (size_t i = 0; i < n->args.n; i++)
        if (!can_assign(n->args.v[i]) || n->args.v[i]->type == JN_NSREF) return 0;
    return 1;
}

/* An assignment target: a name, a namespace attribute (with_ns) or a tuple of names. */
static jnode *parse_target(jparser *p, int for_loop, int with_ns) {
    jtok *t = jinja_parse_cur(p);
    jnode *n;
    if (with_ns && t->type == JT_NAME && jinja_parse_is_op(jinja_parse_peek(p, 1), ".")) {
        jtok *attr = jinja_parse_peek(p, 2);
        if (attr->type != JT_NAME) {
            jinja_parse_fail(p, attr->line, "expected name");
            return NULL;
        }
        n = jinja_parse_node(p, JN_NSREF, t->line);
        if (!n) return NULL;
        n->a = jinja_parse_node(p, JN_NAME, t->line);
        if (!n->a) return NULL;
        n->a->name = t->s;
        n->name = attr->s;
        next_tok(p), next_tok(p), next_tok(p);
    } else {
        n = jinja_parse_tuple(p, for_loop ? 2 : 1, 1, 0);
        if (!n) return NULL;
    }
    if (!can_assign(n)) {
        jinja_parse_fail(p, n->line, "can't assign to '%s'",
                         n->type == JN_CONST ? "const" : "expression");
        return NULL;
    }
    return n;
}

static int parse_signature(jparser *p, jnode *n) {
    jtok *t = jinja_parse_cur(p);
    if (!jinja_parse_is_op(t, "(")) return jinja_parse_fail(p, t->line, "expected token '('");
    next_tok(p);
    size_t cap = 0;
    (void)cap;
    while (!jinja_parse_is_op(jinja_parse_cur(p), ")")) {
        if (n->args.n) {
            if (!jinja_parse_is_op(jinja_parse_cur(p), ","))
                return jinja_parse_fail(p, jinja_parse_cur(p)->line, "expected token ','");
            next_tok(p);
        }
        jtok *a = jinja_parse_cur(p);
        if (a->type != JT_NAME) return jinja_parse_fail(p, a->line, "expected name");
        next_tok(p);
        jnode *name = jinja_parse_node(p, JN_NAME, a->line);
        if (!name) return failed(p);
        name->name = a->s;
        jnode *def = NULL;
        if (jinja_parse_is_op(jinja_parse_cur(p), "=")) {
            next_tok(p);
            if (!(def = jinja_parse_expr(p, 1))) return failed(p);
        } else {
            for (size_t i = 0; i < n->kwv.n; i++)
                if (n->kwv.v[i])
                    return jinja_parse_fail(p, a->line,
                                            "non-default argument follows default argument");
        }
        JTRY(jinja_parse_push(p, &n->args, name));
        JTRY(jinja_parse_push(p, &n->kwv, def));
    }
    next_tok(p);
    return 0;
}

static const char *const END_FOR[] = {"endfor", "else", NULL};
static const char *const END_FOR2[] = {"endfor", NULL};
static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_IF2[] = {"endif", NULL};
static const char *const END_SET[] = {"endset", NULL};
static const char *const END_MACRO[] = {"endmacro", NULL};
static const char *const END_CALL[] = {"endcall", NULL};
static const char *const END_FILTER[] = {"endfilter", NULL};
static const char *const END_WITH[] = {"endwith", NULL};
static const char *const END_GEN[] = {"endgeneration", NULL};

static int parse_for(jparser *p, jnode *n) {
    if (!(n->a = parse_target(p, 1, 0))) return failed(p);
    jtok *t = jinja_parse_cur(p);
    if (!jinja_parse_is_name(t, "in")) return jinja_parse_fail(p, t->line, "expected token 'in'");
    next_tok(p);
    if (!(n->b = jinja_parse_tuple(p, 3, 0, 0))) return failed(p);
    if (jinja_parse_is_name(jinja_parse_cur(p), "if")) {
        next_tok(p);
        if (!(n->c = jinja_parse_expr(p, 1))) return failed(p);
    }
    if (jinja_parse_is_name(jinja_parse_cur(p), "recursive"))
        return jinja_parse_fail(p, jinja_parse_cur(p)->line,
                                "recursive for loops are not supported");
    JTRY(parse_statements(p, &n->body, END_FOR, 0));
    if (jinja_parse_is_name(jinja_parse_cur(p), "endfor")) {
        next_tok(p);
        return 0;
    }
    next_tok(p);
    return parse_statements(p, &n->orelse, END_FOR2, 1);
}

static int parse_if(jparser *p, jnode *n) {
    for (;;) {
        if (!(n->a = jinja_parse_tuple(p, 0, 0, 0))) return failed(p);
        JTRY(parse_statements(p, &n->body, END_IF, 0));
        jtok *t = jinja_parse_cur(p);
        next_tok(p);
        if (jinja_parse_is_name(t, "elif")) {
            jnode *e = jinja_parse_node(p, JN_IF, jinja_parse_cur(p)->line);
            if (!e) return failed(p);
            JTRY(jinja_parse_push(p, &n->orelse, e));
            n = e;
            continue;
        }
        if (jinja_parse_is_name(t, "else")) return parse_statements(p, &n->orelse, END_IF2, 1);
        return 0;
    }
}

static int parse_statement_inner(jparser *p, jnodes *body);

/* Blocks nest through recursion here, so their depth shares the expression bound. */
static int parse_statement(jparser *p, jnodes *body) {
    if (++p->depth > p->max_depth)
        return jinja_parse_fail(p, jinja_parse_cur(p)->line, "blocks nested too deeply");
    int rc = parse_statement_inner(p, body);
    p->depth--;
    return rc;
}

static int parse_statement_inner(jparser *p, jnodes *body) {
    jtok *t = jinja_parse_cur(p);
    if (t->type != JT_NAME) return jinja_parse_fail(p, t->line, "tag name expected");
    const char *tag = t->s;
    int line = t->line;
    next_tok(p);
    jnode *n = NULL;
#define NODE(type)                                                                                 \
    do {                                                                                           \
        if (!(n = jinja_parse_node(p, (type), line))) return failed(p);                            \
    } while (0)
    if (!strcmp(tag, "for")) {
        NODE(JN_FOR);
        JTRY(parse_for(p, n));
    } else if (!strcmp(tag, "if")) {
        NODE(JN_IF);
        JTRY(parse_if(p, n));
    } else if (!strcmp(tag, "set")) {
        NODE(JN_SET);
        if (!(n->a = parse_target(p, 0, 1))) return failed(p);
        if (jinja_parse_is_op(jinja_parse_cur(p), "=")) {
            next_tok(p);
            if (!(n->b = jinja_parse_tuple(p, 0, 1, 0))) return failed(p);
        } else {
            n->type = JN_SETBLOCK;
            if (jinja_parse_is_op(jinja_parse_cur(p), "|") &&
                !(n->c = jinja_parse_filter_chain(p, NULL, 0)))
                return failed(p);
            JTRY(parse_statements(p, &n->body, END_SET, 1));
        }
    } else if (!strcmp(tag, "macro")) {
        NODE(JN_MACRO);
        jtok *name = jinja_parse_cur(p);
        if (name->type != JT_NAME) return jinja_parse_fail(p, name->line, "expected name");
        n->name = name->s;
        next_tok(p);
        JTRY(parse_signature(p, n));
        JTRY(parse_statements(p, &n->body, END_MACRO, 1));
    } else if (!strcmp(tag, "call")) {
        NODE(JN_CALLBLOCK);
        if (jinja_parse_is_op(jinja_parse_cur(p), "(")) JTRY(parse_signature(p, n));
        if (!(n->a = jinja_parse_expr(p, 1))) return failed(p);
        if (n->a->type != JN_CALL) return jinja_parse_fail(p, line, "expected call");
        JTRY(parse_statements(p, &n->body, END_CALL, 1));
    } else if (!strcmp(tag, "filter")) {
        NODE(JN_FILTERBLOCK);
        if (!(n->a = jinja_parse_filter_chain(p, NULL, 1))) return failed(p);
        JTRY(parse_statements(p, &n->body, END_FILTER, 1));
    } else if (!strcmp(tag, "with")) {
        NODE(JN_WITH);
        while (jinja_parse_cur(p)->type != JT_BLOCK_END) {
            if (n->args.n) {
                if (!jinja_parse_is_op(jinja_parse_cur(p), ","))
                    return jinja_parse_fail(p, jinja_parse_cur(p)->line, "expected token ','");
                next_tok(p);
            }
            jnode *target = parse_target(p, 0, 0);
            if (!target) return failed(p);
            if (!jinja_parse_is_op(jinja_parse_cur(p), "="))
                return jinja_parse_fail(p, jinja_parse_cur(p)->line, "expected token '='");
            next_tok(p);
            jnode *v = jinja_parse_expr(p, 1);
            if (!v) return failed(p);
            JTRY(jinja_parse_push(p, &n->args, target));
            JTRY(jinja_parse_push(p, &n->kwv, v));
        }
        JTRY(parse_statements(p, &n->body, END_WITH, 1));
    } else if (!strcmp(tag, "break") || !strcmp(tag, "continue")) {
        NODE(tag[0] == 'b' ? JN_BREAK : JN_CONTINUE);
    } else if (!strcmp(tag, "generation")) {
        NODE(JN_BLOCK);
        JTRY(parse_statements(p, &n->body, END_GEN, 1));
    } else if (!strcmp(tag, "print")) {
        while (jinja_parse_cur(p)->type != JT_BLOCK_END) {
            if (n) {
                if (!jinja_parse_is_op(jinja_parse_cur(p), ","))
                    return jinja_parse_fail(p, jinja_parse_cur(p)->line, "expected token ','");
                next_tok(p);
            }
            NODE(JN_PRINT);
            if (!(n->a = jinja_parse_expr(p, 1))) return failed(p);
            JTRY(jinja_parse_push(p, body, n));
        }
        return 0;
    } else if (!strcmp(tag, "block") || !strcmp(tag, "extends") || !strcmp(tag, "include") ||
               !strcmp(tag, "import") || !strcmp(tag, "from") || !strcmp(tag, "autoescape")) {
        return jinja_parse_fail(p, line, "the '%s' tag is not supported in chat templates", tag);
    } else {
        return jinja_parse_fail(p, line, "Encountered unknown tag '%s'.", tag);
    }
#undef NODE
    return jinja_parse_push(p, body, n);
}

static int subparse(jparser *p, jnodes *body, const char *const *end) {
    for (;;) {
        jtok *t = jinja_parse_cur(p);
        switch ((jtok_type)t->type) {
        case JT_EOF: return 0;
        case JT_DATA: {
            jnode *n = jinja_parse_node(p, JN_TEXT, t->line);
            if (!n) return failed(p);
            jstr *s = jinja_arena_alloc(p->a, sizeof(jstr) + t->len + 1);
            if (!s) return jinja_parse_nomem(p);
            s->len = t->len;
            s->ncp = jinja_utf8_count(t->s, t->len);
            memcpy(s->p, t->s, t->len + 1);
            n->val.kind = JV_STR;
            n->val.u.s = s;
            JTRY(jinja_parse_push(p, body, n));
            next_tok(p);
            break;
        }
        case JT_VAR_BEGIN: {
            next_tok(p);
            jnode *n = jinja_parse_node(p, JN_PRINT, jinja_parse_cur(p)->line);
            if (!n) return failed(p);
            if (!(n->a = jinja_parse_tuple(p, 0, 1, 0))) return failed(p);
            JTRY(expect_type(p, JT_VAR_END, "end of print statement"));
            JTRY(jinja_parse_push(p, body, n));
            break;
        }
        case JT_BLOCK_BEGIN:
            next_tok(p);
            if (is_end(jinja_parse_cur(p), end)) return 0;
            JTRY(parse_statement(p, body));
            JTRY(expect_type(p, JT_BLOCK_END, "end of statement block"));
            break;
        default: return jinja_parse_fail(p, t->line, "internal parsing error");
        }
    }
}

/* ---- compile-time checks ---------------------------------------------------------- */

static int check(jparser *p, jnode *n, int soft, int in_loop);

static int check_list(jparser *p, const jnodes *l, int soft, int in_loop) {
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i]) JTRY(check(p, l->v[i], soft, in_loop));
    return 0;
}

/* Does the body load one of caller / varargs / kwargs? (Jinja2's find_undeclared) */
static int uses_name(const jnode *n, const char *name) {
    if (!n) return 0;
    if (n->type == JN_NAME && !strcmp(n->name, name)) return 1;
    if (uses_name(n->a, name) || uses_name(n->b, name) || uses_name(n->c, name)) return 1;
    const jnodes *lists[] = {&n->args, &n->kwv, &n->body, &n->orelse};
    for (size_t k = 0; k < 4; k++)
        for (size_t i = 0; i < lists[k]->n; i++)
            if (uses_name(lists[k]->v[i], name)) return 1;
    return 0;
}

static void macro_flags(jnode *n) {
    static const char *const names[] = {"caller", "varargs", "kwargs"};
    for (int k = 0; k < 3; k++) {
        int is_param = 0;
        for (size_t i = 0; i < n->args.n; i++) is_param |= !strcmp(n->args.v[i]->name, names[k]);
        for (size_t i = 0; i < n->body.n && !is_param; i++) {
            if (uses_name(n->body.v[i], names[k])) {
                n->flag |= (uint8_t)(1 << k);
                break;
            }
        }
    }
}

static int check(jparser *p, jnode *n, int soft, int in_loop) {
    if (!n) return 0;
    switch ((jnode_type)n->type) {
    case JN_FILTER:
    case JN_TEST:
        if (n->op && !soft)
            return jinja_parse_fail(p, n->line, "No %s named '%s'.",
                                    n->type == JN_FILTER ? "filter" : "test", n->name);
        break;
    case JN_COND: soft = 1; break;
    case JN_IF:
        JTRY(check(p, n->a, 1, in_loop));
        JTRY(check_list(p, &n->body, 1, in_loop));
        return check_list(p, &n->orelse, 1, in_loop);
    case JN_FOR:
        JTRY(check(p, n->a, soft, in_loop));
        JTRY(check(p, n->b, soft, in_loop));
        JTRY(check(p, n->c, 0, 1));
        JTRY(check_list(p, &n->body, 0, 1));
        return check_list(p, &n->orelse, 0, in_loop);
    case JN_MACRO:
    case JN_CALLBLOCK:
        macro_flags(n);
        JTRY(check(p, n->a, soft, in_loop));
        JTRY(check_list(p, &n->args, 0, 0));
        JTRY(check_list(p, &n->kwv, 0, 0));
        return check_list(p, &n->body, 0, 0);
    case JN_FILTERBLOCK:
    case JN_SETBLOCK:
        JTRY(check(p, n->a, soft, in_loop));
        JTRY(check(p, n->c, 0, in_loop));
        return check_list(p, &n->body, 0, in_loop);
    case JN_WITH:
        JTRY(check_list(p, &n->kwv, soft, in_loop));
        return check_list(p, &n->body, 0, in_loop);
    case JN_BLOCK: return check_list(p, &n->body, 0, 0);
    case JN_BREAK:
    case JN_CONTINUE:
        if (!in_loop)
            return jinja_parse_fail(p, n->line, "'%s' outside loop",
                                    n->type == JN_BREAK ? "break" : "continue");
        return 0;
    default: break;
    }
    JTRY(check(p, n->a, soft, in_loop));
    JTRY(check(p, n->b, soft, in_loop));
    JTRY(check(p, n->c, soft, in_loop));
    JTRY(check_list(p, &n->args, soft, in_loop));
    JTRY(check_list(p, &n->kwv, soft, in_loop));
    JTRY(check_list(p, &n->body, soft, in_loop));
    return check_list(p, &n->orelse, soft, in_loop);
}

int jinja_parse_template(jnodes *out, jarena *a, const char *src, size_t len, int max_depth,
                         strata_err *err) {
    jtok *toks;
    size_t n;
    err->code = 0;
    err->msg[0] = 0;
    JTRY(jinja_lex_run(&toks, &n, a, src, len, err));
    jparser p = {.a = a, .t = toks, .n = n, .max_depth = max_depth, .err = err};
    jnodes body = {0};
    JTRY(subparse(&p, &body, NULL));
    jtok *t = jinja_parse_cur(&p);
    if (t->type != JT_EOF) return jinja_parse_fail(&p, t->line, "unexpected tag");
    JTRY(check_list(&p, &body, 0, 0));
    *out = body;
    return 0;
}
