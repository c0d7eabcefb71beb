"""responses_test.py - /v1/responses through the official openai Python SDK.

A Responses request runs as the equivalent chat completion, so at temperature 0 each one
is compared with that chat: a string input, items (messages with text parts, function calls
and their outputs) and instructions. Streams are checked event by event against the
order openai-python's ResponseStream accumulates, text.format json_schema and forced tool
calls against their schemas, and the refusals (stored state, unsupported fields) as the
SDK's exceptions with OpenAI-shaped bodies."""
import json
import os

import jsonschema
import openai
import pydantic

BASE = os.environ["BASE"]
client = openai.OpenAI(base_url=BASE + "/v1", api_key=os.environ.get("KEY", "unused"), max_retries=0,
                       timeout=60)
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
# an enum keeps the tiny model's call short: a free string rambles past any token budget
WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
           "required": ["city"], "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather in a city",
          "parameters": WEATHER, "strict": True}]
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                                "parameters": WEATHER, "strict": True}}]


def chat_text(messages, n, **kw):
    r = client.chat.completions.create(model="tiny", messages=messages, max_completion_tokens=n, temperature=0,
                                       extra_body=NO_THINK, **kw)
    return r.choices[0].message.content or "", r


def check_response(r, n):
    assert r.object == "response" and r.id.startswith("resp_") and r.model == "tiny", r
    assert r.store is False and r.previous_response_id is None and r.error is None, r
    assert r.status in ("completed", "incomplete"), r.status
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens" and r.usage.output_tokens == n, r
    u = r.usage
    assert u.total_tokens == u.input_tokens + u.output_tokens and u.output_tokens <= n, u
    assert u.input_tokens_details.cached_tokens >= 0 and u.output_tokens_details.reasoning_tokens >= 0, u
    for item in r.output:
        assert item.type in ("message", "reasoning", "function_call"), item
        if item.type == "message":
            assert item.id.startswith("msg_") and item.role == "assistant", item
            assert [c.type for c in item.content] == ["output_text"] and item.content[0].annotations == []


def test_string_input():
    r = client.responses.create(model="tiny", input="Hello", max_output_tokens=8, temperature=0,
                                extra_body=NO_THINK, metadata={"k": "v"}, user="u1")
    check_response(r, 8)
    assert r.metadata == {"k": "v"} and r.user == "u1" and r.max_output_tokens == 8, r
    assert r.tools == [] and r.tool_choice == "auto" and r.text.format.type == "text", r
    want, c = chat_text([{"role": "user", "content": "Hello"}], 8)
    assert r.output_text == want, (r.output_text, want)
    assert r.usage.input_tokens == c.usage.prompt_tokens and r.usage.output_tokens == c.usage.completion_tokens


def test_items_and_instructions():
    items = [{"role": "user", "content": [{"type": "input_text", "text": "Hi"},
                                          {"type": "input_text", "text": "there"}]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
             {"role": "developer", "content": "Be brief."},
             {"role": "user", "content": "Again"}]
    r = client.responses.create(model="tiny", instructions="You are terse.", input=items, max_output_tokens=6,
                                temperature=0, extra_body=NO_THINK)
    check_response(r, 6)
    assert r.instructions == "You are terse.", r.instructions
    want, _ = chat_text([{"role": "system", "content": "You are terse."},
                         {"role": "user", "content": "Hi\nthere"},
                         {"role": "assistant", "content": "Hello!"},
                         {"role": "developer", "content": "Be brief."},
                         {"role": "user", "content": "Again"}], 6)
    assert r.output_text == want, (r.output_text, want)


def test_stream_raw():
    r = client.responses.create(model="tiny", input="Hello", max_output_tokens=8, temperature=0,
                                extra_body=NO_THINK)
    events = list(client.responses.create(model="tiny", input="Hello", max_output_tokens=8, temperature=0,
                                          stream=True, extra_body=NO_THINK))
    types = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events))), types
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"], types
    n_delta = types.count("response.output_text.delta")
    assert n_delta >= 1 and types[4:4 + n_delta] == ["response.output_text.delta"] * n_delta, types
    assert types[4 + n_delta:] == ["response.output_text.done", "response.content_part.done",
                                   "response.output_item.done", "response." + r.status], types
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == r.output_text == events[-4].text, (text, r.output_text)
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    final = events[-1].response
    assert final.id == events[0].response.id and final.output_text == text and final.status == r.status
    assert final.usage.output_tokens == r.usage.output_tokens
    assert events[-2].item.id == events[2].item.id == final.output[0].id


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=10)
    sunny: bool


def test_json_schema():
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "ok": {"type": "boolean"}},
              "required": ["name", "ok"], "additionalProperties": False}
    r = client.responses.create(model="tiny", input="A JSON object please", max_output_tokens=120, temperature=0,
                                text={"format": {"type": "json_schema", "name": "thing", "schema": schema,
                                                 "strict": True}}, extra_body=NO_THINK)
    check_response(r, 120)
    assert r.status == "completed" and r.text.format.type == "json_schema", r
    jsonschema.validate(json.loads(r.output_text), schema)
    # the SDK's stream helper with a pydantic format: every event, then the parsed object
    with client.responses.stream(model="tiny", input="A city please", max_output_tokens=120, temperature=0,
                                 text_format=City, extra_body=NO_THINK) as s:
        events = list(s)
        final = s.get_final_response()
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed", types
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == final.output_text and isinstance(final.output_parsed, City), (text, final)
    r = client.responses.create(model="tiny", input="JSON", max_output_tokens=60, temperature=0,
                                text={"format": {"type": "json_object"}}, extra_body=NO_THINK)
    if r.status == "completed":
        assert isinstance(json.loads(r.output_text), dict), r.output_text


def test_tools_round_trip():
    r = client.responses.create(model="tiny", input="Weather in Paris?", tools=TOOLS, tool_choice="required",
                                max_output_tokens=100, temperature=0, extra_body=NO_THINK)
    check_response(r, 100)
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) >= 1 and r.tools[0].name == "get_weather" and r.tool_choice == "required", r.output
    c = calls[0]
    assert c.id.startswith("fc_") and c.call_id.startswith("call_") and c.name == "get_weather", c
    assert c.status == "completed"
    jsonschema.validate(json.loads(c.arguments), WEATHER)
    # a named choice, streamed: the call's events, arguments in the delta
    events = list(client.responses.create(model="tiny", input="Weather in Paris?", tools=TOOLS,
                                          tool_choice={"type": "function", "name": "get_weather"},
                                          max_output_tokens=100, temperature=0, stream=True, extra_body=NO_THINK))
    types = [e.type for e in events]
    assert "response.function_call_arguments.delta" in types, types
    i = types.index("response.function_call_arguments.delta")
    assert types[i - 1] == "response.output_item.added" and events[i - 1].item.type == "function_call", types
    assert types[i + 1:i + 3] == ["response.function_call_arguments.done", "response.output_item.done"], types
    assert events[i].delta == events[i + 1].arguments == events[i + 2].item.arguments
    jsonschema.validate(json.loads(events[i].delta), WEATHER)
    # the round trip: the call and its output sent back as items, run as the chat equivalent
    items = [{"role": "user", "content": "Weather in Paris?"},
             {"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments},
             {"type": "function_call_output", "call_id": c.call_id, "output": "sunny, 21 C"}]
    r2 = client.responses.create(model="tiny", input=items, tools=TOOLS, max_output_tokens=8, temperature=0,
                                 extra_body=NO_THINK)
    check_response(r2, 8)
    msgs = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}]},
            {"role": "tool", "tool_call_id": c.call_id, "content": "sunny, 21 C"}]
    want, _ = chat_text(msgs, 8, tools=CHAT_TOOLS)
    got = "".join(o.content[0].text for o in r2.output if o.type == "message")
    assert got == want, (got, want)
    # a previous turn's output items passed back as they came (pydantic objects)
    r3 = client.responses.create(model="tiny", input=[{"role": "user", "content": "Weather in Paris?"}, *r.output,
                                                      {"type": "function_call_output", "call_id": c.call_id,
                                                       "output": "sunny"}],
                                 tools=TOOLS, max_output_tokens=4, temperature=0, extra_body=NO_THINK)
    check_response(r3, 4)


def expect_400(param, **kw):
    args = dict(model="tiny", input="Hello", max_output_tokens=4)
    args.update(kw)
    try:
        client.responses.create(**args)
    except openai.BadRequestError as e:
        err = e.body
        assert e.status_code == 400 and err["type"] == "invalid_request_error" and err["param"] == param, err
        assert err["message"], err
        return err
    raise AssertionError(f"expected a 400 for {param}")


def test_errors():
    err = expect_400("previous_response_id", previous_response_id="resp_123")
    assert "not stored" in err["message"] or "store" in err["message"], err
    expect_400("input", input=[{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}])
    expect_400("input", input=[{"type": "item_reference", "id": "msg_1"}])
    expect_400("input", input=[{"role": "robot", "content": "x"}])
    expect_400("input", input=[])
    expect_400("tools", tools=[{"type": "web_search"}])
    expect_400("background", background=True)
    expect_400("include", include=["reasoning.encrypted_content"])
    expect_400("conversation", conversation="conv_1")
    expect_400("max_output_tokens", max_output_tokens=0)
    expect_400("temperature", temperature=5)
    expect_400("text.format", text={"format": {"type": "json_schema", "name": "x"}})
    err = expect_400("input", input="word " * 400)
    assert err["code"] == "context_length_exceeded", err
    try:
        client.responses.retrieve("resp_123")
        raise AssertionError("expected NotFoundError")
    except openai.NotFoundError as e:
        assert e.status_code == 404 and "not stored" in e.body["message"], e.body
    try:
        client.responses.create(model="nope", input="x")
        raise AssertionError("expected NotFoundError")
    except openai.NotFoundError as e:
        assert e.body["code"] == "model_not_found", e.body


for name, fn in list(globals().items()):
    if name.startswith("test_") and callable(fn):
        fn()
        print("ok", name)
print("responses_test: ok")
