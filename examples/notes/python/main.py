"""notes-python is the notes plugin in Python: each user's notes in a model
of its moat.yaml (scope: user, so the host keeps one user's notes from
every other user and organization), found by full-text search in the
knowledge collection notes, with reminders as background tasks.
examples/notes/go is the same plugin in Go; README.md walks through both
over HTTP.

Every action takes and answers JSON. A note answers as its fields and the
host's metadata:

    {"id": "…", "version": 2, "owner": "ann", "created": "…", "updated": "…",
     "title": "buy milk", "body": "…", "tags": ["home"], "due": "2026-05-01T09:00:00.000Z", "done": false}

Failures keep their code (moat.MoatError): a bad input is invalid_argument
(HTTP 400), a note the caller cannot see not_found (404), a stale version
conflict (409)."""
import json
import re
from datetime import datetime, timezone

import moat

CHAT_MODEL = "small-chat"  # the operator's model alias summarize asks (moat.yaml: ai)
MODEL = "notes"  # the model in moat.yaml
COLLECTION = "notes"  # the knowledge collection the notes are searched in
MAX_TAG = 64  # characters in a tag; moat.yaml bounds their number
EDITABLE = ["title", "body", "tags", "due", "done"]  # reminded is the reminder's


def invalid(message):
    return moat.MoatError("invalid_argument", message)


def decode(inp, allowed=None):
    """The input, a JSON object (empty input is {}); with allowed, no
    other keys."""
    if not inp.strip():
        return {}
    try:
        obj = inp.json()
    except ValueError as e:
        raise invalid(f"the input is a JSON object: {e}") from None
    if not isinstance(obj, dict):
        raise invalid(f"the input is a JSON object, not {type(obj).__name__}")
    if allowed is not None:
        for k in obj:
            if k not in allowed:
                raise invalid(f"unknown field {k!r}: the input has {', '.join(allowed)}")
    return obj


def string(obj, key):
    v = obj.get(key, "")
    if not isinstance(v, str):
        raise invalid(f"{key} is a string")
    return v


def fields(obj):
    """The editable fields of an input object, checked: only editable
    names, and tags of at most MAX_TAG characters each (moat.yaml bounds
    the rest: the title's length, the number of tags, the types)."""
    for k in obj:
        if k not in EDITABLE:
            raise invalid(f"unknown field {k!r}: a note has {', '.join(EDITABLE)}")
    tags = obj.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise invalid("tags is a list of strings")
    for t in tags:
        if not t or len(t) > MAX_TAG:
            raise invalid(f"tag {t[:80]!r}: a tag is 1 to {MAX_TAG} characters")
    return dict(obj)


def note(d):
    """A stored note as the actions answer it."""
    return dict(d.doc, id=d.id, version=d.version, owner=d.owner, created=d.created, updated=d.updated)


def load(nid):
    """Note nid of the caller: not_found when the caller's scope holds
    none (another user's note included)."""
    if not nid:
        raise invalid('give the note\'s id: {"id":"…"}')
    d = moat.db.get(MODEL, nid)
    if d is None:
        raise moat.MoatError("not_found", f"no note {nid!r}")
    return d


def index(d):
    """The note's text into the knowledge collection, which moat.yaml
    declares scope: user: the host keeps it the caller's own, as it keeps
    the notes. Its owner goes in the meta for whoever reads the hits."""
    text = "\n".join([d.doc.get("title", ""), d.doc.get("body", "")] + d.doc.get("tags", []))
    moat.knowledge.add(COLLECTION, d.id, text, {"owner": d.owner})


@moat.action("create")
def create(inp):
    """{"title", "body"?, "tags"?, "due"?, "done"?} → the note."""
    doc = fields(decode(inp))
    doc.setdefault("done", False)  # so that list's done filter finds it
    nid, _ = moat.db.insert(MODEL, doc)
    d = load(nid)
    try:
        index(d)
    except moat.MoatError:
        # A note search cannot find is not kept: the caller sees the
        # failure (a full collection, say) and nothing half-made.
        moat.db.delete(MODEL, nid)
        raise
    moat.log.info("note created", id=nid)
    return note(d)


@moat.action("get")
def get(inp):
    """{"id"} → the note."""
    return note(load(string(decode(inp, ["id"]), "id")))


@moat.action("list")
def list_(inp):
    """{"done"?, "tag"?, "limit"?, "after"?} → {"notes": [...], "next"?},
    the caller's notes by due time (notes without one last)."""
    obj = decode(inp, ["done", "tag", "limit", "after"])
    where = []
    if obj.get("done") is not None:
        if not isinstance(obj["done"], bool):
            raise invalid("done is true or false")
        where.append(("done", "=", obj["done"]))
    if string(obj, "tag"):
        where.append(("tags", "contains", obj["tag"]))
    limit = obj.get("limit", 0)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise invalid("limit is a number")
    page = moat.db.query(MODEL, where=where, order=["due"], limit=limit, after=string(obj, "after"))
    out = {"notes": [note(d) for d in page]}
    if page.next:
        out["next"] = page.next
    return out


@moat.action("update")
def update(inp):
    """{"id", "version"?, fields to set..., "unset"?: [names]} → the note.
    With version, a note changed since is a conflict (HTTP 409): get it
    again and retry with its version."""
    obj = decode(inp)
    nid, version, unset = string(obj, "id"), obj.pop("version", 0), obj.pop("unset", [])
    obj.pop("id", None)
    if isinstance(version, bool) or not isinstance(version, int):
        raise invalid("version is a number")
    if not isinstance(unset, list) or not all(isinstance(f, str) for f in unset):
        raise invalid("unset is a list of field names")
    changes = fields(obj)
    for f in unset:
        if f not in EDITABLE or f == "title":
            raise invalid(f"unset {f!r}: only body, tags, due and done can be removed")
    if not changes and not unset:
        raise invalid(f"nothing to change: give fields to set ({', '.join(EDITABLE)}) or unset")
    if not nid:
        raise invalid('give the note\'s id: {"id":"…"}')
    try:
        moat.db.update(MODEL, nid, set=changes, unset=unset, version=version)
    except moat.MoatError as e:
        if e.code == "conflict":
            raise moat.MoatError("conflict", f"note {nid} changed since version {version}: get it again and retry with its version") from None
        raise
    d = load(nid)
    index(d)
    return note(d)


@moat.action("delete")
def delete(inp):
    """{"id", "version"?} → {"deleted": true}; its search entry goes with it."""
    obj = decode(inp, ["id", "version"])
    nid, version = string(obj, "id"), obj.get("version", 0)
    if not nid:
        raise invalid('give the note\'s id: {"id":"…"}')
    if isinstance(version, bool) or not isinstance(version, int):
        raise invalid("version is a number")
    if not moat.db.delete(MODEL, nid, version):
        raise moat.MoatError("not_found", f"no note {nid!r}")
    moat.knowledge.delete(COLLECTION, nid)
    return {"deleted": True}


@moat.action("search")
def search(inp):
    """{"q", "limit"?} → {"hits": [{"id", "title", "snippet", "score"}]},
    best first, the caller's notes only."""
    obj = decode(inp, ["q", "limit"])
    limit = obj.get("limit", 0)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise invalid("limit is a number")
    # The collection is user-scoped (moat.yaml): the host searches only
    # what was indexed for the caller (moat.caller().user), whatever the
    # request says.
    hits = []
    for h in moat.knowledge.search(COLLECTION, string(obj, "q"), limit=limit):
        # Each hit is read back in the caller's scope: a note deleted
        # since it was indexed is not shown.
        d = moat.db.get(MODEL, h.id)
        if d is not None:
            hits.append({"id": h.id, "title": d.doc.get("title", ""), "snippet": h.snippet, "score": h.score})
    return {"hits": hits}


# Go's duration syntax, as the Go plugin reads its delay: 90s, 1.5h, 2h30m.
DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")


@moat.action("remind")
def remind(inp):
    """{"id", "delay"?} → {"task", "existing"}: a task runs reminder on the
    note after delay ("90s", "2h") or, without one, at its due time (once
    per due time: the enqueue's key)."""
    obj = decode(inp, ["id", "delay"])
    d = load(string(obj, "id"))
    delay = string(obj, "delay")
    arg = {"id": d.id}
    if delay:
        if not DURATION.match(delay) or not any(c in "123456789" for c in delay):
            raise invalid(f"delay {delay!r}: a positive duration like 90s or 2h30m")
        task, existing = moat.tasks.enqueue("reminder", arg, delay=delay)
    else:
        due = d.doc.get("due")
        if not due:
            raise invalid(f"note {d.id} has no due time: set one, or give a delay")
        task, existing = moat.tasks.enqueue("reminder", arg, at=due, key=f"remind {d.id} at {due}")
    return {"task": task, "existing": existing}


@moat.action("reminder")
def reminder(inp):
    """The task remind enqueues ({"id"}): it logs the reminder and marks the
    note reminded. It runs as the user who asked, so it sees only their
    notes; a note deleted since is nothing to remind of."""
    nid = string(decode(inp, ["id"]), "id")
    try:
        d = load(nid)
    except moat.MoatError as e:
        if e.code != "not_found":
            raise
        moat.log.info("reminder: the note is gone", id=nid)
        return {"reminded": False}
    title = d.doc.get("title", "")
    moat.log.info("reminder", id=d.id, title=title)
    # At the version read: a note changed meanwhile is a conflict, and the
    # task's attempt is retried.
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    moat.db.update(MODEL, d.id, set={"reminded": now}, version=d.version)
    return {"reminded": True, "id": d.id, "title": title}


# MAX_SUMMARIZED bounds the notes summarize reads: the prompt stays small,
# and so does what the call costs the organization's token budget.
MAX_SUMMARIZED = 20


@moat.action("summarize")
def summarize(inp):
    """{"tag"?} → {"summary", "notes", "model_call_id", "usage"}: the
    caller's open notes (up to MAX_SUMMARIZED, by due time, with tag when
    given), summarized by the model small-chat. The host checks the grant
    and the daily token budgets before the call; the audit trail holds the
    model call under model_call_id, joined to this invocation."""
    obj = decode(inp, ["tag"])
    where = [("done", "=", False)]
    if string(obj, "tag"):
        where.append(("tags", "contains", obj["tag"]))
    page = moat.db.query(MODEL, where=where, order=["due"], limit=MAX_SUMMARIZED)
    notes = [note(d) for d in page]
    if not notes:
        return {"summary": "", "notes": 0}
    lines = []
    for i, n in enumerate(notes, 1):
        line = f"{i}. {n['title']}"
        if n.get("due"):
            line += f" (due {n['due']})"
        if n.get("body"):
            body = n["body"]
            line += ": " + (body if len(body) <= 500 else body[:500] + "…")
        lines.append(line + "\n")
    c = moat.ai.complete(CHAT_MODEL, [
        ("system", "You summarize a person's open notes in at most three sentences. Name what is due first."),
        ("user", "".join(lines)),
    ], max_tokens=200)
    return {"summary": c.text, "notes": len(notes), "model_call_id": c.model_call_id,
            "usage": {"input_tokens": c.usage.input_tokens, "output_tokens": c.usage.output_tokens}}


moat.serve()
