"""client.py - stdlib HTTP helpers for the tests in tests/http (no third-party deps).

BASE comes from the environment (set by lib.sh). Every response body is decoded as
strict UTF-8, so a split character fails the test that reads it."""
import http.client
import json
import os
import urllib.parse

BASE = os.environ.get("BASE", "http://127.0.0.1:8080")


def _conn(timeout=60):
    u = urllib.parse.urlparse(BASE)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)


def request(method, path, body=None, headers=None, raw=None, timeout=60):
    """Returns (status, headers dict (lower-case keys), body bytes)."""
    c = _conn(timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    out = r.read()
    hd = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hd, out


def get_json(path, **kw):
    s, h, b = request("GET", path, **kw)
    return s, json.loads(b.decode("utf-8"))


def post_json(path, body, **kw):
    s, h, b = request("POST", path, body, **kw)
    return s, json.loads(b.decode("utf-8"))


def stream(path, body, headers=None, timeout=120):
    """POSTs a streaming request; returns (status, list of events). An event is the
    parsed JSON of a `data:` line, or the string "[DONE]"."""
    c = _conn(timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", path, body=json.dumps(body).encode(), headers=h)
    r = c.getresponse()
    if r.status != 200:
        b = r.read()
        c.close()
        return r.status, [json.loads(b.decode("utf-8"))]
    assert r.getheader("Content-Type", "").startswith("text/event-stream"), r.getheaders()
    text = r.read().decode("utf-8")
    c.close()
    events = []
    assert text.endswith("\n\n"), repr(text[-50:])
    for block in text.split("\n\n"):
        if not block or block.startswith(":"):
            continue  # an SSE comment: the server's keep-alive while a request waits
        assert block.startswith("data: "), repr(block)
        payload = block[len("data: "):]
        events.append("[DONE]" if payload == "[DONE]" else json.loads(payload))
    return r.status, events


def recv_all(s, limit=None):
    """Reads the socket s until the server closes it. With limit, gives up once limit bytes have come
    and returns None: the client hangs up mid-answer."""
    buf = b""
    while True:
        d = s.recv(65536)
        if not d:
            return buf
        buf += d
        if limit is not None and len(buf) >= limit:
            return None


def check_error(status, body, want_status, param=None):
    assert status == want_status, (status, body)
    e = body["error"]
    assert set(e) >= {"message", "type", "param", "code"}, e
    assert isinstance(e["message"], str) and e["message"], e
    if param is not None:
        assert e["param"] == param, e
    return e


def check_tool_calls(choice, tools, only=None):
    """A reply forced to call tools: finish_reason "tool_calls" and at least one call, each
    of type "function" with an id call_..., naming one of tools (only: that one), its
    arguments valid under that tool's schema (jsonschema, imported here: the callers have
    it). Returns the calls."""
    import jsonschema
    assert choice["finish_reason"] == "tool_calls", choice
    calls = choice["message"]["tool_calls"]
    assert calls, choice
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for c in calls:
        assert c["type"] == "function" and c["id"].startswith("call_"), c
        name = c["function"]["name"]
        assert name in by_name and (only is None or name == only), c
        jsonschema.validate(json.loads(c["function"]["arguments"]), by_name[name])
    return calls


def check_forced_calls(tools, seed, content, name):
    """At one seed, tool_choice "required" without parallel calls (exactly one call) and
    tool_choice naming the function name (calls of it only), each checked by
    check_tool_calls. Returns the requests' common part, for more."""
    common = {"tools": tools, "max_tokens": 200, "temperature": 0.9, "seed": seed,
              "messages": [{"role": "user", "content": content}]}
    s, b = post_json("/v1/chat/completions",
                     {**common, "tool_choice": "required", "parallel_tool_calls": False})
    assert s == 200, b
    assert len(check_tool_calls(b["choices"][0], tools)) == 1
    s, b = post_json("/v1/chat/completions",
                     {**common, "tool_choice": {"type": "function", "function": {"name": name}}})
    assert s == 200, b
    check_tool_calls(b["choices"][0], tools, only=name)
    return common


def check_usage(u, prompt=None, completion=None, cached=None):
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u
    # the prefix cache restores whole blocks, never the prompt's last token
    c = u["prompt_tokens_details"]["cached_tokens"]
    assert 0 <= c < max(u["prompt_tokens"], 1), u
    if cached is not None:
        assert c == cached, u
    if prompt is not None:
        assert u["prompt_tokens"] == prompt, u
    if completion is not None:
        assert u["completion_tokens"] == completion, u


def stream_text(events, index=0, field="content"):
    """Concatenates the streamed text of one choice; checks chunk shapes on the way."""
    out = []
    assert events[-1] == "[DONE]", events[-1:]
    ids = {e["id"] for e in events if e != "[DONE]" and "id" in e}
    assert len(ids) <= 1, ids
    for e in events[:-1]:
        assert "error" not in e, e
        for c in e["choices"]:
            if c["index"] != index:
                continue
            if e["object"] == "chat.completion.chunk":
                out.append(c["delta"].get(field) or "")
            else:
                assert e["object"] == "text_completion", e
                out.append(c["text"])
    return "".join(out)


def dechunk(payload):
    """The body of an HTTP/1.1 chunked transfer, from the bytes after the head."""
    out = b""
    while payload:
        size_s, _, rest = payload.partition(b"\r\n")
        size = int(size_s, 16)
        if size == 0:
            break
        out += rest[:size]
        payload = rest[size + 2:]
    return out


def parse_metrics(text):
    """The strata:* samples of a /metrics body by name, labels dropped (last one wins)."""
    vals = {}
    for line in text.splitlines():
        if line.startswith("strata:"):
            name, _, v = line.partition(" ")
            vals[name.split("{")[0][len("strata:"):]] = float(v)
    return vals


def rss_kb(pid):
    """The resident set of process pid, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")
