package ops

import (
	"net"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/policy"
)

// The http family: http.fetch, one outbound request sent by the host for
// the guest. The op checks what the guest may choose (the body, the time
// and size bounds) and hands the request to Env.Outbound, the one client
// every outbound path shares (outbound.go: HTTPClient): Extism's
// http_request reaches it through Fetch, media.fetch through
// Env.Outbound. So the grants, the address check, the injected headers,
// the scrubbing and the audit are the same code whichever way a request
// leaves.

func init() {
	RegisterFamily(Family{
		Name: "http", Capability: policy.CapabilitySpec{Name: "http"},
		Config: func() any { return &HTTPConfig{} },
		Provision: func(ctx *ProvisionContext, cfg any) (any, error) {
			secrets, err := secretsService(ctx)
			return &httpService{resolver: cfg.(*HTTPConfig).Resolver, secrets: secrets}, err
		},
		Ops: []Op{{Name: abi.OpHTTPFetch, LeavesSandbox: true, AuditsItself: true, Func: Typed(httpFetch)}},
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

// HTTPResolver is the resolver the http family was configured with in s
// (nil: the system's), for the host that makes each module's HTTPClient.
func HTTPResolver(s *Services) *net.Resolver {
	if h, ok := s.Service("http").(*httpService); ok {
		return h.resolver
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
	case env.Outbound == nil:
		return nil, abi.Errorf(abi.CodeUnavailable, "http.fetch: this host sends no requests for its modules")
	}
	max := req.MaxBytes
	if max == 0 {
		max = abi.DefaultHTTPResponseBytes
	}
	return env.Outbound.Fetch(env, req, max)
}

// Fetch sends a request a driver makes for its guest outside the op
// table's wire (Extism's http_request) exactly as http.fetch does: the
// same gate g on every hop, the same client (env.Outbound), the same
// audit. o says how the driver's messages name the request and what
// bounds its reply.
func Fetch(env *Env, g Gate, req *abi.HTTPFetchRequest, o FetchOptions) (*abi.HTTPFetchResponse, error) {
	env.gate, env.op, env.allowed, env.target, env.subject = g, httpOp, false, "", ""
	defer func() { env.gate, env.op = nil, nil }()
	switch c := env.Outbound.(type) {
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
