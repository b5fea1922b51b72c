package budget_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
)

// hooks records the onExhaust calls of a budget.
type hooks struct {
	mu    sync.Mutex
	calls []string // knob: reason
}

func (h *hooks) record(knob, reason string) {
	h.mu.Lock()
	h.calls = append(h.calls, knob+": "+reason)
	h.mu.Unlock()
}

func (h *hooks) knobs() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for _, c := range h.calls {
		k, _, _ := strings.Cut(c, ": ")
		out[k]++
	}
	return out
}

func TestLimitsOr(t *testing.T) {
	d := budget.DefaultLimits
	tests := []struct {
		name string
		in   budget.Limits
		want budget.Limits
	}{
		{name: "zero takes every default", want: d},
		{name: "negative takes the default", in: budget.Limits{HeldBytes: -1, OpenDevices: -5, AuditRows: -1}, want: d},
		{name: "set fields are kept", in: budget.Limits{HeldBytes: 1, LogRecords: 2, HTTPResponseBytes: 3},
			want: func() budget.Limits { l := d; l.HeldBytes, l.LogRecords, l.HTTPResponseBytes = 1, 2, 3; return l }()},
		{name: "all set", in: budget.Limits{HeldBytes: 1, OpenDevices: 2, LogBytes: 3, LogRecords: 4, AuditRows: 5, HTTPRequestBytes: 6, HTTPResponseBytes: 7},
			want: budget.Limits{HeldBytes: 1, OpenDevices: 2, LogBytes: 3, LogRecords: 4, AuditRows: 5, HTTPRequestBytes: 6, HTTPResponseBytes: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.Or(d); got != tt.want {
				t.Fatalf("Or = %+v, want %+v", got, tt.want)
			}
			if got := budget.New(tt.in, nil).Limits(); got != tt.want {
				t.Fatalf("New(...).Limits() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// step is one call on a budget and what it must return.
type step struct {
	do   func(b *budget.Budget) error
	code abi.Code // "" for success
	msg  string   // in the refusal's message
}

func hold(n int64) func(*budget.Budget) error {
	return func(b *budget.Budget) error { return b.Hold(n, "test buffer") }
}
func release(n int64) func(*budget.Budget) error {
	return func(b *budget.Budget) error { b.Release(n); return nil }
}
func open(b *budget.Budget) error     { return b.Open("/dev/moat/ops") }
func closeDev(b *budget.Budget) error { b.Close(); return nil }
func logRec(n int) func(*budget.Budget) error {
	return func(b *budget.Budget) error { return b.Log(n) }
}
func body(dir string, n int64) func(*budget.Budget) error {
	return func(b *budget.Budget) error { return b.HTTPBody(dir, n, "GET http://x") }
}

// TestBudget drives one budget per case through a sequence of charges:
// each refusal has its code and names its knob, and each knob's first
// refusal, and only that, reaches the hook.
func TestBudget(t *testing.T) {
	tests := []struct {
		name      string
		lim       budget.Limits
		steps     []step
		wantHooks map[string]int
		wantHeld  int64
		wantUsage budget.Usage
	}{
		{
			name: "held bytes up to the limit, not past it",
			lim:  budget.Limits{HeldBytes: 100},
			steps: []step{
				{do: hold(60)}, {do: hold(40)},
				{do: hold(1), code: abi.CodeResourceExhausted, msg: "test buffer: 1 more bytes would make the host hold 101 bytes for this invocation; the limit is 100 (limits.budget.held_bytes)"},
				{do: release(50)}, {do: hold(50)},
				{do: hold(51), code: abi.CodeResourceExhausted, msg: "limits.budget.held_bytes"},
				{do: release(1000)}, // over-release: held stays at 0
				{do: hold(100)},
				{do: hold(0)}, {do: hold(-5)}, // nothing to charge
			},
			wantHooks: map[string]int{budget.KnobHeldBytes: 1},
			wantHeld:  100,
			wantUsage: budget.Usage{PeakHeldBytes: 100, Exhausted: []string{budget.KnobHeldBytes}},
		},
		{
			name: "descriptors: a close frees one",
			lim:  budget.Limits{OpenDevices: 2},
			steps: []step{
				{do: open}, {do: open},
				{do: open, code: abi.CodeResourceExhausted, msg: "open /dev/moat/ops: this invocation already has 2 descriptors of it open; the limit is 2 (limits.budget.open_devices)"},
				{do: closeDev}, {do: open},
				{do: open, code: abi.CodeResourceExhausted, msg: "limits.budget.open_devices"},
				{do: closeDev}, {do: closeDev}, {do: closeDev}, // an extra close does not go below 0
				{do: open}, {do: open},
				{do: open, code: abi.CodeResourceExhausted},
			},
			wantHooks: map[string]int{budget.KnobOpenDevices: 1},
			wantUsage: budget.Usage{Exhausted: []string{budget.KnobOpenDevices}},
		},
		{
			name: "log records",
			lim:  budget.Limits{LogRecords: 2, LogBytes: 1 << 20},
			steps: []step{
				{do: logRec(10)}, {do: logRec(10)},
				{do: logRec(1), code: abi.CodeResourceExhausted, msg: "log.write: this invocation wrote its 2 log records; the limit is 2 (limits.budget.log_records)"},
				{do: logRec(1), code: abi.CodeResourceExhausted},
			},
			wantHooks: map[string]int{budget.KnobLogRecords: 1},
			wantUsage: budget.Usage{LogBytes: 20, LogRecords: 2, Exhausted: []string{budget.KnobLogRecords}},
		},
		{
			name: "log bytes: a record that does not fit is refused, a smaller one still goes",
			lim:  budget.Limits{LogRecords: 100, LogBytes: 100},
			steps: []step{
				{do: logRec(90)},
				{do: logRec(11), code: abi.CodeResourceExhausted, msg: "log.write: a 11-byte record would bring this invocation's log to 101 bytes; the limit is 100 (limits.budget.log_bytes)"},
				{do: logRec(10)},
				{do: logRec(1), code: abi.CodeResourceExhausted, msg: "limits.budget.log_bytes"},
			},
			wantHooks: map[string]int{budget.KnobLogBytes: 1},
			wantUsage: budget.Usage{LogBytes: 100, LogRecords: 2, Exhausted: []string{budget.KnobLogBytes}},
		},
		{
			name: "HTTP bodies: over their own limit too_large, within it held",
			lim:  budget.Limits{HeldBytes: 1000, HTTPRequestBytes: 100, HTTPResponseBytes: 600},
			steps: []step{
				{do: body("request", 101), code: abi.CodeTooLarge, msg: "GET http://x: the request body is 101 bytes or more; the limit is 100 (limits.budget.http_request_bytes)"},
				{do: body("request", 100)},
				{do: body("response", 601), code: abi.CodeTooLarge, msg: "the response body is 601 bytes or more; the limit is 600 (limits.budget.http_response_bytes)"},
				{do: body("response", 600)},
				// 700 held: a body within its own limit may still pass the held bytes.
				{do: body("response", 400), code: abi.CodeResourceExhausted, msg: "limits.budget.held_bytes"},
				{do: release(700)},
				{do: body("response", 400)},
			},
			wantHooks: map[string]int{budget.KnobHTTPRequestBytes: 1, budget.KnobHTTPResponseBytes: 1, budget.KnobHeldBytes: 1},
			wantHeld:  400,
			wantUsage: budget.Usage{PeakHeldBytes: 700, Exhausted: []string{budget.KnobHeldBytes, budget.KnobHTTPRequestBytes, budget.KnobHTTPResponseBytes}},
		},
		{
			name: "every knob hit: Usage lists them in a fixed order",
			lim:  budget.Limits{HeldBytes: 1, OpenDevices: 1, LogBytes: 1, LogRecords: 1, AuditRows: 1, HTTPRequestBytes: 1, HTTPResponseBytes: 1},
			steps: []step{
				{do: body("response", 2), code: abi.CodeTooLarge}, {do: body("request", 2), code: abi.CodeTooLarge},
				{do: hold(2), code: abi.CodeResourceExhausted}, {do: logRec(2), code: abi.CodeResourceExhausted},
				{do: logRec(1)}, {do: logRec(1), code: abi.CodeResourceExhausted},
				{do: open}, {do: open, code: abi.CodeResourceExhausted},
			},
			wantHooks: map[string]int{budget.KnobHeldBytes: 1, budget.KnobOpenDevices: 1, budget.KnobLogBytes: 1, budget.KnobLogRecords: 1,
				budget.KnobHTTPRequestBytes: 1, budget.KnobHTTPResponseBytes: 1},
			wantUsage: budget.Usage{LogBytes: 1, LogRecords: 1, Exhausted: []string{budget.KnobHeldBytes, budget.KnobOpenDevices, budget.KnobLogBytes,
				budget.KnobLogRecords, budget.KnobHTTPRequestBytes, budget.KnobHTTPResponseBytes}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &hooks{}
			b := budget.New(tt.lim, h.record)
			for i, s := range tt.steps {
				err := s.do(b)
				if s.code == "" {
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					continue
				}
				var ae *abi.Error
				if !errors.As(err, &ae) || ae.Code != s.code || !strings.Contains(ae.Message, s.msg) {
					t.Fatalf("step %d: %v, want %s containing %q", i, err, s.code, s.msg)
				}
			}
			if got := h.knobs(); fmt.Sprint(got) != fmt.Sprint(tt.wantHooks) {
				t.Errorf("hook calls %v, want %v:\n%s", got, tt.wantHooks, strings.Join(h.calls, "\n"))
			}
			if got := b.Held(); got != tt.wantHeld {
				t.Errorf("held %d, want %d", got, tt.wantHeld)
			}
			if got := b.Usage(); fmt.Sprint(got) != fmt.Sprint(tt.wantUsage) {
				t.Errorf("usage %+v, want %+v", got, tt.wantUsage)
			}
		})
	}
}

// TestBudgetAuditRows: the row that reaches AuditRows is the last one
// (the caller then records the exhaustion row itself, so the hook is not
// called); from then on Admit refuses every op before it runs.
func TestBudgetAuditRows(t *testing.T) {
	h := &hooks{}
	b := budget.New(budget.Limits{AuditRows: 3}, h.record)
	for i := 1; i <= 3; i++ {
		if err := b.Admit([]byte("kv.put")); err != nil {
			t.Fatalf("op %d refused: %v", i, err)
		}
		if last := b.AuditRow(); last != (i == 3) {
			t.Fatalf("row %d: last = %v", i, last)
		}
	}
	for range 2 {
		err := b.Admit([]byte("kv.put"))
		var ae *abi.Error
		if !errors.As(err, &ae) || ae.Code != abi.CodeResourceExhausted ||
			ae.Message != "op kv.put: this invocation used up its audit budget of 3 op events (limits.budget.audit_rows); no further op runs" {
			t.Fatalf("Admit after the budget: %v", err)
		}
	}
	// Rows keep being counted (a denial that happened is recorded), and
	// only the one that reached the limit says it was the last.
	if b.AuditRow() {
		t.Fatal("a row past the limit reported last")
	}
	if want := "audit budget exhausted: this invocation recorded 3 op events, the limit (limits.budget.audit_rows); its further ops are refused with resource_exhausted before they run"; b.ExhaustedAuditReason() != want {
		t.Fatalf("reason %q", b.ExhaustedAuditReason())
	}
	u := b.Usage()
	if u.AuditRows != 4 || u.RefusedOps != 2 || fmt.Sprint(u.Exhausted) != "[limits.budget.audit_rows]" {
		t.Fatalf("usage %+v", u)
	}
	if len(h.calls) != 0 {
		t.Fatalf("hook called for the audit budget: %v", h.calls)
	}
	// A long op name is cut in the message.
	err := b.Admit([]byte(strings.Repeat("x", 1000)))
	if err == nil || !strings.Contains(err.Error(), "op "+strings.Repeat("x", 64)+": ") {
		t.Fatalf("long op name: %v", err)
	}
}

// TestBudgetNil: code outside an invocation has no budget, and every
// method of a nil *Budget allows everything.
func TestBudgetNil(t *testing.T) {
	var b *budget.Budget
	if budget.From(context.Background()) != nil {
		t.Fatal("a bare context has a budget")
	}
	for i, err := range []error{b.Hold(1<<40, "x"), b.Open("x"), b.Log(1 << 30), b.Admit([]byte("kv.put")), b.HTTPBody("response", 1<<40, "x")} {
		if err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	b.Release(1)
	b.Close()
	if b.AuditRow() || b.Held() != 0 || fmt.Sprint(b.Usage()) != fmt.Sprint(budget.Usage{}) || b.Limits() != budget.DefaultLimits {
		t.Fatal("a nil budget reports use")
	}
	real := budget.New(budget.Limits{}, nil)
	if got := budget.From(budget.With(context.Background(), real)); got != real {
		t.Fatalf("From(With(b)) = %p, want %p", got, real)
	}
	if v := budget.With(context.Background(), real).Value(budget.Key()); v != real {
		t.Fatalf("the context's Key() value is %v", v)
	}
}

// TestBudgetConcurrent charges one budget from many goroutines at once,
// as a guest driving several descriptors does while the host reads HTTP
// bodies on others (run under -race by make test): the limits hold
// exactly, nothing leaks, and each knob's hook runs once.
func TestBudgetConcurrent(t *testing.T) {
	const (
		workers    = 16
		iterations = 2000
		heldLimit  = 64 << 10
		openLimit  = 5
		logLimit   = 300
		auditLimit = 500
	)
	h := &hooks{}
	b := budget.New(budget.Limits{HeldBytes: heldLimit, OpenDevices: openLimit, LogRecords: logLimit, LogBytes: 1 << 30, AuditRows: auditLimit,
		HTTPResponseBytes: 4 << 10}, h.record)
	var (
		wg                          sync.WaitGroup
		logged, lasts, admitRefused atomic.Int64
		opened, maxOpen             atomic.Int64
		overHeld                    atomic.Int64
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A base each worker keeps for its lifetime: 16 of them are
			// more than the limit holds, so some are refused however the
			// goroutines are scheduled.
			const base = 6 << 10
			if b.Hold(base, "base") == nil {
				defer b.Release(base)
			}
			for i := range iterations {
				n := int64(1 + (w*131+i*17)%(8<<10))
				if b.Hold(n, "buffer") == nil {
					if b.Held() > heldLimit {
						overHeld.Add(1)
					}
					b.Release(n)
				}
				if b.HTTPBody("response", n, "GET") == nil {
					b.Release(n)
				}
				if b.Open("dev") == nil {
					if k := opened.Add(1); k > maxOpen.Load() {
						maxOpen.Store(k) // racy max, checked against the limit only
					}
					opened.Add(-1)
					b.Close()
				}
				if b.Log(1) == nil {
					logged.Add(1)
				}
				if b.Admit([]byte("kv.put")) != nil {
					admitRefused.Add(1)
				} else if b.AuditRow() {
					lasts.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	u := b.Usage()
	switch {
	case overHeld.Load() != 0:
		t.Errorf("held bytes passed the limit %d times", overHeld.Load())
	case b.Held() != 0:
		t.Errorf("%d bytes still held after every release", b.Held())
	case u.PeakHeldBytes > heldLimit:
		t.Errorf("peak %d over the limit %d", u.PeakHeldBytes, heldLimit)
	case maxOpen.Load() > openLimit:
		t.Errorf("%d descriptors open at once; the limit is %d", maxOpen.Load(), openLimit)
	case logged.Load() != logLimit || u.LogRecords != logLimit:
		t.Errorf("%d records logged (usage %d), want exactly %d", logged.Load(), u.LogRecords, logLimit)
	case lasts.Load() != 1:
		t.Errorf("%d rows reported last, want exactly 1", lasts.Load())
	case int64(u.AuditRows)+admitRefused.Load() != workers*iterations:
		t.Errorf("audit rows %d, refused %d: some op was neither admitted nor refused", u.AuditRows, admitRefused.Load())
	case u.AuditRows < auditLimit || u.AuditRows >= auditLimit+workers:
		// An op admitted just before the limit records its row after it.
		t.Errorf("%d audit rows; the limit is %d, and at most %d ops can be admitted at once", u.AuditRows, auditLimit, workers)
	case int64(u.RefusedOps) != admitRefused.Load():
		t.Errorf("usage counts %d refused ops, the workers saw %d", u.RefusedOps, admitRefused.Load())
	}
	// Every refused Hold and HTTPBody and the log limit reached their
	// hooks once each (the descriptors may or may not have collided).
	for _, k := range []string{budget.KnobHeldBytes, budget.KnobHTTPResponseBytes, budget.KnobLogRecords} {
		if n := h.knobs()[k]; n != 1 {
			t.Errorf("hook for %s called %d times, want 1", k, n)
		}
	}
	if n := h.knobs()[budget.KnobOpenDevices]; n > 1 {
		t.Errorf("hook for %s called %d times, want at most 1", budget.KnobOpenDevices, n)
	}
}
