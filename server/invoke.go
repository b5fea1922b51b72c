package server

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
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

// PermConfirmApprove lets its holder see every pending confirmation of its
// organization and approve or deny it (four-eyes approval): held like
// PermModuleUpload, by a role that role_permissions gives it, or by the
// role admin while the profile gives it to no role.
const PermConfirmApprove = "confirm.approve"

// maxInputPreview bounds the bytes of a confirmation's input an approver
// sees in a list; the input's SHA-256 names all of it.
const maxInputPreview = 256

// PendingConfirmationJSON is a pending confirmation as an approver sees it:
// what would run, for whom, with which input (its hash and a bounded
// preview). Never the token: an approver decides by ID.
type PendingConfirmationJSON struct {
	ConfirmationJSON
	InputSHA256  string `json:"input_sha256"`
	InputBytes   int    `json:"input_bytes"`
	InputPreview string `json:"input_preview"` // at most 256 bytes of UTF-8 input; "" for binary input
	Truncated    bool   `json:"input_truncated,omitempty"`
}

func confirmationJSON(cf *store.Confirmation) ConfirmationJSON {
	return ConfirmationJSON{ID: cf.TokenHash[:16], Module: cf.Module, Action: cf.Action, User: cf.User,
		Summary: cf.Summary, CreatedAt: cf.CreatedAt, ExpiresAt: cf.ExpiresAt}
}

// inputPreview is the first maxInputPreview bytes of a UTF-8 input, cut at
// a rune boundary; binary input has none.
func inputPreview(in []byte) (preview string, truncated bool) {
	if !utf8.Valid(in) {
		return "", false
	}
	if len(in) <= maxInputPreview {
		return string(in), false
	}
	cut := maxInputPreview
	for cut > 0 && !utf8.RuneStart(in[cut]) {
		cut--
	}
	return string(in[:cut]), true
}

// pendingConfirmations lists the caller's own pending confirmations, or
// with ?all=1 every pending confirmation of its organization, which takes
// PermConfirmApprove.
func (s *Server) pendingConfirmations(c echo.Context) error {
	p := principalOf(c)
	all := false
	switch v := c.QueryParam("all"); v {
	case "", "0", "false":
	case "1", "true":
		all = true
	default:
		return problem(http.StatusBadRequest, "invalid_argument", "all=%q: use all=1 for every pending confirmation of the organization", v)
	}
	if all {
		if err := s.mayManage(c, PermConfirmApprove, ""); err != nil {
			return err
		}
	}
	list, err := s.store.ConfirmationsPending(c.Request().Context(), p.Org, time.Now().UTC(), store.MaxConfirmationLimit)
	if err != nil {
		return err
	}
	if all {
		out := []PendingConfirmationJSON{}
		for i := range list {
			cf := &list[i]
			pv, cut := inputPreview(cf.Input)
			out = append(out, PendingConfirmationJSON{ConfirmationJSON: confirmationJSON(cf), InputSHA256: cf.InputSHA256,
				InputBytes: len(cf.Input), InputPreview: pv, Truncated: cut})
		}
		return c.JSON(http.StatusOK, map[string]any{"confirmations": out})
	}
	out := []ConfirmationJSON{}
	for i := range list {
		if list[i].User != p.User {
			continue
		}
		out = append(out, confirmationJSON(&list[i]))
	}
	return c.JSON(http.StatusOK, map[string]any{"confirmations": out})
}

// ConfirmationStatusJSON is what the holder of a token learns of its
// confirmation: pending, or how and by whom it was decided.
type ConfirmationStatusJSON struct {
	ID        string     `json:"id"`
	Module    string     `json:"module"`
	Action    string     `json:"action"`
	State     string     `json:"state"` // pending, expired, confirmed, approved, denied or stale
	DecidedBy string     `json:"decided_by,omitempty"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	ExpiresAt time.Time  `json:"expires_at"`
}

// confirmationStatus tells the holder of a token what became of its
// confirmation, so that the tab that asked learns when an approver
// decided (it polls). Only the requester's own confirmation is found.
func (s *Server) confirmationStatus(c echo.Context) error {
	p := principalOf(c)
	sum := sha256.Sum256([]byte(c.Param("token")))
	cf, err := s.store.ConfirmationGet(c.Request().Context(), p.Org, hex.EncodeToString(sum[:]))
	if errors.Is(err, store.ErrConfirmationNotFound) || (err == nil && cf.User != p.User) {
		return problem(http.StatusNotFound, "not_found", "no confirmation for this token in organization %s", p.Org)
	}
	if err != nil {
		return err
	}
	out := ConfirmationStatusJSON{ID: cf.TokenHash[:16], Module: cf.Module, Action: cf.Action, State: "pending", ExpiresAt: cf.ExpiresAt}
	switch {
	case !cf.UsedAt.IsZero():
		at := cf.UsedAt
		out.State, out.DecidedBy, out.DecidedAt = cf.Decision, cf.DecidedBy, &at
		if out.State == "" {
			out.State = store.DecisionConfirmed // a row from before approvals
		}
	case !time.Now().Before(cf.ExpiresAt):
		out.State = "expired"
	}
	return c.JSON(http.StatusOK, out)
}

// DecisionJSON answers a denial.
type DecisionJSON struct {
	ID        string `json:"id"`
	Decision  string `json:"decision"`
	Requester string `json:"requester"`
}

// decideConfirmation approves or denies, as an approver (PermConfirmApprove),
// a pending confirmation of its organization by its ID. An approval runs
// the action as the requester (host.Module.Decide) and answers its output,
// as confirm does; a denial answers a DecisionJSON. An ID of another
// organization is a 404, as an unknown one is.
func (s *Server) decideConfirmation(c echo.Context) error {
	p := principalOf(c)
	verb := c.Param("decision")
	if verb != "approve" && verb != "deny" {
		return problem(http.StatusNotFound, "not_found", "no such route: POST /v1/confirmations/id/{id}/approve or /deny")
	}
	if err := s.mayManage(c, PermConfirmApprove, ""); err != nil {
		return err
	}
	logs, ctx, err := logsFor(c)
	if err != nil {
		return err
	}
	id := c.Param("id")
	notFound := problem(http.StatusNotFound, "not_found", "no pending confirmation %q in organization %s: it is unknown, decided or expired", clipAttr(id), p.Org)
	if len(id) != 16 || !validHex(id) {
		return notFound
	}
	list, err := s.store.ConfirmationsPending(ctx, p.Org, time.Now().UTC(), store.MaxConfirmationLimit)
	if err != nil {
		return err
	}
	var cf *store.Confirmation
	for i := range list {
		if strings.HasPrefix(list[i].TokenHash, id) {
			cf = &list[i]
			break
		}
	}
	if cf == nil {
		return notFound
	}
	e, err := s.modules.ensure(ctx, p.Org, cf.Module)
	if e == nil && err == nil {
		return problem(http.StatusNotFound, "not_found", "the module %s of this confirmation was deleted", cf.Module)
	}
	if err != nil {
		return s.moduleProblem(p.Org, cf.Module, correlationID(c), e, err)
	}
	start := time.Now()
	res, decided, err := e.mod.Decide(ctx, host.DecideRequest{TokenHash: cf.TokenHash, Approver: p, Approve: verb == "approve", CorrelationID: correlationID(c)})
	if verb == "approve" {
		s.metrics.observeInvocation(p.Org, cf.Module, "approve", start, err)
	}
	if err != nil {
		return logs.failed(fromHostError(err))
	}
	if verb == "deny" {
		return c.JSON(http.StatusOK, DecisionJSON{ID: id, Decision: decided.Decision, Requester: decided.User})
	}
	return logs.answer(c, res.Output)
}

func validHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if (s[i] < '0' || s[i] > '9') && (s[i] < 'a' || s[i] > 'f') {
			return false
		}
	}
	return true
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
