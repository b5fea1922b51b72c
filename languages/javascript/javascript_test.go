package javascript_test

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
			files: []string{"main.js", `
const line = std.in.getline();
print("hello " + line + " " + scriptArgs.slice(1).join(",") + " " + std.getenv("GREETING"));
std.exit(3);`},
			opts:     runOpts{Stdin: "world\n", Args: []string{"a", "-b"}, Env: map[string]string{"GREETING": "hi"}},
			wantOut:  "hello world a,-b hi\n",
			wantCode: 3,
		},
		{
			name:     "module importing a sibling file",
			files:    []string{"main.mjs", `import { twice } from "./lib/util.js"; print(twice(21));`, "lib/util.js", `export const twice = (n) => 2 * n;`},
			wantOut:  "42\n",
			wantCode: 0,
		},
		{
			name:       "syntax error",
			files:      []string{"main.js", "let x = ;"},
			wantErrOut: "SyntaxError",
			wantCode:   1,
		},
		{
			name:       "uncaught exception",
			files:      []string{"main.js", `throw new Error("boom");`},
			wantErrOut: "boom",
			wantCode:   1,
		},
		{
			// The bootstrap runs a classic script as qjs does, in sloppy
			// mode: a module would throw a ReferenceError here.
			name:     "classic script, sloppy mode",
			files:    []string{"main.js", "// a comment first\nundeclared = 5; print(undeclared, typeof globalThis.undeclared);"},
			wantOut:  "5 number\n",
			wantCode: 0,
		},
		{
			name:     "module after a shebang and comments",
			files:    []string{"main.js", "#!/usr/bin/env qjs\n/* c */ // d\nimport { twice } from \"./util.js\"; print(twice(4), typeof std);", "util.js", `export const twice = (n) => 2 * n;`},
			wantOut:  "8 object\n",
			wantCode: 0,
		},
		{
			name:       "uncaught exception in a module keeps its stack",
			files:      []string{"main.js", "import * as moat from \"./moat.js\";\nfunction deep() { throw new moat.MoatError(\"invalid_argument\", \"bad title\"); }\ndeep();"},
			wantErrOut: "    at deep (/src/main.js:2:",
			wantCode:   1,
		},
		{
			name:       "a thrown string",
			files:      []string{"main.js", `throw "plain string";`},
			wantErrOut: "plain string",
			wantCode:   1,
		},
		{
			name:     "the source is read-only",
			files:    []string{"main.js", `const f = std.open("/src/new.txt", "w"); print(f === null ? "refused" : "written");`},
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
	_, err := run(t, build(t, "main.js", "for (;;) {}"), runOpts{Limits: host.Limits{Timeout: 200e6}})
	if !errors.Is(err, host.ErrTimeout) {
		t.Fatalf("err = %v, want a timeout", err)
	}
}

const kvManifest = `name: js-ops
version: 0.1.0
kind: wasi-command
capabilities: {kv: true}
config: {greeting: Hej}
`

// TestOps drives the SDK through the device file: kv, log and config
// reach the host's store and log, and an error carries its code.
func TestOps(t *testing.T) {
	script := `import * as moat from "./moat.js";
moat.kv.put("count", "41");
const n = Number(moat.kv.get("count")) + 1;
moat.kv.put("count", String(n));
moat.kv.put("bytes", new Uint8Array([0, 255, 128]));
const b = moat.kv.getBytes("bytes");
moat.log.info("js counted", { n, unicode: "żółw" });
print(n, moat.kv.get("missing"), moat.config("greeting"), moat.config("nope"), b.join("."),
  moat.kv.list({ prefix: "c" }).keys.join(","), moat.kv.delete("bytes"));
try {
  moat.kv.put("", "x");
} catch (e) {
  print(e instanceof moat.MoatError, e.code);
}
`
	res, err := run(t, build(t, "main.js", script), runOpts{Ops: true, Manifest: kvManifest, User: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "42 null Hej undefined 0.255.128 count true\ntrue invalid_argument\n"; res.Stdout != want || res.Code != 0 {
		t.Fatalf("exit %d, stdout %q (stderr %q); want %q", res.Code, res.Stdout, res.Stderr, want)
	}
	v, found, err := suite.Store.KVGet(context.Background(), store.Scope{Org: "acme", Module: "js-ops"}, "count")
	if err != nil || !found || string(v) != "42" {
		t.Fatalf("kv row count = %q, %v, %v; want 42", v, found, err)
	}
	if log := suite.Log.String(); !strings.Contains(log, `"msg":"js counted"`) || !strings.Contains(log, `"guest.unicode":"żółw"`) ||
		!strings.Contains(log, `"user":"bob"`) {
		t.Fatalf("the host log lacks the guest's record:\n%s", log)
	}
}

// TestOpsDenied: a module without the kv grant gets the typed denial, and
// the refusal is in the audit trail.
func TestOpsDenied(t *testing.T) {
	script := `import * as moat from "./moat.js";
try {
  moat.kv.put("count", "1");
  print("written");
} catch (e) {
  print(e.code);
  std.exit(2);
}
`
	res, err := run(t, build(t, "main.js", script), runOpts{Ops: true})
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
	evs, err := suite.Audit.Query(ctx, audit.Filter{Module: "js-test", Decision: audit.Deny, Kind: audit.KindOp})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || evs[0].Op != abi.OpKVPut {
		t.Fatalf("audit has %+v; want a denied kv.put", evs)
	}
}

// TestOpsDisabled: without RunRequest.Ops there is no device, and the SDK
// says so.
func TestOpsDisabled(t *testing.T) {
	script := `import * as moat from "./moat.js";
try { moat.log.info("x"); } catch (e) { print(e.code, e.message); }`
	res, err := run(t, build(t, "main.js", script), runOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Stdout, "unavailable ") || !strings.Contains(res.Stdout, "MOAT_OPS") {
		t.Fatalf("stdout %q, stderr %q; want unavailable naming $MOAT_OPS", res.Stdout, res.Stderr)
	}
}
