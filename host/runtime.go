package host

import (
	"context"
	"sync"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/driver"
	"github.com/moat-sandbox/moat/internal/pool"
	"github.com/moat-sandbox/moat/internal/wasmrewrite"
	"github.com/tetratelabs/wazero"
)

// A module's calls run in one of several execution modes, and each is a
// runtime: a compiled plugin's pooled instances, a WASI command run once
// per Run, a script run once per call, a resident script's pooled
// interpreters (Ruby's made by its Interpreter, runs of either started
// from a snapshot), a foreign module's driver (Extism) and a native
// plugin's workers. Module keeps what every mode shares (name, policy,
// limits, actions, file grants, the audit around each call) and hands the
// call itself to its runtime; the table of loaders (load.go) is the one
// place that decides which runtime a module gets. So a new mode is a
// runtime and a loader, not a branch in Invoke, Run and Load.

// moduleRuntime runs one module's invocations.
type moduleRuntime interface {
	// call runs the action the module registers at index idx (Module's
	// actions) for req, under lim. ctx is the invocation's context
	// without its deadline (an instance made for the call may outlive
	// it, in the pool); deadline is ctx bounded by lim.Timeout, under
	// which the call runs. needsConfirm names the first sensitive op
	// refused for want of a confirmation: Invoke then answers with a
	// confirmation request, whatever else the call returned.
	call(ctx, deadline context.Context, req *Request, idx uint32, lim Limits, confirmed bool) (out []byte, needsConfirm string, err error)
	// close releases what the runtime holds: idle instances, a driver's
	// module, workers. Calls in flight finish.
	close(ctx context.Context) error
}

// commandRunner is a runtime whose module is a command: Module.Run runs
// it, and it has no actions to Invoke.
type commandRunner interface {
	moduleRuntime
	run(ctx context.Context, req RunRequest, lim Limits) (RunResult, error)
}

// warmer is a runtime that makes its first instance once the load has
// checked everything, so that a module whose code fails as it starts fails
// its load, and the first call finds a warm instance (a resident script).
type warmer interface {
	warm(ctx context.Context) error
}

var (
	_ moduleRuntime = (*pooledRuntime)(nil)
	_ warmer        = residentRuntime{}
	_ commandRunner = (*wasiCommand)(nil)
	_ moduleRuntime = (*perCallScript)(nil)
	_ moduleRuntime = (*driverRuntime)(nil)
)

// wasmCode is a WebAssembly module's compiled code and what its instances
// are made from, shared by the runtimes that run instances of it in the
// host's process (pooled plugins, commands, scripts). A native plugin's is
// empty.
type wasmCode struct {
	// src is what the module was loaded from, kept for a Template
	// (LoadOptions.Like); nil otherwise.
	src      []byte
	lay      *wasmrewrite.Layout // its layout, kept with src
	cm       wazero.CompiledModule
	interpRT wazero.Runtime // the runtime of a script's Interpreter (cm is compiled there), or nil: the host's
	hasInit  bool           // exports _initialize
	memMin   uint32         // the declared initial memory, in pages
	// isolation and maxIdle say how idle holds instances between calls.
	isolation Isolation
	maxIdle   int
	idle      *pool.LIFO[*instance] // a plugin's and a resident script's warm instances
	script    *Script               // the script an interpreter serves, or nil
	snap      *snapshotState        // runs may start from an image (snapshot.go)

	mu       sync.Mutex // guards compiled
	compiled *compiled  // its machine code, released by Module.Close
}

// pooledRuntime runs each call on an instance from the module's pool (or a
// fresh one with IsolationFresh): a compiled plugin's instances, whose
// moat_invoke serves the action, and a resident script's, whose serve
// loop does (resident.go).
type pooledRuntime struct {
	m *Module
	// newInstance makes an instance under a call's limits:
	// Module.newInstance for a plugin, Module.newResidentInstance for a
	// resident script.
	newInstance func(ctx context.Context, lim Limits) (*instance, error)
}

func (r *pooledRuntime) call(ctx, deadline context.Context, req *Request, idx uint32, lim Limits, confirmed bool) ([]byte, string, error) {
	m := r.m
	inst, err := r.get(ctx, lim)
	if err != nil {
		if e, ok := err.(*Error); ok {
			e.Action = req.Action
		}
		return nil, "", err
	}
	inst.confirmed, inst.needsConfirm = confirmed, ""
	out, cerr := inst.call(deadline, idx, req, lim)
	needsConfirm := inst.needsConfirm
	// An instance whose memory.grow was refused during the call is full,
	// whatever its guest made of it: a handler that caught the
	// interpreter's MemoryError, or globals that hold what filled it,
	// would fail the next caller's call too (another user's). It serves
	// no other call.
	full := inst.mem.Hit()
	if full && cerr != nil && cerr.reusable {
		cerr = inst.outOfMemory(cerr, lim)
	}
	if full || cerr != nil && !cerr.reusable {
		if full && cerr == nil {
			m.host.log.Debug("an instance that reached its memory limit is discarded", "module", m.name, "action", req.Action)
		}
		inst.close()
	} else {
		r.put(inst)
	}
	if cerr != nil {
		return nil, needsConfirm, cerr.Error
	}
	return out, needsConfirm, nil
}

// get takes an idle instance or makes one.
func (r *pooledRuntime) get(ctx context.Context, lim Limits) (*instance, error) {
	code := r.m.code
	if code.isolation == IsolationPooled {
		if inst, ok := code.idle.Get(); ok {
			if !inst.oversized(lim) {
				return inst, nil
			}
			inst.close() // grown past this call's memory limit
		}
	}
	return r.newInstance(ctx, lim)
}

// put returns a healthy instance to the pool, or closes it when the pool is
// full, the module is closed or isolation is fresh. The pool is LIFO so the
// busiest instances stay warm in the CPU caches (internal/pool).
func (r *pooledRuntime) put(inst *instance) {
	code := r.m.code
	if code.isolation == IsolationPooled && !inst.oversized(r.m.limits) && code.idle.Put(inst) {
		return
	}
	inst.close()
}

// residentRuntime is a resident script's: its instances are interpreters
// that ran the script's top level and serve calls from their serve loop
// (resident.go), made by the host's runtime or by the script's
// driver.Interpreter (Ruby's), and started from a snapshot's
// image when the script has one (snapshot.go). They are pooled as a
// plugin's are.
type residentRuntime struct{ *pooledRuntime }

// warm makes the first instance of a resident script now, as a plugin's
// is made at load: a script that fails as it starts, or registers other
// actions than its manifest's, fails its load.
func (r residentRuntime) warm(ctx context.Context) error {
	inst, err := r.newInstance(ctx, r.m.limits)
	if err != nil {
		return err
	}
	r.put(inst)
	return nil
}

func (r *pooledRuntime) close(context.Context) error {
	for _, inst := range r.m.code.idle.Close() {
		inst.close()
	}
	return nil
}

// wasiCommand runs a WASI command: once per Module.Run, on a fresh
// instance (command.go), or from a snapshot's image (snapshot.go).
type wasiCommand struct{ m *Module }

func (r *wasiCommand) call(context.Context, context.Context, *Request, uint32, Limits, bool) ([]byte, string, error) {
	// Module.invoke refuses an action of a command before it gets here.
	return nil, "", &Error{Module: r.m.name, Code: abi.CodeNoSuchAction, Reason: "the module is a WASI command with no actions"}
}

func (r *wasiCommand) run(ctx context.Context, req RunRequest, lim Limits) (RunResult, error) {
	res, _, err := r.m.run(ctx, req, lim, false)
	return res, err
}

func (r *wasiCommand) close(context.Context) error { return nil }

// perCallScript runs a script once per call on a fresh instance of its
// interpreter (script.go).
type perCallScript struct{ m *Module }

func (r *perCallScript) call(_, deadline context.Context, req *Request, _ uint32, lim Limits, confirmed bool) ([]byte, string, error) {
	return r.m.runScript(deadline, req, lim, confirmed)
}

func (r *perCallScript) close(context.Context) error { return nil }

// driverRuntime runs a module on a driver.Runner: a foreign module's driver
// (Extism, foreign.go) or a native plugin's workers (nativeplugin.go).
// The gate around the call is the host's, the ops come back through
// its driver.Gate.
type driverRuntime struct {
	m      *Module
	runner driver.Runner
}

func (r *driverRuntime) call(_, deadline context.Context, req *Request, idx uint32, lim Limits, confirmed bool) ([]byte, string, error) {
	return r.m.callRunner(deadline, r.runner, req, idx, lim, confirmed)
}

func (r *driverRuntime) close(ctx context.Context) error { return r.runner.Close(ctx) }
