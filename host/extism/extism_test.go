package extism_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/hosttest"
	"github.com/moat-sandbox/moat/policy"
)

var ann = policy.Principal{User: "ann", Org: "acme"}

const stockManifest = `
name: stock
version: 1.0.0
kind: extism
actions: [{name: greet}, {name: count}, {name: fail}, {name: spin}, {name: grow}, {name: echo}, {name: fetch}]
config: {greeting: Hi}
`

// TestStock drives a stock Extism plug-in (Extism Go PDK, nothing of moat)
// through one pooled module, in order: each failure must leave the module
// serving, and the instance that failed must not be reused.
func TestStock(t *testing.T) {
	logs := &syncBuffer{}
	h := newHost(t, nil, logs)
	m, err := h.Load(context.Background(), buildPlugin(t, "stock"), host.LoadOptions{
		Manifest: manifest(t, stockManifest), MaxIdle: 1,
		Limits: host.Limits{MemoryLimitPages: 1024, Timeout: 5 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind() != host.KindExtism {
		t.Fatalf("kind %s, want %s", m.Kind(), host.KindExtism)
	}
	tests := []struct {
		name, action, input string
		limits              host.Limits
		want                string
		code                abi.Code
		reason              string
	}{
		{name: "input, output and config", action: "greet", input: "World", want: "Hi, World!"},
		{name: "var, first call", action: "count", want: "1"},
		{name: "var, same instance", action: "count", want: "2"},
		{name: "plug-in error", action: "fail", input: "42", code: abi.CodeGuestError, reason: "no such order: 42"},
		{name: "an error leaves the instance in the pool", action: "count", want: "3"},
		{name: "loop forever", action: "spin", limits: host.Limits{Timeout: 300 * time.Millisecond}, code: abi.CodeTimeout, reason: "within 300ms"},
		{name: "the timed-out instance was discarded", action: "count", want: "1"},
		{name: "memory limit", action: "grow", input: "100", code: abi.CodeMemoryLimit, reason: "limit of 1024 pages (64 MiB)"},
		{name: "within the memory limit", action: "grow", input: "8", want: "8388608"},
		{name: "output cap", action: "echo", input: strings.Repeat("x", 100), limits: host.Limits{MaxOutputBytes: 10}, code: abi.CodeOutputTooLarge, reason: "output is 100 bytes; the limit is 10"},
		{name: "echo", action: "echo", input: "bytes\x00\xff", want: "bytes\x00\xff"},
		{name: "http_request without a grant", action: "fetch", input: "http://127.0.0.1:1/", code: abi.CodeDenied, reason: "http http://127.0.0.1:1 is not among the capabilities"},
		{name: "no such function", action: "nosuch", code: abi.CodeNoSuchAction, reason: "greet, count"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := m.Invoke(context.Background(), host.Request{Action: tt.action, Input: []byte(tt.input), Principal: ann, Limits: tt.limits})
			if tt.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				if string(res.Output) != tt.want {
					t.Fatalf("output %q, want %q", res.Output, tt.want)
				}
				return
			}
			var e *host.Error
			if !errors.As(err, &e) || e.Code != tt.code {
				t.Fatalf("err %v, want code %s", err, tt.code)
			}
			if !strings.Contains(e.Reason, tt.reason) || e.Module != "stock" || e.Action != tt.action {
				t.Fatalf("error %q (module %q, action %q): want the reason to contain %q", e.Reason, e.Module, e.Action, tt.reason)
			}
		})
	}
	// The plug-in's log_info call reached moat's log, tagged with the call.
	if l := logs.String(); !strings.Contains(l, `"msg":"greeting World"`) || !strings.Contains(l, `"module":"stock","action":"greet","user":"ann","org":"acme"`) {
		t.Errorf("the plug-in's log record is missing or untagged:\n%s", l)
	}
}

// TestDetect: an Extism plug-in is recognized by its imports, without a
// manifest; a manifest that says otherwise is refused.
func TestDetect(t *testing.T) {
	t.Parallel()
	wasm := buildPlugin(t, "stock")
	h := newHost(t, nil, nil)
	ctx := context.Background()
	tests := []struct {
		name     string
		manifest string
		code     abi.Code
		reason   string
	}{
		{name: "no manifest"},
		{name: "kind extism", manifest: "name: a\nversion: 1.0.0\nkind: extism\nactions: [{name: greet}]"},
		{name: "kind moat", manifest: "name: b\nversion: 1.0.0\nkind: moat\nactions: [{name: greet}]", code: abi.CodeBadModule, reason: "the manifest says kind moat, but the module is of kind extism: write kind: extism"},
		{name: "an action it does not export", manifest: "name: c\nversion: 1.0.0\nkind: extism\nactions: [{name: hello}]", code: abi.CodeBadModule, reason: "hello"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts host.LoadOptions
			if tt.manifest != "" {
				opts.Manifest = manifest(t, tt.manifest)
			}
			m, err := h.Load(ctx, wasm, opts)
			if tt.code != "" {
				if abi.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.reason) {
					t.Fatalf("err %v, want %s containing %q", err, tt.code, tt.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close(ctx)
			if m.Kind() != host.KindExtism || m.Manifest().Kind != policy.KindExtism {
				t.Fatalf("kind %s, manifest kind %s", m.Kind(), m.Manifest().Kind)
			}
			res, err := m.Invoke(ctx, host.Request{Action: "greet", Input: []byte("Bo"), Principal: ann})
			if err != nil || string(res.Output) != "Hello, Bo!" {
				t.Fatalf("greet: %q, %v", res.Output, err)
			}
		})
	}
	if acts := strings.Join(mustLoad(t, h, wasm).Actions(), " "); acts != "count echo fail fetch greet grow spin" {
		t.Errorf("actions %q: want the exported () -> i32 functions, without _initialize", acts)
	}
}

func mustLoad(t *testing.T, h *host.Host, wasm []byte) *host.Module {
	t.Helper()
	m, err := h.Load(context.Background(), wasm, host.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// TestMoatOps: a plug-in calls moat's ops through moat_call, with the
// caller's organization scoping the store, the grants deciding, and the
// audit trail recording.
func TestMoatOps(t *testing.T) {
	t.Parallel()
	wasm := buildPlugin(t, "moatops")
	h := newHost(t, nil, nil)
	ctx := context.Background()
	granted, err := h.Load(ctx, wasm, host.LoadOptions{Manifest: manifest(t, `
name: visits
kind: extism
version: 1.0.0
actions: [{name: visit}, {name: op}]
capabilities: {kv: true}
config: {op: config.get}
`)})
	if err != nil {
		t.Fatal(err)
	}
	ungranted, err := h.Load(ctx, wasm, host.LoadOptions{Manifest: manifest(t, "name: nokv\nkind: extism\nversion: 1.0.0\nactions: [{name: visit}]\n")})
	if err != nil {
		t.Fatal(err)
	}
	bob := policy.Principal{User: "bob", Org: "globex"}
	tests := []struct {
		name   string
		m      *host.Module
		action string
		who    policy.Principal
		input  string
		want   string
		code   abi.Code
		reason string
	}{
		{name: "first visit", m: granted, action: "visit", who: ann, input: "home", want: "1"},
		{name: "second visit", m: granted, action: "visit", who: ann, input: "home", want: "2"},
		{name: "another organization has its own store", m: granted, action: "visit", who: bob, input: "home", want: "1"},
		{name: "the count persisted for the first", m: granted, action: "visit", who: ann, input: "home", want: "3"},
		{name: "an op's reply", m: granted, action: "op", who: ann, input: `{"key":"op"}`, want: `{"value":"config.get","found":true}`},
		{name: "an op's error reaches the plug-in", m: granted, action: "op", who: ann, input: `{"key":""}`, code: abi.CodeGuestError, reason: "config.get: invalid_argument: config.get: key is empty"},
		{name: "kv not requested: denied", m: ungranted, action: "visit", who: ann, input: "home", code: abi.CodeGuestError, reason: "kv.get: denied: op kv.get: kv is not among the capabilities the module requests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := tt.m.Invoke(ctx, host.Request{Action: tt.action, Input: []byte(tt.input), Principal: tt.who, CorrelationID: "c-" + tt.who.User})
			if tt.code != "" {
				if abi.CodeOf(err) != tt.code || !strings.Contains(err.Error(), tt.reason) {
					t.Fatalf("err %v, want %s containing %q", err, tt.code, tt.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(res.Output) != tt.want {
				t.Fatalf("output %q, want %q", res.Output, tt.want)
			}
		})
	}
	if err := hosttest.Audit(h).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := hosttest.Audit(h).Query(ctx, audit.Filter{Kind: audit.KindOp, Module: "visits", Org: "globex"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Op != abi.OpKVPut || evs[0].Decision != audit.Allow || evs[0].User != "bob" || evs[0].MutationID == "" || evs[0].CorrelationID != "c-bob" {
		t.Errorf("audit of globex's kv.put: %+v", evs)
	}
	denied, err := hosttest.Audit(h).Query(ctx, audit.Filter{Kind: audit.KindOp, Module: "nokv", Decision: audit.Deny})
	if err != nil {
		t.Fatal(err)
	}
	if len(denied) != 1 || denied[0].Op != abi.OpKVGet || denied[0].Rule != "manifest capabilities" {
		t.Errorf("audit of the denied kv.get: %+v", denied)
	}
}

// TestCPlugin: an Extism plug-in in C (guests/extism/c/memo.c, Extism
// kernel imports declared by hand) reaches moat's kv through moat_call.
func TestCPlugin(t *testing.T) {
	t.Parallel()
	clang, err := exec.LookPath("clang-19")
	if err != nil {
		requireTool(t, "clang-19 is not installed; `make toolchains` installs it (apt packages clang-19, lld-19, wasi-libc)")
	}
	out := filepath.Join(t.TempDir(), "memo.wasm")
	if msg, err := exec.Command(clang, "--target=wasm32-wasi", "-O2", "-Wall", "-Werror", "-mexec-model=reactor", "-Wl,--strip-all",
		"-o", out, "../../guests/extism/c/memo.c").CombinedOutput(); err != nil {
		t.Fatalf("clang: %v\n%s", err, msg)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t, nil, nil)
	ctx := context.Background()
	m, err := h.Load(ctx, wasm, host.LoadOptions{Manifest: manifest(t, `
name: memo
version: 1.0.0
kind: extism
actions: [{name: remember}, {name: recall}]
capabilities: {kv: true}
`)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		action, input string
		who           policy.Principal
		want          string
		code          abi.Code
	}{
		{action: "recall", who: ann, want: `{"resp":{"found":false}}`},
		{action: "remember", who: ann, input: "buy milk", want: `{"resp":{}}`},
		{action: "recall", who: ann, want: `{"resp":{"value":"YnV5IG1pbGs=","found":true}}`},
		{action: "recall", who: policy.Principal{User: "bob", Org: "globex"}, want: `{"resp":{"found":false}}`},
		{action: "remember", who: ann, input: strings.Repeat("x", 5000), code: abi.CodeGuestError},
	}
	for _, tt := range tests {
		t.Run(tt.action+" "+tt.who.Org, func(t *testing.T) {
			res, err := m.Invoke(ctx, host.Request{Action: tt.action, Input: []byte(tt.input), Principal: tt.who})
			if tt.code != "" {
				if abi.CodeOf(err) != tt.code || !strings.Contains(err.Error(), "a note is at most 4096 bytes") {
					t.Fatalf("err %v, want %s with the plug-in's message", err, tt.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(res.Output) != tt.want {
				t.Fatalf("output %s, want %s", res.Output, tt.want)
			}
		})
	}
}

// TestSameAsExtismSDK: moat gives the output and the error message that
// the extism go-sdk (what the Extism CLI runs) gives for the same
// plug-in, function, input and config.
func TestSameAsExtismSDK(t *testing.T) {
	t.Parallel()
	wasm := buildPlugin(t, "stock")
	ctx := context.Background()
	config := map[string]string{"greeting": "Bonjour"}
	sdk, err := extism.NewPlugin(ctx, extism.Manifest{Wasm: []extism.Wasm{extism.WasmData{Data: wasm}}, Config: config},
		extism.PluginConfig{EnableWasi: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close(ctx)
	m, err := newHost(t, nil, nil).Load(ctx, wasm, host.LoadOptions{Config: config})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ function, input string }{
		{"greet", "Zoé"}, {"count", ""}, {"count", ""}, {"echo", "\x00binary\xff"}, {"echo", ""}, {"fail", "7"}, {"grow", "1"},
	} {
		t.Run(tt.function, func(t *testing.T) {
			_, want, wantErr := sdk.Call(tt.function, []byte(tt.input))
			res, err := m.Invoke(ctx, host.Request{Action: tt.function, Input: []byte(tt.input), Principal: ann})
			if string(res.Output) != string(want) {
				t.Fatalf("moat output %q, the go-sdk's %q", res.Output, want)
			}
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("moat error %v, the go-sdk's %v", err, wantErr)
			}
			var e *host.Error
			if err != nil && (!errors.As(err, &e) || e.Code != abi.CodeGuestError || e.Reason != wantErr.Error()) {
				t.Fatalf("moat error %v, want guest_error with the go-sdk's message %q", err, wantErr)
			}
		})
	}
}

// TestSensitiveOpConfirmation: a sensitive op called through moat_call
// turns the invocation into a confirmation request, and the confirmed
// invocation runs it, once.
func TestSensitiveOpConfirmation(t *testing.T) {
	t.Parallel()
	p := profile(t, "name: careful\nsensitive_ops: [kv.put]\ndefault: {capabilities: {kv: true}}\n")
	h := newHost(t, p, nil)
	ctx := context.Background()
	m, err := h.Load(ctx, buildPlugin(t, "moatops"), host.LoadOptions{Manifest: manifest(t,
		"name: visits\nkind: extism\nversion: 1.0.0\nactions: [{name: visit}]\ncapabilities: {kv: true}\n")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Invoke(ctx, host.Request{Action: "visit", Input: []byte("home"), Principal: ann})
	var e *host.Error
	if !errors.As(err, &e) || e.Code != abi.CodeConfirmationRequired || e.Confirmation == nil || !strings.Contains(e.Confirmation.Summary, "sensitive op kv.put") {
		t.Fatalf("err %v, want confirmation_required for kv.put", err)
	}
	tests := []struct {
		name string
		want string
		code abi.Code
	}{
		{name: "confirmed", want: "1"},
		{name: "replayed", code: abi.CodeDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := m.Confirm(ctx, host.ConfirmRequest{Token: e.Confirmation.Token, Principal: ann})
			if tt.code != "" {
				if abi.CodeOf(err) != tt.code {
					t.Fatalf("err %v, want %s", err, tt.code)
				}
				return
			}
			if err != nil || string(res.Output) != tt.want {
				t.Fatalf("output %q, err %v; want %q", res.Output, err, tt.want)
			}
		})
	}
}

// TestConcurrentCalls: concurrent invocations of a pooled module each get
// an instance of their own and their own output.
func TestConcurrentCalls(t *testing.T) {
	t.Parallel()
	m, err := newHost(t, nil, nil).Load(context.Background(), buildPlugin(t, "stock"), host.LoadOptions{MaxIdle: 4})
	if err != nil {
		t.Fatal(err)
	}
	const workers, calls = 6, 10
	errs := make(chan error, workers*calls)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				name := fmt.Sprintf("w%d-%d", w, i)
				res, err := m.Invoke(context.Background(), host.Request{Action: "greet", Input: []byte(name), Principal: ann})
				if err == nil && string(res.Output) != "Hello, "+name+"!" {
					err = fmt.Errorf("greet %s: output %q", name, res.Output)
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestCloseWhileCalling: closing a module lets the call in flight end on
// its own terms, and refuses later calls.
func TestCloseWhileCalling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, err := newHost(t, nil, nil).Load(ctx, buildPlugin(t, "stock"), host.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A warm instance in the pool, so the spinning call starts at once.
	if _, err := m.Invoke(ctx, host.Request{Action: "greet", Principal: ann}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := m.Invoke(ctx, host.Request{Action: "spin", Principal: ann, Limits: host.Limits{Timeout: 500 * time.Millisecond}})
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the call start spinning
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; abi.CodeOf(err) != abi.CodeTimeout {
		t.Fatalf("the call in flight: %v, want its timeout", err)
	}
	if _, err := m.Invoke(ctx, host.Request{Action: "greet", Principal: ann}); abi.CodeOf(err) != abi.CodeUnavailable {
		t.Fatalf("a call after Close: %v, want unavailable", err)
	}
}
