package ruby_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// TestHelloPlugin runs examples/hello-ruby through the interpreter with the
// device file, twice: the counter in kv goes up and the log has the
// guest's record, tagged with the module, the action and the caller.
func TestHelloPlugin(t *testing.T) {
	interpreter(t)
	mf, err := policy.LoadManifest("../../examples/hello-ruby/moat.yaml")
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("../../examples/hello-ruby/main.rb")
	if err != nil {
		t.Fatal(err)
	}
	// As moat run loads it: the interpreter serving the manifest's
	// actions (host.Script).
	m := suite.LoadScript(t, mf, "main.rb", string(script))
	for i, want := range []string{"Hello, World! (call #1)", "Hello, World! (call #2)"} {
		res, err := m.Invoke(context.Background(), host.Request{Action: "greet", Input: []byte("World\n"),
			Principal: policy.Principal{User: "carol", Org: "acme"}})
		if err != nil || string(res.Output) != want {
			t.Fatalf("call %d: %q, %v; want %q", i+1, res.Output, err, want)
		}
	}
	v, found, err := suite.Host.Store().KVGet(context.Background(), store.Scope{Org: "acme", Module: "hello-ruby"}, "count")
	if err != nil || !found || string(v) != "2" {
		t.Fatalf("kv row count = %q, %v, %v; want 2", v, found, err)
	}
	var record string
	for _, line := range strings.Split(suite.Log.String(), "\n") {
		if strings.Contains(line, `"module":"hello-ruby"`) && strings.Contains(line, `"msg":"greeting"`) {
			record = line
		}
	}
	if !strings.Contains(record, `"guest.name":"World"`) || !strings.Contains(record, `"user":"carol"`) || !strings.Contains(record, `"source":"guest"`) ||
		!strings.Contains(record, `"action":"greet"`) {
		t.Fatalf("no guest log record for hello-ruby with the name, the action and the caller; log:\n%s", suite.Log.String())
	}
}
