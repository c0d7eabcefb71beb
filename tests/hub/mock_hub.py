#!/usr/bin/env python3
"""mock_hub.py - a small Hugging Face hub on loopback for tests/hub/test_hub.sh.

Two real HTTP servers (stdlib ThreadingHTTPServer, HTTP/1.1 keep-alive): the "hub",
which answers GET/HEAD /{repo_id}/resolve/{revision}/{path} with the headers
huggingface_hub's file_download.py reads (X-Repo-Commit, ETag, X-Linked-Etag,
X-Linked-Size, X-Error-Code, Location), and a "CDN" on another port (so another
origin, as cdn-lfs.huggingface.co is), which serves LFS blobs by sha256 with Range
support. LFS files (*.safetensors, *.gguf) get a 302 from the hub to the CDN; the others are
served by the hub itself with their git blob id as ETag.

Repos (content is deterministic, built at start):
  strata-test/tiny     main -> commit 2 (sharded: index + 2 shards, all extra files)
                       v1   -> commit 1 (model.safetensors, no generation_config.json)
  strata-test/gated    gated: token hf_valid_token reads it, hf_noaccess_token gets 403
  strata-test/corrupt  the CDN serves model.safetensors with one byte changed
  strata-test/noweights config and tokenizer only
  strata-test/gguf     a GGUF repository: no config.json, two .gguf files (LFS) of which
                       a client wants one: tiny-Q8_0.gguf is tests/data/gguf/tok_qwen35.gguf
                       (a vocab-only file with a tokenizer and chat template),
                       tiny-F16.gguf is tests/data/gguf/tiny.gguf
Missing repos answer 401 RepoNotFound (404 with a token), missing files 404
EntryNotFound, unknown revisions 404 RevisionNotFound, like the real hub.

Control endpoints on the hub (never counted): GET /_mock/stats (request count and
log; ?format=tsv: one line per request), /_mock/reset, /_mock/info (commits, etags, sizes), /_mock/drop?name=F&bytes=N
[&times=K] (the next K CDN GETs of file F close the connection after N bytes),
/_mock/throttle?bps=N (CDN bytes per second, 0 = unlimited).

Usage: mock_hub.py --port-file PATH   (writes {"hub": port, "cdn": port} when ready)
"""
import argparse
import hashlib
import json
import os
import random
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

GOOD_TOKEN = "hf_valid_token"
NOACCESS_TOKEN = "hf_noaccess_token"


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def safetensors_bytes(rng, names, n):
    """A valid safetensors file: one F32 tensor of n values per name."""
    header, off = {}, 0
    for name in names:
        header[name] = {"dtype": "F32", "shape": [n], "data_offsets": [off, off + 4 * n]}
        off += 4 * n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + rng.randbytes(off)


def commit_id(text):
    return hashlib.sha1(text.encode()).hexdigest()


DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "gguf")


def build_repos():
    rng = random.Random(1234)
    tok = json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}}).encode()
    tok_cfg = json.dumps({"bos_token": "<s>", "eos_token": "</s>", "chat_template": "{{ messages }}"}).encode()
    c1_files = {
        "config.json": json.dumps({"model_type": "tiny", "hidden_size": 64, "rev": 1}).encode(),
        "tokenizer.json": tok,
        "tokenizer_config.json": tok_cfg,
        "model.safetensors": safetensors_bytes(rng, ["w"], 60_000),
    }
    shard1 = safetensors_bytes(rng, ["a", "b"], 200_000)
    shard2 = safetensors_bytes(rng, ["c"], 150_000)
    index = {"metadata": {"total_size": len(shard1) + len(shard2)},
             "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                            "c": "model-00002-of-00002.safetensors"}}
    c2_files = {
        "config.json": json.dumps({"model_type": "tiny", "hidden_size": 64, "rev": 2}).encode(),
        "generation_config.json": json.dumps({"temperature": 0.7}).encode(),
        "tokenizer.json": tok,
        "tokenizer_config.json": tok_cfg,
        "chat_template.jinja": b"{% for m in messages %}{{ m.content }}{% endfor %}",
        "model.safetensors.index.json": json.dumps(index).encode(),
        "model-00001-of-00002.safetensors": shard1,
        "model-00002-of-00002.safetensors": shard2,
    }
    c1, c2 = commit_id("tiny-1"), commit_id("tiny-2")
    gated_c = commit_id("gated-1")
    corrupt_c = commit_id("corrupt-1")
    def small():
        return {"config.json": json.dumps({"model_type": "tiny"}).encode(),
                "tokenizer.json": tok,
                "model.safetensors": safetensors_bytes(rng, ["w"], 30_000)}
    gguf_c = commit_id("gguf-1")
    gguf_files = {"README.md": b"# tiny GGUF\n"}
    for name, src in (("tiny-Q8_0.gguf", "tok_qwen35.gguf"), ("tiny-F16.gguf", "tiny.gguf")):
        with open(os.path.join(DATA, src), "rb") as f:
            gguf_files[name] = f.read()
    return {
        "strata-test/gguf": {"refs": {"main": gguf_c}, "commits": {gguf_c: gguf_files}},
        "strata-test/tiny": {"refs": {"main": c2, "v1": c1}, "commits": {c1: c1_files, c2: c2_files}},
        "strata-test/gated": {"refs": {"main": gated_c}, "commits": {gated_c: small()}, "gated": True},
        "strata-test/corrupt": {"refs": {"main": corrupt_c}, "commits": {corrupt_c: small()}, "corrupt": True},
        "strata-test/noweights": {"refs": {"main": commit_id("noweights-1")},
                                  "commits": {commit_id("noweights-1"): {"config.json": b"{}", "tokenizer.json": tok}}},
    }


class State:
    def __init__(self):
        self.repos = build_repos()
        self.lock = threading.Lock()
        self.log = []
        self.drop = {}  # file name -> bytes sent before the connection is closed
        self.bps = 0
        self.blobs = {}  # sha256 -> bytes served by the CDN
        for repo in self.repos.values():
            for files in repo["commits"].values():
                for name, data in files.items():
                    if is_lfs(name):
                        served = data
                        if repo.get("corrupt"):
                            served = bytes([data[0] ^ 1]) + data[1:]
                        self.blobs[hashlib.sha256(data).hexdigest()] = served

    def record(self, handler):
        with self.lock:
            self.log.append({"server": handler.server.name, "method": handler.command, "path": handler.path,
                             "range": handler.headers.get("Range"),
                             "auth": handler.headers.get("Authorization"),
                             "encoding": handler.headers.get("Accept-Encoding")})


def is_lfs(name):
    return name.endswith((".safetensors", ".gguf"))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "mock-hub/1"

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, headers=(), body=b"", send_body=True):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body and body:
            self.wfile.write(body)

    def error(self, status, code, message, extra=(), send_body=True):
        headers = list(extra) + [("Content-Type", "application/json")]
        if code:
            headers.append(("X-Error-Code", code))
        headers.append(("X-Error-Message", message))
        self.reply(status, headers, json.dumps({"error": message}).encode(), send_body)

    def do_HEAD(self):
        self.route(send_body=False)

    def do_GET(self):
        self.route(send_body=True)

    def route(self, send_body):
        st = self.server.state
        url = urlsplit(self.path)
        if url.path.startswith("/_mock/"):
            return self.control(url)
        st.record(self)
        if self.server.name == "cdn":
            return self.cdn(url, send_body)
        return self.resolve(url, send_body)

    # ---- control ----
    def control(self, url):
        st = self.server.state
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/_mock/stats" and q.get("format") == "tsv":
            # One request per line: server method path range auth encoding ("-" = none).
            with st.lock:
                text = "".join("\t".join(e[k] or "-" for k in ("server", "method", "path", "range", "auth",
                                                                "encoding")) + "\n" for e in st.log)
            return self.reply(200, [("Content-Type", "text/plain")], text.encode())
        if url.path == "/_mock/stats":
            with st.lock:
                body = {"count": len(st.log), "log": st.log}
        elif url.path == "/_mock/reset":
            with st.lock:
                st.log = []
            body = {"ok": True}
        elif url.path == "/_mock/drop":
            st.drop[q["name"]] = [int(q["bytes"])] * int(q.get("times", 1))
            body = {"ok": True}
        elif url.path == "/_mock/throttle":
            st.bps = int(q["bps"])
            body = {"ok": True}
        elif url.path == "/_mock/info":
            body = {rid: {"refs": r["refs"], "files": {c: {n: {"size": len(d), "lfs": is_lfs(n),
                                                                 "etag": hashlib.sha256(d).hexdigest() if is_lfs(n)
                                                                 else git_blob_id(d)}
                                                             for n, d in files.items()}
                                                       for c, files in r["commits"].items()}}
                    for rid, r in st.repos.items()}
        else:
            return self.reply(404)
        self.reply(200, [("Content-Type", "application/json")], json.dumps(body).encode())

    # ---- hub ----
    def resolve(self, url, send_body):
        st = self.server.state
        if "/resolve/" not in url.path:
            return self.error(404, None, "Not found", send_body=send_body)
        repo_part, rest = url.path[1:].split("/resolve/", 1)
        repo_id = unquote(repo_part)
        rev_q, _, file_q = rest.partition("/")
        rev, name = unquote(rev_q), unquote(file_q)
        auth = self.headers.get("Authorization", "")
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
        repo = st.repos.get(repo_id)
        if repo is None:
            # The hub does not tell anonymous callers whether a private repo exists.
            return self.error(404 if token else 401, "RepoNotFound", "Repository not found", send_body=send_body)
        if token not in (None, GOOD_TOKEN, NOACCESS_TOKEN):
            return self.error(401, None, "Invalid credentials in Authorization header", send_body=send_body)
        if repo.get("gated") and token != GOOD_TOKEN:
            status = 403 if token else 401
            return self.error(status, "GatedRepo", f"Access to model {repo_id} is restricted.", send_body=send_body)
        commit = repo["refs"].get(rev, rev if rev in repo["commits"] else None)
        if commit is None:
            return self.error(404, "RevisionNotFound", f"Invalid rev id: {rev}", send_body=send_body)
        files = repo["commits"][commit]
        if name not in files:
            return self.error(404, "EntryNotFound", f"{name} does not exist on \"{rev}\"",
                              [("X-Repo-Commit", commit)], send_body)
        data = files[name]
        if is_lfs(name):
            sha = hashlib.sha256(data).hexdigest()
            pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\n"
                       f"size {len(data)}\n").encode()
            loc = f"http://127.0.0.1:{self.server.cdn_port}/lfs/{sha}?filename={quote(name)}&sig=mock"
            return self.reply(302, [("Location", loc), ("X-Repo-Commit", commit),
                                    ("ETag", f'"{git_blob_id(pointer)}"'), ("X-Linked-Etag", f'"{sha}"'),
                                    ("X-Linked-Size", str(len(data))), ("Accept-Ranges", "bytes")],
                              b"", send_body)
        headers = [("X-Repo-Commit", commit), ("ETag", f'"{git_blob_id(data)}"'),
                   ("Accept-Ranges", "bytes"), ("Content-Type", "text/plain; charset=utf-8")]
        self.send_range(data, headers, send_body)

    # ---- cdn ----
    def cdn(self, url, send_body):
        st = self.server.state
        sha = url.path.rsplit("/", 1)[-1]
        data = st.blobs.get(sha)
        if data is None or not url.path.startswith("/lfs/"):
            return self.reply(404, [("Content-Type", "text/plain")], b"NoSuchKey", send_body)
        name = parse_qs(url.query).get("filename", [""])[0]
        self.send_range(data, [("ETag", f'"{sha}"'), ("Content-Type", "application/octet-stream"),
                               ("Content-Disposition", f'attachment; filename="{name}";')],
                        send_body, drop_name=name)

    def send_range(self, data, headers, send_body, drop_name=None):
        st = self.server.state
        start, status = 0, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if start >= len(data):
                return self.reply(416, [("Content-Range", f"bytes */{len(data)}")], b"", send_body)
            status = 206
            headers = headers + [("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")]
        body = data[start:]
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not send_body:
            return
        cut = None
        with st.lock:
            if drop_name in st.drop:
                cut = st.drop[drop_name].pop(0)
                if not st.drop[drop_name]:
                    del st.drop[drop_name]
        chunk = 64 * 1024
        for off in range(0, len(body), chunk):
            piece = body[off:off + chunk]
            if cut is not None and off + len(piece) >= cut:
                self.wfile.write(piece[:max(cut - off, 0)])
                self.wfile.flush()
                # A connection lost mid-file: the client sees fewer bytes than announced.
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            self.wfile.write(piece)
            if st.bps:
                self.wfile.flush()
                time.sleep(len(piece) / st.bps)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # Clients that go away mid-response (a cancelled pull) are part of the tests.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    args = ap.parse_args()
    state = State()
    hub = Server(("127.0.0.1", 0), Handler)
    cdn = Server(("127.0.0.1", 0), Handler)
    for srv, name in ((hub, "hub"), (cdn, "cdn")):
        srv.state, srv.name, srv.cdn_port = state, name, cdn.server_address[1]
    threading.Thread(target=cdn.serve_forever, daemon=True).start()
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"hub": hub.server_address[1], "cdn": cdn.server_address[1]}, f)
    os.replace(tmp, args.port_file)
    hub.serve_forever()


if __name__ == "__main__":
    main()
