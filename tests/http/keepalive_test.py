"""keepalive_test.py MODE - SSE keep-alive comments while a stream waits.

The server (started by test_keepalive.sh) runs a random-weight model of the tiny
checkpoint's architecture, scaled up so a token costs milliseconds, with --max-seqs
1. A blocker (a request for 1900 tokens, many seconds of work) holds the only slot;
the test hangs it up after WAIT seconds, which frees the slot, so the streams queued
behind it wait WAIT seconds on any machine, under ASan too.

Modes:
  on       --sse-keepalive 1 --prefill-chunk 1: a queued chat stream gets ': keep-alive'
           about once a second, only between events, and ends well formed with
           [DONE]; a queued non-stream request gets plain JSON; the openai SDK reads
           a queued stream (bytes seen through a recording relay) to the same text;
           a stream in a 1900-token prefill (headers out, no token yet) gets them too
  cutoff   after `on`, same server (--shutdown-timeout 0): SIGTERM (to the pid in
           argv[2]) while a stream whose headers a keep-alive sent waits in the queue:
           the 503 arrives as an error event + [DONE]
  off      --sse-keepalive 0: the same queued stream is silent until its first event"""
import http.client
import json
import os
import socket
import sys
import threading
import time

from client import _conn, request

WAIT = 3.5      # seconds the blocker holds the slot
KA = 1.0        # --sse-keepalive of the server
MAX_IDS = 1900  # --ctx-size 2048 minus room for the answer
# random weights: a bias towards whole-word tokens makes the answer readable text
_VOCAB = json.load(open("tests/http/fixtures/tokenizer.json"))["model"]["vocab"]
WORDS = {str(i): 60 for t, i in _VOCAB.items() if len(t) >= 3 and all(c.isalpha() or c == "\u0120" for c in t)}
CHAT = {"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 6,
        "temperature": 0, "ignore_eos": True, "logit_bias": WORDS}


def ids(n):
    return [10 + (i * 7) % 480 for i in range(n)]


class Blocker:
    """A non-stream request for MAX_IDS tokens; hang_up_at(t) cancels it t s after
    it was sent (the server watches the socket), result() waits for its answer."""

    def __init__(self):
        self.c = _conn(120)
        body = {"prompt": "Hello", "max_tokens": MAX_IDS, "ignore_eos": True}
        self.c.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                       headers={"Content-Type": "application/json"})
        self.t0 = time.monotonic()
        time.sleep(0.3)  # admitted and running

    def hang_up_at(self, t):
        def run():
            time.sleep(max(0.0, self.t0 + t - time.monotonic()))
            hang_up(self.c.sock)
        th = threading.Thread(target=run)
        th.start()
        return th

    def result(self):
        r = self.c.getresponse()
        return r.status, r.read()


def hang_up(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def raw_stream(path, body, stop_after=None):
    """POSTs a stream; returns (status, headers, [(t, unit)]): unit is one SSE block
    (bytes before a blank line), t its arrival, seconds after the request went out.
    http.client undoes the chunked framing; read1 hands over bytes as they come.
    stop_after: hang up after that many seconds (the rest is not read)."""
    c = _conn(120)
    t0 = time.monotonic()
    c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    hd = {k.lower(): v for k, v in r.getheaders()}
    if stop_after:
        threading.Timer(stop_after - (time.monotonic() - t0), hang_up, args=(c.sock,)).start()
    units, buf = [], b""
    while True:
        try:
            b = r.read1(65536)
        except (OSError, http.client.HTTPException):
            b = b""
        if not b:
            break
        now = time.monotonic() - t0
        buf += b
        while b"\n\n" in buf:
            u, buf = buf.split(b"\n\n", 1)
            units.append((now, u))
    c.close()
    assert stop_after or buf == b"", ("bytes after the last blank line", buf)
    return r.status, hd, units


def check_stream(units, kind, want_ka):
    """Every unit is a whole keep-alive comment or a whole `data:` event; the events
    make a well-formed stream ending in [DONE]. Returns (events, keep-alive times,
    time of the first event)."""
    events, ka, first = [], [], None
    for t, u in units:
        if u == b": keep-alive":
            assert events == [] or events[-1] != "[DONE]", "keep-alive after [DONE]"
            ka.append(t)
            continue
        assert u.startswith(b"data: ") and b"\n" not in u, ("not one whole event", u[:200])
        p = u[6:].decode("utf-8")
        events.append("[DONE]" if p == "[DONE]" else json.loads(p))
        first = t if first is None else first
    assert events and events[-1] == "[DONE]", events[-3:]
    for e in events[:-1]:
        assert "error" not in e, e
        assert e["object"] == ("chat.completion.chunk" if kind == "chat" else "text_completion"), e
    last = [e for e in events[:-1] if e["choices"]][-1]
    assert last["choices"][0]["finish_reason"] == "length", last
    if kind == "chat":
        assert events[0]["choices"][0]["delta"].get("role") == "assistant", events[0]
    if not want_ka:
        assert ka == [], f"{len(ka)} keep-alives with --sse-keepalive 0"
    return events, ka, first


def check_rhythm(units, ka, first, label):
    """Keep-alives about once a second while nothing else went out; no silence
    longer than the interval plus slack between any two units."""
    assert first is not None and first >= 2.2, f"{label}: first event after {first} s: no real wait"
    before = [t for t in ka if t < first]
    assert len(before) >= 2, f"{label}: {len(before)} keep-alives in a {first:.2f} s wait"
    assert 0.8 * KA <= before[0] <= 1.8 * KA, f"{label}: first keep-alive after {before[0]:.2f} s"
    gaps = [b - a for a, b in zip(before, before[1:])]
    assert all(0.7 * KA <= g <= 1.8 * KA for g in gaps), (label, gaps)
    times = [0.0] + [t for t, _ in units]
    silence = max(b - a for a, b in zip(times, times[1:]))
    assert silence <= 2.0 * KA, f"{label}: {silence:.2f} s without a byte"
    print(f"{label}: waited {first:.2f} s, {len(before)} keep-alives meanwhile, "
          f"gaps {', '.join(f'{g:.2f}' for g in gaps)}")


class Recorder:
    """A TCP relay that records what the server sends: the SDK's own parsing of the
    stream is checked while we still see the bytes it read."""

    def __init__(self, port):
        self.port, self.down = port, bytearray()
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(4)
        threading.Thread(target=self._accept, daemon=True).start()

    def _pipe(self, a, b, rec):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                if rec:
                    self.down += d
                b.sendall(d)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _accept(self):
        while True:
            c, _ = self.ls.accept()
            s = socket.create_connection(("127.0.0.1", self.port))
            threading.Thread(target=self._pipe, args=(c, s, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(s, c, True), daemon=True).start()


def sdk_client():
    """An openai client talking through a Recorder, or None without the package
    (imported before the timing starts: the import takes seconds)."""
    try:
        import openai
    except ImportError:
        return None, None
    rec = Recorder(int(os.environ["PORT"]))
    return openai.OpenAI(base_url=f"http://127.0.0.1:{rec.ls.getsockname()[1]}/v1",
                         api_key="unused", max_retries=0, timeout=120), rec


def sdk_stream(client, rec, out):
    out["chunks"] = list(client.chat.completions.create(
        model="tiny", messages=CHAT["messages"], max_tokens=CHAT["max_tokens"], temperature=0,
        logit_bias=WORDS, stream=True, extra_body={"ignore_eos": True}))
    out["raw"] = bytes(rec.down)


def mode_on():
    # 1. queued: a chat stream, a non-stream request and an SDK stream behind the blocker
    client, rec = sdk_client()
    blk = Blocker()
    plain, sdk = {}, {}

    def later(delay, fn):
        time.sleep(delay)  # behind the raw stream in the queue
        fn()
    ts = [threading.Thread(target=later, args=(0.1, lambda: plain.update(
              r=request("POST", "/v1/chat/completions", CHAT)))),
          threading.Thread(target=later, args=(0.2, lambda: client and sdk_stream(client, rec, sdk)))]
    for t in ts:
        t.start()
    ts.append(blk.hang_up_at(WAIT))
    st, hd, units = raw_stream("/v1/chat/completions", dict(CHAT, stream=True))
    assert st == 200 and hd["content-type"].startswith("text/event-stream"), (st, hd)
    events, ka, first = check_stream(units, "chat", True)
    check_rhythm(units, ka, first, "queued chat stream")
    for t in ts:
        t.join()
    s, h, b = plain["r"]
    assert s == 200 and h["content-type"] == "application/json" and b.startswith(b"{"), (s, h, b[:80])
    answer = json.loads(b)["choices"][0]["message"]["content"]
    streamed = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1])
    assert streamed == answer and len(answer) >= 6, (streamed, answer)
    if not client:
        print("SKIP: the openai package is not installed; SDK part not run")
    else:
        chunks, raw = sdk["chunks"], sdk["raw"]
        assert raw.count(b": keep-alive\n\n") >= 2, ("the SDK stream waited without keep-alives", raw[:300])
        assert chunks[0].choices[0].delta.role == "assistant", chunks[0]
        assert chunks[-1].choices[0].finish_reason == "length", chunks[-1]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == answer, (text, answer)
        print(f"openai SDK: {len(chunks)} chunks through {raw.count(b': keep-alive')} keep-alives")
    # 2. a long prefill (--prefill-chunk 1, 1900 steps): headers are out, no token yet;
    # hang up after WAIT s (that cancels the prefill and stops the timer)
    body = {"prompt": ids(MAX_IDS), "max_tokens": 3, "ignore_eos": True, "stream": True}
    st, hd, units = raw_stream("/v1/completions", body, stop_after=WAIT)
    assert st == 200, st
    ka = [t for t, u in units if u == b": keep-alive"]
    assert len(ka) == len(units), ("prefill ended within the wait: machine too fast for this test",
                                   units[-1:])
    check_rhythm(units, ka, WAIT, f"stream in a {MAX_IDS}-token prefill")


def mode_cutoff(pid):
    # --shutdown-timeout 0: SIGTERM cancels everything at once. A stream still queued
    # after keep-alives sent its 200 headers gets the 503 as an error event + [DONE].
    import signal
    blk = Blocker()
    threading.Timer(2.5, os.kill, args=(pid, signal.SIGTERM)).start()
    st, hd, units = raw_stream("/v1/chat/completions", dict(CHAT, stream=True))
    assert st == 200, st
    kinds = [u for _, u in units]
    assert len(kinds) >= 3 and all(k == b": keep-alive" for k in kinds[:-2]), kinds
    assert kinds[-1] == b"data: [DONE]", kinds[-3:]
    err = json.loads(kinds[-2][6:])
    assert err["error"]["type"] == "unavailable_error", err
    s, b = blk.result()
    assert s == 503 and b'"unavailable_error"' in b, (s, b)
    print(f"cutoff: {len(kinds) - 2} keep-alives, then the 503 as an error event at {units[-1][0]:.2f} s")


def mode_off():
    blk = Blocker()
    th = blk.hang_up_at(WAIT)
    st, hd, units = raw_stream("/v1/chat/completions", dict(CHAT, stream=True))
    th.join()
    assert st == 200, st
    check_stream(units, "chat", False)
    assert units[0][0] >= 2.2, f"bytes after {units[0][0]:.2f} s: no real wait"
    print(f"off: silent for {units[0][0]:.2f} s, no keep-alive")


def main():
    if sys.argv[1] == "cutoff":
        mode_cutoff(int(sys.argv[2]))
    else:
        {"on": mode_on, "off": mode_off}[sys.argv[1]]()
    print("keepalive_test", sys.argv[1], "ok")


if __name__ == "__main__":
    main()
