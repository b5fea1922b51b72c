package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/driver"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/policy"
)

// Native describes a native plugin's files and how its workers start.
type Native struct {
	// Dir is the plugin's directory: read-only to its workers, and their
	// working directory. Its files must be readable by other uids (a
	// worker runs as a uid of its own).
	Dir string
	// Command is the worker's argv; default the manifest's command.
	Command []string
	// Env is the workers' environment beyond PATH and LANG (an SDK's
	// PYTHONPATH, say), and ReadOnly more paths they may read (that SDK's
	// directory).
	Env      []string
	ReadOnly []string
	// Source is what a signature covers and what the module's digest is
	// of: the plugin's files as one archive (languages.PackSources).
	Source []byte
	// Health checks and restarts; zero values take native.WorkerSpec's
	// defaults (a ping every 5 s answered within 2 s; give up after 5
	// restarts within a minute).
	HealthInterval, HealthTimeout, StartTimeout time.Duration
	MaxRestarts                                 int
	RestartWindow                               time.Duration
}

// nativeLoader loads a native plugin: the same signature check, policy
// and limits as a WASM module (Host.Load's shared stages), then its
// workers, which sit behind the same driver.Runner interface as a foreign
// driver's modules, so every call meets the same gate (authorize,
// confirm, rate, concurrency, the op table through the call's driver.Gate, audit).
var nativeLoader = &loader{
	kinds: []Kind{KindNative},
	match: func(_ []byte, opts LoadOptions) bool { return opts.Native != nil },
	check: checkNative,
	prepare: func(_ context.Context, ld *loading) error {
		ld.kind = KindNative
		ld.m.info = Info{Name: ld.name, Digest: ld.digest, Size: len(ld.opts.Native.Source)}
		return nil
	},
	start: startNative,
}

// checkNative checks a native plugin's options and manifest.
func checkNative(ld *loading) error {
	opts := ld.opts
	nat, mf := opts.Native, opts.Manifest
	ld.name = opts.Name
	if mf != nil {
		ld.name = mf.Name
	}
	switch {
	case len(ld.wasm) > 0:
		return &Error{Module: opts.Name, Code: abi.CodeInvalidArgument, Reason: "a native plugin has no WebAssembly: pass nil bytes with LoadOptions.Native"}
	case mf == nil:
		return ld.fail(abi.CodeInvalidArgument, nil, "a native plugin needs its manifest (kind: native, command, actions)")
	case opts.Name != "" && opts.Name != mf.Name:
		return ld.fail(abi.CodeInvalidArgument, nil, "the manifest names the module %q, the load names it %q: use one name", mf.Name, opts.Name)
	case mf.Kind != policy.KindNative:
		return ld.fail(abi.CodeBadModule, nil, "the manifest says kind %s; a native plugin's says kind: native", mf.Kind)
	case opts.Script != nil:
		return ld.fail(abi.CodeInvalidArgument, nil, "LoadOptions.Native and LoadOptions.Script exclude each other")
	case nat.Dir == "":
		return ld.fail(abi.CodeInvalidArgument, nil, "LoadOptions.Native.Dir is empty: give the plugin's directory")
	case len(nat.Source) == 0:
		return ld.fail(abi.CodeInvalidArgument, nil, "LoadOptions.Native.Source is empty: give the plugin's files as one archive (its digest and signature are of it)")
	}
	if err := ValidateModuleName(ld.name); err != nil {
		return ld.fail(abi.CodeInvalidArgument, err, "%v", err)
	}
	if len(nativeCommand(opts)) == 0 {
		return ld.fail(abi.CodeInvalidArgument, nil, "no command starts the plugin's workers: write command: in %s", policy.ManifestFile)
	}
	// A native plugin's signature is its directory's: NAME.minisig, the
	// file moat sign writes (it named NAME.wasm.minisig, a module's).
	ld.digest, ld.signed, ld.sources, ld.sigExt = Digest(nat.Source), nat.Source, nat.Source, ".minisig"
	return nil
}

// nativeCommand is the workers' argv.
func nativeCommand(opts LoadOptions) []string {
	if len(opts.Native.Command) > 0 {
		return opts.Native.Command
	}
	return opts.Manifest.Command
}

// startNative starts the plugin's first worker, confined, its file grants
// bound in.
func startNative(ctx context.Context, ld *loading) (moduleRuntime, []string, error) {
	h, m, opts, name := ld.h, ld.m, ld.opts, ld.name
	nat := opts.Native
	fail := func(code abi.Code, err error, format string, args ...any) (moduleRuntime, []string, error) {
		return nil, nil, ld.fail(code, err, format, args...)
	}
	memory := int64(m.policy.eval.Limits.Memory)
	if memory <= 0 {
		memory = DefaultNativeMemory
	}
	size := max(m.policy.eval.Limits.Concurrency, 1)
	size = min(size, native.MaxPluginWorkers)
	base := native.Spec{
		MemoryBytes: memory,
		ReadOnly:    append([]string{nat.Dir}, nat.ReadOnly...),
		WorkDir:     nat.Dir,
	}
	// The granted directories, bound into each worker's root and allowed
	// by its Landlock layer: at the directory each resolved to when it was
	// checked (files.go), so a symlink changed later cannot redirect a
	// worker started later. The kernel enforces them; the host sees no
	// change a worker makes, so they are not audited one by one.
	for _, g := range m.files.grants() {
		for _, p := range []string{g.path, g.dir.RealPath()} {
			if err := native.CheckGrant(p); err != nil {
				return fail(abi.CodeDenied, err, "filesystem %s: %v", g.path, err)
			}
		}
		if g.dir.RW() {
			base.Granted = append(base.Granted, g.dir.RealPath())
		} else {
			base.ReadOnly = append(base.ReadOnly, g.dir.RealPath())
		}
	}
	env := append([]string{"PATH=" + native.DefaultPath, "LANG=C.UTF-8"}, nat.Env...)
	workerEvent := audit.Event{Kind: audit.KindWorker, Module: name, CorrelationID: opts.CorrelationID}
	slots := h.cfg.NativeWorkers
	if opts.NativeWorkers != nil {
		slots = opts.NativeWorkers
	}
	pool, err := native.StartPlugin(ctx, native.PluginSpec{Size: size, Slots: slots, Worker: native.WorkerSpec{
		Name: name, Command: nativeCommand(opts), Env: env,
		Launch:         native.ConfinedLauncher(base),
		HealthInterval: nat.HealthInterval, HealthTimeout: nat.HealthTimeout, StartTimeout: nat.StartTimeout,
		MaxRestarts: nat.MaxRestarts, RestartWindow: nat.RestartWindow,
		Logger:   h.log.With("module", name),
		OnDenial: native.AuditDenials(h.audit, audit.Event{Module: name}),
		OnEvent: func(e native.WorkerEvent) {
			ev := workerEvent
			ev.Rule = string(e.Kind)
			ev.Decision = audit.Allow
			if e.Kind == native.EventGaveUp {
				ev.Decision = audit.Deny
			}
			ev.Reason = e.Reason
			ev.Attrs = map[string]string{"pid": fmt.Sprint(e.Pid), "slot": fmt.Sprint(e.Slot)}
			if e.Exit != "" {
				ev.Attrs["exit"] = e.Exit
			}
			h.audit.Record(context.Background(), ev)
		},
	}})
	if errors.Is(err, native.ErrNoWorkerSlots) {
		return fail(abi.CodeUnavailable, err, "%v", err)
	} else if err != nil {
		return fail(abi.CodeBadModule, err, "the plugin's worker did not start: %v", err)
	}
	return &driverRuntime{m: m, runner: nativeRunner{pool}}, pool.Actions(), nil
}

// nativeRunner puts a native plugin's workers behind driver.Runner, the interface
// the gate calls every runtime through.
type nativeRunner struct{ pool *native.PluginPool }

func (r nativeRunner) Functions() []string { return r.pool.Actions() }

func (r nativeRunner) Close(context.Context) error { return r.pool.Close() }

// Call runs the action on a worker. Its ops come back through c.Dispatch,
// the gate. A worker's failure (a crash, the OOM killer, the deadline) is
// classified by the pool; the action's own error keeps its code, as a
// WASM guest's does.
func (r nativeRunner) Call(ctx context.Context, c *driver.Call) ([]byte, error) {
	// Per caller: a worker's death during the call is this principal's
	// strike, and a principal that keeps killing workers is refused
	// (rate_limited), not the plugin given up for its whole organization.
	caller := c.Principal.Org + "\x00" + c.Principal.User
	out, err := r.pool.InvokeAs(ctx, caller, c, c.Function, c.Input, c.CorrelationID)
	if err == nil {
		return out, nil
	}
	var we *native.WorkerError
	var ae *abi.Error
	switch {
	case errors.As(err, &we):
		return nil, &Error{Code: we.Code, Reason: we.Reason, Err: err}
	case errors.As(err, &ae):
		return nil, guestFailure("", "", ae.Code, ae.Message, ae)
	}
	return nil, &Error{Code: abi.CodeInternal, Reason: err.Error(), Err: err}
}
