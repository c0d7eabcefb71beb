"""load_test.py - many concurrent streaming clients, some hanging up mid-stream.

Usage: load_test.py CLIENTS SECONDS. Each client loops until SECONDS passed: it
streams a completion or chat request (random prompt, random max_tokens) and either
reads it to [DONE] (and checks every event is well formed) or, one time in five,
closes the socket at a random point (before the headers, in prefill or mid-decode).
Afterwards the server must be idle: /metrics shows no running or waiting request,
kv usage 0, and every finish reason accounted for. Prints a summary line."""
import json
import os
import random
import re
import socket
import sys
import threading
import time
import urllib.parse

from client import dechunk, recv_all

BASE = os.environ["BASE"]
U = urllib.parse.urlparse(BASE)
WORDS = "the quick brown fox jumps over lazy dog hello world 東京 café 🙂 answer".split()


def one_request(rng, stats):
    chat = rng.random() < 0.5
    n_words = rng.randint(1, 60)
    text = " ".join(rng.choice(WORDS) for _ in range(n_words))
    body = {"max_tokens": rng.randint(1, 40), "stream": True, "temperature": rng.choice([0, 0.8]),
            "stream_options": {"include_usage": True}, "ignore_eos": rng.random() < 0.5}
    if chat:
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": text}]
    else:
        path = "/v1/completions"
        body["prompt"] = text
    raw = json.dumps(body).encode()
    req = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(raw)}\r\nConnection: close\r\n\r\n").encode() + raw
    hang = rng.random() < 0.2
    hang_after = rng.randint(0, 3000) if hang else None
    s = socket.create_connection((U.hostname, U.port), timeout=60)
    try:
        s.sendall(req)
        if hang and hang_after == 0:
            stats["hung"] += 1
            return
        buf = recv_all(s, hang_after if hang else None)
        if buf is None:
            stats["hung"] += 1
            return
    finally:
        s.close()
    head, _, payload = buf.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    if status == 429:
        stats["429"] += 1
        return
    assert status == 200, head
    text = dechunk(payload).decode("utf-8")
    events = [e for e in text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]", events[-3:]
    finish = None
    for e in events[:-1]:
        assert e.startswith("data: "), e
        j = json.loads(e[6:])
        assert "error" not in j, j
        if j["choices"]:
            c = j["choices"][0]
            if c["finish_reason"]:
                finish = c["finish_reason"]
        else:
            assert j["usage"]["completion_tokens"] <= body["max_tokens"], j
    assert finish in ("stop", "length"), events[-4:]
    stats["ok"] += 1


def client(seed, deadline, stats, errors):
    rng = random.Random(seed)
    while time.time() < deadline:
        try:
            one_request(rng, stats)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
            return


def metrics():
    s = socket.create_connection((U.hostname, U.port), timeout=10)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    buf = recv_all(s)
    s.close()
    body = buf.partition(b"\r\n\r\n")[2].decode()
    vals = {}
    for line in body.splitlines():
        m = re.match(r'strata:(\w+)(\{[^}]*\})? (\S+)', line)
        if m:
            vals[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return vals


def main():
    n, secs = int(sys.argv[1]), float(sys.argv[2])
    stats = {"ok": 0, "hung": 0, "429": 0}
    errors = []
    deadline = time.time() + secs
    threads = [threading.Thread(target=client, args=(i, deadline, stats, errors)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=secs + 120)
    assert not any(t.is_alive() for t in threads), "clients stuck"
    assert not errors, errors[:5]
    assert stats["ok"] > 0, stats
    # every slot free again (cancelled sequences are dropped before the next step)
    for _ in range(100):
        v = metrics()
        running = sum(x for k, x in v.items() if k.startswith("num_requests_running"))
        waiting = sum(x for k, x in v.items() if k.startswith("num_requests_waiting"))
        kv = sum(x for k, x in v.items() if k.startswith("kv_cache_usage_perc"))
        if running == 0 and waiting == 0 and kv == 0:
            break
        time.sleep(0.1)
    assert running == 0 and waiting == 0 and kv == 0, (running, waiting, kv)
    aborted = sum(x for k, x in v.items() if k.startswith("request_success_total") and 'abort' in k)
    print(f"load_test: {stats}, aborted sequences {aborted:.0f}")


if __name__ == "__main__":
    main()
