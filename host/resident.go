package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/host/driver"
	"github.com/moat-sandbox/moat/host/transport"
	"github.com/moat-sandbox/moat/internal/wasmsnap"
	"github.com/moat-sandbox/moat/policy"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"
)

// A resident script instance is an interpreter that stays alive between
// calls: its script ran once, when the instance started, registered its
// handlers (moat.action) and then waits in the op device for calls
// (abi.OpNext, abi/resident.go). It sits in the module's instance pool as
// a compiled plugin's instance does, under the same limits, so isolation:
// fresh, the pool size, memory limits and the discarding of an instance
// after a timeout, trap or memory limit are the compiled path's. What a
// call leaves in the interpreter's globals stays for the next call on the
// same instance, as a compiled plugin's memory does.
//
// The instance runs its _start on a goroutine of its own. A call is handed
// to that goroutine (resident.calls), which returns it to the guest from
// its moat.next; the guest's next moat.next brings the result back
// (resident.results). The caller's deadline is enforced by closing the
// module: the interrupt check at the guest's loop headers (interrupt.go)
// then ends it.
//
// The ops the guest asks for during a call run on the caller's goroutine,
// which has nothing else to do until the result comes (resident.runOp,
// callResident): the guest posts the op and waits; the caller runs it and
// hands back the reply, or the panic that must end the guest. The two
// goroutines then tend to stay on two processors, each with its own code
// in that processor's caches: the interpreter's machine code (tens of
// megabytes) on one, the host's (SQLite, the audit trail, HTTP) on the
// other. Run on the guest's goroutine, each op evicted the interpreter
// and each stretch of the interpreter evicted the host, and both ran
// several times slower than in a loop. Each side polls a short while
// (residentSpin) before it parks, since a park and the wake after it cost
// about as much as a small op. Measured in BenchmarkGreetInterleaved:
// hello-python's greet went from 1.97x to 1.6x hello-go's time.

// residentStartTimeout bounds the script's top-level code, its imports and
// handler registrations, when the instance starts: at least this, or the
// module's timeout if longer.
const residentStartTimeout = 10 * time.Second

// residentStopGrace is how long a stopped instance is given to return from
// _start before it is left to end on its own (kill).
const residentStopGrace = time.Second

// residentSpin is how long the caller and the guest of a resident call
// poll for each other (an op, its reply, the result) before they park:
// longer than most ops and most stretches of a handler between two, far
// shorter than a call that computes.
const residentSpin = 200 * time.Microsecond

// residentCalls counts the resident calls in flight in this process, and
// residentProcs is GOMAXPROCS as the last call began (read once a call:
// runtime.GOMAXPROCS takes the scheduler's lock, and a call polls at
// every op).
var residentCalls, residentProcs atomic.Int64

// spinning is the channel a poll selects to keep polling (closed: always
// ready), or nil to park. Polling pays only while every call in flight
// can have two processors, its guest's and its caller's: with more calls
// than that, a guest polling without yielding holds a processor that
// another call's caller needs to run the op that guest waits for, and
// polling cost 8 organizations' Python greets two thirds of their
// throughput (measured, greet-python-8orgs). With one processor there is
// never another to poll from.
func spinning() chan struct{} {
	if residentCalls.Load()*2 > residentProcs.Load() {
		return nil
	}
	return alwaysReady
}

var alwaysReady = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

type resident struct {
	dev      *transport.Device
	calls    chan *residentCall
	results  chan residentResult
	ops      chan *residentOp // an op of the call, for the caller to run (buffered: one at a time)
	opDone   chan struct{}    // the op posted last has run (buffered)
	op       residentOp       // the one op in flight, reused
	ready    chan []string    // the actions the script registered, once
	readied  bool             // guest goroutine only: ready was sent
	done     chan struct{}    // closed when _start returned
	err      error            // _start's error, once done is closed
	inCall   bool             // guest goroutine only
	lifetime context.Context
	cancel   context.CancelFunc
}

type residentCall struct {
	ctx           context.Context
	action        string
	input         []byte
	correlationID string
}

type residentResult struct {
	output []byte
	err    *abi.Error
}

// residentOp is an op posted by the guest for the caller to run.
type residentOp struct {
	serve    func() []byte
	reply    []byte
	panicked any // what serve panicked with, raised again on the guest's goroutine
}

// run runs the op on the caller's goroutine.
func (op *residentOp) run() {
	defer func() {
		if p := recover(); p != nil {
			op.panicked = p
		}
	}()
	op.reply = op.serve()
}

// runOp implements transport.OpRunner on the guest's goroutine: the op
// runs on the caller's (see the top of this file), and the guest waits
// for it, polling a while before it parks.
func (r *resident) runOp(serve func() []byte) []byte {
	op := &r.op
	op.serve, op.reply, op.panicked = serve, nil, nil
	r.ops <- op
	poll, until := spinning(), time.Now().Add(residentSpin)
	for {
		select {
		case <-r.opDone:
			if op.panicked != nil {
				panic(op.panicked)
			}
			return op.reply
		case <-r.lifetime.Done():
			// The caller gave up and the instance is ending: so is the
			// guest, as at any other op after its deadline.
			panic(sys.NewExitError(sys.ExitCodeContextCanceled))
		case <-poll:
			// No Gosched: the guest's processor keeps the guest's code
			// in its caches only if nothing else runs there meanwhile.
			if time.Now().After(until) {
				poll = nil
			}
		}
	}
}

// InCall implements transport.Resident.
func (r *resident) InCall() bool { return r.inCall }

// Next implements transport.Resident, on the guest's goroutine.
func (r *resident) Next(req *abi.NextRequest) (abi.NextReply, error) {
	switch {
	case req.Ready != nil:
		if r.readied {
			return abi.NextReply{}, abi.Errorf(abi.CodeInvalidArgument, "%s: ready was sent already", abi.OpNext)
		}
		r.readied = true
		r.ready <- slices.Clone(req.Ready.Actions) // buffered: the creator may have gone
	case r.inCall:
		r.inCall = false
		r.dev.SetContext(r.lifetime)
		out := req.Output
		if len(out) == 0 && req.OutputText != "" {
			out = []byte(req.OutputText)
		}
		select {
		case r.results <- residentResult{output: out, err: req.Error}:
		case <-r.lifetime.Done(): // the caller gave up and the instance is ending
			return abi.NextReply{Stop: true}, nil
		}
	default:
		return abi.NextReply{}, abi.Errorf(abi.CodeInvalidArgument, "%s: a result with no call to answer (send ready first)", abi.OpNext)
	}
	select {
	case c := <-r.calls:
		r.inCall = true
		r.dev.SetContext(c.ctx)
		next := abi.NextReply{Action: c.action, CorrelationID: c.correlationID}
		if utf8.Valid(c.input) {
			next.Text = string(c.input)
		} else {
			next.Input = c.input
		}
		return next, nil
	case <-r.lifetime.Done(): // the instance is closed
		return abi.NextReply{Stop: true}, nil
	}
}

// newResidentInstance starts an instance of a resident script and waits
// until its script said ready, naming every action of the manifest: from
// the module's image when it has one, else cold. An instance that fails
// to start from the image (a damaged or foreign image the checks let
// through, a guest that cannot resume from it) drops the image, logged
// with its path and how to clear every image, and starts cold at once:
// the module's instances start cold until a new image is made (by the
// next process), never failing again on the same image.
func (m *Module) newResidentInstance(ctx context.Context, lim Limits) (*instance, error) {
	if err := m.checkInitialMemory(lim); err != nil {
		return nil, err
	}
	if s := m.code.snap; s != nil && s.given {
		return m.startGiven(ctx, lim)
	}
	img := m.residentImage(ctx, lim)
	inst, err := m.startResident(ctx, lim, img)
	if err == nil || img == nil || ctx.Err() != nil {
		return inst, err
	}
	path := m.dropImage(img, err)
	inst, cerr := m.startResident(ctx, lim, nil)
	var e *Error
	if cerr != nil && errors.As(cerr, &e) {
		e.Reason += fmt.Sprintf(" (cold; a start from the snapshot image %s failed first: %s; that image is removed, and `%s` clears them all)",
			path, firstLine(err), m.clearImages())
	}
	return inst, cerr
}

// startResident is newResidentInstance from img (nil: cold).
func (m *Module) startResident(ctx context.Context, lim Limits, img *wasmsnap.Image) (*instance, error) {
	fail := func(code abi.Code, err error, format string, args ...any) (*instance, error) {
		return nil, &Error{Module: m.name, Code: code, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	inst, cancel := m.residentShell(lim)
	r, lifetime := inst.res, inst.res.lifetime
	mc, err := m.residentConfig(inst, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	if m.code.snap != nil {
		// Its state may be captured between two of its calls
		// (CaptureResident): the park line on stdout, then a clock read.
		mc = mc.WithStdout(&parkTee{s: m.code.snap, r: r, next: &inst.stdout}).
			WithWalltime(inst.parkClock, sys.ClockResolution(1))
	}

	start := max(lim.Timeout, residentStartTimeout)
	sctx, scancel := context.WithTimeout(ctx, start)
	defer scancel()
	inst.stdout.begin(sctx, inst.env.Log)
	inst.stderr.begin(sctx, inst.env.Log)
	if img != nil && img.IsShared() {
		// The image mapped, not copied (enterImage). A fork's capture
		// is the heap's, copied into a heap memory as before: making
		// its file cost a single copy's first run more than it saved.
		inst.mem.UseMapping(uint64(img.Pages) * 65536)
	}
	actx := inst.sess.Attach(experimental.WithMemoryAllocator(lifetime, inst.mem))
	rt := m.host.runtime
	if m.code.interpRT != nil {
		rt = m.code.interpRT // the driver.Interpreter's
	}
	mod, err := rt.InstantiateModule(actx, m.code.cm, mc)
	if err != nil {
		inst.stdout.end()
		inst.stderr.end()
		inst.files.release()
		cancel()
		if inst.mem.Hit() {
			return fail(abi.CodeMemoryLimit, err, "the interpreter's initial memory exceeds the limit of %d pages (%d MiB)", lim.MemoryLimitPages, lim.MemoryLimitPages/16)
		}
		return fail(abi.CodeTrap, err, "instantiation failed: %s", firstLine(err))
	}
	inst.mod = mod
	inst.mem.KeepWhile(mod) // a mapped memory outlives a close while the guest runs
	go func() {
		switch {
		case img != nil && m.code.snap.interp != nil:
			r.err = m.code.snap.enterCopy(actx, mod, img)
		case img != nil:
			r.err = m.enterImage(actx, mod, img, m.code.snap.spec.Resume, inst.mem)
		case m.code.script.Interpreter != nil:
			r.err = m.code.script.Interpreter.Run(actx, mod, m.code.script.Args)
		default:
			r.err = startModule(actx, mod, abi.ExportStart)
		}
		close(r.done)
	}()
	var actions []string
	select {
	case actions = <-r.ready:
	case <-r.done:
	case <-sctx.Done():
	}
	inst.stdout.end()
	inst.stderr.end()
	if actions == nil {
		timedOut := sctx.Err() != nil
		inst.kill()
		inst.close()
		var se *driver.ScriptError
		raised := errors.As(r.err, &se) && !se.OutOfMemory // the script's own failure, whatever the allocator saw (driver.ScriptError)
		switch {
		case inst.mem.Hit() && !raised:
			return fail(abi.CodeMemoryLimit, r.err, "the script's top-level code needs more memory than the limit of %d pages (%d MiB)%s",
				lim.MemoryLimitPages, lim.MemoryLimitPages/16, inst.stderrNote())
		case timedOut && ctx.Err() == nil:
			return fail(abi.CodeTimeout, nil, "the script's top-level code did not finish (register its actions with moat.action) within %s", start)
		case timedOut:
			return fail(abi.CodeCanceled, ctx.Err(), "the caller gave up while the instance started")
		case r.err == nil:
			return fail(abi.CodeBadModule, nil, "the script ended without serving its actions: a resident plugin registers them with moat.action%s", inst.stderrNote())
		}
		return fail(abi.CodeBadModule, r.err, "the script failed as it started: %s%s", firstLine(r.err), inst.stderrNote())
	}
	var missing []string
	for _, a := range m.acts.names {
		if !slices.Contains(actions, a) {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		inst.close()
		return fail(abi.CodeBadModule, nil, "the script registered the actions %q, but not %q, which its moat.yaml declares: register each with moat.action",
			actions, missing)
	}
	return inst, nil
}

// residentShell is a resident instance of m before its module is
// instantiated: its lifetime (cancel ends it), channels and streams.
func (m *Module) residentShell(lim Limits) (*instance, context.CancelFunc) {
	lifetime, cancel := context.WithCancel(context.Background())
	// The device's own buffers are the instance's, under the default
	// budget; each call's ops are charged to the call's (SetContext).
	lifetime = budget.With(lifetime, budget.New(budget.Limits{}, nil))
	r := &resident{calls: make(chan *residentCall), results: make(chan residentResult, 1), ready: make(chan []string, 1),
		ops: make(chan *residentOp, 1), opDone: make(chan struct{}, 1), done: make(chan struct{}), lifetime: lifetime, cancel: cancel}
	inst := &instance{invocation: invocation{m: m, env: m.newEnv(), epoch: 1}, res: r}
	inst.stdout = guestStream{name: "stdout", level: slog.LevelInfo}
	inst.stderr = guestStream{name: "stderr", level: slog.LevelWarn}
	inst.env.Begin(lifetime, "", policy.Principal{}, "")
	inst.sess.Begin(inst)
	inst.mem = newLimitedMemory(lim)
	return inst, cancel
}

// residentImage is the image m's resident instances start from (made on
// first use by captureResident); nil: they start cold.
func (m *Module) residentImage(ctx context.Context, lim Limits) *wasmsnap.Image {
	if m.code.snap == nil || m.code.snap.spec.Resume == "" || !m.code.snap.ownImage() {
		return nil
	}
	img := m.snapshotImage(ctx, m.captureResident)
	if img == nil || img.Pages > lim.MemoryLimitPages {
		return nil
	}
	return img
}

// captureResident captures an instance configured as every resident
// instance of m is (residentConfig): the script's top level runs, and the
// SDK parks where it would serve (moat.py's serve()). The module's file
// grants are stand-ins there, empty and watched (grantStandIn): an image
// holds nothing read from a tenant's directory, and a top level that
// looks into one makes no image (its instances start cold, each reading
// the directory itself, as the grant's audit and current content need).
func (m *Module) captureResident(ctx context.Context) (*wasmsnap.Image, error) {
	inst, cancel := m.residentShell(m.limits)
	defer cancel()
	watch := &grantWatch{}
	mc, err := m.residentConfig(inst, watch)
	if err != nil {
		return nil, err
	}
	img, err := m.capture(ctx, mc, inst.sess.Attach)
	if g, p := watch.touched(); g != "" {
		return nil, fmt.Errorf("the top level looked into the file grant %s (%s): an image would keep what it found there, so instances start cold", g, p)
	}
	return img, err
}

// residentConfig is the configuration of a resident instance inst of m:
// the script's arguments and environment, its mounts, the module's file
// grants and the op device, in that order (a snapshot's capture has the
// same, snapshot.go). Output goes to inst's streams. With standIns (a
// capture), each grant is mounted as an empty stand-in that reports to
// it, not as the directory.
func (m *Module) residentConfig(inst *instance, standIns *grantWatch) (wazero.ModuleConfig, error) {
	r := inst.res
	// Built from the inputs the image is named by, and nothing else.
	in := m.imageInputs()
	env := maps.Clone(in.Env)
	if env == nil {
		env = map[string]string{}
	}
	env[abi.ResidentEnv] = "1"
	env[transport.DeviceEnv] = transport.DevicePath
	mc := m.commandConfig(in.Args, env, &inst.stdout, &inst.stderr, func() context.Context { return inst.env.Context })
	fsc := wazero.NewFSConfig()
	for _, mt := range in.Mounts {
		if mt.Granted {
			continue // a file grant (openMountGrants)
		}
		fsc = dirMount(fsc, mt)
	}
	if m.files != nil {
		if err := m.checkGuestPaths(in.Mounts); err != nil {
			return nil, &Error{Module: m.name, Code: abi.CodeInvalidArgument, Reason: err.Error(), Err: err}
		}
		if standIns != nil {
			fsc = m.mountGrantStandIns(fsc, standIns)
		} else {
			if !m.files.acquire() {
				return nil, &Error{Module: m.name, Code: abi.CodeUnavailable, Reason: "the module was closed"}
			}
			inst.files = m.files
			fsc = m.mountFileGrants(fsc, &inst.invocation)
		}
	}
	r.dev = transport.NewDevice(r.lifetime, inst)
	r.dev.SetResident(r)
	r.dev.SetOpRunner(r.runOp)
	return mc.WithFSConfig(fsc.(sysfs.FSConfig).WithSysFSMount(r.dev.FS(), transport.DeviceDir)), nil
}

// callResident serves one call on a resident instance, begun by call
// (the call's environment, output streams and memory limit).
func (inst *instance) callResident(ctx context.Context, req *Request, lim Limits) ([]byte, *callError) {
	m, r := inst.m, inst.res
	export := req.Action
	if a, ok := m.policy.manifest.Action(req.Action); ok && a.Export != "" {
		export = a.Export
	}
	fail := func(code abi.Code, reusable bool, err error, format string, args ...any) ([]byte, *callError) {
		return nil, &callError{Error: &Error{Module: m.name, Action: req.Action, Code: code, Reason: fmt.Sprintf(format, args...), Err: err}, reusable: reusable}
	}
	residentProcs.Store(int64(runtime.GOMAXPROCS(0)))
	residentCalls.Add(1)
	defer residentCalls.Add(-1)
	select {
	case r.calls <- &residentCall{ctx: ctx, action: export, input: req.Input, correlationID: req.CorrelationID}:
	case <-r.done:
		return inst.residentDied(ctx, lim)
	case <-ctx.Done():
		return inst.residentStopped(ctx, lim)
	}
	// Wait for the result, running the call's ops meanwhile (runOp),
	// polling a while after each before parking.
	poll, until := spinning(), time.Now().Add(residentSpin)
	for {
		var res residentResult
		select {
		case op := <-r.ops:
			if r.lifetime.Err() == nil {
				op.run()
			} else {
				// Killed meanwhile (Module.Close): the guest has stopped
				// waiting, and no op starts for a guest that is ending.
				op.reply, op.panicked = nil, sys.NewExitError(sys.ExitCodeContextCanceled)
			}
			r.opDone <- struct{}{}
			poll, until = spinning(), time.Now().Add(residentSpin)
			continue
		case <-poll:
			if time.Now().After(until) {
				poll = nil
			}
			runtime.Gosched()
			continue
		case res = <-r.results:
		case <-r.done:
			return inst.residentDied(ctx, lim)
		case <-ctx.Done():
			return inst.residentStopped(ctx, lim)
		}
		if res.err != nil {
			if res.err.Code == "" {
				res.err.Code = abi.CodeGuestError
			}
			return nil, &callError{Error: guestFailure(m.name, req.Action, res.err.Code, res.err.Message, res.err), reusable: true}
		}
		if len(res.output) > lim.MaxOutputBytes {
			return fail(abi.CodeOutputTooLarge, true, nil, "output is %d bytes; the limit is %d", len(res.output), lim.MaxOutputBytes)
		}
		return res.output, nil
	}
}

// residentStopped ends an instance whose caller's context ended during the
// call: the module is closed, which ends the guest at its next interrupt
// check, and the failure is the caller's deadline or cancellation.
func (inst *instance) residentStopped(ctx context.Context, lim Limits) ([]byte, *callError) {
	code := sys.ExitCodeContextCanceled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = sys.ExitCodeDeadlineExceeded
	}
	inst.kill()
	return inst.classify(ctx, sys.NewExitError(code), lim)
}

// residentDied reports an instance whose _start returned during a call: a
// trap, the memory limit, an exit, or a protocol the script broke.
func (inst *instance) residentDied(ctx context.Context, lim Limits) ([]byte, *callError) {
	err := inst.res.err
	if err == nil {
		err = errors.New("the script returned from its start while serving the call")
	}
	return inst.classify(ctx, err, lim)
}

// kill ends the script however it is running: the instance's context is
// cancelled, which its interrupt checks (at loop headers, ops and sleeps)
// and its moat.next obey, and waits for its goroutine, at most
// residentStopGrace. The module is never closed under the running guest
// (its descriptors would be closed under calls in flight); a guest still
// running after the grace (blocked in a host call that ignores its
// context) is left to end on its own, and the goroutine then closes its
// module.
func (inst *instance) kill() {
	r := inst.res
	r.cancel()
	select {
	case <-r.done:
		return
	case <-time.After(residentStopGrace):
	}
	inst.m.host.log.Warn("a resident instance did not end when stopped; its module is closed when it does", "module", inst.m.name)
	mod, files := inst.mod, inst.files
	inst.mod, inst.files = nil, nil
	go func() {
		<-r.done
		_ = mod.Close(context.Background())
		files.release()
	}()
}
