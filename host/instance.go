package host

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/ai"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/transport"
	"github.com/moat-sandbox/moat/internal/tracing"
	"github.com/moat-sandbox/moat/policy"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"
	"go.opentelemetry.io/otel/trace"
)

// instance is one live instantiation of a module with everything an
// invocation needs preallocated: the cached export functions (looking them
// up per call costs microseconds), the call stack, the transport session,
// the ops environment and the output streams.
type instance struct {
	invocation // the invocation it serves; the op gate
	mod        api.Module
	alloc      api.Function
	invoke     api.Function
	mem        *limitedMemory
	sess       transport.Session
	stdout     guestStream
	stderr     guestStream
	stack      [3]uint64
	files      *fileGrants // the module's directories, referenced while the instance lives
	res        *resident   // a resident script's goroutine (resident.go), or nil
}

// newInstance instantiates the module. Instantiation (and _initialize, for
// reactors) runs under the invocation's timeout and memory limit: a guest
// that loops or balloons in its initializer is stopped like any other.
func (m *Module) newInstance(ctx context.Context, lim Limits) (*instance, error) {
	h := m.host
	inst := &instance{invocation: invocation{m: m, env: m.newEnv()}}
	inst.stdout = guestStream{name: "stdout", level: slog.LevelInfo}
	inst.stderr = guestStream{name: "stderr", level: slog.LevelWarn}

	if err := m.checkInitialMemory(lim); err != nil {
		return nil, err
	}
	ictx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	alloc := newLimitedMemory(lim)
	ictx = experimental.WithMemoryAllocator(ictx, alloc)
	inst.sess.Begin(nil) // moat.call during _initialize is a fault
	// The instance's sleeps (poll_oneoff) end with the context of the
	// invocation it serves: instantiation's now, each call's later (the
	// call sets env.Context, see sleep.go).
	inst.env.Context = ictx
	defer func() { inst.env.Context = context.Background() }()
	mc := wazero.NewModuleConfig().
		WithName("").
		WithStdout(&inst.stdout).
		WithStderr(&inst.stderr).
		WithSysWalltime().WithSysNanotime().
		WithNanosleep(nanosleep(func() context.Context { return inst.env.Context })).
		WithRandSource(rand.Reader).
		WithStartFunctions() // run below, under ictx (interrupt.go)
	if m.files != nil {
		// The granted directories, each a preopen at its own path
		// (files.go); held until the instance closes.
		if !m.files.acquire() {
			return nil, &Error{Module: m.name, Code: abi.CodeUnavailable, Reason: "the module was closed"}
		}
		inst.files = m.files
		mc = mc.WithFSConfig(m.mountFileGrants(wazero.NewFSConfig(), &inst.invocation))
	}
	inst.stderr.begin(ictx, inst.env.Log)
	actx := inst.sess.Attach(ictx)
	mod, err := h.runtime.InstantiateModule(actx, m.code.cm, mc)
	if err == nil {
		var starts []string
		if m.code.hasInit {
			starts = append(starts, abi.ExportInitWASI)
		}
		if err = startModule(actx, mod, starts...); err != nil {
			_ = mod.Close(context.Background())
		}
	}
	inst.stderr.end()
	inst.sess.End()
	inst.mem = alloc
	if err != nil {
		inst.files.release()
		e := &Error{Module: m.name, Err: err}
		switch {
		case inst.mem.Hit():
			e.Code, e.Reason = abi.CodeMemoryLimit, fmt.Sprintf("instantiation needs more memory than the limit of %d pages (%d MiB)", lim.MemoryLimitPages, lim.MemoryLimitPages/16)
		case isDeadline(err, ictx):
			e.Code, e.Reason = abi.CodeTimeout, fmt.Sprintf("instantiation (the start function and %s) did not finish within %s", abi.ExportInitWASI, lim.Timeout)
		default:
			e.Code, e.Reason = abi.CodeTrap, "instantiation failed: "+firstLine(err)+inst.stderrNote()
		}
		return nil, e
	}
	inst.mod = mod
	if inst.mem.Hit() {
		inst.close()
		return nil, &Error{Module: m.name, Code: abi.CodeMemoryLimit,
			Reason: fmt.Sprintf("the module's initial memory exceeds the limit of %d pages (%d MiB)", lim.MemoryLimitPages, lim.MemoryLimitPages/16)}
	}
	inst.alloc = mod.ExportedFunction(abi.ExportAlloc)
	inst.invoke = mod.ExportedFunction(abi.ExportInvoke)
	return inst, nil
}

// checkInitialMemory refuses, before anything is allocated, a module
// whose declared initial memory is over lim: wazero allocates a memory's
// minimum whole at instantiation (and cannot take a refusal then), so a
// module declaring 65536 pages would cost the host 4 GiB of address space
// on the way to its memory_limit error.
func (m *Module) checkInitialMemory(lim Limits) error {
	if m.code.memMin <= lim.MemoryLimitPages {
		return nil
	}
	return &Error{Module: m.name, Code: abi.CodeMemoryLimit,
		Reason: fmt.Sprintf("the module declares an initial memory of %d pages (%d MiB), over the limit of %d pages (%d MiB)",
			m.code.memMin, m.code.memMin/16, lim.MemoryLimitPages, lim.MemoryLimitPages/16)}
}

// oversized reports whether the instance's memory is larger than lim
// allows: a pooled instance grown under a call with a higher limit must not
// serve a call with a lower one (nor sit in the pool holding the memory).
func (inst *instance) oversized(lim Limits) bool {
	return inst.mem != nil && inst.mem.Size() > uint64(lim.MemoryLimitPages)*65536
}

func (inst *instance) close() {
	if inst.res != nil && inst.mod != nil {
		// Its moat.next answers stop, or its next interrupt check ends
		// it; a goroutine still running takes the module and files over.
		inst.kill()
	}
	if inst.mod != nil {
		_ = inst.mod.Close(context.Background())
	}
	inst.files.release()
	inst.files = nil
}

func (inst *instance) stderrNote() string {
	if t := inst.stderr.summary(); t != "" {
		return "; guest stderr: " + t
	}
	return ""
}

// invocation is what the op gate knows of one invocation, whatever runs
// it: the module, the ops environment, and the confirmation state. Every
// transport reaches the op table through its Dispatch: the moat import
// and the device file of a WASM instance, Extism's moat_call (Call) and a
// native worker's pipe (Call too). There is no second path.
type invocation struct {
	m            *Module
	env          ops.Env
	confirmed    bool   // the invocation was confirmed: sensitive ops may run
	needsConfirm string // the first sensitive op refused for want of a confirmation
	// epoch counts the invocations an instance served: a descriptor into
	// a granted directory kept from an earlier one is audited again when
	// written (grantfs.Auditor.Epoch).
	epoch uint64
	// fsErrno is an errno a granted directory's operation failed with
	// that WASI's functions would give the guest as EIO (ENOSPC, EDQUOT,
	// EFBIG), for the WASI wrapper of the call in flight (wasierrno.go).
	fsErrno syscall.Errno
	// endedOp is the reason of the op the invocation's end interrupted
	// (an op that failed with timeout once the deadline passed, such as
	// a wait for media memory): what the call waited for is a better
	// reason for its timeout than the deadline alone, whether the guest
	// returned the op's error or was stopped at its next check.
	endedOp string
}

// newEnv is the ops environment of one of m's invocations, before Begin.
func (m *Module) newEnv() ops.Env {
	return ops.Env{Module: m.name, Digest: m.digest, Config: m.config, Store: m.host.store, Logger: m.host.log,
		Services: m.host.services, Views: &m.views}
}

// Dispatch implements transport.Dispatcher: it runs one op for the
// invocation, through the gate (AllowOp) with the op's real target.
// Refusals go back to the guest as an abi.Error with code denied (or
// confirmation_required) and into the audit trail. Ops that mutate storage
// or leave the sandbox are audited with a mutation id. A panicking op is a
// host bug: it becomes an internal error for the guest and a log record
// with the stack, not a crashed host.
func (inv *invocation) Dispatch(ctx context.Context, op, req []byte) (reply []byte, err error) {
	// An op after the deadline ends the guest (sleep.go): a guest calling
	// ops in a tight loop, or writing a thousand requests to the device
	// file in one write, must not run its ops past its deadline.
	abortIfDone(ctx)
	o, ok := ops.Lookup(op)
	if !ok {
		return nil, abi.Errorf(abi.CodeUnknownOp, "no op %q in this host (ABI v%d)", op, abi.Version)
	}
	env := &inv.env
	if observe := inv.m.host.cfg.ObserveOp; observe != nil {
		start := time.Now()
		defer func() { observe(inv.observation(o, start, len(req), len(reply), err)) }()
	}
	if tracing.On() {
		// A closure, not traceOp(...)(&err): taking err's address would
		// move it to the heap on every op, traces on or off.
		parent, span := inv.startOp(ctx, o)
		defer func() { inv.endOp(o, parent, span, err) }()
	}
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(*transport.FaultError); ok {
				panic(f)
			}
			env.Log().Error("op panicked", "op", o.Name, "panic", r, "stack", string(debug.Stack()))
			reply, err = nil, abi.Errorf(abi.CodeInternal, "op %s failed inside the host", o.Name)
		}
	}()
	reply, err = ops.Dispatch(env, inv, o, req)
	var ae *abi.Error
	if err != nil && ctx.Err() == context.DeadlineExceeded && errors.As(err, &ae) && ae.Code == abi.CodeTimeout {
		inv.endedOp = o.Name + ": " + ae.Message
	}
	if mc, ok := env.ModelCall().(*ai.Evidence); ok && mc != nil {
		inv.m.auditModelCall(ctx, env, o, mc, err)
	} else if err == nil && (o.Mutates || o.LeavesSandbox) && !o.AuditsItself {
		inv.m.auditOp(ctx, env, o.Name, audit.Allow, "grant", "", audit.NewID(), env.Target())
	}
	return reply, err
}

// startOp opens the op's span (tracing on only) under the invocation's,
// and makes it the context of the op's own work (env.Context: an
// outbound request, a model call) until endOp ends it with the op's
// outcome and puts parent back. The span carries the op's name and
// family, the target as the audit trail writes it (a URL as
// scheme://host:port) and the outcome's abi code: never the op's request
// or reply.
func (inv *invocation) startOp(ctx context.Context, o *ops.Op) (parent context.Context, span trace.Span) {
	env := &inv.env
	parent = env.Context
	if parent == nil {
		parent = ctx
	}
	sctx, span := tracing.Start(parent, "moat.op "+o.Name, trace.SpanKindInternal,
		tracing.KeyOp.String(o.Name), tracing.KeyFamily.String(o.Family()), tracing.KeyModule.String(inv.m.name))
	env.Context = sctx
	return parent, span
}

func (inv *invocation) endOp(o *ops.Op, parent context.Context, span trace.Span, err error) {
	env := &inv.env
	env.Context = parent
	if t := env.Target(); t != "" {
		span.SetAttributes(tracing.KeyTarget.String(auditTarget(o, t)))
	}
	tracing.End(span, codeOf(err), err)
}

// codeOf is err's abi code as a span's moat.code: "ok" for nil.
func codeOf(err error) string {
	if err == nil {
		return "ok"
	}
	var he *Error
	if errors.As(err, &he) && he.Code != "" {
		return string(he.Code)
	}
	if c := abi.CodeOf(err); c != "" {
		return string(c)
	}
	return string(abi.CodeInternal)
}

// auditModelCall records an op that made a model call (ai.*, or
// knowledge's embedding) as that call, whatever came of it: its model
// call id beside the invocation's correlation id (and the mutation id of
// an op that also changed storage), the model, provider, tokens and
// latency; a call a budget refused is a deny naming the budget, and one
// that failed carries the failure's code.
func (m *Module) auditModelCall(ctx context.Context, e *ops.Env, o *ops.Op, mc *ai.Evidence, err error) {
	ev := audit.Event{Kind: audit.KindOp, Decision: audit.Allow, CorrelationID: e.CorrelationID, Module: e.Module,
		Action: e.Action, Op: o.Name, User: e.Principal.User, Org: e.Principal.Org, Rule: "grant",
		ModelCallID: mc.ModelCallID, DurationNS: int64(mc.Latency), Attrs: mc.Attrs()}
	if t := e.Target(); t != "" {
		ev.Attrs["target"] = t
	}
	var ae *abi.Error
	switch {
	case mc.Budget != nil:
		ev.Decision, ev.Rule, ev.Code, ev.Reason = audit.Deny, mc.Budget.Rule(), string(abi.CodeDenied), mc.Budget.Error()
	case errors.As(err, &ae):
		ev.Code, ev.Reason = string(ae.Code), ae.Message
	case err != nil:
		ev.Code, ev.Reason = string(abi.CodeInternal), err.Error()
	case o.Mutates:
		ev.MutationID = audit.NewID()
		if id := e.Subject(); id != "" {
			ev.Attrs["id"] = id
		}
	}
	m.host.audit.Record(ctx, ev)
}

// observation is what Config.ObserveOp is told of one op.
func (inv *invocation) observation(o *ops.Op, start time.Time, reqBytes, replyBytes int, err error) ops.Observation {
	ob := ops.Observation{Org: inv.env.Principal.Org, Module: inv.m.name, Op: o.Name, Family: o.Family(), Code: "ok",
		Duration: time.Since(start), RequestBytes: reqBytes, ReplyBytes: replyBytes}
	if err != nil {
		ob.Code = string(abi.CodeOf(err))
		if ob.Code == "" {
			ob.Code = string(abi.CodeInternal)
		}
	}
	if mc, ok := inv.env.ModelCall().(*ai.Evidence); ok && mc != nil {
		ob.InputTokens, ob.OutputTokens = mc.Usage.InputTokens, mc.Usage.OutputTokens
	}
	return ob
}

// AllowOp implements ops.Gate: a family the embedder disabled
// (ops.Disabled), the module's effective grants with the real target,
// then the profile's sensitive ops. Every refusal is audited.
func (inv *invocation) AllowOp(env *ops.Env, o *ops.Op, target string) error {
	m := inv.m
	mp := m.policy
	ctx := env.Context
	if err := env.Services.Refuse(o); err != nil {
		m.auditOp(ctx, env, o.Name, audit.Deny, "host: family disabled", err.Error(), "", auditTarget(o, target))
		return abi.AsError(err)
	}
	if err := mp.eval.CheckOp(o.Name, target); err != nil {
		shown := auditTarget(o, target)
		what := o.Name
		if shown != "" {
			what += " " + shown
		}
		msg := err.Error()
		var de *policy.DeniedError
		if errors.As(err, &de) {
			msg = fmt.Sprintf("op %s: %s (rule: %s)", what, de.Reason, de.Rule)
		}
		m.auditOp(ctx, env, o.Name, audit.Deny, ruleOf(err), msg, "", shown)
		return &abi.Error{Code: abi.CodeDenied, Message: msg}
	}
	if !inv.confirmed && mp.profile.IsSensitive(o.Name) {
		if inv.needsConfirm == "" {
			inv.needsConfirm = o.Name
		}
		reason := o.Name + " is a sensitive op: the invocation must be confirmed first"
		m.auditOp(ctx, env, o.Name, audit.Deny, "profile "+mp.profile.Name+": sensitive_ops", reason, "", auditTarget(o, target))
		return &abi.Error{Code: abi.CodeConfirmationRequired, Message: reason}
	}
	return nil
}

// auditTarget is how a target is written into the audit trail: a URL only
// as scheme://host:port (its path and query may carry secrets), others as
// they are.
func auditTarget(o *ops.Op, target string) string {
	if target != "" && policy.CapabilityTarget(o.Capability) == "url" {
		return targetOf(target)
	}
	return target
}

func (m *Module) auditOp(ctx context.Context, e *ops.Env, op, decision, rule, reason, mutation, target string) {
	ev := audit.Event{Kind: audit.KindOp, Decision: decision, CorrelationID: e.CorrelationID, Module: e.Module,
		Action: e.Action, Op: op, User: e.Principal.User, Org: e.Principal.Org, Rule: rule, Reason: reason, MutationID: mutation}
	if target != "" {
		ev.Attrs = map[string]string{"target": target}
	}
	if id := e.Subject(); id != "" && decision == audit.Allow {
		if ev.Attrs == nil {
			ev.Attrs = map[string]string{}
		}
		ev.Attrs["id"] = id // the document a db write changed
	}
	m.host.audit.Record(ctx, ev)
}

func ruleOf(err error) string {
	var de *policy.DeniedError
	if errors.As(err, &de) {
		return de.Rule
	}
	return ""
}

func isDeadline(err error, ctx context.Context) bool {
	if ee, ok := err.(*sys.ExitError); ok && ee.ExitCode() == sys.ExitCodeDeadlineExceeded {
		return true
	}
	return ctx.Err() == context.DeadlineExceeded
}
