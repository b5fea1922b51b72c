package js_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	js "github.com/moat-sandbox/moat/guests/js"
	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestSDKWire runs testdata/node/moat_test.mjs: moat.js's http, media and
// ai wrappers against a fake host, under node, which reads the same
// JavaScript as QuickJS-NG (a resolution hook stands in for QuickJS's std
// module, the device file's side). The wrappers' requests, replies and
// refusals are checked there; examples/polyglot drives them through a real
// host.
func TestSDKWire(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Require(t, "node is not installed (apt-get install nodejs): "+err.Error())
	}
	dir := t.TempDir()
	files := map[string][]byte{js.FileName: js.SDK, "package.json": []byte(`{"type":"module"}`)}
	for _, name := range []string{"register.mjs", "hooks.mjs", "qjs_std.mjs", "moat_test.mjs"} {
		b, err := os.ReadFile(filepath.Join("testdata", "node", name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(node, "--import", "./register.mjs", "moat_test.mjs")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("node moat_test.mjs: %v\n%s", err, out)
	}
}
