#!/usr/bin/env python3
"""Replays what Open WebUI 0.12.4 sent to strata (tests/data/clients/open-webui-0.12.4.jsonl,
see SOURCE.md there) against the live server and checks every answer's shape.

Each recorded request goes to the same path with the same method and body, with the
Content-Type Open WebUI sends (no other headers were recorded). The replay changes two
fields and nothing else:
  - "model": the recording names "models/demo", the path it was served under then; here the
    server has a --served-model-name, and an unknown model would be a 404, not a replay;
  - "max_tokens": capped at MAX_TOKENS (the title asked for 1000), or set to it where the
    request had none (the chat, follow-ups and tags), so that the run stays short in CI:
    without it the demo model may write up to the whole context.
The demo model writes King James prose, not titles or JSON, so the answers are checked for
their shape, never their meaning.

Whether a request fits the context is decided the way the server does (prompt + max_tokens
<= the context, gen_build.c): the prompt is counted by /tokenize with the request's messages.
That count leaves the tools out; the demo model's ChatML template does not render tools, so
it is the chat prompt's length too (checked against usage.prompt_tokens where a non-streamed
answer reports it). A request that fits must get a 200; one that does not, the OpenAI 400
error object with code context_length_exceeded.

Usage: openwebui_replay_test.py EXPECT, EXPECT one of
  fit    - every request fits (the server runs at the model's whole context); also replays
           the chat and background requests all at once, as a browser tab and Open WebUI's
           background tasks can overlap;
  tight  - the context is small enough that some requests cannot fit: at least one 400 and
           at least one 200 must come back."""
import json
import os
import sys
import threading
import time

from client import check_error, get_json, post_json, request, stream

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "clients", "open-webui-0.12.4.jsonl")
MAX_TOKENS = 24
FINISH = {"stop", "length", "tool_calls"}
HEADERS = {"Content-Type": "application/json"}


def load():
    with open(DATA, encoding="utf-8") as f:
        recs = [json.loads(line) for line in f if line.strip()]
    assert len(recs) == 6, len(recs)
    for r in recs:
        assert r["status_seen"] == 200, r["status_seen"]
    return recs


def label(r):
    """A short name of a recorded request for the log."""
    b = r["body"]
    if b is None:
        return f"{r['method']} {r['path']}"
    text = b["messages"][-1]["content"]
    if b.get("stream"):
        return f"chat (stream, {len(b.get('tools', []))} tools)"
    for key, name in (("concise title", "title"), ("Predict 3-5 useful messages", "follow-ups"),
                      ("Generate 1-3 broad tags", "tags")):
        if key in text:
            return name
    return "chat"


def replay_body(body, model):
    b = json.loads(json.dumps(body))  # a deep copy: the recording stays as read
    b["model"] = model
    b["max_tokens"] = min(b.get("max_tokens") or MAX_TOKENS, MAX_TOKENS)
    return b


def prompt_len(body):
    s, t = post_json("/tokenize", {"model": body["model"], "messages": body["messages"]},
                     headers=HEADERS)
    assert s == 200, t
    return t["count"]


def check_models(status, body, model, ctx):
    assert status == 200, (status, body)
    assert body["object"] == "list", body
    ids = [m["id"] for m in body["data"]]
    assert model in ids, ids
    m = body["data"][ids.index(model)]
    assert m["object"] == "model" and m["max_model_len"] == ctx, m


def check_usage(u, prompt):
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert isinstance(u[k], int) and not isinstance(u[k], bool) and u[k] >= 0, u
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u
    assert u["prompt_tokens"] == prompt, (u, prompt)
    assert 1 <= u["completion_tokens"] <= MAX_TOKENS, u


def check_completion(b, model, prompt, background):
    """A whole chat.completion; returns (finish_reason, content)."""
    assert b["object"] == "chat.completion", b
    assert isinstance(b["id"], str) and b["id"], b
    assert b["model"] == model, b
    assert len(b["choices"]) == 1, b
    c = b["choices"][0]
    assert c["index"] == 0, c
    m = c["message"]
    assert m["role"] == "assistant", m
    assert m["content"] is None or isinstance(m["content"], str), m
    # title / follow-ups / tags carry no tools: Open WebUI reads their text
    if background:
        assert isinstance(m["content"], str), m
    assert c["finish_reason"] in FINISH, c
    if c["finish_reason"] == "tool_calls":
        assert m.get("tool_calls"), m
    check_usage(b["usage"], prompt)
    if c["finish_reason"] == "length":
        assert b["usage"]["completion_tokens"] == MAX_TOKENS, b["usage"]
    return c["finish_reason"], m["content"]


def check_stream(events, model):
    """A chat.completion.chunk stream ending in [DONE]; returns (finish_reason, content)."""
    assert len(events) >= 3, events  # the role delta, a finish chunk, [DONE]
    assert events[-1] == "[DONE]", events[-1:]
    assert "[DONE]" not in events[:-1], events
    chunks = events[:-1]
    ids = set()
    content, finish, finish_at, with_text = [], None, None, 0
    for i, e in enumerate(chunks):
        assert isinstance(e, dict), e
        assert "error" not in e, e
        assert e["object"] == "chat.completion.chunk", e
        assert e["model"] == model, e
        ids.add(e["id"])
        assert len(e["choices"]) == 1, e
        c = e["choices"][0]
        assert c["index"] == 0, c
        d = c["delta"]
        assert isinstance(d, dict), c
        if i == 0:
            assert d.get("role") == "assistant", e
        else:
            assert "role" not in d, e  # one role delta, the first
        if d.get("content") is not None:
            assert isinstance(d["content"], str), d
            content.append(d["content"])
            with_text += d["content"] != ""
        for tc in d.get("tool_calls") or []:
            assert isinstance(tc["index"], int), tc
            assert isinstance(tc["function"].get("arguments", ""), str), tc
        if c["finish_reason"] is not None:
            assert finish is None, ("two finish reasons", e)
            finish, finish_at = c["finish_reason"], i
    assert len(ids) == 1, ids
    assert finish in FINISH, chunks[-1]
    assert finish_at == len(chunks) - 1, "chunks after the finish reason"
    assert with_text <= MAX_TOKENS, with_text
    return finish, "".join(content)


def replay(r, model, ctx):
    """Sends one recorded request and checks the answer; returns (status, a line for the log)."""
    name = label(r)
    t0 = time.monotonic()
    if r["body"] is None:
        s, b = get_json(r["path"], headers=HEADERS)
        assert r["method"] == "GET", r["method"]
        check_models(s, b, model, ctx)
        return s, f"{name}: {s}, {len(b['data'])} model(s), max_model_len {ctx}"
    assert r["method"] == "POST", r["method"]
    body = replay_body(r["body"], model)
    n = prompt_len(body)
    fits = n + body["max_tokens"] <= ctx
    if body.get("stream"):
        s, ev = stream(r["path"], body, headers=HEADERS, timeout=60)
        if not fits:
            e = check_error(s, ev[0], 400, param="messages")
            assert e["code"] == "context_length_exceeded" and e["type"] == "invalid_request_error", e
            return s, f"{name}: 400 context_length_exceeded ({n} prompt + {MAX_TOKENS} > {ctx})"
        assert s == 200, (name, s, ev)
        finish, text = check_stream(ev, model)
        what = f"{len(ev) - 1} chunks + [DONE]"
    else:
        s, _, raw = request(r["method"], r["path"], body, headers=HEADERS)
        b = json.loads(raw.decode("utf-8"))
        if not fits:
            e = check_error(s, b, 400, param="messages")
            assert e["code"] == "context_length_exceeded" and e["type"] == "invalid_request_error", e
            return s, f"{name}: 400 context_length_exceeded ({n} prompt + {MAX_TOKENS} > {ctx})"
        assert s == 200, (name, s, b)
        finish, text = check_completion(b, model, n, background=name != "chat")
        what = f"chat.completion, {b['usage']['completion_tokens']} tokens"
    ms = (time.monotonic() - t0) * 1000
    return s, f"{name}: 200 {what}, prompt {n}, finish {finish}, {ms:.0f} ms, {text[:40]!r}"


def main():
    expect = sys.argv[1]
    assert expect in ("fit", "tight"), expect
    recs = load()
    s, models = get_json("/v1/models")
    assert s == 200, models
    model = models["data"][0]["id"]
    ctx = models["data"][0]["max_model_len"]
    with open(os.path.join(ROOT, "models", "demo", "config.json")) as f:
        max_pos = json.load(f)["text_config"]["max_position_embeddings"]
    assert ctx <= max_pos, (ctx, max_pos)

    res = [replay(r, model, ctx) for r in recs]
    for _, line in res:
        print("  " + line)
    n400 = sum(s == 400 for s, _ in res)
    if expect == "fit":
        assert n400 == 0, res
        # all the POSTs at once: the chat and the background tasks may overlap
        posts = [r for r in recs if r["body"] is not None]
        out, errs = [None] * len(posts), []

        def one(i):
            try:
                out[i] = replay(posts[i], model, ctx)
            except BaseException as e:  # noqa: BLE001 - reported below
                errs.append(f"{label(posts[i])}: {e!r}")
        ts = [threading.Thread(target=one, args=(i,)) for i in range(len(posts))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        assert not errs, errs
        assert all(o and o[0] == 200 for o in out), out
        print(f"  concurrent: {len(posts)} POSTs, all 200")
    else:
        assert 0 < n400 < len([r for r in recs if r["body"] is not None]), res
    print(f"openwebui_replay {expect} (ctx {ctx}): ok, {len(recs)} requests, {n400} x 400")


if __name__ == "__main__":
    main()
