package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// t0 is the base time of the audit tests.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func auditIDs(events []store.AuditEvent) []string {
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

func (su suite) testAuditRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)

	full := store.AuditEvent{
		ID:            "0001",
		Time:          t0.Add(123456789 * time.Nanosecond),
		Kind:          "invocation",
		Decision:      "allow",
		CorrelationID: "corr-1",
		Module:        "billing",
		Action:        "charge",
		Op:            "kv.put",
		User:          "alice",
		Org:           "acme",
		Rule:          "manifest actions[0].roles",
		Reason:        "role admin",
		Code:          string(abi.CodeGuestError),
		MutationID:    "mut-1",
		TaskID:        "task-1",
		ModelCallID:   "model-1",
		DurationNS:    42_000_000,
		Attrs:         map[string]string{"bytes": "12", "path": "a/ü \"quoted\""},
	}
	minimal := store.AuditEvent{ID: "0002", Time: t0.Add(time.Second), Kind: "load"}
	if err := s.AuditInsert(ctx, []store.AuditEvent{full, minimal}); err != nil {
		t.Fatalf("AuditInsert: %v", err)
	}
	got, err := s.AuditQuery(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatalf("AuditQuery: %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("AuditQuery returned %d events, want 2", len(got))
	}
	if !reflect.DeepEqual(got[0], full) {
		t.Errorf("full event round trip:\n got %+v\nwant %+v", got[0], full)
	}
	if !reflect.DeepEqual(got[1], minimal) {
		t.Errorf("minimal event round trip:\n got %+v\nwant %+v", got[1], minimal)
	}
	if got[0].Time.Location() != time.UTC {
		t.Errorf("Time location = %v, want UTC", got[0].Time.Location())
	}

	// An empty ID and a zero Time are filled in; the caller's slice is not
	// modified. Generated ids are unique.
	before := time.Now()
	batch := []store.AuditEvent{{Kind: "op"}, {Kind: "op"}}
	if err := s.AuditInsert(ctx, batch); err != nil {
		t.Fatalf("AuditInsert without ids: %v", err)
	}
	if batch[0].ID != "" || !batch[0].Time.IsZero() {
		t.Error("AuditInsert modified the caller's events")
	}
	ops, err := s.AuditQuery(ctx, store.AuditFilter{Kind: "op"})
	if err != nil || len(ops) != 2 {
		t.Fatalf("AuditQuery(kind op) = %d events, %v; want 2", len(ops), err)
	}
	if ops[0].ID == "" || ops[0].ID == ops[1].ID {
		t.Errorf("generated ids %q, want two distinct non-empty ids", auditIDs(ops))
	}
	for _, e := range ops {
		if e.Time.Before(before.Add(-time.Second)) || e.Time.After(time.Now().Add(time.Second)) {
			t.Errorf("default time %v is not about now", e.Time)
		}
	}

	// An empty batch is a no-op; the id of a stored row, or an id given
	// twice in the batch (packed or not), fails the whole batch. (A
	// routine event is packed, and its id not checked against earlier
	// batches: see store.AuditInsert.)
	if err := s.AuditInsert(ctx, nil); err != nil {
		t.Errorf("AuditInsert(nil) = %v", err)
	}
	allowed := func(id string) store.AuditEvent {
		return store.AuditEvent{ID: id, Time: t0, Kind: "invocation", Decision: "allow", Org: "acme"}
	}
	for _, dup := range [][]store.AuditEvent{
		{allowed("0003"), {ID: "0002", Time: t0, Kind: "op"}},
		{allowed("0003"), {ID: "0004", Time: t0, Kind: "op"}, {ID: "0004", Time: t0, Kind: "op"}},
		{allowed("0003"), allowed("0003")},
		{{ID: "0003", Time: t0, Kind: "op"}, allowed("0003")},
		{allowed("0003"), {ID: "0003", Time: t0, Kind: "op", Decision: "deny"}},
	} {
		err := s.AuditInsert(ctx, dup)
		if err == nil {
			t.Errorf("AuditInsert with a duplicate id succeeded: %+v", dup)
		} else if !errors.Is(err, store.ErrDuplicateAuditID) {
			t.Errorf("AuditInsert with a duplicate id: %v, want store.ErrDuplicateAuditID", err)
		}
	}
	if all, _ := s.AuditQuery(ctx, store.AuditFilter{}); len(all) != 4 {
		t.Errorf("after failed batches the store holds %d events, want 4 (the batch is atomic)", len(all))
	}
}

func (su suite) testAuditFilters(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)

	// Ten events a minute apart, with fields varying independently.
	var events []store.AuditEvent
	for i := range 10 {
		e := store.AuditEvent{
			ID:            fmt.Sprintf("e%02d", i),
			Time:          t0.Add(time.Duration(i) * time.Minute),
			Kind:          []string{"decision", "invocation", "op"}[i%3],
			CorrelationID: fmt.Sprintf("corr-%d", i/4),
			Module:        []string{"billing", "shipping"}[i%2],
			Org:           []string{"acme", "globex", "initech"}[i%3],
			User:          []string{"ann", "bob"}[i/5],
		}
		if e.Kind == "decision" {
			e.Decision = []string{"allow", "deny"}[i%2]
		}
		events = append(events, e)
	}
	// Insert out of order: the query sorts by time.
	if err := s.AuditInsert(ctx, append(append([]store.AuditEvent{}, events[5:]...), events[:5]...)); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		f    store.AuditFilter
		want []string
	}{
		{"all", store.AuditFilter{}, []string{"e00", "e01", "e02", "e03", "e04", "e05", "e06", "e07", "e08", "e09"}},
		{"correlation id", store.AuditFilter{CorrelationID: "corr-1"}, []string{"e04", "e05", "e06", "e07"}},
		{"module", store.AuditFilter{Module: "shipping"}, []string{"e01", "e03", "e05", "e07", "e09"}},
		{"decision allow", store.AuditFilter{Decision: "allow"}, []string{"e00", "e06"}},
		{"decision deny", store.AuditFilter{Decision: "deny"}, []string{"e03", "e09"}},
		{"kind", store.AuditFilter{Kind: "invocation"}, []string{"e01", "e04", "e07"}},
		{"org", store.AuditFilter{Org: "globex"}, []string{"e01", "e04", "e07"}},
		{"user", store.AuditFilter{User: "bob"}, []string{"e05", "e06", "e07", "e08", "e09"}},
		{"user and org", store.AuditFilter{User: "ann", Org: "globex"}, []string{"e01", "e04"}},
		{"user that is SQL", store.AuditFilter{User: "ann' OR '1'='1"}, nil},
		{"user's correlation id", store.AuditFilter{User: "ann", CorrelationID: "corr-1"}, []string{"e04"}},
		{"since inclusive", store.AuditFilter{Since: t0.Add(7 * time.Minute)}, []string{"e07", "e08", "e09"}},
		{"until exclusive", store.AuditFilter{Until: t0.Add(2 * time.Minute)}, []string{"e00", "e01"}},
		{"since and until", store.AuditFilter{Since: t0.Add(3 * time.Minute), Until: t0.Add(5 * time.Minute)}, []string{"e03", "e04"}},
		{"combined", store.AuditFilter{Module: "billing", Kind: "decision"}, []string{"e00", "e06"}},
		{"no match", store.AuditFilter{Module: "billing", Org: "nobody"}, nil},
		{"empty range", store.AuditFilter{Since: t0.Add(5 * time.Minute), Until: t0.Add(5 * time.Minute)}, nil},
		{"limit: most recent, oldest first", store.AuditFilter{Limit: 3}, []string{"e07", "e08", "e09"}},
		{"limit with filter", store.AuditFilter{Module: "billing", Limit: 2}, []string{"e06", "e08"}},
		{"limit above matches", store.AuditFilter{Kind: "op", Limit: 50}, []string{"e02", "e05", "e08"}},
		{"since far past", store.AuditFilter{Since: time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC), Limit: 1}, []string{"e09"}},
		{"until far future", store.AuditFilter{Until: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), Limit: 1}, []string{"e09"}},
		{"since far future", store.AuditFilter{Since: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.AuditQuery(ctx, tt.f)
			if err != nil {
				t.Fatalf("AuditQuery: %v", err)
			}
			if ids := auditIDs(got); strings.Join(ids, ",") != strings.Join(tt.want, ",") {
				t.Errorf("AuditQuery(%+v) = %q, want %q", tt.f, ids, tt.want)
			}
		})
	}
}

func (su suite) testAuditLimitDefaultAndCap(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	const n = store.MaxAuditLimit + 5
	batch := make([]store.AuditEvent, n)
	for i := range batch {
		batch[i] = store.AuditEvent{ID: fmt.Sprintf("%06d", i), Time: t0.Add(time.Duration(i) * time.Millisecond), Kind: "op"}
	}
	if err := s.AuditInsert(ctx, batch); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		limit, want int
	}{
		{0, store.DefaultAuditLimit},
		{-1, store.DefaultAuditLimit},
		{7, 7},
		{store.MaxAuditLimit + 1, store.MaxAuditLimit},
		{1 << 30, store.MaxAuditLimit},
	}
	for _, tt := range tests {
		got, err := s.AuditQuery(ctx, store.AuditFilter{Limit: tt.limit})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != tt.want {
			t.Errorf("Limit %d: %d events, want %d", tt.limit, len(got), tt.want)
			continue
		}
		// The most recent ones, oldest first.
		if first, last := got[0].ID, got[len(got)-1].ID; first != fmt.Sprintf("%06d", n-tt.want) || last != fmt.Sprintf("%06d", n-1) {
			t.Errorf("Limit %d: events %s..%s, want the last %d", tt.limit, first, last, tt.want)
		}
	}
}

func (su suite) testAuditValidation(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	ok := store.AuditEvent{ID: "good", Time: t0, Kind: "decision", Decision: "allow"}
	tests := []struct {
		name  string
		e     store.AuditEvent
		field string
	}{
		{"empty kind", store.AuditEvent{Time: t0}, "kind"},
		{"unknown kind", store.AuditEvent{Time: t0, Kind: "Decision"}, "kind"},
		{"unknown decision", store.AuditEvent{Time: t0, Kind: "decision", Decision: "maybe"}, "decision"},
		{"decision in caps", store.AuditEvent{Time: t0, Kind: "decision", Decision: "ALLOW"}, "decision"},
		{"time out of range", store.AuditEvent{Time: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), Kind: "op"}, "time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The bad event is second: the message names its index, and
			// the good event before it is not stored either.
			err := s.AuditInsert(ctx, []store.AuditEvent{ok, tt.e})
			var ae *abi.Error
			if !errors.As(err, &ae) || ae.Code != abi.CodeInvalidArgument {
				t.Fatalf("error = %v, want *abi.Error %s", err, abi.CodeInvalidArgument)
			}
			if !strings.Contains(ae.Message, tt.field) || !strings.Contains(ae.Message, "event 1") {
				t.Errorf("message %q does not name the field %q and event 1", ae.Message, tt.field)
			}
		})
	}
	if got, _ := s.AuditQuery(ctx, store.AuditFilter{}); len(got) != 0 {
		t.Errorf("store holds %d events after rejected batches", len(got))
	}
	for _, kind := range []string{"decision", "invocation", "op", "signature", "confirmation", "load", "confinement", "worker"} {
		for _, decision := range []string{"", "allow", "deny"} {
			if err := s.AuditInsert(ctx, []store.AuditEvent{{Kind: kind, Decision: decision}}); err != nil {
				t.Errorf("kind %q decision %q: %v", kind, decision, err)
			}
		}
	}
}

// Attrs survive with every kind of string content, and an empty map reads
// back as nil.
func (su suite) testAuditAttrs(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	tests := []struct {
		name  string
		attrs map[string]string
		want  map[string]string
	}{
		{"nil", nil, nil},
		{"empty", map[string]string{}, nil},
		{"one", map[string]string{"k": "v"}, map[string]string{"k": "v"}},
		{"special", map[string]string{"": "empty key", "nl": "a\nb", "json": `{"x":[1]}`, "nul": "a\x00b"}, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want == nil && len(tt.attrs) > 0 {
				want = maps.Clone(tt.attrs)
			}
			id := fmt.Sprintf("attrs-%d", i)
			if err := s.AuditInsert(ctx, []store.AuditEvent{{ID: id, Time: t0, Kind: "op", CorrelationID: id, Attrs: tt.attrs}}); err != nil {
				t.Fatal(err)
			}
			got, err := s.AuditQuery(ctx, store.AuditFilter{CorrelationID: id})
			if err != nil || len(got) != 1 {
				t.Fatalf("AuditQuery = %d events, %v", len(got), err)
			}
			if !reflect.DeepEqual(got[0].Attrs, want) {
				t.Errorf("Attrs = %#v, want %#v", got[0].Attrs, want)
			}
		})
	}
}
