package host_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy"
)

var ann = policy.Principal{User: "ann", Org: "acme", Roles: []string{"dev"}}

// newHost starts a host in a fresh data directory, logging to buf.
func newHost(t testing.TB, buf io.Writer) *host.Host {
	t.Helper()
	if buf == nil {
		buf = io.Discard
	}
	ctx := context.Background()
	h, err := host.New(ctx, host.Config{
		DataDir:  t.TempDir(),
		CacheDir: compileCache,
		Logger:   slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(ctx) })
	return h
}

// TestLoadCacheUnwritable: a compile cache the host cannot write fails a
// load as the host's fault (internal, naming the directory and the fix),
// not as a bad module. The cache's directory is replaced by a file after
// the host opened it, which refuses root too.
func TestLoadCacheUnwritable(t *testing.T) {
	t.Parallel()
	cache := filepath.Join(t.TempDir(), "cache")
	ctx := context.Background()
	h, err := host.New(ctx, host.Config{DataDir: t.TempDir(), CacheDir: cache, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	entries, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries { // wazero's directory of its version, and the others
		p := filepath.Join(cache, e.Name())
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err = h.Load(ctx, fixture(t, "plugin.wasm"), host.LoadOptions{})
	if abi.CodeOf(err) != abi.CodeInternal || !strings.Contains(err.Error(), cache) || !strings.Contains(err.Error(), "cache_dir") {
		t.Fatalf("load with an unwritable cache: %v; want internal naming %s and the setting", err, cache)
	}
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../testdata/" + name)
	if err != nil {
		t.Fatalf("%v (run `make fixtures` to rebuild the WAT fixtures)", err)
	}
	return b
}

func loadPlugin(t testing.TB, h *host.Host, opts host.LoadOptions) *host.Module {
	t.Helper()
	if opts.Name == "" {
		opts.Name = "wat-plugin"
	}
	m, err := h.Load(context.Background(), fixture(t, "plugin.wasm"), opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func invoke(m *host.Module, action, input string) (string, error) {
	res, err := m.Invoke(context.Background(), host.Request{Action: action, Input: []byte(input), Principal: ann, CorrelationID: "test-1"})
	return string(res.Output), err
}

func TestInvokeWAT(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	m := loadPlugin(t, h, host.LoadOptions{Config: map[string]string{"greeting": "hi"}})
	if got, want := m.Kind(), host.KindPlugin; got != want {
		t.Fatalf("kind %q, want %q", got, want)
	}
	tests := []struct {
		action, input, want string
	}{
		{"noop", "", ""},
		{"echo", "hello", "hello"},
		{"echo", "", ""},
		{"config", `{"key":"greeting"}`, `{"value":"hi","found":true}`},
		{"config", `{"key":"nope"}`, `{"value":"","found":false}`},
		{"log", `{"level":"info","message":"from wat"}`, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.action, func(t *testing.T) {
			got, err := invoke(m, tt.action, tt.input)
			if err != nil || got != tt.want {
				t.Fatalf("%s(%q) = %q, %v; want %q", tt.action, tt.input, got, err, tt.want)
			}
		})
	}
}

// TestBadInput checks that each kind of bad input or hostile guest gives a
// typed error naming the module, the action and the cause, and that the
// same host and module still serve a good invoke afterwards.
func TestBadInput(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	m := loadPlugin(t, h, host.LoadOptions{Limits: host.Limits{MemoryLimitPages: 64, MaxOutputBytes: 64 << 10, Timeout: time.Second}})
	tests := []struct {
		name    string
		action  string
		input   string
		limits  host.Limits
		code    abi.Code
		reason  string
		timeout time.Duration
	}{
		{name: "missing action", action: "nosuch", code: abi.CodeNoSuchAction, reason: `no action "nosuch"; the module's actions are: noop, echo`},
		{name: "unknown op", action: "unknownop", input: `{}`, code: abi.CodeUnknownOp, reason: `no op "no.such.op"`},
		{name: "input too large", action: "echo", input: strings.Repeat("x", 2048), limits: host.Limits{MaxInputBytes: 1024}, code: abi.CodeInputTooLarge, reason: "input is 2048 bytes; the limit is 1024"},
		{name: "output too large", action: "big", code: abi.CodeOutputTooLarge, reason: "output is 131072 bytes; the limit is 65536"},
		{name: "trap", action: "trap", code: abi.CodeTrap, reason: "unreachable"},
		{name: "bad op pointer", action: "badptr", code: abi.CodeGuestFault, reason: "op name [2147418112, +10) is outside guest memory"},
		{name: "bad output pointer", action: "badout", code: abi.CodeGuestFault, reason: "outside guest memory"},
		{name: "fetch without pending reply", action: "fetchbad", code: abi.CodeGuestFault, reason: "no pending reply"},
		{name: "memory limit", action: "grow", code: abi.CodeMemoryLimit, reason: "past the limit of 64 pages (4 MiB)"},
		{name: "guest error", action: "fail", code: abi.CodeGuestError, reason: "deliberate failure"},
		{name: "bad config request", action: "config", input: `{"key":`, code: abi.CodeInvalidArgument, reason: "config.get: the request is not valid JSON"},
		{name: "timeout", action: "loop", limits: host.Limits{Timeout: 50 * time.Millisecond}, code: abi.CodeTimeout, reason: "did not finish within 50ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Invoke(context.Background(), host.Request{Action: tt.action, Input: []byte(tt.input), Principal: ann, Limits: tt.limits})
			var he *host.Error
			if !errors.As(err, &he) {
				t.Fatalf("want *host.Error, got %T %v", err, err)
			}
			if he.Code != tt.code || he.Module != "wat-plugin" || he.Action != tt.action || !strings.Contains(he.Reason, tt.reason) {
				t.Fatalf("got code=%s module=%q action=%q reason=%q\nwant code=%s reason containing %q", he.Code, he.Module, he.Action, he.Reason, tt.code, tt.reason)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
			// The same module still serves.
			if got, err := invoke(m, "echo", "still here"); err != nil || got != "still here" {
				t.Fatalf("after %s: echo = %q, %v", tt.name, got, err)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	tests := []struct {
		name   string
		wasm   []byte
		opts   host.LoadOptions
		code   abi.Code
		reason string
	}{
		{"empty", nil, host.LoadOptions{}, abi.CodeBadModule, "empty"},
		{"not wasm", []byte("#!/bin/sh\necho hi\n"), host.LoadOptions{}, abi.CodeBadModule, `not a WebAssembly binary: it starts with "#!/b"`},
		{"wat text", []byte("(module)"), host.LoadOptions{}, abi.CodeBadModule, "wat2wasm"},
		{"truncated", fixture(t, "plugin.wasm")[:100], host.LoadOptions{}, abi.CodeBadModule, "invalid WebAssembly"},
		{"wrong abi version", fixture(t, "abi2.wasm"), host.LoadOptions{}, abi.CodeABIVersion, "speaks moat ABI v2; this host speaks v1"},
		{"missing export", fixture(t, "noalloc.wasm"), host.LoadOptions{}, abi.CodeBadModule, "must export moat_alloc"},
		{"unknown import", fixture(t, "badimport.wasm"), host.LoadOptions{}, abi.CodeBadModule, "imports env.launch_missiles, which this host does not provide"},
		{"bad name", fixture(t, "plugin.wasm"), host.LoadOptions{Name: "Bad Name"}, abi.CodeInvalidArgument, "module name"},
		{"memory over 4 GiB", fixture(t, "plugin.wasm"), host.LoadOptions{Limits: host.Limits{MemoryLimitPages: 70000}}, abi.CodeInvalidArgument, "4096 MiB"},
		{"bad isolation", fixture(t, "plugin.wasm"), host.LoadOptions{Isolation: "shared"}, abi.CodeInvalidArgument, "isolation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.Load(context.Background(), tt.wasm, tt.opts)
			var he *host.Error
			if !errors.As(err, &he) || he.Code != tt.code || !strings.Contains(he.Reason, tt.reason) {
				t.Fatalf("got %v; want code %s with %q", err, tt.code, tt.reason)
			}
		})
	}
	// The host still loads and serves a good module.
	if got, err := invoke(loadPlugin(t, h, host.LoadOptions{}), "echo", "ok"); err != nil || got != "ok" {
		t.Fatalf("echo after load errors = %q, %v", got, err)
	}
}

func TestPrincipalRequired(t *testing.T) {
	t.Parallel()
	m := loadPlugin(t, newHost(t, nil), host.LoadOptions{})
	_, err := m.Invoke(context.Background(), host.Request{Action: "noop"})
	if abi.CodeOf(err) != abi.CodeInvalidArgument || !strings.Contains(err.Error(), "principal org is empty") {
		t.Fatalf("got %v", err)
	}
}

// TestTimeoutPrompt: a guest stuck in a loop is stopped within 100 ms of its
// deadline, its instance is discarded, and the next invoke works.
func TestTimeoutPrompt(t *testing.T) {
	testenv.Timing(t)
	m := loadPlugin(t, newHost(t, nil), host.LoadOptions{})
	for i := 0; i < 5; i++ {
		start := time.Now()
		_, err := m.Invoke(context.Background(), host.Request{Action: "loop", Principal: ann, Limits: host.Limits{Timeout: 100 * time.Millisecond}})
		late := time.Since(start) - 100*time.Millisecond
		if !errors.Is(err, host.ErrTimeout) {
			t.Fatalf("want timeout, got %v", err)
		}
		if late > 100*time.Millisecond {
			t.Fatalf("stopped %s after the deadline; want within 100ms", late)
		}
		if got, err := invoke(m, "echo", "next"); err != nil || got != "next" {
			t.Fatalf("after timeout: %q, %v", got, err)
		}
	}
}

func TestCancel(t *testing.T) {
	m := loadPlugin(t, newHost(t, nil), host.LoadOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err := m.Invoke(ctx, host.Request{Action: "loop", Principal: ann})
	if !errors.Is(err, host.ErrCanceled) {
		t.Fatalf("want canceled, got %v", err)
	}
}

// TestIsolation: a pooled instance keeps its state between calls (here, the
// memory it grew to take a large input); a fresh instance never does.
func TestIsolation(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	for _, tt := range []struct {
		iso   host.Isolation
		pages int
	}{{host.IsolationPooled, 5}, {host.IsolationFresh, 2}} {
		t.Run(string(tt.iso), func(t *testing.T) {
			m := loadPlugin(t, h, host.LoadOptions{Name: "iso-" + string(tt.iso), Isolation: tt.iso})
			if _, err := invoke(m, "echo", strings.Repeat("x", 200<<10)); err != nil {
				t.Fatal(err)
			}
			// "big" returns all of the instance's memory.
			out, err := invoke(m, "big", "")
			if err != nil || len(out) != tt.pages*65536 {
				t.Fatalf("big: %d bytes (%d pages), %v; want %d pages", len(out), len(out)/65536, err, tt.pages)
			}
		})
	}
}

// TestGuestLog: log.write lands in the host log tagged with the module,
// action, principal and correlation id.
func TestGuestLog(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	m := loadPlugin(t, newHost(t, &logs), host.LoadOptions{})
	if _, err := invoke(m, "log", `{"level":"warn","message":"disk almost full","fields":{"pct":93}}`); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"level":"WARN"`, `"msg":"disk almost full"`, `"module":"wat-plugin"`, `"action":"log"`,
		`"user":"ann"`, `"org":"acme"`, `"correlation_id":"test-1"`, `"guest.pct":93`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
	if _, err := invoke(m, "log", `{"level":"loud","message":"x"}`); abi.CodeOf(err) != abi.CodeInvalidArgument {
		t.Fatalf("bad level: %v", err)
	}
}

func TestConcurrentInvokes(t *testing.T) {
	t.Parallel()
	m := loadPlugin(t, newHost(t, nil), host.LoadOptions{})
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		go func(g int) {
			for i := 0; i < 200; i++ {
				in := strings.Repeat(string(rune('a'+g)), i%50+1)
				got, err := invoke(m, "echo", in)
				if err != nil || got != in {
					errs <- errors.Join(err, errors.New("echo mismatch: "+got))
					return
				}
			}
			errs <- nil
		}(g)
	}
	for g := 0; g < 16; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestInspect(t *testing.T) {
	t.Parallel()
	m := loadPlugin(t, newHost(t, nil), host.LoadOptions{})
	info := m.Info()
	if info.Digest != host.Digest(fixture(t, "plugin.wasm")) || len(info.Digest) != 64 {
		t.Fatalf("digest %q", info.Digest)
	}
	if len(info.Imports) != 1 || info.Imports[0].String() != "moat.call(i32, i32, i32, i32, i32, i32) -> (i64)" {
		t.Fatalf("imports %v", info.Imports)
	}
	if strings.Join(info.Actions, ",") != "noop,echo,loop,config,unknownop,badptr,badout,trap,grow,fail,big,configloop,log,fetchbad" {
		t.Fatalf("actions %v", info.Actions)
	}
}

// TestCompileCacheAcrossHosts: a second host on the same data directory
// (as a second process would be) gets the machine code from the disk cache.
func TestCompileCacheAcrossHosts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	var fromCache []bool
	for i := 0; i < 2; i++ {
		h, err := host.New(ctx, host.Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		m, err := h.Load(ctx, fixture(t, "plugin.wasm"), host.LoadOptions{Name: "p"})
		if err != nil {
			t.Fatal(err)
		}
		fromCache = append(fromCache, m.Info().Compile.FromDiskCache)
		h.Close(ctx)
	}
	if fromCache[0] || !fromCache[1] {
		t.Fatalf("from disk cache: first %v, second %v; want false, true", fromCache[0], fromCache[1])
	}
}

// TestLoadFirstTime: LoadOptions.FirstTime reports the compile to machine
// code only when the compilation cache does not hold it: the first host
// of a cache directory compiles (FirstTime called), a second host of the
// same directory reads the code back and must not say it is preparing
// anything "once" again.
func TestLoadFirstTime(t *testing.T) {
	t.Parallel()
	cache := filepath.Join(t.TempDir(), "cache")
	ctx := context.Background()
	for i, want := range []int{1, 0, 0} {
		h, err := host.New(ctx, host.Config{DataDir: t.TempDir(), CacheDir: cache, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		calls, ended := 0, 0
		m, err := h.Load(ctx, fixture(t, "plugin.wasm"), host.LoadOptions{Name: "first", FirstTime: func(stage string) func() {
			if stage != "load" {
				t.Errorf("stage %q, want load", stage)
			}
			calls++
			return func() { ended++ }
		}})
		if err != nil {
			t.Fatal(err)
		}
		if calls != want || ended != calls {
			t.Errorf("host %d of one cache: FirstTime called %d times (ended %d), want %d", i+1, calls, ended, want)
		}
		m.Close(ctx)
		h.Close(ctx)
	}
}
