// Package ops is moat's op table: every op a guest can call, each a small
// function over an Env that the host fills for the current invocation. Ops
// come in families, each registered from its own file (log.go, kv.go,
// http.go, ...; or from its service's package, as host/ai and host/media
// register theirs, which host/families.go links into every host) as one
// Family value (family.go): its name, the capability its ops need, its
// configuration type, how its service is provisioned
// from that configuration and cleaned up (once per host), how its view of
// each module is attached when the module loads and detached when it
// closes, and its ops (each op's name, how its target is read from its
// request, and whether it mutates or leaves the sandbox). The table is the
// one source of truth for ops: Register declares each op to policy
// (policy.DeclareOp), which keeps no list of its own.
//
// The host knows no family: it passes host.Config.Families to Provision
// (a family given Disabled is switched off: its ops are refused), hands
// each module it loads to Views.Attach (its name, digest, organization,
// manifest and settled policy), and the ops read their family's service
// with ServiceOf and its view of the module with ViewOf. Env carries only
// what every family shares: the invocation, the module's name and
// configuration, the store and the logger. So a family, with its own
// service, settings, per-module state and capability, is one new file
// here (plus its abi types and its storage): docs/RATIONALE.md, "Why does
// an op family have a lifecycle".
//
// Every call goes through Dispatch and the host's Gate: the capability is
// checked before the request is decoded when it is granted as a whole (kv),
// and with the real target once the request is decoded when it is granted
// per target (the model of db.*, the URL of http.fetch): Typed does that
// for every op written against abi types, through Env.Allow. An op that
// returns without having been allowed is refused as a host bug, so no op
// can skip the check by forgetting it.
//
// An op sees only what Env gives it: the caller's principal, the module's
// name and configuration, the store scoped by the principal's organization,
// a logger already tagged with the invocation, and its family's service
// and view of the module. It cannot reach another organization's data
// because it is never handed a way to name one.
package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy"
)

// Env is what an op may use. The host reuses one Env per live instance and
// refills it for each invocation; an op must not keep it after returning.
type Env struct {
	Context       context.Context
	Module        string // the module's name, which scopes its storage
	Digest        string // sha256 of the module bytes, hex
	Action        string
	Principal     policy.Principal
	CorrelationID string
	Config        map[string]string
	Store         *store.Store
	Logger        *slog.Logger // the host's logger, untagged; use Log()
	// Services are the services the host's families provisioned
	// (family.go), which each family's ops read through ServiceOf.
	Services *Services
	// Views are the families' views of the module (Family.Attach, made
	// when it loaded: kv's disk quota, db's models, http's client, ...),
	// which each family's ops read through ViewOf.
	Views *Views

	tagged *slog.Logger

	// the call in flight, set by Dispatch
	gate    Gate
	op      *Op
	allowed bool   // the gate allowed the op (for targeted ops: on target)
	target  string // the target the gate allowed, for targeted ops
	subject string // what the op acted on within its target (a document id), for the audit record

	call ModelCall // the model call the op made, for the audit record
}

// Gate decides, for the host, whether the op in flight may act on target:
// the module's grants with the real target, the profile's sensitive ops,
// and the audit record of a refusal. target is "" for an op whose
// capability is granted as a whole. A refusal is an *abi.Error for the
// guest.
type Gate interface {
	AllowOp(env *Env, op *Op, target string) error
}

// Allow asks the gate whether the op in flight may act on target (the
// collection, model or URL its request names; "" when it names none). Typed
// calls it once the request is decoded; an op written against raw bytes
// must call it before it acts. Calling it again with another target checks
// that target too.
func (e *Env) Allow(target string) error {
	if e.op == nil {
		return abi.Errorf(abi.CodeInternal, "an op asked for a policy decision outside a call")
	}
	if e.allowed && (!e.op.targeted || target == e.target) {
		return nil
	}
	if err := e.gate.AllowOp(e, e.op, target); err != nil {
		return err
	}
	e.allowed, e.target = true, target
	return nil
}

// Target is the target the gate allowed for the call in flight ("" for an
// op granted as a whole), for the host's audit record.
func (e *Env) Target() string { return e.target }

// SetSubject records what the call in flight acted on within its target
// (the id of a document), for the host's audit record of a mutation.
func (e *Env) SetSubject(id string) { e.subject = id }

// Subject is what the call in flight acted on within its target ("" when
// the op did not say), for the host's audit record.
func (e *Env) Subject() string { return e.subject }

// ModelCall is the evidence of a model call (host/ai's *Evidence: its
// id, model, provider, tokens and latency, or the budget that refused
// it), which the host's audit record of the op reads.
type ModelCall interface {
	Attrs() map[string]string
}

// SetModelCall records the model call the call in flight made (ai.*, or
// knowledge's embedding), for the host's audit record of the op.
func (e *Env) SetModelCall(ev ModelCall) { e.call = ev }

// ModelCall is the model call the call in flight made, nil when it made
// none: the host audits an op that made one as that model call, whatever
// its outcome.
func (e *Env) ModelCall() ModelCall { return e.call }

// Dispatch runs op on req for the invocation env describes, with g as
// the policy gate. It is the only way the host runs an op.
func Dispatch(env *Env, g Gate, o *Op, req []byte) ([]byte, error) {
	env.gate, env.op, env.allowed, env.target, env.subject, env.call = g, o, false, "", "", nil
	defer func() { env.gate, env.op = nil, nil }()
	if !o.targeted {
		// Granted as a whole: decide before decoding anything, so a
		// module without the grant costs the host no decoding.
		if err := g.AllowOp(env, o, ""); err != nil {
			return nil, err
		}
		env.allowed = true
	}
	reply, err := o.Func(env, req)
	if err == nil && !env.allowed {
		env.Log().Error("op ran without a policy decision: a bug in its family", "op", o.Name)
		return nil, abi.Errorf(abi.CodeInternal, "op %s failed inside the host", o.Name)
	}
	return reply, err
}

// Targeted is implemented by the request type of an op whose capability is
// granted per target: OpTarget returns what the call acts on (a
// collection, model or URL). Typed passes it to Env.Allow.
type Targeted interface {
	OpTarget() string
}

// Begin refills the per-invocation fields of a reused Env.
func (e *Env) Begin(ctx context.Context, action string, p policy.Principal, correlationID string) {
	e.Context, e.Action, e.Principal, e.CorrelationID, e.tagged = ctx, action, p, correlationID, nil
}

// Log returns the host's logger tagged with the module, action, principal
// and correlation id. It is built on first use because most invocations
// never log, and tagging costs allocations.
func (e *Env) Log() *slog.Logger {
	if e.tagged == nil {
		var tags [5]slog.Attr
		e.tagged = slog.New(e.Logger.Handler().WithAttrs(e.tags(tags[:0])))
	}
	return e.tagged
}

// tags appends the attributes Log tags records with.
func (e *Env) tags(attrs []slog.Attr) []slog.Attr {
	return append(attrs,
		slog.String("module", e.Module),
		slog.String("action", e.Action),
		slog.String("user", e.Principal.User),
		slog.String("org", e.Principal.Org),
		slog.String("correlation_id", e.CorrelationID),
	)
}

// Scope is the storage scope of the invocation: the caller's organization
// and the module.
func (e *Env) Scope() store.Scope {
	return store.Scope{Org: e.Principal.Org, Module: e.Module}
}

// Func runs an op on the wire bytes of its request and returns the wire
// bytes of its reply. An *abi.Error return reaches the guest with its code.
type Func func(env *Env, req []byte) ([]byte, error)

// Op describes one entry of the table.
type Op struct {
	Name string
	// Capability is what a module's grants must hold for it to call the
	// op: a name policy knows (policy.CapabilityNames), or "" for an op any
	// module may call (log.write, config.get). When the capability is
	// granted per target, the op's request type implements Targeted.
	Capability string
	Func       Func
	// Mutates is true for ops that change stored state; LeavesSandbox for
	// ops that reach outside the host (network, AI). Policy and audit use
	// them to decide which calls to record.
	Mutates       bool
	LeavesSandbox bool
	// AuditsItself is true for an op that records its own audit events
	// (the http family: one per request it sends, with its method, host,
	// path, status and bytes): the host adds no event of its own for it.
	AuditsItself bool

	targeted bool   // the capability is granted per target
	family   string // the family that registered it (RegisterFamily)
}

// Family is the name of the family that registered the op
// (RegisterFamily); "" for an op registered alone (Register).
func (o *Op) Family() string { return o.family }

var (
	mu    sync.RWMutex
	table = map[string]*Op{}
)

// Register adds op to the table and declares it to policy. It panics on a
// duplicate or empty name or a capability policy does not know: all are
// programming errors caught when the binary starts.
func Register(op Op) {
	if op.Name == "" || op.Func == nil {
		panic("ops: Register needs a name and a func")
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := table[op.Name]; dup {
		panic(fmt.Sprintf("ops: op %q registered twice", op.Name))
	}
	if err := policy.DeclareOp(op.Name, op.Capability); err != nil {
		panic(fmt.Sprintf("ops: %v", err))
	}
	op.targeted = policy.CapabilityTarget(op.Capability) != ""
	table[op.Name] = &op
}

// Lookup finds an op by its wire name without allocating.
func Lookup(name []byte) (*Op, bool) {
	mu.RLock()
	op, ok := table[string(name)]
	mu.RUnlock()
	return op, ok
}

// Names lists the registered ops, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(table))
	for n := range table {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Typed adapts a function over decoded request and reply types to a Func,
// so each op is written against abi's types and never touches the wire.
// Once the request is decoded it asks the gate (Env.Allow) with the
// request's target when *Req implements Targeted: an op written with Typed
// cannot forget its policy check. The common requests and replies take a
// hand-written path (wire.go) that means exactly what abi.Unmarshal and
// abi.Marshal would.
func Typed[Req, Resp any](f func(env *Env, req *Req) (*Resp, error)) Func {
	return func(env *Env, b []byte) ([]byte, error) {
		var req Req
		if !decodeFast(b, &req) {
			name := ""
			if env.op != nil {
				name = env.op.Name
			}
			if err := abi.UnmarshalRequest(name, b, &req); err != nil {
				return nil, err
			}
		}
		target := ""
		if t, ok := any(&req).(Targeted); ok {
			target = t.OpTarget()
		}
		if err := env.Allow(target); err != nil {
			return nil, err
		}
		resp, err := f(env, &req)
		if err != nil {
			return nil, err
		}
		if out, ok := encodeFast(resp); ok {
			return out, nil
		}
		return abi.Marshal(resp)
	}
}

// storeError keeps an *abi.Error from the store (validation) and turns any
// other store failure into abi.CodeUnavailable without leaking paths or SQL
// to the guest; the full error goes to the host log.
func storeError(env *Env, op string, err error) error {
	var e *abi.Error
	if errors.As(err, &e) {
		return e // a wrapped one too: its code and message are for the guest
	}
	env.Log().Error("store failure", "op", op, "err", err)
	return &abi.Error{Code: abi.CodeUnavailable, Message: op + ": storage is unavailable"}
}
