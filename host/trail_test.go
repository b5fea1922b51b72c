package host_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
)

// TestConfigAuditIsTheCallers: a host given an audit trail (Config.Audit)
// records to it, flushes it when it closes, and leaves it open: the
// embedder that opened it records to it and closes it.
func TestConfigAuditIsTheCallers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	trail := audit.New(st, slog.New(slog.DiscardHandler))
	defer trail.Close(ctx)
	h, err := host.New(ctx, host.Config{DataDir: dir, Store: st, Audit: trail, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	mod, err := h.Load(ctx, echoModule(), host.LoadOptions{Name: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mod.Invoke(ctx, host.Request{Action: "shout", Input: []byte(abi.OpConfigGet), Principal: ann, CorrelationID: "corr-trail"}); err != nil {
		t.Fatal(err)
	}
	mod.Close(ctx)
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if evs, err := st.AuditQuery(ctx, store.AuditFilter{CorrelationID: "corr-trail"}); err != nil || len(evs) == 0 {
		t.Fatalf("after Close, the store holds %d events of the invocation (%v); want them flushed", len(evs), err)
	}
	trail.Record(ctx, audit.Event{Kind: audit.KindDecision, Decision: audit.Deny, CorrelationID: "corr-after", Reason: "the embedder's own"})
	if evs, err := trail.Query(ctx, audit.Filter{CorrelationID: "corr-after"}); err != nil || len(evs) != 1 {
		t.Fatalf("the trail after the host closed: %d events, %v; want the embedder's one (the host must not close it)", len(evs), err)
	}
}
