/* jinja_exec.c - execution of Jinja statements: output, if, for, set, macros,
 * call blocks, filter blocks, with, break/continue.
 *
 * Scoping follows what Jinja2's compiler produces: each loop iteration, macro
 * call, call/filter/set block body and with block runs in a fresh scope whose
 * parent is the lexically enclosing one, so a {% set %} inside a loop never
 * survives the iteration while a namespace() mutated inside does; if-blocks open
 * no scope. Macros see the scope they were defined in (a closure), not the caller's.
 * Runaway templates stop with an error: loop iterations and macro nesting are
 * bounded, as is the output (see jctx). */
#include <stdio.h>
#include <string.h>

#include "engine/template/jinja_internal.h"

static int exec_stmt(jctx *c, jscope *s, const jnode *n);

int jinja_exec_body(jctx *c, jscope *s, const jnodes *body) {
    for (size_t i = 0; i < body->n && !c->loop_ctl; i++) JTRY(exec_stmt(c, s, body->v[i]));
    return 0;
}

static int out_put(jctx *c, int line, const char *p, size_t n) {
    int rc = strbuf_add(c->out, p, n);
    if (rc == STRATA_ERANGE)
        return jinja_ctx_fail(c, rc, line, "rendered text exceeds the output limit of %zu bytes",
                              c->max_output);
    if (rc < 0) return jinja_ctx_nomem(c, line);
    return 0;
}

static int out_value(jctx *c, int line, jv v) {
    if (v.kind == JV_STR) return out_put(c, line, v.u.s->p, v.u.s->len);
    if (v.kind == JV_UNDEF) return 0;
    strbuf *saved = c->out;
    int rc = jinja_write_str(c, c->out, v);
    c->out = saved;
    if (rc == STRATA_ERANGE)
        return jinja_ctx_fail(c, rc, line, "rendered text exceeds the output limit of %zu bytes",
                              c->max_output);
    if (rc < 0 && !c->err_set) return jinja_ctx_nomem(c, line);
    return rc;
}

/* Runs body in a new scope, collecting its output as a string. */
static int capture(jctx *c, jscope *s, const jnodes *body, jv *out) {
    strbuf buf, *saved = c->out;
    jinja_buf_init(&buf, c->a, c->max_output);
    c->out = &buf;
    int rc = jinja_exec_body(c, s, body);
    c->out = saved;
    JTRY(rc);
    *out = jinja_str(c, buf.p ? buf.p : "", buf.len);
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, 0) : 0;
}

/* ---- assignment ---------------------------------------------------------------------- */

static int assign(jctx *c, jscope *s, const jnode *target, jv v, int line) {
    if (target->type == JN_NAME) {
        if (jinja_scope_set(c, s, target->name, v) < 0) return jinja_ctx_nomem(c, line);
        return 0;
    }
    if (target->type == JN_NSREF) {
        jv ns = jinja_scope_lookup(c, s, target->a->name);
        if (ns.kind != JV_NS)
            return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                  "cannot assign attribute on non-namespace object");
        if (target->name[0] == '_')
            return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                  "Chat templates cannot store underscore-prefixed attributes on a "
                                  "namespace, but got '%s'. Please rename the attribute.",
                                  target->name);
        jv key = jinja_strz(c, target->name);
        if (jinja_is_oom(key) || jinja_dict_set(c, ns.u.d, key, v) < 0)
            return jinja_ctx_nomem(c, line);
        return 0;
    }
    /* tuple unpacking */
    jlist *items;
    if (v.kind == JV_UNDEF ||
        !(v.kind == JV_LIST || v.kind == JV_TUPLE || v.kind == JV_STR || v.kind == JV_DICT))
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "cannot unpack non-iterable %s object",
                              jinja_typename(v));
    JTRY(jinja_iterate(c, line, v, &items));
    size_t want = target->args.n;
    if (items->n < want)
        return jinja_ctx_fail(c, STRATA_EINVALID, line,
                              "not enough values to unpack (expected %zu, got %zu)", want,
                              items->n);
    if (items->n > want)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "too many values to unpack (expected %zu)",
                              want);
    for (size_t i = 0; i < want; i++) JTRY(assign(c, s, target->args.v[i], items->v[i], line));
    return 0;
}

/* ---- loops ------------------------------------------------------------------------------ */

static int count_iteration(jctx *c, int line) {
    if (++c->iterations > c->max_iterations)
        return jinja_ctx_fail(c, STRATA_ERANGE, line, "template exceeded %ld loop iterations",
                              c->max_iterations);
    return 0;
}

static int exec_for(jctx *c, jscope *s, const jnode *n) {
    jv it;
    JTRY(jinja_eval(c, s, n->b, &it));
    jlist *items;
    JTRY(jinja_iterate(c, n->line, it, &items));
    if (n->c) { /* loop filter: "for x in xs if cond" sees the target, not loop */
        jv kept = jinja_list(c, items->n);
        if (jinja_is_oom(kept)) return jinja_ctx_nomem(c, n->line);
        jscope *fs = jinja_scope_new(c, s);
        if (!fs) return jinja_ctx_nomem(c, n->line);
        for (size_t i = 0; i < items->n; i++) {
            JTRY(count_iteration(c, n->line));
            jv ok;
            fs->vars.n = 0;
            JTRY(assign(c, fs, n->a, items->v[i], n->line));
            JTRY(jinja_eval(c, fs, n->c, &ok));
            if (jinja_truthy(ok)) kept.u.l->v[kept.u.l->n++] = items->v[i];
        }
        items = kept.u.l;
    }
    jloop *lp = jinja_arena_alloc(c->a, sizeof *lp);
    if (!lp) return jinja_ctx_nomem(c, n->line);
    memset(lp, 0, sizeof *lp);
    lp->items = items;
    jv loopv = jinja_undef();
    loopv.kind = JV_LOOP;
    loopv.u.lp = lp;
    /* One scope serves every iteration, emptied in between, so memory stays flat over
     * long loops. (Only a macro defined in the body and smuggled out through a
     * namespace could see a later iteration's variables; no template does that.) */
    jscope *is = jinja_scope_new(c, s);
    int completed = 0;
    if (!is) return jinja_ctx_nomem(c, n->line);
    for (size_t i = 0; i < items->n; i++) {
        c->stmt_line = n->line;
        JTRY(count_iteration(c, n->line));
        lp->idx = i;
        is->vars.n = 0;
        JTRY(assign(c, is, n->a, items->v[i], n->line));
        if (jinja_scope_set(c, is, "loop", loopv) < 0) return jinja_ctx_nomem(c, n->line);
        JTRY(jinja_exec_body(c, is, &n->body));
        int ctl = c->loop_ctl;
        c->loop_ctl = 0;
        if (ctl == 1) break;
        completed |= ctl == 0;
    }
    /* Jinja2 clears its "no iteration" flag at the end of the body, so the else block
     * also runs when every iteration ended in break or continue. */
    if (completed || n->orelse.n == 0) return 0;
    jscope *es = jinja_scope_new(c, s);
    if (!es) return jinja_ctx_nomem(c, n->line);
    return jinja_exec_body(c, es, &n->orelse);
}

/* ---- macros ------------------------------------------------------------------------------ */

int jinja_call_macro(jctx *c, int line, jmacro *m, jv *args, size_t nargs, const char **kwn,
                     jv *kwv, size_t nkw, jv caller, jv *out) {
    const jnode *def = m->def;
    size_t nparams = def->args.n;
    const char *name = m->name ? m->name : "caller";
    int uses_caller = def->flag & 1, uses_varargs = def->flag & 2, uses_kwargs = def->flag & 4;
    if (++c->depth > c->max_depth)
        return jinja_ctx_fail(c, STRATA_ERANGE, line,
                              "maximum recursion depth exceeded (%d nested macro calls)",
                              c->max_depth);
    jscope *ms = jinja_scope_new(c, m->closure);
    if (!ms) return jinja_ctx_nomem(c, line);
    uint8_t *used = jinja_arena_alloc(c->a, nkw + 1);
    if (!used) return jinja_ctx_nomem(c, line);
    memset(used, 0, nkw + 1);
    int saved_line = c->stmt_line;
    for (size_t i = 0; i < nparams; i++) {
        const char *pname = def->args.v[i]->name;
        jv v;
        int have = 0;
        if (i < nargs) {
            v = args[i], have = 1;
        } else if (nargs < nparams) { /* Jinja2 takes keywords only when positionals ran short */
            for (size_t k = 0; k < nkw; k++) {
                if (!used[k] && !strcmp(kwn[k], pname)) {
                    v = kwv[k], have = 1, used[k] = 1;
                    break;
                }
            }
        }
        if (!have) {
            if (def->kwv.v[i]) {
                JTRY(jinja_eval(c, ms, def->kwv.v[i], &v)); /* defaults see earlier parameters */
            } else {
                char *hint = jinja_arena_alloc(c->a, 128);
                if (!hint) return jinja_ctx_nomem(c, line);
                snprintf(hint, 128, "parameter '%s' was not provided", pname);
                v = jinja_undef_hint(c, hint);
                if (jinja_is_oom(v)) return jinja_ctx_nomem(c, line);
            }
        }
        if (jinja_scope_set(c, ms, pname, v) < 0) return jinja_ctx_nomem(c, line);
    }
    if (uses_caller) {
        jv cv = caller;
        for (size_t k = 0; k < nkw; k++)
            if (!used[k] && !strcmp(kwn[k], "caller")) cv = kwv[k], used[k] = 1;
        if (cv.kind == JV_UNDEF) cv = jinja_undef_hint(c, "No caller defined");
        if (jinja_is_oom(cv) || jinja_scope_set(c, ms, "caller", cv) < 0)
            return jinja_ctx_nomem(c, line);
    }
    if (uses_kwargs) {
        jv d = jinja_dict(c, nkw);
        if (jinja_is_oom(d)) return jinja_ctx_nomem(c, line);
        for (size_t k = 0; k < nkw; k++) {
            if (used[k]) continue;
            jv key = jinja_strz(c, kwn[k]);
            if (jinja_is_oom(key) || jinja_dict_set(c, d.u.d, key, kwv[k]) < 0)
                return jinja_ctx_nomem(c, line);
        }
        if (jinja_scope_set(c, ms, "kwargs", d) < 0) return jinja_ctx_nomem(c, line);
    } else {
        for (size_t k = 0; k < nkw; k++)
            if (!used[k])
                return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                      "macro '%s' takes no keyword argument '%s'", name, kwn[k]);
    }
    if (uses_varargs) {
        jv t = jinja_list(c, nargs > nparams ? nargs - nparams : 0);
        if (jinja_is_oom(t)) return jinja_ctx_nomem(c, line);
        for (size_t i = nparams; i < nargs; i++) t.u.l->v[t.u.l->n++] = args[i];
        t.kind = JV_TUPLE;
        if (jinja_scope_set(c, ms, "varargs", t) < 0) return jinja_ctx_nomem(c, line);
    } else if (nargs > nparams) {
        return jinja_ctx_fail(c, STRATA_EINVALID, line,
                              "macro '%s' takes not more than %zu argument(s)", name, nparams);
    }
    JTRY(capture(c, ms, &def->body, out));
    c->stmt_line = saved_line;
    c->depth--;
    return 0;
}

static jv macro_value(jctx *c, const jnode *def, jscope *s, const char *name) {
    jmacro *m = jinja_arena_alloc(c->a, sizeof *m);
    jv v = jinja_undef();
    if (!m) {
        v.fn = 1;
        return v;
    }
    m->def = def;
    m->closure = s;
    m->name = name;
    m->caller = jinja_none();
    v.kind = JV_MACRO;
    v.u.m = m;
    return v;
}

/* Applies a filter chain whose innermost filter takes `input` (filter blocks, block set). */
static int apply_chain(jctx *c, jscope *s, const jnode *chain, jv input, jv *out) {
    jv saved = c->filter_input;
    c->filter_input = input;
    int rc = jinja_eval(c, s, chain, out);
    c->filter_input = saved;
    return rc;
}

/* ---- statements --------------------------------------------------------------------------- */

static int exec_stmt(jctx *c, jscope *s, const jnode *n) {
    jv v;
    switch ((jnode_type)n->type) {
    case JN_TEXT: return out_put(c, n->line, n->val.u.s->p, n->val.u.s->len);
    case JN_PRINT:
        c->stmt_line = n->a->line;
        JTRY(jinja_eval(c, s, n->a, &v));
        return out_value(c, n->line, v);
    case JN_IF:
        c->stmt_line = n->line;
        JTRY(jinja_eval(c, s, n->a, &v));
        return jinja_exec_body(c, s, jinja_truthy(v) ? &n->body : &n->orelse);
    case JN_FOR: c->stmt_line = n->line; return exec_for(c, s, n);
    case JN_SET:
        c->stmt_line = n->line;
        JTRY(jinja_eval(c, s, n->b, &v));
        return assign(c, s, n->a, v, n->line);
    case JN_SETBLOCK: {
        jscope *bs = jinja_scope_new(c, s);
        if (!bs) return jinja_ctx_nomem(c, n->line);
        JTRY(capture(c, bs, &n->body, &v));
        c->stmt_line = n->line;
        if (n->c) JTRY(apply_chain(c, bs, n->c, v, &v));
        return assign(c, s, n->a, v, n->line);
    }
    case JN_MACRO:
        v = macro_value(c, n, s, n->name);
        if (jinja_is_oom(v) || jinja_scope_set(c, s, n->name, v) < 0)
            return jinja_ctx_nomem(c, n->line);
        return 0;
    case JN_CALLBLOCK: {
        c->stmt_line = n->line;
        jv caller = macro_value(c, n, s, NULL), fn, *args = NULL, *kwv;
        const jnode *call = n->a;
        const char **kwn = jinja_arena_alloc(c->a, (call->kwv.n + 1) * sizeof *kwn);
        kwv = jinja_arena_alloc(c->a, (call->kwv.n + 1) * sizeof *kwv);
        if (jinja_is_oom(caller) || !kwn || !kwv) return jinja_ctx_nomem(c, n->line);
        if (call->args.n && !(args = jinja_arena_alloc(c->a, call->args.n * sizeof *args)))
            return jinja_ctx_nomem(c, n->line);
        JTRY(jinja_eval(c, s, call->a, &fn));
        for (size_t i = 0; i < call->args.n; i++) JTRY(jinja_eval(c, s, call->args.v[i], &args[i]));
        for (size_t i = 0; i < call->kwv.n; i++) {
            kwn[i] = call->kwn[i];
            JTRY(jinja_eval(c, s, call->kwv.v[i], &kwv[i]));
        }
        kwn[call->kwv.n] = "caller";
        kwv[call->kwv.n] = caller;
        JTRY(
            jinja_call_value(c, call->line, fn, args, call->args.n, kwn, kwv, call->kwv.n + 1, &v));
        return out_value(c, n->line, v);
    }
    case JN_FILTERBLOCK: {
        jscope *bs = jinja_scope_new(c, s);
        if (!bs) return jinja_ctx_nomem(c, n->line);
        JTRY(capture(c, bs, &n->body, &v));
        c->stmt_line = n->line;
        JTRY(apply_chain(c, bs, n->a, v, &v));
        return out_value(c, n->line, v);
    }
    case JN_WITH: {
        c->stmt_line = n->line;
        jscope *ws = jinja_scope_new(c, s);
        if (!ws) return jinja_ctx_nomem(c, n->line);
        for (size_t i = 0; i < n->args.n; i++) {
            JTRY(jinja_eval(c, s, n->kwv.v[i], &v));
            JTRY(assign(c, ws, n->args.v[i], v, n->line));
        }
        return jinja_exec_body(c, ws, &n->body);
    }
    case JN_BLOCK: {
        jscope *bs = jinja_scope_new(c, s);
        if (!bs) return jinja_ctx_nomem(c, n->line);
        return jinja_exec_body(c, bs, &n->body);
    }
    case JN_BREAK: c->loop_ctl = 1; return 0;
    case JN_CONTINUE: c->loop_ctl = 2; return 0;
    default: return jinja_ctx_fail(c, STRATA_EINVALID, n->line, "not a statement");
    }
}
