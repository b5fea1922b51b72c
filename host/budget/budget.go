// Package budget charges the host memory and work that an invocation
// causes to that invocation. A guest cannot allocate host memory directly,
// but everything the host does for it can: the request lines a transport
// buffers, the replies it holds until the guest reads them, the response
// bodies of HTTP requests, the records log.write adds to the host's log and
// the rows its ops add to the audit trail. Without a bound, each of these
// turns a small guest action into a large host cost (one 2 MB write of
// short invalid lines once made 822 MiB of error replies).
//
// The host makes one *Budget per invocation, with the invocation's Limits,
// and puts it on the invocation's context (With); the transports, the ops
// and the audit trail find it there (From) and charge it. Going over a limit
// is a refusal with code abi.CodeResourceExhausted (or abi.CodeTooLarge for
// one item bigger than its limit) whose message names the limit and its
// configuration knob; the host never grows instead.
//
// A Budget is safe for concurrent use: a guest may drive several
// descriptors, and an Extism plug-in's host functions run on its call's
// goroutine while the host reads on others.
package budget

import (
	"context"
	"fmt"
	"sync"

	"github.com/moat-sandbox/moat/abi"
)

// Limits bound what one invocation may make the host hold or write. Zero
// fields take DefaultLimits. Each field names its knob (the YAML key under
// limits.budget) in the refusals it causes.
type Limits struct {
	// HeldBytes bounds the bytes the host holds for the invocation at
	// once: partial request lines and unread replies over every open
	// descriptor of the device file, and HTTP bodies in transit.
	HeldBytes int64
	// OpenDevices bounds the descriptors of the device file
	// (/dev/moat/ops) open at once.
	OpenDevices int
	// LogBytes and LogRecords bound what log.write adds to the host's
	// log in one invocation (a record's bytes are its request's).
	LogBytes   int64
	LogRecords int
	// AuditRows bounds the op events (allowed mutations, denials) one
	// invocation adds to the audit trail. The row that reaches it is
	// followed by one row saying so, and every later op of the invocation
	// is refused before it runs, so no op ever goes unaudited.
	AuditRows int
	// HTTPRequestBytes and HTTPResponseBytes bound one request body and
	// one response body of an Extism plug-in's http_request.
	HTTPRequestBytes  int64
	HTTPResponseBytes int64
}

// DefaultLimits are generous for real plug-ins (a kv value is at most
// 1 MiB; a busy action logs tens of records) and small next to the host:
// an invocation holds at most 16 MiB of transport buffers.
var DefaultLimits = Limits{
	HeldBytes:         16 << 20,
	OpenDevices:       16,
	LogBytes:          1 << 20,
	LogRecords:        1000,
	AuditRows:         1000,
	HTTPRequestBytes:  8 << 20,
	HTTPResponseBytes: 8 << 20,
}

// Or returns l with each zero (or negative) field taken from d.
func (l Limits) Or(d Limits) Limits {
	or64 := func(v, d int64) int64 {
		if v <= 0 {
			return d
		}
		return v
	}
	or := func(v, d int) int {
		if v <= 0 {
			return d
		}
		return v
	}
	l.HeldBytes = or64(l.HeldBytes, d.HeldBytes)
	l.OpenDevices = or(l.OpenDevices, d.OpenDevices)
	l.LogBytes = or64(l.LogBytes, d.LogBytes)
	l.LogRecords = or(l.LogRecords, d.LogRecords)
	l.AuditRows = or(l.AuditRows, d.AuditRows)
	l.HTTPRequestBytes = or64(l.HTTPRequestBytes, d.HTTPRequestBytes)
	l.HTTPResponseBytes = or64(l.HTTPResponseBytes, d.HTTPResponseBytes)
	return l
}

// Knobs: the configuration keys of the limits, as refusals name them.
const (
	KnobHeldBytes         = "limits.budget.held_bytes"
	KnobOpenDevices       = "limits.budget.open_devices"
	KnobLogBytes          = "limits.budget.log_bytes"
	KnobLogRecords        = "limits.budget.log_records"
	KnobAuditRows         = "limits.budget.audit_rows"
	KnobHTTPRequestBytes  = "limits.budget.http_request_bytes"
	KnobHTTPResponseBytes = "limits.budget.http_response_bytes"
)

// Budget is what one invocation has used of its Limits.
type Budget struct {
	lim Limits

	mu         sync.Mutex
	held       int64
	peakHeld   int64
	open       int
	logBytes   int64
	logRecords int
	auditRows  int
	refusedOps int
	exhausted  map[string]bool // knobs whose limit was hit, each reported once
	onExhaust  func(knob, reason string)
}

// New returns an empty budget with lim (zero fields from DefaultLimits).
// onExhaust, when not nil, is called once per limit, the first time the
// invocation hits it, with the limit's knob and why; the host audits it.
// It must not call back into the budget.
func New(lim Limits, onExhaust func(knob, reason string)) *Budget {
	return &Budget{lim: lim.Or(DefaultLimits), onExhaust: onExhaust}
}

// Limits returns the budget's limits, defaults filled in (DefaultLimits
// for a nil budget).
func (b *Budget) Limits() Limits {
	if b == nil {
		return DefaultLimits
	}
	return b.lim
}

type key struct{}

// With returns ctx carrying b.
func With(ctx context.Context, b *Budget) context.Context { return context.WithValue(ctx, key{}, b) }

// From returns the budget on ctx, or nil. Every method of a nil *Budget
// allows everything: code that runs outside an invocation (a load, a test)
// is not charged.
func From(ctx context.Context) *Budget {
	b, _ := ctx.Value(key{}).(*Budget)
	return b
}

// Key is the context key With uses, for a context type that answers Value
// itself (the import transport's per-call context).
func Key() any { return key{} }

// refuse records that knob's limit was hit and returns the refusal. The
// hook runs outside the lock.
func (b *Budget) refuse(code abi.Code, knob, format string, args ...any) *abi.Error {
	e := abi.Errorf(code, format, args...)
	first := !b.exhausted[knob]
	if first {
		if b.exhausted == nil {
			b.exhausted = map[string]bool{}
		}
		b.exhausted[knob] = true
	}
	hook := b.onExhaust
	b.mu.Unlock()
	if first && hook != nil {
		hook(knob, e.Message)
	}
	b.mu.Lock()
	return e
}

// Hold charges n bytes the host is about to keep for the invocation (what
// is a transport's buffer, say, for what). It returns a refusal, and
// charges nothing, when the bytes held would pass HeldBytes. Release them
// with Release when they are freed.
func (b *Budget) Hold(n int64, what string) error {
	if b == nil || n <= 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held+n > b.lim.HeldBytes {
		return b.refuse(abi.CodeResourceExhausted, KnobHeldBytes,
			"%s: %d more bytes would make the host hold %d bytes for this invocation; the limit is %d (%s)",
			what, n, b.held+n, b.lim.HeldBytes, KnobHeldBytes)
	}
	b.held += n
	b.peakHeld = max(b.peakHeld, b.held)
	return nil
}

// Release returns n bytes charged by Hold.
func (b *Budget) Release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.held = max(0, b.held-n)
	b.mu.Unlock()
}

// Held is the number of bytes held now.
func (b *Budget) Held() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// Open charges one open descriptor of the device file; Close returns it.
func (b *Budget) Open(path string) error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open >= b.lim.OpenDevices {
		return b.refuse(abi.CodeResourceExhausted, KnobOpenDevices,
			"open %s: this invocation already has %d descriptors of it open; the limit is %d (%s)",
			path, b.open, b.lim.OpenDevices, KnobOpenDevices)
	}
	b.open++
	return nil
}

// Close returns a descriptor charged by Open.
func (b *Budget) Close() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.open = max(0, b.open-1)
	b.mu.Unlock()
}

// Log charges one log record of n bytes. A record over the whole byte
// budget is too_large; past the record or byte budget it is
// resource_exhausted.
func (b *Budget) Log(n int) error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.logRecords >= b.lim.LogRecords:
		return b.refuse(abi.CodeResourceExhausted, KnobLogRecords,
			"log.write: this invocation wrote its %d log records; the limit is %d (%s)", b.logRecords, b.lim.LogRecords, KnobLogRecords)
	case b.logBytes+int64(n) > b.lim.LogBytes:
		return b.refuse(abi.CodeResourceExhausted, KnobLogBytes,
			"log.write: a %d-byte record would bring this invocation's log to %d bytes; the limit is %d (%s)",
			n, b.logBytes+int64(n), b.lim.LogBytes, KnobLogBytes)
	}
	b.logRecords++
	b.logBytes += int64(n)
	return nil
}

// AuditRow charges one op event of the audit trail. It returns true when
// this row reached AuditRows: the caller records it, then one more row
// saying the budget is used up (see ExhaustedAuditReason). Rows are never
// refused here, since a denial or a mutation that happened must be on the
// trail; the bound comes from Admit refusing later ops.
func (b *Budget) AuditRow() (last bool) {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.auditRows++
	if b.auditRows != b.lim.AuditRows {
		return false
	}
	if b.exhausted == nil {
		b.exhausted = map[string]bool{}
	}
	b.exhausted[KnobAuditRows] = true // the caller records it; no hook
	return true
}

// ExhaustedAuditReason is the reason of the row that follows the last
// one an invocation may add.
func (b *Budget) ExhaustedAuditReason() string {
	return fmt.Sprintf("audit budget exhausted: this invocation recorded %d op events, the limit (%s); its further ops are refused with %s before they run",
		b.lim.AuditRows, KnobAuditRows, abi.CodeResourceExhausted)
}

// Admit is asked before every op of the invocation runs. Once the audit
// budget is used up it refuses: an op can only run if its audit row
// (a denial, or an allowed mutation) will be recorded.
func (b *Budget) Admit(op []byte) error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.auditRows < b.lim.AuditRows {
		return nil
	}
	b.refusedOps++
	return abi.Errorf(abi.CodeResourceExhausted,
		"op %.64s: this invocation used up its audit budget of %d op events (%s); no further op runs", op, b.lim.AuditRows, KnobAuditRows)
}

// Usage is what an invocation used, for its audit row.
type Usage struct {
	PeakHeldBytes int64
	LogBytes      int64
	LogRecords    int
	AuditRows     int
	RefusedOps    int      // ops refused after the audit budget ran out
	Exhausted     []string // knobs whose limit the invocation hit
}

// Usage reports what the invocation used so far.
func (b *Budget) Usage() Usage {
	if b == nil {
		return Usage{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	u := Usage{PeakHeldBytes: b.peakHeld, LogBytes: b.logBytes, LogRecords: b.logRecords, AuditRows: b.auditRows, RefusedOps: b.refusedOps}
	for _, k := range []string{KnobHeldBytes, KnobOpenDevices, KnobLogBytes, KnobLogRecords, KnobAuditRows, KnobHTTPRequestBytes, KnobHTTPResponseBytes} {
		if b.exhausted[k] {
			u.Exhausted = append(u.Exhausted, k)
		}
	}
	return u
}

// HTTPBody checks one HTTP body of n bytes (dir is "request" or
// "response") against its limit, and, within it, reserves it in HeldBytes.
// The caller Releases n when the body is handed over.
func (b *Budget) HTTPBody(dir string, n int64, what string) error {
	if b == nil {
		return nil
	}
	lim, knob := b.lim.HTTPResponseBytes, KnobHTTPResponseBytes
	if dir == "request" {
		lim, knob = b.lim.HTTPRequestBytes, KnobHTTPRequestBytes
	}
	if n > lim {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.refuse(abi.CodeTooLarge, knob, "%s: the %s body is %d bytes or more; the limit is %d (%s)", what, dir, n, lim, knob)
	}
	return b.Hold(n, what)
}
