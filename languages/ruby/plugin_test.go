package ruby_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/ruby"
	"github.com/moat-sandbox/moat/policy"
)

// pluginManifest declares a Ruby plugin with actions, each with a 5s
// deadline.
func pluginManifest(t testing.TB, name string, actions ...string) *policy.Manifest {
	t.Helper()
	y := fmt.Sprintf("name: %s\nversion: 0.1.0\nlanguage: ruby\nkind: moat\ncapabilities: {kv: true}\nlimits: {memory: 64MiB}\nactions:\n", name)
	for _, a := range actions {
		y += "  - {name: " + a + ", timeout: 5s, max_output: 96KiB}\n"
	}
	mf, err := policy.ParseManifest("moat.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

// hostileMain registers a counter and handlers that misbehave in every
// way Ruby allows.
const hostileMain = `require "moat"

$calls = 0
Moat.action("count") { |_| ($calls += 1).to_s }
Moat.action("echo") { |input| input }
Moat.action("loud") do |_|
  chunk = "x" * (1 << 20)
  8.times { print chunk; STDOUT.write(chunk); $stderr.write(chunk) }
  "quiet"
end
Moat.action("base") { |_| raise Exception, "not a StandardError" }
Moat.action("nomem") { |_| raise NoMemoryError, "pretend" }
Moat.action("throw") { |_| throw :nowhere }
Moat.action("exit") { |_| exit 3 }
Moat.action("exitbang") { |_| exit! 4 }
Moat.action("js") { |_| require "js"; JS.global }
Moat.action("big") { |_| "y" * (100 << 10) }
Moat.action("huge") { |_| "z" * (5 << 20) }
Moat.action("json") { |input| { "got" => input.json, "action" => input.action } }
Moat.action("put") do |input|
  Moat.kv.put("k", input)
  Moat.kv.get("k")
end
Moat.action("get") { |_| Moat.kv.get("k") || "(none)" }
Moat.action("cfg") { |_| [Moat.config("greeting", "Hi"), Moat.config("missing", "dflt")].join(",") }
Moat.action("cfgkept") { |_| Moat.instance_variable_get(:@config) }
Moat.action("system") { |_| system("ls") ? "ran" : "did not run" }
`

// TestPluginHostile: what a Ruby handler can do wrong ends the call, not
// the host, and each failure keeps or discards its instance as the rules
// say: an exception of any class (Exception, NoMemoryError, a throw) is
// the call's guest_error and the instance serves on; exit and exit! end
// the instance (the next call finds a new one); require "js" traps; a
// handler printing megabytes returns its output while the log keeps a
// bounded part; an output over the action's limit is output_too_large.
func TestPluginHostile(t *testing.T) {
	interpreter(t)
	actions := []string{"count", "echo", "loud", "base", "nomem", "throw", "exit", "exitbang", "js", "big", "huge", "json", "put", "get", "cfg", "cfgkept", "system"}
	m := suite.LoadScript(t, pluginManifest(t, "rb-hostile", actions...), "main.rb", hostileMain)
	defer m.Close(context.Background())
	p := policy.Principal{User: "ann", Org: "acme"}
	call := func(action, in string) (string, error) {
		res, err := m.Invoke(context.Background(), host.Request{Action: action, Input: []byte(in), Principal: p})
		return string(res.Output), err
	}
	count := func(want int) {
		t.Helper()
		if out, err := call("count", ""); err != nil || out != fmt.Sprint(want) {
			t.Fatalf("count: %q, %v; want %d", out, err, want)
		}
	}
	count(1)
	// A reply longer than the SDK's 64 KiB read buffer arrives in pieces.
	for _, in := range []string{"\xff\xfe\x00binary", "", strings.Repeat("é", 1000), strings.Repeat("é\"\n", 20000), strings.Repeat("\xff", 50000)} {
		if out, err := call("echo", in); err != nil || out != in {
			t.Fatalf("echo %q: %q, %v", in, out, err)
		}
	}
	if out, err := call("json", `{"a":[1,2]}`); err != nil || out != `{"got":{"a":[1,2]},"action":"json"}` {
		t.Fatalf("json: %q, %v", out, err)
	}
	// Deeply nested JSON: the parser's nesting limit, a guest_error; the
	// instance serves on (count below).
	if _, err := call("json", strings.Repeat("[", 200000)); abi.CodeOf(err) != abi.CodeGuestError || !strings.Contains(err.Error(), "NestingError") {
		t.Fatalf("json nested 200000 deep: %v, want guest_error JSON::NestingError", err)
	}
	if out, err := call("loud", ""); err != nil || out != "quiet" {
		t.Fatalf("loud: %q, %v", out, err)
	}
	if n := len(suite.Log.String()); n > 4<<20 {
		t.Errorf("the host log holds %d bytes after a handler printed 24 MiB: not bounded", n)
	}
	for _, tc := range []struct{ action, want string }{
		{"base", "Exception: not a StandardError"},
		{"nomem", "NoMemoryError: pretend"},
		{"throw", "UncaughtThrowError"},
	} {
		if _, err := call(tc.action, ""); abi.CodeOf(err) != abi.CodeGuestError || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want guest_error naming %q", tc.action, err, tc.want)
		}
	}
	count(2) // the instance served on
	if _, err := call("system", ""); abi.CodeOf(err) != abi.CodeGuestError || !strings.Contains(err.Error(), "NotImplementedError") {
		t.Fatalf("system(): %v, want guest_error NotImplementedError (no processes under WASI)", err)
	}
	if _, err := call("big", ""); abi.CodeOf(err) != abi.CodeOutputTooLarge {
		t.Fatalf("big: %v, want output_too_large", err)
	}
	count(3) // too large an output is the call's failure, not the instance's
	switch _, err := call("huge", ""); abi.CodeOf(err) {
	case abi.CodeOutputTooLarge, abi.CodeGuestError: // the SDK's refusal, or Ruby's NoMemoryError near the 64 MiB limit
		count(4)
	case abi.CodeMemoryLimit:
		count(1)
	default:
		t.Fatalf("huge: %v, want output_too_large, guest_error or memory_limit", err)
	}
	for _, tc := range []struct {
		action string
		code   abi.Code
		want   string
	}{
		{"exit", abi.CodeTrap, ""},
		{"exitbang", abi.CodeTrap, "code 4"},
		{"js", abi.CodeTrap, "JavaScript interop"},
	} {
		if _, err := call(tc.action, ""); abi.CodeOf(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want %s naming %q", tc.action, err, tc.code, tc.want)
		}
		count(1) // a new instance
	}
	if out, err := call("cfg", ""); err != nil || out != "Hi,dflt" {
		t.Fatalf("cfg: %q, %v", out, err)
	}
	// Moat.config asked the host once per key and kept the answers, a
	// missing key too: the configuration is fixed while the module is
	// loaded.
	if out, err := call("cfgkept", ""); err != nil || out != `{"greeting":"missing","missing":"missing"}` {
		t.Fatalf("the instance's kept configuration: %q, %v", out, err)
	}

	// Ops run as the caller: another organization's kv is its own, and
	// the audit trail names the caller.
	if out, err := call("put", "acme's"); err != nil || out != "acme's" {
		t.Fatalf("put: %q, %v", out, err)
	}
	res, err := m.Invoke(context.Background(), host.Request{Action: "get", Principal: policy.Principal{User: "eve", Org: "evil"}})
	if err != nil || string(res.Output) != "(none)" {
		t.Fatalf("another org's get: %q, %v; want (none)", res.Output, err)
	}
	var audited bool
	for _, line := range strings.Split(suite.Log.String(), "\n") {
		if strings.Contains(line, `"audit":"op"`) && strings.Contains(line, `"op":"kv.put"`) && strings.Contains(line, `"module":"rb-hostile"`) &&
			strings.Contains(line, `"user":"ann"`) && strings.Contains(line, `"org":"acme"`) {
			audited = true
		}
	}
	if !audited {
		t.Error("no audit record of kv.put naming module rb-hostile, user ann, org acme")
	}
}

// TestPluginFresh: isolation: fresh gives each call a new instance, so a
// global starts again every call.
func TestPluginFresh(t *testing.T) {
	interpreter(t)
	l := ruby.Language{}
	src, err := languages.PluginSource(l, map[string][]byte{"main.rb": []byte(hostileMain)})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := languages.BuildScriptPlugin(context.Background(), l, src, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := suite.Host.Load(context.Background(), sp.WASM, host.LoadOptions{Manifest: pluginManifest(t, "rb-fresh", "count"), Script: sp.Script, Isolation: host.IsolationFresh})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	for range 2 {
		res, err := m.Invoke(context.Background(), host.Request{Action: "count", Principal: policy.Principal{User: "ann", Org: "acme"}})
		if err != nil || string(res.Output) != "1" {
			t.Fatalf("count on a fresh instance: %q, %v", res.Output, err)
		}
	}
}

// TestPluginRefused: what cannot load says why and how to fix it.
func TestPluginRefused(t *testing.T) {
	testenv.Timing(t)
	interpreter(t)
	l := ruby.Language{}
	for _, tc := range []struct{ name, main, want string }{
		{"no handlers", "puts 'hi'\n", `Moat.action("greet")`},
		{"in a comment", "# Moat.action(\"echo\") { }\nputs 1\n", `registers no action handler`},
		{"in a string", "x = 'Moat.action(\"echo\")'\n", `registers no action handler`},
	} {
		src, err := languages.PluginSource(l, map[string][]byte{"main.rb": []byte(tc.main)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := languages.BuildScriptPlugin(context.Background(), l, src, t.TempDir(), ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal naming %q", tc.name, err, tc.want)
		}
	}
	// The host holds the rule too, for an embedder that builds its own
	// host.Script: an Interpreter serves resident scripts only.
	sc := mustScript(t, "require 'moat'\nMoat.action('echo') { |i| i }\n")
	sc.Resident = false
	if _, err := suite.Host.Load(context.Background(), mustWASM(t), host.LoadOptions{Manifest: pluginManifest(t, "rb-percall", "echo"), Script: sc}); abi.CodeOf(err) != abi.CodeBadModule || !strings.Contains(err.Error(), "Moat.action") {
		t.Errorf("a non-resident script with an Interpreter: %v, want bad_module naming Moat.action", err)
	}
	// Top-level code that raises, or never registers what it promised:
	// the load fails with the exception.
	start := time.Now()
	_, err := suite.Host.Load(context.Background(), mustWASM(t), host.LoadOptions{Manifest: pluginManifest(t, "rb-raise", "echo"), Script: mustScript(t, "require 'moat'\nMoat.action('echo') { |i| i }\nraise ArgumentError, 'bad config'\n")})
	if abi.CodeOf(err) != abi.CodeBadModule || !strings.Contains(err.Error(), "ArgumentError: bad config") {
		t.Errorf("a script raising at its top level: %v, want bad_module naming the exception", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the refused load took %s", d)
	}
	_, err = suite.Host.Load(context.Background(), mustWASM(t), host.LoadOptions{Manifest: pluginManifest(t, "rb-exit", "echo"), Script: mustScript(t, "require 'moat'\nMoat.action('echo') { |i| i }\nexit 3\n")})
	if abi.CodeOf(err) != abi.CodeBadModule || !strings.Contains(err.Error(), "exited with status 3") {
		t.Errorf("a script exiting at its top level: %v, want bad_module naming the status", err)
	}
}

func mustWASM(t testing.TB) []byte {
	t.Helper()
	b, err := ruby.Interpreter("")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustScript(t testing.TB, main string) *host.Script {
	t.Helper()
	l := ruby.Language{}
	src, err := languages.PluginSource(l, map[string][]byte{"main.rb": []byte(main)})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := languages.BuildScriptPlugin(context.Background(), l, src, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	return sp.Script
}

// TestPluginSnapshot: instances after the first start from its image: the
// top level ran once (what it computed is the same in every instance),
// each instance draws its own random numbers, and what a call leaves
// behind is gone in the next fresh instance. The top level's op device is
// closed before the copy, so the restored instances' ops work.
func TestPluginSnapshot(t *testing.T) {
	interpreter(t)
	l := ruby.Language{}
	src, err := languages.PluginSource(l, map[string][]byte{"main.rb": []byte(`require "moat"
TOP = rand.to_s
begin
  Moat.kv.get("x") # refused at the top level: the device is open now
rescue Moat::Error
end
Moat.action("probe") do |_input|
  left = $left.inspect
  $left = "from a call"
  Moat.kv.put("k", "v")
  [TOP, rand.to_s, left, Moat.kv.get("k")].join(" ")
end
`)})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := languages.BuildScriptPlugin(context.Background(), l, src, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := suite.Host.Load(context.Background(), sp.WASM, host.LoadOptions{Manifest: pluginManifest(t, "rb-snap", "probe"), Script: sp.Script, Isolation: host.IsolationFresh})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	var outs []string
	for range 3 {
		res, err := m.Invoke(context.Background(), host.Request{Action: "probe", Principal: policy.Principal{User: "ann", Org: "acme"}})
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, string(res.Output))
	}
	top := strings.Fields(outs[0])[0]
	seen := map[string]bool{}
	for _, out := range outs {
		f := strings.Fields(out)
		if len(f) != 4 || f[2] != "nil" || f[3] != "v" {
			t.Fatalf("probe: %q, want TOP RAND nil v", out)
		}
		if f[0] != top {
			t.Errorf("the top level ran again (the image is the first instance's, after its top level): %q", outs)
		}
		if seen[f[1]] {
			t.Errorf("two instances drew the same random number: %q", outs)
		}
		seen[f[1]] = true
	}
}
