"""Unit tests of moat.py's http, media, ai and caller wrappers against a fake
transport: the requests they send, the replies they read, and what they
refuse before anything is sent. Run by sdk_test.go's TestSDKWire with
Debian's python3 (the same moat.py the WASI CPython and native workers
run)."""
import base64
import datetime
import json

import moat


class Fake:
    """Stands where the device file or the pipe would: call(op, req) gets
    the request's JSON text, as the transports do, and answers with the
    handler's {"resp": ...} or {"error": ...}."""

    def __init__(self):
        self.sent = []
        self.handler = None

    def call(self, op, req):
        self.sent.append((op, json.loads(req)))
        return self.handler(op, json.loads(req))


fake = Fake()
moat._transport = fake


def last():
    return fake.sent[-1]


def refused(code, f, *args, **kw):
    n = len(fake.sent)
    try:
        f(*args, **kw)
    except moat.MoatError as e:
        assert e.code == code, f"{f.__qualname__}{args}: code {e.code}, want {code}: {e}"
        return len(fake.sent) - n
    raise AssertionError(f"{f.__qualname__}{args} {kw} was not refused")


# http
def http_host(op, req):
    if req["url"].endswith("/private"):
        return {"error": {"code": "denied", "message": "no http grant covers it"}}
    if req["url"].endswith("/empty"):
        return {"resp": {"status": 500, "url": req["url"]}}
    body = b"got:" + base64.b64decode(req.get("body", ""))
    return {"resp": {"status": 201, "headers": {"content-type": "application/octet-stream", "body": "Zm9v"},
                     "body": base64.b64encode(body).decode(), "url": req["url"] + "?final"}}


fake.handler = http_host
r = moat.http.fetch("https://api.example.com/echo", method="POST", headers={"X-Test": "sdk"}, body=b"\x00\xffhi",
                    timeout=0.0015, max_bytes=4096)
assert last() == ("http.fetch", {"url": "https://api.example.com/echo", "method": "POST", "headers": {"X-Test": "sdk"},
                                 "body": "AP9oaQ==", "timeout_ms": 2, "max_bytes": 4096}), last()
assert (r.status, r.body, r.url) == (201, b"got:\x00\xffhi", "https://api.example.com/echo?final"), r
assert r.header("Content-Type") == "application/octet-stream" and r.header("X-None") is None and r.header("body") == "Zm9v"
r = moat.http.fetch("https://api.example.com/echo", body="ü", timeout=datetime.timedelta(seconds=2))
assert last()[1]["body"] == "w7w=" and last()[1]["timeout_ms"] == 2000, last()
assert r.text == "got:ü"
r = moat.http.get("https://api.example.com/empty")
assert last()[1] == {"url": "https://api.example.com/empty"}, last()
assert r.status == 500 and r.body == b"", "a 500 is a response"
assert refused("denied", moat.http.get, "https://api.example.com/private") == 1
for kw in ({"headers": {"n": 1}}, {"headers": "X: y"}, {"timeout": -1}, {"timeout": float("nan")}, {"timeout": "5"}, {"body": 42}):
    assert refused("invalid_argument", moat.http.fetch, "https://x/", **kw) == 0, kw

# media
INFO = {"id": "ab12", "type": "image/png", "size": 3, "width": 64, "height": 48}


def media_host(op, req):
    if req.get("id") == "gone":
        return {"error": {"code": "not_found", "message": "no media item gone"}}
    if op == "media.get":
        return {"resp": dict(INFO, data="AQL/")}
    if op == "media.thumbnail":
        return {"resp": {"id": "cd34", "type": "application/pdf", "size": 9}}
    return {"resp": INFO}


def fields(i):
    return {"id": i.id, "type": i.type, "size": i.size, "width": i.width, "height": i.height}


fake.handler = media_host
assert fields(moat.media.put(b"\x01\x02\xff", "image/png")) == INFO
assert last() == ("media.put", {"data": "AQL/", "type": "image/png"}), last()
moat.media.put(b"")
assert last()[1] == {"data": ""}, last()
assert fields(moat.media.fetch("https://img.example.com/a.png")) == INFO
assert last() == ("media.fetch", {"url": "https://img.example.com/a.png"})
info, data = moat.media.get("ab12")
assert fields(info) == INFO and data == b"\x01\x02\xff"
assert fields(moat.media.info("ab12")) == INFO and last() == ("media.info", {"id": "ab12"})
t = moat.media.thumbnail("ab12", 16, 12, moat.media.COVER)
assert fields(t) == {"id": "cd34", "type": "application/pdf", "size": 9, "width": 0, "height": 0}
assert last() == ("media.thumbnail", {"id": "ab12", "width": 16, "height": 12, "fit": "cover"}), last()
assert refused("not_found", moat.media.get, "gone") == 1
assert refused("invalid_argument", moat.media.put, {"not": "bytes"}) == 0


# ai
def ai_host(op, req):
    if req["model"] == "big-chat":
        return {"error": {"code": "denied", "message": "the token budget of organization acme for today is spent"}}
    if op == "ai.embed":
        if req["model"] == "short":
            return {"resp": {"vectors": [[1]], "model_call_id": "m"}}
        return {"resp": {"vectors": [[len(s), 0.5] for s in req["input"]], "usage": {"input_tokens": 4}, "model_call_id": "mc-2"}}
    text = '{"answer":"forty-two"}' if "json_schema" in req else "hello"
    return {"resp": {"text": text, "usage": {"input_tokens": 12, "output_tokens": 3}, "model_call_id": "mc-1"}}


fake.handler = ai_host
c = moat.ai.complete("small-chat", [{"role": "system", "content": "Be brief."}, ("user", 'hi "there"')], max_tokens=64, temperature=0.25)
assert last()[1] == {"model": "small-chat", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": 'hi "there"'}],
                     "max_tokens": 64, "temperature": 0.25}, last()
assert (c.text, c.usage.input_tokens, c.usage.output_tokens, c.model_call_id) == ("hello", 12, 3, "mc-1"), c
c = moat.ai.complete("small-chat", "answer?", temperature=0, json_schema={"type": "object"})
assert last()[1] == {"model": "small-chat", "messages": [{"role": "user", "content": "answer?"}], "temperature": 0,
                     "json_schema": {"type": "object"}}, "a str is one user message; a zero temperature is sent"
assert c.json() == {"answer": "forty-two"}
assert refused("denied", moat.ai.complete, "big-chat", "hi") == 1
for kw in ({"temperature": float("nan")}, {"temperature": "hot"}, {"temperature": True}, {"json_schema": '{"type":"object"}'}):
    assert refused("invalid_argument", moat.ai.complete, "small-chat", "hi", **kw) == 0, kw
assert refused("invalid_argument", moat.ai.complete, "small-chat", [{"role": "user"}]) == 0
e = moat.ai.embed("small-embed", ["a", "bcd"])
assert last()[1] == {"model": "small-embed", "input": ["a", "bcd"]}
assert (e.vectors, e.usage.input_tokens, e.usage.output_tokens, e.model_call_id) == ([[1, 0.5], [3, 0.5]], 4, 0, "mc-2")
assert moat.ai.embed("small-embed", "one").vectors == [[3, 0.5]]
assert refused("invalid_argument", moat.ai.embed, "small-embed", [1]) == 0
assert refused("internal", moat.ai.embed, "short", ["a", "b"]) == 1

# caller: asked anew on every call; a reply without a user, or with roles
# that are not strings, is an error, never a principal to key data by.
who = {"user": "ann", "org": "acme", "roles": ["admin"], "correlation_id": "c-1"}
fake.handler = lambda op, req: {"resp": who}
p = moat.caller()
assert last() == ("moat.caller", {}), last()
assert (p.user, p.org, p.roles, p.correlation_id, p.has_role("admin"), p.has_role("adm")) == ("ann", "acme", ["admin"], "c-1", True, False), p
who = {"user": "bob", "org": "acme", "correlation_id": "c-2"}
p = moat.caller()
assert (p.user, p.roles, p.correlation_id) == ("bob", [], "c-2"), p
for bad in ({"org": "acme"}, {"user": "", "org": "acme"}, {"user": "a", "org": "b", "roles": [1]}):
    who = bad
    assert refused("internal", moat.caller) == 1, bad

# http.request and http.response: a route's action
req = moat.http.request(json.dumps({"moat": "http.request", "route": "GET /items/{id}", "auth": "public", "method": "GET",
                                    "path": "/items/7", "params": {"id": "7"}, "query": {"q": ["a", "b"]},
                                    "headers": {"accept": "text/html"}, "body_base64": "AP8=", "remote": "192.0.2.1"}).encode())
assert (req.param("id"), req.query_value("q"), req.query_value("none"), req.header("Accept"), req.body, req.remote) == \
    ("7", "a", None, "text/html", b"\x00\xff", "192.0.2.1"), req
assert moat.http.request('{"moat": "http.request", "body": "h\u00e9"}').text == "hé"
n = len(fake.sent)
for bad in ("plain input", '{"moat": "http.response"}', b"\xff"):
    assert refused("invalid_argument", moat.http.request, bad) == 0, bad
assert json.loads(moat.http.response(status=201, headers={"Location": "items/7"}, json={"id": "7"})) == \
    {"moat": "http.response", "status": 201, "headers": {"Location": "items/7"}, "content_type": "application/json", "body": '{"id":"7"}'}
assert json.loads(moat.http.response(content_type="image/png", body=b"\x89\xff")) == \
    {"moat": "http.response", "content_type": "image/png", "body_base64": "if8="}
assert json.loads(moat.http.response(media="abc")) == {"moat": "http.response", "media": "abc"}
assert json.loads(moat.http.response(body="hi")) == {"moat": "http.response", "body": "hi"}
print("ok")
