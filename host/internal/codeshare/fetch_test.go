package codeshare

import (
	"context"
	"crypto/hmac"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/wasmlimit"
)

// replica is one host's side of sharing on st, without a host: a runtime
// whose compilation cache is a directory of its own, and its Sharer.
func replica(t *testing.T, st *store.Store, key []byte) (*Sharer, wazero.Runtime, *audit.Log) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	cache, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wasmlimit.NewRuntimeConfig(cache).WithCloseOnContextDone(false))
	t.Cleanup(func() { rt.Close(ctx) })
	al := audit.New(st, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { al.Close(ctx) })
	s, err := New(ctx, rt, Config{CacheDir: dir, Key: key, Store: st, Logger: slog.New(slog.DiscardHandler), Audit: al})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, rt, al
}

// TestShareBetweenReplicas: what one replica compiles it stores, MAC'd
// under the key; another on the same store places it and wazero loads it
// (FromStore); a third with another key refuses it and compiles.
func TestShareBetweenReplicas(t *testing.T) {
	ctx := context.Background()
	code := pluginWasm(t)
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, art, _ := replica(t, st, codeKeyA)
	cm, from, err := a.Compile(ctx, art, code, For{Module: "plug"})
	if err != nil || from != Compiled {
		t.Fatalf("first compile: %v, %v", from, err)
	}
	cm.Close(ctx)
	key := a.Fingerprint().ArtifactKey(code)
	got, err := st.CodeGet(ctx, key, 0)
	if err != nil || !hmac.Equal(got.MAC, MAC(codeKeyA, key, got.Data)) {
		t.Fatalf("the artifact stored: %v", err)
	}
	b, brt, _ := replica(t, st, codeKeyA)
	cm, from, err = b.Compile(ctx, brt, code, For{Module: "plug"})
	if err != nil || from != FromStore {
		t.Fatalf("second replica: %v, %v; want the store's artifact", from, err)
	}
	cm.Close(ctx)
	c, crt, cal := replica(t, st, codeKeyB)
	cm, from, err = c.Compile(ctx, crt, code, For{Module: "plug", CorrelationID: "c-1"})
	if err != nil || from != Compiled {
		t.Fatalf("a replica with another key: %v, %v; want it compiled here", from, err)
	}
	cm.Close(ctx)
	if evs := sharedCodeEvents(t, cal); len(evs) != 1 || evs[0].Rule != "shared_code.mac" || evs[0].CorrelationID != "c-1" {
		t.Fatalf("audit of the refusal: %+v", evs)
	}
}

// TestFetchRefusesHostileArtifacts: an artifact that fails its MAC or the
// size bound never reaches the cache directory, and each refusal is
// audited with its rule.
func TestFetchRefusesHostileArtifacts(t *testing.T) {
	ctx := context.Background()
	code := pluginWasm(t)
	tests := []struct {
		name  string
		shape func(good []byte, key string) (data, mac []byte)
		rule  string
	}{
		{"tampered byte", func(good []byte, key string) ([]byte, []byte) {
			d := slices.Clone(good)
			d[len(d)/2] ^= 0x80
			return d, MAC(codeKeyA, key, good)
		}, "mac"},
		{"another code key", func(good []byte, key string) ([]byte, []byte) { return good, MAC(codeKeyB, key, good) }, "mac"},
		{"zero MAC", func(good []byte, key string) ([]byte, []byte) { return good, make([]byte, 32) }, "mac"},
		{"over the bound", func(good []byte, key string) ([]byte, []byte) {
			d := append(slices.Clone(good), make([]byte, 1000)...)
			return d, MAC(codeKeyA, key, d)
		}, "size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := store.Open(ctx, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			a, art, _ := replica(t, st, codeKeyA)
			cm, _, err := a.Compile(ctx, art, code, For{Module: "plug"})
			if err != nil {
				t.Fatal(err)
			}
			cm.Close(ctx)
			key := a.Fingerprint().ArtifactKey(code)
			good, err := st.CodeGet(ctx, key, 0)
			if err != nil {
				t.Fatal(err)
			}
			data, mac := tt.shape(good.Data, key)
			if _, err := st.CodePut(ctx, store.CodeArtifact{Key: key, Data: data, MAC: mac}, 0); err != nil {
				t.Fatal(err)
			}
			b, _, bal := replica(t, st, codeKeyA)
			b.MaxBytes = int64(len(good.Data)) + 500
			path := filepath.Join(b.Dir(), b.Fingerprint().FileName(code))
			placed, _, why := b.Fetch(ctx, key, path, For{Module: "plug", CorrelationID: "c-1"})
			if placed {
				t.Fatalf("placed (%s)", why)
			}
			if entries, _ := os.ReadDir(b.Dir()); len(entries) != 0 {
				t.Fatalf("a refused artifact reached the cache directory: %v", entries)
			}
			evs := sharedCodeEvents(t, bal)
			if len(evs) != 1 || evs[0].Rule != "shared_code."+tt.rule || evs[0].Decision != audit.Deny || evs[0].Attrs["artifact"] != key {
				t.Fatalf("audit after the refusal: %+v", evs)
			}
		})
	}
}

// sharedCodeEvents returns the shared_code audit events of al.
func sharedCodeEvents(t *testing.T, al *audit.Log) []audit.Event {
	t.Helper()
	ctx := context.Background()
	if err := al.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := al.Query(ctx, audit.Filter{Kind: audit.KindSharedCode})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}
