/* jinja_eval.c - evaluation of Jinja expressions with Python semantics.
 *
 * Attribute and item access follow Jinja2's sandboxed environment: obj.name tries
 * the Python attribute first (so message.items is the dict method) then the key;
 * obj[key] tries the key first then the attribute; a miss is an Undefined that
 * remembers what was missing. Arithmetic is Python's (true division, floor
 * division and modulo with the divisor's sign, str * int, list + list), and
 * and/or return an operand, not a bool. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/template/jinja_internal.h"

/* ---- scopes ------------------------------------------------------------------------ */

jscope *jinja_scope_new(jctx *c, jscope *parent) {
    jscope *s = jinja_arena_alloc(c->a, sizeof *s);
    if (!s) return NULL;
    s->parent = parent;
    s->vars.n = s->vars.cap = 0;
    s->vars.k = s->vars.v = NULL;
    return s;
}

jv jinja_scope_lookup(jctx *c, jscope *s, const char *name) {
    jv v;
    for (; s; s = s->parent)
        if (jinja_dict_gets(&s->vars, name, &v)) return v;
    if (jinja_dict_gets(c->render_vars, name, &v)) return v;
    int fn = jinja_global_find(name);
    if (fn >= 0) {
        v = jinja_undef();
        v.kind = JV_FUNC;
        v.fn = (uint16_t)fn;
        return v;
    }
    return jinja_undef_named(c, name);
}

int jinja_scope_set(jctx *c, jscope *s, const char *name, jv v) {
    jv key = {0};
    key.kind = JV_STR;
    size_t n = strlen(name);
    for (size_t i = 0; i < s->vars.n; i++) {
        if (s->vars.k[i].u.s->len == n && !memcmp(s->vars.k[i].u.s->p, name, n)) {
            s->vars.v[i] = v;
            return 0;
        }
    }
    /* A loop scope is emptied between iterations: its old key strings are reused so a
     * long loop does not allocate on every iteration. */
    if (s->vars.n < s->vars.cap && s->vars.k[s->vars.n].kind == JV_STR &&
        s->vars.k[s->vars.n].u.s->len == n && !memcmp(s->vars.k[s->vars.n].u.s->p, name, n)) {
        s->vars.v[s->vars.n++] = v;
        return 0;
    }
    key = jinja_strz(c, name);
    if (jinja_is_oom(key)) return STRATA_ENOMEM;
    if (s->vars.cap == 0) {
        s->vars.cap = 4;
        s->vars.k = jinja_arena_alloc(c->a, 4 * sizeof(jv));
        s->vars.v = jinja_arena_alloc(c->a, 4 * sizeof(jv));
        if (!s->vars.k || !s->vars.v) return STRATA_ENOMEM;
    }
    return jinja_dict_set(c, &s->vars, key, v);
}

int jinja_check_defined(jctx *c, int line, jv v) {
    if (v.kind != JV_UNDEF) return 0;
    return jinja_ctx_fail(c, STRATA_EINVALID, line, "%s", jinja_undef_message(c, v));
}

/* ---- attributes and items ------------------------------------------------------------ */

static jv method_value(jctx *c, jv self, int id) {
    jmethod *m = jinja_arena_alloc(c->a, sizeof *m);
    jv v = jinja_undef();
    if (!m) {
        v.fn = 1;
        return v;
    }
    m->self = self;
    m->id = id;
    v.kind = JV_METHOD;
    v.u.me = m;
    return v;
}

static jv unsafe_undef(jctx *c, jv obj, const char *name) {
    char *msg = jinja_arena_alloc(c->a, 200);
    jv v = jinja_undef_attr(c, obj, name);
    if (!msg || jinja_is_oom(v)) return v;
    snprintf(msg, 200, "access to attribute '%s' of '%s' object is unsafe.", name,
             jinja_typename(obj));
    v.u.u->hint = msg;
    v.u.u->security = 1;
    return v;
}

/* Python attribute lookup only (no key fallback); 1 found, 0 missing. */
static int py_attr(jctx *c, jv obj, const char *name, jv *out) {
    size_t n = strlen(name);
    if (n >= 4 && name[0] == '_' && name[1] == '_' && name[n - 1] == '_' && name[n - 2] == '_') {
        *out = unsafe_undef(c, obj, name); /* dunders exist on every object and are unsafe */
        return 1;
    }
    if (obj.kind == JV_NS) return jinja_dict_gets(obj.u.d, name, out);
    if (obj.kind == JV_LOOP) {
        const jloop *l = obj.u.lp;
        size_t len = l->items->n, i = l->idx;
        if (!strcmp(name, "index")) *out = jinja_int((int64_t)i + 1);
        else if (!strcmp(name, "index0")) *out = jinja_int((int64_t)i);
        else if (!strcmp(name, "revindex")) *out = jinja_int((int64_t)(len - i));
        else if (!strcmp(name, "revindex0")) *out = jinja_int((int64_t)(len - i - 1));
        else if (!strcmp(name, "first")) *out = jinja_bool(i == 0);
        else if (!strcmp(name, "last")) *out = jinja_bool(i + 1 == len);
        else if (!strcmp(name, "length")) *out = jinja_int((int64_t)len);
        else if (!strcmp(name, "depth")) *out = jinja_int(l->depth0 + 1);
        else if (!strcmp(name, "depth0")) *out = jinja_int(l->depth0);
        else if (!strcmp(name, "previtem"))
            *out = i > 0 ? l->items->v[i - 1] : jinja_undef_hint(c, "there is no previous item");
        else if (!strcmp(name, "nextitem"))
            *out = i + 1 < len ? l->items->v[i + 1] : jinja_undef_hint(c, "there is no next item");
        else goto method;
        return 1;
    }
method:;
    if (obj.kind == JV_CYCLER && !strcmp(name, "current")) {
        *out = obj.u.cy->items[obj.u.cy->pos];
        return 1;
    }
    int id, unsafe;
    if (!jinja_method_find(obj, name, &id, &unsafe)) return 0;
    *out = unsafe ? unsafe_undef(c, obj, name) : method_value(c, obj, id);
    return 1;
}

int jinja_eval_getattr(jctx *c, int line, jv obj, const char *name, jv *out) {
    JTRY(jinja_check_defined(c, line, obj));
    if (py_attr(c, obj, name, out)) goto done;
    if (obj.kind == JV_DICT && jinja_dict_gets(obj.u.d, name, out)) return 0;
    *out = jinja_undef_attr(c, obj, name);
done:
    if (jinja_is_oom(*out)) return jinja_ctx_nomem(c, line);
    return 0;
}

static int index_of(jv key, int64_t len, int64_t *idx) {
    if (key.kind != JV_INT && key.kind != JV_BOOL) return 0;
    int64_t i = key.u.i < 0 ? key.u.i + len : key.u.i;
    if (i < 0 || i >= len) return 0;
    *idx = i;
    return 1;
}

/* Byte offset of code point k in s. */
static size_t cp_offset(const jstr *s, size_t k) {
    if (s->len == s->ncp) return k;
    size_t i = 0;
    while (k-- > 0 && i < s->len) jinja_utf8_next(s->p, s->len, &i);
    return i;
}

int jinja_eval_getitem(jctx *c, int line, jv obj, jv key, jv *out) {
    JTRY(jinja_check_defined(c, line, obj));
    int64_t i;
    switch ((jinja_kind)obj.kind) {
    case JV_DICT:
        if (jinja_hashable(key) && jinja_dict_get(obj.u.d, key, out)) return 0;
        break;
    case JV_LIST:
    case JV_TUPLE:
    case JV_RANGE:
        if (index_of(key, (int64_t)obj.u.l->n, &i)) {
            *out = obj.u.l->v[i];
            return 0;
        }
        break;
    case JV_STR:
        if (index_of(key, (int64_t)obj.u.s->ncp, &i)) {
            size_t at = cp_offset(obj.u.s, (size_t)i), end = at;
            jinja_utf8_next(obj.u.s->p, obj.u.s->len, &end);
            *out = jinja_str_cp(c, obj.u.s->p + at, end - at, 1);
            if (jinja_is_oom(*out)) return jinja_ctx_nomem(c, line);
            out->markup = obj.markup;
            return 0;
        }
        break;
    default: break;
    }
    if (key.kind == JV_STR) {
        if (py_attr(c, obj, key.u.s->p, out))
            return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
        *out = jinja_undef_attr(c, obj, key.u.s->p);
    } else {
        *out = jinja_undef_elem(c, obj, key);
    }
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}

/* Python's slice.indices() then the element walk, for str, list and tuple. */
static int eval_slice(jctx *c, int line, jv obj, jv bounds[3], jv *out) {
    JTRY(jinja_check_defined(c, line, obj));
    int64_t len = jinja_len(obj);
    if (obj.kind != JV_STR && obj.kind != JV_LIST && obj.kind != JV_TUPLE && obj.kind != JV_RANGE)
        len = -1;
    for (int k = 0; k < 3 && len >= 0; k++)
        if (bounds[k].kind != JV_NONE && bounds[k].kind != JV_INT && bounds[k].kind != JV_BOOL)
            len = -1;
    if (len < 0) { /* TypeError inside getitem: Jinja2 answers with an undefined */
        *out = jinja_undef_hint(c, "slicing failed");
        return 0;
    }
    int64_t step = bounds[2].kind == JV_NONE ? 1 : bounds[2].u.i;
    if (step == 0) return jinja_ctx_fail(c, STRATA_EINVALID, line, "slice step cannot be zero");
    /* PySlice_AdjustIndices */
    int64_t b[2];
    for (int k = 0; k < 2; k++) {
        if (bounds[k].kind == JV_NONE) {
            b[k] = step > 0 ? (k == 0 ? 0 : len) : (k == 0 ? len - 1 : -1);
            continue;
        }
        int64_t v = bounds[k].u.i;
        if (v < 0) {
            v += len;
            if (v < 0) v = step < 0 ? -1 : 0;
        } else if (v >= len) {
            v = step < 0 ? len - 1 : len;
        }
        b[k] = v;
    }
    int64_t start = b[0], stop = b[1];
    if (obj.kind == JV_STR) {
        const jstr *s = obj.u.s;
        strbuf out_b;
        jinja_buf_init(&out_b, c->a, 0);
        size_t count = 0;
        if (step == 1 && s->len == s->ncp) {
            if (stop > start && strbuf_add(&out_b, s->p + start, (size_t)(stop - start)) < 0)
                return jinja_ctx_nomem(c, line);
            count = stop > start ? (size_t)(stop - start) : 0;
        } else {
            size_t *offs = jinja_arena_alloc(c->a, (s->ncp + 1) * sizeof *offs), i = 0, k = 0;
            if (!offs) return jinja_ctx_nomem(c, line);
            while (i < s->len) {
                offs[k++] = i;
                jinja_utf8_next(s->p, s->len, &i);
            }
            offs[k] = s->len;
            for (int64_t j = start; step > 0 ? j < stop : j > stop; j += step, count++)
                if (strbuf_add(&out_b, s->p + offs[j], offs[j + 1] - offs[j]) < 0)
                    return jinja_ctx_nomem(c, line);
        }
        *out = jinja_str_cp(c, out_b.p ? out_b.p : "", out_b.len, count);
        if (jinja_is_oom(*out)) return jinja_ctx_nomem(c, line);
        out->markup = obj.markup;
        return 0;
    }
    jv l = jinja_list(c, 0);
    if (jinja_is_oom(l)) return jinja_ctx_nomem(c, line);
    for (int64_t j = start; step > 0 ? j < stop : j > stop; j += step)
        if (jinja_list_push(c, l.u.l, obj.u.l->v[j]) < 0) return jinja_ctx_nomem(c, line);
    l.kind = obj.kind == JV_RANGE ? JV_LIST : obj.kind; /* a range slice is printed as a list */
    *out = l;
    return 0;
}

/* ---- operators ----------------------------------------------------------------------- */

static int type_error(jctx *c, int line, const char *op, jv a, jv b) {
    return jinja_ctx_fail(c, STRATA_EINVALID, line,
                          "unsupported operand type(s) for %s: '%s' and '%s'", op,
                          jinja_typename(a), jinja_typename(b));
}

static int overflow(jctx *c, int line) {
    return jinja_ctx_fail(c, STRATA_ERANGE, line, "integer overflow (beyond 64 bits)");
}

static int repeat(jctx *c, int line, jv seq, int64_t times, jv *out) {
    if (times < 0) times = 0;
    if (seq.kind == JV_STR) {
        strbuf b;
        jinja_buf_init(&b, c->a, c->max_output);
        for (int64_t k = 0; k < times; k++) {
            int rc = strbuf_add(&b, seq.u.s->p, seq.u.s->len);
            if (rc == STRATA_ERANGE)
                return jinja_ctx_fail(c, rc, line, "string repetition exceeds the output limit");
            if (rc < 0) return jinja_ctx_nomem(c, line);
        }
        *out = jinja_str_cp(c, b.p ? b.p : "", b.len, seq.u.s->ncp * (size_t)times);
        return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
    }
    jv l = jinja_list(c, 0);
    if (jinja_is_oom(l)) return jinja_ctx_nomem(c, line);
    if (times > 0 && seq.u.l->n * (uint64_t)times > 10000000)
        return jinja_ctx_fail(c, STRATA_ERANGE, line, "list repetition too large");
    for (int64_t k = 0; k < times; k++)
        for (size_t i = 0; i < seq.u.l->n; i++)
            if (jinja_list_push(c, l.u.l, seq.u.l->v[i]) < 0) return jinja_ctx_nomem(c, line);
    l.kind = seq.kind;
    *out = l;
    return 0;
}

static void float_divmod(double x, double y, double *floordiv, double *mod) {
    double m = fmod(x, y), div = (x - m) / y;
    if (m != 0.0) {
        if ((y < 0) != (m < 0)) {
            m += y;
            div -= 1.0;
        }
    } else {
        m = copysign(0.0, y);
    }
    double fd;
    if (div != 0.0) {
        fd = floor(div);
        if (div - fd > 0.5) fd += 1.0;
    } else {
        fd = copysign(0.0, x / y);
    }
    *floordiv = fd;
    *mod = m;
}

static int concat_str(jctx *c, int line, jv a, jv b, jv *out) {
    strbuf buf;
    jinja_buf_init(&buf, c->a, 0);
    if (strbuf_add(&buf, a.u.s->p, a.u.s->len) < 0 || strbuf_add(&buf, b.u.s->p, b.u.s->len) < 0)
        return jinja_ctx_nomem(c, line);
    *out = jinja_str_cp(c, buf.p ? buf.p : "", buf.len, a.u.s->ncp + b.u.s->ncp);
    return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
}

int jinja_eval_binop(jctx *c, int line, int op, jv a, jv b, jv *out) {
    static const char *const names[] = {
        [JOP_ADD] = "+",   [JOP_SUB] = "-", [JOP_MUL] = "*",          [JOP_DIV] = "/",
        [JOP_FDIV] = "//", [JOP_MOD] = "%", [JOP_POW] = "** or pow()"};
    if (op == JOP_CONCAT) {
        jv sa = jinja_to_str(c, a), sb = jinja_to_str(c, b);
        if (jinja_is_oom(sa) || jinja_is_oom(sb)) return jinja_ctx_nomem(c, line);
        if (sa.kind == JV_UNDEF) sa = jinja_strz(c, "");
        if (sb.kind == JV_UNDEF) sb = jinja_strz(c, "");
        JTRY(concat_str(c, line, sa, sb, out));
        return 0;
    }
    JTRY(jinja_check_defined(c, line, a));
    JTRY(jinja_check_defined(c, line, b));
    if (op == JOP_MOD && a.kind == JV_STR) return jinja_format_percent(c, line, a, b, out);
    if (jinja_is_num(a) && jinja_is_num(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT && op != JOP_DIV) {
            int64_t x = a.u.i, y = b.u.i, r = 0;
            switch (op) {
            case JOP_ADD:
                if (__builtin_add_overflow(x, y, &r)) return overflow(c, line);
                break;
            case JOP_SUB:
                if (__builtin_sub_overflow(x, y, &r)) return overflow(c, line);
                break;
            case JOP_MUL:
                if (__builtin_mul_overflow(x, y, &r)) return overflow(c, line);
                break;
            case JOP_FDIV:
            case JOP_MOD:
                if (y == 0)
                    return jinja_ctx_fail(c, STRATA_EINVALID, line, "integer %s by zero",
                                          op == JOP_MOD ? "modulo" : "division or modulo");
                if (x == INT64_MIN && y == -1) return overflow(c, line);
                r = x % y;
                if (r != 0 && ((r < 0) != (y < 0))) r += y; /* Python: sign of the divisor */
                if (op == JOP_FDIV) r = (x - r) / y;
                break;
            case JOP_POW:
                if (y < 0) goto floating;
                r = 1;
                for (int64_t base = x, e = y; e > 0; e >>= 1) {
                    if ((e & 1) && __builtin_mul_overflow(r, base, &r)) return overflow(c, line);
                    if (e > 1 && __builtin_mul_overflow(base, base, &base))
                        return overflow(c, line);
                }
                break;
            }
            *out = jinja_int(r);
            return 0;
        }
    floating:;
        double x = jinja_as_double(a), y = jinja_as_double(b), r = 0, fd;
        switch (op) {
        case JOP_ADD: r = x + y; break;
        case JOP_SUB: r = x - y; break;
        case JOP_MUL: r = x * y; break;
        case JOP_DIV:
            if (y == 0) return jinja_ctx_fail(c, STRATA_EINVALID, line, "division by zero");
            r = x / y;
            break;
        case JOP_FDIV:
        case JOP_MOD:
            if (y == 0)
                return jinja_ctx_fail(c, STRATA_EINVALID, line, "float %s",
                                      op == JOP_MOD ? "modulo" : "floor division by zero");
            float_divmod(x, y, &fd, &r);
            if (op == JOP_FDIV) r = fd;
            break;
        case JOP_POW:
            if (x == 0 && y < 0)
                return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                      "0.0 cannot be raised to a negative power");
            if (x < 0 && y != floor(y))
                return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                      "complex results are not supported");
            r = pow(x, y);
            break;
        }
        *out = jinja_float(r);
        return 0;
    }
    if (op == JOP_ADD) {
        if (a.kind == JV_STR && b.kind == JV_STR) {
            if (a.markup != b.markup) { /* Markup.__add__ / __radd__ escape the plain side */
                if (a.markup) b = jinja_escape(c, b);
                else a = jinja_escape(c, a);
                if (jinja_is_oom(a) || jinja_is_oom(b)) return jinja_ctx_nomem(c, line);
            }
            JTRY(concat_str(c, line, a, b, out));
            out->markup = a.markup;
            return 0;
        }
        if ((a.kind == JV_LIST || a.kind == JV_TUPLE) && a.kind == b.kind) {
            jv l = jinja_list(c, a.u.l->n + b.u.l->n);
            if (jinja_is_oom(l)) return jinja_ctx_nomem(c, line);
            memcpy(l.u.l->v, a.u.l->v, a.u.l->n * sizeof(jv));
            memcpy(l.u.l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(jv));
            l.u.l->n = a.u.l->n + b.u.l->n;
            l.kind = a.kind;
            *out = l;
            return 0;
        }
        if (a.kind == JV_STR)
            return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                  "can only concatenate str (not \"%s\") to str",
                                  jinja_typename(b));
    }
    if (op == JOP_MUL) {
        int a_seq = a.kind == JV_STR || a.kind == JV_LIST || a.kind == JV_TUPLE;
        int b_seq = b.kind == JV_STR || b.kind == JV_LIST || b.kind == JV_TUPLE;
        if (a_seq && (b.kind == JV_INT || b.kind == JV_BOOL)) return repeat(c, line, a, b.u.i, out);
        if (b_seq && (a.kind == JV_INT || a.kind == JV_BOOL)) return repeat(c, line, b, a.u.i, out);
    }
    return type_error(c, line, names[op], a, b);
}

/* ---- expressions ------------------------------------------------------------------------ */

static int eval_args(jctx *c, jscope *s, const jnode *n, jv **args, jv **kwv) {
    *args = *kwv = NULL;
    if (n->args.n && !(*args = jinja_arena_alloc(c->a, n->args.n * sizeof(jv))))
        return jinja_ctx_nomem(c, n->line);
    if (n->kwv.n && !(*kwv = jinja_arena_alloc(c->a, n->kwv.n * sizeof(jv))))
        return jinja_ctx_nomem(c, n->line);
    for (size_t i = 0; i < n->args.n; i++) JTRY(jinja_eval(c, s, n->args.v[i], &(*args)[i]));
    for (size_t i = 0; i < n->kwv.n; i++) JTRY(jinja_eval(c, s, n->kwv.v[i], &(*kwv)[i]));
    return 0;
}

static int eval_compare(jctx *c, jscope *s, const jnode *n, jv *out) {
    jv left;
    JTRY(jinja_eval(c, s, n->a, &left));
    for (size_t i = 0; i < n->args.n; i++) {
        jv right;
        JTRY(jinja_eval(c, s, n->args.v[i], &right));
        int op = n->ops[i], r = 0, ok;
        if (op == JOP_EQ || op == JOP_NE) {
            ok = jinja_eq(left, right) == (op == JOP_EQ);
        } else if (op == JOP_IN || op == JOP_NOTIN) {
            jv res;
            JTRY(jinja_test_apply(c, n->line, jinja_test_find("in"), left, &right, 1, &res));
            ok = res.u.i == (op == JOP_IN);
        } else {
            JTRY(jinja_cmp(c, n->line, left, right, &r));
            ok = op == JOP_LT ? r < 0 : op == JOP_LE ? r <= 0 : op == JOP_GT ? r > 0 : r >= 0;
        }
        if (!ok) {
            *out = jinja_bool(0);
            return 0;
        }
        left = right;
    }
    *out = jinja_bool(1);
    return 0;
}

int jinja_eval(jctx *c, jscope *s, const jnode *n, jv *out) {
    jv a, b, *args, *kwv;
    switch ((jnode_type)n->type) {
    case JN_CONST: *out = n->val; return 0;
    case JN_NAME:
        *out = jinja_scope_lookup(c, s, n->name);
        return jinja_is_oom(*out) ? jinja_ctx_nomem(c, n->line) : 0;
    case JN_LIST:
    case JN_TUPLE: {
        jv l = jinja_list(c, n->args.n);
        if (jinja_is_oom(l)) return jinja_ctx_nomem(c, n->line);
        for (size_t i = 0; i < n->args.n; i++) JTRY(jinja_eval(c, s, n->args.v[i], &l.u.l->v[i]));
        l.u.l->n = n->args.n;
        l.kind = n->type == JN_LIST ? JV_LIST : JV_TUPLE;
        *out = l;
        return 0;
    }
    case JN_DICT: {
        jv d = jinja_dict(c, n->args.n / 2);
        if (jinja_is_oom(d)) return jinja_ctx_nomem(c, n->line);
        for (size_t i = 0; i + 1 < n->args.n; i += 2) {
            JTRY(jinja_eval(c, s, n->args.v[i], &a));
            JTRY(jinja_eval(c, s, n->args.v[i + 1], &b));
            if (!jinja_hashable(a))
                return jinja_ctx_fail(c, STRATA_EINVALID, n->line, "unhashable type: '%s'",
                                      jinja_typename(a));
            if (jinja_dict_set(c, d.u.d, a, b) < 0) return jinja_ctx_nomem(c, n->line);
        }
        *out = d;
        return 0;
    }
    case JN_GETATTR:
        JTRY(jinja_eval(c, s, n->a, &a));
        return jinja_eval_getattr(c, n->line, a, n->name, out);
    case JN_GETITEM:
        JTRY(jinja_eval(c, s, n->a, &a));
        if (n->b->type == JN_SLICE) {
            jv bounds[3];
            const jnode *parts[3] = {n->b->a, n->b->b, n->b->c};
            for (int k = 0; k < 3; k++) {
                bounds[k] = jinja_none();
                if (parts[k]) JTRY(jinja_eval(c, s, parts[k], &bounds[k]));
            }
            return eval_slice(c, n->line, a, bounds, out);
        }
        JTRY(jinja_eval(c, s, n->b, &b));
        return jinja_eval_getitem(c, n->line, a, b, out);
    case JN_CALL:
        JTRY(jinja_eval(c, s, n->a, &a));
        JTRY(eval_args(c, s, n, &args, &kwv));
        return jinja_call_value(c, n->line, a, args, n->args.n, n->kwn, kwv, n->kwv.n, out);
    case JN_FILTER:
        if (n->a) JTRY(jinja_eval(c, s, n->a, &a));
        else a = c->filter_input;
        if (n->op)
            return jinja_ctx_fail(c, STRATA_EINVALID, n->line, "No filter named '%s' found.",
                                  n->name);
        JTRY(eval_args(c, s, n, &args, &kwv));
        return jinja_filter_apply_id(c, n->line, n->fid, a, args, n->args.n, n->kwn, kwv, n->kwv.n,
                                     out);
    case JN_TEST:
        JTRY(jinja_eval(c, s, n->a, &a));
        if (n->op)
            return jinja_ctx_fail(c, STRATA_EINVALID, n->line, "No test named '%s' found.",
                                  n->name);
        JTRY(eval_args(c, s, n, &args, &kwv));
        if (n->kwv.n)
            return jinja_ctx_fail(c, STRATA_EINVALID, n->line,
                                  "tests take no keyword arguments here");
        return jinja_test_apply(c, n->line, n->fid, a, args, n->args.n, out);
    case JN_UNARY:
        JTRY(jinja_eval(c, s, n->a, &a));
        if (n->op == JOP_NOT) {
            *out = jinja_bool(!jinja_truthy(a));
            return 0;
        }
        JTRY(jinja_check_defined(c, n->line, a));
        if (!jinja_is_num(a))
            return jinja_ctx_fail(c, STRATA_EINVALID, n->line,
                                  "bad operand type for unary %c: '%s'",
                                  n->op == JOP_NEG ? '-' : '+', jinja_typename(a));
        if (n->op == JOP_NEG) {
            if (a.kind == JV_FLOAT) *out = jinja_float(-a.u.f);
            else if (a.u.i == INT64_MIN) return overflow(c, n->line);
            else *out = jinja_int(-a.u.i);
        } else {
            *out = a.kind == JV_FLOAT ? a : jinja_int(a.u.i);
        }
        return 0;
    case JN_BINARY:
        JTRY(jinja_eval(c, s, n->a, &a));
        if (n->op == JOP_AND || n->op == JOP_OR) {
            if (jinja_truthy(a) == (n->op == JOP_OR)) {
                *out = a;
                return 0;
            }
            return jinja_eval(c, s, n->b, out);
        }
        JTRY(jinja_eval(c, s, n->b, &b));
        return jinja_eval_binop(c, n->line, n->op, a, b, out);
    case JN_COMPARE: return eval_compare(c, s, n, out);
    case JN_COND:
        JTRY(jinja_eval(c, s, n->a, &a));
        if (jinja_truthy(a)) return jinja_eval(c, s, n->b, out);
        if (n->c) return jinja_eval(c, s, n->c, out);
        {
            char *hint = jinja_arena_alloc(c->a, 160);
            if (!hint) return jinja_ctx_nomem(c, n->line);
            snprintf(hint, 160,
                     "the inline if-expression on line %d evaluated to false and no else section "
                     "was defined.",
                     n->line);
            *out = jinja_undef_hint(c, hint);
        }
        return jinja_is_oom(*out) ? jinja_ctx_nomem(c, n->line) : 0;
    default: return jinja_ctx_fail(c, STRATA_EINVALID, n->line, "not an expression");
    }
}

int jinja_call_value(jctx *c, int line, jv fn, jv *args, size_t nargs, const char **kwn, jv *kwv,
                     size_t nkw, jv *out) {
    switch ((jinja_kind)fn.kind) {
    case JV_MACRO:
        return jinja_call_macro(c, line, fn.u.m, args, nargs, kwn, kwv, nkw, jinja_undef(), out);
    case JV_FUNC: return jinja_global_call(c, line, fn.fn, args, nargs, kwn, kwv, nkw, out);
    case JV_METHOD: return jinja_method_call(c, line, fn.u.me, args, nargs, kwn, kwv, nkw, out);
    case JV_JOINER: {
        jcycler *j = fn.u.cy;
        *out = jinja_strz(c, j->used ? j->sep : "");
        j->used = 1;
        return jinja_is_oom(*out) ? jinja_ctx_nomem(c, line) : 0;
    }
    case JV_UNDEF: return jinja_check_defined(c, line, fn);
    default:
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "'%s' object is not callable",
                              jinja_typename(fn));
    }
}
