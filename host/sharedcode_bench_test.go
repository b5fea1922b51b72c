package host_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testwasm"
)

// BenchmarkLoadGoGuest: what a replica pays to load the 3.5 MB Go guest
// it has never loaded (an empty cache directory each time, as a new or
// restarted pod has): compiling it, against loading the machine code
// another host shared through the store (Config.CodeKey), on SQLite and
// on PostgreSQL, and against wazero's own cache on this machine's disk.
// Each iteration is a new host; only Load is timed.
func BenchmarkLoadGoGuest(b *testing.B) {
	ctx := context.Background()
	goGuest := testwasm.BuildGo(b, "./testdata/goguest", true)
	codeKey := []byte("benchmark code key: 32 bytes of secret or more")
	// load times one Load on a host made by cfg (untimed), closed after.
	load := func(b *testing.B, cfg func() host.Config, want func(host.CompileInfo) bool) {
		b.Helper()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			c := cfg()
			c.Logger = slog.New(slog.DiscardHandler)
			h, err := host.New(ctx, c)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			m, err := h.Load(ctx, goGuest, host.LoadOptions{Name: "goguest"})
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if ci := m.Info().Compile; !want(ci) {
				b.Fatalf("compile info %+v is not what this row measures", ci)
			}
			h.Close(ctx)
			b.StartTimer()
		}
	}
	b.Run("compile", func(b *testing.B) {
		load(b, func() host.Config { return host.Config{DataDir: b.TempDir()} },
			func(ci host.CompileInfo) bool { return !ci.FromDiskCache && !ci.FromSharedCode })
	})
	b.Run("disk-cache", func(b *testing.B) {
		data := b.TempDir()
		warm, err := host.New(ctx, host.Config{DataDir: data, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := warm.Load(ctx, goGuest, host.LoadOptions{Name: "goguest"}); err != nil {
			b.Fatal(err)
		}
		warm.Close(ctx)
		b.ResetTimer()
		load(b, func() host.Config { return host.Config{DataDir: data} },
			func(ci host.CompileInfo) bool { return ci.FromDiskCache })
	})
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run("shared-code-"+backend, func(b *testing.B) {
			loc := b.TempDir()
			if backend == "postgres" {
				loc = pgtest.Database(b)
			}
			st, err := store.Open(ctx, loc)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			first, err := host.New(ctx, host.Config{DataDir: b.TempDir(), Store: st, CodeKey: codeKey, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := first.Load(ctx, goGuest, host.LoadOptions{Name: "goguest"}); err != nil {
				b.Fatal(err)
			}
			first.Close(ctx)
			b.ResetTimer()
			load(b, func() host.Config { return host.Config{DataDir: b.TempDir(), Store: st, CodeKey: codeKey} },
				func(ci host.CompileInfo) bool { return ci.FromSharedCode })
		})
	}
}
