package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store/driver"
)

// AuditEvent is one entry of the audit trail: a policy decision, an
// invocation, an op that mutates storage or leaves the sandbox, a signature
// check, a confirmation.
type AuditEvent struct {
	ID            string    // unique; set by the caller (a sortable id such as a time-prefixed random hex); AuditInsert generates one when empty
	Time          time.Time // UTC, stored as unix nanoseconds; AuditInsert uses the current time when zero
	Kind          string    // "decision", "invocation", "op", "signature", "confirmation", "load", "confinement", "worker", "shared_code", "task", "secret", "route", "session", "mcp"
	Decision      string    // "allow", "deny" or ""
	CorrelationID string
	Module        string
	Action        string
	Op            string
	User, Org     string
	Rule          string // which rule decided, e.g. "manifest actions[0].roles"
	Reason        string
	Code          string // outcome code (abi.Code) for invocations
	MutationID    string // storage mutation id for ops that change data
	TaskID        string // the background task the event happened for, when there is one
	ModelCallID   string // the model call an op made (ai.*, knowledge's embeddings): its id, also the reply's model_call_id
	DurationNS    int64
	Attrs         map[string]string // anything else; stored as JSON
}

// AuditFilter selects audit events. Every non-empty string field must match
// exactly; Since and Until bound the event time to [Since, Until).
type AuditFilter struct {
	CorrelationID, Module, Decision, Kind, Org string    // exact matches; empty = any
	User                                       string    // the principal's user, exactly; empty = any
	Since, Until                               time.Time // zero = unbounded; Since inclusive, Until exclusive
	Limit                                      int       // <= 0: 100; capped at 10000
}

// ErrDuplicateAuditID is the error (wrapped) of an AuditInsert whose batch
// gives an ID twice, or the ID of an event stored as a row of its own.
var ErrDuplicateAuditID = errors.New("audit event id already used")

// Audit query limits.
const (
	DefaultAuditLimit = 100
	MaxAuditLimit     = 10000
)

// auditKinds are the valid values of AuditEvent.Kind.
var auditKinds = []string{"decision", "invocation", "op", "signature", "confirmation", "load", "confinement", "worker", "shared_code", "task", "secret", "route", "session", "mcp", "api_key"}

// The range of times a unix nanosecond count can hold.
var (
	minNanoTime = time.Unix(0, math.MinInt64)
	maxNanoTime = time.Unix(0, math.MaxInt64)
)

// nanos converts t to unix nanoseconds, or reports that it is out of range
// (before 1677 or after 2262).
func nanos(t time.Time) (int64, bool) {
	if t.Before(minNanoTime) || t.After(maxNanoTime) {
		return 0, false
	}
	return t.UnixNano(), true
}

func fromNanos(ns int64) time.Time { return time.Unix(0, ns).UTC() }

// validateAuditEvent checks event i of a batch, whose time is t.
func validateAuditEvent(i int, e *AuditEvent, t time.Time) error {
	if !slices.Contains(auditKinds, e.Kind) {
		return abi.Errorf(abi.CodeInvalidArgument, "audit event %d: kind %q is not one of %s", i, e.Kind, strings.Join(auditKinds, ", "))
	}
	switch e.Decision {
	case "", "allow", "deny":
	default:
		return abi.Errorf(abi.CodeInvalidArgument, "audit event %d: decision %q is not allow, deny or empty", i, e.Decision)
	}
	if _, ok := nanos(t); !ok {
		return abi.Errorf(abi.CodeInvalidArgument, "audit event %d: time %s is outside the range of unix nanoseconds (years 1678 to 2261)", i, t)
	}
	return nil
}

// MaxAuditField bounds each text field of an audit event (and each
// attribute value). Reasons quote what a guest sent (a URL's host, an op's
// name), and a row must be stored whatever its size, so a longer field is
// cut, at a UTF-8 boundary, and marked with how much was cut: unlike a log
// record, an audit row cannot be refused.
const MaxAuditField = 4 << 10

// maxAuditAttrs bounds the attributes of one event.
const maxAuditAttrs = 32

// ClampAuditEvent returns e with each text field and attribute value cut to
// MaxAuditField bytes (see there) and at most 32 attributes; the caller's
// event, and its Attrs map, are not modified. A text field (not an
// attribute: attributes are stored as JSON, which escapes anything) that is
// not valid UTF-8 or holds a NUL byte gets U+FFFD in place of each bad byte
// sequence: PostgreSQL's text holds neither, and a row must be stored, and
// read back the same, on every backend.
func ClampAuditEvent(e AuditEvent) AuditEvent {
	for _, f := range []*string{&e.ID, &e.Kind, &e.Decision, &e.CorrelationID, &e.Module, &e.Action, &e.Op, &e.User, &e.Org,
		&e.Rule, &e.Reason, &e.Code, &e.MutationID, &e.TaskID, &e.ModelCallID} {
		if *f != "" {
			*f = textField(*f)
		}
	}
	over := len(e.Attrs) > maxAuditAttrs
	for k, v := range e.Attrs {
		over = over || len(k) > MaxAuditField || len(v) > MaxAuditField
	}
	if over {
		attrs := make(map[string]string, min(len(e.Attrs), maxAuditAttrs+1))
		for _, k := range slices.Sorted(maps.Keys(e.Attrs)) {
			if len(attrs) == maxAuditAttrs {
				attrs["truncated_attrs"] = fmt.Sprint(len(e.Attrs) - maxAuditAttrs)
				break
			}
			attrs[clampField(k)] = clampField(e.Attrs[k])
		}
		e.Attrs = attrs
	}
	return e
}

func clampField(s string) string {
	if len(s) <= MaxAuditField {
		return s
	}
	return clampLong(s)
}

// textField is clampField for a column of text: also valid UTF-8 without
// NUL. The check costs no allocation when the field is clean.
func textField(s string) string {
	if plainText(s) {
		return s
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	return clampField(s)
}

// plainText reports whether s is short ASCII without NUL, as nearly every
// field is: one pass, where the general checks take three.
func plainText(s string) bool {
	if len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == 0 || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func clampLong(s string) string {
	cut := MaxAuditField - 64
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…[%d more bytes cut]", s[:cut], len(s)-cut)
}

// newAuditID returns a sortable unique id in the form the host uses: 12 hex
// digits of milliseconds since the epoch (of t), then 8 random bytes.
func newAuditID(t time.Time) string {
	var b [14]byte
	ms := uint64(t.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	_, _ = rand.Read(b[6:])
	return hex.EncodeToString(b[:])
}

// AuditInsert stores events in one transaction: all of them or, on any
// error, none. Every event is validated first; a bad Kind or Decision is an
// *abi.Error with abi.CodeInvalidArgument naming the field and the event's
// index. An event with an empty ID gets a generated one, and one with a
// zero Time gets the current time (the caller's slice is not modified). An
// ID given twice in the batch, or already stored as an event of its own
// row, fails the batch (an allowed invocation or op is stored packed, see
// auditpack.go, and its ID is not checked against earlier batches: the
// host's ids, audit.NewID, carry 64 random bits). Each event is clamped
// by ClampAuditEvent.
func (s *Store) AuditInsert(ctx context.Context, events []AuditEvent) (err error) {
	if len(events) == 0 {
		return nil
	}
	now := time.Now()
	at := func(e *AuditEvent) time.Time {
		if e.Time.IsZero() {
			return now
		}
		return e.Time
	}
	for i := range events {
		if err := validateAuditEvent(i, &events[i], at(&events[i])); err != nil {
			return err
		}
	}
	var (
		rows     []driver.AuditRow
		segs     []driver.AuditSegment
		building []*segmentBuilder // one per organization with routine events, in order of appearance
		ids      map[string]struct{}
	)
	defer func() {
		for _, b := range building {
			b.release()
		}
	}()
	for i := range events {
		e := ClampAuditEvent(events[i])
		t := at(&e)
		if e.ID == "" {
			e.ID = newAuditID(t)
		}
		if packable(&e) {
			// The rows' primary key refuses a duplicate among them; a
			// packed event's id has no index, so the batch is checked
			// here.
			if ids == nil {
				ids = make(map[string]struct{}, len(events))
			}
			if _, ok := ids[e.ID]; ok {
				return fmt.Errorf("store: audit.insert: event %d: id %q given twice in the batch: %w", i, e.ID, ErrDuplicateAuditID)
			}
			ids[e.ID] = struct{}{}
			var b *segmentBuilder
			for _, o := range building {
				if o.g.Org == e.Org {
					b = o
					break
				}
			}
			if b == nil {
				b = newSegmentBuilder(e.Org)
				building = append(building, b)
			}
			b.add(&e, t.UnixNano())
			if b.g.Count == maxSegmentEvents {
				// Full: its bytes go with segs; a fresh builder takes
				// the organization's next events.
				segs = append(segs, b.segment())
				*b = segmentBuilder{w: segmentWriter{table: make(map[string]uint64, 16)}}
				b.g.Org, b.w.buf = e.Org, []byte{segmentFormat}
			}
			continue
		}
		var attrs string // "" (NULL) when there are none
		if len(e.Attrs) > 0 {
			b, err := json.Marshal(e.Attrs)
			if err != nil {
				return fmt.Errorf("store: audit.insert: event %d (%s): attrs: %w", i, e.ID, err)
			}
			attrs = string(b)
		}
		rows = append(rows, driver.AuditRow{
			ID: e.ID, Time: t.UnixNano(), Kind: e.Kind, Decision: e.Decision, CorrelationID: e.CorrelationID,
			Module: e.Module, Action: e.Action, Op: e.Op, User: e.User, Org: e.Org,
			Rule: e.Rule, Reason: e.Reason, Code: e.Code, MutationID: e.MutationID, TaskID: e.TaskID,
			ModelCallID: e.ModelCallID, DurationNS: e.DurationNS, Attrs: attrs,
		})
	}
	for _, b := range building {
		if b.g.Count > 0 {
			segs = append(segs, b.segment())
		}
	}
	if ids != nil {
		for i := range rows {
			if _, ok := ids[rows[i].ID]; ok {
				return fmt.Errorf("store: audit.insert: id %q given twice in the batch: %w", rows[i].ID, ErrDuplicateAuditID)
			}
		}
	}
	if err := s.b.AuditInsert(ctx, rows, segs); err != nil {
		if errors.Is(err, driver.ErrConflict) {
			return fmt.Errorf("store: audit.insert: %w: %w", ErrDuplicateAuditID, err)
		}
		return fmt.Errorf("store: audit.insert: %w", err)
	}
	return nil
}

// AuditQuery returns the matching events in time order (oldest first), the
// most recent Limit of them. Events with the same time are ordered by ID
// (bytewise). Events stored as rows and packed in segments are merged.
func (s *Store) AuditQuery(ctx context.Context, f AuditFilter) ([]AuditEvent, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultAuditLimit
	}
	df := driver.AuditFilter{
		CorrelationID: f.CorrelationID, Module: f.Module, Decision: f.Decision, Kind: f.Kind, Org: f.Org, User: f.User,
		Limit: min(limit, MaxAuditLimit),
	}
	// A bound beyond what unix nanoseconds can hold either excludes
	// everything or nothing.
	if !f.Since.IsZero() {
		switch {
		case f.Since.After(maxNanoTime):
			return []AuditEvent{}, nil
		case !f.Since.Before(minNanoTime):
			df.Since, df.HasSince = f.Since.UnixNano(), true
		}
	}
	if !f.Until.IsZero() {
		switch {
		case !f.Until.After(minNanoTime):
			return []AuditEvent{}, nil
		case !f.Until.After(maxNanoTime):
			df.Until, df.HasUntil = f.Until.UnixNano(), true
		}
	}
	rows, err := s.b.AuditQuery(ctx, df)
	if err != nil {
		return nil, fmt.Errorf("store: audit.query: %w", err)
	}
	events := make([]AuditEvent, len(rows)) // newest first, like rows
	for i := range rows {
		r := &rows[i]
		e := &events[i]
		*e = AuditEvent{
			ID: r.ID, Time: fromNanos(r.Time), Kind: r.Kind, Decision: r.Decision, CorrelationID: r.CorrelationID,
			Module: r.Module, Action: r.Action, Op: r.Op, User: r.User, Org: r.Org,
			Rule: r.Rule, Reason: r.Reason, Code: r.Code, MutationID: r.MutationID, TaskID: r.TaskID,
			ModelCallID: r.ModelCallID, DurationNS: r.DurationNS,
		}
		if r.Attrs != "" {
			if err := json.Unmarshal([]byte(r.Attrs), &e.Attrs); err != nil {
				return nil, fmt.Errorf("store: audit.query: event %s: attrs: %w", e.ID, err)
			}
		}
	}
	if events, err = s.auditSegmentsQuery(ctx, df, events); err != nil {
		return nil, fmt.Errorf("store: audit.query: %w", err)
	}
	slices.Reverse(events) // oldest first
	return events, nil
}

// newerFirst orders events by time, then ID, descending.
func newerFirst(a, b AuditEvent) int {
	if c := b.Time.Compare(a.Time); c != 0 {
		return c
	}
	return strings.Compare(b.ID, a.ID)
}

// auditSegmentsQuery merges into found (the matching rows, newest first,
// at most f.Limit) the matching events of the segments, and returns the
// newest f.Limit of them all, newest first. It reads segment headers
// newest first, a page at a time, decodes only those whose Bloom filter
// may hold the correlation id and module asked for, and stops at the first
// segment whose newest event is older than the f.Limit-th newest found.
func (s *Store) auditSegmentsQuery(ctx context.Context, f driver.AuditFilter, found []AuditEvent) ([]AuditEvent, error) {
	if (f.Decision != "" && f.Decision != "allow") || (f.Kind != "" && f.Kind != "invocation" && f.Kind != "op") {
		return found, nil // no segment holds such an event
	}
	sf := driver.AuditSegmentFilter{Org: f.Org, Since: f.Since, HasSince: f.HasSince, Until: f.Until, HasUntil: f.HasUntil, Limit: 16}
	var want []int64
	for {
		hdrs, err := s.b.AuditSegments(ctx, sf)
		if err != nil {
			return nil, err
		}
		want = want[:0]
		done := len(hdrs) < sf.Limit
		for i := range hdrs {
			g := &hdrs[i]
			if len(found) >= f.Limit && g.TimeMax < found[f.Limit-1].Time.UnixNano() {
				done = true
				hdrs = hdrs[:i]
				break
			}
			b := bloom(g.Bloom)
			if (f.CorrelationID != "" && !b.mayHold(bloomCorrelation, f.CorrelationID)) || (f.Module != "" && !b.mayHold(bloomModule, f.Module)) {
				continue
			}
			want = append(want, g.ID)
		}
		if len(want) > 0 {
			data, err := s.b.AuditSegmentData(ctx, want)
			if err != nil {
				return nil, err
			}
			for i := range hdrs {
				g := &hdrs[i]
				d, ok := data[g.ID]
				if !ok {
					continue // not wanted, or deleted since
				}
				evs, err := decodeSegment(g, d)
				if err != nil {
					return nil, fmt.Errorf("segment %d (org %q): %w", g.ID, g.Org, err)
				}
				for _, e := range evs {
					if auditMatch(&e, f) {
						found = append(found, e)
					}
				}
			}
			slices.SortFunc(found, newerFirst)
			if len(found) > f.Limit {
				clear(found[f.Limit:])
				found = found[:f.Limit]
			}
		}
		if done || len(hdrs) == 0 {
			return found, nil
		}
		last := &hdrs[len(hdrs)-1]
		sf.BeforeTime, sf.BeforeID, sf.HasBefore = last.TimeMax, last.ID, true
		sf.Limit = min(sf.Limit*2, 256)
	}
}

// auditMatch is the filter the backends apply to rows, applied to a
// decoded event.
func auditMatch(e *AuditEvent, f driver.AuditFilter) bool {
	t := e.Time.UnixNano()
	return (f.CorrelationID == "" || e.CorrelationID == f.CorrelationID) &&
		(f.Module == "" || e.Module == f.Module) &&
		(f.Decision == "" || e.Decision == f.Decision) &&
		(f.Kind == "" || e.Kind == f.Kind) &&
		(f.Org == "" || e.Org == f.Org) &&
		(f.User == "" || e.User == f.User) &&
		(!f.HasSince || t >= f.Since) &&
		(!f.HasUntil || t < f.Until)
}

// AuditPruneBatch is the most event rows (and, apart, segments) one
// transaction of AuditPrune deletes: a few milliseconds of work, so that
// pruning a large trail never holds the writer (SQLite) or many row locks
// (PostgreSQL) for long.
const AuditPruneBatch = 2000

// AuditPruned is what AuditPrune removed.
type AuditPruned struct {
	Events   int64 // events removed, those segments packed included
	Segments int64
	Batches  int
}

// AuditPrune removes the audit events older than before, in batches of
// AuditPruneBatch, each its own transaction, until none is left; a
// routine events' segment goes when its newest event is older than
// before. It is idempotent, and replicas may run it at once (PostgreSQL
// skips the rows another is deleting): what it reports is what this call
// removed. ctx ends it between batches, keeping what it removed.
func (s *Store) AuditPrune(ctx context.Context, before time.Time) (AuditPruned, error) {
	var p AuditPruned
	ap, ok := s.b.(driver.AuditPruner)
	if !ok {
		return p, fmt.Errorf("audit prune: the %s backend cannot prune the audit trail", s.b.Location())
	}
	if before.IsZero() {
		return p, errors.New("audit prune: no cutoff; give the time before which events are removed")
	}
	for {
		if err := ctx.Err(); err != nil {
			return p, err
		}
		rows, segs, packed, err := ap.AuditPrune(ctx, before.UnixNano(), AuditPruneBatch)
		if err != nil {
			return p, fmt.Errorf("audit prune: %w", err)
		}
		p.Batches++
		p.Events += rows + packed
		p.Segments += segs
		if rows < AuditPruneBatch && segs < AuditPruneBatch {
			return p, nil
		}
	}
}
