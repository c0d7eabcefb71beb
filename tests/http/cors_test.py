"""cors_test.py - CORS (--allowed-origins) as a browser sees it, and as plain requests do.

Run by test_cors.sh against a live server started with the mode given as argv[1]:
  allowed   --allowed-origins http://127.0.0.1:$PAGE_PORT --api-key $KEY
  wildcard  --allowed-origins '*' --api-key $KEY
  none      no --allowed-origins (the default): no CORS header at all
The plain checks send preflights and requests with an Origin header over http.client.
The browser checks serve a small page from another port (another origin) with Python's
http.server, open it in headless Chromium (Debian's, driven by playwright) and let the
page fetch /v1/chat/completions with an Authorization header, which makes the browser
send a preflight first: whole, streamed (read through the body's reader), and without
the key (the 401 must reach the page). Under "none" the browser must block the fetch.
"""
import http.server
import json
import os
import sys
import threading

from client import BASE, request

KEY = os.environ["KEY"]
PAGE_PORT = int(os.environ["PAGE_PORT"])
ORIGIN = "http://127.0.0.1:%d" % PAGE_PORT
CHAT = "/v1/chat/completions"
BODY = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0,
        "ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False}}
AUTH = {"Authorization": "Bearer " + KEY}

PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>cors</title></head><body>
<script>
// Fetches the chat route of strata (another origin): whole, streamed, and without the
// key; returns what arrived, or the error the browser raised.
async function call(base, key, stream) {
  const headers = {"Content-Type": "application/json"};
  if (key) headers["Authorization"] = "Bearer " + key;
  const body = JSON.stringify(Object.assign({}, BODY, {stream: stream}));
  try {
    const r = await fetch(base + "/v1/chat/completions", {method: "POST", headers, body});
    if (!stream) return {status: r.status, json: await r.json()};
    const reader = r.body.getReader(), dec = new TextDecoder();
    let text = "", reads = 0;
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      reads++;
      text += dec.decode(value, {stream: true});
    }
    return {status: r.status, sse: text, reads: reads};
  } catch (e) {
    return {error: String(e)};
  }
}
async function run(base, key) {
  return {whole: await call(base, key, false), stream: await call(base, key, true),
          nokey: await call(base, null, false)};
}
const BODY = %s;
</script></body></html>
""" % json.dumps(BODY).encode()


def serve_page():
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", PAGE_PORT), Page)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def preflight(origin, req_headers="authorization,content-type"):
    h = {"Origin": origin, "Access-Control-Request-Method": "POST"}
    if req_headers:
        h["Access-Control-Request-Headers"] = req_headers
    return request("OPTIONS", CHAT, headers=h)


def check_plain(mode):
    acao = {"allowed": ORIGIN, "wildcard": "*", "none": None}[mode]
    # the preflight: no key needed; the requested headers come back
    s, h, b = preflight(ORIGIN, "authorization,content-type,x-stainless-os")
    if acao is None:
        assert s == 405 and "access-control-allow-origin" not in h, (s, h)  # not CORS at all
    else:
        assert s == 204 and b == b"", (s, h, b)
        assert h["access-control-allow-origin"] == acao and h["vary"] == "Origin", h
        assert h["access-control-allow-methods"] == "GET, POST, OPTIONS", h
        allowed = {x.strip().lower() for x in h["access-control-allow-headers"].split(",")}
        assert {"authorization", "content-type", "x-stainless-os"} <= allowed, h
        assert int(h["access-control-max-age"]) > 0, h
        s, h, b = preflight(ORIGIN, None)  # nothing requested: the base headers still
        assert s == 204 and "Authorization" in h["access-control-allow-headers"], h
    # the real request still needs the key; its answers carry the headers, errors too
    s, h, b = request("POST", CHAT, BODY, headers={"Origin": ORIGIN})
    assert s == 401 and h.get("access-control-allow-origin") == acao, (s, h)
    s, h, b = request("POST", CHAT, BODY, headers=dict(AUTH, Origin=ORIGIN))
    assert s == 200 and h.get("access-control-allow-origin") == acao, (s, h)
    assert json.loads(b)["choices"][0]["message"]["content"] is not None
    s, h, b = request("POST", CHAT, dict(BODY, stream=True), headers=dict(AUTH, Origin=ORIGIN))
    assert s == 200 and h["content-type"].startswith("text/event-stream"), h
    assert h.get("access-control-allow-origin") == acao and b.endswith(b"data: [DONE]\n\n"), h
    s, h, b = request("GET", "/v1/models", headers=dict(AUTH, Origin=ORIGIN))
    assert s == 200 and h.get("access-control-allow-origin") == acao, (s, h)
    # no Origin (curl, SDKs): no CORS headers
    s, h, b = request("POST", CHAT, BODY, headers=AUTH)
    assert s == 200 and "access-control-allow-origin" not in h and "vary" not in h, h
    # another origin: served (only browsers enforce CORS) but without the headers
    other = "http://evil.example:1"
    s, h, b = request("POST", CHAT, BODY, headers=dict(AUTH, Origin=other))
    if mode != "wildcard":
        assert s == 200 and "access-control-allow-origin" not in h, h
        s, h, b = preflight(other)
        assert s in (403, 405) and "access-control-allow-origin" not in h, (s, h)
    print("plain requests: ok (%s)" % mode)


def check_browser(mode):
    from playwright.sync_api import sync_playwright
    page_srv = serve_page()
    exe = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    try:
        with sync_playwright() as p:
            # Debian's chromium, not a downloaded one; as root in a container Chromium's
            # sandbox cannot start (playwright passes --no-sandbox too, said here plainly)
            browser = p.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(ORIGIN + "/")
            res = page.evaluate("([base, key]) => run(base, key)", [BASE, KEY])
            browser.close()
    finally:
        page_srv.shutdown()
    if mode == "none":
        # the browser refused every answer: fetch rejected with a TypeError
        for k in ("whole", "stream", "nokey"):
            assert "error" in res[k] and "TypeError" in res[k]["error"], (k, res[k])
        print("browser: blocked without --allowed-origins: ok")
        return
    w, st, nk = res["whole"], res["stream"], res["nokey"]
    assert w.get("status") == 200, w
    assert w["json"]["object"] == "chat.completion" and w["json"]["usage"]["completion_tokens"] == 6, w
    assert st.get("status") == 200 and st["reads"] >= 1, st
    events = [e[len("data: "):] for e in st["sse"].split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "[DONE]", events[-3:]
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                   for e in events[:-1] if json.loads(e)["choices"])
    assert text == w["json"]["choices"][0]["message"]["content"], (text, w)
    # without the key: the preflight passes, the request is refused, the page reads why
    assert nk.get("status") == 401 and nk["json"]["error"]["type"] == "authentication_error", nk
    print("browser: whole, streamed and 401 answers reached the page: ok (%s)" % mode)


def main():
    mode = sys.argv[1]
    check_plain(mode)
    check_browser(mode)


if __name__ == "__main__":
    main()
