package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/transport"
	"github.com/moat-sandbox/moat/policy"
	"github.com/tetratelabs/wazero"
)

// This file lets another package run a kind of module the host does not
// run itself, while the host keeps everything around the call: the
// manifest and profile, the principal's authorization, confirmations,
// concurrency and rate limits, the op table with its checks, and the audit
// trail. host/extism registers the driver for Extism plug-ins; the host
// cannot import it (host/extism imports host), so drivers register
// themselves, as database/sql drivers do.

// Driver loads modules of one foreign kind.
type Driver interface {
	// Load prepares a module to be called: compile it, check its imports,
	// list its functions. It runs once per Host.Load, after the signature
	// and, for declared modules, the policy were checked.
	Load(ctx context.Context, spec DriverSpec) (Runner, error)
}

// DriverSpec is what a driver gets for one module.
type DriverSpec struct {
	Name      string
	Digest    string
	Wasm      []byte
	Info      Info              // imports and exports, as the host read them
	Config    map[string]string // the manifest's config, then LoadOptions.Config
	Limits    Limits            // the module's limits (a call may lower them)
	Isolation Isolation
	MaxIdle   int
	// Cache is the host's compilation cache, so a driver's runtime shares
	// machine code on disk with the host's.
	Cache  wazero.CompilationCache
	Logger *slog.Logger
	// Deadline rewrites a module (Wasm, or Wasm as the driver changed it)
	// as the host rewrites the modules it runs itself: every loop header,
	// every entry of a function that calls and every bulk operation
	// counts toward a call of InterruptModule.InterruptYield, which the
	// module then imports and the driver must provide with Yield. A
	// runtime's CloseOnContextDone checks only at loop headers: a tree of
	// calls with no loop (2^60 calls at a depth of 61) ran past every
	// deadline. The start section stays where it is: a driver
	// instantiates under the call's context, and a start function's
	// checks read it.
	Deadline func(wasm []byte) ([]byte, error)
	// Yield implements InterruptModule.InterruptYield: it ends the guest
	// (a panic wazero turns into the call's error) once ctx is done or
	// past its deadline, and otherwise puts the next fuel in stack[0].
	Yield func(ctx context.Context, stack []uint64)
}

// Runner is a loaded foreign module. It must be safe for concurrent use.
type Runner interface {
	// Functions lists what the module offers as actions, in a stable order.
	Functions() []string
	// Call runs call.Function. It returns the output, or an *Error whose
	// Code says what went wrong (timeout, memory_limit, guest_error, ...).
	// Ops the guest calls go through call.Dispatch; its network requests
	// through call.Fetch.
	Call(ctx context.Context, call *Call) ([]byte, error)
	// Close releases the module's instances and compiled code.
	Close(ctx context.Context) error
}

var (
	driversMu sync.RWMutex
	drivers   = map[Kind]Driver{}
)

// RegisterDriver makes d run modules of kind. It panics if kind already has
// a driver or is one the host runs itself: both are programming errors.
func RegisterDriver(kind Kind, d Driver) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if kind == KindPlugin || kind == KindCommand || kind == KindScript || kind == KindNative || d == nil {
		panic(fmt.Sprintf("host: RegisterDriver(%q): the host runs that kind itself, or the driver is nil", kind))
	}
	if _, dup := drivers[kind]; dup {
		panic(fmt.Sprintf("host: RegisterDriver(%q) called twice", kind))
	}
	drivers[kind] = d
}

func driverFor(kind Kind) (Driver, bool) {
	driversMu.RLock()
	defer driversMu.RUnlock()
	d, ok := drivers[kind]
	return d, ok
}

// extismImport is the module every Extism PDK imports: the Extism kernel.
const extismImport = "extism:host/env"

func importsExtism(info Info) bool {
	return slices.ContainsFunc(info.Imports, func(s Signature) bool { return s.Module == extismImport })
}

// startDriver hands the module to its driver, and lists the functions
// the driver offers as the module's actions.
func (m *Module) startDriver(ctx context.Context, kind Kind, wasm []byte) (moduleRuntime, []string, error) {
	d, ok := driverFor(kind)
	if !ok {
		return nil, nil, &Error{Module: m.name, Code: abi.CodeBadModule,
			Reason: fmt.Sprintf("the module is an %s plug-in, and no driver for %s modules is linked into this program (import github.com/moat-sandbox/moat/host/%s)", kind, kind, kind)}
	}
	r, err := d.Load(ctx, DriverSpec{
		Name: m.name, Digest: m.digest, Wasm: wasm, Info: m.info, Config: m.config, Limits: m.limits,
		Isolation: m.code.isolation, MaxIdle: m.code.maxIdle, Cache: m.host.cache, Logger: m.host.log,
		Deadline: rewriteForDriver, Yield: yieldContext,
	})
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return nil, nil, err
		}
		return nil, nil, &Error{Module: m.name, Code: abi.CodeBadModule, Reason: err.Error(), Err: err}
	}
	actions := r.Functions()
	if len(actions) == 0 {
		_ = r.Close(ctx)
		return nil, nil, &Error{Module: m.name, Code: abi.CodeBadModule, Reason: "the plug-in exports no function that can be called as an action"}
	}
	return &driverRuntime{m: m, runner: r}, actions, nil
}

// Call is one invocation of a foreign module, as its driver sees it.
type Call struct {
	Action        string // the action as the caller named it
	Function      string // the module's function that runs it
	Input         []byte
	Principal     policy.Principal
	CorrelationID string
	Limits        Limits // the limits of this call, already resolved

	invocation // the op gate
}

// Dispatch runs one op of the op table for the guest, exactly as the moat
// import does: the module's effective grants, the profile's sensitive
// ops, the caller's principal and organization, and the audit trail. An
// *abi.Error return is for the guest; the invocation goes on.
//
// As on every transport, a request over abi.MaxRequestBytes is refused with
// too_large, and once the invocation's audit budget is used up every op is
// refused with resource_exhausted before it runs.
func (c *Call) Dispatch(ctx context.Context, op, req []byte) ([]byte, error) {
	if err := transport.Admit(ctx, op, req); err != nil {
		return nil, err
	}
	c.env.Context = ctx
	return c.invocation.Dispatch(ctx, op, req)
}

// HTTPOptions say how a driver's own request (Extism's http_request) is
// named in messages and what bounds its reply; see Call.Fetch.
type HTTPOptions struct {
	// Label names the request in messages ("http_request").
	Label string
	// MaxBytes bounds the response body.
	MaxBytes int64
	// TooLarge is the refusal of a body of n bytes or more past MaxBytes
	// (nil: one naming MaxBytes).
	TooLarge func(n int64) error
}

// Fetch sends the guest's request exactly as the http.fetch op does: the
// module's one HTTP client, each hop checked against its effective http
// targets (path prefixes included) and the profile's sensitive ops, each
// connection's address checked when dialled, the headers the grants
// inject added and scrubbed from the reply, every hop and refusal in the
// audit trail (op http.fetch), and the body charged to the invocation's
// held bytes while it is read. A refusal is an *abi.Error for the guest;
// once the invocation's deadline passed, ctx.Err() is set too.
func (c *Call) Fetch(ctx context.Context, req *abi.HTTPFetchRequest, o HTTPOptions) (*abi.HTTPFetchResponse, error) {
	if err := budget.From(ctx).Admit([]byte(abi.OpHTTPFetch)); err != nil {
		return nil, err
	}
	c.env.Context = ctx
	return ops.Fetch(&c.env, &c.invocation, req, ops.FetchOptions{Label: o.Label, MaxBytes: o.MaxBytes, TooLarge: o.TooLarge, Budget: true})
}

// Log is the host's logger tagged with the invocation: module, action,
// principal and correlation id.
func (c *Call) Log() *slog.Logger { return c.env.Log() }

// callRunner runs one invocation on a Runner: a foreign module's driver,
// a native plugin's workers.
func (m *Module) callRunner(ctx context.Context, runner Runner, req *Request, idx uint32, lim Limits, confirmed bool) ([]byte, string, error) {
	c := &Call{
		Action: req.Action, Function: m.acts.names[idx], Input: req.Input, Principal: req.Principal,
		CorrelationID: req.CorrelationID, Limits: lim, invocation: invocation{m: m, env: m.newEnv(), confirmed: confirmed},
	}
	c.env.Begin(ctx, req.Action, req.Principal, req.CorrelationID)
	out, err := runner.Call(ctx, c)
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			e = &Error{Code: abi.CodeInternal, Reason: err.Error(), Err: err}
		}
		if e.Module == "" {
			e.Module = m.name
		}
		if e.Action == "" {
			e.Action = req.Action
		}
		return nil, c.needsConfirm, e
	}
	if len(out) > lim.MaxOutputBytes {
		return nil, c.needsConfirm, &Error{Module: m.name, Action: req.Action, Code: abi.CodeOutputTooLarge,
			Reason: fmt.Sprintf("output is %d bytes; the limit is %d", len(out), lim.MaxOutputBytes)}
	}
	return out, c.needsConfirm, nil
}

// targetOf is the scheme://host:port of a URL, for messages and audit: the
// path and query stay out, since they may carry secrets.
func targetOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(not a URL)"
	}
	if u.Host == "" {
		return strings.ToLower(u.Scheme) + "://"
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}
