package host_test

// Benchmarks that `make bench` runs side by side and summarizes with
// internal/benchtable. Each moat figure sits next to its baseline measured
// in the same run: raw wazero for the invoke and the op round trip, extism
// go-sdk for the invoke, and raw wazero instantiation for fresh instances.

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/store"
	_ "github.com/moat-sandbox/moat/host/store/postgres" // moat-*-postgres
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

const benchTimeout = 10 * time.Second

// benchProfile grants what the fixtures use and sets no rate or
// concurrency limit, so the benchmarks measure the invoke path, not a
// limiter.
const benchProfile = `
name: bench
default:
  capabilities: {kv: true}
  limits: {memory: 128MiB, timeout: 10s}
`

func quietHost(b *testing.B, cfgs ...func(*host.Config)) *host.Host {
	b.Helper()
	ctx := context.Background()
	p, err := policy.ParseProfile("bench.yaml", []byte(benchProfile))
	if err != nil {
		b.Fatal(err)
	}
	cfg := host.Config{DataDir: b.TempDir(), Logger: slog.New(slog.DiscardHandler), Profile: p, OmitAllowedInvocationAudit: true}
	for _, f := range cfgs {
		f(&cfg)
	}
	h, err := host.New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close(ctx) })
	return h
}

// onPostgres puts the host's store on a fresh PostgreSQL database.
func onPostgres(b *testing.B) func(*host.Config) {
	b.Helper()
	url := pgtest.Database(b)
	st, err := store.Open(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return func(c *host.Config) { c.Store = st }
}

// rawRuntime is the baseline: wazero with the same engine, with
// CloseOnContextDone (the way raw wazero stops a guest at its deadline;
// closeOnDone false turns it off), and a do-nothing host function in
// place of moat.call.
func rawRuntime(b *testing.B, importModule, importName string, closeOnDone ...bool) wazero.Runtime {
	b.Helper()
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCloseOnContextDone(len(closeOnDone) == 0 || closeOnDone[0]))
	b.Cleanup(func() { r.Close(ctx) })
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	nop := api.GoModuleFunc(func(_ context.Context, _ api.Module, stack []uint64) { stack[0] = 0 })
	_, err := r.NewHostModuleBuilder(importModule).NewFunctionBuilder().
		WithGoModuleFunction(nop, []api.ValueType{i32, i32, i32, i32, i32, i32}, []api.ValueType{i64}).
		Export(importName).Instantiate(ctx)
	if err != nil {
		b.Fatal(err)
	}
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	return r
}

// BenchmarkInvoke: a trivial action (noop) on a pooled instance with a
// deadline on every call.
func BenchmarkInvoke(b *testing.B) {
	ctx := context.Background()
	// The cluster of the -postgres rows is stopped by TestMain (main_test.go):
	// stopped here, the benchmarks after this one would find it gone.
	b.Run("raw-wazero", func(b *testing.B) {
		r := rawRuntime(b, "moat", "call")
		mod, err := r.Instantiate(ctx, fixture(b, "plugin.wasm"))
		if err != nil {
			b.Fatal(err)
		}
		fn := mod.ExportedFunction("moat_invoke")
		stack := make([]uint64, 3)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			cctx, cancel := context.WithTimeout(ctx, benchTimeout)
			stack[0], stack[1], stack[2] = 0, 0, 0
			if err := fn.CallWithStack(cctx, stack); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
	})
	pooledNoop := func(b *testing.B, h *host.Host) {
		m := loadPlugin(b, h, host.LoadOptions{Limits: host.Limits{Timeout: benchTimeout}})
		req := host.Request{Action: "noop", Principal: ann, CorrelationID: "bench"}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := m.Invoke(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("moat", func(b *testing.B) { pooledNoop(b, quietHost(b)) })
	// The same with every allowed invocation written to the audit trail
	// (the default): the price of an audit row per call.
	b.Run("moat-audited", func(b *testing.B) {
		pooledNoop(b, quietHost(b, func(c *host.Config) { c.OmitAllowedInvocationAudit = false }))
	})
	// The same with the store on PostgreSQL (a throwaway cluster, see
	// pgtest; skipped without one), against moat on the same store with
	// the allowed-call audit off.
	b.Run("moat-postgres", func(b *testing.B) {
		pooledNoop(b, quietHost(b, onPostgres(b)))
	})
	b.Run("moat-audited-postgres", func(b *testing.B) {
		pooledNoop(b, quietHost(b, onPostgres(b), func(c *host.Config) { c.OmitAllowedInvocationAudit = false }))
	})
	b.Run("extism", func(b *testing.B) {
		manifest := extism.Manifest{
			Wasm:    []extism.Wasm{extism.WasmData{Data: fixture(b, "extism_noop.wasm")}},
			Timeout: uint64(benchTimeout / time.Millisecond),
		}
		p, err := extism.NewPlugin(ctx, manifest, extism.PluginConfig{EnableWasi: true}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close(ctx)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if rc, _, err := p.Call("noop", nil); err != nil || rc != 0 {
				b.Fatal(rc, err)
			}
		}
	})
}

// BenchmarkOpRoundTrip: one guest→host→guest crossing. The guest makes
// 1000 calls per iteration; ns/call is the figure to read.
func BenchmarkOpRoundTrip(b *testing.B) {
	ctx := context.Background()
	b.Run("raw-host-function", func(b *testing.B) {
		r := rawRuntime(b, "bench", "nop")
		mod, err := r.Instantiate(ctx, fixture(b, "rawhost.wasm"))
		if err != nil {
			b.Fatal(err)
		}
		fn := mod.ExportedFunction("loop1000")
		stack := make([]uint64, 1)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := fn.CallWithStack(ctx, stack); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1000, "ns/call")
	})
	b.Run("moat-config.get", func(b *testing.B) {
		m := loadPlugin(b, quietHost(b), host.LoadOptions{Config: map[string]string{"greeting": "hello"}})
		req := host.Request{Action: "configloop", Input: []byte(`{"key":"greeting"}`), Principal: ann}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := m.Invoke(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1001, "ns/call")
	})
}

// BenchmarkFreshInvoke: a new instance per invocation (isolation: fresh),
// for a small WAT module and for a Go reactor, next to what raw wazero
// pays to instantiate the Go reactor with and without its _initialize.
func BenchmarkFreshInvoke(b *testing.B) {
	ctx := context.Background()
	b.Run("wat", func(b *testing.B) {
		m := loadPlugin(b, quietHost(b), host.LoadOptions{Isolation: host.IsolationFresh})
		req := host.Request{Action: "noop", Principal: ann}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := m.Invoke(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw-wat-instantiate", func(b *testing.B) {
		r := rawRuntime(b, "moat", "call")
		cm, err := r.CompileModule(ctx, fixture(b, "plugin.wasm"))
		if err != nil {
			b.Fatal(err)
		}
		mc := wazero.NewModuleConfig().WithName("")
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			mod, err := r.InstantiateModule(ctx, cm, mc)
			if err != nil {
				b.Fatal(err)
			}
			mod.Close(ctx)
		}
	})
	goGuest := testwasm.BuildGo(b, "./testdata/goguest", true)
	b.Run("go-reactor", func(b *testing.B) {
		m, err := quietHost(b).Load(ctx, goGuest, host.LoadOptions{Name: "goguest", Isolation: host.IsolationFresh})
		if err != nil {
			b.Fatal(err)
		}
		req := host.Request{Action: "echo", Input: []byte("hi"), Principal: ann}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := m.Invoke(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, init := range []bool{false, true} {
		name := "raw-go-instantiate-no-init"
		if init {
			name = "raw-go-instantiate+init"
		}
		b.Run(name, func(b *testing.B) {
			r := rawRuntime(b, "moat", "call")
			cm, err := r.CompileModule(ctx, goGuest)
			if err != nil {
				b.Fatal(err)
			}
			mc := wazero.NewModuleConfig().WithName("").WithStartFunctions()
			if init {
				mc = mc.WithStartFunctions("_initialize")
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				mod, err := r.InstantiateModule(ctx, cm, mc)
				if err != nil {
					b.Fatal(err)
				}
				mod.Close(ctx)
			}
		})
	}
}

// BenchmarkGuestCompute: a Go guest doing real work in its own code
// (bytes.ToUpper over 64 KiB: loops in Go's runtime and in the guest),
// through moat, next to the same module called directly in raw wazero
// with CloseOnContextDone (how a raw embedder stops a spinning guest,
// and what moat did before interrupt.go) and without any check at all
// (the floor: such a guest could never be stopped).
func BenchmarkGuestCompute(b *testing.B) {
	ctx := context.Background()
	goGuest := testwasm.BuildGo(b, "./testdata/goguest", true)
	input := bytes.Repeat([]byte("moat sandbox "), 64<<10/13)
	b.Run("moat", func(b *testing.B) {
		m, err := quietHost(b).Load(ctx, goGuest, host.LoadOptions{Name: "goguest"})
		if err != nil {
			b.Fatal(err)
		}
		req := host.Request{Action: "upper", Input: input, Principal: ann}
		b.SetBytes(int64(len(input)))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := m.Invoke(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, checked := range []bool{true, false} {
		name := "raw-wazero-closeondone"
		if !checked {
			name = "raw-wazero-unchecked"
		}
		b.Run(name, func(b *testing.B) {
			r := rawRuntime(b, "moat", "call", checked)
			mod, err := r.InstantiateWithConfig(ctx, goGuest, wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize"))
			if err != nil {
				b.Fatal(err)
			}
			res, err := mod.ExportedFunction("moat_actions").Call(ctx)
			if err != nil {
				b.Fatal(err)
			}
			list, _ := mod.Memory().Read(uint32(res[0]>>32), uint32(res[0]))
			idx := slices.Index(strings.Split(strings.TrimRight(string(list), "\n"), "\n"), "upper")
			if idx < 0 {
				b.Fatalf("no action upper in %q", list)
			}
			alloc, invoke := mod.ExportedFunction("moat_alloc"), mod.ExportedFunction("moat_invoke")
			stack := make([]uint64, 3)
			b.SetBytes(int64(len(input)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cctx, cancel := context.WithTimeout(ctx, benchTimeout)
				stack[0] = uint64(len(input))
				if err := alloc.CallWithStack(cctx, stack); err != nil {
					b.Fatal(err)
				}
				ptr := uint32(stack[0])
				mod.Memory().Write(ptr, input)
				stack[0], stack[1], stack[2] = uint64(idx), uint64(ptr), uint64(len(input))
				if err := invoke.CallWithStack(cctx, stack); err != nil {
					b.Fatal(err)
				}
				cancel()
			}
		})
	}
}
