package audit_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
)

func newLog(t *testing.T) (*audit.Log, *bytes.Buffer, *store.Store) {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var buf bytes.Buffer
	return audit.New(st, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))), &buf, st
}

func TestRecordQueryClose(t *testing.T) {
	ctx := context.Background()
	l, logs, st := newLog(t)
	for i := 0; i < 1000; i++ {
		l.Record(ctx, audit.Event{Kind: audit.KindInvocation, Decision: audit.Allow, Module: "m", CorrelationID: fmt.Sprint("c", i%10)})
	}
	l.Record(ctx, audit.Event{Kind: audit.KindDecision, Decision: audit.Deny, Module: "m", CorrelationID: "c-deny", Rule: "manifest actions[0].roles", Reason: "requires one of roles [admin]"})
	got, err := l.Query(ctx, audit.Filter{CorrelationID: "c-deny"})
	if err != nil || len(got) != 1 || got[0].Rule != "manifest actions[0].roles" || got[0].ID == "" || got[0].Time.IsZero() {
		t.Fatalf("query after flush: %+v, %v", got, err)
	}
	if !strings.Contains(logs.String(), "level=WARN msg=audit audit=decision") || !strings.Contains(logs.String(), `rule="manifest actions[0].roles"`) {
		t.Fatalf("the denial is not in the log:\n%s", logs.String()[max(0, logs.Len()-500):])
	}
	all, _ := l.Query(ctx, audit.Filter{Module: "m", Limit: 5000})
	if len(all) != 1001 {
		t.Fatalf("stored %d events, want 1001", len(all))
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// An event recorded after Close is still stored, not dropped.
	l.Record(ctx, audit.Event{Kind: audit.KindLoad, Decision: audit.Deny, Module: "late"})
	if late, _ := st.AuditQuery(ctx, audit.Filter{Module: "late"}); len(late) != 1 {
		t.Fatalf("late event: %+v", late)
	}
}

// TestBadEventDoesNotCostTheBatch: an invalid event is reported on the log;
// the valid events queued with it are stored.
func TestBadEventDoesNotCostTheBatch(t *testing.T) {
	ctx := context.Background()
	l, logs, _ := newLog(t)
	l.Record(ctx, audit.Event{Kind: audit.KindOp, Decision: audit.Allow, Module: "good1"})
	l.Record(ctx, audit.Event{Kind: "bogus", Module: "bad"})
	l.Record(ctx, audit.Event{Kind: audit.KindOp, Decision: audit.Allow, Module: "good2"})
	for _, m := range []string{"good1", "good2"} {
		if got, _ := l.Query(ctx, audit.Filter{Module: m}); len(got) != 1 {
			t.Errorf("%s not stored", m)
		}
	}
	if !strings.Contains(logs.String(), "audit: event not stored") {
		t.Fatalf("the bad event's failure is not reported:\n%s", logs.String())
	}
}

// TestConcurrentRecordFlushClose: goroutines record more events than the
// queue holds (so Record waits for room) while others flush and the log
// closes in the middle; every event is stored exactly once, before or
// after Close.
func TestConcurrentRecordFlushClose(t *testing.T) {
	ctx := context.Background()
	l, _, st := newLog(t)
	const writers, each = 8, 1200 // more than the queue, fewer than a query returns
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range each {
				l.Record(ctx, audit.Event{Kind: audit.KindOp, Decision: audit.Allow, Module: "m", CorrelationID: fmt.Sprintf("w%d-%d", w, i)})
				if i%500 == 0 {
					if err := l.Flush(ctx); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	close(start)
	time.Sleep(5 * time.Millisecond)
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	got, err := st.AuditQuery(ctx, audit.Filter{Module: "m", Limit: store.MaxAuditLimit})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range got {
		if seen[e.CorrelationID] {
			t.Fatalf("event %s stored twice", e.CorrelationID)
		}
		seen[e.CorrelationID] = true
	}
	if len(seen) != writers*each {
		t.Fatalf("stored %d events, want %d", len(seen), writers*each)
	}
}
