/* jinja_parse_expr.c - Jinja2's expression grammar, one function per precedence
 * level as in jinja2/parser.py (cond < or < and < not < compare < + - < ~ <
 * * / // % < ** < unary < primary/postfix/filters/tests), including its quirks:
 * ** is left-associative, unary minus binds tighter than filters only on the
 * operand, and a test takes one bare argument ("x is divisibleby 3"). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/template/jinja_internal.h"

jtok *jinja_parse_cur(jparser *p) { return &p->t[p->pos]; }

jtok *jinja_parse_peek(jparser *p, size_t ahead) {
    size_t i = p->pos + ahead;
    return &p->t[i < p->n ? i : p->n - 1];
}

int jinja_parse_is_op(const jtok *t, const char *op) {
    return t->type == JT_OP && !strcmp(t->op, op);
}

int jinja_parse_is_name(const jtok *t, const char *name) {
    return t->type == JT_NAME && !strcmp(t->s, name);
}

static void next_tok(jparser *p) {
    if (p->pos + 1 < p->n) p->pos++;
}

int jinja_parse_fail(jparser *p, int line, const char *fmt, ...) {
    if (p->err->code < 0 && p->err->msg[0]) return p->err->code; /* keep the first error */
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return strata_err_set(p->err, STRATA_EFORMAT, "chat template line %d: %s", line, msg);
}

int jinja_parse_nomem(jparser *p) {
    if (p->err->code < 0 && p->err->msg[0]) return p->err->code;
    return strata_err_set(p->err, STRATA_ENOMEM, "out of memory parsing the chat template");
}

static jnode *fail_null(jparser *p, int line, const char *what) {
    jinja_parse_fail(p, line, "%s", what);
    return NULL;
}

static const char *describe(const jtok *t) {
    switch ((jtok_type)t->type) {
    case JT_EOF: return "end of template";
    case JT_DATA: return "template data";
    case JT_VAR_BEGIN: return "begin of print statement";
    case JT_VAR_END: return "end of print statement";
    case JT_BLOCK_BEGIN: return "begin of statement block";
    case JT_BLOCK_END: return "end of statement block";
    case JT_NAME: return t->s;
    case JT_STRING: return "string";
    case JT_INT: return "integer";
    case JT_FLOAT: return "float";
    case JT_OP: return t->op;
    }
    return "token";
}

static jnode *unexpected(jparser *p) {
    jtok *t = jinja_parse_cur(p);
    jinja_parse_fail(p, t->line, "unexpected '%s'", describe(t));
    return NULL;
}

static int expect_op(jparser *p, const char *op) {
    jtok *t = jinja_parse_cur(p);
    if (!jinja_parse_is_op(t, op))
        return jinja_parse_fail(p, t->line, "expected token '%s', got '%s'", op, describe(t));
    next_tok(p);
    return 0;
}

jnode *jinja_parse_node(jparser *p, int type, int line) {
    jnode *n = jinja_arena_alloc(p->a, sizeof *n);
    if (!n) {
        jinja_parse_nomem(p);
        return NULL;
    }
    memset(n, 0, sizeof *n);
    n->type = (uint8_t)type;
    n->line = line;
    return n;
}

int jinja_parse_push(jparser *p, jnodes *list, jnode *n) {
    if ((list->n & (list->n - 1)) == 0) { /* grow at powers of two */
        size_t cap = list->n ? list->n * 2 : 2;
        jnode **nv = jinja_arena_alloc(p->a, cap * sizeof *nv);
        if (!nv) return jinja_parse_nomem(p);
        if (list->n) memcpy(nv, list->v, list->n * sizeof *nv);
        list->v = nv;
    }
    list->v[list->n++] = n;
    return 0;
}

static jnode *binary(jparser *p, int op, jnode *a, jnode *b, int line) {
    if (!a || !b) return NULL;
    jnode *n = jinja_parse_node(p, JN_BINARY, line);
    if (!n) return NULL;
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_or(jparser *p);
static jnode *parse_unary(jparser *p, int with_filter);

jnode *jinja_parse_expr(jparser *p, int with_cond) {
    if (++p->depth > p->max_depth) {
        p->depth--;
        return fail_null(p, jinja_parse_cur(p)->line, "expression nested too deeply");
    }
    int line = jinja_parse_cur(p)->line;
    jnode *e = parse_or(p);
    while (e && with_cond && jinja_parse_is_name(jinja_parse_cur(p), "if")) {
        next_tok(p);
        jnode *n = jinja_parse_node(p, JN_COND, line);
        if (!n) return NULL;
        n->b = e;
        if (!(n->a = parse_or(p))) return NULL;
        if (jinja_parse_is_name(jinja_parse_cur(p), "else")) {
            next_tok(p);
            if (!(n->c = jinja_parse_expr(p, 1))) return NULL;
        }
        e = n;
        line = jinja_parse_cur(p)->line;
    }
    p->depth--;
    return e;
}

static jnode *parse_and(jparser *p);
static jnode *parse_not(jparser *p);

static jnode *parse_or(jparser *p) {
    int line = jinja_parse_cur(p)->line;
    jnode *l = parse_and(p);
    while (l && jinja_parse_is_name(jinja_parse_cur(p), "or")) {
        next_tok(p);
        l = binary(p, JOP_OR, l, parse_and(p), line);
        line = jinja_parse_cur(p)->line;
    }
    return l;
}

static jnode *parse_and(jparser *p) {
    int line = jinja_parse_cur(p)->line;
    jnode *l = parse_not(p);
    while (l && jinja_parse_is_name(jinja_parse_cur(p), "and")) {
        next_tok(p);
        l = binary(p, JOP_AND, l, parse_not(p), line);
        line = jinja_parse_cur(p)->line;
    }
    return l;
}

static jnode *parse_math1(jparser *p);

static jnode *parse_compare(jparser *p) {
    jnode *e = parse_math1(p);
    if (!e) return NULL;
    jnode *cmp = NULL;
    uint8_t ops[64];
    for (;;) {
        jtok *t = jinja_parse_cur(p);
        int op = -1;
        if (t->type == JT_OP) {
            op = !strcmp(t->op, "==")   ? JOP_EQ
                 : !strcmp(t->op, "!=") ? JOP_NE
                 : !strcmp(t->op, "<")  ? JOP_LT
                 : !strcmp(t->op, "<=") ? JOP_LE
                 : !strcmp(t->op, ">")  ? JOP_GT
                 : !strcmp(t->op, ">=") ? JOP_GE
                                        : -1;
            if (op >= 0) next_tok(p);
        } else if (jinja_parse_is_name(t, "in")) {
            op = JOP_IN;
            next_tok(p);
        } else if (jinja_parse_is_name(t, "not") &&
                   jinja_parse_is_name(jinja_parse_peek(p, 1), "in")) {
            op = JOP_NOTIN;
            next_tok(p);
            next_tok(p);
        }
        if (op < 0) break;
        if (!cmp) {
            if (!(cmp = jinja_parse_node(p, JN_COMPARE, t->line))) return NULL;
            cmp->a = e;
        }
        if (cmp->args.n >= sizeof ops) return fail_null(p, t->line, "comparison chain too long");
        ops[cmp->args.n] = (uint8_t)op;
        jnode *r = parse_math1(p);
        if (!r || jinja_parse_push(p, &cmp->args, r) < 0) return NULL;
        cmp->line =
            jinja_parse_cur(p)->line; /* Jinja2 gives a Compare the line after its last operand */
    }
    if (!cmp) return e;
    cmp->ops = jinja_arena_alloc(p->a, cmp->args.n);
    if (!cmp->ops) return jinja_parse_nomem(p), NULL;
    memcpy(cmp->ops, ops, cmp->args.n);
    return cmp;
}

static jnode *parse_not(jparser *p) {
    jtok *t = jinja_parse_cur(p);
    if (jinja_parse_is_name(t, "not")) {
        next_tok(p);
        jnode *n = jinja_parse_node(p, JN_UNARY, t->line);
        if (!n) return NULL;
        n->op = JOP_NOT;
        if (++p->depth > p->max_depth) return fail_null(p, t->line, "expression nested too deeply");
        n->a = parse_not(p);
        p->depth--;
        return n->a ? n : NULL;
    }
    return parse_compare(p);
}

static jnode *parse_concat(jparser *p);
static jnode *parse_math2(jparser *p);
static jnode *parse_pow(jparser *p);

static jnode *parse_math1(jparser *p) {
    int line = jinja_parse_cur(p)->line;
    jnode *l = parse_concat(p);
    for (;;) {
        jtok *t = jinja_parse_cur(p);
        if (!l || !(jinja_parse_is_op(t, "+") || jinja_parse_is_op(t, "-"))) return l;
        next_tok(p);
        l = binary(p, t->op[0] == '+' ? JOP_ADD : JOP_SUB, l, parse_concat(p), line);
        line = jinja_parse_cur(p)->line;
    }
}

static jnode *parse_concat(jparser *p) {
    int line = jinja_parse_cur(p)->line;
    jnode *l = parse_math2(p);
    while (l && jinja_parse_is_op(jinja_parse_cur(p), "~")) {
        next_tok(p);
        l = binary(p, JOP_CONCAT, l, parse_math2(p), line);
    }
    return l;
}

static jnode *parse_math2(jparser *p) {
    int line = jinja_parse_cur(p)->line;
    jnode *l = parse_pow(p);
    for (;;) {
        jtok *t = jinja_parse_cur(p);
        int op = jinja_parse_is_op(t, "*")    ? JOP_MUL
                 : jinja_parse_is_op(t, "/")  ? JOP_DIV
                 : jinja_parse_is_op(t, "//") ? JOP_FDIV
                 : jinja_parse_is_op(t, "%")  ? JOP_MOD
                                              : -1;
        if (!l || op < 0) return l;
        next_tok(p);
        l = binary(p, op, l, parse_pow(p), line);
        line = jinja_parse_cur(p)->line;
    }
}

static jnode *parse_pow(jparser *p) {
    int line = jinja_parse_cur(p)->line;
    jnode *l = parse_unary(p, 1);
    while (l && jinja_parse_is_op(jinja_parse_cur(p), "**")) {
        next_tok(p);
        l = binary(p, JOP_POW, l, parse_unary(p, 1), line);
        line = jinja_parse_cur(p)->line;
    }
    return l;
}

static jnode *parse_test(jparser *p, jnode *node);

/* callee "(" args ")": the call node, or NULL with the error set. */
static jnode *parse_call(jparser *p, jnode *callee, int line) {
    jnode *call = jinja_parse_node(p, JN_CALL, line);
    if (!call) return NULL;
    call->a = callee;
    return jinja_parse_call_args(p, call) < 0 ? NULL : call;
}

static jnode *parse_filter_expr(jparser *p, jnode *node) {
    while (node) {
        jtok *t = jinja_parse_cur(p);
        if (jinja_parse_is_op(t, "|")) {
            node = jinja_parse_filter_chain(p, node, 0);
        } else if (jinja_parse_is_name(t, "is")) {
            node = parse_test(p, node);
        } else if (jinja_parse_is_op(t, "(")) {
            node = parse_call(p, node, t->line);
        } else {
            break;
        }
    }
    return node;
}

static jnode *parse_unary(jparser *p, int with_filter) {
    jtok *t = jinja_parse_cur(p);
    jnode *node;
    if (++p->depth > p->max_depth) return fail_null(p, t->line, "expression nested too deeply");
    if (jinja_parse_is_op(t, "-") || jinja_parse_is_op(t, "+")) {
        next_tok(p);
        node = jinja_parse_node(p, JN_UNARY, t->line);
        if (!node) return NULL;
        node->op = t->op[0] == '-' ? JOP_NEG : JOP_POS;
        if (!(node->a = parse_unary(p, 0))) return NULL;
    } else {
        node = jinja_parse_primary(p);
    }
    node = jinja_parse_postfix(p, node);
    if (with_filter) node = parse_filter_expr(p, node);
    p->depth--;
    return node;
}

static jnode *const_node(jparser *p, int line, jv v) {
    jnode *n = jinja_parse_node(p, JN_CONST, line);
    if (n) n->val = v;
    return n;
}

static jnode *parse_seq(jparser *p, int type, const char *close) {
    jtok *open = jinja_parse_cur(p);
    next_tok(p);
    jnode *n = jinja_parse_node(p, type, open->line);
    if (!n) return NULL;
    while (!jinja_parse_is_op(jinja_parse_cur(p), close)) {
        if (n->args.n && expect_op(p, ",") < 0) return NULL;
        if (jinja_parse_is_op(jinja_parse_cur(p), close)) break;
        jnode *k = jinja_parse_expr(p, 1);
        if (!k || jinja_parse_push(p, &n->args, k) < 0) return NULL;
        if (type == JN_DICT) {
            if (expect_op(p, ":") < 0) return NULL;
            jnode *v = jinja_parse_expr(p, 1);
            if (!v || jinja_parse_push(p, &n->args, v) < 0) return NULL;
        }
    }
    if (expect_op(p, close) < 0) return NULL;
    return n;
}

jnode *jinja_parse_primary(jparser *p) {
    jtok *t = jinja_parse_cur(p);
    switch ((jtok_type)t->type) {
    case JT_NAME: {
        next_tok(p);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True"))
            return const_node(p, t->line, jinja_bool(1));
        if (!strcmp(t->s, "false") || !strcmp(t->s, "False"))
            return const_node(p, t->line, jinja_bool(0));
        if (!strcmp(t->s, "none") || !strcmp(t->s, "None"))
            return const_node(p, t->line, jinja_none());
        jnode *n = jinja_parse_node(p, JN_NAME, t->line);
        if (n) n->name = t->s;
        return n;
    }
    case JT_STRING: {
        /* adjacent literals concatenate */
        size_t len = 0, k = p->pos;
        while (k < p->n && p->t[k].type == JT_STRING) len += p->t[k++].len;
        jstr *s = jinja_arena_alloc(p->a, sizeof(jstr) + len + 1);
        if (!s) return jinja_parse_nomem(p), NULL;
        s->len = 0;
        while (jinja_parse_cur(p)->type == JT_STRING) {
            memcpy(s->p + s->len, jinja_parse_cur(p)->s, jinja_parse_cur(p)->len);
            s->len += jinja_parse_cur(p)->len;
            next_tok(p);
        }
        s->p[s->len] = 0;
        s->ncp = jinja_utf8_count(s->p, s->len);
        jv v = {0};
        v.kind = JV_STR;
        v.u.s = s;
        return const_node(p, t->line, v);
    }
    case JT_INT: next_tok(p); return const_node(p, t->line, jinja_int(t->i));
    case JT_FLOAT: next_tok(p); return const_node(p, t->line, jinja_float(t->f));
    case JT_OP:
        if (!strcmp(t->op, "(")) {
            next_tok(p);
            jnode *n = jinja_parse_tuple(p, 0, 1, 1);
            if (!n || expect_op(p, ")") < 0) return NULL;
            return n;
        }
        if (!strcmp(t->op, "[")) return parse_seq(p, JN_LIST, "]");
        if (!strcmp(t->op, "{")) return parse_seq(p, JN_DICT, "}");
        break;
    default: break;
    }
    return unexpected(p);
}

static int is_tuple_end(jparser *p, int in_for_target) {
    jtok *t = jinja_parse_cur(p);
    if (t->type == JT_VAR_END || t->type == JT_BLOCK_END || jinja_parse_is_op(t, ")")) return 1;
    if (in_for_target == 1) return jinja_parse_is_name(t, "in");
    if (in_for_target == 2) return jinja_parse_is_name(t, "recursive");
    return 0;
}

/* simplified: 0 full expressions, 1 names/literals only (assignment targets),
 * 2 targets of a for loop (end at "in"), 3 a for loop's iterable (end at "recursive");
 * with_cond: allow "a if b else c"; explicit_paren: "()" is an empty tuple. */
jnode *jinja_parse_tuple(jparser *p, int simplified, int with_cond, int explicit_paren) {
    int line = jinja_parse_cur(p)->line;
    int end_rule = simplified == 2 ? 1 : simplified == 3 ? 2 : 0;
    int names_only = simplified == 1 || simplified == 2;
    jnode *tup = NULL, *first = NULL;
    for (;;) {
        if (first && expect_op(p, ",") < 0) return NULL;
        if (is_tuple_end(p, end_rule)) break;
        jnode *e = names_only ? jinja_parse_primary(p) : jinja_parse_expr(p, with_cond);
        if (!e) return NULL;
        if (!first) {
            first = e;
            if (!(tup = jinja_parse_node(p, JN_TUPLE, line))) return NULL;
        }
        if (jinja_parse_push(p, &tup->args, e) < 0) return NULL;
        if (!jinja_parse_is_op(jinja_parse_cur(p), ",")) {
            if (tup->args.n == 1 && !tup->flag) return first;
            break;
        }
        tup->flag = 1; /* a comma was seen: this is a tuple */
        line = jinja_parse_cur(p)->line;
    }
    if (!first) {
        if (!explicit_paren) {
            jtok *t = jinja_parse_cur(p);
            return fail_null(p, t->line, "Expected an expression");
        }
        return jinja_parse_node(p, JN_TUPLE, line);
    }
    tup->flag = 0;
    return tup;
}

static jnode *parse_subscribed(jparser *p) {
    int line = jinja_parse_cur(p)->line;
    jnode *parts[3] = {NULL, NULL, NULL};
    if (jinja_parse_is_op(jinja_parse_cur(p), ":")) {
        next_tok(p);
    } else {
        jnode *e = jinja_parse_expr(p, 1);
        if (!e || !jinja_parse_is_op(jinja_parse_cur(p), ":")) return e;
        next_tok(p);
        parts[0] = e;
    }
    jtok *t = jinja_parse_cur(p);
    if (!jinja_parse_is_op(t, ":") && !jinja_parse_is_op(t, "]") && !jinja_parse_is_op(t, ","))
        if (!(parts[1] = jinja_parse_expr(p, 1))) return NULL;
    if (jinja_parse_is_op(jinja_parse_cur(p), ":")) {
        next_tok(p);
        t = jinja_parse_cur(p);
        if (!jinja_parse_is_op(t, "]") && !jinja_parse_is_op(t, ","))
            if (!(parts[2] = jinja_parse_expr(p, 1))) return NULL;
    }
    jnode *n = jinja_parse_node(p, JN_SLICE, line);
    if (!n) return NULL;
    n->a = parts[0], n->b = parts[1], n->c = parts[2];
    return n;
}

jnode *jinja_parse_postfix(jparser *p, jnode *node) {
    while (node) {
        jtok *t = jinja_parse_cur(p);
        if (jinja_parse_is_op(t, ".")) {
            next_tok(p);
            jtok *a = jinja_parse_cur(p);
            next_tok(p);
            if (a->type == JT_NAME) {
                jnode *n = jinja_parse_node(p, JN_GETATTR, t->line);
                if (!n) return NULL;
                n->a = node;
                n->name = a->s;
                node = n;
            } else if (a->type == JT_INT) {
                jnode *n = jinja_parse_node(p, JN_GETITEM, t->line);
                if (!n || !(n->b = const_node(p, a->line, jinja_int(a->i)))) return NULL;
                n->a = node;
                node = n;
            } else {
                return fail_null(p, a->line, "expected name or number");
            }
        } else if (jinja_parse_is_op(t, "[")) {
            next_tok(p);
            jnode *n = jinja_parse_node(p, JN_GETITEM, t->line);
            if (!n) return NULL;
            n->a = node;
            jnode *tup = jinja_parse_node(p, JN_TUPLE, t->line);
            if (!tup) return NULL;
            while (!jinja_parse_is_op(jinja_parse_cur(p), "]")) {
                if (tup->args.n && expect_op(p, ",") < 0) return NULL;
                jnode *s = parse_subscribed(p);
                if (!s || jinja_parse_push(p, &tup->args, s) < 0) return NULL;
            }
            if (tup->args.n == 0) return fail_null(p, t->line, "expected subscript expression");
            n->b = tup->args.n == 1 ? tup->args.v[0] : tup;
            if (expect_op(p, "]") < 0) return NULL;
            node = n;
        } else if (jinja_parse_is_op(t, "(")) {
            node = parse_call(p, node, t->line);
        } else {
            break;
        }
    }
    return node;
}

int jinja_parse_call_args(jparser *p, jnode *call) {
    int line = jinja_parse_cur(p)->line;
    JTRY(expect_op(p, "("));
    size_t cap = 0;
    while (!jinja_parse_is_op(jinja_parse_cur(p), ")")) {
        if (call->args.n + call->kwv.n) {
            JTRY(expect_op(p, ","));
            if (jinja_parse_is_op(jinja_parse_cur(p), ")")) break;
        }
        jtok *t = jinja_parse_cur(p);
        if (jinja_parse_is_op(t, "*") || jinja_parse_is_op(t, "**"))
            return jinja_parse_fail(p, t->line, "*args and **kwargs in calls are not supported");
        if (t->type == JT_NAME && jinja_parse_is_op(jinja_parse_peek(p, 1), "=")) {
            next_tok(p);
            next_tok(p);
            jnode *v = jinja_parse_expr(p, 1);
            if (!v) return p->err->code ? p->err->code : STRATA_EFORMAT;
            if (call->kwv.n == cap) {
                cap = cap ? cap * 2 : 4;
                const char **nk = jinja_arena_alloc(p->a, cap * sizeof *nk);
                if (!nk) return jinja_parse_nomem(p);
                if (call->kwv.n) memcpy(nk, call->kwn, call->kwv.n * sizeof *nk);
                call->kwn = nk;
            }
            call->kwn[call->kwv.n] = t->s;
            JTRY(jinja_parse_push(p, &call->kwv, v));
        } else {
            if (call->kwv.n)
                return jinja_parse_fail(p, line, "invalid syntax for function call expression");
            jnode *v = jinja_parse_expr(p, 1);
            if (!v) return p->err->code ? p->err->code : STRATA_EFORMAT;
            JTRY(jinja_parse_push(p, &call->args, v));
        }
    }
    return expect_op(p, ")");
}

jnode *jinja_parse_filter_chain(jparser *p, jnode *node, int start_inline) {
    while (jinja_parse_is_op(jinja_parse_cur(p), "|") || start_inline) {
        if (!start_inline) next_tok(p);
        start_inline = 0;
        jtok *t = jinja_parse_cur(p);
        if (t->type != JT_NAME) return fail_null(p, t->line, "expected a filter name");
        next_tok(p);
        jnode *f = jinja_parse_node(p, JN_FILTER, t->line);
        if (!f) return NULL;
        f->a = node;
        f->name = t->s;
        f->fid = jinja_filter_find(t->s);
        f->op = f->fid < 0;
        if (jinja_parse_is_op(jinja_parse_cur(p), "(") && jinja_parse_call_args(p, f) < 0)
            return NULL;
        node = f;
    }
    return node;
}

static jnode *parse_test(jparser *p, jnode *node) {
    jtok *is = jinja_parse_cur(p);
    next_tok(p);
    int negated = 0;
    if (jinja_parse_is_name(jinja_parse_cur(p), "not")) {
        negated = 1;
        next_tok(p);
    }
    jtok *t = jinja_parse_cur(p);
    if (t->type != JT_NAME) return fail_null(p, t->line, "expected a test name");
    next_tok(p);
    jnode *n = jinja_parse_node(p, JN_TEST, is->line);
    if (!n) return NULL;
    n->a = node;
    n->name = t->s;
    n->fid = jinja_test_find(t->s);
    n->op = n->fid < 0;
    jtok *c = jinja_parse_cur(p);
    if (jinja_parse_is_op(c, "(")) {
        if (jinja_parse_call_args(p, n) < 0) return NULL;
    } else if ((c->type == JT_NAME || c->type == JT_STRING || c->type == JT_INT ||
                c->type == JT_FLOAT || jinja_parse_is_op(c, "[") || jinja_parse_is_op(c, "{")) &&
               !jinja_parse_is_name(c, "else") && !jinja_parse_is_name(c, "or") &&
               !jinja_parse_is_name(c, "and")) {
        if (jinja_parse_is_name(c, "is"))
            return fail_null(p, c->line, "You cannot chain multiple tests with is");
        jnode *arg = jinja_parse_postfix(p, jinja_parse_primary(p));
        if (!arg || jinja_parse_push(p, &n->args, arg) < 0) return NULL;
    }
    if (!negated) return n;
    jnode *neg = jinja_parse_node(p, JN_UNARY, is->line);
    if (!neg) return NULL;
    neg->op = JOP_NOT;
    neg->a = n;
    return neg;
}
