#!/usr/bin/env python3
"""JSON schemas, regular expressions, choices, grammars and forced tool calls on the demo
model, whose peaked outputs are King James prose: left alone it writes no JSON and calls no
tool, so every structure returned here was made by the grammar's masks.

Checked: 200 random schemas from a seeded generator (every answer that finished parses and
validates with Python's jsonschema, formats included); vLLM's guided_* and
structured_outputs, llama-server's grammar and json_schema; tool_choice "required" and a
named function (the calls parse, their arguments validate against the tool's schema);
clear 400s for what is not supported; and the clients people use for this: the OpenAI
SDK's chat.completions.parse with a Pydantic model, LangChain's with_structured_output (all
three methods) and the llm CLI's --schema. (structured_think_test.py runs the same engine
behind a thinking template, and LangChain's bind_tools round trip.)"""
import concurrent.futures
import json
import os
import random
import re
import subprocess
import tempfile

import jsonschema
from client import BASE, check_forced_calls, check_tool_calls, get_json, post_json

CHAT = "/v1/chat/completions"
CMPL = "/v1/completions"
CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER
WORDS = ["name", "age", "city", "tags", "score", "ok", "kind", "when", "id", "items", "note",
         "level", "parent", "size"]


def gen_leaf(rnd):
    k = rnd.randrange(10)
    if k == 0:
        return {"type": "string"}
    if k == 1:
        return {"type": "string", "maxLength": rnd.randrange(1, 12)}
    if k == 2:
        return {"type": "integer", "minimum": rnd.randrange(-50, 5), "maximum": rnd.randrange(5, 300)}
    if k == 3:
        return {"type": "number"}
    if k == 4:
        return {"type": "boolean"}
    if k == 5:
        return {"enum": rnd.sample(["red", "green", "blue", "teal", 1, 2.5, None, True], rnd.randrange(1, 5))}
    if k == 6:
        return {"type": "string", "format": rnd.choice(["date", "date-time", "uuid", "time"])}
    if k == 7:
        return {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    if k == 8:
        return {"const": rnd.choice(["fixed", 7, False])}
    return {"type": "string", "pattern": rnd.choice([r"^[a-z]{2,5}$", r"^\d{3}-\d{4}$", r"^(yes|no)$"])}


def gen_schema(rnd, depth=0):
    if depth >= 2 or rnd.random() < 0.45:
        return gen_leaf(rnd)
    if rnd.random() < 0.35:
        lo = rnd.randrange(0, 3)
        return {"type": "array", "items": gen_schema(rnd, depth + 1), "minItems": lo,
                "maxItems": lo + rnd.randrange(0, 4)}
    return gen_object(rnd, depth + 1)


def gen_object(rnd, depth=0):
    names = rnd.sample(WORDS, rnd.randrange(1, 5))
    props = {n: gen_schema(rnd, depth) for n in names}
    req = [n for n in names if rnd.random() < 0.7]
    return {"type": "object", "properties": props, "required": req, "additionalProperties": False}


def chat(body):
    body = {"messages": [{"role": "user", "content": "Answer in JSON."}], **body}
    return post_json(CHAT, body)


def one_schema(i):
    rnd = random.Random(1000 + i)
    schema = gen_object(rnd)
    body = {"max_tokens": 200, "temperature": rnd.choice([0, 0.8, 1.2]), "seed": i,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}}}
    s, b = chat(body)
    assert s == 200, (i, schema, b)
    c = b["choices"][0]
    if c["finish_reason"] != "stop":
        assert c["finish_reason"] == "length", (i, c)
        return 0
    v = json.loads(c["message"]["content"])
    jsonschema.validate(v, schema, format_checker=CHECKER)
    return 1


def test_random_schemas():
    # 200 in the plain build; the sanitizer pass (several times slower, same code paths)
    # runs the first 50 so the whole suite stays inside CI's time budget
    n = 50 if "asan" in os.environ.get("BUILD", "") else 200
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        done = sum(ex.map(one_schema, range(n)))
    # a schema can leave the model a string it never closes within max_tokens: those are
    # cut, never wrong; most finish
    assert done >= n // 2, done
    print(f"  random schemas: {done}/{n} finished and validated")


def test_guided_fields():
    rx = r"\d{3}-[A-Z]{2}(x|yy)?"
    cases = [
        ({"guided_regex": rx}, lambda t: re.fullmatch(rx, t)),
        ({"structured_outputs": {"regex": rx}}, lambda t: re.fullmatch(rx, t)),
        ({"guided_choice": ["alpha", "beta", "gamma delta"]}, lambda t: t in ("alpha", "beta", "gamma delta")),
        ({"structured_outputs": {"choice": ["yes", "no"]}}, lambda t: t in ("yes", "no")),
        ({"guided_grammar": 'root ::= "(" [a-c]{1,3} ")" ("!" | "?")'},
         lambda t: re.fullmatch(r"\([a-c]{1,3}\)[!?]", t)),
        ({"grammar": 'root ::= [0-9]{1,4} " sheep"'}, lambda t: re.fullmatch(r"[0-9]{1,4} sheep", t)),
        ({"guided_json": {"type": "object", "properties": {"n": {"type": "integer"}},
                          "required": ["n"]}}, lambda t: isinstance(json.loads(t)["n"], int)),
        ({"guided_json": '{"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 2}'},
         lambda t: len(json.loads(t)) == 2),
        ({"json_schema": {"type": "object", "properties": {"k": {"enum": ["a", "b"]}},
                          "required": ["k"]}}, lambda t: json.loads(t)["k"] in ("a", "b")),
        ({"structured_outputs": {"json": {"type": "string", "format": "uuid"}}},
         lambda t: re.fullmatch(r'"[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}"', t)),
        ({"response_format": {"type": "json_object", "schema": {"type": "object", "properties": {
            "z": {"type": "null"}}, "required": ["z"]}}}, lambda t: json.loads(t) == {"z": None}),
    ]
    for k, (extra, ok) in enumerate(cases):
        for path in (CHAT, CMPL):
            body = {"max_tokens": 80, "temperature": 0.7, "seed": k, **extra}
            if path == CHAT:
                body["messages"] = [{"role": "user", "content": "Say something."}]
            else:
                body["prompt"] = "And God said"
            s, b = post_json(path, body)
            assert s == 200, (extra, b)
            c = b["choices"][0]
            text = c["message"]["content"] if path == CHAT else c["text"]
            assert c["finish_reason"] == "stop", (extra, c)
            assert ok(text), (extra, text)


def test_refusals():
    bad = [
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "not": {"type": "null"}}}}}, "response_format", "not"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format", "schema"),
        ({"guided_regex": "a(?=b)"}, "guided_regex", ""),
        ({"guided_regex": "a(b"}, "guided_regex", ""),
        ({"guided_grammar": "root ::= undefined-rule"}, "guided_grammar", "undefined-rule"),
        ({"guided_choice": []}, "guided_choice", ""),
        ({"guided_choice": ["a"], "guided_regex": "b"}, None, "only one"),
        ({"response_format": {"type": "json_object"}, "guided_regex": "b"}, None, "only one"),
        ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs", "only one"),
        ({"tool_choice": "required"}, "tool_choice", "tools"),
        ({"response_format": {"type": "yaml"}}, "response_format", "yaml"),
    ]
    for extra, param, words in bad:
        s, b = chat({"max_tokens": 5, **extra})
        assert s == 400, (extra, b)
        err = b["error"]
        if param:
            assert err["param"] == param, (extra, err)
        assert words in err["message"], (extra, err)


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {
            "city": {"type": "string", "maxLength": 24}, "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "hourly": {"type": "boolean"}},
        "required": ["city", "days"]}}},
    {"type": "function", "function": {"name": "search", "parameters": {
        "type": "object", "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 40},
                                         "filters": {"type": "array", "items": {"type": "string",
                                                     "maxLength": 12}, "maxItems": 3}},
        "required": ["query"]}}},
]


def test_forced_tool_calls():
    for seed in range(6):
        common = check_forced_calls(TOOLS, seed, "What now?", "search")
        s, b = post_json(CHAT, {**common, "tool_choice": "required"})
        assert s == 200, b
        c = b["choices"][0]
        if c["finish_reason"] == "tool_calls":
            check_tool_calls(c, TOOLS)
    s, b = post_json(CHAT, {"tools": TOOLS, "messages": [{"role": "user", "content": "x"}],
                            "tool_choice": {"type": "function", "function": {"name": "nope"}}})
    assert s == 400 and b["error"]["param"] == "tool_choice", b


def model_name():
    s, b = get_json("/v1/models")
    assert s == 200, b
    return b["data"][0]["id"]


def test_openai_sdk_parse():
    from typing import Annotated

    from openai import LengthFinishReasonError, OpenAI
    from pydantic import BaseModel, Field

    # bounded strings: the demo model, left to itself, writes scripture until max_tokens
    class Verse(BaseModel):
        book: Annotated[str, Field(max_length=16)]
        chapter: int
        holy: bool
        words: Annotated[list[Annotated[str, Field(max_length=10)]], Field(max_length=3)]

    client = OpenAI(base_url=BASE + "/v1", api_key="unused")
    parsed = 0
    for seed in range(4):
        try:
            r = client.chat.completions.parse(model=model_name(), messages=[
                {"role": "user", "content": "Give a verse."}], response_format=Verse,
                max_tokens=200, seed=seed, temperature=0.5)
        except LengthFinishReasonError:
            continue
        ch = r.choices[0]
        assert ch.finish_reason == "stop" and isinstance(ch.message.parsed, Verse), ch
        parsed += 1
    assert parsed >= 2, parsed


def test_langchain():
    from typing import Annotated

    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel, Field

    class Person(BaseModel):
        name: Annotated[str, Field(max_length=20)]
        age: int

    llm = ChatOpenAI(base_url=BASE + "/v1", api_key="unused", model=model_name(), max_tokens=120,
                     temperature=0, max_retries=0)
    for method in ("json_schema", "function_calling"):
        out = llm.with_structured_output(Person, method=method).invoke("Who was Moses? JSON.")
        assert isinstance(out, Person), (method, out)
    raw = llm.with_structured_output(Person, method="json_mode", include_raw=True).invoke(
        "Describe Moses in JSON.")
    assert isinstance(json.loads(raw["raw"].content), dict), raw

LLM_SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                              "age": {"type": "integer"}, "holy": {"type": "boolean"}},
              "required": ["name", "age", "holy"]}


def test_llm_cli():
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "extra-openai-models.yaml"), "w") as f:
            f.write(f"- model_id: strata\n  model_name: {model_name()}\n  api_base: {BASE}/v1\n"
                    "  supports_schema: true\n")
        env = {**os.environ, "LLM_USER_PATH": d, "OPENAI_API_KEY": "unused"}
        ok = 0
        for seed in range(3):
            p = subprocess.run(["llm", "-m", "strata", "--schema", json.dumps(LLM_SCHEMA),
                                "-o", "max_tokens", "150", "-o", "seed", str(seed),
                                "-o", "temperature", "0.7", "--no-log", "Who was Aaron?"],
                               env=env, capture_output=True, text=True, timeout=120)
            assert p.returncode == 0, p.stderr
            try:
                v = json.loads(p.stdout)
            except json.JSONDecodeError:
                continue  # cut by max_tokens
            assert isinstance(v["name"], str) and isinstance(v["age"], int), v
            assert isinstance(v["holy"], bool), v
            ok += 1
        assert ok >= 1, ok


def main():
    for t in (test_refusals, test_guided_fields, test_forced_tool_calls, test_openai_sdk_parse,
              test_langchain, test_llm_cli, test_random_schemas):
        t()
        print(f"  {t.__name__}: ok")
    print("structured_schema_test: ok")


if __name__ == "__main__":
    main()
