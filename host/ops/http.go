package ops

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/policy"
)

// The http family: http.fetch, one outbound request sent by the host for
// the guest. The op checks what the guest may choose (the body, the time
// and size bounds) and hands the request to the module's client, the
// family's view of the module (moduleHTTP: one HTTPClient per module,
// outbound.go, made at its first request and closed with it), which
// every outbound path shares: Extism's http_request reaches it through
// Fetch, media.fetch through OutboundOf. So the grants, the address
// check, the injected headers, the scrubbing and the audit are the same
// code whichever way a request leaves.

func init() {
	RegisterFamily(Family{
		Name: "http", Capability: policy.CapabilitySpec{Name: "http"},
		Config: func() any { return &HTTPConfig{} },
		Provision: func(ctx *ProvisionContext, cfg any) (any, error) {
			secrets, err := secretsService(ctx)
			return &httpService{resolver: cfg.(*HTTPConfig).Resolver, secrets: secrets}, err
		},
		Attach: func(ctx *AttachContext, svc any) (any, error) {
			h := &moduleHTTP{eval: ctx.Module.Evaluation, audit: ctx.Audit}
			if s, ok := svc.(*httpService); ok {
				h.resolver = s.resolver
			}
			return h, nil
		},
		Detach: func(view any) { view.(*moduleHTTP).close() },
		Ops:    []Op{{Name: abi.OpHTTPFetch, LeavesSandbox: true, AuditsItself: true, Func: Typed(httpFetch)}},
	})
	httpOp, _ = Lookup([]byte(abi.OpHTTPFetch))
}

// HTTPConfig configures the http family (host.Config.Families["http"]).
type HTTPConfig struct {
	// Resolver resolves the host names of the requests modules send
	// (http.fetch, Extism's http_request, media.fetch). Nil: the
	// system's. Every address it answers is checked when dialled.
	Resolver *net.Resolver `yaml:"-"`
}

// httpService is the http family's service: the resolver of its clients
// and the secrets family's source, which a grant's injected headers are
// read from.
type httpService struct {
	resolver *net.Resolver
	secrets  SecretSource
}

// moduleHTTP is the http family's view of a module: its client, made
// once, at its first request (most modules send none), from its policy
// (the address targets its guard lets connections reach, the headers its
// grants inject) and the family's resolver, and closed with the module.
type moduleHTTP struct {
	eval     *policy.Evaluation
	resolver *net.Resolver
	audit    *audit.Log
	once     sync.Once
	client   *HTTPClient
}

var _ HTTPSender = (*moduleHTTP)(nil)

func (h *moduleHTTP) get() *HTTPClient {
	h.once.Do(func() {
		h.client = NewHTTPClient(HTTPClientConfig{Evaluation: h.eval, Resolver: h.resolver, Record: h.record})
	})
	return h.client
}

// Fetch implements Outbound.
func (h *moduleHTTP) Fetch(env *Env, req *abi.HTTPFetchRequest, maxBytes int64) (*abi.HTTPFetchResponse, error) {
	c := h.get()
	if c == nil {
		return nil, errModuleClosed
	}
	return c.Fetch(env, req, maxBytes)
}

// Send implements HTTPSender.
func (h *moduleHTTP) Send(env *Env, req *abi.HTTPFetchRequest, opts FetchOptions) (*abi.HTTPFetchResponse, error) {
	c := h.get()
	if c == nil {
		return nil, errModuleClosed
	}
	return c.Send(env, req, opts)
}

// close closes the module's client, if it was made, and keeps it from
// being made later (a request in flight then is refused,
// errModuleClosed).
func (h *moduleHTTP) close() {
	h.once.Do(func() {})
	if h.client != nil {
		h.client.Close()
	}
}

// errModuleClosed refuses the first request of a module closed before it
// made one (a call in flight when it was closed).
var errModuleClosed = abi.Errorf(abi.CodeUnavailable, "http.fetch: the module was closed; no new connection is made for it")

// record writes one of the client's events to the host's audit trail: op
// http.fetch, with the invocation's correlation id and principal.
func (h *moduleHTTP) record(env *Env, ev HTTPEvent) {
	if h.audit == nil {
		return
	}
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
		attrs["injected"] = strings.Join(ev.Injected, ",")
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
	h.audit.Record(ctx, e)
}

// OutboundOf is the client of env's module (nil when the host sends no
// requests for it: the http family disabled, or an Env made by hand).
func OutboundOf(env *Env) Outbound {
	if h, ok := ViewOf[*moduleHTTP](env, "http"); ok {
		return h
	}
	return nil
}

// httpSecrets is the secrets source of env's host (nil: none).
func httpSecrets(env *Env) SecretSource {
	if h, ok := ServiceOf[*httpService](env, "http"); ok {
		return h.secrets
	}
	return nil
}

// httpOp is http.fetch's table entry: the op every request's grant check
// is asked as, whichever op sent it.
var httpOp *Op

func httpFetch(env *Env, req *abi.HTTPFetchRequest) (*abi.HTTPFetchResponse, error) {
	switch {
	case len(req.Body) > abi.MaxHTTPRequestBody:
		return nil, abi.Errorf(abi.CodeTooLarge, "http.fetch: the body is %d bytes; the limit is %d (abi.MaxHTTPRequestBody)", len(req.Body), abi.MaxHTTPRequestBody)
	case req.TimeoutMS < 0 || req.TimeoutMS > abi.MaxHTTPTimeoutMS:
		return nil, abi.Errorf(abi.CodeInvalidArgument, "http.fetch: timeout_ms %d is outside 1..%d (0 for the default %d)", req.TimeoutMS, abi.MaxHTTPTimeoutMS, abi.DefaultHTTPTimeoutMS)
	case req.MaxBytes < 0 || req.MaxBytes > abi.MaxHTTPResponseBytes:
		return nil, abi.Errorf(abi.CodeInvalidArgument, "http.fetch: max_bytes %d is outside 1..%d (0 for the default %d)", req.MaxBytes, abi.MaxHTTPResponseBytes, abi.DefaultHTTPResponseBytes)
	}
	out := OutboundOf(env)
	if out == nil {
		return nil, abi.Errorf(abi.CodeUnavailable, "http.fetch: this host sends no requests for its modules")
	}
	max := req.MaxBytes
	if max == 0 {
		max = abi.DefaultHTTPResponseBytes
	}
	return out.Fetch(env, req, max)
}

// Fetch sends a request a driver makes for its guest outside the op
// table's wire (Extism's http_request) exactly as http.fetch does: the
// same gate g on every hop, the same client (OutboundOf), the same
// audit. o says how the driver's messages name the request and what
// bounds its reply.
func Fetch(env *Env, g Gate, req *abi.HTTPFetchRequest, o FetchOptions) (*abi.HTTPFetchResponse, error) {
	env.gate, env.op, env.allowed, env.target, env.subject = g, httpOp, false, "", ""
	defer func() { env.gate, env.op = nil, nil }()
	switch c := OutboundOf(env).(type) {
	case nil:
		return nil, abi.Errorf(abi.CodeUnavailable, "%s: this host sends no requests for its modules", o.label(env))
	case HTTPSender:
		return c.Send(env, req, o)
	default:
		return c.Fetch(env, req, o.MaxBytes)
	}
}

// HTTPSender is an Outbound that takes FetchOptions: HTTPClient, and what
// a host wraps one in.
type HTTPSender interface {
	Outbound
	Send(env *Env, req *abi.HTTPFetchRequest, o FetchOptions) (*abi.HTTPFetchResponse, error)
}
