package server

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
)

// invoke runs an action with the request body as its input. The output is
// the response body as the module wrote it; with ?logs=true, it is an
// InvocationJSON with the guest's log records of the invocation.
func (s *Server) invoke(c echo.Context) error {
	e, err := s.lookup(c)
	if err != nil {
		return err
	}
	input, err := readBody(c, int64(s.cfg.Limits.MaxRequestBytes), "limits.max_request_bytes")
	if err != nil {
		return err
	}
	logs, ctx, err := logsFor(c)
	if err != nil {
		return err
	}
	action := c.Param("action")
	start := time.Now()
	res, err := e.mod.Invoke(ctx, host.Request{
		Action: action, Input: input, Principal: principalOf(c), CorrelationID: correlationID(c),
	})
	s.metrics.observeInvocation(e.version.Org, e.version.Name, action, start, err)
	if err != nil {
		return logs.failed(fromHostError(err))
	}
	return logs.answer(c, res.Output)
}

// writeOutput sends a module's output as text/plain when it is UTF-8,
// as bytes otherwise, and as an attachment: never as a type a browser
// renders (the front door also holds every route to that), so an output
// holding HTML or SVG is not a page of the console's origin.
func writeOutput(c echo.Context, out []byte) error {
	ct, disposition := "application/octet-stream", `attachment; filename="output.bin"`
	if utf8.Valid(out) {
		ct, disposition = "text/plain; charset=utf-8", `attachment; filename="output.txt"`
	}
	// As c.Blob would, with the values in the request state's array (see
	// frontDoor).
	v := stateOf(c).hdr[6:8]
	v[0], v[1] = disposition, ct
	h := c.Response().Header()
	h["Content-Disposition"] = v[0:1:1]
	h["Content-Type"] = v[1:2:2]
	c.Response().WriteHeader(http.StatusOK)
	_, err := c.Response().Write(out)
	return err
}

// ConfirmationJSON is a pending confirmation. The token is not in it: the
// server keeps only its hash, and the token went to whoever was asked.
type ConfirmationJSON struct {
	ID        string    `json:"id"` // the first 16 hex digits of the token's hash
	Module    string    `json:"module"`
	Action    string    `json:"action"`
	User      string    `json:"user"`
	Summary   string    `json:"summary"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// pendingConfirmations lists the caller's own pending confirmations.
func (s *Server) pendingConfirmations(c echo.Context) error {
	p := principalOf(c)
	list, err := s.store.ConfirmationsPending(c.Request().Context(), p.Org, time.Now().UTC(), store.MaxConfirmationLimit)
	if err != nil {
		return err
	}
	out := []ConfirmationJSON{}
	for _, cf := range list {
		if cf.User != p.User {
			continue
		}
		out = append(out, ConfirmationJSON{ID: cf.TokenHash[:16], Module: cf.Module, Action: cf.Action, User: cf.User,
			Summary: cf.Summary, CreatedAt: cf.CreatedAt, ExpiresAt: cf.ExpiresAt})
	}
	return c.JSON(http.StatusOK, map[string]any{"confirmations": out})
}

// confirm runs the action a confirmation token stands for, once, for the
// principal it was issued to, on the module it was requested on
// (host.Module.Confirm checks that and records the decision): a token
// whose module was replaced since is a 409 confirmation_stale.
func (s *Server) confirm(c echo.Context) error {
	p := principalOf(c)
	logs, ctx, err := logsFor(c)
	if err != nil {
		return err
	}
	token := c.Param("token")
	sum := sha256.Sum256([]byte(token))
	hash := hex.EncodeToString(sum[:])
	list, err := s.store.ConfirmationsPending(ctx, p.Org, time.Now().UTC(), store.MaxConfirmationLimit)
	if err != nil {
		return err
	}
	module := ""
	for _, cf := range list {
		if cf.TokenHash == hash {
			module = cf.Module
		}
	}
	if module == "" {
		return problem(http.StatusNotFound, "not_found", "no pending confirmation for this token in organization %s: it is unknown, used or expired; invoke the action again for a new one", p.Org)
	}
	e, err := s.modules.ensure(ctx, p.Org, module)
	if e == nil && err == nil {
		return problem(http.StatusNotFound, "not_found", "the module %s of this confirmation was deleted", module)
	}
	if err != nil {
		return s.moduleProblem(p.Org, module, correlationID(c), e, err)
	}
	start := time.Now()
	res, err := e.mod.Confirm(ctx, host.ConfirmRequest{Token: token, Principal: p, CorrelationID: correlationID(c)})
	s.metrics.observeInvocation(p.Org, module, "confirm", start, err)
	if err != nil {
		return logs.failed(fromHostError(err))
	}
	return logs.answer(c, res.Output)
}

// AuditEventJSON is an audit event in responses.
type AuditEventJSON struct {
	ID            string            `json:"id"`
	Time          time.Time         `json:"time"`
	Kind          string            `json:"kind"`
	Decision      string            `json:"decision,omitempty"`
	CorrelationID string            `json:"correlation_id,omitempty"`
	Module        string            `json:"module,omitempty"`
	Action        string            `json:"action,omitempty"`
	Op            string            `json:"op,omitempty"`
	User          string            `json:"user,omitempty"`
	Org           string            `json:"org,omitempty"`
	Rule          string            `json:"rule,omitempty"`
	Reason        string            `json:"reason,omitempty"`
	Code          string            `json:"code,omitempty"`
	MutationID    string            `json:"mutation_id,omitempty"`
	TaskID        string            `json:"task_id,omitempty"`
	ModelCallID   string            `json:"model_call_id,omitempty"`
	DurationNS    int64             `json:"duration_ns,omitempty"`
	Attrs         map[string]string `json:"attrs,omitempty"`
}

// auditQuery returns the caller's organization's audit events (its own
// user's only, without PermAuditRead), filtered by
// correlation_id, module, decision, kind and the time range [since, until)
// (RFC 3339), the newest limit of them in time order.
func (s *Server) auditQuery(c echo.Context) error {
	p := principalOf(c)
	q := c.QueryParams()
	f := audit.Filter{Org: p.Org, CorrelationID: q.Get("correlation_id"), Module: q.Get("module"), Decision: q.Get("decision"), Kind: q.Get("kind")}
	// The trail traces every caller of the organization: who called
	// what, with which ops and decisions, and why refusals were refused.
	// The whole of it is for those the organization gives PermAuditRead;
	// anyone else reads its own user's events (its invocations', its
	// tasks', its refusals).
	if ok, _, _ := s.holds(p, PermAuditRead); !ok {
		f.User = p.User
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := q.Get(t.name); v != "" {
			tm, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return problem(http.StatusBadRequest, "invalid_argument", "%s=%q is not an RFC 3339 time; write it like 2026-01-02T15:04:05Z", t.name, v)
			}
			*t.dst = tm
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxAuditLimit {
			return problem(http.StatusBadRequest, "invalid_argument", "limit=%q: give a number from 1 to %d", v, store.MaxAuditLimit)
		}
		f.Limit = n
	}
	switch f.Decision {
	case "", audit.Allow, audit.Deny:
	default:
		return problem(http.StatusBadRequest, "invalid_argument", "decision=%q: use allow or deny", f.Decision)
	}
	ctx := c.Request().Context()
	// The trail queues its events (every host's); flush it so that the
	// events of the request just answered are there.
	if err := s.audit.Flush(ctx); err != nil {
		return err
	}
	events, err := s.store.AuditQuery(ctx, f)
	if err != nil {
		if abi.CodeOf(err) != "" {
			return fromHostError(err)
		}
		return err
	}
	out := make([]AuditEventJSON, len(events))
	for i, e := range events {
		out[i] = AuditEventOf(e)
	}
	return c.JSON(http.StatusOK, map[string]any{"events": out})
}

// AuditEventOf is an audit event as /v1/audit answers it, and as `moat
// audit --json` prints it: one naming of its fields for the CLI and the
// HTTP API.
func AuditEventOf(e store.AuditEvent) AuditEventJSON {
	return AuditEventJSON{ID: e.ID, Time: e.Time, Kind: e.Kind, Decision: e.Decision, CorrelationID: e.CorrelationID,
		Module: e.Module, Action: e.Action, Op: e.Op, User: e.User, Org: e.Org, Rule: e.Rule, Reason: e.Reason,
		Code: e.Code, MutationID: e.MutationID, TaskID: e.TaskID, ModelCallID: e.ModelCallID, DurationNS: e.DurationNS, Attrs: e.Attrs}
}
