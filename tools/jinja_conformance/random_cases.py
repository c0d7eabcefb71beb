"""Seeded random templates for the conformance fixtures: expressions over every
operator, filter, test and method family; whitespace-control mazes of nested tags;
and statement soups mixing loops, macros, call blocks, namespaces, with and break.
They found bugs hand-written cases missed (for-else after break, Markup iteration,
test_odd on floats), so a fixed sample of each kind stays in the fixtures."""
import random

ATOMS = ["1", "0", "-3", "2.5", "0.1", "1e20", "'a'", "'Héllo wörld'", "''", "' x '", "none", "true", "false",
         "[1, 2, 3]", "[]", "['b', 'A', 'c']", "{'k': 1, 'b': [1, 2]}", "{}", "(1, 'x')", "x", "d", "s", "n", "f",
         "messages", "messages[0]", "messages[-1].content", "u", "d.b", "d['A']", "x[1]", "s[1:4]", "s[::-1]",
         "range(4)", "namespace(a=1)", "[none, 'x']", "'a,b,,c'", "'<b>&'", "'ǅ ß İ σ Σ'"]
BIN = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">=", "in", "not in", "and", "or"]
FILTERS = ["length", "upper", "lower", "title", "capitalize", "trim", "string", "list", "first", "last",
           "sort", "unique|list", "reverse|list", "tojson", "tojson(indent=1)", "int", "float", "abs", "round",
           "round(1)", "default('D')", "d('D', true)", "join(',')", "join", "sum", "min", "max", "dictsort",
           "items|list", "map('string')|list", "select|list", "reject('none')|list", "batch(2)|list",
           "replace('a', 'Z')", "center(9)", "wordcount", "e", "safe", "count", "tojson(sort_keys=true)",
           "format(1)", "truncate(5)", "slice(2)|list", "map('upper')|join", "selectattr('role')|list"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "sequence",
         "iterable", "boolean", "true", "false", "odd", "even", "lower", "upper", "callable",
         "divisibleby 2", "in [1, 'a']", "eq 1", "sameas none"]
METHODS = ["split()", "split(',')", "strip()", "upper()", "startswith('H')", "endswith('d')", "replace('l', 'L')",
           "title()", "lower()", "find('o')", "count('l')", "splitlines()", "get('k')", "items()|list",
           "keys()|list", "values()|list", "rsplit(',', 1)", "lstrip('H')", "isdigit()", "format(1, 2)", "zfill(5)"]
VARS = {"x": [1, "a", None, {"k": "it's"}], "d": {"b": 1, "A": 2, "c": None}, "s": "Hello World", "n": 3, "f": 2.5}


def _expr(r, d=0):
    k = r.random()
    if d > 3 or k < 0.3:
        return r.choice(ATOMS)
    if k < 0.5:
        return f"({_expr(r, d + 1)} {r.choice(BIN)} {_expr(r, d + 1)})"
    if k < 0.65:
        return f"{_expr(r, d + 1)}|{r.choice(FILTERS)}"
    if k < 0.75:
        return f"({_expr(r, d + 1)} is {'not ' if r.random() < 0.3 else ''}{r.choice(TESTS)})"
    if k < 0.85:
        return f"{r.choice(ATOMS)}.{r.choice(METHODS)}"
    if k < 0.92:
        return f"({_expr(r, d + 1)} if {_expr(r, d + 1)} else {_expr(r, d + 1)})"
    return f"(not {_expr(r, d + 1)})"


def expressions(seed, n):
    r = random.Random(seed)
    out = []
    for _ in range(n):
        k = r.random()
        if k < 0.7:
            out.append("{{ " + _expr(r) + " }}")
        elif k < 0.85:
            out.append("{% for v in " + _expr(r) + " %}{{ loop.index }}:{{ v }}{% if loop.last %}.{% endif %}{% else %}E{% endfor %}")
        else:
            out.append("{% set t = " + _expr(r) + " %}{% if t %}T{{ t }}{% else %}F{{ t }}{% endif %}")
    return out


_WS = ["", " ", "  ", "\n", "\n  ", "  \n", "\t", "\n\n", " \n \n", "\r\n", "\u00a0"]


def _ws_piece(r, d=0):
    sign = lambda: r.choice(["", "", "-", "+"])  # noqa: E731
    k, w = r.random(), r.choice(_WS)
    if k < 0.25:
        return w + r.choice(["a", "b c", "x\ny", "", "end"]) + r.choice(_WS)
    if k < 0.45:
        return (w + "{{" + r.choice(["", "-"]) + " " + r.choice(["'v'", "n", "u", "'\\n'"]) + " " +
                r.choice(["", "-"]) + "}}" + r.choice(_WS))
    if k < 0.55:
        return w + "{#" + sign() + " c " + sign() + "#}" + r.choice(_WS)
    if k < 0.6:
        return (w + "{%" + sign() + " raw " + r.choice(["", "-"]) + "%}" + r.choice(_WS) + "{{ x }}" +
                r.choice(_WS) + "{%" + sign() + " endraw " + sign() + "%}" + r.choice(_WS))
    if d > 2:
        return w + "t"
    tag = r.choice(["if true", "if false", "for i in [1, 2]", "set z = 1", "if n"])
    body = "".join(_ws_piece(r, d + 1) for _ in range(r.randint(0, 3)))
    if tag.startswith("set"):
        return w + "{%" + sign() + " " + tag + " " + sign() + "%}" + body
    end = "endif" if tag.startswith("if") else "endfor"
    mid = ""
    if tag.startswith("if") and r.random() < 0.4:
        mid = "{%" + sign() + " else " + sign() + "%}" + "".join(_ws_piece(r, d + 1) for _ in range(r.randint(0, 2)))
    return (w + "{%" + sign() + " " + tag + " " + sign() + "%}" + body + mid + "{%" + sign() + " " + end +
            " " + sign() + "%}" + r.choice(_WS))


def whitespace(seed, n):
    r = random.Random(seed)
    return ["".join(_ws_piece(r) for _ in range(r.randint(1, 5))) for _ in range(n)]


_MACRO = ("{% macro m(p, q=0) %}<{{ p }}|{{ q }}|{{ a }}|{{ caller() if caller is defined else '' }}>"
          "{% set a = 'inmacro' %}{% set ns.w = ns.w + [p] %}{% endmacro %}")


def _val(r):
    return r.choice(["1", "a", "b", "ns.v", "a ~ 'x'", "loop.index if loop is defined else 0", "[a, b]",
                     "(a|string) + '!'", "m(a)", "m(b, 2)", "ns.w|length", "i if i is defined else -1",
                     "caller() if caller is defined else 'nc'"])


def _stmt(r, d=0):
    k = r.random()
    if d > 3 or k < 0.3:
        return "{% set " + r.choice(["a", "b", "ns.v", "ns.w"]) + " = " + _val(r) + " %}"
    if k < 0.45:
        return "{{ " + _val(r) + " }},"
    if k < 0.6:
        return ("{% for i in " + r.choice(["[1, 2, 3]", "range(2)", "'xy'", "[]"]) +
                (" if i != 2" if r.random() < 0.2 else "") + " %}" + _body(r, d) +
                ("{% else %}" + _body(r, d) if r.random() < 0.3 else "") + "{% endfor %}")
    if k < 0.72:
        return ("{% if " + _val(r) + " %}" + _body(r, d) + ("{% else %}" + _body(r, d) if r.random() < 0.5 else "") +
                "{% endif %}")
    if k < 0.8:
        return "{% if i is defined and i == 1 %}{% " + r.choice(["break", "continue"]) + " %}{% endif %}" if d > 0 else "x"
    if k < 0.88:
        return "{% with a = " + _val(r) + " %}" + _body(r, d) + "{% endwith %}"
    if k < 0.94:
        return "{% call m(" + _val(r) + ") %}" + _body(r, d) + "{% endcall %}"
    return "{% set c %}" + _body(r, d) + "{% endset %}[{{ c }}]"


def _body(r, d):
    return "".join(_stmt(r, d + 1) for _ in range(r.randint(1, 3)))


def statements(seed, n):
    r = random.Random(seed)
    head = "{% set a = 'A' %}{% set b = 2 %}{% set ns = namespace(v=0, w=[]) %}" + _MACRO
    return [head + _body(r, 0) + "|{{ a }}|{{ b }}|{{ ns.v }}|{{ ns.w }}" for _ in range(n)]
