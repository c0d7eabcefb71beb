#!/usr/bin/env python3
"""Constrained output behind a thinking template: the demo model with Qwen3.5's real chat
template, whose generation prompt opens <think> (test_structured.sh gives the tokenizer the
<think> and </think> pieces). The grammar lets reasoning run free up to </think> and
constrains what follows; logit_bias on </think> makes the model close it at once (it would
otherwise reason past max_tokens). Checked: the answer (content) validates, the reasoning is
apart from it; a forced tool call; and LangChain's bind_tools round trip, which needs a
template that renders assistant tool calls and tool results; and the Responses API's
reasoning items."""
import json
import os
from typing import Annotated

import jsonschema
from client import BASE, get_json, post_json

CHAT = "/v1/chat/completions"
CLOSE = int(os.environ["THINK_CLOSE_ID"])
BIAS = {str(CLOSE): 100}
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"},
                                           "w": {"type": "string", "maxLength": 8}},
          "required": ["n", "w"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                     "days": {"type": "integer"}}, "required": ["city", "days"]}}}]


def test_schema_after_reasoning():
    for seed in range(4):
        s, b = post_json(CHAT, {"messages": [{"role": "user", "content": "JSON please"}],
                                "max_tokens": 120, "seed": seed, "temperature": 0.8,
                                "logit_bias": BIAS, "response_format": {
                                    "type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}})
        assert s == 200, b
        c = b["choices"][0]
        assert c["finish_reason"] == "stop", c
        jsonschema.validate(json.loads(c["message"]["content"]), SCHEMA)
        # the reasoning (empty: </think> came first) is not part of the answer
        assert not (c["message"].get("reasoning_content") or "").strip(), c


def test_forced_call_after_reasoning():
    s, b = post_json(CHAT, {"messages": [{"role": "user", "content": "Weather?"}], "tools": TOOLS,
                            "tool_choice": "required", "parallel_tool_calls": False,
                            "max_tokens": 150, "logit_bias": BIAS, "temperature": 0})
    assert s == 200, b
    c = b["choices"][0]
    assert c["finish_reason"] == "tool_calls", c
    args = json.loads(c["message"]["tool_calls"][0]["function"]["arguments"])
    jsonschema.validate(args, TOOLS[0]["function"]["parameters"])


def test_langchain_bind_tools_round_trip():
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel, Field

    class get_weather(BaseModel):
        """The weather in a city for some days."""
        city: Annotated[str, Field(max_length=20)]
        days: int

    model = get_json("/v1/models")[1]["data"][0]["id"]
    llm = ChatOpenAI(base_url=BASE + "/v1", api_key="unused", model=model, max_tokens=300,
                     temperature=0, max_retries=0, logit_bias={CLOSE: 100})
    msgs = [HumanMessage("Weather in Jerusalem?")]
    ai = llm.bind_tools([get_weather], tool_choice="required").invoke(msgs)
    assert ai.tool_calls and ai.tool_calls[0]["name"] == "get_weather", ai
    call = ai.tool_calls[0]
    assert isinstance(call["args"]["city"], str) and isinstance(call["args"]["days"], int), call
    msgs += [ai, ToolMessage(f"sunny in {call['args']['city']}", tool_call_id=call["id"])]
    final = llm.invoke(msgs)
    assert isinstance(final.content, str), final


def test_responses_reasoning_items():
    """The Responses API on a thinking model: left to reason (no bias, no end of turn), the
    demo model is still thinking when max_output_tokens cuts it: one reasoning item."""
    from openai import OpenAI
    client = OpenAI(base_url=BASE + "/v1", api_key="unused")
    model = get_json("/v1/models")[1]["data"][0]["id"]
    r = client.responses.create(model=model, input="Who was Aaron?", max_output_tokens=24,
                                extra_body={"ignore_eos": True}, temperature=0)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens", r
    kinds = [o.type for o in r.output]
    assert kinds[0] == "reasoning", kinds
    text = "".join(c.text for c in r.output[0].content or [])
    assert text.strip(), r.output[0]
    assert r.usage.output_tokens_details.reasoning_tokens > 0, r.usage
    # streamed: reasoning_text deltas that add up to the same item
    deltas, done, final = [], None, None
    with client.responses.stream(model=model, input="Who was Aaron?", max_output_tokens=24,
                                 extra_body={"ignore_eos": True}, temperature=0) as st:
        for ev in st:
            if ev.type == "response.reasoning_text.delta":
                deltas.append(ev.delta)
            elif ev.type == "response.reasoning_text.done":
                done = ev.text
            elif ev.type == "response.incomplete":  # the SDK's final response wants "completed"
                final = ev.response
    assert deltas and "".join(deltas) == done == text, (deltas, done, text)
    assert final.output[0].type == "reasoning" and final.status == "incomplete", final.output


def main():
    for t in (test_schema_after_reasoning, test_forced_call_after_reasoning,
              test_langchain_bind_tools_round_trip, test_responses_reasoning_items):
        t()
        print(f"  {t.__name__}: ok")
    print("structured_think_test: ok")


if __name__ == "__main__":
    main()
