#!/usr/bin/env python3
"""Tool round trips as the OpenAI SDK sends them, through a server whose chat template is one
of the three families' real templates (TEMPLATE names it): an assistant turn with content
null and tool_calls whose arguments are a JSON string, tool results with tool_call_id, more
turns after. The server's prompt (/tokenize of the messages) must be the tokens of what
Python's Jinja2 renders from the same conversation with the arguments as the object the
template iterates (transformers' environment: tools/jinja_conformance/gen.py), and a chat
request with it must be answered. Malformed calls are a 400 naming the field."""
import json
import os
import sys

from client import check_error, post_json

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "jinja_conformance"))
from gen import fallback_render  # noqa: E402

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"},
            "units": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "filters": {"type": "object", "properties": {"site": {"type": "string"}}}}}}},
]


def conversation(args_as_string):
    def args(d):
        return json.dumps(d) if args_as_string else d
    return [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Weather in Paris, and search for tides?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_a1", "type": "function", "function": {
                "name": "get_weather", "arguments": args({"city": "Paris", "days": 3})}},
            {"id": "call_b2", "type": "function", "function": {
                "name": "search", "arguments": args({"query": "tides",
                                                     "filters": {"site": "example.org"}})}}]},
        {"role": "tool", "tool_call_id": "call_a1", "content": "{\"temp\": 21}"},
        {"role": "tool", "tool_call_id": "call_b2", "content": "High tide at 6."},
        {"role": "assistant", "content": "It is 21 degrees; high tide is at 6."},
        {"role": "user", "content": "And tomorrow?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_c3", "type": "function", "function": {
                "name": "get_weather", "arguments": args({"city": "Paris", "days": 1})}}]},
        {"role": "tool", "tool_call_id": "call_c3", "content": "{\"temp\": 18}"},
    ]


def main():
    name = os.environ["TEMPLATE"]
    with open(os.path.join(ROOT, "tests", "data", "chat_templates", "real", name + ".jinja")) as f:
        source = f.read()
    kwargs = {"enable_thinking": False}
    s, t = post_json("/tokenize", {"messages": conversation(True), "tools": TOOLS,
                                   "chat_template_kwargs": kwargs})
    assert s == 200, t
    want = fallback_render(source, conversation(False), TOOLS, True, kwargs)
    # the calls' arguments reached the template as objects: rendered as the family renders
    # arguments, not as a JSON string
    assert "Paris" in want and "\"{\\\"city" not in want, want
    s, r = post_json("/tokenize", {"prompt": want, "add_special_tokens": False})
    assert s == 200, r
    assert t["tokens"] == r["tokens"], (name, len(t["tokens"]), len(r["tokens"]))
    # answered (the tiny test tokenizer spends a token a byte: the tools' text would not fit
    # the tiny model's context, the conversation does)
    s, b = post_json("/v1/chat/completions", {"messages": conversation(True)[:6],
                                              "max_tokens": 4, "temperature": 0,
                                              "chat_template_kwargs": kwargs})
    assert s == 200, b
    # malformed calls: a 400 naming messages, never a template error
    for bad in ({"name": "get_weather", "arguments": "{not json"},
                {"name": "get_weather", "arguments": "[1, 2]"},
                {"arguments": "{}"}):
        msgs = conversation(True)
        msgs[2]["tool_calls"][0]["function"] = bad
        s, b = post_json("/v1/chat/completions", {"messages": msgs, "max_tokens": 1})
        check_error(s, b, 400)
        assert b["error"]["param"] == "messages", b
    print("tool_roundtrip_test: %s ok (%d prompt tokens)" % (name, len(t["tokens"])))


if __name__ == "__main__":
    main()
