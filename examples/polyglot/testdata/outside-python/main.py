"""The Python SDK's fixture of the http, media and ai wrappers, with the
same commands as every language's outside-* fixture, driven by
examples/polyglot's TestSDKOutside. A handler's MoatError fails the
action with its code."""
import moat


@moat.action("http")
def http(inp):
    """POST the URL in the input with a header and a binary body."""
    r = moat.http.fetch(inp.text, method="POST", headers={"X-Test": "sdk"}, body=b"\x00\xffhi", timeout=5, max_bytes=65536)
    return {"status": r.status, "url": r.url, "echo": r.header("X-Echo", ""), "body": r.body.hex()}


def info(i):
    return {"id": i.id, "type": i.type, "size": i.size, "width": i.width, "height": i.height}


@moat.action("media")
def media(inp):
    """Keep the input (or fetch "fetch URL"), thumbnail it, describe the
    thumbnail, read the item back."""
    data = bytes(inp)
    item = moat.media.fetch(data[6:].decode()) if data.startswith(b"fetch ") else moat.media.put(data, "image/png")
    thumb = moat.media.thumbnail(item.id, 16, 16, moat.media.COVER)
    described = moat.media.info(thumb.id)
    got, body = moat.media.get(item.id)
    return {"item": info(item), "thumb": info(thumb), "info": info(described),
            "got": {"id": got.id, "len": len(body), "head": body[:8].hex()}}


@moat.action("ai")
def ai(inp):
    """"complete MODEL PROMPT", "json MODEL PROMPT", "embed MODEL TEXT"."""
    parts = inp.text.split(" ", 2)
    if len(parts) != 3:
        raise moat.MoatError("invalid_argument", "want CMD MODEL TEXT")
    cmd, model, text = parts
    if cmd == "complete":
        r = moat.ai.complete(model, [("system", "Answer briefly."), ("user", text)], max_tokens=64, temperature=0.25)
        out = {"text": r.text}
    elif cmd == "json":
        schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
        r = moat.ai.complete(model, text, json_schema=schema)
        out = {"text": r.text}
    elif cmd == "embed":
        r = moat.ai.embed(model, [text, "moat"])
        out = {"vectors": r.vectors}
    else:
        raise moat.MoatError("invalid_argument", f"unknown ai command {cmd}")
    out.update(input_tokens=r.usage.input_tokens, output_tokens=r.usage.output_tokens, model_call_id=r.model_call_id)
    return out


@moat.action("caller")
def whoami(inp):
    """Who the invocation runs for (moat.caller), whatever the input says."""
    p = moat.caller()
    return {"user": p.user, "org": p.org, "roles": p.roles, "correlation_id": p.correlation_id, "admin": p.has_role("admin")}


moat.serve()
