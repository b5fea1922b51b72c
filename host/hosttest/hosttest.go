// Package hosttest starts hosts for tests on a store and an audit trail
// the test holds, since a host hands out neither: an embedder that reads
// them opens them and gives them to host.New (Config.Store, Config.Audit),
// and so does a test, through New. Store and Audit then return what the
// test's host runs on.
package hosttest

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
)

type trail struct {
	store *store.Store
	audit *audit.Log
}

// opened maps each host New started to its store and audit trail.
var opened sync.Map // *host.Host → trail

// New starts a host for t with cfg, on cfg.Store and cfg.Audit when they
// are set, else on a store it opens in cfg.DataDir (a t.TempDir() when
// empty) and an audit trail on that store, which t's cleanup closes once
// the test's own cleanups (and the host's Close there) ran. The test
// closes the host.
func New(t testing.TB, cfg host.Config) *host.Host {
	t.Helper()
	ctx := context.Background()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Store == nil {
		st, err := store.Open(ctx, cfg.DataDir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		cfg.Store = st
	}
	if cfg.Audit == nil {
		log := cfg.Logger
		if log == nil {
			log = slog.Default()
		}
		a := audit.New(cfg.Store, log)
		t.Cleanup(func() { a.Close(ctx) })
		cfg.Audit = a
	}
	h, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	opened.Store(h, trail{cfg.Store, cfg.Audit})
	t.Cleanup(func() { opened.Delete(h) })
	return h
}

// Store is the store h runs on; h must come from New.
func Store(h *host.Host) *store.Store { return of(h).store }

// Audit is the audit trail h records to; h must come from New.
func Audit(h *host.Host) *audit.Log { return of(h).audit }

func of(h *host.Host) trail {
	tr, ok := opened.Load(h)
	if !ok {
		panic("hosttest: the host was not started by hosttest.New")
	}
	return tr.(trail)
}
