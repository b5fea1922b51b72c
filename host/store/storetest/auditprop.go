package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store"
)

// The store keeps routine events (allowed invocations and ops) packed and
// every other event as a row; a query must not tell the difference. Random
// events of every kind, decision, organization, module and correlation id,
// with times that tie and batches that overlap in time, go in through
// AuditInsert in random batch splits; then every one of many random
// filters must return exactly what a plain filter over the same events in
// memory returns: the same events, fields and order.
func (su suite) testAuditMatchesModel(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	pick := func(vs ...string) string { return vs[rng.IntN(len(vs))] }

	var (
		kinds     = []string{"invocation", "invocation", "op", "op", "op", "decision", "signature", "confirmation", "load", "confinement", "worker"}
		decisions = []string{"allow", "allow", "allow", "deny", ""}
		orgs      = []string{"acme", "globex", "initech", ""}
		modules   = []string{"hello", "billing", "spin", "lang:python", ""}
		times     = 100 // distinct milliseconds: many events, and segments, share a time
	)
	corr := func() string {
		if rng.IntN(4) == 0 {
			return fmt.Sprintf("unique-%x", rng.Uint64())
		}
		return fmt.Sprintf("corr-%d", rng.IntN(60))
	}
	text := func() string {
		switch rng.IntN(12) {
		case 0:
			return ""
		case 1:
			return "bad\xffutf8\x00nul"
		case 2:
			return strings.Repeat("long ", 1000) // clamped
		default:
			return pick("kv.put", "kv.get", "ok", "guest_error", "role admin", "ü \"quoted\"", "a\nb")
		}
	}
	const n = 3000
	model := make([]store.AuditEvent, n)
	for i := range model {
		e := store.AuditEvent{
			// Ids need not be time-prefixed nor of one length; ties in
			// time are ordered by id.
			ID:            fmt.Sprintf("%0*x-%d", 1+rng.IntN(16), rng.Uint64(), i),
			Time:          t0.Add(time.Duration(rng.IntN(times))*time.Millisecond + time.Duration(rng.IntN(3))),
			Kind:          pick(kinds...),
			Decision:      pick(decisions...),
			CorrelationID: corr(),
			Module:        pick(modules...),
			Org:           pick(orgs...),
			Action:        pick("greet", "echo", ""),
			Op:            text(),
			User:          pick("ann", "bob", ""),
			Rule:          text(),
			Reason:        text(),
			Code:          pick("ok", "guest_error", ""),
			MutationID:    pick("", "", fmt.Sprintf("mut-%d", i)),
			TaskID:        pick("", "task-1"),
			ModelCallID:   pick("", "model-1"),
			DurationNS:    rng.Int64N(1e9) - 1e3,
		}
		switch rng.IntN(5) {
		case 0:
		case 1:
			e.Attrs = map[string]string{}
		case 2:
			e.Attrs = map[string]string{"target": pick("kv", "https://example.com:443"), "bytes": fmt.Sprint(rng.IntN(1000))}
		case 3:
			// Two keys that JSON reads back as one: the later in key
			// order wins, packed or not.
			e.Attrs = map[string]string{"k\xfe": "first", "k\xff": "second", "v": "x\xffy\x00z", "": "empty key"}
		default:
			e.Attrs = map[string]string{"n": fmt.Sprint(i)}
		}
		model[i] = e
	}
	// Random batch splits of a random insertion order, so batches overlap
	// in time and one batch can exceed a segment.
	order := rng.Perm(n)
	for i := 0; i < n; {
		size := 1 + rng.IntN(700)
		if rng.IntN(3) == 0 {
			size = 1 + rng.IntN(8)
		}
		var batch []store.AuditEvent
		for _, j := range order[i:min(n, i+size)] {
			batch = append(batch, model[j])
		}
		if err := s.AuditInsert(ctx, batch); err != nil {
			t.Fatalf("AuditInsert of %d events: %v", len(batch), err)
		}
		i += size
	}
	// What a query returns: each event clamped, its attributes as JSON
	// reads them back, empty ones nil.
	for i := range model {
		e := store.ClampAuditEvent(model[i])
		if len(e.Attrs) > 0 {
			b, err := json.Marshal(e.Attrs)
			if err != nil {
				t.Fatal(err)
			}
			e.Attrs = nil
			if err := json.Unmarshal(b, &e.Attrs); err != nil {
				t.Fatal(err)
			}
		} else {
			e.Attrs = nil
		}
		model[i] = e
	}
	slices.SortFunc(model, func(a, b store.AuditEvent) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})

	at := func() time.Time {
		return t0.Add(time.Duration(rng.IntN(times+20)-10)*time.Millisecond + time.Duration(rng.IntN(3)))
	}
	maybe := func(f func() string) string {
		if rng.IntN(3) == 0 {
			return f()
		}
		return ""
	}
	for q := range 400 {
		f := store.AuditFilter{
			CorrelationID: maybe(corr),
			Module:        maybe(func() string { return pick(append(modules, "nobody")...) }),
			Decision:      maybe(func() string { return pick("allow", "deny") }),
			Kind:          maybe(func() string { return pick(kinds...) }),
			Org:           maybe(func() string { return pick(append(orgs, "umbrella")...) }),
			User:          maybe(func() string { return pick("ann", "bob", "carol") }),
			Limit:         []int{0, -1, 1, 2, 3, 7, 50, 100, 999, store.MaxAuditLimit + 1}[rng.IntN(10)],
		}
		if rng.IntN(3) == 0 {
			f.Since = at()
		}
		if rng.IntN(3) == 0 {
			f.Until = at()
		}
		var want []store.AuditEvent
		for _, e := range model {
			if (f.CorrelationID == "" || e.CorrelationID == f.CorrelationID) && (f.Module == "" || e.Module == f.Module) &&
				(f.Decision == "" || e.Decision == f.Decision) && (f.Kind == "" || e.Kind == f.Kind) &&
				(f.Org == "" || e.Org == f.Org) && (f.User == "" || e.User == f.User) && (f.Since.IsZero() || !e.Time.Before(f.Since)) &&
				(f.Until.IsZero() || e.Time.Before(f.Until)) {
				want = append(want, e)
			}
		}
		limit := f.Limit
		if limit <= 0 {
			limit = store.DefaultAuditLimit
		}
		want = want[max(0, len(want)-min(limit, store.MaxAuditLimit)):]
		got, err := s.AuditQuery(ctx, f)
		if err != nil {
			t.Fatalf("query %d: AuditQuery(%+v): %v", q, f, err)
		}
		if len(got) != len(want) {
			t.Fatalf("query %d: AuditQuery(%+v) = %d events, want %d", q, f, len(got), len(want))
		}
		for i := range want {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("query %d: AuditQuery(%+v): event %d:\n got %+v\nwant %+v", q, f, i, got[i], want[i])
			}
		}
	}
}
