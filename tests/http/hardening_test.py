"""hardening_test.py - the defects of the hardening issue, each against a real server.

Usage: hardening_test.py CASE [args]; test_hardening.sh starts the server each case
needs. Cases:
  framing     conflicting Content-Length, Content-Length with Transfer-Encoding,
              two Transfer-Encodings: a 400 and a closed connection (RFC 9112 6.3)
  halfclose   a client that half-closes after its request gets its answer (HTTP/1.1
              with an interim 100 first, HTTP/1.0 without); one that really closes
              is still cancelled at once
  slowloris   --max-connections 16 --header-timeout 2: 16 trickling clients do not
              keep /health from answering (reserve), are cut with a 408 at the
              deadline, a slow body too; a kept-alive client that idles is not
  perip PID   --max-connections-per-ip 3: the fourth connection is refused
  prepare     /health answers within 100 ms while 8 maximum-size bodies are parsed,
              rendered and tokenized
  refused     output-changing fields of vLLM and llama-server are a 400 naming them
  memory PID  RSS after 50 bodies of 100k chat messages is within 20% of its
              baseline (skipped under ASan, whose allocator keeps freed memory)
"""
import http.client
import json
import os
import socket
import sys
import threading
import time
import urllib.parse

from client import check_error, get_json, parse_metrics, post_json, request, rss_kb

U = urllib.parse.urlparse(os.environ["BASE"])
CMPL = "/v1/completions"
CHAT = "/v1/chat/completions"


def connect(timeout=10):
    return socket.create_connection((U.hostname, U.port), timeout=timeout)


def read_all(s):
    buf = b""
    while True:
        try:
            d = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not d:
            break
        buf += d
    return buf


def exchange(data, halfclose=False, timeout=30):
    s = connect(timeout)
    try:
        s.sendall(data)
        if halfclose:
            s.shutdown(socket.SHUT_WR)
        return read_all(s)
    finally:
        s.close()


def head(path, body, extra=b"", version=b"HTTP/1.1"):
    return (b"POST " + path.encode() + b" " + version + b"\r\nHost: x\r\nContent-Type: application/json\r\n"
            + b"Content-Length: %d\r\n" % len(body) + extra + b"\r\n" + body)


def responses(raw):
    """Splits a byte stream into (status, headers, body) responses (Content-Length
    framed; 1xx without a body)."""
    out = []
    while raw:
        h, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep, raw[:200]
        lines = h.split(b"\r\n")
        status = int(lines[0].split(b" ")[1])
        hd = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(b":")
            hd[k.strip().lower().decode()] = v.strip().decode()
        n = 0 if status < 200 else int(hd.get("content-length", len(rest)))
        out.append((status, hd, rest[:n]))
        raw = rest[n:]
    return out


def metrics():
    s, _, b = request("GET", "/metrics")
    assert s == 200
    return parse_metrics(b.decode())


def case_framing():
    body = json.dumps({"prompt": "And the", "max_tokens": 2}).encode()
    smuggled = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    bad = {
        "conflicting lengths": b"Content-Length: 5\r\n",
        "comma list of different lengths": b"Content-Length: %d, 7\r\n" % len(body),
        "length with chunked": b"Transfer-Encoding: chunked\r\n",
        "two transfer-encodings": b"Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n",
    }
    for what, extra in bad.items():
        raw = head(CMPL, body + smuggled, extra)
        if what == "two transfer-encodings":
            raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled)
        rs = responses(exchange(raw))
        # one answer, a 400 that says why, and the connection closed: the smuggled
        # request behind the body is never answered
        assert len(rs) == 1, (what, rs)
        st, hd, b = rs[0]
        assert st == 400 and hd.get("connection") == "close", (what, st, hd)
        e = json.loads(b)["error"]
        assert e["code"] == "bad_framing" and e["message"], (what, e)
    # the same length twice is one length (RFC 9110 8.6): served
    rs = responses(exchange(head(CMPL, body, b"Content-Length: %d\r\nConnection: close\r\n" % len(body))))
    assert [r[0] for r in rs] == [200], rs
    print("framing: ok")


def case_halfclose():
    body = json.dumps({"prompt": "And the LORD said", "max_tokens": 6, "temperature": 0}).encode()
    # HTTP/1.1: an interim 100 (the probe that tells a half-close from a close), then
    # the answer
    rs = responses(exchange(head(CMPL, body, b"Connection: close\r\n"), halfclose=True))
    assert rs[-1][0] == 200 and all(r[0] == 100 for r in rs[:-1]), [r[:2] for r in rs]
    assert json.loads(rs[-1][2])["choices"][0]["text"], rs[-1]
    # streams too
    sbody = json.dumps({"prompt": "And the LORD said", "max_tokens": 6, "stream": True}).encode()
    raw = exchange(head(CMPL, sbody, b"Connection: close\r\n"), halfclose=True)
    assert b"200 OK" in raw and b"data: [DONE]" in raw, raw[-300:]
    # HTTP/1.0 gets no interim response: just the answer
    rs = responses(exchange(head(CMPL, body, version=b"HTTP/1.0"), halfclose=True))
    assert [r[0] for r in rs] == [200], [r[:2] for r in rs]
    # a client that really goes away is still cancelled at once
    long = json.dumps({"prompt": "And", "max_tokens": 200, "ignore_eos": True}).encode()
    for _ in range(3):
        s = connect()
        s.sendall(head(CMPL, long))
        time.sleep(0.2)
        s.close()
    deadline = time.time() + 10
    while time.time() < deadline:
        m = metrics()
        if m["num_requests_running"] == 0 and m["num_requests_waiting"] == 0:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"closed clients not cancelled: {m}")
    print("halfclose: ok")


def trickle(s, stop, data):
    """Sends data one byte at a time every 0.3 s until stop is set or the server
    closes; returns what came back."""
    got = b""
    s.settimeout(0.3)
    for i in range(len(data)):
        if stop.is_set():
            break
        try:
            s.sendall(data[i:i + 1])
        except OSError:
            break
        try:
            d = s.recv(4096)
            if not d:
                break
            got += d
        except socket.timeout:
            pass
        except OSError:
            break
    return got


def case_slowloris():
    n = 16
    stop = threading.Event()
    got = [None] * n
    socks = [connect() for _ in range(n)]
    slow_head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 400 + b"\r\n\r\n"

    def run(i):
        got[i] = trickle(socks[i], stop, slow_head)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    t0 = time.time()
    for t in ts:
        t.start()
    time.sleep(0.5)
    # the pool is full of trickling clients; the probes still answer, fast
    for _ in range(5):
        a = time.time()
        s, b = get_json("/health", timeout=5)
        assert s == 200 and time.time() - a < 1.0, (s, b, time.time() - a)
        time.sleep(0.1)
    # a reserve connection serves only the probes
    st, _, b = request("GET", "/v1/models")
    assert st == 503 and b"--max-connections" in b, (st, b)
    for t in ts:
        t.join(timeout=30)
    took = time.time() - t0
    assert not any(t.is_alive() for t in ts), "trickling clients never cut"
    assert all(g and g.startswith(b"HTTP/1.1 408") for g in got), [g[:40] if g else g for g in got]
    assert took < 8, took  # --header-timeout 2, swept four times a second
    for s in socks:
        s.close()
    stop.set()
    assert metrics()["http_header_timeouts_total"] >= n
    # a slow body is cut the same way
    s = connect()
    g = trickle(s, threading.Event(), head(CMPL, b'{"prompt": "' + b"x" * 200 + b'"}'))
    s.close()
    assert g.startswith(b"HTTP/1.1 408"), g[:80]
    # a kept-alive client that idles between requests is not cut: the deadline
    # restarts with each request line
    c = http.client.HTTPConnection(U.hostname, U.port, timeout=10)
    for _ in range(2):
        c.request("POST", CMPL, body=json.dumps({"prompt": "And", "max_tokens": 1}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200 and json.loads(r.read())["choices"], r.status
        time.sleep(2.5)  # longer than --header-timeout, shorter than --idle-timeout
    c.close()
    s, b = get_json("/health")
    assert s == 200, b
    print(f"slowloris: ok ({n} clients cut after {took:.1f} s)")


def case_perip():
    held = [connect() for _ in range(3)]
    time.sleep(0.2)
    extra = connect()
    extra.settimeout(5)
    try:
        extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        d = read_all(extra)
    except OSError:
        d = b""
    extra.close()
    assert not d.startswith(b"HTTP/1.1 200"), d[:100]
    for s in held:
        s.close()
    time.sleep(0.3)
    s, b = get_json("/health")
    assert s == 200, b
    print("perip: ok")


def case_prepare():
    # 8 bodies near --max-body-bytes (4 MiB): completions and chats whose prompts
    # take the workers a while to render and tokenize
    words = "And the LORD said unto Moses , thou shalt be a great nation ".split()
    text = " ".join(words[i % len(words)] for i in range(700000))[:4000000]
    bodies = []
    for i in range(8):
        if i % 2:
            bodies.append((CHAT, json.dumps({"messages": [{"role": "user", "content": text}]}).encode()))
        else:
            bodies.append((CMPL, json.dumps({"prompt": text}).encode()))
    results = [None] * 8
    # what one body alone takes to prepare: a server that prepared on the HTTP threads
    # would hold /health for about that long
    a = time.time()
    assert request("POST", bodies[1][0], raw=bodies[1][1], timeout=120)[0] == 400
    alone = time.time() - a

    def send(i):
        path, b = bodies[i]
        results[i] = request("POST", path, raw=b, timeout=120)[0]

    ts = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    worst, samples, busy = 0.0, 0, 0
    t0 = time.time()
    while any(t.is_alive() for t in ts) and time.time() - t0 < 120:
        a = time.time()
        s, _ = get_json("/health", timeout=5)
        lat = time.time() - a
        assert s == 200
        m = metrics()
        if m["num_requests_preparing"] > 0:
            busy += 1
            worst = max(worst, lat)
        samples += 1
        time.sleep(0.01)
    for t in ts:
        t.join()
    # every body got its answer (the prompts do not fit the context: a 400)
    assert results == [400] * 8, results
    assert busy >= 5, (busy, samples)
    # a bound relative to the same run, so a slow machine (ASan, 2 cores) does not fail it
    limit = max(0.100, alone / 4)
    assert worst < limit, (f"/health took {worst * 1000:.0f} ms while bodies were prepared "
                           f"(one body alone: {alone * 1000:.0f} ms)")
    print(f"prepare: ok (/health at most {worst * 1000:.1f} ms over {busy} samples while preparing; "
          f"one body alone {alone * 1000:.0f} ms)")


def case_refused():
    m = [{"role": "user", "content": "x"}]
    # structured outputs are served now (tests/http/structured_schema_test.py): what is
    # still refused rather than ignored is decoding this server does not do
    for field, value in [("min_tokens", 5), ("use_beam_search", True), ("structural_tag", "{}"),
                         ("typical_p", 0.5)]:
        for path, body in [(CHAT, {"messages": m}), (CMPL, {"prompt": "x"})]:
            body = dict(body, **{field: value, "max_tokens": 2})
            e = check_error(*post_json(path, body), 400, field)
            assert "not supported" in e["message"], e
    # their neutral values are what clients send meaning "off": accepted
    s, b = post_json(CMPL, {"prompt": "x", "max_tokens": 2, "guided_json": None, "min_tokens": 0,
                            "use_beam_search": False})
    assert s == 200, b
    print("refused: ok")


def case_memory(pid):
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}] * 100000}).encode()
    assert 3_000_000 < len(body) < 4_000_000, len(body)
    # the baseline: after the server has answered ordinary requests and one such body
    for _ in range(3):
        s, b = post_json(CHAT, {"messages": [{"role": "user", "content": "Who is the LORD?"}], "max_tokens": 4})
        assert s == 200, b
    e = check_error(*post_json(CHAT, None, raw=body), 400, "messages")
    assert "at most" in e["message"], e
    time.sleep(0.5)
    base = rss_kb(pid)
    peak = base
    for i in range(50):
        st, _, b = request("POST", CHAT, raw=body, timeout=60)
        assert st == 400, (st, b[:200])
        peak = max(peak, rss_kb(pid))
    time.sleep(0.5)
    after = rss_kb(pid)
    print(f"memory: baseline {base / 1024:.1f} MiB, peak {peak / 1024:.1f} MiB, after 50 bodies {after / 1024:.1f} MiB")
    if os.environ.get("BUILD", "").endswith("asan"):
        print("memory: RSS bound not checked under ASan (its allocator quarantines freed memory)")
        return
    assert after <= base * 1.2, (base, after)
    print("memory: ok")


def main():
    case = sys.argv[1]
    fn = globals()["case_" + case]
    fn(*[int(a) for a in sys.argv[2:]])


if __name__ == "__main__":
    main()
