package python_test

import (
	"context"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/policy"
)

// TestResidentOutOfMemoryReplacesTheInstance: a caller whose handler fills
// the resident instance's memory (its globals keep what filled it) must
// not leave that instance to the next caller, another user, whose call
// would then fail for want of memory: the instance that hit its memory
// limit is discarded, whatever its handler made of the MemoryError, and
// the next call gets a new one.
func TestResidentOutOfMemoryReplacesTheInstance(t *testing.T) {
	const main = `import moat

HOARD = []
CALLS = 0


def count():
    global CALLS
    CALLS += 1
    return CALLS


@moat.action("hoard")
def hoard(inp):
    # Globals fill the memory: MemoryError, uncaught.
    count()
    while True:
        HOARD.append(bytearray(1 << 20))


@moat.action("hoard_quietly")
def hoard_quietly(inp):
    # The handler survives its MemoryError and answers: the memory stays
    # full all the same.
    count()
    try:
        while True:
            HOARD.append(bytearray(1 << 20))
    except MemoryError:
        pass
    return "ok"


@moat.action("hoard_some")
def hoard_some(inp):
    # 8 MiB more a call: the memory fills over several calls.
    count()
    HOARD.append(bytearray(8 << 20))
    return str(len(HOARD))


@moat.action("work")
def work(inp):
    # Another user's call, which needs a few MiB: the answer and how many
    # calls this instance has served.
    return "%d %d" % (len(bytearray(4 << 20)), count())
`
	y := "name: py-oom\nversion: 0.1.0\nlanguage: python\nkind: moat\nlimits: {memory: 64MiB}\nactions:\n"
	for _, a := range []string{"hoard", "hoard_quietly", "hoard_some", "work"} {
		y += "  - {name: " + a + ", timeout: 10s}\n"
	}
	mf, err := policy.ParseManifest("moat.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m := suite.LoadScript(t, mf, "main.py", main)
	defer m.Close(ctx)
	hog, other := policy.Principal{User: "mallory", Org: "acme"}, policy.Principal{User: "ann", Org: "acme"}
	call := func(p policy.Principal, action string) (string, error) {
		res, err := m.Invoke(ctx, host.Request{Action: action, Principal: p})
		return string(res.Output), err
	}
	for _, tt := range []struct {
		name    string
		action  string
		calls   int      // how many times the hog calls it
		want    abi.Code // the last hog call's code ("" ok)
		wantOut string   // the last hog call's output, when ok
	}{
		{name: "globals fill the memory, MemoryError uncaught", action: "hoard", calls: 1, want: abi.CodeMemoryLimit},
		{name: "the handler catches its MemoryError and answers", action: "hoard_quietly", calls: 1, wantOut: "ok"},
		{name: "the memory fills over many calls", action: "hoard_some", calls: 20, want: abi.CodeMemoryLimit},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// A warm instance, which has served one call.
			if out, err := call(other, "work"); err != nil || !strings.HasPrefix(out, "4194304 ") {
				t.Fatalf("work before: %q, %v", out, err)
			}
			var out string
			var err error
			for i := 0; i < tt.calls; i++ {
				if out, err = call(hog, tt.action); err != nil {
					break
				}
			}
			if abi.CodeOf(err) != tt.want || tt.want == "" && out != tt.wantOut {
				t.Fatalf("%s: %q, %v; want %q %q", tt.action, out, err, tt.want, tt.wantOut)
			}
			if tt.want == abi.CodeMemoryLimit && !strings.Contains(err.Error(), "MemoryError") {
				t.Errorf("%s: %v; want the guest's MemoryError named", tt.action, err)
			}
			// The next caller, another user: a correct answer, from a new
			// instance (its first call), the hoarding one discarded.
			if out, err := call(other, "work"); err != nil || out != "4194304 1" {
				t.Fatalf("the next user's call after %s: %q, %v; want \"4194304 1\" from a new instance", tt.action, out, err)
			}
			if n := m.IdleInstances(); n != 1 {
				t.Errorf("%d idle instances after calls one at a time, want 1", n)
			}
		})
	}
}
