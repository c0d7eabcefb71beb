/* jinja_internal.h - the pieces of the Jinja interpreter shared by its files.
 *
 * The interpreter is split by concern: jinja_arena.c (memory, buffers, UTF-8),
 * jinja_value.c (Python-like values, equality, str/repr), jinja_json.c (json.dumps),
 * jinja_lex.c (Jinja2's lexer), jinja_parse*.c (AST), jinja_eval.c (expressions),
 * jinja_exec.c (statements), jinja_filters*.c (filters and tests), jinja_methods.c
 * (str/dict methods and globals), jinja_format.c (% and str.format), jinja_str.c
 * (Python str helpers; the character tables are engine/unicode). Nothing here is public API:
 * engine/template/chat_template.h is the door.
 *
 * Memory: a parse allocates the AST from the template's arena; a render allocates
 * every value from a per-render arena freed in one go at the end, so values are
 * shared freely without reference counts (namespaces may even refer to themselves).
 * Values never change after construction except namespaces and a dict/list while
 * its literal is being built: the environment is Jinja2's immutable sandbox. */
#ifndef STRATA_JINJA_INTERNAL_H
#define STRATA_JINJA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/err.h"
#include "engine/base/strbuf.h"
#include "engine/unicode/pystr.h"

/* ---- arena ---------------------------------------------------------------------- */

typedef struct jarena jarena;

/* budget: bytes the arena may hold in all (0: no limit); fail_at: test hook, the
 * n-th allocation (creating the arena is the first) and every one after it fail
 * (0: never). */
jarena *jinja_arena_create(size_t budget, long fail_at);
void jinja_arena_destroy(jarena *a);
/* Zeroed memory; NULL when out of memory or over budget (jinja_arena_over_budget tells which). */
void *jinja_arena_alloc(jarena *a, size_t n);
int jinja_arena_over_budget(const jarena *a);
char *jinja_arena_strndup(jarena *a, const char *s, size_t n);

/* A byte buffer growing in the arena a (freed with it), with an output limit max
 * (0 = none) past which appends fail with STRATA_ERANGE. */
void jinja_buf_init(strbuf *b, jarena *a, size_t max);

/* ---- UTF-8 and Python character classes ------------------------------------------ */

/* Decodes one code point at s[*i] (valid UTF-8 assumed, as all strings are), advances *i. */
uint32_t jinja_utf8_next(const char *s, size_t len, size_t *i);
/* Writes cp as UTF-8 into out (4 bytes room); returns its length. */
int jinja_utf8_put(char *out, uint32_t cp);
/* Byte length of the valid UTF-8 prefix; equals len when all of s is valid. */
size_t jinja_utf8_valid_prefix(const char *s, size_t len);
size_t jinja_utf8_count(const char *s, size_t len);

/* ---- values ---------------------------------------------------------------------- */

typedef enum {
    JV_UNDEF, /* jinja2.Undefined */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_TUPLE, /* shares jlist */
    JV_DICT,
    JV_NS, /* namespace(): a mutable jdict */
    JV_MACRO,
    JV_FUNC,   /* a global function (range, namespace, ...) */
    JV_METHOD, /* a bound method of a str / dict / list / loop / cycler / joiner */
    JV_LOOP,
    JV_CYCLER,
    JV_JOINER,
    JV_ITER,  /* a one-shot iterator over a jlist (fn: JITER_*): what map/select/... return */
    JV_VIEW,  /* dict.keys()/values()/items() (fn: JVIEW_*) over a jlist */
    JV_RANGE, /* range(): a jrange, whose items are materialised (at most 100,000) */
} jinja_kind;

/* JV_ITER flavours (for printing) and JV_VIEW flavours */
enum { JITER_GENERATOR, JITER_LIST_REVERSE, JITER_DICT_REVERSE, JITER_STR_REVERSE };
enum { JVIEW_KEYS, JVIEW_VALUES, JVIEW_ITEMS };

typedef struct jstr {
    size_t len; /* bytes */
    size_t ncp; /* code points (len == ncp: ASCII) */
    char p[];   /* NUL-terminated */
} jstr;

typedef struct jv jv;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jundef jundef;
typedef struct jmacro jmacro;
typedef struct jloop jloop;
typedef struct jmethod jmethod;
typedef struct jcycler jcycler;

struct jv {
    uint8_t kind;   /* jinja_kind */
    uint8_t markup; /* JV_STR: a markupsafe.Markup (from |safe or |escape) */
    uint16_t fn;    /* JV_FUNC: global function id; JV_ITER / JV_VIEW: flavour */
    union {
        int64_t i; /* JV_BOOL (0/1), JV_INT */
        double f;
        jstr *s;
        jlist *l; /* JV_LIST, JV_TUPLE, JV_ITER, JV_VIEW */
        jdict *d;
        jundef *u; /* NULL: a plain undefined with no name */
        jmacro *m;
        jloop *lp;
        jmethod *me;
        jcycler *cy;
    } u;
};

struct jlist {
    size_t n, cap;
    jv *v;
};

/* range(start, stop, step): the items for iteration plus the arguments for repr. */
typedef struct jrange {
    jlist l; /* first: u.l works on a range */
    int64_t start, stop, step;
} jrange;

struct jdict {
    size_t n, cap;
    jv *k, *v; /* insertion order, as Python dicts */
};

struct jundef {
    const char *name; /* the missing name or attribute (NULL: generic hint) */
    const char *hint; /* full message when set (e.g. "no first item") */
    jv obj;           /* the object the attribute was missing on (JV_UNDEF: a name) */
    int has_obj;
    int is_element; /* missing item with a non-string key */
    int security;   /* access to an unsafe attribute: using it raises SecurityError */
};

struct jmethod {
    jv self;
    int id; /* JM_* in jinja_methods.c */
};

struct jcycler {
    jv *items;
    size_t n, pos;
    const char *sep; /* joiner */
    int used;
};

/* Constructors. Those taking a context allocate from its arena; NULL-safe only
 * where noted. */
static inline jv jinja_undef(void) {
    jv v = {0};
    v.kind = JV_UNDEF;
    return v;
}
static inline jv jinja_none(void) {
    jv v = {0};
    v.kind = JV_NONE;
    return v;
}
static inline jv jinja_bool(int b) {
    jv v = {0};
    v.kind = JV_BOOL;
    v.u.i = b != 0;
    return v;
}
static inline jv jinja_int(int64_t i) {
    jv v = {0};
    v.kind = JV_INT;
    v.u.i = i;
    return v;
}
static inline jv jinja_float(double f) {
    jv v = {0};
    v.kind = JV_FLOAT;
    v.u.f = f;
    return v;
}

/* ---- AST ------------------------------------------------------------------------ */

typedef enum {
    /* expressions */
    JN_CONST,
    JN_NAME,
    JN_LIST,
    JN_TUPLE,
    JN_DICT,
    JN_GETATTR,
    JN_GETITEM,
    JN_SLICE,
    JN_CALL,
    JN_FILTER,
    JN_TEST,
    JN_UNARY,
    JN_BINARY,
    JN_COMPARE,
    JN_COND,
    JN_NSREF,
    /* statements */
    JN_TEXT,
    JN_PRINT,
    JN_IF,
    JN_FOR,
    JN_SET,
    JN_SETBLOCK,
    JN_MACRO,
    JN_CALLBLOCK,
    JN_FILTERBLOCK,
    JN_WITH,
    JN_BREAK,
    JN_CONTINUE,
    JN_BLOCK,
} jnode_type;

/* operators (JN_UNARY / JN_BINARY / JN_COMPARE) */
enum {
    JOP_NEG,
    JOP_POS,
    JOP_NOT,
    JOP_ADD,
    JOP_SUB,
    JOP_MUL,
    JOP_DIV,
    JOP_FDIV,
    JOP_MOD,
    JOP_POW,
    JOP_CONCAT,
    JOP_AND,
    JOP_OR,
    JOP_EQ,
    JOP_NE,
    JOP_LT,
    JOP_LE,
    JOP_GT,
    JOP_GE,
    JOP_IN,
    JOP_NOTIN,
};

typedef struct jnode jnode;

typedef struct jnodes {
    jnode **v;
    size_t n;
} jnodes;

/* One fat node; which fields a type uses is written beside each. */
struct jnode {
    uint8_t type; /* jnode_type */
    uint8_t op;   /* JN_UNARY/BINARY: JOP_*; JN_FILTER/TEST: 1 if the name is unknown
                       (raise when evaluated); JN_FOR: has loop filter */
    uint8_t flag; /* JN_MACRO/CALLBLOCK: uses caller(1) varargs(2) kwargs(4) */
    int line;
    int fid;          /* JN_FILTER / JN_TEST: index into the filter/test table */
    jv val;           /* JN_CONST, JN_TEXT (string) */
    const char *name; /* JN_NAME, JN_GETATTR, JN_FILTER, JN_TEST, JN_MACRO, JN_NSREF attr */
    jnode *a, *b, *c; /* operands: see parser */
    jnodes args;      /* call/filter/test positional args; list/tuple items; dict k,v pairs;
                           compare operands; macro params (JN_NAME) */
    jnodes kwv;       /* keyword arg values; macro param defaults (NULL entries) */
    const char **kwn; /* keyword arg names */
    uint8_t *ops;     /* JN_COMPARE: one JOP_* per operand in args */
    jnodes body, orelse;
};

/* ---- lexer ----------------------------------------------------------------------- */

typedef enum {
    JT_EOF,
    JT_DATA,
    JT_VAR_BEGIN,
    JT_VAR_END,
    JT_BLOCK_BEGIN,
    JT_BLOCK_END,
    JT_NAME,
    JT_STRING,
    JT_INT,
    JT_FLOAT,
    JT_OP,
} jtok_type;

typedef struct jtok {
    uint8_t type;
    char op[3]; /* JT_OP: the operator text */
    int line;
    const char *s; /* JT_DATA / JT_NAME / JT_STRING: text (arena, NUL-terminated) */
    size_t len;
    int64_t i;
    double f;
} jtok;

/* Tokenizes source (trim_blocks, lstrip_blocks, newline normalisation, one final
 * newline dropped) into an arena array. Errors are STRATA_EFORMAT naming the line. */
int jinja_lex_run(jtok **out, size_t *n, jarena *a, const char *src, size_t len, strata_err *err);

/* ---- parser ---------------------------------------------------------------------- */

typedef struct jparser {
    jarena *a;
    jtok *t;
    size_t n, pos;
    int soft;  /* inside an if/cond: unknown filters and tests fail at run time */
    int depth; /* nesting, bounded */
    int max_depth;
    strata_err *err;
} jparser;

int jinja_parse_template(jnodes *out, jarena *a, const char *src, size_t len, int max_depth,
                         strata_err *err);
/* Expression entry points, shared by jinja_parse.c (statements) and jinja_parse_expr.c. */
jnode *jinja_parse_expr(jparser *p, int with_cond);
jnode *jinja_parse_tuple(jparser *p, int simplified, int with_cond, int explicit_paren);
jnode *jinja_parse_primary(jparser *p);
jnode *jinja_parse_postfix(jparser *p, jnode *node);
jnode *jinja_parse_filter_chain(jparser *p, jnode *node, int start_inline);
jnode *jinja_parse_node(jparser *p, int type, int line);
int jinja_parse_call_args(jparser *p, jnode *call);
int jinja_parse_fail(jparser *p, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int jinja_parse_nomem(jparser *p);
jtok *jinja_parse_cur(jparser *p);
jtok *jinja_parse_peek(jparser *p, size_t ahead);
int jinja_parse_is_op(const jtok *t, const char *op);
int jinja_parse_is_name(const jtok *t, const char *name);
int jinja_parse_push(jparser *p, jnodes *list, jnode *n);

/* ---- evaluation -------------------------------------------------------------------- */

typedef struct jscope jscope;
struct jscope {
    jscope *parent;
    jdict vars;
};

typedef struct jctx {
    jarena *a;
    strbuf *out;        /* where output goes now (captures swap it) */
    jscope *root;       /* the template's top-level scope */
    jdict *render_vars; /* messages, tools, ... */
    strata_err *err;
    int err_set;
    int loop_ctl;         /* 1 break, 2 continue pending */
    int depth, max_depth; /* macro call nesting */
    long iterations, max_iterations;
    size_t max_output;
    int64_t now;     /* strftime_now's clock, seconds since the epoch */
    int stmt_line;   /* line of the statement running: errors are reported there */
    jv filter_input; /* the captured body a {% filter %} / block set applies to */
} jctx;

/* Sets the render error once (first error wins) and returns code. The line is the
 * running statement's (as Jinja2's tracebacks report it); `line` is the fallback. */
int jinja_ctx_fail(jctx *c, int code, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int jinja_ctx_nomem(jctx *c, int line);

/* values */
jv jinja_str(jctx *c, const char *s, size_t n); /* copies; kind JV_UNDEF on OOM */
jv jinja_strz(jctx *c, const char *s);
jv jinja_str_cp(jctx *c, const char *s, size_t n, size_t ncp);
jv jinja_list(jctx *c, size_t cap); /* JV_LIST; JV_UNDEF on OOM */
int jinja_list_push(jctx *c, jlist *l, jv v);
jv jinja_dict(jctx *c, size_t cap);
int jinja_dict_set(jctx *c, jdict *d, jv k, jv v); /* replaces an equal key */
int jinja_dict_get(const jdict *d, jv k, jv *out); /* 1 found, 0 not */
int jinja_dict_gets(const jdict *d, const char *k, jv *out);
int jinja_is_oom(jv v); /* a constructor failed */
jv jinja_undef_named(jctx *c, const char *name);
jv jinja_undef_attr(jctx *c, jv obj, const char *name);
jv jinja_undef_elem(jctx *c, jv obj, jv key);
jv jinja_undef_hint(jctx *c, const char *hint);
/* The message Jinja2 gives when an undefined is used ("'x' is undefined"). */
const char *jinja_undef_message(jctx *c, jv v);

int jinja_truthy(jv v);
int jinja_eq(jv a, jv b);
int jinja_hashable(jv v);
/* Python ordering; STRATA_EINVALID (with message) if not comparable. *res <0 =0 >0 */
int jinja_cmp(jctx *c, int line, jv a, jv b, int *res);
const char *jinja_typename(jv v); /* Python type name: "str", "int", "dict", "NoneType" */
int jinja_is_num(jv v);           /* bool / int / float */
double jinja_as_double(jv v);
int64_t jinja_len(jv v); /* -1: no len() */

/* Python str() / repr() appended to b. */
int jinja_write_str(jctx *c, strbuf *b, jv v);
int jinja_write_repr(jctx *c, strbuf *b, jv v);
int jinja_write_float(strbuf *b, double f); /* float repr */
jv jinja_to_str(jctx *c, jv v);             /* str(v) as a value (strings pass through) */
/* Iterates v as Python's iter(): a list of items (dict: keys; str: chars). */
int jinja_iterate(jctx *c, int line, jv v, jlist **out);

/* json.dumps(v, ensure_ascii, indent, separators, sort_keys). indent: NULL none. */
typedef struct jinja_json_opts {
    int ensure_ascii;
    int sort_keys;
    int has_indent;
    const char *indent; /* the indent string (from an int: that many spaces) */
    size_t indent_len;
    const char *item_sep, *key_sep;
} jinja_json_opts;
int jinja_json_dump(jctx *c, int line, strbuf *b, jv v, const jinja_json_opts *o);

/* evaluation */
int jinja_eval(jctx *c, jscope *s, const jnode *n, jv *out);
int jinja_exec_body(jctx *c, jscope *s, const jnodes *body);
jv jinja_scope_lookup(jctx *c, jscope *s, const char *name);
int jinja_scope_set(jctx *c, jscope *s, const char *name, jv v);
jscope *jinja_scope_new(jctx *c, jscope *parent);
int jinja_eval_getattr(jctx *c, int line, jv obj, const char *name, jv *out);
int jinja_eval_getitem(jctx *c, int line, jv obj, jv key, jv *out);
/* Calls a callable value with evaluated arguments. */
int jinja_call_value(jctx *c, int line, jv fn, jv *args, size_t nargs, const char **kwn, jv *kwv,
                     size_t nkw, jv *out);
int jinja_call_macro(jctx *c, int line, jmacro *m, jv *args, size_t nargs, const char **kwn,
                     jv *kwv, size_t nkw, jv caller, jv *out);
int jinja_eval_binop(jctx *c, int line, int op, jv a, jv b, jv *out);
/* Raises UndefinedError when v is undefined (used by operators). */
int jinja_check_defined(jctx *c, int line, jv v);
jv jinja_escape(jctx *c, jv v); /* markupsafe.escape */

/* Binds Python-style arguments to named parameters: out[i] is the value for params[i]
 * or jinja_missing(). Errors name the function as Python would ("got an unexpected
 * keyword argument"). */
int jinja_bind_args(jctx *c, int line, const char *fname, const char *const *params, size_t np,
                    jv *args, size_t nargs, const char **kwn, jv *kwv, size_t nkw, jv *out);
static inline jv jinja_missing(void) {
    jv v = {0};
    v.kind = JV_UNDEF;
    v.fn = 2;
    return v;
}
static inline int jinja_given(jv v) { return !(v.kind == JV_UNDEF && v.fn == 2); }

/* filters and tests (jinja_filters*.c, jinja_tests.c) */
int jinja_filter_find(const char *name); /* -1 unknown */
int jinja_test_find(const char *name);
int jinja_filter_apply(jctx *c, int line, const char *name, jv val, jv *args, size_t nargs,
                       const char **kwn, jv *kwv, size_t nkw, jv *out);
int jinja_test_apply(jctx *c, int line, int tid, jv val, jv *args, size_t nargs, jv *out);
/* A filter's implementation (jinja_filter_impl.h). */
typedef int (*jinja_filter_fn)(jctx *c, int line, jv val, jv *args, size_t nargs, const char **kwn,
                               jv *kwv, size_t nkw, jv *out);
/* str(value) as Jinja2's soft_str does (Undefined is ""; Markup stays Markup). */
int jinja_soft_str(jctx *c, int line, jv v, jv *out);
static inline int jinja_is_int_like(jv v) { return v.kind == JV_INT || v.kind == JV_BOOL; }
/* As jinja_filter_apply, by the id jinja_filter_find gave (what the parser stores). */
int jinja_filter_apply_id(jctx *c, int line, int fid, jv val, jv *args, size_t nargs,
                          const char **kwn, jv *kwv, size_t nkw, jv *out);
int jinja_filter_py_strip(jctx *c, jv s, const char *chars, size_t nchars, int left, int right,
                          jv *out);
int jinja_filter_sort_values(jctx *c, int line, jv *v, size_t n, int case_sensitive,
                             const char *attr, int reverse);
int jinja_filter_resolve_attr(jctx *c, int line, jv item, const char *attr, jv dflt, jv *out);

/* methods and globals (jinja_methods.c) */
int jinja_method_find(jv self, const char *name, int *id, int *unsafe);
int jinja_method_call(jctx *c, int line, jmethod *m, jv *args, size_t nargs, const char **kwn,
                      jv *kwv, size_t nkw, jv *out);
int jinja_global_find(const char *name); /* -1 unknown; else JV_FUNC id */
int jinja_global_call(jctx *c, int line, int fn, jv *args, size_t nargs, const char **kwn, jv *kwv,
                      size_t nkw, jv *out);
/* Python %-formatting and str.format, shared by the % operator, |format and .format */
int jinja_format_percent(jctx *c, int line, jv fmt, jv args, jv *out);
int jinja_format_brace(jctx *c, int line, jv fmt, jv *args, size_t nargs, const char **kwn, jv *kwv,
                       size_t nkw, jv *out);
/* Python string helpers (jinja_str.c). int()/float() of a str: 1 parsed, 0 ValueError. */
int jinja_py_int(const jstr *s, int base, int64_t *out);
int jinja_py_float(const jstr *s, double *out);
/* mode: 0 lower, 1 upper, 2 str.capitalize, 3 str.title, 4 Jinja's |title, 5 swapcase */
int jinja_str_case(jctx *c, jv s, int mode, jv *out);
int jinja_str_split(jctx *c, jv s, jv sep, int64_t maxsplit, int right, jv *out);

/* loop object (jinja_exec.c) */
struct jloop {
    jlist *items;
    size_t idx;
    int depth0;
    int has_changed;
    jv last_changed;
};

struct jmacro {
    const jnode *def; /* JN_MACRO or JN_CALLBLOCK */
    jscope *closure;
    const char *name;
    jv caller; /* for a call block's macro: none */
};

#define JTRY(expr)                                                                                 \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ < 0) return rc_;                                                                   \
    } while (0)

#endif
