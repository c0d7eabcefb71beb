"""api_test.py - every route and parameter of strata serve, over plain HTTP.

Run by test_api.sh against a live server on the tiny checkpoint (vocab 512, eos
<|im_end|> = 1, served as "tiny", ctx 256, 4 slots)."""
import json
import sys

from client import (BASE, check_error, check_usage, get_json, post_json, request, stream,
                    stream_text)

CHAT = "/v1/chat/completions"
CMPL = "/v1/completions"
NO_THINK = {"enable_thinking": False}


def test_small_routes():
    s, b = get_json("/health")
    assert s == 200 and b == {"status": "ok"}, b
    s, b = get_json("/v1/models")
    assert s == 200 and b["object"] == "list" and b["data"][0]["id"] == "tiny", b
    m = b["data"][0]
    assert m["object"] == "model" and isinstance(m["created"], int) and m["max_model_len"] == 256
    s, b = get_json("/v1/models/tiny")
    assert s == 200 and b["id"] == "tiny"
    check_error(*get_json("/v1/models/other"), 404)
    s, b = get_json("/openapi.json")
    assert s == 200 and b["openapi"].startswith("3.") and "/v1/chat/completions" in b["paths"]
    s, h, body = request("GET", "/metrics")
    assert s == 200 and h["content-type"].startswith("text/plain") and b"strata:" in body


def test_completion_shapes():
    s, b = post_json(CMPL, {"model": "tiny", "prompt": "Hello, world", "max_tokens": 7,
                            "temperature": 0, "ignore_eos": True})
    assert s == 200, b
    assert b["object"] == "text_completion" and b["id"].startswith("cmpl-"), b
    assert b["model"] == "tiny" and b["system_fingerprint"] and isinstance(b["created"], int)
    (c,) = b["choices"]
    assert c["index"] == 0 and c["finish_reason"] == "length" and c["logprobs"] is None
    s2, t = post_json("/tokenize", {"prompt": "Hello, world"})
    check_usage(b["usage"], prompt=t["count"], completion=7)
    # the same greedy request again: same text
    s, b2 = post_json(CMPL, {"prompt": "Hello, world", "max_tokens": 7, "temperature": 0,
                             "ignore_eos": True})
    assert b2["choices"][0]["text"] == c["text"]
    return c["text"]


def test_prompt_forms():
    s, t = post_json("/tokenize", {"prompt": "The quick brown fox"})
    ids = t["tokens"]
    base = {"max_tokens": 4, "temperature": 0, "ignore_eos": True}
    s, a = post_json(CMPL, dict(base, prompt="The quick brown fox"))
    s, b = post_json(CMPL, dict(base, prompt=ids))
    assert a["choices"][0]["text"] == b["choices"][0]["text"], (a, b)
    s, c = post_json(CMPL, dict(base, prompt=["The quick brown fox", "Hello"], n=2))
    assert s == 200 and [x["index"] for x in c["choices"]] == [0, 1, 2, 3], c
    # greedy: both choices of a prompt agree, and the first matches the single run
    assert c["choices"][0]["text"] == c["choices"][1]["text"] == a["choices"][0]["text"]
    s, d = post_json(CMPL, dict(base, prompt=[ids, ids[:2]]))
    assert s == 200 and len(d["choices"]) == 2 and d["choices"][0]["text"] == a["choices"][0]["text"]
    check_usage(d["usage"], prompt=len(ids) + 2, completion=8)


def test_echo_logprobs():
    s, b = post_json(CMPL, {"prompt": "Hello", "max_tokens": 5, "echo": True, "logprobs": 3,
                            "temperature": 0, "ignore_eos": True})
    assert s == 200, b
    c = b["choices"][0]
    assert c["text"].startswith("Hello"), c
    lp = c["logprobs"]
    # echo: the prompt's tokens come first, the first one without a logprob
    n = len(post_json("/tokenize", {"prompt": "Hello"})[1]["tokens"])
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == n + 5, lp
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None, lp
    assert all(x <= 0 for x in lp["token_logprobs"][1:])
    assert all(1 <= len(t) <= 3 for t in lp["top_logprobs"][1:]), lp["top_logprobs"]
    assert lp["text_offset"] == sorted(lp["text_offset"])
    # greedy: each generated token is the most likely alternative
    for tok, l, top in zip(lp["tokens"][n:], lp["token_logprobs"][n:], lp["top_logprobs"][n:]):
        assert abs(max(top.values()) - l) < 1e-4, (tok, l, top)


def test_stop_strings(text):
    # cut the greedy text at a substring in its middle: the answer ends before it
    cut = None
    for i in range(1, len(text) - 2):
        cand = text[i:i + 2]
        if cand.strip() and text.find(cand) == i:
            cut = (i, cand)
            break
    assert cut, text
    i, stop = cut
    s, b = post_json(CMPL, {"prompt": "Hello, world", "max_tokens": 7, "temperature": 0,
                            "ignore_eos": True, "stop": [stop, "zzzz"]})
    c = b["choices"][0]
    assert c["finish_reason"] == "stop" and c["text"] == text[:i], (c, text, stop)
    # streamed: the stop string is never emitted, not even a part of it
    s, ev = stream(CMPL, {"prompt": "Hello, world", "max_tokens": 7, "temperature": 0,
                          "ignore_eos": True, "stop": stop, "stream": True})
    assert stream_text(ev) == text[:i]
    fin = [c for e in ev[:-1] for c in e["choices"] if c["finish_reason"]]
    assert [c["finish_reason"] for c in fin] == ["stop"]


def test_stop_token_ids_and_bias():
    # logit_bias +100 forces a token; stop_token_ids on it ends after one token
    s, b = post_json(CMPL, {"prompt": "Hi", "max_tokens": 4, "logit_bias": {"300": 100},
                            "temperature": 1.0, "seed": 3, "ignore_eos": True, "logprobs": 0})
    toks = b["choices"][0]["logprobs"]["tokens"]
    s, d = post_json("/detokenize", {"tokens": [300]})
    assert toks == [d["prompt"]] * 4, (toks, d)
    s, b = post_json(CMPL, {"prompt": "Hi", "max_tokens": 4, "logit_bias": {"300": 100},
                            "stop_token_ids": [300]})
    assert b["choices"][0]["finish_reason"] == "stop" and b["usage"]["completion_tokens"] == 1, b


def test_sampling_params():
    body = {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0.9, "top_p": 0.9,
            "top_k": 40, "min_p": 0.01, "seed": 1234, "ignore_eos": True,
            "presence_penalty": 0.5, "frequency_penalty": 0.5, "repetition_penalty": 1.1,
            "user": "tester"}
    s, a = post_json(CMPL, body)
    s, b = post_json(CMPL, body)
    assert s == 200 and a["choices"][0]["text"] == b["choices"][0]["text"], (a, b)
    # n=2 with a seed: reproducible, and the two choices draw different streams
    s, c = post_json(CMPL, dict(body, n=2, max_tokens=30, temperature=2.0, top_p=1.0, top_k=0))
    s, d = post_json(CMPL, dict(body, n=2, max_tokens=30, temperature=2.0, top_p=1.0, top_k=0))
    assert [x["text"] for x in c["choices"]] == [x["text"] for x in d["choices"]]
    assert c["choices"][0]["text"] != c["choices"][1]["text"], c


def test_chat():
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello"}]
    s, b = post_json(CHAT, {"model": "tiny", "messages": msgs, "max_completion_tokens": 6,
                            "temperature": 0, "chat_template_kwargs": NO_THINK})
    assert s == 200, b
    assert b["object"] == "chat.completion" and b["id"].startswith("chatcmpl-")
    c = b["choices"][0]
    assert c["message"]["role"] == "assistant" and isinstance(c["message"]["content"], str)
    assert c["finish_reason"] in ("stop", "length") and b["usage"]["completion_tokens"] <= 6
    s, t = post_json("/tokenize", {"messages": msgs, "chat_template_kwargs": NO_THINK})
    check_usage(b["usage"], prompt=t["count"])
    # list-of-parts content renders like the joined string
    parts = [{"role": "system", "content": [{"type": "text", "text": "You are terse."}]},
             {"role": "user", "content": [{"type": "text", "text": "Hello"}]}]
    s, b2 = post_json(CHAT, {"messages": parts, "max_tokens": 6, "temperature": 0,
                             "chat_template_kwargs": NO_THINK})
    assert b2["choices"][0]["message"] == c["message"], (b2, b)
    # streamed: role chunk first, the same text, one finish chunk, usage, [DONE]
    s, ev = stream(CHAT, {"messages": msgs, "max_tokens": 6, "temperature": 0, "stream": True,
                          "stream_options": {"include_usage": True},
                          "chat_template_kwargs": NO_THINK})
    assert s == 200, ev
    assert ev[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}, ev[0]
    assert stream_text(ev) == (c["message"]["content"] or ""), ev
    # the same prompt a third time: the prefix cache restored its last whole block (16
    # positions a block) and only cached_tokens says so
    u = dict(ev[-2]["usage"])
    cached = u.pop("prompt_tokens_details")["cached_tokens"]
    assert cached == (t["count"] - 1) // 16 * 16 and cached > 0, ev[-2]
    assert ev[-2]["choices"] == [] and u == {k: v for k, v in b["usage"].items()
                                             if k != "prompt_tokens_details"}, ev[-2]
    assert ev[-3]["choices"][0]["delta"] == {} and ev[-3]["choices"][0]["finish_reason"] == c["finish_reason"]
    # continue_final_message: the prompt ends inside the last assistant turn
    cont = {"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "The answer is"}],
            "continue_final_message": True, "add_generation_prompt": False}
    s, t = post_json("/tokenize", cont)
    s, d = post_json("/detokenize", {"tokens": t["tokens"]})
    assert d["prompt"].endswith("assistant\nThe answer is"), d
    s, b3 = post_json(CHAT, dict(cont, max_tokens=2))
    assert s == 200 and b3["usage"]["prompt_tokens"] == t["count"], b3
    # without include_usage: no usage chunk
    s, ev = stream(CHAT, {"messages": msgs, "max_tokens": 3, "stream": True})
    assert all(e == "[DONE]" or e["choices"] for e in ev), ev


def test_chat_logprobs_n():
    s, b = post_json(CHAT, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                            "logprobs": True, "top_logprobs": 2, "n": 2, "seed": 7,
                            "ignore_eos": True})
    assert s == 200 and len(b["choices"]) == 2, b
    for c in b["choices"]:
        content = c["logprobs"]["content"]
        assert len(content) == 4
        for e in content:
            assert set(e) >= {"token", "logprob", "bytes", "top_logprobs"} and len(e["top_logprobs"]) == 2
            assert bytes(e["bytes"]).decode("utf-8", "replace") is not None


def test_reasoning():
    # enable_thinking opens <think> in the prompt; with </think> (id 4) banned every
    # generated token is reasoning
    body = {"messages": [{"role": "user", "content": "Think"}], "max_tokens": 8,
            "temperature": 0, "ignore_eos": True, "logit_bias": {"4": -100},
            "chat_template_kwargs": {"enable_thinking": True}}
    s, b = post_json(CHAT, body)
    m = b["choices"][0]["message"]
    assert m.get("reasoning_content") and not m["content"], m
    assert m["reasoning"] == m["reasoning_content"], m  # vLLM's newer name, same text
    s, ev = stream(CHAT, dict(body, stream=True))
    assert stream_text(ev, field="reasoning_content") == m["reasoning_content"]
    assert stream_text(ev, field="reasoning") == m["reasoning_content"]
    assert stream_text(ev) == ""
    # forcing </think> first: reasoning is empty, the rest is content
    body["logit_bias"] = {"4": 100}
    body["max_tokens"] = 1
    s, b = post_json(CHAT, body)
    m = b["choices"][0]["message"]
    assert not m.get("reasoning_content") and not m.get("reasoning") and m["content"] == "", m


def test_stream_matches_full():
    body = {"prompt": "Unicode: café 東京", "max_tokens": 40, "temperature": 0, "ignore_eos": True}
    s, full = post_json(CMPL, body)
    s, ev = stream(CMPL, dict(body, stream=True, echo=True))
    text = stream_text(ev)
    assert text == "Unicode: café 東京" + full["choices"][0]["text"], (text, full)


def test_tokenize():
    s, t = post_json("/tokenize", {"prompt": "Hello, world! 東京", "return_token_strs": True})
    assert s == 200 and t["count"] == len(t["tokens"]) == len(t["token_strs"]) and t["max_model_len"] == 256
    s, d = post_json("/detokenize", {"tokens": t["tokens"]})
    assert s == 200 and d["prompt"] == "Hello, world! 東京", d
    s, t = post_json("/tokenize", {"messages": [{"role": "user", "content": "x"}],
                                   "add_generation_prompt": True})
    assert s == 200 and t["tokens"][0] == 2, t  # <|im_start|>
    check_error(*post_json("/detokenize", {"tokens": [100000]}), 400, "tokens")
    check_error(*post_json("/tokenize", {"nothing": 1}), 400)


def test_errors():
    check_error(*post_json(CMPL, {"prompt": "x", "temperature": "hot"}), 400, "temperature")
    check_error(*post_json(CMPL, {"prompt": "x", "temperature": 3}), 400, "temperature")
    check_error(*post_json(CMPL, {"prompt": "x", "max_tokens": 0}), 400, "max_tokens")
    check_error(*post_json(CMPL, {"prompt": "x", "n": 99}), 400, "n")
    check_error(*post_json(CMPL, {"prompt": "x", "logit_bias": {"abc": 1}}), 400, "logit_bias")
    check_error(*post_json(CMPL, {"prompt": "x", "stop": 5}), 400, "stop")
    check_error(*post_json(CMPL, {"prompt": "x", "suffix": "y"}), 400, "suffix")
    check_error(*post_json(CMPL, {"prompt": [1, "a"]}), 400, "prompt")
    check_error(*post_json(CMPL, {"prompt": [999999]}), 400, "prompt")
    check_error(*post_json(CMPL, {"prompt": ""}), 400, "prompt")
    check_error(*post_json(CMPL, {}), 400, "prompt")
    check_error(*post_json(CMPL, {"prompt": "x", "stream_options": {"include_usage": True}}), 400, "stream_options")
    check_error(*post_json(CMPL, {"prompt": "x", "model": "gpt-4"}), 404, "model")
    check_error(*post_json(CHAT, {"messages": []}), 400, "messages")
    check_error(*post_json(CHAT, {"messages": [{"role": "wizard", "content": "x"}]}), 400, "messages")
    check_error(*post_json(CHAT, {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}]}), 400, "messages")
    check_error(*post_json(CHAT, {"messages": [{"role": "user", "content": "x"}],
                                  "response_format": {"type": "json_schema"}}), 400, "response_format")
    check_error(*post_json(CHAT, {"messages": [{"role": "user", "content": "x"}],
                                  "top_logprobs": 3}), 400, "top_logprobs")
    e = check_error(*post_json(CMPL, {"prompt": "Hello", "max_tokens": 1000}), 400, "prompt")
    assert e["code"] == "context_length_exceeded" and "256" in e["message"] and "1000" in e["message"], e
    s, h, b = request("POST", CMPL, raw=b'{"prompt": "x",')
    check_error(s, json.loads(b), 400)
    s, h, b = request("GET", CMPL)
    check_error(s, json.loads(b), 405)
    assert h["allow"] == "POST", h
    s, h, b = request("DELETE", "/health")
    assert s == 405
    s, h, b = request("GET", "/nope")
    check_error(s, json.loads(b), 404)
    # OpenAI routes strata lacks: a 404 that says so and lists what is served
    for path in ("/v1/embeddings", "/v1/audio/speech", "/v1/images/generations", "/v1/files",
                 "/v1/batches", "/v1/fine_tuning/jobs", "/v1/moderations", "/v1/assistants",
                 "/v1/threads", "/v2/anything"):
        s, h, b = request("POST", path, {"input": "x"})
        e = check_error(s, json.loads(b), 404)
        assert e["code"] == "route_not_found" and path in e["message"], e
        for served in ("/v1/chat/completions", "/v1/completions", "/v1/models", "/tokenize",
                       "/detokenize", "/health", "/metrics"):
            assert served in e["message"], e
    # over --max-body-bytes: refused from Content-Length before the body is read
    import socket
    import urllib.parse
    u = urllib.parse.urlparse(BASE)
    with socket.create_connection((u.hostname, u.port), timeout=10) as sk:
        sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n" % (5 << 20))
        resp = b""
        while b"\r\n\r\n" not in resp:
            resp += sk.recv(4096)
    assert resp.startswith(b"HTTP/1.1 413"), resp[:100]


def test_default_max_tokens():
    # a completion without a limit stops after 16 tokens (OpenAI, vLLM); a chat does not
    s, b = post_json(CMPL, {"prompt": "Once upon a time", "temperature": 0, "ignore_eos": True})
    assert s == 200 and b["choices"][0]["finish_reason"] == "length", b
    assert b["usage"]["completion_tokens"] == 16, b["usage"]
    s, b = post_json(CMPL, {"prompt": "Once upon a time", "ignore_eos": True,
                            "max_completion_tokens": 20})
    assert s == 200 and b["usage"]["completion_tokens"] == 20, b
    s, b = post_json(CHAT, {"messages": [{"role": "user", "content": "Hi"}], "ignore_eos": True,
                            "chat_template_kwargs": NO_THINK})
    assert s == 200 and b["usage"]["completion_tokens"] > 16, b["usage"]
    assert b["usage"]["total_tokens"] == 256, b["usage"]  # ran to the end of the context


def test_chat_turn_reuse():
    """Each turn resends the conversation: the prefix cache finds the state the last answer
    ended at (its last block boundary), so only about the new message is computed, and the
    answers are those of a server computing everything (the determinism test's promise)."""
    msgs = [{"role": "system", "content": "Answer in one short sentence."}]
    prev = 0
    for turn in range(3):
        msgs.append({"role": "user", "content": "Question %d: what is the tide made of?" % turn})
        s, b = post_json(CHAT, {"messages": msgs, "max_tokens": 12, "temperature": 0,
                                "chat_template_kwargs": NO_THINK})
        assert s == 200, b
        u = b["usage"]
        check_usage(u)
        if turn:
            # the last prompt's blocks at least, and (re-rendered the same) its answer's
            assert u["prompt_tokens_details"]["cached_tokens"] >= (prev - 1) // 16 * 16 > 0, u
        prev = u["prompt_tokens"]
        msgs.append({"role": "assistant", "content": b["choices"][0]["message"]["content"]})


def main():
    text = test_completion_shapes()
    for t in (test_small_routes, test_prompt_forms, test_echo_logprobs, lambda: test_stop_strings(text),
              test_stop_token_ids_and_bias, test_sampling_params, test_chat, test_chat_logprobs_n,
              test_reasoning, test_stream_matches_full, test_tokenize, test_errors,
              test_default_max_tokens, test_chat_turn_reuse):
        t()
        print("ok", getattr(t, "__name__", "stop_strings"))
    print("api_test: all passed")


if __name__ == "__main__":
    sys.exit(main())
