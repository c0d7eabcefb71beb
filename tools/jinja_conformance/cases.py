"""Inputs of the chat-template conformance fixtures (see gen.py).

CONVERSATIONS is the matrix every model template renders (with and without a
generation prompt, thinking unset / off / on, and tools where they matter);
CONSTRUCT_CONTEXTS renders each construct-family template under a few contexts;
SOURCE_CASES are small templates on which Jinja2 raises (or, for a few, famously
does not) so the C interpreter must fail, or not, at the same place.
"""

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather for a city.\n",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": ["integer", "null"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "filters": {"type": "object", "properties": {"site": {"type": "string"}},
                        "required": ["site"]}}}}},
]

CALL_ARGS = {"city": "Paris", "days": 3, "metric": True, "ratio": 0.5, "tags": ["a", "b"],
             "nested": {"k": None, "é": "ü"}}

CONVERSATIONS = [
    ("plain", [{"role": "user", "content": "Hello"}]),
    ("system_multi", [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "What is 2+2?"}]),
    ("think_in_content", [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<think>\nstep one\n</think>\n\nA1"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "<think>\nlater\n</think>\n\nA2"}]),
    ("reasoning_fields", [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "A", "reasoning_content": "because"},
        {"role": "user", "content": "Q again"},
        {"role": "assistant", "content": "B", "reasoning": "alias field"},
        {"role": "user", "content": "last"},
        {"role": "assistant", "content": "C", "thinking": "thinking field"}]),
    ("tool_calls", [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": CALL_ARGS}},
            {"id": "c2", "type": "function", "function": {"name": "search", "arguments": {"query": "paris"}}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "{\"temp\": 21}"},
        {"role": "tool", "tool_call_id": "c2", "name": "search", "content": "sunny"},
        {"role": "assistant", "content": "It is 21 degrees and sunny."}]),
    ("tool_args_string", [
        {"role": "user", "content": "Call it"},
        {"role": "assistant", "content": "Calling.", "tool_calls": [
            {"type": "function", "function": {"name": "search", "arguments": "{\"query\": \"x\"}"}}]},
        {"role": "tool", "content": "done"},
        {"role": "user", "content": "thanks"}]),
    ("content_parts", [
        {"role": "system", "content": [{"type": "text", "text": "Parts system."}]},
        {"role": "user", "content": [{"type": "text", "text": "Look at "}, {"type": "image", "image": "x.png"},
                                     {"type": "text", "text": " and this video"}, {"type": "video", "video": "v.mp4"}]}]),
    ("unicode_quotes", [
        {"role": "user", "content": "naïve “quotes” 'single' \"double\" 😀 \\ back\tslash\nnew line"},
        {"role": "assistant", "content": "日本語 — ok"},
        {"role": "user", "content": "  padded  \n"}]),
    ("alternation_error", [
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"}]),
    ("system_only", [{"role": "system", "content": "Only a system prompt."}]),
    ("developer_role", [
        {"role": "developer", "content": "Dev instructions"},
        {"role": "user", "content": "hi"}]),
    ("empty_content", [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "?"}]),
    ("ends_with_assistant", [
        {"role": "user", "content": "Tell me"},
        {"role": "assistant", "content": "Sure"}]),
]

_MSGS = [
    {"role": "system", "content": "Sys"},
    {"role": "user", "content": "Hello \"there\""},
    {"role": "assistant", "content": "Hi!", "reasoning_content": "think"},
    {"role": "user", "content": "bye"},
]
_VARS = {"x": [1, "a", None, {"k": "it's"}], "d": {"b": 1, "A": 2, "c": None}, "s": "Hello World",
         "n": 3, "f": 2.5}

CONSTRUCT_TEMPLATES = ["whitespace.jinja", "crlf.jinja", "literals_ops.jinja", "printing.jinja",
                       "strings.jinja", "slicing.jinja", "loops.jinja", "scoping.jinja",
                       "macros.jinja", "tests.jinja", "filters_str.jinja", "filters_seq.jinja",
                       "tojson.jinja", "undefined.jinja", "blocks.jinja", "lexer.jinja"]

CONSTRUCT_CONTEXTS = []
for _t in CONSTRUCT_TEMPLATES:
    CONSTRUCT_CONTEXTS.append((_t, {"messages": _MSGS, "tools": TOOLS, "agp": True, "kwargs": dict(_VARS)}))
    CONSTRUCT_CONTEXTS.append((_t, {"messages": _MSGS[1:2], "agp": False,
                                    "kwargs": dict(_VARS, n=-7, f=0.1, s="ÀÉ ß", x=[], d={})}))

SOURCE_CASES = [
    # syntax errors (Jinja2 refuses to compile)
    ("{% if x %}never closed", {}),
    ("line one\n{% for x in y %}\n{% endif %}", {}),
    ("{% frobnicate %}", {}),
    ("{{ 1 + }}", {}),
    ("{{ 'unterminated }}", {}),
    ("ok\n{{ foo|no_such_filter }}", {}),
    ("{{ x is no_such_test }}", {"x": 1}),
    ("{% break %}", {}),
    ("{% macro m(a=1, b) %}{% endmacro %}", {}),
    ("{% raw %}never ends", {}),
    ("{# comment never ends", {}),
    ("{{ }}", {}),
    ("{% set 1 = 2 %}", {}),
    ("{{ a b }}", {}),
    ("{{ (1, 2 }}", {}),
    ("{% endfor %}", {}),
    ("{{ '\\x4' }}", {}),
    ("{% extends 'base.html' %}", {}),
    # runtime errors
    ("{{ raise_exception('Conversation roles must alternate') }}", {}),
    ("a\nb\n{{ missing.attr }}", {}),
    ("{{ messages[0].missing.deeper }}", {}),
    ("{{ '1' + 1 }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ 5 // 0 }}", {}),
    ("{{ range(200000)|length }}", {}),
    ("{{ {[1]: 2} }}", {}),
    ("{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("{% for a, b in [1] %}{% endfor %}", {}),
    ("{{ nothing() }}", {}),
    ("{{ [1].append(2) }}", {}),
    ("{% if true %}{{ 1|no_such_filter }}{% endif %}", {}),
    ("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", {}),
    ("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=1) }}", {}),
    ("{{ [1, 2][::0] }}", {}),
    ("{% for x in none %}{% endfor %}", {}),
    ("{% for x in 42 %}{% endfor %}", {}),
    ("{{ nothing|tojson }}", {}),
    ("{% set ns = namespace() %}{% set ns._hidden = 1 %}", {}),
    ("{% set d = {} %}{% set d.x = 1 %}", {}),
    ("{{ [1, 'a']|min }}", {}),
    ("{{ -nothing }}", {}),
    ("{{ 'abc' < 3 }}", {}),
    ("{{ nothing.x }}", {}),
    ("{{ 2 in 'abc' }}", {}),
    ("{{ {'a': 1}|dictsort(by='other') }}", {}),
    ("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", {}),
    ("{{ [1, 2]|map|list }}", {}),
    ("{{ 'x'|int(base=1) if false else 1 }}", {}),
    ("{{ 01 }}", {}),
    ("{{ .5 }}", {}),
    ("{{ 1 if 2 if 3 else 4 else 5 }}", {}),
    ("{{ {'a': none}|dictsort(false, 'value') if true }}{{ {'a': none, 'b': 1}|dictsort(by='value') }}", {}),
    ("{{ [1, 2]|last }}{{ ([1, 2]|map('string'))|last }}", {}),
    ("{{ [1, 2]|map('string')|length }}", {}),
    ("{{ '\\N{BULLET}' if false else 1 }}{{ '%d' % 'x' }}", {}),
    # no error in Jinja2 either
    ("{% if false %}{{ x|no_such_filter }}{% endif %}fine", {}),
    ("{{ 'a' is string and 'b' }} {{ not 1 == 2 }} {{ -1|abs }} {{ [3, 1]|sort|first }}", {}),
    ("{{ 3.0 == 3 }}{{ 3.0|int }}{{ '3.7'|float|round|int }} {{ 'a' * 0 }}|{{ [1] * -1 }}", {}),
    ("{% set a = 'x' %}{% set a = a ~ 'y' %}{{ a }} {{ 'héllo'.center(9, '*') }}", {}),
    ("{{ (1, 2) }}{{ (1, 2)|length }}{{ (1, 2)[0] }}{{ (1,) + (2,) }}", {}),
    ("{% for x in [1] %}{{ loop.previtem is undefined }}{{ loop.nextitem is undefined }}{% endfor %}", {}),
    ("{% for i in [1, 2] %}{% if i == 1 %}{% break %}{% endif %}{% else %}else-after-break{% endfor %}", {}),
    ("{% for i in [1, 2] %}x{% continue %}{% else %}else-after-continue{% endfor %}", {}),
    ("{% for i in [1, 2] %}{% if i == 2 %}{% break %}{% endif %}{% else %}never{% endfor %}", {}),
    ("{{ 0.1 is odd }}{{ 3.0 is odd }}{{ ('<b>'|safe)|list }}{{ range(3) }}{{ range(1, 9, 3) }}{{ range(3) == [0, 1, 2] }}", {}),
    ("{{ [1, 2]|map('string')|first }}{{ [1]|select|list }}{{ ([]|select) is iterable }}", {}),
    ("{{ messages[0].content|length }}{{ messages|map(attribute='role')|join }}", {}),
    ("{{ 'x' if false }}|{{ nothing }}|{{ nothing|default('d') }}", {}),
    ("{% for x in nothing %}{% endfor %}{{ nothing is defined }}", {}),
]
