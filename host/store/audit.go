package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
)

// AuditEvent is one entry of the audit trail: a policy decision, an
// invocation, an op that mutates storage or leaves the sandbox, a signature
// check, a confirmation.
type AuditEvent struct {
	ID            string    // unique; set by the caller (a sortable id such as a time-prefixed random hex); AuditInsert generates one when empty
	Time          time.Time // UTC, stored as unix nanoseconds; AuditInsert uses the current time when zero
	Kind          string    // "decision", "invocation", "op", "signature", "confirmation", "load", "confinement"
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
	TaskID        string // originating task, when there is one (future)
	ModelCallID   string // originating AI model call (future)
	DurationNS    int64
	Attrs         map[string]string // anything else; stored as JSON
}

// AuditFilter selects audit events. Every non-empty string field must match
// exactly; Since and Until bound the event time to [Since, Until).
type AuditFilter struct {
	CorrelationID, Module, Decision, Kind, Org string    // exact matches; empty = any
	Since, Until                               time.Time // zero = unbounded; Since inclusive, Until exclusive
	Limit                                      int       // <= 0: 100; capped at 10000
}

// Audit query limits.
const (
	DefaultAuditLimit = 100
	MaxAuditLimit     = 10000
)

// auditKinds are the valid values of AuditEvent.Kind.
var auditKinds = []string{"decision", "invocation", "op", "signature", "confirmation", "load", "confinement"}

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
// event, and its Attrs map, are not modified.
func ClampAuditEvent(e AuditEvent) AuditEvent {
	for _, f := range []*string{&e.ID, &e.Kind, &e.Decision, &e.CorrelationID, &e.Module, &e.Action, &e.Op, &e.User, &e.Org,
		&e.Rule, &e.Reason, &e.Code, &e.MutationID, &e.TaskID, &e.ModelCallID} {
		*f = clampField(*f)
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
// ID that is already stored fails the batch.
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

	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: audit.insert: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	stmt, err := tx.PrepareContext(ctx, `
INSERT INTO audit_events (
	id, time, kind, decision, correlation_id, module, action, op, user, org,
	rule, reason, code, mutation_id, task_id, model_call_id, duration_ns, attrs
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("store: audit.insert: %w", err)
	}
	defer stmt.Close()
	for i := range events {
		c := ClampAuditEvent(events[i])
		e := &c
		t := at(e)
		id := e.ID
		if id == "" {
			id = newAuditID(t)
		}
		var attrs any // NULL when there are none
		if len(e.Attrs) > 0 {
			b, err := json.Marshal(e.Attrs)
			if err != nil {
				return fmt.Errorf("store: audit.insert: event %d (%s): attrs: %w", i, id, err)
			}
			attrs = string(b)
		}
		if _, err := stmt.ExecContext(ctx,
			id, t.UnixNano(), e.Kind, e.Decision, e.CorrelationID, e.Module, e.Action, e.Op, e.User, e.Org,
			e.Rule, e.Reason, e.Code, e.MutationID, e.TaskID, e.ModelCallID, e.DurationNS, attrs,
		); err != nil {
			return fmt.Errorf("store: audit.insert: event %d (%s): %w", i, id, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: audit.insert: commit: %w", err)
	}
	return nil
}

// AuditQuery returns the matching events in time order (oldest first), the
// most recent Limit of them. Events with the same time are ordered by ID.
func (s *Store) AuditQuery(ctx context.Context, f AuditFilter) ([]AuditEvent, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultAuditLimit
	}
	limit = min(limit, MaxAuditLimit)

	var q strings.Builder
	var args []any
	q.WriteString(`
SELECT id, time, kind, decision, correlation_id, module, action, op, user, org,
	rule, reason, code, mutation_id, task_id, model_call_id, duration_ns, attrs
FROM audit_events WHERE 1`)
	eq := func(col, v string) {
		if v != "" {
			q.WriteString(" AND " + col + " = ?")
			args = append(args, v)
		}
	}
	eq("correlation_id", f.CorrelationID)
	eq("module", f.Module)
	eq("decision", f.Decision)
	eq("kind", f.Kind)
	eq("org", f.Org)
	if !f.Since.IsZero() {
		switch {
		case f.Since.After(maxNanoTime):
			return []AuditEvent{}, nil
		case !f.Since.Before(minNanoTime):
			q.WriteString(" AND time >= ?")
			args = append(args, f.Since.UnixNano())
		}
	}
	if !f.Until.IsZero() {
		switch {
		case !f.Until.After(minNanoTime):
			return []AuditEvent{}, nil
		case !f.Until.After(maxNanoTime):
			q.WriteString(" AND time < ?")
			args = append(args, f.Until.UnixNano())
		}
	}
	q.WriteString(" ORDER BY time DESC, id DESC LIMIT ?")
	args = append(args, limit)

	rows, err := s.r.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("store: audit.query: %w", err)
	}
	defer rows.Close()
	events := make([]AuditEvent, 0, min(limit, 64))
	for rows.Next() {
		var (
			e     AuditEvent
			ns    int64
			attrs sql.NullString
		)
		if err := rows.Scan(&e.ID, &ns, &e.Kind, &e.Decision, &e.CorrelationID, &e.Module, &e.Action, &e.Op, &e.User, &e.Org,
			&e.Rule, &e.Reason, &e.Code, &e.MutationID, &e.TaskID, &e.ModelCallID, &e.DurationNS, &attrs); err != nil {
			return nil, fmt.Errorf("store: audit.query: %w", err)
		}
		e.Time = fromNanos(ns)
		if attrs.Valid {
			if err := json.Unmarshal([]byte(attrs.String), &e.Attrs); err != nil {
				return nil, fmt.Errorf("store: audit.query: event %s: attrs: %w", e.ID, err)
			}
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: audit.query: %w", err)
	}
	slices.Reverse(events)
	return events, nil
}
