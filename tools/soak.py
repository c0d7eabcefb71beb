#!/usr/bin/env python3
"""soak.py - mixed traffic against a running strata server for a given time, with a
report every minute; exits non-zero when the server misbehaved.

The traffic runs at --clients concurrent clients (tools/soak.sh passes 2x --max-seqs)
and mixes: streamed and whole completions and chats, clients that hang up in the
queue or mid-stream, oversized bodies (413), prompts over the context and more
choices than slots (400), malformed JSON and refused fields (400); a quarter of the served
requests follow a JSON schema. Each minute it
prints the server's RSS and open descriptors, its running / waiting / preparing
gauges, the outcome counts and the latency percentiles of the requests that
completed. At the end it waits for the server to go idle and checks that every
answer was one the request deserved (no 5xx, no wrong status, no broken stream),
that the slots and queue are empty again, that the descriptors are back to their
baseline and that RSS did not keep growing.

Usage: soak.py --base URL --pid PID --minutes M --clients N --max-body BYTES
"""
import argparse
import json
import os
import random
import socket
import sys
import threading
import time
import urllib.parse

# tests/http/client.py (tools/soak.sh puts tests/http on PYTHONPATH)
from client import dechunk, parse_metrics, recv_all, rss_kb


class Stats:
    def __init__(self):
        self.mu = threading.Lock()
        self.counts = {}
        self.total = {}
        self.lat = []
        self.errors = []

    def add(self, kind, latency=None):
        with self.mu:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.total[kind] = self.total.get(kind, 0) + 1
            if latency is not None:
                self.lat.append(latency)

    def fail(self, msg):
        with self.mu:
            self.errors.append(msg)

    def take_window(self):
        with self.mu:
            lat, self.lat = self.lat, []
            counts, self.counts = self.counts, {}
            return counts, lat


def percentile(xs, p):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


class Client:
    def __init__(self, base):
        u = urllib.parse.urlparse(base)
        self.host, self.port = u.hostname, u.port

    def raw(self, data, hang_after=None, timeout=120):
        """Sends data; reads the whole answer, or hangs up after hang_after bytes of it
        (0: right after sending). Returns the bytes read, or None when it hung up."""
        s = socket.create_connection((self.host, self.port), timeout=timeout)
        try:
            s.sendall(data)
            if hang_after == 0:
                return None
            return recv_all(s, hang_after)
        finally:
            s.close()

    @staticmethod
    def post(path, body):
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(raw)}\r\nConnection: close\r\n\r\n").encode() + raw


def status_of(resp):
    return int(resp.split(b" ", 2)[1]) if resp else 0


def check_stream(resp, stats):
    head, _, payload = resp.partition(b"\r\n\r\n")
    text = dechunk(payload).decode("utf-8")
    events = [e for e in text.split("\n\n") if e and not e.startswith(":")]
    if not events or events[-1] != "data: [DONE]":
        stats.fail(f"stream without [DONE]: {text[-200:]!r}")
        return
    for e in events[:-1]:
        j = json.loads(e[6:])
        if "error" in j:
            stats.fail(f"stream error event: {j}")


def one(cli, rng, a, stats):
    words = "And the LORD said unto Moses thou shalt go".split()
    text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 40)))
    chat = rng.random() < 0.5
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body = {"max_tokens": rng.randint(1, 24), "temperature": rng.choice([0, 0.7, 1.0])}
    if chat:
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    kind = rng.choices(["stream", "whole", "hangup", "oversized", "too_long", "too_many", "malformed",
                        "refused"], [30, 30, 15, 3, 5, 5, 6, 6])[0]
    expect = 200
    if kind in ("stream", "hangup"):
        body["stream"] = True
    if kind == "oversized":
        raw = Client.post(path, b'{"prompt": "' + b"a" * (a.max_body + 10) + b'"}')
        expect = 413
    elif kind == "too_long":
        body["max_tokens"] = 100000
        expect = 400
    elif kind == "too_many":
        body["n"] = 2
        body["prompt"] = [text] * 64
        path = "/v1/completions"
        body.pop("messages", None)
        expect = 400
    elif kind == "malformed":
        raw = Client.post(path, json.dumps(body).encode()[:-1])
        expect = 400
    elif kind == "refused":
        # decoding this server does not do, and output formats it cannot compile
        field, value = rng.choice([("min_tokens", 5), ("use_beam_search", True),
                                   ("guided_regex", "a(?=b)"), ("guided_json", {"not": {}}),
                                   ("grammar", "root ::= undefined")])
        body[field] = value
        expect = 400
    if kind in ("stream", "whole") and rng.random() < 0.25:
        # a quarter of the served traffic follows a grammar: its tables live and die with it
        body[rng.choice(["guided_json", "json_schema"])] = {
            "type": "object", "properties": {"a": {"type": "integer"},
                                             "b": {"type": "string", "maxLength": 8}}}
    if kind not in ("oversized", "malformed"):
        raw = Client.post(path, body)
    t0 = time.time()
    try:
        resp = cli.raw(raw, hang_after=rng.choice([0, 1, 200, 800]) if kind == "hangup" else None)
    except (ConnectionResetError, BrokenPipeError) as e:
        if kind == "oversized":  # the server may close before reading the whole body
            stats.add(kind)
            return
        stats.fail(f"{kind}: {e!r}")
        return
    if resp is None:
        stats.add(kind)
        return
    st = status_of(resp)
    if st == 429:
        stats.add("429")
        return
    if st != expect:
        stats.fail(f"{kind}: status {st}, want {expect}: {resp[:300]!r}")
        return
    if st == 200 and body.get("stream"):
        check_stream(resp, stats)
    stats.add(kind, time.time() - t0 if st == 200 else None)


def client_main(cli, seed, a, stats, deadline):
    rng = random.Random(seed)
    while time.time() < deadline:
        try:
            one(cli, rng, a, stats)
        except Exception as e:  # noqa: BLE001 - every surprise is a finding
            stats.fail(f"client: {e!r}")


def proc_rss_mb(pid):
    return rss_kb(pid) / 1024.0


def proc_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def gauges(cli):
    resp = cli.raw(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout=10)
    return parse_metrics(resp.partition(b"\r\n\r\n")[2].decode())


def report(minute, a, cli, stats, t_start):
    counts, lat = stats.take_window()
    g = gauges(cli)
    print(f"[{minute:>3} min] rss {proc_rss_mb(a.pid):7.1f} MiB  fds {proc_fds(a.pid):4d}  "
          f"running {g.get('num_requests_running', 0):.0f} waiting {g.get('num_requests_waiting', 0):.0f} "
          f"preparing {g.get('num_requests_preparing', 0):.0f}  "
          f"p50 {percentile(lat, 50):.2f}s p90 {percentile(lat, 90):.2f}s p99 {percentile(lat, 99):.2f}s  "
          f"done {sum(counts.values())} {json.dumps(counts, sort_keys=True)}  errors {len(stats.errors)}",
          flush=True)
    return proc_rss_mb(a.pid)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--max-body", type=int, required=True)
    a = ap.parse_args()
    cli = Client(a.base)
    stats = Stats()
    fds0 = proc_fds(a.pid)
    t_start = time.time()
    deadline = t_start + a.minutes * 60
    ts = [threading.Thread(target=client_main, args=(cli, i, a, stats, deadline), daemon=True)
          for i in range(a.clients)]
    for t in ts:
        t.start()
    rss = []
    minute = 0
    while time.time() < deadline:
        time.sleep(min(60, max(0.0, deadline - time.time())))
        minute += 1
        rss.append(report(minute, a, cli, stats, t_start))
    for t in ts:
        t.join(timeout=180)
    if any(t.is_alive() for t in ts):
        stats.fail("clients stuck after the deadline")
    # idle again: no slot, queue entry or preparation left, descriptors back
    for _ in range(200):
        g = gauges(cli)
        busy = sum(g.get(k, 0) for k in ("num_requests_running", "num_requests_waiting", "num_requests_preparing"))
        if busy == 0 and g.get("kv_cache_usage_perc", 0) == 0 and proc_fds(a.pid) <= fds0 + 2:
            break
        time.sleep(0.1)
    else:
        stats.fail(f"not idle after the traffic: {g}, fds {proc_fds(a.pid)} (baseline {fds0})")
    print(f"soak: {a.minutes:g} min, {a.clients} clients; rss per minute {['%.1f' % r for r in rss]} MiB; "
          f"fds {fds0} -> {proc_fds(a.pid)}; requests {json.dumps(stats.total, sort_keys=True)}")
    # RSS may grow while caches warm up, not minute after minute
    if len(rss) >= 3 and rss[-1] > rss[1] * 1.25 + 16:
        stats.fail(f"RSS keeps growing: {rss}")
    for e in stats.errors[:20]:
        print("soak: FAIL:", e)
    return 1 if stats.errors else 0


if __name__ == "__main__":
    sys.exit(main())
