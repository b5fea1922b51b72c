package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/internal/tracing"
	"github.com/moat-sandbox/moat/policy"
	"github.com/tetratelabs/wazero/sys"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Request is one invocation of a plugin action.
type Request struct {
	Action        string
	Input         []byte
	Principal     policy.Principal
	CorrelationID string
	// Limits override the module's for this call; zero fields keep them.
	Limits Limits
	// Output, when set, is called with what the guest writes to its WASI
	// stdout or stderr during the call (stream "stdout" or "stderr"), as
	// it writes it, instead of the host log: a session's code context
	// streams a run's print output this way. At most MaxOutputBytes of
	// each stream are handed on; past that the guest's writes fail
	// (ErrOutputLimit). Calls come from the guest's goroutine, b is not
	// the callee's to keep, and the guest waits while Output runs. An
	// Extism plug-in's output is not forwarded.
	Output func(stream string, b []byte)
}

// Result is a successful invocation's output. It is a copy: it stays valid
// after the instance serves other calls.
type Result struct {
	Output []byte
}

// Invoke runs one action. It checks the principal against the manifest and
// profile, asks for a confirmation when the action needs one, and takes
// an instance from the module's pool (or a fresh one with IsolationFresh).
// After a timeout, trap, fault or memory limit the instance is discarded,
// never reused; the module keeps serving. Every invocation and every
// refusal is in the audit trail.
func (m *Module) Invoke(ctx context.Context, req Request) (Result, error) {
	return m.invoke(ctx, req, false)
}

func (m *Module) invoke(ctx context.Context, req Request, confirmed bool) (res Result, err error) {
	if tracing.On() {
		// The invocation's span, under the request's: the ops it
		// makes are its children (traceOp). Names and the outcome's
		// code only: never the input or the output.
		ctx = tracing.WithCorrelation(ctx, req.CorrelationID)
		var span trace.Span
		ctx, span = tracing.Start(ctx, "moat.invoke", trace.SpanKindInternal, tracing.KeyModule.String(m.name),
			tracing.KeyAction.String(req.Action), tracing.KeyOrg.String(req.Principal.Org), attribute.Bool("moat.confirmed", confirmed))
		defer func() { tracing.End(span, codeOf(err), err) }()
	}
	fail := func(code abi.Code, err error, format string, args ...any) (Result, error) {
		return Result{}, &Error{Module: m.name, Action: req.Action, Code: code, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	if _, ok := m.rt.(commandRunner); ok {
		return fail(abi.CodeNoSuchAction, nil, "the module is a WASI command with no actions: run it without an action (Module.Run, or `moat run MODULE`)")
	}
	idx, ok := m.acts.publicIdx[req.Action]
	if !ok {
		return fail(abi.CodeNoSuchAction, nil, "no action %q; the module's actions are: %s", req.Action, strings.Join(m.acts.public, ", "))
	}
	if err := req.Principal.Validate(); err != nil {
		return fail(abi.CodeInvalidArgument, err, "%v", err)
	}
	lim := req.Limits.Or(m.actionLimits(req.Action)).Or(m.limits)
	if err := validateLimits(lim); err != nil {
		return fail(abi.CodeInvalidArgument, err, "%v", err)
	}
	if len(req.Input) > lim.MaxInputBytes {
		return fail(abi.CodeInputTooLarge, nil, "input is %d bytes; the limit is %d", len(req.Input), lim.MaxInputBytes)
	}
	if err := m.authorize(ctx, &req, confirmed); err != nil {
		return Result{}, err
	}
	ctx = m.withBudget(ctx, &req, lim)

	start := time.Now()
	defer func() { m.auditInvocation(ctx, &req, start, err) }()
	cctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	release, err := m.acquire(cctx, &req)
	if err != nil {
		return Result{}, err
	}
	defer release()
	out, needsConfirm, err := m.rt.call(ctx, cctx, &req, idx, lim, confirmed)
	if needsConfirm != "" {
		return Result{}, m.confirmSensitive(ctx, &req, needsConfirm)
	}
	if err != nil {
		return Result{}, err
	}
	if a, ok := m.policy.manifest.Action(req.Action); ok && a.OutputSchema != nil {
		if err := a.OutputSchema.Validate(out); err != nil {
			return fail(abi.CodeGuestFault, err, "the output does not match the action's output_schema: %v", err)
		}
	}
	return Result{Output: out}, nil
}

// confirmSensitive answers an invocation whose sensitive op was refused
// for want of a confirmation: the caller gets a token to run the whole
// action again, confirmed.
func (m *Module) confirmSensitive(ctx context.Context, req *Request, op string) error {
	return m.requestConfirmation(ctx, req,
		fmt.Sprintf("run %s.%s for %s, which calls the sensitive op %s", m.name, req.Action, req.Principal, op),
		"profile "+m.policy.profile.Name+": sensitive_ops")
}

// actionLimits are the manifest's limits for one action. An action may
// only tighten the module's limits, never loosen them.
func (m *Module) actionLimits(action string) Limits {
	a, ok := m.policy.manifest.Action(action)
	if !ok {
		return Limits{}
	}
	tighter := func(action, module int64) int64 {
		if action <= 0 || module > 0 && module < action {
			return module
		}
		return action
	}
	return Limits{
		Timeout:        time.Duration(tighter(int64(a.Timeout), int64(m.limits.Timeout))),
		MaxInputBytes:  int(tighter(int64(min(uint64(a.MaxInput), abi.MaxOutputLen)), int64(m.limits.MaxInputBytes))),
		MaxOutputBytes: int(tighter(int64(min(uint64(a.MaxOutput), abi.MaxOutputLen)), int64(m.limits.MaxOutputBytes))),
	}
}

// auditInvocation records how an invocation ended. Allowed, successful
// invocations can be left out (Config.OmitAllowedInvocationAudit);
// refusals were recorded where they happened.
func (m *Module) auditInvocation(ctx context.Context, req *Request, start time.Time, err error) {
	code := "ok"
	if err != nil {
		code = string(abi.CodeOf(err))
		if code == "" {
			code = string(abi.CodeInternal)
		}
		if e := (*Error)(nil); errors.As(err, &e) && e.decided {
			return // already recorded as the decision that refused it
		}
	} else if m.host.cfg.OmitAllowedInvocationAudit {
		return
	}
	ev := audit.Event{Kind: audit.KindInvocation, Decision: audit.Allow, CorrelationID: req.CorrelationID, Module: m.name, Action: req.Action,
		User: req.Principal.User, Org: req.Principal.Org, Code: code, DurationNS: int64(time.Since(start))}
	ev.Attrs = budgetAttrs(budget.From(ctx))
	if err != nil {
		ev.Reason = err.Error()
	}
	m.host.audit.Record(ctx, ev)
}

// callError is an invocation failure and whether the instance survived it.
type callError struct {
	*Error
	reusable bool
}

func (inst *instance) call(ctx context.Context, idx uint32, req *Request, lim Limits) ([]byte, *callError) {
	m := inst.m
	ctx = inst.sess.Attach(ctx)
	inst.epoch++
	inst.endedOp = ""
	inst.env.Begin(ctx, req.Action, req.Principal, req.CorrelationID)
	idle := context.Background()
	if inst.res != nil {
		idle = inst.res.lifetime // a resident script's session spans its life
	} else {
		inst.sess.Begin(inst)
	}
	inst.stdout.begin(ctx, inst.env.Log)
	inst.stderr.begin(ctx, inst.env.Log)
	if req.Output != nil {
		inst.stdout.forward(req.Output, lim.MaxOutputBytes)
		inst.stderr.forward(req.Output, lim.MaxOutputBytes)
	}
	inst.mem.SetLimit(uint64(lim.MemoryLimitPages) * 65536)
	defer func() {
		if req.Output != nil {
			inst.stdout.unforward()
			inst.stderr.unforward()
		}
		inst.stdout.end()
		inst.stderr.end()
		if inst.res == nil {
			inst.sess.End()
		}
		inst.env.Begin(idle, "", policy.Principal{}, "")
	}()
	if inst.res != nil {
		return inst.callResident(ctx, req, lim)
	}
	fail := func(code abi.Code, reusable bool, err error, format string, args ...any) ([]byte, *callError) {
		return nil, &callError{Error: &Error{Module: m.name, Action: req.Action, Code: code, Reason: fmt.Sprintf(format, args...), Err: err}, reusable: reusable}
	}

	mem := inst.mod.Memory()
	var inPtr uint32
	inLen := uint32(len(req.Input))
	if inLen > 0 {
		inst.stack[0] = uint64(inLen)
		if err := inst.alloc.CallWithStack(ctx, inst.stack[:]); err != nil {
			return inst.classify(ctx, err, lim)
		}
		inPtr = uint32(inst.stack[0])
		if !mem.Write(inPtr, req.Input) {
			return fail(abi.CodeGuestFault, false, nil, "%s(%d) returned %d: the buffer is outside guest memory (%d bytes)",
				abi.ExportAlloc, inLen, inPtr, mem.Size())
		}
	}
	inst.stack[0], inst.stack[1], inst.stack[2] = uint64(idx), uint64(inPtr), uint64(inLen)
	if err := inst.invoke.CallWithStack(ctx, inst.stack[:]); err != nil {
		return inst.classify(ctx, err, lim)
	}
	outPtr, outLen, failed := abi.UnpackOutput(inst.stack[0])
	if int(outLen) > lim.MaxOutputBytes {
		return fail(abi.CodeOutputTooLarge, true, nil, "output is %d bytes; the limit is %d", outLen, lim.MaxOutputBytes)
	}
	b, ok := mem.Read(outPtr, outLen)
	if !ok {
		return fail(abi.CodeGuestFault, false, nil, "%s returned output [%d, +%d) outside guest memory (%d bytes)",
			abi.ExportInvoke, outPtr, outLen, mem.Size())
	}
	out := make([]byte, len(b))
	copy(out, b)
	if failed {
		var ge abi.Error
		if err := abi.Unmarshal(out, &ge); err != nil || ge.Code == "" {
			return fail(abi.CodeGuestError, true, nil, "%s", strings.TrimSpace(string(out)))
		}
		return nil, &callError{Error: guestFailure(m.name, req.Action, ge.Code, ge.Message, &ge), reusable: true}
	}
	return out, nil
}

// outOfMemory is a failure the guest reported (its error, an output too
// large) after the host refused to grow its memory during the call: the
// call is memory_limit, as a guest that died there is, the guest's own
// message kept, and the instance is not reused (Invoke).
func (inst *instance) outOfMemory(cerr *callError, lim Limits) *callError {
	e := *cerr.Error
	e.Code = abi.CodeMemoryLimit
	e.Reason = fmt.Sprintf("the guest tried to grow its memory past the limit of %d pages (%d MiB) and failed: %s; the instance is discarded, and the next call gets a new one",
		lim.MemoryLimitPages, lim.MemoryLimitPages/16, cerr.Reason)
	return &callError{Error: &e}
}

// classify turns an error from a guest call into a *callError. The order
// matters: a guest that died after a refused memory.grow is a memory limit
// whatever it printed; a host-detected ABI fault beats the panic text
// wazero wraps around it; a deadline is reported as a timeout.
func (inst *instance) classify(ctx context.Context, err error, lim Limits) ([]byte, *callError) {
	m := inst.m
	e := &Error{Module: m.name, Action: inst.env.Action, Err: err}
	var exit *sys.ExitError
	switch {
	case inst.mem.Hit():
		e.Code, e.Reason = abi.CodeMemoryLimit, fmt.Sprintf("the guest tried to grow its memory past the limit of %d pages (%d MiB)%s",
			lim.MemoryLimitPages, lim.MemoryLimitPages/16, inst.stderrNote())
	case inst.sess.Fault() != nil:
		e.Code, e.Reason, e.Err = abi.CodeGuestFault, inst.sess.Fault().Error(), inst.sess.Fault()
	case isDeadline(err, ctx) && inst.endedOp != "":
		e.Code, e.Reason = abi.CodeTimeout, fmt.Sprintf("did not finish within %s (its deadline ended %s)", lim.Timeout, inst.endedOp)
	case isDeadline(err, ctx):
		e.Code, e.Reason = abi.CodeTimeout, fmt.Sprintf("did not finish within %s", lim.Timeout)
	case errors.As(err, &exit) && exit.ExitCode() == sys.ExitCodeContextCanceled || ctx.Err() == context.Canceled:
		e.Code, e.Reason = abi.CodeCanceled, "the caller canceled the invocation"
	case errors.As(err, &exit):
		e.Code, e.Reason = abi.CodeTrap, fmt.Sprintf("the guest exited with code %d during the action%s", exit.ExitCode(), inst.stderrNote())
	default:
		e.Code, e.Reason = abi.CodeTrap, firstLine(err)+inst.stderrNote()
	}
	m.host.log.Debug("invocation failed", "module", m.name, "action", inst.env.Action, "code", e.Code, "err", err)
	return nil, &callError{Error: e}
}
