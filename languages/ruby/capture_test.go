package ruby_test

import (
	"context"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/wasmsnap"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
)

// TestCaptureResident: a resident Ruby plugin's live instance is
// captured between two calls (driver.Resumer) and a module loaded with
// the copy goes on from its globals, the original too, apart; a copy
// whose image was tampered with (the memory emptied, the stack pointer
// out of bounds) fails its call with an error, never the host.
func TestCaptureResident(t *testing.T) {
	interpreter(t)
	testenv.Slow(t, "a Ruby plugin started cold and four copies of it: about 10 s")
	ctx := context.Background()
	mf, err := policy.ParseManifest("moat.yaml", []byte("name: rb-capture\nversion: 0.1.0\nlanguage: ruby\nkind: moat\nlimits: {memory: 64MiB}\nactions:\n  - {name: count, timeout: 30s}\n  - {name: park, timeout: 30s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := languages.Lookup("ruby")
	if err != nil {
		t.Fatal(err)
	}
	src, err := languages.PluginSource(l, map[string][]byte{"main.rb": []byte(`require "moat"
$calls = 0
Moat.action("count") { |_| ($calls += 1).to_s }
Moat.action("park") do |input|
  STDOUT.syswrite("#{input.text}\n")
  Time.now
  "parked"
end
`)})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := languages.BuildScriptPlugin(ctx, l, src, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	who := policy.Principal{User: "ann", Org: "acme"}
	load := func(img *host.ResidentImage) (*host.Module, error) {
		m, err := suite.Host.Load(ctx, sp.WASM, host.LoadOptions{Manifest: mf, Script: sp.Script, MaxIdle: 1, ResidentImage: img})
		if err == nil {
			t.Cleanup(func() { m.Close(ctx) })
		}
		return m, err
	}
	call := func(m *host.Module, action string) (string, error) {
		res, err := m.Invoke(ctx, host.Request{Action: action, Principal: who, Limits: host.Limits{Timeout: 30 * time.Second}})
		return string(res.Output), err
	}
	orig, err := load(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !orig.Capturable() {
		t.Fatal("a resident Ruby plugin is not capturable")
	}
	for _, want := range []string{"1", "2"} {
		if got, err := call(orig, "count"); err != nil || got != want {
			t.Fatalf("count: %q %v, want %s", got, err, want)
		}
	}
	const token = "0123456789abcdef0123"
	img, _, err := orig.CaptureResident(ctx, host.Request{Action: "park", Input: []byte(token), Principal: who, Limits: host.Limits{Timeout: 30 * time.Second}}, token)
	if err != nil {
		t.Fatal(err)
	}
	copied, err := load(img)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := call(copied, "count"); err != nil || got != "3" {
		t.Fatalf("the copy's count: %q %v, want 3", got, err)
	}
	if got, err := call(orig, "count"); err != nil || got != "3" {
		t.Fatalf("the original's count after the copy's: %q %v, want 3", got, err)
	}
	b, _ := img.MarshalBinary()
	for name, tamper := range map[string]func(*wasmsnap.Image){
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
		m, err := load(bad)
		if err != nil {
			continue // refused at load: as good
		}
		if got, err := call(m, "count"); err == nil {
			t.Errorf("%s: the copy answered %q", name, got)
		}
	}
}
