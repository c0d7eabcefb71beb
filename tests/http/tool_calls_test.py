#!/usr/bin/env python3
"""Tool calls read from the model's output, whole and streamed, through the real server.

The tiny checkpoint cannot be asked for a tool call, so the test tokenizer gains added
tokens whose text is a whole tool-call reply in the XML form of Qwen3.5 / Nemotron (see
test_tool_calls.sh), and logit_bias makes the model pick one: the server then sees exactly
that output, through the real engine, detokenizer and parser. Checked: message.tool_calls
(ids, names, arguments typed by the tool schema), content null or the text before the calls,
finish_reason "tool_calls"; the stream's delta shape reassembling to the same calls; a
malformed call staying content; tool_choice "none" leaving the text alone; and the
official OpenAI SDK parsing both, then sending the round trip back."""
import json
import os

from client import BASE, post_json, stream

CHAT = "/v1/chat/completions"
TOK = json.loads(os.environ["TOOL_TOKENS"])  # {"one": id, "two": id, "bad": id}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}}}},
]
MSGS = [{"role": "user", "content": "Weather?"}]


def ask(which, **extra):
    body = {"messages": MSGS, "tools": TOOLS, "max_tokens": 1, "temperature": 0,
            "logit_bias": {str(TOK[which]): 100}}
    body.update(extra)
    s, b = post_json(CHAT, body)
    assert s == 200, b
    return b["choices"][0]


def streamed(which):
    s, ev = stream(CHAT, {"messages": MSGS, "tools": TOOLS, "max_tokens": 1, "temperature": 0,
                          "logit_bias": {str(TOK[which]): 100}, "stream": True})
    assert s == 200, ev
    content, calls, finish = "", {}, None
    for e in ev:
        for c in (e.get("choices", []) if isinstance(e, dict) else []):
            d = c["delta"]
            content += d.get("content") or ""
            for tc in d.get("tool_calls", []):
                k = tc["index"]
                if k not in calls:
                    # the first delta of a call names it
                    assert tc["id"].startswith("call_") and tc["type"] == "function", tc
                    calls[k] = {"id": tc["id"], "name": tc["function"]["name"], "arguments": ""}
                calls[k]["arguments"] += tc["function"].get("arguments", "")
            finish = c.get("finish_reason") or finish
    return content, [calls[k] for k in sorted(calls)], finish


def test_one_call():
    c = ask("one")
    m = c["message"]
    assert c["finish_reason"] == "tool_calls", c
    assert m["content"] is None, m
    (tc,) = m["tool_calls"]
    assert tc["type"] == "function" and tc["id"].startswith("call_") and len(tc["id"]) == 29, tc
    assert tc["function"]["name"] == "get_weather", tc
    # "3" typed by the schema's integer; the city stays a string
    assert json.loads(tc["function"]["arguments"]) == {"city": "Paris", "days": 3}, tc
    content, calls, finish = streamed("one")
    assert content == "" and finish == "tool_calls", (content, finish)
    assert [(x["name"], json.loads(x["arguments"])) for x in calls] == \
        [("get_weather", {"city": "Paris", "days": 3})], calls


def test_text_and_two_calls():
    c = ask("two")
    m = c["message"]
    assert c["finish_reason"] == "tool_calls", c
    assert m["content"] == "Let me check.\n\n", m
    got = [(t["function"]["name"], json.loads(t["function"]["arguments"])) for t in m["tool_calls"]]
    assert got == [("search", {"query": "tides"}), ("get_weather", {"city": "Oslo"})], got
    assert len({t["id"] for t in m["tool_calls"]}) == 2
    content, calls, finish = streamed("two")
    assert content == m["content"] and finish == "tool_calls", (content, finish)
    assert [(x["name"], json.loads(x["arguments"])) for x in calls] == got, calls


def test_malformed_stays_content():
    c = ask("bad")
    m = c["message"]
    assert "tool_calls" not in m and c["finish_reason"] == "length", c
    assert m["content"].startswith("<tool_call>\n<function=get_weather>") and \
        m["content"].endswith("</tool_call>"), m
    content, calls, finish = streamed("bad")
    assert content == m["content"] and calls == [] and finish == "length"


def test_tool_choice_none():
    c = ask("one", tool_choice="none")
    assert "tool_calls" not in c["message"] and c["finish_reason"] == "length", c
    assert c["message"]["content"].startswith("<tool_call>"), c


def test_openai_sdk():
    import openai
    client = openai.OpenAI(base_url=BASE + "/v1", api_key="x")
    kw = dict(model="tiny", messages=MSGS, tools=TOOLS, max_tokens=1, temperature=0,
              logit_bias={str(TOK["two"]): 100})
    r = client.chat.completions.create(**kw)
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and len(m.tool_calls) == 2, r
    assert m.tool_calls[1].function.name == "get_weather"
    assert json.loads(m.tool_calls[1].function.arguments) == {"city": "Oslo"}
    # the SDK's streaming helper accumulates the deltas into the same calls
    with client.chat.completions.stream(**kw) as s:
        for _ in s:
            pass
        final = s.get_final_completion()
    fm = final.choices[0].message
    assert [(t.function.name, t.function.arguments) for t in fm.tool_calls] == \
        [(t.function.name, t.function.arguments) for t in m.tool_calls], fm
    # the round trip: the assistant turn as the SDK returns it, then the tools' results
    msgs = MSGS + [m.model_dump(exclude_none=True)] + [
        {"role": "tool", "tool_call_id": t.id, "content": "ok"} for t in m.tool_calls]
    r2 = client.chat.completions.create(model="tiny", messages=msgs, tools=TOOLS, max_tokens=2,
                                        temperature=0)
    assert r2.choices[0].message.role == "assistant", r2


def main():
    for t in (test_one_call, test_text_and_two_calls, test_malformed_stays_content,
              test_tool_choice_none, test_openai_sdk):
        t()
        print("ok", t.__name__)
    print("tool_calls_test: all passed")


if __name__ == "__main__":
    main()
