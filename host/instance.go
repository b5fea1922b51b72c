package host

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/transport"
	"github.com/moat-sandbox/moat/policy"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"
)

// instance is one live instantiation of a module with everything an
// invocation needs preallocated: the cached export functions (looking them
// up per call costs microseconds), the call stack, the transport session,
// the ops environment and the output streams.
type instance struct {
	m      *Module
	mod    api.Module
	alloc  api.Function
	invoke api.Function
	mem    *limitedMemory
	sess   transport.Session
	env    ops.Env
	stdout guestStream
	stderr guestStream
	stack  [3]uint64

	confirmed    bool   // the invocation was confirmed: sensitive ops may run
	needsConfirm string // the sensitive op refused for want of a confirmation
}

// newInstance instantiates the module. Instantiation (and _initialize, for
// reactors) runs under the invocation's timeout and memory limit: a guest
// that loops or balloons in its initializer is stopped like any other.
func (m *Module) newInstance(ctx context.Context, lim Limits) (*instance, error) {
	h := m.host
	inst := &instance{m: m}
	inst.env = ops.Env{Module: m.name, Digest: m.digest, Config: m.config, Store: h.store, Logger: h.log} // DiskQuota: set per call
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
		WithNanosleep(Nanosleep(func() context.Context { return inst.env.Context })).
		WithRandSource(rand.Reader).
		WithStartFunctions()
	if m.hasInit {
		mc = mc.WithStartFunctions(abi.ExportInitWASI)
	}
	inst.stderr.begin(ictx, inst.env.Log)
	mod, err := h.runtime.InstantiateModule(inst.sess.Attach(ictx), m.cm, mc)
	inst.stderr.end()
	inst.sess.End()
	inst.mem = alloc
	if err != nil {
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
	if m.memMin <= lim.MemoryLimitPages {
		return nil
	}
	return &Error{Module: m.name, Code: abi.CodeMemoryLimit,
		Reason: fmt.Sprintf("the module declares an initial memory of %d pages (%d MiB), over the limit of %d pages (%d MiB)",
			m.memMin, m.memMin/16, lim.MemoryLimitPages, lim.MemoryLimitPages/16)}
}

// oversized reports whether the instance's memory is larger than lim
// allows: a pooled instance grown under a call with a higher limit must not
// serve a call with a lower one (nor sit in the pool holding the memory).
func (inst *instance) oversized(lim Limits) bool {
	return inst.mem != nil && inst.mem.Size() > uint64(lim.MemoryLimitPages)*65536
}

func (inst *instance) close() {
	if inst.mod != nil {
		_ = inst.mod.Close(context.Background())
	}
}

func (inst *instance) stderrNote() string {
	if t := inst.stderr.summary(); t != "" {
		return "; guest stderr: " + t
	}
	return ""
}

// Dispatch implements transport.Dispatcher: it runs one op for the current
// invocation after checking it against the module's effective grants and
// the profile's sensitive ops. Refusals go back to the guest as an
// abi.Error with code denied (or confirmation_required) and into the
// audit trail. Ops that mutate storage or leave the sandbox are audited
// with a mutation id. A panicking op is a host bug: it becomes an internal
// error for the guest and a log record with the stack, not a crashed host.
func (inst *instance) Dispatch(ctx context.Context, op, req []byte) (reply []byte, err error) {
	return inst.m.dispatch(ctx, &inst.env, inst.confirmed, &inst.needsConfirm, op, req)
}

// dispatch is Dispatch for any transport of the module: env is the
// invocation's environment, confirmed whether the invocation was
// confirmed, and needsConfirm receives the first sensitive op refused for
// want of a confirmation. Foreign modules (host/extism) come through here
// too, by Call.Dispatch, so every op meets the same checks and audit.
func (m *Module) dispatch(ctx context.Context, env *ops.Env, confirmed bool, needsConfirm *string, op, req []byte) (reply []byte, err error) {
	// An op after the deadline ends the guest (sleep.go): a guest calling
	// ops in a tight loop, or writing a thousand requests to the device
	// file in one write, must not run its ops past its deadline.
	abortIfDone(ctx)
	o, ok := ops.Lookup(op)
	if !ok {
		return nil, abi.Errorf(abi.CodeUnknownOp, "no op %q in this host (ABI v%d)", op, abi.Version)
	}
	mp := m.policy
	if err := mp.eval.CheckOp(o.Name, ""); err != nil {
		msg := err.Error()
		var de *policy.DeniedError
		if errors.As(err, &de) {
			msg = fmt.Sprintf("op %s: %s (rule: %s)", o.Name, de.Reason, de.Rule)
		}
		m.auditOp(ctx, env, o.Name, audit.Deny, ruleOf(err), msg, "")
		return nil, &abi.Error{Code: abi.CodeDenied, Message: msg}
	}
	if !confirmed && mp.profile.IsSensitive(o.Name) {
		if *needsConfirm == "" {
			*needsConfirm = o.Name
		}
		reason := o.Name + " is a sensitive op: the invocation must be confirmed first"
		m.auditOp(ctx, env, o.Name, audit.Deny, "profile "+mp.profile.Name+": sensitive_ops", reason, "")
		return nil, &abi.Error{Code: abi.CodeConfirmationRequired, Message: reason}
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
	reply, err = o.Func(env, req)
	if err == nil && (o.Mutates || o.LeavesSandbox) {
		m.auditOp(ctx, env, o.Name, audit.Allow, "grant", "", audit.NewID())
	}
	return reply, err
}

func (m *Module) auditOp(ctx context.Context, e *ops.Env, op, decision, rule, reason, mutation string) {
	m.host.audit.Record(ctx, audit.Event{Kind: audit.KindOp, Decision: decision, CorrelationID: e.CorrelationID, Module: e.Module,
		Action: e.Action, Op: op, User: e.Principal.User, Org: e.Principal.Org, Rule: rule, Reason: reason, MutationID: mutation})
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
