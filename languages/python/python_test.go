package python_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/testenv"
)

func TestRun(t *testing.T) {
	tests := []struct {
		name       string
		files      []string
		opts       runOpts
		wantOut    string
		wantErrOut string
		wantCode   uint32
	}{
		{
			name: "stdin args env exit",
			files: []string{"main.py", `import os, sys
line = sys.stdin.readline().strip()
print("hello", line, ",".join(sys.argv[1:]), os.environ["GREETING"])
sys.exit(3)`},
			opts:     runOpts{Stdin: "world\n", Args: []string{"a", "-b"}, Env: map[string]string{"GREETING": "hi"}},
			wantOut:  "hello world a,-b hi\n",
			wantCode: 3,
		},
		{
			name:     "a sibling package and the standard library",
			files:    []string{"main.py", "from lib.util import twice\nimport json, hashlib\nprint(json.dumps({'n': twice(21)}), hashlib.sha256(b'').hexdigest()[:8])", "lib/__init__.py", "", "lib/util.py", "def twice(n):\n    return 2 * n\n"},
			wantOut:  `{"n": 42} e3b0c442` + "\n",
			wantCode: 0,
		},
		{
			name:       "syntax error",
			files:      []string{"main.py", "def f(:\n"},
			wantErrOut: "SyntaxError",
			wantCode:   1,
		},
		{
			name:       "uncaught exception",
			files:      []string{"main.py", "raise ValueError('boom')"},
			wantErrOut: "ValueError: boom",
			wantCode:   1,
		},
		{
			name:     "the source is read-only",
			files:    []string{"main.py", "try:\n    open('/src/new.txt', 'w')\n    print('written')\nexcept OSError:\n    print('refused')"},
			wantOut:  "refused\n",
			wantCode: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := run(t, build(t, tt.files...), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.Code != tt.wantCode || !strings.Contains(res.Stdout, tt.wantOut) || !strings.Contains(res.Stderr, tt.wantErrOut) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
					res.Code, res.Stdout, res.Stderr, tt.wantCode, tt.wantOut, tt.wantErrOut)
			}
		})
	}
}

func TestRunTimeout(t *testing.T) {
	testenv.Timing(t)
	res, err := run(t, build(t, "main.py", "print('started')\nwhile True:\n    pass"), runOpts{Limits: host.Limits{Timeout: 1e9}})
	if !errors.Is(err, host.ErrTimeout) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	_ = res
}

const kvManifest = `name: py-ops
version: 0.1.0
kind: wasi-command
capabilities: {kv: true}
config: {greeting: Hej}
`

// TestOps drives the SDK through the device file: kv, log and config
// reach the host's store and log, and an error carries its code.
func TestOps(t *testing.T) {
	script := `import moat
moat.kv.put("count", "41")
n = int(moat.kv.get_str("count")) + 1
moat.kv.put("count", str(n))
moat.kv.put("bytes", bytes([0, 255, 128]))
b = moat.kv.get("bytes")
moat.log.info("py counted", n=n, unicode="żółw")
keys, more = moat.kv.list(prefix="c")
print(n, moat.kv.get("missing"), moat.config("greeting"), moat.config("nope"), list(b), keys, more, moat.kv.delete("bytes"))
try:
    moat.kv.put("", "x")
except moat.MoatError as e:
    print(type(e).__name__, e.code)
`
	res, err := run(t, build(t, "main.py", script), runOpts{Ops: true, Manifest: kvManifest, User: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "42 None Hej None [0, 255, 128] ['count'] False True\nMoatError invalid_argument\n"; res.Stdout != want || res.Code != 0 {
		t.Fatalf("exit %d, stdout %q (stderr %q); want %q", res.Code, res.Stdout, res.Stderr, want)
	}
	v, found, err := suite.Store.KVGet(context.Background(), store.Scope{Org: "acme", Module: "py-ops"}, "count")
	if err != nil || !found || string(v) != "42" {
		t.Fatalf("kv row count = %q, %v, %v; want 42", v, found, err)
	}
	if log := suite.Log.String(); !strings.Contains(log, `"msg":"py counted"`) || !strings.Contains(log, `"guest.unicode":"żółw"`) ||
		!strings.Contains(log, `"user":"bob"`) {
		t.Fatalf("the host log lacks the guest's record:\n%s", log)
	}
}

// TestOpsDenied: a module without the kv grant gets the typed denial, and
// the refusal is in the audit trail.
func TestOpsDenied(t *testing.T) {
	script := `import moat, sys
try:
    moat.kv.put("count", "1")
    print("written")
except moat.MoatError as e:
    print(e.code)
    sys.exit(2)
`
	res, err := run(t, build(t, "main.py", script), runOpts{Ops: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != string(abi.CodeDenied)+"\n" || res.Code != 2 {
		t.Fatalf("exit %d, stdout %q, stderr %q; want the denied code", res.Code, res.Stdout, res.Stderr)
	}
	ctx := context.Background()
	if err := suite.Audit.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := suite.Audit.Query(ctx, audit.Filter{Module: "py-test", Decision: audit.Deny, Kind: audit.KindOp})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || evs[0].Op != abi.OpKVPut {
		t.Fatalf("audit has %+v; want a denied kv.put", evs)
	}
}
