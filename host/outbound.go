package host

import (
	"context"
	"strconv"
	"sync"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/ops"
)

// A module's outbound requests (http.fetch, Extism's http_request,
// media.fetch) go through one ops.HTTPClient of its own: one connection
// pool, one bound on requests in flight, and one guard made from its
// policy's address targets. It is made at the module's first request,
// when its policy is settled (a module without a manifest gets its
// policy after its first instance), and closed with the module.

// moduleHTTP is a module's client, made once.
type moduleHTTP struct {
	once   sync.Once
	client *ops.HTTPClient
}

// moduleOutbound is the module seen as its ops.Outbound (Env.Outbound).
type moduleOutbound Module

func (o *moduleOutbound) client() *ops.HTTPClient {
	m := (*Module)(o)
	m.http.once.Do(func() {
		m.http.client = ops.NewHTTPClient(ops.HTTPClientConfig{Evaluation: m.policy.eval, Resolver: ops.HTTPResolver(m.host.services), Record: m.recordHTTP})
	})
	return m.http.client
}

// Fetch implements ops.Outbound.
func (o *moduleOutbound) Fetch(env *ops.Env, req *abi.HTTPFetchRequest, maxBytes int64) (*abi.HTTPFetchResponse, error) {
	c := o.client()
	if c == nil {
		return nil, errModuleClosed
	}
	return c.Fetch(env, req, maxBytes)
}

// Send implements ops.HTTPSender.
func (o *moduleOutbound) Send(env *ops.Env, req *abi.HTTPFetchRequest, opts ops.FetchOptions) (*abi.HTTPFetchResponse, error) {
	c := o.client()
	if c == nil {
		return nil, errModuleClosed
	}
	return c.Send(env, req, opts)
}

// errModuleClosed refuses the first request of a module closed before it
// made one (a call in flight when it was closed).
var errModuleClosed = abi.Errorf(abi.CodeUnavailable, "http.fetch: the module was closed; no new connection is made for it")

// closeHTTP closes the module's client, if it was made, and keeps it from
// being made later (a request in flight then is refused, errModuleClosed).
func (m *Module) closeHTTP() {
	m.http.once.Do(func() {})
	if m.http.client != nil {
		m.http.client.Close()
	}
}

// recordHTTP writes one of the client's events to the audit trail: op
// http.fetch, with the invocation's correlation id and principal.
func (m *Module) recordHTTP(env *ops.Env, ev ops.HTTPEvent) {
	attrs := map[string]string{"method": ev.Method, "target": ev.Target}
	if ev.Path != "" {
		attrs["path"] = ev.Path
	}
	if ev.Hop > 0 {
		attrs["hop"] = strconv.Itoa(ev.Hop)
	}
	if ev.Status != 0 {
		attrs["status"] = strconv.Itoa(ev.Status)
	}
	if ev.BytesOut > 0 {
		attrs["bytes_out"] = strconv.FormatInt(ev.BytesOut, 10)
	}
	if ev.BytesIn > 0 {
		attrs["bytes_in"] = strconv.FormatInt(ev.BytesIn, 10)
	}
	if len(ev.Injected) > 0 {
		attrs["injected"] = joinNames(ev.Injected)
	}
	if ev.Op != "" {
		attrs["via"] = ev.Op
	}
	e := audit.Event{Kind: audit.KindOp, Decision: ev.Decision, CorrelationID: env.CorrelationID, Module: env.Module, Action: env.Action,
		Op: abi.OpHTTPFetch, User: env.Principal.User, Org: env.Principal.Org, Rule: ev.Rule, Reason: ev.Reason, Code: string(ev.Code),
		DurationNS: int64(ev.Duration), Attrs: attrs}
	if ev.Decision == audit.Allow {
		e.MutationID = audit.NewID()
	}
	ctx := env.Context
	if ctx == nil {
		ctx = context.Background()
	}
	m.host.audit.Record(ctx, e)
}

func joinNames(names []string) string {
	out := ""
	for i, n := range names {
		if i > 0 {
			out += ","
		}
		out += n
	}
	return out
}
