package host_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
)

func loadGoGuest(t testing.TB, h *host.Host, name string) *host.Module {
	t.Helper()
	mf, err := policy.ParseManifest("moat.yaml", []byte("name: "+name+goguestManifest))
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.Load(context.Background(), testwasm.BuildGo(t, "./testdata/goguest", true), host.LoadOptions{
		Manifest: mf,
		Config:   map[string]string{"greeting": "hi"},
		Limits:   host.Limits{MemoryLimitPages: 1024, Timeout: 5 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// goguestManifest declares every action of testdata/goguest and the kv
// capability; the name is prepended.
const goguestManifest = `
version: 1.0.0
actions: [{name: echo}, {name: upper}, {name: config}, {name: kv}, {name: log}, {name: fail}, {name: panic},
  {name: loop}, {name: grow}, {name: big}, {name: unknownop}, {name: bigcall}, {name: exit}]
capabilities: {kv: true}
`

// TestGoGuest drives the Go SDK fixture through every path, in order, on
// one pooled module: each failure must leave the module serving.
func TestGoGuest(t *testing.T) {
	t.Parallel()
	m := loadGoGuest(t, newHost(t, nil), "goguest")
	if !m.Info().Reactor {
		t.Fatal("a Go c-shared plugin should be a reactor")
	}
	tests := []struct {
		action, input string
		limits        host.Limits
		want          string
		code          abi.Code
		reason        string
	}{
		{action: "echo", input: "hello", want: "hello"},
		{action: "upper", input: "hello", want: "HELLO"},
		{action: "config", input: "greeting", want: "hi"},
		{action: "config", input: "missing", code: abi.CodeNotFound},
		{action: "kv", input: "put color blue", want: "ok"},
		{action: "kv", input: "put colour green", want: "ok"},
		{action: "kv", input: "get color", want: "blue"},
		{action: "kv", input: "list col", want: "color\ncolour"},
		{action: "kv", input: "del color", want: "deleted"},
		{action: "kv", input: "get color", want: "<not found>"},
		{action: "bigcall", want: "102400"},
		{action: "log", input: "a line", want: "ok"},
		{action: "fail", input: "x", code: abi.CodeGuestError, reason: "deliberate failure: x"},
		{action: "panic", code: abi.CodeGuestError, reason: "deliberate panic"},
		{action: "unknownop", code: abi.CodeUnknownOp, reason: "no.such.op"},
		{action: "big", input: "2000000", code: abi.CodeOutputTooLarge, reason: "output is 2000000 bytes"},
		{action: "grow", input: "256", code: abi.CodeMemoryLimit, reason: "limit of 1024 pages (64 MiB)"},
		{action: "exit", code: abi.CodeTrap, reason: "exited with code 3"},
		{action: "loop", limits: host.Limits{Timeout: 200 * time.Millisecond}, code: abi.CodeTimeout},
		{action: "nosuch", code: abi.CodeNoSuchAction, reason: "echo, upper, config"},
	}
	for _, tt := range tests {
		t.Run(tt.action+" "+tt.input, func(t *testing.T) {
			res, err := m.Invoke(context.Background(), host.Request{Action: tt.action, Input: []byte(tt.input), Principal: ann, Limits: tt.limits})
			if tt.code == "" {
				if err != nil || string(res.Output) != tt.want {
					t.Fatalf("got %q, %v; want %q", res.Output, err, tt.want)
				}
				return
			}
			var he *host.Error
			if !errors.As(err, &he) || he.Code != tt.code || !strings.Contains(he.Reason, tt.reason) || he.Module != "goguest" || he.Action != tt.action {
				t.Fatalf("got %v; want %s with %q", err, tt.code, tt.reason)
			}
			if got, err := invoke(m, "echo", "alive"); err != nil || got != "alive" {
				t.Fatalf("after %s: %q, %v", tt.action, got, err)
			}
		})
	}
}

// TestKVScope: one organization never sees another's keys, a module never
// sees another module's, and the data survives a restart of the host.
func TestKVScope(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	newH := func() *host.Host {
		h, err := host.New(ctx, host.Config{DataDir: dir, CacheDir: compileCache, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	kv := func(m *host.Module, org, cmd string) string {
		res, err := m.Invoke(ctx, host.Request{Action: "kv", Input: []byte(cmd), Principal: policy.Principal{User: "u", Org: org}})
		if err != nil {
			t.Fatalf("%s %q: %v", org, cmd, err)
		}
		return string(res.Output)
	}
	h := newH()
	a, b := loadGoGuest(t, h, "plugin-a"), loadGoGuest(t, h, "plugin-b")
	kv(a, "acme", "put secret acme-only")
	for _, tt := range []struct {
		m        *host.Module
		org, cmd string
		want     string
	}{
		{a, "acme", "get secret", "acme-only"},
		{a, "globex", "get secret", "<not found>"},
		{a, "globex", "list ", ""},
		{a, "globex", "del secret", "<not found>"},
		{b, "acme", "get secret", "<not found>"},
		{a, "acme", "get secret", "acme-only"}, // globex's delete did not touch it
	} {
		if got := kv(tt.m, tt.org, tt.cmd); got != tt.want {
			t.Errorf("%s/%s %q = %q, want %q", tt.m.Name(), tt.org, tt.cmd, got, tt.want)
		}
	}
	h.Close(ctx)

	h2 := newH()
	defer h2.Close(ctx)
	if got := kv(loadGoGuest(t, h2, "plugin-a"), "acme", "get secret"); got != "acme-only" {
		t.Fatalf("after restart: %q", got)
	}
}
