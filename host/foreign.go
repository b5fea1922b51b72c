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

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/host/driver"
	"github.com/moat-sandbox/moat/host/internal/kinds"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/transport"
	"github.com/moat-sandbox/moat/policy"
)

// This file lets another package run a kind of module the host does not
// run itself, while the host keeps everything around the call: the
// manifest and profile, the principal's authorization, confirmations,
// concurrency and rate limits, the op table with its checks, and the audit
// trail. The interface is package host/driver's: host/extism registers the
// driver for Extism plug-ins there, and the host, which cannot import it
// (host/extism imports host), finds it by the module's kind.

// The kinds the host's loaders run are claimed once, at init, in the
// registry drivers claim theirs in (host/internal/kinds): a driver that
// registers one of them panics, and no list of kinds is written twice.
func init() {
	for _, l := range loaders {
		for _, k := range l.kinds {
			kinds.Claim(string(k), "the host's "+string(l.kinds[0])+" loader")
			ownManifestKinds = append(ownManifestKinds, manifestKind(k))
		}
	}
}

// ownManifestKinds are the manifest's names of the kinds the host runs
// itself (moat, wasi-command, native): any other a manifest names is a
// driver's.
var ownManifestKinds []policy.Kind

// driverKind is the kind of a module that a registered driver runs: the
// one its manifest names, else the one whose driver recognizes its
// imports; "" when the host runs it itself.
func driverKind(info Info, mf *policy.Manifest) Kind {
	if mf != nil && mf.Kind != "" && !slices.Contains(ownManifestKinds, mf.Kind) {
		return Kind(mf.Kind) // a driver's, linked or not: its load says which
	}
	return Kind(driver.Recognize(info.Imports))
}

// startDriver hands the module to its driver, and lists the functions
// the driver offers as the module's actions.
func (m *Module) startDriver(ctx context.Context, kind Kind, wasm []byte) (moduleRuntime, []string, error) {
	d, ok := driver.Lookup(string(kind))
	if !ok {
		return nil, nil, &Error{Module: m.name, Code: abi.CodeBadModule,
			Reason: fmt.Sprintf("the module is an %s plug-in, and no driver for %s modules is linked into this program (import github.com/moat-sandbox/moat/host/%s)", kind, kind, kind)}
	}
	r, err := d.Load(ctx, driver.Spec{
		Name: m.name, Digest: m.digest, Wasm: wasm, Imports: m.info.Imports, Exports: m.info.Exports, MemoryMin: m.info.MemoryMin,
		Config: m.config, Limits: m.limits, Fresh: m.code.isolation == IsolationFresh, MaxIdle: m.code.maxIdle,
		Cache: m.host.cache, Logger: m.host.log, Deadline: rewriteForDriver, Yield: yieldContext, Nanosleep: nanosleep,
	})
	if err != nil {
		return nil, nil, asError(err, m.name, "", abi.CodeBadModule)
	}
	actions := r.Functions()
	if len(actions) == 0 {
		_ = r.Close(ctx)
		return nil, nil, &Error{Module: m.name, Code: abi.CodeBadModule, Reason: "the plug-in exports no function that can be called as an action"}
	}
	return &driverRuntime{m: m, runner: r}, actions, nil
}

// callGate is the host's side of a driver's call (driver.Gate): the
// invocation's op gate, its HTTP client and its logger.
type callGate struct {
	invocation
}

var _ driver.Gate = (*callGate)(nil)

// Dispatch implements driver.Gate: the op admitted as on every transport
// (a request over abi.MaxRequestBytes is refused with too_large, and once
// the invocation's audit budget is used up every op is refused with
// resource_exhausted before it runs), then run through the op table.
func (g *callGate) Dispatch(ctx context.Context, op, req []byte) ([]byte, error) {
	if err := transport.Admit(ctx, op, req); err != nil {
		return nil, err
	}
	g.env.Context = ctx
	return g.invocation.Dispatch(ctx, op, req)
}

// Fetch implements driver.Gate: the request sent as the http.fetch op
// sends it, its name charged to the budget as an op's is.
func (g *callGate) Fetch(ctx context.Context, req *abi.HTTPFetchRequest, o driver.HTTPOptions) (*abi.HTTPFetchResponse, error) {
	if err := budget.From(ctx).Admit([]byte(abi.OpHTTPFetch)); err != nil {
		return nil, err
	}
	g.env.Context = ctx
	return ops.Fetch(&g.env, &g.invocation, req, ops.FetchOptions{Label: o.Label, MaxBytes: o.MaxBytes, TooLarge: o.TooLarge, Budget: true})
}

// Log implements driver.Gate.
func (g *callGate) Log() *slog.Logger { return g.env.Log() }

// asError is a driver's or a runner's failure as the host reports it,
// naming the module (and the action, when there is one): a *driver.Error
// keeps its code and reason, the host's own *Error is as it is, and any
// other error is otherwise (internal for a call), whatever code it
// carries: a code is the driver's decision, said with a *driver.Error.
func asError(err error, module, action string, otherwise abi.Code) *Error {
	var e *Error
	if errors.As(err, &e) {
		// the host's own (a runner of the host's, say: native plugins)
	} else if de := (*driver.Error)(nil); errors.As(err, &de) {
		e = &Error{Code: de.Code, Reason: de.Reason, Err: de.Err}
	} else {
		e = &Error{Code: otherwise, Reason: err.Error(), Err: err}
	}
	if e.Module == "" {
		e.Module = module
	}
	if e.Action == "" {
		e.Action = action
	}
	return e
}

// callRunner runs one invocation on a Runner: a foreign module's driver,
// a native plugin's workers.
func (m *Module) callRunner(ctx context.Context, runner driver.Runner, req *Request, idx uint32, lim Limits, confirmed bool) ([]byte, string, error) {
	g := &callGate{invocation{m: m, env: m.newEnv(), confirmed: confirmed}}
	c := &driver.Call{
		Action: req.Action, Function: m.acts.names[idx], Input: req.Input, Principal: req.Principal,
		CorrelationID: req.CorrelationID, Limits: lim, Gate: g,
	}
	g.env.Begin(ctx, req.Action, req.Principal, req.CorrelationID)
	out, err := runner.Call(ctx, c)
	if err != nil {
		return nil, g.needsConfirm, asError(err, m.name, req.Action, abi.CodeInternal)
	}
	if len(out) > lim.MaxOutputBytes {
		return nil, g.needsConfirm, &Error{Module: m.name, Action: req.Action, Code: abi.CodeOutputTooLarge,
			Reason: fmt.Sprintf("output is %d bytes; the limit is %d", len(out), lim.MaxOutputBytes)}
	}
	return out, g.needsConfirm, nil
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
