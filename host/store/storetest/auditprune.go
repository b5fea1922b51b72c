package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store"
)

// fillAudit stores n events of each shape (own rows: denials; packed:
// allowed invocations) at t, in batches, and returns how many.
func fillAudit(t *testing.T, s *store.Store, at time.Time, rows, packed int, tag string) {
	t.Helper()
	ctx := context.Background()
	var batch []store.AuditEvent
	flush := func() {
		if err := s.AuditInsert(ctx, batch); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	for i := range rows + packed {
		e := store.AuditEvent{Kind: "decision", Decision: "deny", Org: "acme", Module: "m", CorrelationID: tag,
			Time: at.Add(time.Duration(i) * time.Microsecond)}
		if i >= rows {
			e.Kind, e.Decision = "invocation", "allow"
		}
		batch = append(batch, e)
		if len(batch) == 500 {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
}

// countAudit counts the events of tag, rows and packed.
func countAudit(t *testing.T, s *store.Store, tag string) int {
	t.Helper()
	evs, err := s.AuditQuery(context.Background(), store.AuditFilter{CorrelationID: tag, Limit: store.MaxAuditLimit})
	if err != nil {
		t.Fatal(err)
	}
	return len(evs)
}

// Retention removes what is older than the cutoff, in bounded batches (a
// trail of more than two batches takes three transactions), counts it
// exactly (packed events included), keeps everything at or after the
// cutoff, and a second run finds nothing.
func (su suite) testAuditPrune(t *testing.T) {
	s := su.open(t)
	ctx := context.Background()
	now := time.Now().UTC()
	cutoff := now.Add(-24 * time.Hour)
	oldRows := 2*store.AuditPruneBatch + 7
	fillAudit(t, s, now.Add(-48*time.Hour), oldRows, 300, "old")
	fillAudit(t, s, cutoff, 5, 5, "new") // at the cutoff: kept ([before) is exclusive)
	if _, err := s.AuditPrune(ctx, time.Time{}); err == nil {
		t.Error("AuditPrune with no cutoff removed the whole trail")
	}
	p, err := s.AuditPrune(ctx, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	if p.Events != int64(oldRows+300) {
		t.Errorf("removed %d events, want %d", p.Events, oldRows+300)
	}
	if p.Batches != 3 {
		t.Errorf("%d batches for %d rows, want 3 of at most %d", p.Batches, oldRows, store.AuditPruneBatch)
	}
	if p.Segments == 0 {
		t.Error("no segment of packed events removed")
	}
	if n := countAudit(t, s, "old"); n != 0 {
		t.Errorf("%d old events left", n)
	}
	if n := countAudit(t, s, "new"); n != 10 {
		t.Errorf("%d events at the cutoff left, want 10", n)
	}
	again, err := s.AuditPrune(ctx, cutoff)
	if err != nil || again.Events != 0 || again.Batches != 1 {
		t.Errorf("second prune = %+v, %v; want nothing removed in one batch", again, err)
	}
	// A canceled prune stops before its first batch and removes nothing.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.AuditPrune(cctx, now.Add(time.Hour)); err == nil {
		t.Error("canceled prune succeeded")
	}
	if n := countAudit(t, s, "new"); n != 10 {
		t.Errorf("canceled prune removed events: %d left", n)
	}
}

// Replicas pruning at once divide the work: between them they remove
// every old event exactly once (the counts add up, none twice), and
// nothing newer.
func testSharedAuditPrune(t *testing.T, open func(t *testing.T, n int) []*store.Store) {
	ss := open(t, 3)
	now := time.Now().UTC()
	cutoff := now.Add(-time.Hour)
	old := 3*store.AuditPruneBatch + 11
	fillAudit(t, ss[0], now.Add(-2*time.Hour), old, 0, "old")
	fillAudit(t, ss[0], now, 3, 0, "new")
	var wg sync.WaitGroup
	got := make([]store.AuditPruned, len(ss))
	errs := make([]error, len(ss))
	for i, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = s.AuditPrune(context.Background(), cutoff)
		}()
	}
	wg.Wait()
	var total int64
	for i := range ss {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		total += got[i].Events
	}
	if total != int64(old) {
		t.Errorf("replicas removed %d events between them, want %d (%s)", total, old, fmt.Sprint(got))
	}
	if n := countAudit(t, ss[1], "old"); n != 0 {
		t.Errorf("%d old events left", n)
	}
	if n := countAudit(t, ss[2], "new"); n != 3 {
		t.Errorf("%d new events left, want 3", n)
	}
}
