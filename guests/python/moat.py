"""moat — the moat guest SDK for Python.

One script, either way moat runs it:

    import moat

    @moat.action("greet")
    def greet(inp):                      # inp: the input bytes (moat.Input)
        n = int(moat.kv.get_str("count") or "0") + 1
        moat.kv.put("count", str(n))
        moat.log.info("counted", n=n)
        return f"Hello, {inp.text or 'world'}! (#{n})"

    moat.serve()

- A native plugin (kind: native; Debian's python3 as a confined,
  long-lived worker): the host sets MOAT_TRANSPORT=pipe and talks JSON lines
  on file descriptors 3 (host → worker) and 4 (worker → host). serve() says
  ready with the registered actions, then runs one invocation at a time;
  ops called inside a handler travel over the same pipe.
- CPython 3.12 WASI (a script plugin): ops travel over the device-file
  transport ($MOAT_OPS, /dev/moat/ops). A plugin that registers handlers
  runs resident ($MOAT_RESIDENT): its top level runs once per instance
  (or once, into the snapshot new instances start from), and serve()
  takes call after call from the host with moat.next. A plain script
  without handlers runs per call instead: serve() runs the action named
  by $MOAT_ACTION once, on stdin, and writes the output to stdout.

Beside kv, log and config: moat.caller() (who the invocation runs for,
as the host authenticated them: .user, .org, .roles, .correlation_id),
moat.db (documents in the models moat.yaml
declares), moat.knowledge (ranked full-text search), moat.tasks
(background runs of this plugin's own actions), moat.http (requests the
host sends), moat.media (media the host keeps) and moat.ai (model calls),
the same ops as the Go SDK's DB, Knowledge, Tasks, HTTP, Media and AI;
call() reaches any op by name.

A failed op raises MoatError, whose .code is the host's (denied,
not_found, invalid_argument, conflict, too_large, unavailable...). A
handler that raises MoatError fails its invocation with that code, on
either transport (an HTTP client sees invalid_argument as 400, conflict as
409); any other exception fails it with guest_error, and a native worker
keeps serving. A plain script run as a plugin's action (no serve()) that
lets a MoatError escape fails with its code too. While a handler runs,
print() goes to stderr (the host's log): the action's output is what the
handler returns.
"""

import atexit as _atexit
import base64 as _base64
import binascii as _binascii
import datetime as _dt
import io as _io
import json as _json
import json.decoder as _json_decoder
import json.encoder as _json_encoder
import json.scanner as _json_scanner
import os as _os
import sys as _sys
import traceback as _traceback

__all__ = ["MoatError", "Input", "call", "caller", "Principal", "kv", "log", "config", "db", "knowledge", "tasks", "http", "media", "ai",
           "Doc", "Page", "Hit", "TaskStatus", "HTTPResponse", "MediaInfo", "Completion", "Embedding", "Usage", "action", "serve"]

ABI_VERSION = 1  # abi.Version
MAX_LINE = 16 << 20  # abi.MaxPipeLine: a longer line ends the worker
_PIPE_FROM_HOST, _PIPE_TO_HOST = 3, 4  # abi.PipeFromHostFD, abi.PipeToHostFD
SCRIPT_ERROR_EXIT = 70  # abi.ScriptErrorExit: a script's action failed with the error on stdout's last line


class MoatError(Exception):
    """An op failed. code is the host's error code, message its reason."""

    def __init__(self, code, message=""):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


class _ProtocolError(Exception):
    """The host said something the protocol does not allow: end the worker."""


class Input(bytes):
    """An invocation's input: bytes, with .text (UTF-8), .json(), and the
    .action and .correlation_id of the invocation."""

    action = ""
    correlation_id = ""

    @property
    def text(self):
        return self.decode()

    def json(self):
        return _json.loads(self) if self else None


def _on_pipe():
    return _os.environ.get("MOAT_TRANSPORT") == "pipe"


# --- transports -------------------------------------------------------


class _Device:
    """The device-file transport: one request line, one reply line."""

    def __init__(self):
        path = _os.environ.get("MOAT_OPS")
        if not path:
            raise MoatError("unavailable", "the op table is not enabled for this run ($MOAT_OPS is unset)")
        try:
            self._f = _io.open(path, "r+b", buffering=0)
        except OSError as e:
            raise MoatError("unavailable", f"cannot open {path}: {e.strerror}") from None
        self._buf = bytearray(65536)

    def close(self):
        self._f.close()

    def tell(self, line):
        """Send a request line (bytes) whose reply the guest has no use
        for: it says "noreply", and the host runs it and answers nothing."""
        n = self._f.write(line)
        if n != len(line):
            self._write_rest(line, n)

    def _write_rest(self, line, n):
        view = memoryview(line)[n:]
        while view:
            view = view[self._f.write(view):]

    def line(self, line, op):
        """Send a request line (bytes) and return the host's reply line
        (str). CPython on WASM pays about a microsecond for each call,
        method lookup or new object, so the hot ops build their whole
        line with one concatenation, the write is usually whole, and the
        reply is read into one buffer kept for the descriptor's life."""
        n = self._f.write(line)
        if n != len(line):
            self._write_rest(line, n)
        buf = self._buf
        n = self._f.readinto(buf)
        if n and buf[n - 1] == 10:
            return buf[:n].decode()
        reply = bytearray(buf[:n])
        while not reply.endswith(b"\n"):
            n = self._f.readinto(buf)
            if not n:
                raise MoatError("internal", f"no reply from the host for op {op}")
            reply += buf[:n]
        return reply.decode()

    def call(self, op, req):
        return _decode_reply(self.line(('{"op":' + _quote(op) + ',"req":' + req + "}\n").encode(), op), op)


class _Lines:
    """JSON lines both ways: the pipe transport's framing. A resident
    interpreter could speak it over another pair of files."""

    def __init__(self, rfile, wfile):
        self._r, self._w = rfile, wfile
        self._next = 0
        self.busy = False  # an invocation runs: ops may be called

    def send(self, msg):
        self.send_line(_json.dumps(msg, separators=(",", ":")))

    def send_line(self, text):
        line = text.encode() + b"\n"
        view = memoryview(line)
        while view:
            view = view[self._w.write(view):]

    def recv(self):
        line = self._r.readline(MAX_LINE + 1)
        if not line:
            _sys.exit(0)  # the host closed the pipe: it is done with this worker
        if not line.endswith(b"\n"):
            raise _ProtocolError(f"a line from the host over {MAX_LINE} bytes")
        return _json.loads(line)

    def call(self, op, req):
        if not self.busy:
            raise MoatError("unavailable", f"op {op}: ops can be called only while an action runs (inside a handler registered with moat.action)")
        self._next += 1
        self.send_line('{"type":"call","id":' + str(self._next) + ',"op":' + _json.dumps(op) + ',"req":' + req + "}")
        m = self.recv()
        if m.get("type") != "reply" or m.get("id") != self._next:
            raise _ProtocolError(f"expected the reply to call {self._next}, got {m.get('type')!r} {m.get('id')!r}")
        return m


_transport = None


def _get():
    global _transport
    if _transport is None:
        if _on_pipe():
            _transport = _Lines(_os.fdopen(_PIPE_FROM_HOST, "rb", buffering=65536), _os.fdopen(_PIPE_TO_HOST, "wb", buffering=0))
        else:
            _transport = _Device()
    return _transport


def _json_default(v):
    """Encodes what json cannot: a datetime as RFC 3339, the form of time
    fields and of task.enqueue's at."""
    if isinstance(v, _dt.datetime):
        if v.tzinfo is None:
            raise ValueError(f"the datetime {v.isoformat()} has no time zone; use an aware one, like datetime.now(timezone.utc)")
        return v.isoformat()
    raise TypeError(f"a {type(v).__name__} is not JSON: send str, int, float, bool, None, list, dict or datetime")


# CPython on WASM runs Python many times slower than native: a call, a
# method lookup or a new object costs about a microsecond there, and a
# request's Python is a few dozen of them. json.dumps and json.loads wrap
# the C encoder and scanner in Python (a new encoder per call, whitespace
# checks) and cost ~13 and ~10 µs; the C encoder and scanner are made once
# and called directly (~6 and ~5 µs). The hottest ops (kv.get, kv.put,
# log.write, moat.next) build their request line from strings and read the
# common shapes of their replies without the scanner; every other shape
# goes through it (_decode_reply).
_c_request = _json_encoder.c_make_encoder(None, _json_default, _json_encoder.encode_basestring_ascii, None, ":", ",", False, False, False)
_c_compact = _json_encoder.c_make_encoder(None, None, _json_encoder.encode_basestring_ascii, None, ":", ",", False, False, True)
_scan = _json_scanner.c_make_scanner(_json_decoder.JSONDecoder())
_quote = _json_encoder.encode_basestring_ascii
_a2b = _binascii.a2b_base64
_b2a = _binascii.b2a_base64


def _compact(v):
    """v as compact JSON (the C encoder, called directly)."""
    return "".join(_c_compact(v, 0))


def _encode(op, what, v):
    try:
        return "".join(_c_request(v, 0))
    except (TypeError, ValueError, RecursionError) as e:
        raise MoatError("invalid_argument", f"op {op}: encode {what}: {e}") from None


_EMPTY_REPLY = '{"resp":{}}\n'


def _decode_reply(text, op):
    """A reply line, decoded: a dict, or a protocol error."""
    if text == _EMPTY_REPLY:  # kv.put and the like: no scan
        return {"resp": {}}
    try:
        v, end = _scan(text, 0)
    except (StopIteration, ValueError):
        v, end = None, -1
    if v.__class__ is not dict or (end != len(text) - 1 and text[end:].strip()):
        raise _ProtocolError(f"op {op}: the host's reply is not a JSON object: {text[:200]!r}")
    return v


def _result(msg):
    """A decoded reply's response (a dict), or its error raised."""
    err = msg.get("error")
    if err:
        raise MoatError(err.get("code", "internal"), err.get("message", ""))
    return msg.get("resp") or {}


def call(op, req=None):
    """Run one op by name and return its decoded response (a dict). req is
    a dict (None: {}); datetimes in it are sent as RFC 3339."""
    if not isinstance(op, str) or not op:
        raise MoatError("invalid_argument", "call: the op name must be a non-empty str, like \"kv.get\"")
    return _call_raw(op, _encode(op, "the request", req if req is not None else {}))


def _call_raw(op, req):
    """call with the request already JSON text."""
    return _result(_get().call(op, req))


# --- handlers ---------------------------------------------------------

_actions = {}


def action(name, fn=None):
    """Register fn as the handler of action name:

        @moat.action("greet")
        def greet(inp): ...

    or moat.action("greet", greet). The handler gets the input (Input,
    a bytes) and returns bytes, str (sent as UTF-8), None (empty), or a
    JSON-encodable value (sent as JSON)."""
    if not isinstance(name, str) or not name:
        raise ValueError("moat.action: the action name must be a non-empty str")

    def register(f):
        if not callable(f):
            raise TypeError(f"moat.action({name!r}): the handler must be callable")
        if name in _actions:
            raise ValueError(f"moat.action: action {name!r} is registered twice")
        _actions[name] = f
        return f

    return register if fn is None else register(fn)


def _output(v):
    if v is None:
        return b""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode()
    return _json.dumps(v, separators=(",", ":")).encode()


def _run(name, data, correlation_id=""):
    """Run a handler: (output, None), or (None, {"code", "message"})."""
    fn = _actions.get(name)
    if fn is None:
        return None, _no_action(name)
    inp = Input(data)
    inp.action, inp.correlation_id = name, correlation_id
    # The output is what the handler returns: its print()s go to stderr,
    # the host's log, on either transport (on the device file stdout is
    # the output; a native worker's stdout goes nowhere).
    stdout, _sys.stdout = _sys.stdout, _sys.stderr
    try:
        return _output(fn(inp)), None
    except _ProtocolError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of the handler is the action's
        return None, _failure(e)
    finally:
        _sys.stdout = stdout


def _no_action(name):
    return {"code": "no_such_action", "message": f"no action {name!r} is registered (moat.action); registered: {sorted(_actions)}"}


def _failure(e):
    """A handler's exception as the invocation's error: a MoatError keeps
    its code; anything else is guest_error, its traceback on stderr."""
    if isinstance(e, MoatError):
        return {"code": str(e.code), "message": str(e.message)}
    _traceback.print_exc(file=_sys.stderr)
    return {"code": "guest_error", "message": f"{type(e).__name__}: {e}"}


_served = False
_top_level_failed = False


def _resident():
    return _os.environ.get("MOAT_RESIDENT") == "1"


def serve():
    """Serve the registered actions: for ever on the pipe (a native worker)
    or from a resident instance (a WASI script whose instance serves many
    calls, $MOAT_RESIDENT), else the one action of this run on the device
    file. A script that registers actions and does not call serve() is
    served when its top-level code ends."""
    global _served
    if _served:
        return
    _served = True
    if not _actions:
        raise RuntimeError("moat.serve(): no actions registered; register them with moat.action first")
    if _on_pipe():
        _serve_lines(_get())
    elif _resident():
        nonce = _os.environ.pop("MOAT_SNAPSHOT", None)
        if nonce:
            _park(nonce)
        _serve_resident(_get())
    else:
        _serve_once()


def _park(nonce):
    """Be captured here (host/snapshot.go): the nonce and the address of
    this module's globals (where _resume runs) on stdout, then a clock read
    the host does not return from. The device is closed first: an instance
    started from the image opens its own."""
    global _transport
    if _transport is not None:
        _transport.close()
        _transport = None
    import time
    _os.write(1, ("%s %d\n" % (nonce, id(globals()))).encode())
    time.time()
    raise RuntimeError("moat: the snapshot's park returned")


def _resume():
    """An instance started from the image enters here: serve, as serve()
    would have after the top level."""
    rng = _sys.modules.get("random")
    if rng is not None:
        rng.seed()  # not the image's sequence
    try:
        _serve_resident(_get())
    except BaseException:  # noqa: BLE001 - the instance ends; the host reports it
        _traceback.print_exc(file=_sys.stderr)
        _sys.stderr.flush()
        _os._exit(1)


def _serve_resident(dev):
    """Serve calls until the host stops the instance: each moat.next hands
    back the previous call's result and takes the next call (abi/resident.go).

    This is _run unrolled into the loop, and each step is here because it
    costs: CPython on WASM pays a microsecond or more for every call,
    lookup or new object, and the host's code between two calls pushes
    the interpreter out of the processor's caches, so a request costs
    several times what the same Python costs in a loop. Only the
    instance's calls run here, so print() goes to stderr for good (set
    again before each call, should a handler have changed it)."""
    req = _compact({"ready": {"actions": list(_actions)}})
    stderr = _sys.stderr
    while True:
        call = _next_call(dev.line(('{"op":"moat.next","req":' + req + "}\n").encode(), "moat.next"))
        if call is None:
            return
        name = call[0]
        if name not in _actions:
            req = _compact({"error": _no_action(name)})
            continue
        inp = Input(call[1])
        inp.action = name
        if call[2]:
            inp.correlation_id = call[2]
        _sys.stdout = stderr
        try:
            v = _actions[name](inp)
            if v.__class__ is str:
                v.encode()  # a str that is not UTF-8 (a lone surrogate) fails as _output's would
                req = '{"output_text":' + _quote(v) + "}"
            else:
                req = '{"output":"' + _b2a(_output(v), newline=False).decode() + '"}'
        except _ProtocolError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure of the handler is the action's
            req = _compact({"error": _failure(e)})


def _next_call(text):
    """moat.next's reply: (action, input, correlation id), or None to stop.
    A call whose strings need no escapes, the usual one, is read with
    find and slices (measured in the greet bench: ~25 µs a request less
    than the scanner, whose code is cold by the time each call comes);
    any other reply goes through the scanner."""
    if text[:19] == '{"resp":{"action":"' and "\\" not in text:
        i = text.find('"', 19)
        action, data, cid = text[19:i], b"", ""
        if text[i:i + 10] == '","text":"':
            j = text.find('"', i + 10)
            data, i = text[i + 10:j].encode(), j
        elif text[i:i + 11] == '","input":"':
            j = text.find('"', i + 11)
            data, i = _a2b(text[i + 11:j]), j
        if text[i:i + 20] == '","correlation_id":"':
            j = text.find('"', i + 20)
            cid, i = text[i + 20:j], j
        if text[i:] == '"}}\n':
            return action, data, cid
    msg = _decode_reply(text, "moat.next")
    if "resp" not in msg:
        err = msg.get("error") or {}
        raise _ProtocolError(f"moat.next: {err.get('code')}: {err.get('message')}")
    nxt = msg["resp"]
    if nxt.__class__ is not dict:
        raise _ProtocolError(f"moat.next: the call is not a JSON object: {text[:200]!r}")
    if "stop" in nxt:
        return None
    if "text" in nxt:
        data = nxt["text"].encode()
    else:
        data = _a2b(nxt["input"]) if "input" in nxt else b""
    return nxt.get("action", ""), data, nxt.get("correlation_id", "")


def _serve_at_exit():
    if _actions and not _served and not _top_level_failed:
        serve()


def _serve_lines(t):
    t.send({"type": "ready", "version": ABI_VERSION, "actions": list(_actions)})
    while True:
        m = t.recv()
        kind, mid = m.get("type"), m.get("id")
        if kind == "ping":
            t.send({"type": "pong", "id": mid})
            continue
        if kind != "invoke":
            raise _ProtocolError(f"the host sent {kind!r} between invocations")
        t.busy = True
        try:
            out, err = _run(m.get("action", ""), _base64.b64decode(m.get("input") or ""), m.get("correlation_id", ""))
        finally:
            t.busy = False
        if err is None and len(out) * 4 // 3 + 64 > MAX_LINE:
            out, err = None, {"code": "output_too_large", "message": f"the output is {len(out)} bytes; a pipe line holds at most {MAX_LINE} bytes of base64"}
        msg = {"type": "result", "id": mid}
        if err is not None:
            msg["error"] = err
        else:
            msg["output"] = _base64.b64encode(out).decode()
        t.send(msg)


def _fail_script(err):
    """End a script's action with err ({"code", "message"}) as the contract
    of abi/script.go says: the error as the last line of stdout and exit
    status SCRIPT_ERROR_EXIT keep its code; the line on stderr is for the
    log."""
    print(f"{err['code']}: {err['message']}", file=_sys.stderr)
    _sys.stdout.flush()
    _sys.stdout.buffer.write(b"\n" + _json.dumps(err, separators=(",", ":")).encode() + b"\n")
    _sys.stdout.flush()
    _sys.stderr.flush()
    _os._exit(SCRIPT_ERROR_EXIT)


def _serve_once():
    name = _os.environ.get("MOAT_ACTION", "")
    out, err = _run(name, _sys.stdin.buffer.read())
    if err is not None:
        _fail_script(err)
    _sys.stdout.buffer.write(out + b"\n")  # the host drops one trailing newline
    _sys.stdout.flush()


def _script_excepthook(kind, value, tb):
    """A plain script run as a plugin's action (no serve()) that lets a
    MoatError escape fails the action with its code too, as a handler
    would: a denied op stays denied (HTTP 403), not guest_error."""
    global _top_level_failed
    _top_level_failed = True
    _sys.__excepthook__(kind, value, tb)
    if isinstance(value, MoatError):
        _fail_script({"code": str(value.code), "message": str(value.message)})


def _resident_excepthook(kind, value, tb):
    """Top-level code that failed serves nothing: the instance ends with
    the traceback on stderr, and its load fails with it."""
    global _top_level_failed
    _top_level_failed = True
    _sys.__excepthook__(kind, value, tb)


if _os.environ.get("MOAT_ACTION") and not _on_pipe():
    _sys.excepthook = _script_excepthook
if _resident() and not _on_pipe():
    _sys.excepthook = _resident_excepthook
if (_resident() or _os.environ.get("MOAT_ACTION")) and not _on_pipe():
    _atexit.register(_serve_at_exit)


# --- ops --------------------------------------------------------------


class _KV:
    """The module's key-value store, scoped by the host to the caller's
    organization and this module. Values are bytes; str is stored as UTF-8."""

    def get(self, key):
        """The value of key as bytes, or None."""
        t = _transport or _get()
        if key.__class__ is not str or t.__class__ is not _Device:
            r = call("kv.get", {"key": key})
            return _base64.b64decode(r.get("value") or "") if r.get("found") else None
        text = t.line(('{"op":"kv.get","req":{"key":' + _quote(key) + "}}\n").encode(), "kv.get")
        # The host's two common answers (abi.KVGetResponse), read in place.
        if text[:18] == '{"resp":{"value":"' and text[-17:] == '","found":true}}\n':
            b64 = text[18:-17]
            if '"' not in b64:
                return _a2b(b64)
        elif text == '{"resp":{"found":false}}\n':
            return None
        r = _result(_decode_reply(text, "kv.get"))
        return _base64.b64decode(r.get("value") or "") if r.get("found") else None

    def get_str(self, key):
        """The value of key decoded as UTF-8, or None."""
        v = self.get(key)
        return None if v is None else v.decode()

    def put(self, key, value):
        if value.__class__ is not bytes:
            value = value.encode() if isinstance(value, str) else bytes(value)
        b64 = _b2a(value, newline=False).decode()
        t = _transport or _get()
        if key.__class__ is not str or t.__class__ is not _Device:
            call("kv.put", {"key": key, "value": b64})
            return
        text = t.line(('{"op":"kv.put","req":{"key":' + _quote(key) + ',"value":"' + b64 + '"}}\n').encode(), "kv.put")
        if text != _EMPTY_REPLY:
            _result(_decode_reply(text, "kv.put"))

    def delete(self, key):
        """Remove key; True if it existed."""
        return call("kv.delete", {"key": key}).get("deleted", False)

    def list(self, prefix="", after="", limit=0):
        """(keys, more): keys after `after` starting with prefix, in order."""
        r = call("kv.list", {"prefix": prefix, "after": after, "limit": limit})
        return r.get("keys") or [], r.get("more", False)


def _level(level):
    """The method of _Log that writes a record at level: one function per
    level, so a record costs one Python call."""
    head = '{"level":"' + level + '","message":'

    def write(self, message, **fields):
        if message.__class__ is not str:
            message = str(message)
        if not fields:
            req = head + _quote(message) + "}"
        else:
            req = head + _quote(message) + ',"fields":' + _encode("log.write", "the record's fields", fields) + "}"
        t = _transport or _get()
        if t.__class__ is _Device:
            # A log record's reply says nothing the caller uses, and
            # waiting for it costs most of the op: the host logs it (or
            # refuses it, in its own log and audit) without answering.
            t.tell(('{"op":"log.write","noreply":true,"req":' + req + "}\n").encode())
        else:
            _call_raw("log.write", req)

    write.__name__, write.__qualname__ = level, "_Log." + level
    return write


class _Log:
    """The host's structured log; records carry the module, the caller and
    the correlation id. Keyword arguments become fields."""

    debug = _level("debug")
    info = _level("info")
    warn = _level("warn")
    error = _level("error")


kv = _KV()
log = _Log()


_config = {}
_MISSING = object()


def config(key, default=None):
    """One value of the module's configuration, or default. The
    configuration is fixed for as long as the module is loaded, so a value
    is asked of the host once per instance and kept."""
    v = _config.get(key)
    if v is None:
        r = call("config.get", {"key": key})
        v = _config[key] = r.get("value", "") if r.get("found") else _MISSING
    return default if v is _MISSING else v


class Principal:
    """Who an invocation runs for, as caller() returns it: .user and .org
    (as the host authenticated them), .roles (a list, empty when none) and
    .correlation_id (what the host's log records and audit events carry)."""

    __slots__ = ("user", "org", "roles", "correlation_id")

    def __init__(self, w):
        user, org = w.get("user"), w.get("org")
        if user.__class__ is not str or not user or org.__class__ is not str or not org:
            raise MoatError("internal", "op moat.caller: the reply names no user or organization")
        roles = w.get("roles") or []
        if roles.__class__ is not list or any(r.__class__ is not str for r in roles):
            raise MoatError("internal", "op moat.caller: the reply's roles are not a list of strings")
        self.user, self.org, self.roles = user, org, roles
        self.correlation_id = w.get("correlation_id", "")

    def has_role(self, role):
        """Whether the principal holds role."""
        return role in self.roles

    def __repr__(self):
        return f"Principal(user={self.user!r}, org={self.org!r}, roles={self.roles!r}, correlation_id={self.correlation_id!r})"


def caller():
    """Who the invocation runs for (the op moat.caller), a Principal. It
    needs no grant and is asked anew on every call (a resident instance or
    a native worker serves many callers). The principal is the host's,
    never anything in the input: key per-user data by caller().user, not by
    a user id the caller sends, which anyone can write."""
    return Principal(call("moat.caller", {}))


# --- db ---------------------------------------------------------------


class Doc:
    """A stored document: .doc, its fields (a dict), and what the host keeps
    beside it: .id, .version (1 on insert, one more on every update), .owner
    (the user who inserted it), .created and .updated (RFC 3339 in UTC,
    millisecond precision, as the host writes every time)."""

    __slots__ = ("id", "version", "owner", "created", "updated", "doc")

    def __init__(self, w):
        self.id = w.get("id", "")
        self.version = w.get("version", 0)
        self.owner = w.get("owner", "")
        self.created = w.get("created", "")
        self.updated = w.get("updated", "")
        self.doc = w.get("doc") or {}

    def __repr__(self):
        return f"Doc(id={self.id!r}, version={self.version}, owner={self.owner!r}, doc={self.doc!r})"


class Page:
    """One page of a query: .docs (a list of Doc) and .next, the cursor of
    the next page ("" on the last). Iterating a Page iterates its docs."""

    __slots__ = ("docs", "next")

    def __init__(self, docs, next_):
        self.docs, self.next = docs, next_

    def __iter__(self):
        return iter(self.docs)

    def __len__(self):
        return len(self.docs)

    def __repr__(self):
        return f"Page({len(self.docs)} docs, next={self.next!r})"


def _conditions(op, where):
    """where as the wire's [field, op, value] arrays; a malformed one is
    refused here, naming it, before anything is sent."""
    if where is None:
        return []
    if isinstance(where, (str, bytes)) or not hasattr(where, "__iter__"):
        raise MoatError("invalid_argument", f"op {op}: where is a list of (field, op, value) conditions, not a {type(where).__name__}")
    out = []
    for i, c in enumerate(where):
        if isinstance(c, (str, bytes)) or not hasattr(c, "__len__") or len(c) != 3 or not isinstance(c[0], str) or not isinstance(c[1], str):
            raise MoatError("invalid_argument", f"op {op}: condition {i} is {c!r}; write (field, op, value), like (\"done\", \"=\", False)")
        out.append([c[0], c[1], c[2]])
    return out


class _DB:
    """The module's documents: JSON objects in the models its moat.yaml
    declares (models:), each granted by name (capabilities: db: [notes]).
    The host checks every document against its model and scopes every op
    to the caller's organization (and, in a model with scope: user, to the
    caller): another organization's or user's document is not found. Time
    fields are RFC 3339 strings; a datetime (with a time zone) is sent as
    one. The types, filter operators and limits are in abi/db.go."""

    def insert(self, model, doc):
        """Store doc (a dict) as a new document of model: (id, version)."""
        r = call("db.insert", {"model": model, "doc": doc})
        return r.get("id", ""), r.get("version", 0)

    def get(self, model, id):  # noqa: A002 - the wire's name
        """The document id of model as a Doc, or None when the caller's
        scope holds none."""
        r = call("db.get", {"model": model, "id": id})
        return Doc(r) if r.get("found") else None

    def query(self, model, where=None, order=None, limit=0, after=""):
        """One page of the documents of model for which every condition of
        where holds: a list of (field, op, value), op one of = != < <= > >=
        in prefix contains. order names fields, "-field" descending (ties,
        and no order, go by id); limit is the page size (0: the host's
        default, 100); after is the .next of the previous page."""
        req = {"model": model, "where": _conditions("db.query", where), "order": list(order or []), "limit": limit, "after": after}
        r = call("db.query", req)
        return Page([Doc(d) for d in r.get("docs") or []], r.get("next", ""))

    def update(self, model, id, set=None, unset=None, version=0):  # noqa: A002 - the wire's names
        """Change the document id of model: set's fields (a dict) replace
        theirs, unset's (a list of names) are removed. With version not 0
        the document must still be at that version, or MoatError conflict
        is raised. Returns the new version."""
        req = {"model": model, "id": id, "version": version}
        if set is not None:
            req["set"] = set
        if unset:
            req["unset"] = list(unset)
        return call("db.update", req).get("version", 0)

    def delete(self, model, id, version=0):  # noqa: A002 - the wire's name
        """Remove the document id of model; True if it was there. With
        version not 0 it must still be at that version (else conflict)."""
        return call("db.delete", {"model": model, "id": id, "version": version}).get("deleted", False)

    def count(self, model, where=None):
        """How many documents of model match where (as for query)."""
        return call("db.count", {"model": model, "where": _conditions("db.count", where)}).get("count", 0)


# --- knowledge --------------------------------------------------------


class Hit:
    """A document found: .id, .score (higher is better; comparable only
    within one search), .snippet (its text around the terms found) and
    .meta (a dict)."""

    __slots__ = ("id", "score", "snippet", "meta")

    def __init__(self, w):
        self.id = w.get("id", "")
        self.score = w.get("score", 0.0)
        self.snippet = w.get("snippet", "")
        self.meta = w.get("meta") or {}

    def __repr__(self):
        return f"Hit(id={self.id!r}, score={self.score:.4g}, snippet={self.snippet!r})"


class _Knowledge:
    """The module's knowledge: documents of text with metadata in named
    collections, searched by ranked full text, scoped by the host to the
    caller's organization and this module (not to the user: a plugin whose
    documents are a user's filters by meta). A module reaches only the
    collections its grants name (capabilities: knowledge: [notes]). Words,
    queries, meta and limits: abi/knowledge.go."""

    def add(self, collection, id, text, meta=None):  # noqa: A002 - the wire's name
        """Store text under id in collection, replacing the document of that
        id there; meta is a flat dict of str, int, float or bool. True if it
        replaced one."""
        req = {"collection": collection, "id": id, "text": text}
        if meta:
            req["meta"] = meta
        return call("knowledge.add", req).get("replaced", False)

    def delete(self, collection, id):  # noqa: A002 - the wire's name
        """Remove the document id from collection; True if it existed."""
        return call("knowledge.delete", {"collection": collection, "id": id}).get("deleted", False)

    def search(self, collection, query, limit=0, filter=None):  # noqa: A002 - the wire's name
        """The documents of collection holding every word of query whose
        meta holds every key of filter with an equal value, best first, at
        most limit (0: 10; at most 50) of them: a list of Hit. query is
        plain text: quotes and operators are not syntax."""
        req = {"collection": collection, "query": query, "limit": limit}
        if filter:
            req["filter"] = filter
        return [Hit(h) for h in call("knowledge.search", req).get("hits") or []]


# --- tasks ------------------------------------------------------------


class TaskStatus:
    """A task's state: .state (queued, running, done, failed, cancelled),
    .attempts, .max_attempts, .result (the output of the run that succeeded,
    bytes), .error and .code (the last failure), .run_at (RFC 3339: when a
    queued task runs next)."""

    __slots__ = ("state", "attempts", "max_attempts", "result", "error", "code", "run_at")

    def __init__(self, w):
        self.state = w.get("state", "")
        self.attempts = w.get("attempts", 0)
        self.max_attempts = w.get("max_attempts", 0)
        self.result = _base64.b64decode(w.get("result") or "")
        self.error = w.get("error", "")
        self.code = w.get("code", "")
        self.run_at = w.get("run_at", "")

    def __repr__(self):
        return f"TaskStatus(state={self.state!r}, attempts={self.attempts}/{self.max_attempts}, code={self.code!r})"


def _duration(d):
    """A delay as Go's duration syntax: seconds (int or float), a
    timedelta, or already a str like "90s" or "2h30m"."""
    if isinstance(d, str):
        return d
    if isinstance(d, _dt.timedelta):
        d = d.total_seconds()
    if isinstance(d, bool) or not isinstance(d, (int, float)):
        raise MoatError("invalid_argument", f"op task.enqueue: delay is seconds, a timedelta or a str like \"90s\", not {d!r}")
    if isinstance(d, int):
        return f"{d}s"
    return ("%.9f" % d).rstrip("0").rstrip(".") + "s"  # Go reads no exponent


class _Tasks:
    """Background runs of this module's own actions (capabilities: tasks:
    true). A task runs later, on whichever host claims it, as the caller
    whose invocation enqueued it and with its correlation id; a failed
    attempt is retried with backoff up to max_attempts. It runs at least
    once: an action a task runs should be safe to repeat."""

    def enqueue(self, action, input=None, delay=None, at=None, max_attempts=0, key=""):  # noqa: A002 - the wire's name
        """Queue a run of action with input (bytes, str as UTF-8, None, or
        a JSON value), now, after delay (seconds, a timedelta or "90s"), or
        at a time (an aware datetime or RFC 3339); at most 30 days ahead.
        max_attempts is 1 to 25 (0: 3). A key makes it idempotent: while a
        task of this module and organization holds it, enqueue returns that
        task. Returns (id, existing)."""
        req = {"action": action, "max_attempts": max_attempts, "key": key}
        data = _output(input)
        if data:
            req["input"] = _base64.b64encode(data).decode()
        if delay is not None:
            req["delay"] = _duration(delay)
        if at is not None:
            req["at"] = at
        r = call("task.enqueue", req)
        return r.get("id", ""), r.get("existing", False)

    def status(self, id):  # noqa: A002 - the wire's name
        """The TaskStatus of a task of this module; MoatError not_found for
        any other id."""
        return TaskStatus(call("task.status", {"id": id}))

    def cancel(self, id):  # noqa: A002 - the wire's name
        """Cancel a queued or running task: (cancelled, state). A task that
        already finished is left as it is."""
        r = call("task.cancel", {"id": id})
        return r.get("cancelled", False), r.get("state", "")


db = _DB()
knowledge = _Knowledge()
tasks = _Tasks()


# --- http -------------------------------------------------------------


class HTTPResponse:
    """The final response of http.fetch, after redirects: .status, .headers
    (a dict, lower-case names; a header sent more than once is its values
    joined by ", "), .body (bytes) and .url (where the body came from). A
    status of 4xx or 5xx is a response, not an error."""

    __slots__ = ("status", "headers", "body", "url")

    def __init__(self, w):
        self.status = w.get("status", 0)
        self.headers = w.get("headers") or {}
        self.body = _base64.b64decode(w.get("body") or "")
        self.url = w.get("url", "")

    def header(self, name, default=None):
        """The value of header name (any case), or default."""
        return self.headers.get(name.lower(), default)

    @property
    def text(self):
        """The body decoded as UTF-8."""
        return self.body.decode()

    def json(self):
        """The body parsed as JSON."""
        return _json.loads(self.body)

    def __repr__(self):
        return f"HTTPResponse(status={self.status}, {len(self.body)} bytes, url={self.url!r})"


def _bytes(op, what, v):
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    raise MoatError("invalid_argument", f"op {op}: {what} is bytes or str, not a {type(v).__name__}")


def _timeout_ms(op, timeout):
    """A timeout in seconds (int, float or timedelta) as whole milliseconds,
    rounded up."""
    if isinstance(timeout, _dt.timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0 or timeout == float("inf"):
        raise MoatError("invalid_argument", f"op {op}: timeout is seconds (0 to 60) or a timedelta, not {timeout!r}")
    return -int(-timeout * 1000 // 1)


class _HTTP:
    """HTTP requests the host sends for the plugin (the op http.fetch). The
    host, not the plugin, makes the connection: the URL must be covered by
    one of the module's http grants (capabilities: http:
    ["https://api.example.com:443"]), on every redirect too, and the
    address it reaches is checked after DNS, so loopback, private and
    metadata addresses are reached only where a grant names them. Headers
    a grant injects (a secret as a bearer token) are added by the host and
    never shown to the plugin. A URL no grant covers raises MoatError
    denied, a body over its limit too_large, a server out of reach or too
    slow unavailable. Limits: abi/http.go."""

    def fetch(self, url, method=None, headers=None, body=None, timeout=None, max_bytes=0):
        """Send a request and return its HTTPResponse. method defaults to
        GET; headers is a dict of str; body bytes or str (sent as UTF-8),
        at most 2 MiB; timeout bounds the whole request in seconds (None:
        10; at most 60); max_bytes the response body (0: 1 MiB; at most
        2 MiB)."""
        req = {"url": url}
        if method:
            req["method"] = method
        if headers:
            if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
                raise MoatError("invalid_argument", "op http.fetch: headers is a dict of str names to str values")
            req["headers"] = headers
        if body is not None:
            data = _bytes("http.fetch", "the body", body)
            if data:
                req["body"] = _base64.b64encode(data).decode()
        if timeout is not None:
            ms = _timeout_ms("http.fetch", timeout)
            if ms:
                req["timeout_ms"] = ms
        if max_bytes:
            req["max_bytes"] = max_bytes
        return HTTPResponse(call("http.fetch", req))

    def get(self, url, **kw):
        """fetch with GET."""
        return self.fetch(url, **kw)

    def request(self, input):
        """The request of an action bound to an HTTP route (moat.yaml
        routes:; abi/route.go), read from the action's input (bytes or
        str): a RouteRequest. Raises MoatError invalid_argument when the
        input is not one (the action was invoked directly)."""
        try:
            r = _json.loads(input)
        except (ValueError, TypeError):
            r = None
        if not isinstance(r, dict) or r.get("moat") != "http.request":
            raise MoatError("invalid_argument", "the input is not an HTTP request of a route (moat.yaml routes:)")
        return RouteRequest(r)

    def response(self, status=None, content_type=None, headers=None, body=None, json=None, media=None):
        """The output that answers an action's route: status (default 200),
        content_type (default text/plain), headers (only those abi/route.go
        allows: Location, Cache-Control, ETag, ...; never Set-Cookie), and
        one of body (str or bytes), json (any JSON value, sent as
        application/json) or media (a media item's id)."""
        r = {"moat": "http.response"}
        if status is not None:
            r["status"] = status
        if headers:
            if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
                raise MoatError("invalid_argument", "http.response: headers is a dict of str names to str values")
            r["headers"] = headers
        if json is not None:
            r["content_type"] = content_type or "application/json"
            r["body"] = _json.dumps(json, separators=(",", ":"))
        elif body is not None:
            if isinstance(body, str):
                r["body"] = body
            else:
                r["body_base64"] = _base64.b64encode(_bytes("http.response", "the body", body)).decode()
        if content_type is not None and "content_type" not in r:
            r["content_type"] = content_type
        if media is not None:
            r["media"] = str(media)
        return _json.dumps(r)


class RouteRequest:
    """The HTTP request of a route, as http.request reads it: .route, .auth
    (key, public or webhook), .method, .path, .params, .query (each name's
    values in a list), .headers (lower-case names; never Authorization or
    Cookie), .remote (a public or webhook caller's address) and .body
    (bytes)."""

    __slots__ = ("route", "auth", "method", "path", "params", "query", "headers", "remote", "body")

    def __init__(self, r):
        self.route = r.get("route", "")
        self.auth = r.get("auth", "")
        self.method = r.get("method", "")
        self.path = r.get("path", "")
        self.params = r.get("params") or {}
        self.query = r.get("query") or {}
        self.headers = r.get("headers") or {}
        self.remote = r.get("remote", "")
        b64 = r.get("body_base64")
        self.body = _base64.b64decode(b64) if b64 else (r.get("body") or "").encode()

    def header(self, name, default=None):
        """The value of header name (any case), or default."""
        return self.headers.get(name.lower(), default)

    def param(self, name, default=None):
        """The path parameter name, or default."""
        return self.params.get(name, default)

    def query_value(self, name, default=None):
        """The first value of the query parameter name, or default."""
        v = self.query.get(name)
        return v[0] if v else default

    @property
    def text(self):
        """The body decoded as UTF-8."""
        return self.body.decode()

    def json(self):
        """The body parsed as JSON."""
        return _json.loads(self.body)


# --- media ------------------------------------------------------------


class MediaInfo:
    """A stored media item: .id (the hex SHA-256 of the bytes kept), .type
    ("image/png", "application/pdf"...), .size, and .width and .height (0
    for what is not an image)."""

    __slots__ = ("id", "type", "size", "width", "height")

    def __init__(self, w):
        self.id = w.get("id", "")
        self.type = w.get("type", "")
        self.size = w.get("size", 0)
        self.width = w.get("width", 0)
        self.height = w.get("height", 0)

    def __repr__(self):
        return f"MediaInfo(id={self.id!r}, type={self.type!r}, size={self.size}, {self.width}x{self.height})"


class _Media:
    """The organization's media: images, audio, video and PDF documents the
    host fetches, checks and keeps, and that clients receive only from moat
    (GET /v1/media/{id} or a signed URL), never from where they came from
    (capabilities: media: true; fetch needs an http grant covering the URL
    as well). The host decides what an item is from its bytes: bytes of no
    allowed type, or of another type than the one given, raise MoatError
    invalid_argument. JPEG and PNG images are kept without their metadata
    (EXIF, GPS). Limits: abi/media.go."""

    CONTAIN, COVER, FILL = "contain", "cover", "fill"

    def fetch(self, url):
        """Have the host download url (under the module's http grants) and
        keep it: its MediaInfo. get reads the bytes."""
        return MediaInfo(call("media.fetch", {"url": url}))

    def put(self, data, type=None):  # noqa: A002 - the wire's name
        """Keep data (bytes, at most 2 MiB): its MediaInfo. type, when
        given, must be what the bytes are ("image/png")."""
        req = {"data": _base64.b64encode(_bytes("media.put", "data", data)).decode()}
        if type:
            req["type"] = type
        return MediaInfo(call("media.put", req))

    def get(self, id):  # noqa: A002 - the wire's name
        """(MediaInfo, bytes) of an item of the caller's organization. An
        item over 2 MiB raises too_large (clients read it from
        /v1/media/{id}); an id of no item of the organization not_found."""
        r = call("media.get", {"id": id})
        return MediaInfo(r), _base64.b64decode(r.get("data") or "")

    def info(self, id):  # noqa: A002 - the wire's name
        """The MediaInfo of an item of the caller's organization."""
        return MediaInfo(call("media.info", {"id": id}))

    def thumbnail(self, id, width, height, fit=None):  # noqa: A002 - the wire's name
        """Make (and keep) a thumbnail of the image item id, at most width x
        height (each 1 to 2048), fitted by fit: "contain" (None: the whole
        image, aspect kept), "cover" (the box filled, the overflow cut) or
        "fill" (stretched). Its MediaInfo."""
        req = {"id": id, "width": width, "height": height}
        if fit:
            req["fit"] = fit
        return MediaInfo(call("media.thumbnail", req))


# --- ai ---------------------------------------------------------------


class Usage:
    """What a model call cost: .input_tokens and .output_tokens."""

    __slots__ = ("input_tokens", "output_tokens")

    def __init__(self, w):
        self.input_tokens = (w or {}).get("input_tokens", 0)
        self.output_tokens = (w or {}).get("output_tokens", 0)

    def __repr__(self):
        return f"Usage(input_tokens={self.input_tokens}, output_tokens={self.output_tokens})"


class Completion:
    """A model's reply: .text, .usage (Usage) and .model_call_id (the model
    call's id in the audit trail)."""

    __slots__ = ("text", "usage", "model_call_id")

    def __init__(self, w):
        self.text = w.get("text", "")
        self.usage = Usage(w.get("usage"))
        self.model_call_id = w.get("model_call_id", "")

    def json(self):
        """The text parsed as JSON: the reply of a call with a json_schema."""
        return _json.loads(self.text)

    def __repr__(self):
        return f"Completion(text={self.text!r}, {self.usage!r}, model_call_id={self.model_call_id!r})"


class Embedding:
    """One vector per input, in order: .vectors (lists of float), .usage and
    .model_call_id."""

    __slots__ = ("vectors", "usage", "model_call_id")

    def __init__(self, w):
        self.vectors = w.get("vectors") or []
        self.usage = Usage(w.get("usage"))
        self.model_call_id = w.get("model_call_id", "")


def _messages(messages):
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    out = []
    for i, m in enumerate(messages or []):
        if isinstance(m, dict):
            role, content = m.get("role"), m.get("content")
        elif isinstance(m, (tuple, list)) and len(m) == 2:
            role, content = m
        else:
            role = content = None
        if not isinstance(role, str) or not isinstance(content, str):
            raise MoatError("invalid_argument", f"op ai.complete: message {i} is {m!r}; write {{\"role\": \"user\", \"content\": \"...\"}} or (\"user\", \"...\")")
        out.append({"role": role, "content": content})
    return out


class _AI:
    """Model calls through the providers the operator configured
    (OpenAI-compatible APIs), by the operator's aliases, each granted by
    name (capabilities: ai: [small-chat]). Token budgets per organization
    and per module per day are checked before each call: one over a budget
    raises MoatError denied, naming it. Every call is audited as a model
    call. Limits: abi/ai.go."""

    def complete(self, model, messages, max_tokens=0, temperature=None, json_schema=None):
        """Ask model to continue messages: a list of {"role", "content"}
        dicts or (role, content) pairs (roles system, user, assistant), or
        a str, one user message. max_tokens is 1 to 32768 (0: the
        provider's default); temperature 0 to 2 (None: the provider's);
        json_schema a JSON Schema dict the reply must match (read it with
        .json()). Returns a Completion."""
        req = {"model": model, "messages": _messages(messages)}
        if max_tokens:
            req["max_tokens"] = max_tokens
        if temperature is not None:
            if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
                raise MoatError("invalid_argument", f"op ai.complete: the temperature is a number from 0 to 2, not {temperature!r}")
            req["temperature"] = temperature
        if json_schema is not None:
            if not isinstance(json_schema, dict):
                raise MoatError("invalid_argument", f"op ai.complete: json_schema is a dict (a JSON Schema object), not a {type(json_schema).__name__}")
            req["json_schema"] = json_schema
        return Completion(call("ai.complete", req))

    def embed(self, model, input):  # noqa: A002 - the wire's name
        """Ask model for one vector per input (a list of str, or a str):
        an Embedding."""
        inputs = [input] if isinstance(input, str) else list(input)
        if not all(isinstance(s, str) for s in inputs):
            raise MoatError("invalid_argument", "op ai.embed: input is a list of str, or a str")
        e = Embedding(call("ai.embed", {"model": model, "input": inputs}))
        if len(e.vectors) != len(inputs):
            raise MoatError("internal", f"op ai.embed: {len(inputs)} inputs but the host returned {len(e.vectors)} vectors")
        return e


http = _HTTP()
media = _Media()
ai = _AI()
