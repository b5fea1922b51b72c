package audit_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/host/store"
)

// TestAuditRowsPerInvocation: the op events of one invocation are bounded
// by its budget. The row that reaches the limit is followed by one deny
// row naming it, the budget then refuses the invocation's ops, and rows
// recorded past the limit by an op already running (a denial) are still
// stored: nothing that happened goes unaudited. Another invocation, with
// its own budget, is not affected. (One write once made 10 000 rows.)
func TestAuditRowsPerInvocation(t *testing.T) {
	l, _, _ := newLog(t)
	tests := []struct {
		name      string
		limit     int
		events    int
		wantRows  int // op rows stored
		wantFinal bool
	}{
		{"under the limit", 10, 9, 9, false},
		{"at the limit", 10, 10, 10, true},
		{"a denial after the limit is still stored", 10, 11, 11, true},
		{"default limit, 1500 events", 0, 1500, 1500, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := budget.New(budget.Limits{AuditRows: tt.limit}, nil)
			ctx := budget.With(context.Background(), b)
			corr := "inv-" + string(rune('a'+i))
			admitted := 0
			for range tt.events {
				if b.Admit([]byte(abi.OpKVPut)) == nil {
					admitted++
				}
				l.Record(ctx, audit.Event{Kind: audit.KindOp, Decision: audit.Deny, CorrelationID: corr, Module: "m", Op: abi.OpKVPut, Reason: "not granted"})
			}
			ops, err := l.Query(context.Background(), audit.Filter{CorrelationID: corr, Kind: audit.KindOp, Limit: store.MaxAuditLimit})
			if err != nil || len(ops) != tt.wantRows {
				t.Fatalf("%d op rows, %v; want %d", len(ops), err, tt.wantRows)
			}
			final, _ := l.Query(context.Background(), audit.Filter{CorrelationID: corr, Kind: audit.KindDecision})
			if !tt.wantFinal {
				if len(final) != 0 || b.Admit([]byte(abi.OpKVPut)) != nil {
					t.Fatalf("under the limit: %d final rows, admit %v", len(final), b.Admit([]byte(abi.OpKVPut)))
				}
				return
			}
			if len(final) != 1 || final[0].Decision != audit.Deny || final[0].Rule != budget.KnobAuditRows ||
				final[0].Code != string(abi.CodeResourceExhausted) || !strings.HasPrefix(final[0].Reason, "audit budget exhausted") {
				t.Fatalf("final rows %+v; want one deny row, rule %s", final, budget.KnobAuditRows)
			}
			lim := b.Limits().AuditRows
			if admitted != min(tt.events, lim) {
				t.Fatalf("%d ops admitted, want %d", admitted, min(tt.events, lim))
			}
			var ae *abi.Error
			if err := b.Admit([]byte(abi.OpKVPut)); !errors.As(err, &ae) || ae.Code != abi.CodeResourceExhausted || !strings.Contains(ae.Message, budget.KnobAuditRows) {
				t.Fatalf("admit after the limit: %v", err)
			}
		})
	}
}

// TestAuditFieldsClamped: a reason quoting a guest's 1 MB host name is
// stored cut, with the cut said, rather than a 1 MB row.
func TestAuditFieldsClamped(t *testing.T) {
	l, logs, _ := newLog(t)
	l.Record(context.Background(), audit.Event{Kind: audit.KindOp, Decision: audit.Deny, CorrelationID: "big", Module: "m",
		Reason: "op http.fetch https://" + strings.Repeat("h", 1<<20) + ":443: not granted", Attrs: map[string]string{"k": strings.Repeat("v", 1<<20)}})
	got, err := l.Query(context.Background(), audit.Filter{CorrelationID: "big"})
	if err != nil || len(got) != 1 {
		t.Fatal(got, err)
	}
	if r := got[0].Reason; len(r) > store.MaxAuditField+64 || !strings.Contains(r, "more bytes cut]") {
		t.Fatalf("reason of %d bytes: %.100s…", len(r), r)
	}
	if v := got[0].Attrs["k"]; len(v) > store.MaxAuditField+64 {
		t.Fatalf("attribute of %d bytes", len(v))
	}
	if logs.Len() > 4*store.MaxAuditField+4096 {
		t.Fatalf("the log record is %d bytes", logs.Len())
	}
}
