"""moat — the moat guest SDK for Python (CPython 3.12 WASI running under moat).

    import moat
    n = int(moat.kv.get_str("count") or "0") + 1
    moat.kv.put("count", str(n))
    moat.log.info("counted", n=n)

Ops travel over the device-file transport: the host mounts a character
device at /dev/moat/ops ($MOAT_OPS) when it runs the script with the op
table enabled; each op is one JSON line written to it and one JSON line read
back. A failed op raises MoatError, whose .code is the host's (denied,
not_found, invalid_argument, too_large, unavailable...).
"""

import base64 as _base64
import io as _io
import json as _json
import os as _os

__all__ = ["MoatError", "call", "kv", "log", "config"]


class MoatError(Exception):
    """An op failed. code is the host's error code, message its reason."""

    def __init__(self, code, message=""):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message


_device = None


def _open():
    global _device
    if _device is None:
        path = _os.environ.get("MOAT_OPS")
        if not path:
            raise MoatError("unavailable", "the op table is not enabled for this run ($MOAT_OPS is unset)")
        try:
            _device = _io.open(path, "r+b", buffering=0)
        except OSError as e:
            raise MoatError("unavailable", f"cannot open {path}: {e.strerror}") from None
    return _device


def call(op, req=None):
    """Run one op by name and return its decoded response (a dict)."""
    f = _open()
    line = _json.dumps({"op": op, "req": req or {}}, separators=(",", ":")).encode() + b"\n"
    view = memoryview(line)
    while view:
        view = view[f.write(view):]
    reply = bytearray()
    while not reply.endswith(b"\n"):
        chunk = f.read(65536)
        if not chunk:
            raise MoatError("internal", f"no reply from the host for op {op}")
        reply += chunk
    msg = _json.loads(reply)
    err = msg.get("error")
    if err:
        raise MoatError(err.get("code", "internal"), err.get("message", ""))
    return msg.get("resp") or {}


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
