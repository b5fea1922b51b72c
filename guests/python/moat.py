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
  transport ($MOAT_OPS, /dev/moat/ops); serve() runs the action named by
  $MOAT_ACTION once, on stdin, and writes the output to stdout.

A failed op raises MoatError, whose .code is the host's (denied,
not_found, invalid_argument, too_large, unavailable...). A handler that
raises MoatError fails its invocation with that code; any other exception
fails it with guest_error, and a native worker keeps serving.
"""

import base64 as _base64
import io as _io
import json as _json
import os as _os
import sys as _sys
import traceback as _traceback

__all__ = ["MoatError", "Input", "call", "kv", "log", "config", "action", "serve"]

ABI_VERSION = 1  # abi.Version
MAX_LINE = 16 << 20  # abi.MaxPipeLine: a longer line ends the worker
_PIPE_FROM_HOST, _PIPE_TO_HOST = 3, 4  # abi.PipeFromHostFD, abi.PipeToHostFD


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

    def call(self, op, req):
        line = _json.dumps({"op": op, "req": req}, separators=(",", ":")).encode() + b"\n"
        view = memoryview(line)
        while view:
            view = view[self._f.write(view):]
        reply = bytearray()
        while not reply.endswith(b"\n"):
            chunk = self._f.read(65536)
            if not chunk:
                raise MoatError("internal", f"no reply from the host for op {op}")
            reply += chunk
        return _json.loads(reply)


class _Lines:
    """JSON lines both ways: the pipe transport's framing. A resident
    interpreter could speak it over another pair of files."""

    def __init__(self, rfile, wfile):
        self._r, self._w = rfile, wfile
        self._next = 0
        self.busy = False  # an invocation runs: ops may be called

    def send(self, msg):
        line = _json.dumps(msg, separators=(",", ":")).encode() + b"\n"
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
        self.send({"type": "call", "id": self._next, "op": op, "req": req})
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


def call(op, req=None):
    """Run one op by name and return its decoded response (a dict)."""
    msg = _get().call(op, req or {})
    err = msg.get("error")
    if err:
        raise MoatError(err.get("code", "internal"), err.get("message", ""))
    return msg.get("resp") or {}


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
    """Run a handler: (output, None) or (None, {"code", "message"})."""
    fn = _actions.get(name)
    if fn is None:
        return None, {"code": "no_such_action", "message": f"no action {name!r} is registered (moat.action); registered: {sorted(_actions)}"}
    inp = Input(data)
    inp.action, inp.correlation_id = name, correlation_id
    try:
        return _output(fn(inp)), None
    except MoatError as e:
        return None, {"code": e.code, "message": e.message}
    except _ProtocolError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of the handler is the action's
        _traceback.print_exc(file=_sys.stderr)
        return None, {"code": "guest_error", "message": f"{type(e).__name__}: {e}"}


def serve():
    """Serve the registered actions: for ever on the pipe (a native worker),
    or the one action of this run on the device file (a WASI script)."""
    if not _actions:
        raise RuntimeError("moat.serve(): no actions registered; register them with moat.action first")
    if _on_pipe():
        _serve_lines(_get())
    else:
        _serve_once()


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


def _serve_once():
    name = _os.environ.get("MOAT_ACTION", "")
    out, err = _run(name, _sys.stdin.buffer.read())
    if err is not None:
        print(f"{err['code']}: {err['message']}", file=_sys.stderr)
        _sys.exit(1)
    _sys.stdout.buffer.write(out + b"\n")  # the host drops one trailing newline
    _sys.stdout.flush()


# --- ops --------------------------------------------------------------


class _KV:
    """The module's key-value store, scoped by the host to the caller's
    organization and this module. Values are bytes; str is stored as UTF-8."""

    def get(self, key):
        """The value of key as bytes, or None."""
        r = call("kv.get", {"key": key})
        return _base64.b64decode(r.get("value") or "") if r.get("found") else None

    def get_str(self, key):
        """The value of key decoded as UTF-8, or None."""
        v = self.get(key)
        return None if v is None else v.decode()

    def put(self, key, value):
        if isinstance(value, str):
            value = value.encode()
        call("kv.put", {"key": key, "value": _base64.b64encode(bytes(value)).decode()})

    def delete(self, key):
        """Remove key; True if it existed."""
        return call("kv.delete", {"key": key}).get("deleted", False)

    def list(self, prefix="", after="", limit=0):
        """(keys, more): keys after `after` starting with prefix, in order."""
        r = call("kv.list", {"prefix": prefix, "after": after, "limit": limit})
        return r.get("keys") or [], r.get("more", False)


class _Log:
    """The host's structured log; records carry the module, the caller and
    the correlation id. Keyword arguments become fields."""

    def _write(self, level, message, fields):
        call("log.write", {"level": level, "message": str(message), "fields": fields or None})

    def debug(self, message, **fields):
        self._write("debug", message, fields)

    def info(self, message, **fields):
        self._write("info", message, fields)

    def warn(self, message, **fields):
        self._write("warn", message, fields)

    def error(self, message, **fields):
        self._write("error", message, fields)


kv = _KV()
log = _Log()


def config(key, default=None):
    """One value of the module's configuration, or default."""
    r = call("config.get", {"key": key})
    return r.get("value", "") if r.get("found") else default
