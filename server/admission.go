package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/internal/tracing"
	"go.opentelemetry.io/otel/trace"
)

// admission bounds one kind of work (invocations, runs) running at once:
// per organization and over the server. The per-module concurrency of a
// manifest does not do it: an organization uploading copies of a module
// multiplies it, and nothing bounds the server as a whole.
//
// Requests past a bound wait in their organization's queue. A freed slot
// goes to the organizations in turn (round robin over those with a
// request waiting and a slot of their own left), so an organization
// flooding the server waits behind its own requests, never ahead of
// another organization's.
type admission struct {
	kind           string // "invocations" or "runs", for messages
	global, perOrg int
	globalKnob     string
	orgKnob        string
	wait           time.Duration
	queue          int

	mu      sync.Mutex
	running int
	orgs    map[string]*orgSlots
	turn    []string // organizations with requests waiting, in turn order
}

type orgSlots struct {
	running int
	waiters []*waiter
}

type waiter struct {
	ready   chan struct{}
	granted bool
}

// admissionRefusal says why a request was not admitted.
type admissionRefusal struct {
	global  bool // the server's bound, not the organization's
	running int
	waited  time.Duration
	full    bool // the organization's queue was full
}

func newAdmission(kind string, global, perOrg int, wait time.Duration, queue int) *admission {
	return &admission{kind: kind, global: global, perOrg: perOrg, wait: wait, queue: queue,
		globalKnob: "admission.max_" + kind, orgKnob: "admission.org_" + kind, orgs: map[string]*orgSlots{}}
}

// acquire takes a slot for org, waiting up to the admission's wait. It
// returns the function that gives the slot back, or why there was none.
func (a *admission) acquire(ctx context.Context, org string) (func(), *admissionRefusal) {
	a.mu.Lock()
	o := a.orgs[org]
	if o == nil {
		o = &orgSlots{}
		a.orgs[org] = o
	}
	// Admit at once only when no request of this organization waits
	// ahead of it. While the server has a slot free, nobody waits for it,
	// only for their organization's.
	if len(o.waiters) == 0 && o.running < a.perOrg && a.running < a.global {
		o.running++
		a.running++
		a.mu.Unlock()
		return a.releaser(org), nil
	}
	if len(o.waiters) >= a.queue {
		r := &admissionRefusal{global: o.running < a.perOrg, running: o.running, full: true}
		if r.global {
			r.running = a.running
		}
		a.mu.Unlock()
		return nil, r
	}
	w := &waiter{ready: make(chan struct{})}
	if len(o.waiters) == 0 {
		a.turn = append(a.turn, org)
	}
	o.waiters = append(o.waiters, w)
	a.mu.Unlock()

	start := time.Now()
	timer := time.NewTimer(a.wait)
	defer timer.Stop()
	select {
	case <-w.ready:
		return a.releaser(org), nil
	case <-ctx.Done():
	case <-timer.C:
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if w.granted {
		if ctx.Err() == nil {
			return a.releaser(org), nil
		}
		a.releaseLocked(org)
		return nil, &admissionRefusal{waited: time.Since(start)}
	}
	a.dropWaiter(org, w)
	r := &admissionRefusal{global: o.running < a.perOrg, running: o.running, waited: time.Since(start)}
	if r.global {
		r.running = a.running
	}
	return nil, r
}

func (a *admission) releaser(org string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			a.releaseLocked(org)
			a.mu.Unlock()
		})
	}
}

func (a *admission) releaseLocked(org string) {
	o := a.orgs[org]
	o.running--
	a.running--
	a.grantLocked()
	if o.running == 0 && len(o.waiters) == 0 {
		delete(a.orgs, org)
	}
}

// grantLocked hands free slots to waiting requests, one organization
// after another.
func (a *admission) grantLocked() {
	for a.running < a.global && len(a.turn) > 0 {
		granted := false
		for i := 0; i < len(a.turn); i++ {
			org := a.turn[i]
			o := a.orgs[org]
			if o.running >= a.perOrg {
				continue
			}
			w := o.waiters[0]
			o.waiters = o.waiters[1:]
			o.running++
			a.running++
			w.granted = true
			close(w.ready)
			// The organization goes to the back of the turn, or out of
			// it with nobody left waiting.
			a.turn = append(a.turn[:i], a.turn[i+1:]...)
			if len(o.waiters) > 0 {
				a.turn = append(a.turn, org)
			}
			granted = true
			break
		}
		if !granted {
			return
		}
	}
}

func (a *admission) dropWaiter(org string, w *waiter) {
	o := a.orgs[org]
	for i, x := range o.waiters {
		if x == w {
			o.waiters = append(o.waiters[:i], o.waiters[i+1:]...)
			break
		}
	}
	if len(o.waiters) == 0 {
		for i, t := range a.turn {
			if t == org {
				a.turn = append(a.turn[:i], a.turn[i+1:]...)
				break
			}
		}
		if o.running == 0 {
			delete(a.orgs, org)
		}
	}
}

// stats are the admission's running and waiting requests, for metrics
// and tests.
func (a *admission) stats() (running, waiting int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, o := range a.orgs {
		waiting += len(o.waiters)
	}
	return a.running, waiting
}

// problem is the refusal as the client sees it: 429 when the
// organization's own bound held the request back (it competes with
// itself; slowing down helps), 503 when the server's did.
func (r *admissionRefusal) problem(a *admission, org string) *Problem {
	retry := max(1, int((a.wait+time.Second-1)/time.Second))
	var p *Problem
	switch {
	case r.global && r.full:
		p = problem(http.StatusServiceUnavailable, string(abi.CodeUnavailable),
			"the server runs its limit of %d %s at once (%s) and organization %s already has %d requests waiting (admission.queue); retry after %d s",
			a.global, a.kind, a.globalKnob, org, a.queue, retry)
	case r.global:
		p = problem(http.StatusServiceUnavailable, string(abi.CodeUnavailable),
			"the server runs its limit of %d %s at once (%s); none ended within %s (admission.wait); retry after %d s",
			a.global, a.kind, a.globalKnob, r.waited.Round(time.Millisecond), retry)
	case r.full:
		p = problem(http.StatusTooManyRequests, string(abi.CodeRateLimited),
			"organization %s runs its limit of %d %s at once (%s) and has %d more waiting (admission.queue); retry after %d s",
			org, a.perOrg, a.kind, a.orgKnob, a.queue, retry)
	default:
		p = problem(http.StatusTooManyRequests, string(abi.CodeRateLimited),
			"organization %s runs its limit of %d %s at once (%s); none ended within %s (admission.wait); retry after %d s",
			org, a.perOrg, a.kind, a.orgKnob, r.waited.Round(time.Millisecond), retry)
	}
	p.RetryAfter = retry
	return p
}

// knob is the setting that refused the request.
func (r *admissionRefusal) knob(a *admission) string {
	switch {
	case r.full:
		return "admission.queue"
	case r.global:
		return a.globalKnob
	}
	return a.orgKnob
}

// admit is the route middleware that runs its handler within adm's
// bounds, for the request's principal's organization. The body is read
// first (up to limits.max_request_bytes, within http.body_timeout), so
// that a slow client holds no slot while it sends; the handler reads the
// same bytes. A refusal is audited as a decision of the organization.
func (s *Server) admit(adm *admission) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			body, err := readBody(c, int64(s.cfg.Limits.MaxRequestBytes), "limits.max_request_bytes")
			if err != nil {
				if c.Path() == s.cfg.Piston.Prefix+"/execute" {
					p := err.(*Problem)
					return c.JSON(p.Status, map[string]string{"message": p.Detail})
				}
				return err
			}
			// The handler takes the body from the request's state (readBody);
			// the request's own Body still reads it, for anything else.
			st := stateOf(c)
			st.body, st.bodyRead = body, true
			c.Request().Body = io.NopCloser(bytes.NewReader(body))
			p := principalOf(c)
			var span trace.Span
			if tracing.On() {
				// A span for the wait for a turn: the time a request
				// spent queued behind its organization's others.
				_, span = tracing.Start(c.Request().Context(), "admission "+adm.kind, trace.SpanKindInternal, tracing.KeyOrg.String(p.Org))
			}
			release, ref := adm.acquire(c.Request().Context(), p.Org)
			if span != nil {
				code := "ok"
				if ref != nil {
					code = ref.knob(adm)
				}
				tracing.End(span, code, nil)
			}
			if ref != nil {
				pr := ref.problem(adm, p.Org)
				s.metrics.admissionRefusals.WithLabelValues(adm.kind, ref.knob(adm)).Inc()
				s.audit.Record(c.Request().Context(), audit.Event{Kind: audit.KindDecision, Decision: audit.Deny,
					CorrelationID: correlationID(c), Module: c.Param("name"), Action: c.Param("action"), User: p.User, Org: p.Org,
					Rule: ref.knob(adm), Reason: pr.Detail})
				if c.Path() == s.cfg.Piston.Prefix+"/execute" {
					c.Response().Header().Set("Retry-After", fmt.Sprint(pr.RetryAfter))
					return c.JSON(pr.Status, map[string]string{"message": pr.Detail})
				}
				return pr
			}
			defer release()
			return next(c)
		}
	}
}
