package server_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages/ruby"
	"github.com/moat-sandbox/moat/toolchains"
)

// TestUploadRubyPlugin: examples/hello-ruby uploaded as an archive of its
// directory serves greet over HTTP from a resident instance, each
// organization with its own upload and counter, and keeps serving after a
// restart; a main.rb that registers no handler is refused at upload with
// the fix.
func TestUploadRubyPlugin(t *testing.T) {
	testenv.Slow(t, "ruby.wasm compiled and its image made through an upload and a restart; TestUploadScriptPlugin shows the route with hello-js")
	if _, err := ruby.Interpreter(""); errors.Is(err, toolchains.ErrMissing) {
		testenv.Require(t, "ruby.wasm is not provisioned (make toolchains): "+err.Error())
	}
	dir := t.TempDir()
	ts := start(t, dir, nil)
	acme := ts.key(t, "acme", "ann", "admin")
	globex := ts.key(t, "globex", "gus", "admin")
	for _, key := range []string{acme, globex} {
		r := ts.do(t, "POST", "/v1/modules", key, scriptArchive(t, "hello-ruby", nil), "Content-Type", "application/gzip")
		if r.status != http.StatusCreated || r.json(t)["kind"] != "script" {
			t.Fatalf("upload: %d %s", r.status, r.body)
		}
	}
	for i, want := range []string{"Hello, World! (call #1)", "Hello, World! (call #2)"} {
		if r := ts.do(t, "POST", "/v1/modules/hello-ruby/actions/greet", acme, strings.NewReader("World")); r.status != http.StatusOK || string(r.body) != want {
			t.Fatalf("acme call %d: %d %q, want %q", i+1, r.status, r.body, want)
		}
	}
	if r := ts.do(t, "POST", "/v1/modules/hello-ruby/actions/greet", globex, strings.NewReader("Gus")); r.status != http.StatusOK || string(r.body) != "Hello, Gus! (call #1)" {
		t.Fatalf("globex: %d %q, want its own counter", r.status, r.body)
	}
	r := ts.do(t, "POST", "/v1/modules", acme, scriptArchive(t, "hello-ruby", map[string][]byte{"main.rb": []byte("puts 'hi'\n")}), "Content-Type", "application/gzip")
	if r.status == http.StatusCreated || !strings.Contains(string(r.body), "Moat.action") {
		t.Errorf("a main.rb with no handler: %d %s, want a refusal naming Moat.action", r.status, r.body)
	}
	ts.stop(t)
	ts2 := start(t, dir, nil)
	if r := ts2.do(t, "POST", "/v1/modules/hello-ruby/actions/greet", acme, strings.NewReader("World")); string(r.body) != "Hello, World! (call #3)" {
		t.Errorf("after restart: %d %q", r.status, r.body)
	}
}
