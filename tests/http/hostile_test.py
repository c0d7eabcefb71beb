"""hostile_test.py - malformed and hostile input gets a 4xx or a timeout, never a
crash or a hang; the server answers /health normally afterwards.

Expects the server to run with --idle-timeout 2 and --max-body-bytes 65536."""
import json
import os
import socket
import threading
import time
import urllib.parse

U = urllib.parse.urlparse(os.environ["BASE"])


def raw(data, timeout=10, read=True):
    s = socket.create_connection((U.hostname, U.port), timeout=timeout)
    try:
        s.sendall(data)
        if not read:
            return b""
        buf = b""
        while True:
            try:
                d = s.recv(65536)
            except ConnectionResetError:
                break
            if not d:
                break
            buf += d
        return buf
    finally:
        s.close()


def post(path, body, extra=b""):
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n").encode() + extra + b"\r\n"
    return raw(head + body)


def status(resp):
    if not resp:
        return 0
    return int(resp.split(b" ", 2)[1])


def expect_4xx(resp, what):
    st = status(resp)
    assert 400 <= st < 500, (what, resp[:300])
    body = resp.partition(b"\r\n\r\n")[2]
    if body and b"chunked" not in resp.partition(b"\r\n\r\n")[0].lower():
        e = json.loads(body.decode("utf-8"))["error"]
        assert e["message"] and e["type"], e


def health_ok():
    r = raw(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status(r) == 200, r[:200]


def main():
    C = "/v1/completions"
    cases = {
        "invalid json": b'{"prompt": "x",,}',
        "not an object": b'[1, 2, 3]',
        "deep nesting": b'{"prompt": ' + b"[" * 50000 + b"]" * 50000 + b"}",
        "deep object": b'{"a":' * 3000 + b"1" + b"}" * 3000,
        "huge integer": b'{"prompt": "x", "max_tokens": 99999999999999999999999999}',
        "huge float": b'{"prompt": "x", "temperature": 1e400}',
        "negative": b'{"prompt": "x", "max_tokens": -5}',
        "wrong types": b'{"prompt": {"a": 1}, "n": "two"}',
        "null prompt": b'{"prompt": null}',
        "invalid utf-8": b'{"prompt": "\xff\xfe\xc3\x28"}',
        "nul escape": b'{"prompt": "a\\u0000b"}',
        "lone surrogate": b'{"prompt": "\\ud800"}',
        "duplicate keys": b'{"prompt": "x", "prompt": "y"}',
        "token id overflow": b'{"prompt": [4294967296]}',
        "many stops": b'{"prompt": "x", "stop": [' + b",".join([b'"a"'] * 100) + b"]}",
        "bias flood": b'{"prompt": "x", "logit_bias": {' + b",".join(b'"%d": 1' % i for i in range(2000)) + b"}}",
        "empty body": b"",
        "trailing garbage": b'{"prompt": "x"} garbage',
    }
    for what, body in cases.items():
        expect_4xx(post(C, body), what)
        expect_4xx(post("/v1/chat/completions", body), what + " (chat)")
    expect_4xx(post("/v1/chat/completions", b'{"messages": [' + b'{"role":"user","content":5},' * 10 + b'{}]}'), "bad messages")
    expect_4xx(post("/tokenize", b'{"prompt": 5}'), "tokenize type")
    expect_4xx(post("/detokenize", b'{"tokens": [-1]}'), "detokenize range")
    # oversize: declared, and chunked without a length
    expect_4xx(post(C, b"x" * 70000), "oversize")
    chunk = b"%x\r\n%s\r\n" % (32768, b"y" * 32768)
    r = raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            + chunk * 4 + b"0\r\n\r\n")
    assert status(r) in (0, 413), r[:200]
    # broken HTTP
    for junk in (b"GARBAGE\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"\x00\x01\x02\r\n\r\n",
                 b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"a" * 100000 + b"\r\n\r\n"):
        r = raw(junk)
        # MHD answers an unknown protocol version with 505, which is the right code
        assert status(r) in (0, 505) or 400 <= status(r) < 500, r[:200]
    health_ok()
    # slow client: half the headers, then silence: closed after the idle timeout
    s = socket.create_connection((U.hostname, U.port), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
    t0 = time.time()
    try:
        d = s.recv(100)
    except (ConnectionResetError, socket.timeout):
        d = b""
    s.close()
    assert time.time() - t0 < 8, "slow client not timed out"
    # slow body: declared 100 bytes, sends 10
    s = socket.create_connection((U.hostname, U.port), timeout=10)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
    t0 = time.time()
    try:
        s.recv(100)
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    assert time.time() - t0 < 8, "slow body not timed out"
    # many idle connections while real requests still get served
    idle = [socket.create_connection((U.hostname, U.port), timeout=10) for _ in range(300)]
    health_ok()
    r = post(C, b'{"prompt": "hello", "max_tokens": 3}')
    assert status(r) == 200, r[:300]
    for s in idle:
        s.close()
    # clients that hang up right after sending a generation request
    for _ in range(20):
        raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n"
            b'{"prompt": "hello", "max_tokens": 100}  ', read=False)
    # concurrent garbage
    ts = [threading.Thread(target=lambda: post(C, os.urandom(500))) for _ in range(50)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    health_ok()
    print("hostile_test: ok")


if __name__ == "__main__":
    main()
