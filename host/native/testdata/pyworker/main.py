"""A native worker for host/native's plugin tests, on moat.py: each action
exercises the SDK, the pipe transport or one kernel layer, and answers
what happened (errno names, not messages, so the tests can assert them)."""
import errno
import json
import os
import socket
import time

import moat


def errname(e):
    return errno.errorcode.get(e.errno, str(e.errno))


@moat.action("echo")
def echo(inp):
    return bytes(inp)


@moat.action("whoami")
def whoami(inp):
    return {"uid": os.getuid(), "home": os.environ.get("HOME"), "cwd": os.getcwd(),
            "transport": os.environ.get("MOAT_TRANSPORT"), "correlation_id": inp.correlation_id}


@moat.action("ops")
def ops(inp):
    moat.log.info("ops called", n=1)
    n = int(moat.kv.get_str("count") or "0") + 1
    moat.kv.put("count", str(n))
    return {"count": n, "greeting": moat.config("greeting", "none")}


@moat.action("call")
def call(inp):
    """inp: [op, request]: any op of the table, as tests of a new op family need."""
    op, req = inp.json()
    return moat.call(op, req)


@moat.action("denied")
def denied(inp):
    moat.kv.delete("count")  # the test dispatcher denies kv.delete
    return "not reached"


@moat.action("invalid")
def invalid(inp):
    raise moat.MoatError("invalid_argument", "the input must be a number")


@moat.action("boom")
def boom(inp):
    raise ValueError("deliberate")


@moat.action("crash")
def crash(inp):
    os._exit(3)


@moat.action("sleep")
def sleep(inp):
    time.sleep(float(inp.text))
    return str(os.getuid())


@moat.action("hang")
def hang(inp):
    time.sleep(3600)


@moat.action("spin")
def spin(inp):
    end = time.process_time() + float(inp.text)
    while time.process_time() < end:
        pass
    return str(time.process_time())


@moat.action("probe")
def probe(inp):
    """inp: [what, arg...]; answers "ok" or the errno name."""
    what, *args = inp.json()
    try:
        if what == "read":
            with open(args[0], "rb") as f:
                f.read(1)
        elif what == "write":
            with open(args[0], "wb") as f:
                f.write(b"x")
        elif what == "cat":
            with open(args[0]) as f:
                return "ok " + f.read()
        elif what == "mkdir":
            os.mkdir(args[0])
        elif what == "symlink":
            os.symlink(args[0], args[1])
        elif what == "mkfifo":
            os.mkfifo(args[0])
        elif what == "tcp":
            s = socket.create_connection((args[0], int(args[1])), timeout=2)
            s.close()
        elif what == "udp":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.sendto(b"x", (args[0], int(args[1])))
            s.close()
        elif what == "forkbomb":
            n = 0
            try:
                while True:
                    if os.fork() == 0:
                        time.sleep(3600)
                        os._exit(0)
                    n += 1
            except OSError as e:
                return f"{errname(e)} after {n}"
        else:
            return "unknown probe " + what
    except OSError as e:
        return errname(e)
    return "ok"


@moat.action("hog")
def hog(inp):
    keep = []
    while True:
        keep.append(b"\x01" * (16 << 20))  # touched: counted by the cgroup


@moat.action("numpy")
def numpy_sum(inp):
    import numpy as np
    return str(int(np.arange(int(inp.text)).sum()))


moat.serve()
