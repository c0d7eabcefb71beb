"""sdk_test.py - the official openai Python SDK against strata serve.

Chat and completions, streaming and not, usage in streams, n, logprobs, stop,
seeded sampling, models, and errors surfacing as the SDK's own exception classes."""
import os
import sys

import openai

BASE = os.environ["BASE"]
client = openai.OpenAI(base_url=BASE + "/v1", api_key=os.environ.get("KEY", "unused"), max_retries=0,
                       timeout=60)
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}


def test_models():
    ms = client.models.list()
    assert [m.id for m in ms.data] == ["tiny"], ms
    assert client.models.retrieve("tiny").id == "tiny"
    try:
        client.models.retrieve("nope")
        raise AssertionError("expected NotFoundError")
    except openai.NotFoundError as e:
        assert e.status_code == 404


def test_chat():
    r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hello"}],
                                       max_completion_tokens=8, temperature=0, extra_body=NO_THINK)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens_details.cached_tokens == 0
    # streamed: the same text, usage in the last chunk only
    chunks = list(client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hello"}], max_completion_tokens=8,
        temperature=0, stream=True, stream_options={"include_usage": True}, extra_body=NO_THINK))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == (r.choices[0].message.content or ""), (text, r.choices[0].message.content)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])
    # n, logprobs, seed
    a = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}], n=2,
                                       max_tokens=6, seed=11, logprobs=True, top_logprobs=2,
                                       extra_body={"ignore_eos": True})
    b = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}], n=2,
                                       max_tokens=6, seed=11, logprobs=True, top_logprobs=2,
                                       extra_body={"ignore_eos": True})
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    assert len(a.choices[0].logprobs.content) == 6 and len(a.choices[0].logprobs.content[0].top_logprobs) == 2


def test_completions():
    r = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=10, temperature=0,
                                  extra_body={"ignore_eos": True}, logprobs=2, echo=True)
    c = r.choices[0]
    assert c.text.startswith("Once upon a time") and c.finish_reason == "length"
    assert len(c.logprobs.tokens) == r.usage.prompt_tokens + 10 and r.usage.completion_tokens == 10
    assert c.logprobs.token_logprobs[0] is None  # echo: the prompt is scored too
    s = client.completions.create(model="tiny", prompt=["Once upon a time", "Hello"], max_tokens=10,
                                  temperature=0, extra_body={"ignore_eos": True}, stream=True,
                                  stream_options={"include_usage": True})
    texts = {0: "", 1: ""}
    usage = None
    for ch in s:
        if ch.usage:
            usage = ch.usage
        for x in ch.choices:
            texts[x.index] += x.text
    assert texts[0] == c.text[len("Once upon a time"):], (texts, c.text)
    assert usage.completion_tokens == 20
    stop = c.text[len("Once upon a time"):][3:5]
    if stop.strip():
        r = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=10, temperature=0,
                                      stop=[stop], extra_body={"ignore_eos": True})
        assert stop not in r.choices[0].text and r.choices[0].finish_reason == "stop"


def test_errors():
    for kwargs, exc in (
        (dict(temperature=5), openai.BadRequestError),
        (dict(max_tokens=100000), openai.BadRequestError),
        (dict(model="gpt-4o"), openai.NotFoundError),
        (dict(n=100), openai.BadRequestError),
    ):
        args = dict(model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=2)
        args.update(kwargs)
        try:
            client.chat.completions.create(**args)
            raise AssertionError(f"{kwargs}: no error")
        except exc as e:
            assert e.body and "message" in e.body, e.body
    try:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}],
                                       max_tokens=100000)
    except openai.BadRequestError as e:
        assert e.code == "context_length_exceeded", e.body
    bad = openai.OpenAI(base_url=BASE + "/v1", api_key="wrong", max_retries=0)
    if os.environ.get("KEY"):
        try:
            bad.models.list()
            raise AssertionError("expected AuthenticationError")
        except openai.AuthenticationError as e:
            assert e.status_code == 401


def main():
    for t in (test_models, test_chat, test_completions, test_errors):
        t()
        print("ok", t.__name__)
    print("sdk_test: all passed (openai", openai.__version__ + ")")


if __name__ == "__main__":
    sys.exit(main())
