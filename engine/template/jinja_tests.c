/* jinja_tests.c - Jinja2's builtin tests (`is defined`, `is string`, `is divisibleby 3`,
 * ...) and the `in` operator, as jinja2/tests.py 3.1 defines them. */
#include <math.h>
#include <string.h>

#include "engine/template/jinja_internal.h"

/* ---- the `in` operator and tests ---------------------------------------------------- */

static int contains(jctx *c, int line, jv seq, jv item, int *res) {
    jlist *items;
    *res = 0;
    switch ((jinja_kind)seq.kind) {
    case JV_STR:
        if (item.kind != JV_STR)
            return jinja_ctx_fail(c, STRATA_EINVALID, line,
                                  "'in <string>' requires string as left operand, not %s",
                                  jinja_typename(item));
        *res = item.u.s->len == 0 ||
               memmem(seq.u.s->p, seq.u.s->len, item.u.s->p, item.u.s->len) != NULL;
        return 0;
    case JV_DICT:
        if (!jinja_hashable(item))
            return jinja_ctx_fail(c, STRATA_EINVALID, line, "unhashable type: '%s'",
                                  jinja_typename(item));
        *res = jinja_dict_get(seq.u.d, item, NULL);
        return 0;
    case JV_UNDEF:
        if (seq.u.u && seq.u.u->security) return jinja_check_defined(c, line, seq);
        return 0;
    case JV_LIST:
    case JV_TUPLE:
    case JV_ITER:
    case JV_VIEW:
    case JV_RANGE:
    case JV_LOOP:
        JTRY(jinja_iterate(c, line, seq, &items));
        for (size_t i = 0; i < items->n && !*res; i++) *res = jinja_eq(items->v[i], item);
        return 0;
    default:
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "argument of type '%s' is not iterable",
                              jinja_typename(seq));
    }
}

/* Jinja2's tests: X(name, id, takes an argument). Aliases share the behaviour of
 * their canonical test through the switch below. */
/* a list laid out by hand: clang-format reflows X-macro lists differently each run */
/* clang-format off */
#define JTEST_LIST(X)                                                                                              \
    X("boolean", BOOLEAN, 0) X("callable", CALLABLE, 0) X("defined", DEFINED, 0) X("divisibleby", DIVISIBLEBY, 1)  \
    X("eq", EQ, 1) X("equalto", EQUALTO, 1) X("==", EQ2, 1) X("escaped", ESCAPED, 0)                               \
    X(        \
            "even", EVEN, 0) X("false", FALSE, 0) X("filter", FILTER, 0) X("float", FLOAT, 0)      \
    X("ge", GE, 1) X(">=", GE2, 1) X("gt", GT, 1) X("greaterthan", GT3, 1)                                         \
    X(">", GT2, 1) X("in", IN, 1) X("integer", INTEGER, 0) X("iterable", ITERABLE, 0)                              \
    X("le", LE, 1) X("<=", LE2, 1) X("lower", LOWER, 0) X("lt", LT, 1)                                             \
    X("lessthan", LT3, 1) X("<", LT2, 1) X("mapping", MAPPING, 0) X("ne", NE, 1)                                   \
    X("!=", NE2, 1) X("none", NONE, 0) X("number", NUMBER, 0) X("odd", ODD, 0)                                     \
    X("sameas", SAMEAS, 1) X("sequence", SEQUENCE, 0) X("string", STRING, 0) X("test", TEST, 0)                    \
    X("true", TRUE, 0) X("undefined", UNDEFINED, 0) X("upper", UPPER, 0)
/* clang-format on */

enum {
#define X(name, id, arg) JTEST_##id,
    JTEST_LIST(X)
#undef X
        JTEST_COUNT
};
static const struct {
    const char *name;
    int arg;
} tests[] = {
#define X(name, id, arg) {name, arg},
    JTEST_LIST(X)
#undef X
};

int jinja_test_find(const char *name) {
    for (int i = 0; i < JTEST_COUNT; i++)
        if (!strcmp(tests[i].name, name)) return i;
    return -1;
}

static int str_all_case(jctx *c, int line, jv v, int upper, int *res) {
    jv s;
    JTRY(jinja_soft_str(c, line, v, &s));
    int cased = 0, ok = 1;
    size_t i = 0;
    while (i < s.u.s->len && ok) {
        uint32_t cp = jinja_utf8_next(s.u.s->p, s.u.s->len, &i);
        if (upper ? (unicode_py_islower(cp) || unicode_py_istitle(cp))
                  : (unicode_py_isupper(cp) || unicode_py_istitle(cp)))
            ok = 0;
        else if (upper ? unicode_py_isupper(cp) : unicode_py_islower(cp)) cased = 1;
    }
    *res = ok && cased;
    return 0;
}

int jinja_test_apply(jctx *c, int line, int tid, jv v, jv *args, size_t nargs, jv *out) {
    const char *name = tests[tid].name;
    int r = 0, cmp;
    jv arg = nargs ? args[0] : jinja_missing(), tmp;
    if (tests[tid].arg && !jinja_given(arg))
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "test '%s' is missing an argument", name);
    if (nargs > (size_t)tests[tid].arg)
        return jinja_ctx_fail(c, STRATA_EINVALID, line, "test '%s' got too many arguments", name);
    switch (tid) {
    case JTEST_DEFINED: r = v.kind != JV_UNDEF; break;
    case JTEST_UNDEFINED: r = v.kind == JV_UNDEF; break;
    case JTEST_NONE: r = v.kind == JV_NONE; break;
    case JTEST_BOOLEAN: r = v.kind == JV_BOOL; break;
    case JTEST_FALSE: r = v.kind == JV_BOOL && !v.u.i; break;
    case JTEST_TRUE: r = v.kind == JV_BOOL && v.u.i; break;
    case JTEST_INTEGER: r = v.kind == JV_INT; break;
    case JTEST_FLOAT: r = v.kind == JV_FLOAT; break;
    case JTEST_NUMBER: r = jinja_is_num(v); break;
    case JTEST_STRING: r = v.kind == JV_STR; break;
    case JTEST_MAPPING: r = v.kind == JV_DICT; break;
    case JTEST_ESCAPED: r = v.kind == JV_STR && v.markup; break;
    case JTEST_CALLABLE: /* Undefined defines __call__ too */
        r = v.kind == JV_MACRO || v.kind == JV_FUNC || v.kind == JV_METHOD || v.kind == JV_JOINER ||
            v.kind == JV_LOOP || v.kind == JV_UNDEF;
        break;
    case JTEST_ITERABLE:
        r = v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_TUPLE || v.kind == JV_DICT ||
            v.kind == JV_UNDEF || v.kind == JV_ITER || v.kind == JV_VIEW || v.kind == JV_LOOP ||
            v.kind == JV_RANGE;
        break;
    case JTEST_SEQUENCE: /* len() and __getitem__: str, list, tuple, dict, range, Undefined */
        r = v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_TUPLE || v.kind == JV_DICT ||
            v.kind == JV_UNDEF || v.kind == JV_RANGE;
        break;
    case JTEST_LOWER:
    case JTEST_UPPER: JTRY(str_all_case(c, line, v, tid == JTEST_UPPER, &r)); break;
    case JTEST_ODD:
    case JTEST_EVEN:
    case JTEST_DIVISIBLEBY: /* value % n == 0 (or == 1 for odd), as Jinja2 computes it */
        JTRY(jinja_eval_binop(c, line, JOP_MOD, v, tid == JTEST_DIVISIBLEBY ? arg : jinja_int(2),
                              &tmp));
        r = jinja_eq(tmp, jinja_int(tid == JTEST_ODD));
        break;
    case JTEST_IN: JTRY(contains(c, line, arg, v, &r)); break;
    case JTEST_SAMEAS: /* identity: singletons, CPython's small ints, the same object */
        r = v.kind == arg.kind &&
            (v.kind == JV_NONE || v.kind == JV_UNDEF ? 1
             : v.kind == JV_BOOL                     ? v.u.i == arg.u.i
             : v.kind == JV_INT   ? v.u.i == arg.u.i && v.u.i >= -5 && v.u.i <= 256
             : v.kind == JV_FLOAT ? 0
                                  : v.u.s == arg.u.s);
        break;
    case JTEST_FILTER: r = v.kind == JV_STR && jinja_filter_find(v.u.s->p) >= 0; break;
    case JTEST_TEST: r = v.kind == JV_STR && jinja_test_find(v.u.s->p) >= 0; break;
    case JTEST_EQ:
    case JTEST_EQUALTO:
    case JTEST_EQ2: r = jinja_eq(v, arg); break;
    case JTEST_NE:
    case JTEST_NE2: r = !jinja_eq(v, arg); break;
    default:
        JTRY(jinja_cmp(c, line, v, arg, &cmp));
        r = tid == JTEST_LT || tid == JTEST_LT2 || tid == JTEST_LT3   ? cmp < 0
            : tid == JTEST_LE || tid == JTEST_LE2                     ? cmp <= 0
            : tid == JTEST_GT || tid == JTEST_GT2 || tid == JTEST_GT3 ? cmp > 0
                                                                      : cmp >= 0;
    }
    *out = jinja_bool(r);
    return 0;
}
