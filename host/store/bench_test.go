package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/moat-sandbox/moat/host/store"
)

// BenchmarkKV measures the store calls of the invocation path on one key:
// a put with a quota (what kv.put does under a disk quota), a plain put,
// and a get, alone and from parallel goroutines; and the audit row of one
// allowed call.
func BenchmarkKV(b *testing.B) {
	ctx := context.Background()
	s, err := store.Open(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	sc := store.Scope{Org: "acme", Module: "hello"}
	b.Run("put-within", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := s.KVPutWithin(ctx, sc, "count", []byte("12345"), 1<<20); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("put", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := s.KVPut(ctx, sc, "count", []byte("12345")); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("get", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := s.KVGet(ctx, sc, "count"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("get-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, _, err := s.KVGet(ctx, sc, "count"); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	// A batch as the audit writer stores it under load: ns/row is the
	// cost of one allowed call's row. Correlation ids rise with time (as
	// audit.NewID's do) or are random (as a client's may be: every row
	// then dirties a page of the correlation index of its own).
	for _, random := range []bool{false, true} {
		name := "audit-insert-batch-512"
		if random {
			name += "-random-correlation"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			evs := make([]store.AuditEvent, 512)
			seq := uint64(0)
			for b.Loop() {
				for i := range evs {
					seq++
					corr := fmt.Sprintf("%016x", seq)
					if random {
						corr = strconv.FormatUint(rand.Uint64(), 16)
					}
					evs[i] = store.AuditEvent{Kind: "invocation", Decision: "allow", CorrelationID: corr,
						Org: "acme", User: "ann", Module: "hello", Action: "greet", Code: "ok", DurationNS: 2300}
				}
				if err := s.AuditInsert(ctx, evs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/row")
		})
	}
	b.Run("audit-insert", func(b *testing.B) {
		b.ReportAllocs()
		ev := []store.AuditEvent{{Kind: "invocation", Decision: "allow", Org: "acme", User: "ann", Module: "hello", Action: "greet", Code: "ok", DurationNS: 2300}}
		for b.Loop() {
			if err := s.AuditInsert(ctx, ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
