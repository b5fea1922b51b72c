// Package audit records what moat decided and did: every policy decision
// (allow and deny), every invocation, every op that mutates storage or
// leaves the sandbox, every signature check and confirmation. Each event
// carries its correlation id and, where they apply, the action, mutation,
// task and model-call ids, so one request can be followed end to end.
//
// Events go to the structured log at once (denials at warn, everything else
// at debug) and to the store in batches: the
// invocation path pays a channel send, not a database write. The queue is
// bounded and blocks when full (backpressure) rather than drop an event; a
// failed write is reported on the log at error level. Nothing is silent.
package audit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/host/store"
)

// Event is one audit entry; see store.AuditEvent for the fields.
type Event = store.AuditEvent

// Filter selects events; see store.AuditFilter.
type Filter = store.AuditFilter

// Event kinds and decisions.
const (
	KindDecision     = "decision"
	KindInvocation   = "invocation"
	KindOp           = "op"
	KindSignature    = "signature"
	KindConfirmation = "confirmation"
	KindLoad         = "load"
	// KindConfinement records the kernel layers a host applied to itself
	// and each one it runs without (Rule: the layer, Reason: why).
	KindConfinement = "confinement"
	// KindWorker records a native plugin's worker events (Rule: started,
	// restarted, restart_failed, health_check_failed, gave_up; a give-up
	// is a deny).
	KindWorker = "worker"
	// KindSharedCode records compiled code from the store that a host
	// refused to run (host.Config.CodeKey): an artifact whose MAC does
	// not verify under the host's code key, or one over the size bound
	// (a deny; Rule: the check, Reason: what was found, Attrs: the
	// artifact's key and size). The host compiles the module itself.
	KindSharedCode = "shared_code"
	// KindTask records what happens to a background task outside its
	// invocations: a retry scheduled after a failed attempt, a final
	// failure, a schedule's tick fired (or refused over the queue bound).
	KindTask = "task"
	// KindSecret records a change to one of the operator's secrets
	// (package host/secrets): set or deleted, by whom, in which
	// organization ("" the operator's own), under which name; never
	// the value.
	KindSecret = "secret"
	// KindRoute records a call through a module's HTTP route (moat
	// serve, moat.yaml routes:): Rule the route, User the caller's (or
	// the service user of a public or webhook route), Attrs its auth,
	// source address and status; a refusal is a deny with the reason.
	KindRoute = "route"
	// KindSession records a step of a session (server/sessions): create,
	// run, files, timeout, kill, expire (Rule), Attrs["session"] its id.
	KindSession = "session"
	// KindMCP records a request an MCP tool call made (moat serve's /mcp,
	// moat mcp): Rule the tool, Attrs the tool, the client it said it
	// was and the answer's status.
	KindMCP = "mcp"
	// KindAPIKey records an operation on an API key (moat serve's
	// /v1/keys, moat keys): Rule create, revoke or rotate, Attrs the
	// key's id, the roles and scopes it was given, who did it; never
	// the key's secret.
	KindAPIKey = "api_key"

	Allow = "allow"
	Deny  = "deny"
)

const (
	queueSize = 4096
	batchSize = 512
	// linger is how long the writer gathers events after the first of a
	// batch before it stores them. A commit costs about as much as a
	// hundred rows (on SQLite it appends every page it dirtied to the
	// WAL), and the writer is behind no caller (Record returns at once),
	// so storing what arrived within a few milliseconds in one
	// transaction costs no caller anything; it only widens, by linger,
	// the window of events a crash loses, which the queue already opens.
	// Flush and Close store at once.
	linger = 5 * time.Millisecond
)

// Log is the audit trail of one host. It is safe for concurrent use.
//
// Record appends to pending under mu and wakes the writer only when
// pending was empty or has reached a batch: a channel send per event
// woke the writer, and cost the invoking goroutine a scheduler round
// trip, for nearly every event.
type Log struct {
	store *store.Store
	log   *slog.Logger

	mu      sync.Mutex
	pending []Event    // recorded, not yet taken by the writer; at most queueSize
	room    *sync.Cond // on mu: the writer took pending
	stopped bool       // the writer has taken its last events: store at once

	wake   chan struct{} // capacity 1
	flush  chan chan struct{}
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once
}

// New starts an audit trail writing to st and logger.
func New(st *store.Store, logger *slog.Logger) *Log {
	l := &Log{
		store: st, log: logger,
		pending: make([]Event, 0, batchSize),
		wake:    make(chan struct{}, 1),
		flush:   make(chan chan struct{}),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	l.room = sync.NewCond(&l.mu)
	go l.run()
	return l
}

// Record adds an event. It fills in the id and time when they are empty,
// writes the event to the log (denials at warn level), and queues it for
// the store.
//
// An op event recorded during an invocation is charged to the
// invocation's budget (budget.From(ctx)). The event that reaches the
// budget's AuditRows is followed by one deny event, rule
// limits.budget.audit_rows, saying the budget is used up; from then on the
// transports refuse the invocation's ops before they run, so the trail
// stays bounded and still holds every denial and every mutation.
func (l *Log) Record(ctx context.Context, e Event) {
	l.record(ctx, e)
	if b := budget.From(ctx); e.Kind == KindOp && b.AuditRow() {
		l.record(ctx, Event{Kind: KindDecision, Decision: Deny, CorrelationID: e.CorrelationID, Module: e.Module,
			Action: e.Action, User: e.User, Org: e.Org, Rule: budget.KnobAuditRows, Code: string(abi.CodeResourceExhausted),
			Reason: b.ExhaustedAuditReason()})
	}
}

func (l *Log) record(ctx context.Context, e Event) {
	if e.TaskID == "" {
		e.TaskID = TaskOf(ctx)
	}
	if o, ok := ctx.Value(originKey{}).(origin); ok {
		if _, set := e.Attrs[o.key]; !set {
			attrs := make(map[string]string, len(e.Attrs)+1)
			maps.Copy(attrs, e.Attrs)
			attrs[o.key] = o.value
			e.Attrs = attrs
		}
	}
	e = store.ClampAuditEvent(e)
	if e.ID == "" {
		e.ID = NewID()
	}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	// Denials are news; the allows are the trail. Allows log at debug so a
	// CLI run is not buried in them; all of them are in the store.
	level := slog.LevelDebug
	if e.Decision == Deny {
		level = slog.LevelWarn
	}
	if l.log.Enabled(ctx, level) {
		attrs := []slog.Attr{slog.String("audit", e.Kind), slog.String("id", e.ID)}
		add := func(k, v string) {
			if v != "" {
				attrs = append(attrs, slog.String(k, v))
			}
		}
		add("decision", e.Decision)
		add("correlation_id", e.CorrelationID)
		add("module", e.Module)
		add("action", e.Action)
		add("op", e.Op)
		add("user", e.User)
		add("org", e.Org)
		add("rule", e.Rule)
		add("code", e.Code)
		add("mutation_id", e.MutationID)
		add("task_id", e.TaskID)
		add("model_call_id", e.ModelCallID)
		add("reason", e.Reason)
		l.log.LogAttrs(ctx, level, "audit", attrs...)
	}
	l.mu.Lock()
	for len(l.pending) >= queueSize && !l.stopped {
		l.room.Wait() // backpressure: never drop an event
	}
	if l.stopped {
		l.mu.Unlock()
		l.writeNow(e)
		return
	}
	l.pending = append(l.pending, e)
	n := len(l.pending)
	l.mu.Unlock()
	if n == 1 || n == batchSize {
		select {
		case l.wake <- struct{}{}:
		default: // the writer is already woken
		}
	}
}

// writeNow stores an event recorded after Close, so a late event is kept.
func (l *Log) writeNow(e Event) {
	if err := l.store.AuditInsert(context.Background(), []Event{e}); err != nil {
		l.log.Error("audit: event not stored", "id", e.ID, "err", err)
	}
}

// Flush returns once every event recorded before the call is stored.
func (l *Log) Flush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case l.flush <- ack:
	case <-l.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Query flushes pending events and returns those matching f.
func (l *Log) Query(ctx context.Context, f Filter) ([]Event, error) {
	if err := l.Flush(ctx); err != nil {
		return nil, err
	}
	return l.store.AuditQuery(ctx, f)
}

// Close stores every pending event and stops the writer.
func (l *Log) Close(ctx context.Context) error {
	l.closed.Do(func() { close(l.stop) })
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return errors.New("audit: close: pending events not all stored before the deadline")
	}
}

func (l *Log) run() {
	defer close(l.done)
	var spare []Event
	// drain stores everything pending, in batches of at most batchSize;
	// last marks the Log stopped in the same critical section, so no
	// event is queued after the final take.
	drain := func(last bool) {
		l.mu.Lock()
		taken := l.pending
		l.pending = spare[:0]
		l.stopped = last
		l.room.Broadcast()
		l.mu.Unlock()
		for batch := taken; len(batch) > 0; {
			n := min(len(batch), batchSize)
			l.write(batch[:n])
			batch = batch[n:]
		}
		clear(taken) // let the events' strings go
		spare = taken[:0]
	}
	timer := time.NewTimer(linger)
	timer.Stop()
	for {
		select {
		case <-l.wake:
			l.mu.Lock()
			n := len(l.pending)
			l.mu.Unlock()
			if n > 0 && n < batchSize {
				// Gather for up to linger, or until a batch is full.
				timer.Reset(linger)
				select {
				case <-timer.C:
				case <-l.wake:
					timer.Stop()
				case ack := <-l.flush:
					timer.Stop()
					drain(false)
					close(ack)
					continue
				case <-l.stop:
					timer.Stop()
					drain(true)
					return
				}
			}
			drain(false)
		case ack := <-l.flush:
			drain(false)
			close(ack)
		case <-l.stop:
			drain(true)
			return
		}
	}
}

// write stores a batch. One bad event must not cost the batch: when the
// batch fails, its events are stored one by one, and each that still
// fails is reported.
func (l *Log) write(batch []Event) {
	if err := l.store.AuditInsert(context.Background(), batch); err != nil {
		for _, e := range batch {
			if err := l.store.AuditInsert(context.Background(), []Event{e}); err != nil {
				l.log.Error("audit: event not stored", "id", e.ID, "kind", e.Kind, "module", e.Module, "err", err)
			}
		}
	}
}

// NewID returns a sortable unique id: 12 hex digits of milliseconds since
// the epoch, then 8 random bytes.
func NewID() string {
	var b [14]byte
	ms := uint64(time.Now().UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	_, _ = rand.Read(b[6:])
	return hex.EncodeToString(b[:])
}

// taskKey is the context key of the task an invocation runs for.
type taskKey struct{}

// WithTask marks ctx as the context of an invocation run for background
// task id: every event recorded under it carries the id (Event.TaskID),
// so the audit trail of a task's invocations, ops and decisions names it
// without any of them passing it along.
func WithTask(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, taskKey{}, id)
}

// originKey is the context key of where a call came from.
type originKey struct{}

type origin struct{ key, value string }

// WithOrigin marks ctx as the context of a call that came through a
// person-facing surface — a page (key "page") or a route ("route"): every
// event recorded under it, the invocation's own event, its decisions and
// its ops, carries Attrs[key] = value (unless the event set that key
// itself), so the trail says which page a person used without each layer
// passing it along. One origin per context; an inner call replaces it.
func WithOrigin(ctx context.Context, key, value string) context.Context {
	return context.WithValue(ctx, originKey{}, origin{key, value})
}

// TaskOf is the task id WithTask put on ctx, or "".
func TaskOf(ctx context.Context) string {
	id, _ := ctx.Value(taskKey{}).(string)
	return id
}
