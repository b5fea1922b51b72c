//go:build !wasip1

// The tests run the host, which does not build for wasip1 (SQLite); the
// Makefile vets ./examples/... for wasip1 too.

package polyglot_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	plugin "github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/hosttest"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/toolchains"
)

// guest is one plugin written with a guest SDK, and how to build it from
// source. The commands match mk/guests.mk, which builds the examples in
// place.
type guest struct {
	lang string // the subtest name
	dir  string // the plugin's directory (with its moat.yaml), relative to the repository root
	// build compiles the plugin into out; root is the repository root and
	// tmp a scratch directory. It returns an error wrapping
	// toolchains.ErrMissing when a toolchain is not provisioned.
	build func(root, tmp, out string) error
}

// guests are the example plugins: the same plugin in every language.
var guests = []guest{
	{"go", "examples/hello-go", buildGo("./examples/hello-go")},
	{"c", "examples/hello-c", buildC("examples/hello-c/hello.c", false)},
	{"cpp", "examples/hello-cpp", buildC("examples/hello-cpp/hello.cpp", true)},
	{"rust", "examples/hello-rust", buildRust("examples/hello-rust", "hello_rust")},
	{"assemblyscript", "examples/hello-as", buildAS("examples/hello-as")},
}

// sdkFixtures exercise every part of each SDK with one action per part
// (testdata/sdk-*; the same actions in every language).
var sdkFixtures = []guest{
	{"c", "examples/polyglot/testdata/sdk-c", buildC("examples/polyglot/testdata/sdk-c/sdk.c", false)},
	{"cpp", "examples/polyglot/testdata/sdk-cpp", buildC("examples/polyglot/testdata/sdk-cpp/sdk.cpp", true)},
	{"rust", "examples/polyglot/testdata/sdk-rust", buildRust("examples/polyglot/testdata/sdk-rust", "sdk_rust")},
	{"assemblyscript", "examples/polyglot/testdata/sdk-as", buildAS("examples/polyglot/testdata/sdk-as")},
}

func buildGo(pkg string) func(root, tmp, out string) error {
	return func(root, _, out string) error {
		return run(root, []string{"GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0"}, "go", "build", "-buildmode=c-shared", "-o", out, pkg)
	}
}

func buildC(src string, cpp bool) func(root, tmp, out string) error {
	return func(root, _, out string) error {
		name, args := "clang-19", []string{}
		if cpp {
			// The wasm32-wasi libc++ has no exception support.
			name, args = "clang++-19", []string{"-fno-exceptions"}
		}
		clang, err := toolchains.Binary(name, "clang-19")
		if err != nil {
			return err
		}
		args = append(args, "--target=wasm32-wasi", "-mexec-model=reactor", "-O2", "-Wall", "-Wextra", "-Werror",
			"-Wl,--strip-all", "-I", "guests/c", "-o", out, src)
		return run(root, nil, clang, args...)
	}
}

func buildRust(dir, crate string) func(root, tmp, out string) error {
	return func(root, tmp, out string) error {
		rustc, cargo, err := rustTools()
		if err != nil {
			return err
		}
		target := filepath.Join(tmp, "cargo")
		if err := run(root, []string{"RUSTC=" + rustc, "CARGO_TARGET_DIR=" + target}, cargo, "build", "--quiet", "--offline", "--release",
			"--target", "wasm32-wasi", "--manifest-path", filepath.Join(dir, "Cargo.toml")); err != nil {
			return err
		}
		return os.Rename(filepath.Join(target, "wasm32-wasi", "release", crate+".wasm"), out)
	}
}

func buildAS(dir string) func(root, tmp, out string) error {
	return func(root, _, out string) error {
		asc, err := toolchains.NPMFile("assemblyscript/bin/asc.js")
		if err != nil {
			return err
		}
		node, err := exec.LookPath("node")
		if err != nil {
			return fmt.Errorf("%w: node is not installed (this machine kind ships it)", toolchains.ErrMissing)
		}
		// In the plugin's directory: its asconfig.json names the SDK's
		// abort by a relative path.
		return run(filepath.Join(root, dir), nil, node, asc, "--config", "asconfig.json", "-o", out)
	}
}

func rustTools() (rustc, cargo string, err error) {
	if rustc, err = toolchains.Binary("rustc", "rustc"); err != nil {
		return "", "", err
	}
	if _, err := os.Stat("/usr/lib/rustlib/wasm32-wasi"); err != nil {
		return "", "", fmt.Errorf("%w: rustc has no wasm32-wasi std (install the Debian package libstd-rust-dev-wasm32: `make toolchains`)", toolchains.ErrMissing)
	}
	cargo, err = toolchains.Binary("cargo", "cargo")
	return rustc, cargo, err
}

func run(dir string, env []string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return nil
}

// buildDir holds the built examples, shared by every test of the package
// so each example is compiled once per test binary.
var buildDir string

// compileCache is the hosts' compilation cache.
var compileCache string

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "moat-polyglot")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = d
	compileCache = filepath.Join(d, "cache")
	if t := toolchains.Dir(); t != "" {
		// The interpreters' machine code is the same for every
		// package's tests: kept where languages' tests keep it
		// (interptest.CacheDir), so ruby.wasm is compiled once per run.
		if fi, err := os.Stat(t); err == nil && fi.IsDir() {
			compileCache = filepath.Join(t, "cache", "wazero")
		}
	}
	code := m.Run()
	os.RemoveAll(d)
	if err := pgtest.Stop(); err != nil { // the cluster TestSDKData started, if any
		fmt.Fprintln(os.Stderr, "pgtest:", err)
	}
	os.Exit(code)
}

var (
	buildMu sync.Mutex
	built   = map[string]string{} // plugin directory -> bundle directory
)

// bundle builds g and returns a plugin directory holding the module and a
// copy of the example's moat.yaml, which names it: what `moat run DIR`
// reads. A missing toolchain skips the test, or fails it when
// MOAT_REQUIRE_TOOLS is set (CI, after `make toolchains`).
func bundle(t testing.TB, g guest) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if d, ok := built[g.dir]; ok {
		return d
	}
	root := testwasm.RepoRoot(t)
	// A plugin without moat.yaml (the Go SDK's fixture) is loaded with an
	// implicit manifest, as `moat run` loads a lone .wasm.
	mf := &policy.Manifest{Name: filepath.Base(g.dir), Module: filepath.Base(g.dir) + ".wasm"}
	manifest, err := os.ReadFile(filepath.Join(root, g.dir, policy.ManifestFile))
	if err == nil {
		if mf, err = policy.ParseManifest(policy.ManifestFile, manifest); err != nil {
			t.Fatal(err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	dir := filepath.Join(buildDir, mf.Name)
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := g.build(root, filepath.Join(dir, "tmp"), filepath.Join(dir, mf.Module)); err != nil {
		if errors.Is(err, toolchains.ErrMissing) {
			testenv.Require(t, fmt.Sprintf("%s: %v", g.lang, err))
		}
		t.Fatalf("build %s: %v", g.dir, err)
	}
	if manifest != nil {
		if err := os.WriteFile(filepath.Join(dir, policy.ManifestFile), manifest, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	built[g.dir] = dir
	return dir
}

// load reads the bundle the way `moat run` does (package bundle: Open, then
// LoadOptions) and loads it; edit may change the options first.
func load(t testing.TB, h *host.Host, dir string, edit func(*host.LoadOptions)) *host.Module {
	t.Helper()
	b, err := plugin.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	wasm, opts, err := b.LoadOptions(context.Background(), plugin.LoadEnv{})
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&opts)
	}
	m, err := h.Load(context.Background(), wasm, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// capture is a slog.Handler that keeps every record with its attributes,
// including those added with Logger.With (the host tags guest records
// that way).
type capture struct {
	mu    *sync.Mutex
	recs  *[]record
	attrs []slog.Attr
}

type record struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

func newCapture() *capture { return &capture{mu: new(sync.Mutex), recs: new([]record)} }

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }

func (c *capture) Handle(_ context.Context, r slog.Record) error {
	rec := record{level: r.Level, msg: r.Message, attrs: map[string]any{}}
	for _, a := range c.attrs {
		rec.attrs[a.Key] = a.Value.Any()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Any()
		return true
	})
	c.mu.Lock()
	*c.recs = append(*c.recs, rec)
	c.mu.Unlock()
	return nil
}

func (c *capture) WithAttrs(as []slog.Attr) slog.Handler {
	return &capture{mu: c.mu, recs: c.recs, attrs: append(slices.Clip(c.attrs), as...)}
}

// WithGroup is not used by the host; groups are flattened.
func (c *capture) WithGroup(string) slog.Handler { return c }

// guestRecords returns the records the guest wrote with log.write.
func (c *capture) guestRecords() []record {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []record
	for _, r := range *c.recs {
		if r.attrs["source"] == "guest" {
			out = append(out, r)
		}
	}
	return out
}

func newHost(t testing.TB, logger *slog.Logger) *host.Host {
	t.Helper()
	ctx := context.Background()
	// One compilation cache for the package: each module is compiled by
	// wazero once, not once per test.
	h := hosttest.New(t, host.Config{DataDir: t.TempDir(), CacheDir: compileCache, Logger: logger})
	t.Cleanup(func() { h.Close(ctx) })
	return h
}

var ann = policy.Principal{User: "ann", Org: "acme"}

// TestGreet: every example greets, counts its calls in kv and logs the
// name, with the same output for the same inputs.
func TestGreet(t *testing.T) {
	testenv.Slow(t, "every example built and greeting; languages/all TestHelloEveryLanguage runs every language")
	ctx := context.Background()
	for _, g := range guests {
		t.Run(g.lang, func(t *testing.T) {
			dir := bundle(t, g)
			logs := newCapture()
			h := newHost(t, slog.New(logs))
			m := load(t, h, dir, nil)
			if got := m.Actions(); !slices.Equal(got, []string{"greet"}) {
				t.Fatalf("actions %v, want [greet]", got)
			}
			steps := []struct{ input, want, logged string }{
				{"World", "Hello, World! (call #1)", "World"},
				{"World", "Hello, World! (call #2)", "World"},
				{"", "Hello, world! (call #3)", "world"},
				{"Wö\"rld\n\t\\ 😀", "Hello, Wö\"rld\n\t\\ 😀! (call #4)", "Wö\"rld\n\t\\ 😀"}, // JSON escapes both ways
			}
			for i, s := range steps {
				res, err := m.Invoke(ctx, host.Request{Action: "greet", Input: []byte(s.input), Principal: ann, CorrelationID: fmt.Sprintf("c%d", i)})
				if err != nil || string(res.Output) != s.want {
					t.Fatalf("greet %q = %q, %v; want %q", s.input, res.Output, err, s.want)
				}
			}
			v, found, err := hosttest.Store(h).KVGet(ctx, store.Scope{Org: ann.Org, Module: m.Name()}, "count")
			if err != nil || !found || string(v) != "4" {
				t.Fatalf("kv count = %q, %v, %v; want \"4\"", v, found, err)
			}
			recs := logs.guestRecords()
			if len(recs) != len(steps) {
				t.Fatalf("%d guest log records, want %d: %+v", len(recs), len(steps), recs)
			}
			for i, r := range recs {
				want := map[string]any{"module": m.Name(), "action": "greet", "user": ann.User, "org": ann.Org,
					"correlation_id": fmt.Sprintf("c%d", i), "guest.name": steps[i].logged}
				for k, v := range want {
					if r.attrs[k] != v {
						t.Errorf("record %d: %s = %#v, want %#v", i, k, r.attrs[k], v)
					}
				}
				if r.level != slog.LevelInfo || r.msg != "greeting" {
					t.Errorf("record %d: %s %q, want INFO \"greeting\"", i, r.level, r.msg)
				}
			}
		})
	}
}

// TestGreetConfig: the greeting comes from config.get: overridden at
// load, absent (the plugin's default), or larger than the SDKs' first
// response buffer (16 KiB), which makes config.get answer StatusTooSmall
// and the SDK fetch the reply with a second crossing.
func TestGreetConfig(t *testing.T) {
	testenv.Slow(t, "every example built; TestGreet keeps one")
	large := strings.Repeat("Hi", 20<<10) // 40 KiB
	tests := []struct {
		name   string
		config map[string]string
		unset  bool // drop the manifest's default greeting
		want   string
	}{
		{name: "override", config: map[string]string{"greeting": "Hi"}, want: "Hi, you! (call #1)"},
		{name: "unset", unset: true, want: "Hello, you! (call #1)"},
		{name: "large", config: map[string]string{"greeting": large}, want: large + ", you! (call #1)"},
	}
	for _, g := range guests {
		t.Run(g.lang, func(t *testing.T) {
			h := newHost(t, slog.New(slog.DiscardHandler))
			for _, tt := range tests {
				m := load(t, h, bundle(t, g), func(o *host.LoadOptions) {
					o.Config = tt.config
					if tt.unset {
						mf := *o.Manifest
						mf.Config = nil
						o.Manifest, o.ManifestBytes = &mf, nil
					}
				})
				// A fresh organization per case, so each count starts at 1.
				res, err := m.Invoke(context.Background(), host.Request{Action: "greet", Input: []byte("you"),
					Principal: policy.Principal{User: "ann", Org: "org-" + tt.name}})
				if err != nil || string(res.Output) != tt.want {
					t.Errorf("%s: got %d bytes (%.40q...), %v; want %d bytes (%.40q...)", tt.name, len(res.Output), res.Output, err, len(tt.want), tt.want)
				}
			}
		})
	}
}

// TestGreetErrors: failures keep their code across the SDKs: a kv op the
// manifest does not ask for is denied (the guest passes the op's error
// on), and a corrupt counter is the action's own guest_error. The pooled
// instance keeps serving after each.
func TestGreetErrors(t *testing.T) {
	ctx := context.Background()
	// Under -short, Go alone: the others cost a cold Rust and AssemblyScript
	// build (about 95 s of make check), and the error path is the host's.
	for _, g := range testenv.ShortLanguages(guests) {
		t.Run(g.lang, func(t *testing.T) {
			dir := bundle(t, g)
			h := newHost(t, slog.New(slog.DiscardHandler))
			noKV := load(t, h, dir, func(o *host.LoadOptions) {
				mf := *o.Manifest
				mf.Capabilities.KV = false
				o.Manifest, o.ManifestBytes = &mf, nil
			})
			m := load(t, h, dir, nil)
			if err := hosttest.Store(h).KVPut(ctx, store.Scope{Org: ann.Org, Module: m.Name()}, "count", []byte("abc")); err != nil {
				t.Fatal(err)
			}
			tests := []struct {
				name   string
				m      *host.Module
				code   abi.Code
				reason string
			}{
				{"kv denied", noKV, abi.CodeDenied, "op kv.get"},
				{"not a number", m, abi.CodeGuestError, `kv key count holds "abc", not a number`},
			}
			for _, tt := range tests {
				_, err := tt.m.Invoke(ctx, host.Request{Action: "greet", Input: []byte("World"), Principal: ann})
				var he *host.Error
				if !errors.As(err, &he) || he.Code != tt.code || !strings.Contains(he.Reason, tt.reason) || he.Module != m.Name() || he.Action != "greet" {
					t.Errorf("%s: got %v; want %s with %q", tt.name, err, tt.code, tt.reason)
				}
			}
			if err := hosttest.Store(h).KVPut(ctx, store.Scope{Org: ann.Org, Module: m.Name()}, "count", []byte("41")); err != nil {
				t.Fatal(err)
			}
			if res, err := m.Invoke(ctx, host.Request{Action: "greet", Input: []byte("again"), Principal: ann}); err != nil || string(res.Output) != "Hello, again! (call #42)" {
				t.Fatalf("after the failure: %q, %v", res.Output, err)
			}
		})
	}
}

// TestSDK drives every part of the C (built as C and as C++), Rust,
// AssemblyScript and Ruby SDKs through their conformance fixtures, with one table: kv (including a
// value and a key list larger than one reply buffer or one page), config,
// log, the raw call, error codes both ways, binary input, and a trap that
// carries its message. TestSDKData drives their db, knowledge and task
// actions.
func TestSDK(t *testing.T) {
	testenv.Slow(t, "builds and drives every guest language's SDK fixture")
	ctx := context.Background()
	big := strings.Repeat("0123456789abcdef", 100<<10/16) // 100 KiB: StatusTooSmall, then a fetch
	var keys []string
	for i := range 1001 { // one more than a kv.list page
		keys = append(keys, fmt.Sprintf("p/%04d", i))
	}
	type fixture struct {
		lang string
		load func(t *testing.T, h *host.Host) *host.Module
	}
	var fixtures []fixture
	for _, g := range sdkFixtures {
		fixtures = append(fixtures, fixture{g.lang, func(t *testing.T, h *host.Host) *host.Module {
			return load(t, h, bundle(t, g), func(o *host.LoadOptions) { o.Config = map[string]string{"greeting": "hi"} })
		}})
	}
	// The Ruby SDK's fixture is a resident script plugin, loaded as moat
	// run loads one.
	fixtures = append(fixtures, fixture{"ruby", loadScriptFixture("examples/polyglot/testdata/sdk-ruby", func(mf *policy.Manifest) {
		mf.Config = map[string]string{"greeting": "hi"}
	})})
	for _, f := range fixtures {
		t.Run(f.lang, func(t *testing.T) {
			logs := newCapture()
			h := sdkHost(t, slog.New(logs))
			m := f.load(t, h)
			for _, k := range keys {
				if err := hosttest.Store(h).KVPut(ctx, store.Scope{Org: ann.Org, Module: m.Name()}, k, []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			tests := []struct {
				action, input string
				want          string
				code          abi.Code
				reason        string
			}{
				{action: "kv", input: "put color blue", want: "ok"},
				{action: "kv", input: "put colour gr\\een \"x\"", want: "ok"},
				{action: "kv", input: "get color", want: "blue"},
				{action: "kv", input: "get colour", want: "gr\\een \"x\""},
				{action: "kv", input: "list col", want: "color\ncolour"},
				{action: "kv", input: "del color", want: "deleted"},
				{action: "kv", input: "get color", want: "<not found>"},
				{action: "kv", input: "del color", want: "<not found>"},
				{action: "kv", input: "put big " + big, want: "ok"},
				{action: "kv", input: "get big", want: big},
				{action: "kv", input: "list p/", want: strings.Join(keys, "\n")},
				{action: "kv", input: "put " + strings.Repeat("k", abi.MaxKVKeyLen+1) + " v", code: abi.CodeTooLarge},
				{action: "config", input: "greeting", want: "hi"},
				{action: "config", input: "missing", code: abi.CodeNotFound, reason: "no config key missing"},
				{action: "log", input: "warn hello there", want: "ok"},
				{action: "log", input: "loud hello", code: abi.CodeInvalidArgument, reason: `level "loud"`},
				{action: "call", input: `config.get {"key":"greeting"}`, want: `{"value":"hi","found":true}`},
				{action: "call", input: "no.such.op {}", code: abi.CodeUnknownOp, reason: "no.such.op"},
				{action: "fail", input: "not_found the thing is gone", code: abi.CodeNotFound, reason: "the thing is gone"},
				{action: "fail", input: "denied \"quoted\"\n\tand \\ escaped ü", code: abi.CodeDenied, reason: "\"quoted\"\n\tand \\ escaped ü"},
				{action: "echo", input: "", want: ""},
				{action: "echo", input: "a\x00b\xff\n", want: "a\x00b\xff\n"},
				// The message reaches the host through the guest's stderr.
				{action: "trap", input: "deliberate trap", code: abi.CodeTrap, reason: "deliberate trap"},
				{action: "echo", input: "after the trap", want: "after the trap"}, // a fresh instance
			}
			for _, tt := range tests {
				res, err := m.Invoke(ctx, host.Request{Action: tt.action, Input: []byte(tt.input), Principal: ann})
				name := fmt.Sprintf("%s %.40q", tt.action, tt.input)
				if tt.code == "" {
					if err != nil || string(res.Output) != tt.want {
						t.Errorf("%s: got %d bytes %.60q, %v; want %d bytes %.60q", name, len(res.Output), res.Output, err, len(tt.want), tt.want)
					}
					continue
				}
				var he *host.Error
				if !errors.As(err, &he) || he.Code != tt.code || !strings.Contains(he.Reason, tt.reason) {
					t.Errorf("%s: got %v; want %s with %q", name, err, tt.code, tt.reason)
				}
			}
			var warn []record
			for _, r := range logs.guestRecords() {
				if _, stderr := r.attrs["stream"]; r.level == slog.LevelWarn && !stderr {
					warn = append(warn, r)
				}
			}
			if len(warn) != 1 || warn[0].msg != "hello there" || warn[0].attrs["guest.k"] != "v" || warn[0].attrs["action"] != "log" {
				t.Errorf("warn records %+v; want one \"hello there\" with guest.k=v", warn)
			}
		})
	}
}

// TestCSDK runs moat.h's unit tests (guests/c/moat_test.c: JSON, base64,
// the ops against a fake host), built natively with clang-19 under the
// address and undefined-behavior sanitizers.
func TestCSDK(t *testing.T) {
	clang, err := toolchains.Binary("clang-19", "clang-19")
	if err != nil {
		testenv.Require(t, err.Error())
	}
	root := testwasm.RepoRoot(t)
	bin := filepath.Join(t.TempDir(), "moat_test")
	if err := run(root, nil, clang, "-Wall", "-Wextra", "-Werror", "-Wno-unknown-attributes", "-fsanitize=address,undefined",
		"-fno-sanitize-recover=all", "-g", "-o", bin, "guests/c/moat_test.c"); err != nil {
		t.Fatal(err)
	}
	if err := run(root, nil, bin); err != nil {
		t.Fatal(err)
	}
}

// TestRustSDK runs the Rust crate's own unit tests (JSON, base64, the
// requests and replies of the ops against a fake host) and its doc tests
// with Debian's cargo and rustdoc, natively.
func TestRustSDK(t *testing.T) {
	testenv.Slow(t, "a cold Rust build")
	rustc, cargo, err := rustTools()
	var rustdoc string
	if err == nil {
		rustdoc, err = toolchains.Binary("rustdoc", "rustc")
	}
	if err != nil {
		testenv.Require(t, err.Error())
	}
	root := testwasm.RepoRoot(t)
	// RUSTDOC too: a rustdoc from rustup earlier on PATH reads none of
	// Debian's rustc's metadata.
	if err := run(filepath.Join(root, "guests/rust"), []string{"RUSTC=" + rustc, "RUSTDOC=" + rustdoc, "CARGO_TARGET_DIR=" + t.TempDir()},
		cargo, "test", "--quiet", "--offline"); err != nil {
		t.Fatal(err)
	}
}

// benchProfile grants kv (and what the SDK fixtures ask for) and sets no
// rate limit, so the benchmarks measure the invoke path, not a limiter (as
// host's benchmarks do).
const benchProfile = `
name: bench
on_ungranted: deny_at_call
default:
  capabilities: {kv: true, db: [notes], knowledge: [docs], tasks: true}
  limits: {memory: 128MiB, timeout: 10s}
`

// benchHost is a host that neither logs nor audits allowed invocations.
func benchHost(b *testing.B) *host.Host {
	b.Helper()
	p, err := policy.ParseProfile("bench.yaml", []byte(benchProfile))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	h, err := host.New(ctx, host.Config{DataDir: b.TempDir(), CacheDir: compileCache, Logger: slog.New(slog.DiscardHandler),
		Profile: p, OmitAllowedInvocationAudit: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close(ctx) })
	return h
}

// BenchmarkInvoke: one pooled invocation of greet per iteration (config.get,
// log.write, kv.get and kv.put: four op crossings and a SQLite write), per
// language, with the Go SDK as the reference.
func BenchmarkInvoke(b *testing.B) {
	ctx := context.Background()
	for _, g := range guests {
		b.Run(g.lang, func(b *testing.B) {
			dir := bundle(b, g)
			h := benchHost(b)
			m := load(b, h, dir, nil)
			req := host.Request{Action: "greet", Input: []byte("World"), Principal: ann, CorrelationID: "bench"}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := m.Invoke(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSDK: the SDKs without storage, on their conformance fixtures
// (the Go SDK's is testdata/goguest): echo is a bare invocation (input in,
// output out, no op); config is one config.get round trip with its JSON
// encoding and decoding.
func BenchmarkSDK(b *testing.B) {
	ctx := context.Background()
	plugins := append([]guest{{"go", "testdata/goguest", buildGo("./testdata/goguest")}}, sdkFixtures...)
	for _, g := range plugins {
		for _, c := range []struct{ action, input, want string }{
			{"echo", "hello", "hello"},
			{"config", "greeting", "hi"},
		} {
			b.Run(g.lang+"/"+c.action, func(b *testing.B) {
				dir := bundle(b, g)
				h := benchHost(b)
				m := load(b, h, dir, func(o *host.LoadOptions) { o.Config = map[string]string{"greeting": "hi"} })
				req := host.Request{Action: c.action, Input: []byte(c.input), Principal: ann, CorrelationID: "bench"}
				if res, err := m.Invoke(ctx, req); err != nil || string(res.Output) != c.want {
					b.Fatalf("%s = %q, %v; want %q", c.action, res.Output, err, c.want)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := m.Invoke(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
