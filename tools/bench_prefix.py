#!/usr/bin/env python3
"""bench_prefix.py - the paged kv cache and the prefix cache, measured through the server.

Starts `strata serve` on dummy weights of a real model (no tokenizer: prompts are token
ids, the text is "[id]" per token) and measures, in one run:
  1. the time to first token of a prompt of --long tokens sent twice (the second send
     restores all but its last block from the prefix cache): second / first;
  2. a --turns-turn chat where each turn resends the conversation (the last prompt, the
     answer and --turn-new new tokens): prompt tokens computed / tokens actually new;
  3. on a second server without the prefix cache, --seqs sequences at once at a context
     of --ctx: the kv pool's peak blocks / the blocks the tokens in flight need, and what
     slots x context would have reserved.
Prints a markdown table for BENCHMARKS.md.

    python3 tools/bench_prefix.py --strata build/strata --model Qwen/Qwen3.5-0.8B
"""
import argparse
import http.client
import json
import random
import re
import socket
import subprocess
import sys
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, strata, model, extra):
        self.port = free_port()
        self.model = model
        self.p = subprocess.Popen(
            [strata, "serve", "--model", model, "--load-format", "dummy", "--port",
             str(self.port)] + extra, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.banner = ""
        while True:
            line = self.p.stderr.readline().decode()
            if not line:
                raise SystemExit("server exited while loading")
            self.banner += line
            if " ready " in line:
                break

    def stop(self):
        self.p.terminate()
        self.p.wait(timeout=60)

    def metrics(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        c.request("GET", "/metrics")
        body = c.getresponse().read().decode()
        out = {}
        for line in body.splitlines():
            m = re.match(r"strata:(\w+)\{[^}]*\} (\S+)", line)
            if m:
                out[m.group(1)] = float(m.group(2))
        return out

    def complete(self, prompt, max_tokens):
        """Streams one greedy completion: (seconds to the first token, ids, usage)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3600)
        body = json.dumps({"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                           "temperature": 0, "ignore_eos": True, "stream": True,
                           "stream_options": {"include_usage": True}})
        t0 = time.perf_counter()
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200, r.read()
        ttft, text, usage = None, "", None
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices", []):
                if ch.get("text"):
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    text += ch["text"]
        ids = [int(x) for x in re.findall(r"\[(\d+)\]", text)]
        return ttft, ids, usage


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default="build/strata")
    ap.add_argument("--model", default="Qwen/Qwen3.5-0.8B")
    ap.add_argument("--long", type=int, default=4096)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--turn-new", type=int, default=300)
    ap.add_argument("--turn-gen", type=int, default=16)
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=32768)
    args = ap.parse_args()
    rnd = random.Random(7)
    vocab = 200000

    s = Server(args.strata, args.model, ["--max-seqs", str(args.seqs), "--ctx-size",
                                          str(args.ctx)])
    print(s.banner.strip().splitlines()[-1], file=sys.stderr)
    rows = []
    # 1. the same long prompt twice
    p = [rnd.randrange(vocab) for _ in range(args.long)]
    t1, ids1, u1 = s.complete(p, 1)
    t2, ids2, u2 = s.complete(p, 1)
    assert ids1 == ids2, (ids1, ids2)
    c2 = u2["prompt_tokens_details"]["cached_tokens"]
    rows.append(("second send of a %d-token prompt: time to first token" % args.long,
                 "%.2f s then %.3f s (%d cached)" % (t1, t2, c2), t2 / t1, "<= 0.10"))
    # 2. a chat whose turns resend the conversation
    before = s.metrics()
    conv, new_total, computed = [], 0, 0
    for turn in range(args.turns):
        new = [rnd.randrange(vocab) for _ in range(args.turn_new)]
        conv += new
        new_total += len(new)
        _, ans, u = s.complete(conv, args.turn_gen)
        computed += u["prompt_tokens"] - u["prompt_tokens_details"]["cached_tokens"]
        conv += ans
    after = s.metrics()
    engine_prefill = after["prompt_tokens_total"] - before["prompt_tokens_total"]
    assert engine_prefill == computed, (engine_prefill, computed)
    rows.append(("%d-turn chat, %d new tokens a turn: prompt tokens computed / new" %
                 (args.turns, args.turn_new), "%d / %d" % (computed, new_total),
                 computed / new_total, "<= 1.2"))
    s.stop()

    # 3. paging: many sequences at a long context hold only what their tokens need
    s = Server(args.strata, args.model, ["--max-seqs", str(args.seqs), "--ctx-size",
                                          str(args.ctx), "--no-prefix-cache"])
    m0 = s.metrics()
    block = 16
    lens = [rnd.randrange(200, 600) for _ in range(args.seqs)]
    gen = 8
    import threading
    th = [threading.Thread(target=s.complete, args=([rnd.randrange(vocab) for _ in range(n)],
                                                    gen)) for n in lens]
    for t in th:
        t.start()
    for t in th:
        t.join()
    m = s.metrics()
    need = sum((n + gen - 1 + block - 1) // block for n in lens)  # the last token is not fed
    tokens = sum(n + gen - 1 for n in lens)
    peak = m["kv_cache_blocks_peak"]
    total = m0["kv_cache_blocks"]
    rows.append(("%d sequences at ctx %d: kv pool peak blocks / blocks their %d tokens need" %
                 (args.seqs, args.ctx, tokens), "%d / %d (pool %d blocks; slots x ctx = %d)" %
                 (peak, need, total, args.seqs * args.ctx // block), peak / need, "<= 1.1"))
    s.stop()

    print("| measure | figures | ratio | target |")
    print("|---|---|---|---|")
    for name, fig, ratio, target in rows:
        print("| %s | %s | **%.3f** | %s |" % (name, fig, ratio, target))


if __name__ == "__main__":
    main()
