package python_test

import (
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages/internal/interptest"
)

func TestResident(t *testing.T) {
	suite.TestResident(t, interptest.ResidentScripts{
		File: "main.py",
		Main: `import moat

calls = 0


@moat.action("echo")
def echo(inp):
    return bytes(inp)


@moat.action("count")
def count(inp):
    global calls
    calls += 1
    return str(calls)


@moat.action("fail")
def fail(inp):
    raise moat.MoatError("invalid_argument", "no thanks")


@moat.action("put")
def put(inp):
    moat.kv.put("k", bytes(inp))
    return moat.kv.get("k")


@moat.action("spin")
def spin(inp):
    while True:
        pass


@moat.action("nap")
def nap(inp):
    # CPython on WASI cannot sleep (ENOTSUP): it waits in the host
    # instead, an op after another.
    while True:
        moat.kv.get("k")


@moat.action("balloon")
def balloon(inp):
    a = []
    while True:
        a.append(bytearray(1 << 20))
`,
		TopLevelOp: `import moat

moat.kv.get("k")
moat.action("echo", lambda inp: bytes(inp))
`,
		Wrong: `import moat

moat.action("other", lambda inp: bytes(inp))
`,
		Classic: `import sys

sys.stdout.write(sys.stdin.read())
`,
	})
}

func TestResidentBulkPastDeadline(t *testing.T) {
	testenv.Timing(t)
	suite.TestResidentBulkPastDeadline(t, "main.py", `import moat


@moat.action("fill")
def fill(inp):
    m = memoryview(bytearray(32 << 20))
    while True:
        m[: 16 << 20] = m[16 << 20 :]


@moat.action("echo")
def echo(inp):
    return inp
`)
}
