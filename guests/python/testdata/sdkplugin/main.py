"""The SDK's test plugin: one action per part of moat.py (db, knowledge,
tasks, errors, call), each answering what it saw as JSON. The same file
runs on both transports: as a script of the WASM CPython (device file)
and as a native worker of Debian's python3 (pipe); see transports_test.go."""
from datetime import datetime, timedelta, timezone

import moat

UTC = timezone.utc


@moat.action("db")
def db(inp):
    id1, v1 = moat.db.insert("items", {"name": "apple", "tags": ["red", "fruit"], "when": datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC), "n": 3})
    id2, _ = moat.db.insert("items", {"name": "beet", "tags": ["red"], "n": 1})
    moat.db.insert("items", {"name": "corn", "tags": ["yellow"], "n": 2})
    got = moat.db.get("items", id1)
    first = moat.db.query("items", where=[("tags", "contains", "red")], order=["n"], limit=1)
    second = moat.db.query("items", where=[("tags", "contains", "red")], order=["n"], limit=1, after=first.next)
    v2 = moat.db.update("items", id1, set={"n": 4}, unset=["tags"], version=v1)
    try:
        moat.db.update("items", id1, set={"n": 5}, version=v1)
        stale = "updated"
    except moat.MoatError as e:
        stale = e.code
    try:
        moat.db.insert("items", {"tags": ["no name"]})
        invalid = "inserted"
    except moat.MoatError as e:
        invalid = e.code
    return {
        "v1": v1, "v2": v2, "id": got.id == id1, "version": got.version, "owner": got.owner,
        "name": got.doc["name"], "when": got.doc["when"], "created": got.created == got.updated and got.created.endswith("Z"),
        "first": [d.doc["name"] for d in first], "second": [d.doc["name"] for d in second],
        "more": bool(first.next), "count": moat.db.count("items", [("n", ">", 1)]), "all": moat.db.count("items"),
        "stale": stale, "invalid": invalid,
        "deleted": [moat.db.delete("items", id2), moat.db.delete("items", id2)],
        "gone": moat.db.get("items", id2) is None,
        "after": moat.db.get("items", id1).doc,
    }


@moat.action("knowledge")
def knowledge(inp):
    replaced = [
        moat.knowledge.add("docs", "a", "The quick brown fox", {"lang": "en", "n": 1}),
        moat.knowledge.add("docs", "a", "The quick brown fox jumps over the dog", {"lang": "en", "n": 1}),
    ]
    moat.knowledge.add("docs", "b", "A lazy dog sleeps", {"lang": "en"})
    hits = moat.knowledge.search("docs", "QUICK fox", limit=5)
    dogs = moat.knowledge.search("docs", "dog")
    return {
        "replaced": replaced,
        "hits": [h.id for h in hits], "meta": hits[0].meta, "snippet": hits[0].snippet, "scored": hits[0].score > 0,
        "dogs": sorted(h.id for h in dogs),
        "filtered": len(moat.knowledge.search("docs", "dog", filter={"lang": "fr"})),
        "syntax": len(moat.knowledge.search("docs", '"fox* (:^')),
        "deleted": [moat.knowledge.delete("docs", "a"), moat.knowledge.delete("docs", "a")],
        "after": [h.id for h in moat.knowledge.search("docs", "dog")],
    }


@moat.action("tasks")
def tasks(inp):
    tid, existing = moat.tasks.enqueue("noop", {"x": 1}, delay=3600, key="once")
    again, existing2 = moat.tasks.enqueue("noop", b"other", delay="1h", key="once")
    queued = moat.tasks.status(tid)
    cancelled = moat.tasks.cancel(tid)
    later, _ = moat.tasks.enqueue("noop", at=datetime.now(UTC) + timedelta(hours=2), max_attempts=5)
    status = moat.tasks.status(later)
    try:
        moat.tasks.status("no-such-task")
        missing = "found"
    except moat.MoatError as e:
        missing = e.code
    try:
        moat.tasks.enqueue("nope")
        unknown = "enqueued"
    except moat.MoatError as e:
        unknown = e.code
    return {
        "existing": [existing, existing2, again == tid],
        "queued": [queued.state, queued.attempts, queued.max_attempts, bool(queued.run_at)],
        "cancel": list(cancelled), "after": moat.tasks.status(tid).state,
        "later": [status.state, status.max_attempts], "missing": missing, "unknown": unknown,
        "cancelled_later": moat.tasks.cancel(later)[0],
    }


@moat.action("noop")
def noop(inp):
    return inp.text


@moat.action("fail")
def fail(inp):
    print("failing with", inp.text)  # to stderr, not the output
    raise moat.MoatError(inp.text, "failing as asked")


@moat.action("boom")
def boom(inp):
    return 1 / 0


@moat.action("local")
def local(inp):
    """Mistakes the SDK refuses before anything is sent."""
    out = {}
    for name, f in [
        ("nan", lambda: moat.db.insert("items", {"name": "x", "n": float("nan")})),
        ("naive", lambda: moat.db.insert("items", {"name": "x", "when": datetime(2026, 1, 2)})),
        ("bytes", lambda: moat.knowledge.add("docs", "x", b"bytes")),
        ("where", lambda: moat.db.query("items", where=[("n", ">")])),
        ("delay", lambda: moat.tasks.enqueue("noop", delay=[1])),
        ("op", lambda: moat.call("")),
    ]:
        try:
            f()
            out[name] = "sent"
        except moat.MoatError as e:
            out[name] = e.code
    out["items"] = moat.db.count("items", [("name", "=", "x")])
    return out


@moat.action("call")
def call(inp):
    print("to the log")
    denied = ""
    try:
        moat.knowledge.search("secret", "x")
    except moat.MoatError as e:
        denied = e.code
    return {"count": moat.call("db.count", {"model": "items"}), "denied": denied}


@moat.action("kv")
def kv(inp):
    """kv through every shape of reply the SDK reads: a value, an empty
    value, no value, a reply longer than one read, and the host's errors."""
    out = {}
    key = 'k"\\é\n'  # a key that must be quoted to be JSON
    moat.kv.put(key, "tëxt")
    moat.kv.put("bytes", b"\x00\xff\n\"")
    moat.kv.put("array", bytearray(b"ab"))
    moat.kv.put("empty", "")
    moat.kv.put("sub", type("Name", (str,), {})("sub"))  # a str subclass is text too
    big = bytes(range(256)) * 400  # 100 KiB: its reply is longer than the SDK's read buffer
    moat.kv.put("big", big)
    out["text"] = moat.kv.get_str(key)
    out["bytes"] = list(moat.kv.get("bytes"))
    out["array"] = moat.kv.get_str("array")
    out["empty"] = moat.kv.get("empty") == b""
    out["sub"] = moat.kv.get_str("sub")
    out["missing"] = moat.kv.get("missing")
    out["big"] = moat.kv.get("big") == big
    for name, f in [
        ("long_key_get", lambda: moat.kv.get("k" * 600)),
        ("long_key_put", lambda: moat.kv.put("k" * 600, "v")),
        ("bytes_key", lambda: moat.kv.put(b"k", "v")),
    ]:
        try:
            f()
            out[name] = "sent"
        except moat.MoatError as e:
            out[name] = e.code
    moat.log.info(42, n=1, when=datetime(2026, 1, 2, tzinfo=UTC), name="é")
    try:
        moat.log.info("x", bad=object())
        out["log"] = "sent"
    except moat.MoatError as e:
        out["log"] = e.code
    return out


@moat.action("input")
def input_(inp):
    """What the handler was given, whatever the bytes."""
    return {"hex": inp.hex(), "action": inp.action, "cid": inp.correlation_id}


@moat.action("output")
def output(inp):
    """Each kind of value a handler can return, by the input's name."""
    return {
        "text": "héllo \"wörld\"\n\u2028",
        "bytes": b"\x00\xff",
        "none": None,
        "json": {"a": [1, "é"]},
        "surrogate": "\udc80",
    }[inp.text]


@moat.action("caller")
def whoami(inp):
    """Who the call runs for (moat.caller), whatever the input says; a raw
    moat.caller naming another user learns the same."""
    p = moat.caller()
    raw = moat.call("moat.caller", {"user": "mallory", "org": "evil", "roles": ["admin"]})
    return {"user": p.user, "org": p.org, "roles": p.roles, "cid": p.correlation_id, "admin": p.has_role("admin"),
            "raw_user": raw["user"], "raw_org": raw["org"]}


moat.serve()
