package server_test

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/server"
)

// nativeExample is examples/hello-python-native as an uploaded archive,
// under another name when rename is given.
func nativeExample(t *testing.T, rename ...string) []byte {
	t.Helper()
	dir := filepath.Join(testwasm.RepoRoot(t), "examples", "hello-python-native")
	var ents []entry
	for _, name := range []string{"moat.yaml", "main.py", "README.md"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "moat.yaml" && len(rename) > 0 {
			b = bytes.Replace(b, []byte("name: hello-python-native"), []byte("name: "+rename[0]), 1)
		}
		ents = append(ents, entry{name: "hello-python-native/" + name, body: b})
	}
	return tarOf(t, false, ents...)
}

// TestNativePluginUpload: a native plugin is refused by a server whose
// operator has not allowed native plugins (saying how to), and, allowed,
// is uploaded as an archive of its directory and served by confined
// workers through the same routes, gate and audit as a WASM plugin.
func TestNativePluginUpload(t *testing.T) {
	off := start(t, "", nil)
	ann := off.key(t, "acme", "ann", "admin")
	r := off.do(t, "POST", "/v1/modules", ann, bytes.NewReader(nativeExample(t)), "Content-Type", "application/x-tar")
	if r.status != http.StatusForbidden || !strings.Contains(string(r.body), "modules.allow_native: true") {
		t.Fatalf("native upload to a server without allow_native: %d %s", r.status, r.body)
	}

	testenv.Require(t, testenv.NativePython(true))
	ts := start(t, "", func(c *server.Config) { c.Modules.AllowNative = true })
	ann = ts.key(t, "acme", "ann", "admin")
	bob := ts.key(t, "acme", "bob")
	eve := ts.key(t, "globex", "eve", "admin")
	r = ts.do(t, "POST", "/v1/modules", ann, bytes.NewReader(nativeExample(t)), "Content-Type", "application/x-tar")
	if r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if m := r.json(t); m["name"] != "hello-python-native" || m["kind"] != "native" {
		t.Errorf("upload response = %v", m)
	}
	for i, want := range []string{"Hello, Bob! (call #1, numpy ", "Hello, Bob! (call #2, numpy "} {
		r = ts.do(t, "POST", "/v1/modules/hello-python-native/actions/greet", bob, strings.NewReader("Bob"), "X-Request-Id", "native-greet")
		if r.status != http.StatusOK || !strings.HasPrefix(string(r.body), want) {
			t.Fatalf("greet #%d: %d %q", i+1, r.status, r.body)
		}
	}
	r = ts.do(t, "POST", "/v1/modules/hello-python-native/actions/stats", bob, strings.NewReader("nope"))
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "invalid_argument") {
		t.Fatalf("stats of bad input: %d %s, want 400 invalid_argument (the worker's code kept)", r.status, r.body)
	}
	// Another organization has its own kv: its first call is #1.
	r = ts.do(t, "POST", "/v1/modules", eve, bytes.NewReader(nativeExample(t)), "Content-Type", "application/x-tar")
	if r.status != http.StatusCreated {
		t.Fatalf("globex upload: %d %s", r.status, r.body)
	}
	r = ts.do(t, "POST", "/v1/modules/hello-python-native/actions/greet", eve, strings.NewReader("Eve"))
	if r.status != http.StatusOK || !strings.HasPrefix(string(r.body), "Hello, Eve! (call #1, numpy ") {
		t.Fatalf("globex greet: %d %q", r.status, r.body)
	}
	// The kv write is in the audit trail with its mutation id.
	r = ts.do(t, "GET", "/v1/audit?correlation_id=native-greet", bob, nil)
	if !strings.Contains(string(r.body), `"op":"kv.put"`) || !strings.Contains(string(r.body), `"mutation_id"`) {
		t.Errorf("audit of native-greet: %s", r.body)
	}
	// Deleted: the workers stop and the module is gone.
	if r = ts.do(t, "DELETE", "/v1/modules/hello-python-native", ann, nil); r.status != http.StatusNoContent && r.status != http.StatusOK {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r = ts.do(t, "POST", "/v1/modules/hello-python-native/actions/greet", bob, strings.NewReader("Bob")); r.status != http.StatusNotFound {
		t.Fatalf("greet after delete: %d %s", r.status, r.body)
	}

	// Each organization draws from its share of the server's workers: one
	// organization's plugins cannot take them all.
	shared := start(t, "", func(c *server.Config) {
		c.Modules.AllowNative, c.Modules.MaxNativeWorkers, c.Modules.MaxNativeWorkersPerOrg = true, 2, 1
	})
	ann, eve = shared.key(t, "acme", "ann", "admin"), shared.key(t, "globex", "eve", "admin")
	if r = shared.do(t, "POST", "/v1/modules", ann, bytes.NewReader(nativeExample(t)), "Content-Type", "application/x-tar"); r.status != http.StatusCreated {
		t.Fatalf("acme's first native plugin: %d %s", r.status, r.body)
	}
	r = shared.do(t, "POST", "/v1/modules", ann, bytes.NewReader(nativeExample(t, "second-native")), "Content-Type", "application/x-tar")
	if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "at most 1 at once for this share") {
		t.Fatalf("acme's second native plugin past its share: %d %s, want 503 naming the share", r.status, r.body)
	}
	if r = shared.do(t, "POST", "/v1/modules", eve, bytes.NewReader(nativeExample(t)), "Content-Type", "application/x-tar"); r.status != http.StatusCreated {
		t.Fatalf("globex's native plugin beside acme's: %d %s", r.status, r.body)
	}
}
