package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy/egress"
)

// Judge0's callback_url: when a submission finishes, the server PUTs it
// (Judge0's default fields, base64-encoded, as Judge0 does) to the URL
// the submitter gave. The URL is the submitter's choice, so it is hostile:
// it may only name a target the operator granted (judge0.callbacks), is
// sent through package egress (no redirects, no proxy, the address of
// each connection checked: loopback, private and metadata addresses only
// when a granted target names the address), and each attempt is audited
// (op judge0.callback) with the host, path and answer.

const (
	judge0CallbackTries   = 3 // Judge0's CALLBACKS_MAX_TRIES
	judge0CallbackTimeout = 5 * time.Second
)

// judge0CallbackGrant is one granted callback target: a normalized
// scheme://host:port and a path prefix.
type judge0CallbackGrant struct {
	dest   string // egress.Dest.String()
	prefix string // the path, ending in / unless it is the whole path
}

// parseCallbackGrants normalizes judge0.callbacks; an error names the
// index of the target it is about (the configuration's field).
func parseCallbackGrants(raw []string) ([]judge0CallbackGrant, int, error) {
	var out []judge0CallbackGrant
	for i, r := range raw {
		u, d, err := egress.ParseURL(r)
		if err != nil {
			return nil, i, fmt.Errorf("%q: %v; write a URL like https://grader.example.com/judge0/", r, err)
		}
		if u.RawQuery != "" {
			return nil, i, fmt.Errorf("%q has a query; grant a scheme, host, port and path prefix", r)
		}
		p := u.EscapedPath()
		if p == "" {
			p = "/"
		}
		out = append(out, judge0CallbackGrant{dest: d.String(), prefix: p})
	}
	return out, 0, nil
}

// judge0CallbackAllowed says whether raw is under a granted target: the
// same scheme, host and port, and a path under the grant's (at a /).
func (s *Server) judge0CallbackAllowed(raw string) (string, error) {
	u, d, err := egress.ParseURL(raw)
	if err != nil {
		return "", err
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return "", fmt.Errorf("the path has a %q segment; send the path as it is meant, without dot segments", seg)
		}
	}
	grants, _, _ := parseCallbackGrants(s.cfg.Judge0.Callbacks) // validated with the configuration
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	for _, g := range grants {
		if g.dest != d.String() {
			continue
		}
		if p == g.prefix || strings.HasPrefix(p, strings.TrimSuffix(g.prefix, "/")+"/") {
			return u.String(), nil
		}
	}
	if len(grants) == 0 {
		return "", fmt.Errorf("setting callback is not allowed")
	}
	return "", fmt.Errorf("%s is not a granted callback target; the operator lists them in judge0.callbacks", d)
}

// judge0Callback PUTs the finished submission to its callback_url.
func (s *Server) judge0Callback(ctx context.Context, id, org, callback string) {
	t, err := s.store.TaskGet(ctx, store.Scope{Org: org, Module: judge0Module}, id)
	if err != nil {
		s.log.Warn("judge0: reading a submission for its callback", "token", id, "err", err)
		return
	}
	obj, err := judge0Render(t, judge0Ordered(judge0DefaultFields), true)
	if err != nil {
		return
	}
	body, err := json.Marshal(obj)
	if err != nil {
		return
	}
	grants, _, _ := parseCallbackGrants(s.cfg.Judge0.Callbacks)
	var named []string
	for _, g := range grants {
		named = append(named, g.dest)
	}
	client := egress.NewClient(egress.Config{Guard: egress.NewGuard(named), MaxRedirects: -1})
	defer client.CloseIdleConnections()
	for try := 1; try <= judge0CallbackTries; try++ {
		if _, err := s.judge0CallbackAllowed(callback); err != nil { // the grants may have changed since it was stored
			s.judge0AuditCallback(ctx, t, callback, audit.Deny, "judge0.callbacks", 0, err.Error())
			return
		}
		cctx, cancel := context.WithTimeout(ctx, judge0CallbackTimeout)
		resp, _, err := client.Send(cctx, egress.Request{Method: http.MethodPut, URL: callback,
			Header: map[string]string{"Content-Type": "application/json"}, Body: body}, egress.Hooks{})
		status := 0
		if resp != nil {
			status = resp.StatusCode
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		cancel()
		if err != nil {
			var ee *egress.Error
			if ok := asEgressError(err, &ee); ok {
				s.judge0AuditCallback(ctx, t, callback, audit.Deny, "egress: "+ee.Rule, 0, ee.Reason)
				return
			}
			s.judge0AuditCallback(ctx, t, callback, audit.Allow, "", 0, err.Error())
		} else {
			s.judge0AuditCallback(ctx, t, callback, audit.Allow, "", status, "")
			if status < 500 {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(try) * time.Second):
		}
	}
}

func asEgressError(err error, ee **egress.Error) bool { return errors.As(err, ee) }

func (s *Server) judge0AuditCallback(ctx context.Context, t *store.Task, callback, decision, rule string, status int, reason string) {
	host, path := "", ""
	if u, d, err := egress.ParseURL(callback); err == nil {
		host, path = d.String(), u.EscapedPath()
	}
	s.audit.Record(context.WithoutCancel(ctx), audit.Event{Kind: audit.KindOp, Op: "judge0.callback", Decision: decision, Rule: rule,
		CorrelationID: t.CorrelationID, Module: judge0Module, Action: judge0Action, User: t.User, Org: t.Org, TaskID: t.ID,
		Code: strconv.Itoa(status), Reason: reason, Attrs: map[string]string{"method": "PUT", "host": host, "path": path}})
}
