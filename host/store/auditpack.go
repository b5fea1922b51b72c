package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// Routine events, the allowed invocations and ops, are most of the audit
// trail and are read only when someone looks: they are stored packed, a
// segment row per batch and organization (driver.AuditSegment), instead of
// a row per event with an entry in each of six indexes. Every other event
// (denials, confirmations, loads, signatures, ...) is a row of its own, as
// before. AuditQuery reads both and returns the same events in the same
// order whichever way they were stored.
//
// A segment's Data is:
//
//	byte    segmentFormat
//	varint  base: the first event's Time, unix nanoseconds
//	per event, to the end:
//	  raw  ID
//	  varint Time - base
//	  str  Kind, CorrelationID, Module, Action, Op, User, Rule, Reason,
//	       Code, MutationID, TaskID, ModelCallID
//	  varint DurationNS
//	  uvarint number of attributes, then str key, str value for each, in
//	       key order
//
// raw is a uvarint length and the bytes. str is a uvarint x: 0 is "", an
// odd x a new string of x>>1 bytes that follow (and the next entry of the
// segment's string table), an even x the table's entry x>>1 - 1: the
// module, action, user, code and op names repeat across a segment, so
// each is stored once. Org is the segment's; Decision is always allow.
//
// Bloom is a Bloom filter over the segment's correlation ids and modules,
// so a query for one of them decodes only the segments that may hold it.

// segmentFormat is the first byte of every segment's Data.
const segmentFormat = 1

// maxSegmentEvents bounds the events of one segment, so a query that
// needs one of them decodes at most this many: the audit writer's batch.
const maxSegmentEvents = 512

// Bloom filter shape: bloomBitsPerKey bits a key (rounded up to a power of
// two) and bloomHashes probes, a false positive rate under 1%.
const (
	bloomBitsPerKey = 10
	bloomHashes     = 7
	bloomMinBytes   = 8
)

// Tags that keep a correlation id and a module of the same text apart in
// the filter.
const (
	bloomCorrelation = 'c'
	bloomModule      = 'm'
)

// packable reports whether e is stored in a segment: an allowed
// invocation or op.
func packable(e *AuditEvent) bool {
	return e.Decision == "allow" && (e.Kind == "invocation" || e.Kind == "op")
}

// segmentBuilder packs one organization's events of a batch, as they
// come, into a segment. Builders are pooled: a batch's encoding allocates
// little beyond the segments' bytes.
type segmentBuilder struct {
	g       driver.AuditSegment
	w       segmentWriter
	base    int64
	corrs   []string
	modules []string
}

var builders = sync.Pool{New: func() any { return &segmentBuilder{w: segmentWriter{table: make(map[string]uint64, 16)}} }}

// newSegmentBuilder returns an empty builder for org's events.
func newSegmentBuilder(org string) *segmentBuilder {
	b := builders.Get().(*segmentBuilder)
	b.g = driver.AuditSegment{Org: org}
	b.w.buf = append(b.w.buf[:0], segmentFormat)
	clear(b.w.table)
	b.corrs, b.modules = b.corrs[:0], b.modules[:0]
	return b
}

// release returns b to the pool; the segment it built must no longer be
// used.
func (b *segmentBuilder) release() {
	if cap(b.w.buf) > 1<<20 || len(b.w.table) > 4096 {
		return // an outsized batch: let it go
	}
	b.g = driver.AuditSegment{}
	clear(b.corrs[:cap(b.corrs)])
	clear(b.modules[:cap(b.modules)])
	builders.Put(b)
}

// add appends e (clamped, with its ID set) at time t (unix nanoseconds).
func (b *segmentBuilder) add(e *AuditEvent, t int64) {
	if b.g.Count == 0 {
		b.base, b.g.TimeMin, b.g.TimeMax = t, t, t
		b.w.buf = binary.AppendVarint(b.w.buf, t)
	}
	b.g.Count++
	b.g.TimeMin, b.g.TimeMax = min(b.g.TimeMin, t), max(b.g.TimeMax, t)
	b.corrs = append(b.corrs, e.CorrelationID)
	if !slices.Contains(b.modules, e.Module) {
		b.modules = append(b.modules, e.Module)
	}
	w := &b.w
	w.raw(e.ID)
	w.buf = binary.AppendVarint(w.buf, t-b.base)
	for _, s := range [...]string{e.Kind, e.CorrelationID, e.Module, e.Action, e.Op, e.User, e.Rule, e.Reason,
		e.Code, e.MutationID, e.TaskID, e.ModelCallID} {
		w.str(s)
	}
	w.buf = binary.AppendVarint(w.buf, e.DurationNS)
	w.attrs(e.Attrs)
}

// segment returns the segment built; its Data is b's until release.
func (b *segmentBuilder) segment() driver.AuditSegment {
	bl := newBloom(len(b.corrs) + len(b.modules))
	for _, m := range b.modules {
		bl.add(bloomModule, m)
	}
	for _, c := range b.corrs {
		bl.add(bloomCorrelation, c)
	}
	g := b.g
	g.Bloom, g.Data = bl, b.w.buf
	return g
}

type segmentWriter struct {
	buf   []byte
	table map[string]uint64
}

func (w *segmentWriter) raw(s string) {
	w.buf = binary.AppendUvarint(w.buf, uint64(len(s)))
	w.buf = append(w.buf, s...)
}

func (w *segmentWriter) str(s string) {
	if s == "" {
		w.buf = append(w.buf, 0)
		return
	}
	if i, ok := w.table[s]; ok {
		w.buf = binary.AppendUvarint(w.buf, (i+1)<<1)
		return
	}
	w.table[s] = uint64(len(w.table))
	w.buf = binary.AppendUvarint(w.buf, uint64(len(s))<<1|1)
	w.buf = append(w.buf, s...)
}

// attrs writes the attributes as a row stores them: a row's attributes go
// through JSON, which writes each byte of invalid UTF-8 as U+FFFD, and
// when two keys then read the same the later in key order wins. Written in
// key order with the same replacement, a segment's read back identically.
func (w *segmentWriter) attrs(a map[string]string) {
	if len(a) == 0 {
		w.buf = append(w.buf, 0)
		return
	}
	w.buf = binary.AppendUvarint(w.buf, uint64(len(a)))
	if len(a) == 1 {
		for k, v := range a {
			w.str(jsonText(k))
			w.str(jsonText(v))
		}
		return
	}
	for _, k := range slices.Sorted(maps.Keys(a)) {
		w.str(jsonText(k))
		w.str(jsonText(a[k]))
	}
}

// jsonText is s as encoding/json round-trips it: each byte of invalid
// UTF-8 becomes U+FFFD.
func jsonText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteString("\uFFFD")
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// errSegment is the cause of every decoding error: the segment's data is
// not what a segmentBuilder writes.
var errSegment = errors.New("corrupt audit segment")

// decodeSegment returns the events of segment g (whose Data is data).
func decodeSegment(g *driver.AuditSegment, data []byte) ([]AuditEvent, error) {
	r := segmentReader{data: data}
	if len(data) == 0 || data[0] != segmentFormat {
		return nil, fmt.Errorf("%w: format %v, want %d", errSegment, data[:min(len(data), 1)], segmentFormat)
	}
	r.pos = 1
	base := r.varint()
	if r.err != nil {
		return nil, fmt.Errorf("%w: base time: %w", errSegment, r.err)
	}
	events := make([]AuditEvent, 0, min(max(g.Count, 0), len(data))) // every event takes bytes
	for r.pos < len(data) {
		if len(events) == g.Count {
			return nil, fmt.Errorf("%w: more than the %d events the header says", errSegment, g.Count)
		}
		events = append(events, AuditEvent{})
		e := &events[len(events)-1]
		e.ID = r.raw()
		e.Time = fromNanos(base + r.varint())
		for _, f := range [...]*string{&e.Kind, &e.CorrelationID, &e.Module, &e.Action, &e.Op, &e.User, &e.Rule, &e.Reason,
			&e.Code, &e.MutationID, &e.TaskID, &e.ModelCallID} {
			*f = r.str()
		}
		e.DurationNS = r.varint()
		if na := r.uvarint(); na > 0 && r.err == nil {
			if na > uint64(len(data)) {
				return nil, fmt.Errorf("%w: event %d: %d attributes", errSegment, len(events)-1, na)
			}
			e.Attrs = make(map[string]string, na)
			for range na {
				k := r.str()
				e.Attrs[k] = r.str()
			}
		}
		e.Decision, e.Org = "allow", g.Org
		if r.err != nil {
			return nil, fmt.Errorf("%w: event %d: %w", errSegment, len(events)-1, r.err)
		}
	}
	if len(events) != g.Count {
		return nil, fmt.Errorf("%w: %d events, the header says %d", errSegment, len(events), g.Count)
	}
	return events, nil
}

type segmentReader struct {
	data  []byte
	pos   int
	table []string
	err   error
}

func (r *segmentReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%s at byte %d", what, r.pos)
	}
}

func (r *segmentReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.data[r.pos:])
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.pos += n
	return v
}

func (r *segmentReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.data[r.pos:])
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.pos += n
	return v
}

func (r *segmentReader) bytes(n uint64) string {
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.data)-r.pos) {
		r.fail(fmt.Sprintf("string of %d bytes past the end", n))
		return ""
	}
	s := string(r.data[r.pos : r.pos+int(n)])
	r.pos += int(n)
	return s
}

func (r *segmentReader) raw() string { return r.bytes(r.uvarint()) }

func (r *segmentReader) str() string {
	x := r.uvarint()
	switch {
	case r.err != nil || x == 0:
		return ""
	case x&1 == 1:
		s := r.bytes(x >> 1)
		r.table = append(r.table, s)
		return s
	case x>>1-1 >= uint64(len(r.table)):
		r.fail(fmt.Sprintf("string %d of a table of %d", x>>1-1, len(r.table)))
		return ""
	default:
		return r.table[x>>1-1]
	}
}

// bloom is a Bloom filter of a power-of-two number of bits.
type bloom []byte

func newBloom(keys int) bloom {
	n := max(bloomMinBytes, keys*bloomBitsPerKey/8)
	return make(bloom, 1<<bits.Len(uint(n-1)))
}

// bloomHash is FNV-1a over tag and s, then splitmix64's finalizer, so the
// two halves the probes use are independent enough.
func bloomHash(tag byte, s string) uint64 {
	h := uint64(14695981039346656037)
	h = (h ^ uint64(tag)) * 1099511628211
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

func (b bloom) add(tag byte, s string) {
	h := bloomHash(tag, s)
	h1, h2, mask := uint32(h), uint32(h>>32)|1, uint32(len(b)*8-1)
	for i := range uint32(bloomHashes) {
		p := (h1 + i*h2) & mask
		b[p>>3] |= 1 << (p & 7)
	}
}

// mayHold reports whether s (under tag) may have been added. A filter of
// a shape this store does not write may hold anything.
func (b bloom) mayHold(tag byte, s string) bool {
	if len(b) < bloomMinBytes || len(b)&(len(b)-1) != 0 {
		return true
	}
	h := bloomHash(tag, s)
	h1, h2, mask := uint32(h), uint32(h>>32)|1, uint32(len(b)*8-1)
	for i := range uint32(bloomHashes) {
		p := (h1 + i*h2) & mask
		if b[p>>3]&(1<<(p&7)) == 0 {
			return false
		}
	}
	return true
}
