package store

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// testSegment builds a segment of n events and returns it with them.
func testSegment(n int) (driver.AuditSegment, []AuditEvent) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	evs := make([]AuditEvent, n)
	b := newSegmentBuilder("acme")
	for i := range evs {
		// Times go back and forth around the first event's.
		evs[i] = AuditEvent{ID: fmt.Sprintf("%012x%016x", i, i*7919), Time: t0.Add(time.Duration((i%7)-3) * time.Microsecond), Kind: "op",
			Decision: "allow", CorrelationID: fmt.Sprintf("corr-%d", i/3), Module: fmt.Sprintf("m%d", i%4), Org: "acme",
			Action: "greet", Op: "kv.put", User: "ann", Code: "ok", DurationNS: int64(i), Attrs: map[string]string{"target": "kv"}}
		b.add(&evs[i], evs[i].Time.UnixNano())
	}
	g := b.segment()
	g.Data = slices.Clone(g.Data)
	b.release()
	return g, evs
}

// A segment decodes to the events encoded; every truncation and every
// single corrupted byte of it is an error wrapping errSegment or decodes
// to something, never a panic or a read past the data.
func TestSegmentDecodeHostile(t *testing.T) {
	g, evs := testSegment(40)
	got, err := decodeSegment(&g, g.Data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		if !reflect.DeepEqual(got[i], evs[i]) {
			t.Fatalf("event %d = %+v, want %+v", i, got[i], evs[i])
		}
	}
	for n := range len(g.Data) {
		if _, err := decodeSegment(&g, g.Data[:n]); !errors.Is(err, errSegment) {
			t.Fatalf("data cut to %d of %d bytes: error %v, want errSegment", n, len(g.Data), err)
		}
	}
	longer := append(append([]byte{}, g.Data...), 0)
	if _, err := decodeSegment(&g, longer); !errors.Is(err, errSegment) {
		t.Errorf("a byte after the last event: error %v, want errSegment", err)
	}
	wrongCount := g
	wrongCount.Count++
	if _, err := decodeSegment(&wrongCount, g.Data); !errors.Is(err, errSegment) {
		t.Errorf("count unlike the header's: error %v, want errSegment", err)
	}
	for i := range g.Data {
		for _, b := range []byte{0x00, 0x7f, 0x80, 0xff} {
			bad := append([]byte{}, g.Data...)
			bad[i] = b
			if _, err := decodeSegment(&g, bad); err != nil && !errors.Is(err, errSegment) {
				t.Fatalf("byte %d set to %#x: error %v, want errSegment", i, b, err)
			}
		}
	}
}

// The Bloom filter holds every key added, and rejects nearly every other:
// a query for one correlation id decodes few segments that lack it.
func TestSegmentBloom(t *testing.T) {
	g, evs := testSegment(maxSegmentEvents)
	b := bloom(g.Bloom)
	for i := range evs {
		if !b.mayHold(bloomCorrelation, evs[i].CorrelationID) || !b.mayHold(bloomModule, evs[i].Module) {
			t.Fatalf("the filter lacks event %d's correlation id or module", i)
		}
	}
	const probes = 100000
	hits := 0
	for i := range probes {
		if b.mayHold(bloomCorrelation, fmt.Sprintf("other-%d", i)) {
			hits++
		}
	}
	if rate := float64(hits) / probes; rate > 0.01 {
		t.Errorf("false positive rate %.4f, want at most 0.01", rate)
	}
	// A module is not a correlation id.
	if b.mayHold(bloomCorrelation, "m1") && b.mayHold(bloomCorrelation, "m2") && b.mayHold(bloomCorrelation, "m3") {
		t.Error("modules match as correlation ids")
	}
	for _, shape := range [][]byte{nil, make([]byte, 7), make([]byte, 12)} {
		if !bloom(shape).mayHold(bloomCorrelation, "x") {
			t.Errorf("a filter of %d bytes (not one this store writes) excludes a key; it must hold anything", len(shape))
		}
	}
}
