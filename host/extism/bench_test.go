package extism_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/moat-sandbox/moat/host"
	"github.com/tetratelabs/wazero"
)

// BenchmarkCall: the same stock plug-in's echo function with a 13-byte
// input, called repeatedly through moat (a pooled instance, the policy and
// limits of every invocation, the audit of allowed calls left out as a
// busy host would) and through the extism go-sdk directly (one Plugin,
// Plugin.Call, with a timeout as moat has). Both sides run the go-sdk's
// Plugin.CallWithContext; the difference is moat's wrapper.
func BenchmarkCall(b *testing.B) {
	ctx := context.Background()
	wasm := buildPlugin(b, "stock")
	input := []byte("Hello, World!")
	const timeout = 10 * time.Second
	b.Run("moat", func(b *testing.B) {
		h, err := host.New(ctx, host.Config{DataDir: b.TempDir(), CacheDir: cacheDir, OmitAllowedInvocationAudit: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			b.Fatal(err)
		}
		defer h.Close(ctx)
		m, err := h.Load(ctx, wasm, host.LoadOptions{Limits: host.Limits{Timeout: timeout}})
		if err != nil {
			b.Fatal(err)
		}
		req := host.Request{Action: "echo", Input: input, Principal: ann, CorrelationID: "bench"}
		if _, err := m.Invoke(ctx, req); err != nil { // the instance and the Go runtime's _initialize
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			res, err := m.Invoke(ctx, req)
			if err != nil || len(res.Output) != len(input) {
				b.Fatal(len(res.Output), err)
			}
		}
	})
	b.Run("go-sdk", func(b *testing.B) {
		cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
		if err != nil {
			b.Fatal(err)
		}
		manifest := extism.Manifest{Wasm: []extism.Wasm{extism.WasmData{Data: wasm}}, Timeout: uint64(timeout / time.Millisecond)}
		p, err := extism.NewPlugin(ctx, manifest, extism.PluginConfig{EnableWasi: true,
			RuntimeConfig: wazero.NewRuntimeConfigCompiler().WithCompilationCache(cache)}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close(ctx)
		if _, _, err := p.Call("echo", input); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rc, out, err := p.Call("echo", input)
			if err != nil || rc != 0 || len(out) != len(input) {
				b.Fatal(rc, len(out), err)
			}
		}
	})
}

// BenchmarkMoatCall: one invocation that makes one moat_call (config.get)
// from the plug-in: the op's cost through Extism memory, on top of
// BenchmarkCall/moat.
func BenchmarkMoatCall(b *testing.B) {
	ctx := context.Background()
	h, err := host.New(ctx, host.Config{DataDir: b.TempDir(), CacheDir: cacheDir, OmitAllowedInvocationAudit: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(ctx)
	m, err := h.Load(ctx, buildPlugin(b, "moatops"), host.LoadOptions{Config: map[string]string{"op": "config.get"}})
	if err != nil {
		b.Fatal(err)
	}
	req := host.Request{Action: "op", Input: []byte(`{"key":"op"}`), Principal: ann}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := m.Invoke(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
