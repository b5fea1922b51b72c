"""The acceptance matrix's Python plugin (see ../README.md); the
python-native plugin is this file with moat.serve() at the end."""
import moat


def _attempt(lines, family, fn):
    try:
        lines.append(f"{family} ok {fn()}".rstrip())
    except moat.MoatError as e:
        lines.append(f"{family} err {e}")
    except OSError as e:
        lines.append(f"{family} err io: {e.strerror}")


def _log(value):
    moat.log.info("matrix", input=value)
    return ""


def _kv(value):
    old = moat.kv.get_str("matrix")
    moat.kv.put("matrix", value)
    return old if old is not None else "-"


def _db(value):
    n = moat.db.count("notes")
    moat.db.insert("notes", {"title": value})
    return n


def _knowledge(value):
    hits = moat.knowledge.search("docs", "matrix")
    moat.knowledge.add("docs", value, f"matrix {value}")
    return len(hits)


def _tasks(value):
    task_id, _ = moat.tasks.enqueue("noop", value, delay="1h")
    return moat.tasks.status(task_id).state


def _http():
    r = moat.http.fetch(moat.config("url"), timeout=5)
    return f"{r.status} {r.text}"


def _media():
    item = moat.media.put(moat.config("pdf").encode(), "application/pdf")
    info = moat.media.info(item.id)
    return f"{info.type} {info.size}"


def _files():
    with open(moat.config("file")) as f:
        return f.read().strip()


@moat.action("all")
def all_families(inp):
    value = inp.text
    lines = []
    _attempt(lines, "log", lambda: _log(value))
    _attempt(lines, "config", lambda: moat.config("greeting", "-"))
    _attempt(lines, "kv", lambda: _kv(value))
    _attempt(lines, "db", lambda: _db(value))
    _attempt(lines, "knowledge", lambda: _knowledge(value))
    _attempt(lines, "tasks", lambda: _tasks(value))
    _attempt(lines, "http", _http)
    _attempt(lines, "media", _media)
    _attempt(lines, "ai", lambda: moat.ai.complete("small-chat", "say matrix").text)
    _attempt(lines, "files", _files)
    return "\n".join(lines) + "\n"


@moat.action("noop")
def noop(inp):
    return inp
