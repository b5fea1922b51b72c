# A session's code context (package server/sessions): one resident
# CPython instance whose module namespace persists between runs, as a
# notebook kernel's does. Each run's stdout and stderr are kept apart and
# returned with the repr of a final expression (the notebook's result),
# or, when the caller streams the run ("stream": true), written to the
# real stdout and stderr as the code prints (_Streamed) and not returned.
import ast
import gc
import io
import json
import os
import sys
import time
import traceback

import moat

_ns = {"__name__": "__main__", "__builtins__": __builtins__}
_count = 0
_HOME = "/home/user"
_env_set = False
_parked = None  # the op device a capture took out of the image (park)


class _Streamed(io.TextIOBase):
    """A run's sys.stdout or sys.stderr when its caller streams it: the
    text goes to the real descriptor (the host hands it on as it is
    written, host.Request.Output) a line at a time, or as the code
    flushes, and is not kept. Past the run's output limit the host fails
    the write, and this print and every later one of the run raise."""

    def __init__(self, fd):
        self._fd, self._pend, self._n, self._cut = fd, [], 0, False

    def writable(self):
        return True

    def write(self, s):
        if self._cut:
            raise OSError("moat: this run's output passed its limit; nothing more is printed")
        self._pend.append(s)
        self._n += len(s)
        if "\n" in s or self._n >= 8192:
            self.flush()
        return len(s)

    def flush(self):
        if not self._pend:
            return
        b = "".join(self._pend).encode("utf-8", "surrogateescape")
        self._pend, self._n = [], 0
        while b:
            try:
                n = os.write(self._fd, b)
            except OSError:
                n = 0
            if n <= 0:
                self._cut = True
                raise OSError("moat: this run's output passed its limit; nothing more is printed")
            b = b[n:]

    def getvalue(self):
        return ""


@moat.action("run")
def run(inp):
    global _count, _env_set, _parked
    _count += 1
    if _parked is not None and moat._transport is not _parked:
        # A copy's first run: the device the original had is held by the
        # captured frames, which never run again; its 64 KiB buffer is
        # let go (its descriptor is not closed: it may be this copy's).
        _parked._buf = bytearray(0)
        _parked = None
    req = json.loads(bytes(inp))
    if not _env_set:
        # The session's variables: not in the image every context starts
        # from, so given with the runs, and set once.
        os.environ.update(req.get("env") or {})
        _env_set = True
    if req.get("stream"):
        out, err = _Streamed(1), _Streamed(2)
    else:
        out, err = io.StringIO(), io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    result, error = None, None
    try:
        try:
            os.chdir(_HOME)
        except OSError:
            pass
        tree = ast.parse(req.get("code", ""), "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), _ns)
        if last is not None:
            v = eval(compile(last, "<cell>", "eval"), _ns)
            if v is not None:
                result = repr(v)
    except BaseException as e:  # SystemExit and KeyboardInterrupt too: the context lives on
        error = {"name": type(e).__name__, "value": str(e), "traceback": traceback.format_exc()}
    finally:
        sys.stdout, sys.stderr = saved
        for f in (out, err):
            try:
                f.flush()
            except OSError:
                pass
    return json.dumps({"stdout": out.getvalue(), "stderr": err.getvalue(), "result": result,
                       "error": error, "execution_count": _count})


@moat.action("park")
def park(inp):
    """Be captured for a fork or a pause (server/sessions/fork.go): between
    runs, with nothing open that the image cannot carry. The token and the
    address of the SDK's globals (where moat._resume runs in a copy) go on
    stdout, then a clock read, where the host copies this instance. The op
    device is closed in the image, not here: a copy opens its own."""
    tok = bytes(inp).decode()
    dev = moat._transport
    ops = os.environ.get("MOAT_OPS")
    # The files the code holds open (a descriptor WASI's fstat cannot tell
    # apart from a free one, so the file objects are looked for).
    for o in gc.get_objects():
        # The op device's are the SDK's (one per capture the state went
        # through: each copy opens its own, the old one never used again).
        if isinstance(o, io.FileIO) and not o.closed and o.name != ops and o.fileno() > 2:
            raise RuntimeError(f"the file {o.name!r} is open (descriptor {o.fileno()}); "
                               "a copy of this context could not use it: close it, then fork or pause")
    global _parked
    moat._transport, _parked = None, dev
    try:
        os.write(1, ("%s %d\n" % (tok, id(vars(moat)))).encode())
        time.time()
    finally:
        moat._transport, _parked = dev, None
    return "parked"
