package javascript_test

import (
	"context"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/wasmsnap"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
)

// TestCaptureResident: a resident JavaScript plugin's live instance is
// captured between two calls and a module loaded with the copy goes on
// from its globals (the original too, apart); a copy whose image was
// tampered with (the recorded JSContext pointing elsewhere, the memory
// emptied) fails its call with an error, never the host.
func TestCaptureResident(t *testing.T) {
	ctx := context.Background()
	mf, err := policy.ParseManifest("moat.yaml", []byte("name: js-capture\nversion: 0.1.0\nlanguage: javascript\nkind: moat\nlimits: {memory: 64MiB}\nactions:\n  - {name: count, timeout: 5s}\n  - {name: park, timeout: 5s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := languages.Lookup("javascript")
	if err != nil {
		t.Fatal(err)
	}
	src, err := languages.PluginSource(l, map[string][]byte{"main.js": []byte(`import * as moat from "./moat.js";
import * as std from "qjs:std";
var calls = 0;
moat.action("count", () => String(++calls));
moat.action("park", (tok) => { std.out.puts(tok + "\n"); std.out.flush(); Date.now(); return "parked"; });
`)})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := languages.BuildScriptPlugin(ctx, l, src, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	who := policy.Principal{User: "ann", Org: "acme"}
	load := func(img *host.ResidentImage) *host.Module {
		t.Helper()
		m, err := suite.Host.Load(ctx, sp.WASM, host.LoadOptions{Manifest: mf, Script: sp.Script, MaxIdle: 1, ResidentImage: img})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close(ctx) })
		return m
	}
	call := func(m *host.Module, action string) (string, error) {
		res, err := m.Invoke(ctx, host.Request{Action: action, Principal: who, Limits: host.Limits{Timeout: 5 * time.Second}})
		return string(res.Output), err
	}
	orig := load(nil)
	if !orig.Capturable() {
		t.Fatal("a resident JavaScript plugin is not capturable")
	}
	for _, want := range []string{"1", "2"} {
		if got, err := call(orig, "count"); err != nil || got != want {
			t.Fatalf("count: %q %v, want %s", got, err, want)
		}
	}
	const token = "0123456789abcdef0123"
	img, _, err := orig.CaptureResident(ctx, host.Request{Action: "park", Input: []byte(token), Principal: who, Limits: host.Limits{Timeout: 5 * time.Second}}, token)
	if err != nil {
		t.Fatal(err)
	}
	copied := load(img)
	if got, err := call(copied, "count"); err != nil || got != "3" {
		t.Fatalf("the copy's count: %q %v, want 3", got, err)
	}
	if got, err := call(orig, "count"); err != nil || got != "3" {
		t.Fatalf("the original's count after the copy's: %q %v, want 3", got, err)
	}

	b, _ := img.MarshalBinary()
	for name, tamper := range map[string]func(*wasmsnap.Image){
		"another context":  func(w *wasmsnap.Image) { w.Globals[len(w.Globals)-1] = 0x100000 },
		"no context":       func(w *wasmsnap.Image) { w.Globals[len(w.Globals)-1] = 0 },
		"memory emptied":   func(w *wasmsnap.Image) { w.Runs = nil },
		"stack pointer up": func(w *wasmsnap.Image) { w.Globals[0] = 0xfffffff0 },
	} {
		w, err := wasmsnap.Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		tamper(w)
		bad, err := host.UnmarshalResidentImage(w.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		m, err := suite.Host.Load(ctx, sp.WASM, host.LoadOptions{Manifest: mf, Script: sp.Script, MaxIdle: 1, ResidentImage: bad})
		if err != nil {
			continue // refused at load: as good
		}
		got, err := call(m, "count")
		m.Close(ctx)
		if err == nil {
			t.Errorf("%s: the copy answered %q", name, got)
		}
	}
}
