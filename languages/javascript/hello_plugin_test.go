package javascript_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// TestHelloPlugin runs examples/hello-js through the interpreter with the
// device file, twice: the counter in kv goes up and the log has the
// guest's record, tagged with the module, the action and the caller.
func TestHelloPlugin(t *testing.T) {
	mf, err := policy.LoadManifest("../../examples/hello-js/moat.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The interpreter is a WASI command: the plugin's one action is the
	// script, run with the manifest's grants.
	mf.Kind, mf.Actions = policy.KindWASICommand, nil
	script, err := os.ReadFile("../../examples/hello-js/main.js")
	if err != nil {
		t.Fatal(err)
	}
	a := build(t, "main.js", string(script))
	for i, want := range []string{"Hello, World! (call #1)\n", "Hello, World! (call #2)\n"} {
		res, err := run(t, a, runOpts{Stdin: "World\n", Ops: true, MF: mf, User: "carol", Action: "greet"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Stdout != want || res.Code != 0 {
			t.Fatalf("run %d: exit %d, stdout %q, stderr %q; want %q", i+1, res.Code, res.Stdout, res.Stderr, want)
		}
	}
	v, found, err := suite.Host.Store().KVGet(context.Background(), store.Scope{Org: "acme", Module: "hello-js"}, "count")
	if err != nil || !found || string(v) != "2" {
		t.Fatalf("kv row count = %q, %v, %v; want 2", v, found, err)
	}
	var record string
	for _, line := range strings.Split(suite.Log.String(), "\n") {
		if strings.Contains(line, `"module":"hello-js"`) && strings.Contains(line, `"msg":"greeting"`) {
			record = line
		}
	}
	if !strings.Contains(record, `"guest.name":"World"`) || !strings.Contains(record, `"user":"carol"`) || !strings.Contains(record, `"source":"guest"`) ||
		!strings.Contains(record, `"action":"greet"`) {
		t.Fatalf("no guest log record for hello-js with the name, the action and the caller; log:\n%s", suite.Log.String())
	}
}
