package host

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/driver"
	"github.com/moat-sandbox/moat/host/grantfs"
	"github.com/moat-sandbox/moat/host/transport"
	"github.com/moat-sandbox/moat/internal/wasmlimit"
	"github.com/moat-sandbox/moat/policy"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"
)

// RunRequest runs a WASI command module once, on a fresh instance.
type RunRequest struct {
	Stdin          io.Reader // nil: empty
	Stdout, Stderr io.Writer // nil: discarded
	Args           []string  // after argv[0], which is the module name
	Env            map[string]string
	Principal      policy.Principal
	CorrelationID  string
	// Action is what the run's log lines, ops and audit events name as
	// the action: an interpreted plugin's action, whose script the
	// interpreter command runs. Default _start.
	Action string
	// Limits override the module's. MaxOutputBytes caps stdout and stderr
	// each; a command that writes more is stopped with output_too_large.
	Limits Limits
	// Mounts are the host directories the command sees in its WASI
	// filesystem (an interpreter's script directory, say). Nothing is
	// mounted by default: a command without mounts has no files at all.
	Mounts []Mount
	// FS, when set, is added after Mounts: a filesystem the caller builds
	// itself, such as one carrying a device file for the op table.
	FS func(wazero.FSConfig) wazero.FSConfig
	// Ops gives the command the op table through the device-file
	// transport: transport.DevicePath (/dev/moat/ops) appears in its
	// filesystem and $MOAT_OPS names it. Interpreters (QuickJS, CPython),
	// whose binaries cannot import moat.call, write one JSON request line
	// to it and read one reply line per op. The ops run for Principal,
	// under the module's grants and with the same audit as moat.call.
	Ops bool
	// Scratch, when set, is the run's writable working directory,
	// mounted at ScratchGuestPath ("/") under its quota (scratch.go).
	Scratch *Scratch
	// Entry, for a module loaded with a Snapshot, is the code a run
	// started from its image runs (CPython source for python.wasm): the
	// run then starts there when its file system is the capture's, and
	// from _start, with Args, otherwise (RunResult.FromSnapshot says
	// which). The code carries what the image cannot: the run's
	// arguments and environment.
	Entry string
}

// CacheDir is the directory of the host's compilation cache. Drivers that
// need a wazero runtime of their own, for a guest importing modules this
// host does not provide (the Ruby interpreter's reactor), keep its machine
// code there too, so it is compiled once per machine, not once per process.
func (h *Host) CacheDir() string { return h.cacheDir }

// InterpreterEnv is what an interpreter with a wazero runtime of its own
// (a driver.Interpreter; Ruby's, which runs commands in it too) shares
// with the host: its compilation cache directory, its WASI and its sleep.
func (h *Host) InterpreterEnv() driver.InterpreterEnv {
	return driver.InterpreterEnv{CacheDir: h.cacheDir, MachineCacheDir: h.machineDir, InstantiateWASI: instantiateWASI, Nanosleep: nanosleep}
}

// Mount exposes HostDir at GuestPath inside a command's WASI filesystem.
type Mount struct {
	HostDir   string
	GuestPath string
	ReadOnly  bool
	// Granted serves the directory as a plugin's file grant is served
	// (package grantfs): every name resolved beneath it by os.Root, so no
	// symlink or ".." leads out; a read-only one refuses every change
	// before the kernel sees it; each change of a read-write one, and each
	// refusal, is an audit event of the run. For a directory a user hands
	// a run (moat exec --dir), where a mount of moat's own files (an
	// interpreter's library) needs none of that. A directory reaching
	// moat's data or cache directory is refused. A resident script's
	// granted mount is opened once at load and served to each of its
	// instances as the module's file grants are (files.go).
	Granted bool
	// MaxBytes and MaxFiles bound what a guest keeps in a Granted,
	// read-write mount of a resident script (grantfs.Quota: what its
	// changes add, counted from its load); zero is no bound.
	MaxBytes, MaxFiles int64
	// Content names what the directory holds when its caller knows it
	// (a digest of the files it wrote there: an interpreted plugin's
	// sources at /src). A snapshot image is named by it instead of by
	// HostDir, which may be a fresh temporary directory for each load
	// (moat run's), so that the next load of the same files starts from
	// the image. Empty: the image is named by HostDir.
	Content string
}

// RunResult is how a command ended. A non-zero exit code is a result, not
// an error: the command ran and said it failed.
type RunResult struct {
	ExitCode uint32
	Duration time.Duration
	// PeakMemoryBytes is the size the guest's linear memory reached (a
	// WebAssembly memory grows and never shrinks, so its final size is
	// its peak). It is set on failed runs too, with their *Error.
	PeakMemoryBytes uint64
	// FromSnapshot says the run started from the module's snapshot
	// (RunRequest.Entry), not from _start.
	FromSnapshot bool
	// ScratchFull names the limit of RunRequest.Scratch's quota a change
	// of the run was refused for ("bytes" or "files"; the guest got
	// ENOSPC), or is empty.
	ScratchFull string
}

// Run executes a WASI command's _start with the given stdio, args and env.
// Timeouts, memory limits, output caps and traps are *Error values; an
// exit code (zero or not) is a RunResult. The run has a host budget of its
// own (Limits.Budget, see package budget), like an invocation.
func (m *Module) Run(ctx context.Context, req RunRequest) (res RunResult, err error) {
	fail := func(code abi.Code, err error, format string, args ...any) (RunResult, error) {
		return RunResult{}, &Error{Module: m.name, Code: code, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	cmd, ok := m.rt.(commandRunner)
	if !ok {
		return fail(abi.CodeNoSuchAction, nil, "the module is a plugin, not a WASI command: name an action (%s)", strings.Join(m.acts.names, ", "))
	}
	if err := req.Principal.Validate(); err != nil {
		return fail(abi.CodeInvalidArgument, err, "%v", err)
	}
	lim := req.Limits.Or(m.limits)
	if err := validateLimits(lim); err != nil {
		return fail(abi.CodeInvalidArgument, err, "%v", err)
	}
	if err := checkEnv(req.Env); err != nil {
		return fail(abi.CodeInvalidArgument, err, "%v", err)
	}

	if req.Action == "" {
		req.Action = abi.ExportStart
	}
	// The run's host budget, as Module.invoke makes one: what the device
	// file, log.write and the audit trail hold or write for the command
	// is charged to it, and its first hit of each limit is audited.
	ireq := &Request{Action: req.Action, Principal: req.Principal, CorrelationID: req.CorrelationID}
	ctx = m.withBudget(ctx, ireq, lim)
	start := time.Now()
	defer func() { m.auditInvocation(ctx, ireq, start, err) }()
	return cmd.run(ctx, req, lim)
}

// run runs the command once on a fresh instance, under lim. confirmed
// lets sensitive ops run; needsConfirm names the first one refused for
// want of a confirmation.
func (m *Module) run(ctx context.Context, req RunRequest, lim Limits, confirmed bool) (res RunResult, needsConfirm string, err error) {
	errAction := req.Action // a plain command's errors name no action
	if errAction == abi.ExportStart {
		errAction = ""
	}
	fail := func(code abi.Code, err error, format string, args ...any) (RunResult, string, error) {
		return RunResult{}, "", &Error{Module: m.name, Action: errAction, Code: code, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	cctx, cancel := context.WithTimeout(ctx, lim.Timeout)
	defer cancel()
	over := wasmlimit.NewOutputCap(cancel)
	stdout := over.Writer(orDiscard(req.Stdout), "stdout", lim.MaxOutputBytes)
	stderr := over.Writer(orDiscard(req.Stderr), "stderr", lim.MaxOutputBytes)
	if err := m.checkInitialMemory(lim); err != nil {
		e := err.(*Error)
		e.Action = errAction
		return RunResult{}, "", e
	}
	// stdin and sleeps end with the run (sleep.go).
	stdin := stdinFor(cctx, req.Stdin)

	inst := &instance{invocation: invocation{m: m, env: m.newEnv(), confirmed: confirmed, epoch: 1}}
	var scratchDir *grantfs.Dir
	inst.env.Begin(cctx, req.Action, req.Principal, req.CorrelationID)
	inst.sess.Begin(inst) // commands may import moat too
	alloc := newLimitedMemory(lim)

	mc := m.commandConfig(req.Args, req.Env, stdout, stderr, func() context.Context { return cctx }).WithStdin(stdin)
	if _, set := req.Env[transport.DeviceEnv]; req.Ops && !set {
		mc = mc.WithEnv(transport.DeviceEnv, transport.DevicePath)
	}
	if len(req.Mounts) > 0 || req.FS != nil || req.Ops || m.files != nil || req.Scratch != nil {
		fsc := wazero.NewFSConfig()
		if req.Scratch != nil {
			d, err := openScratch(*req.Scratch)
			if err != nil {
				return fail(abi.CodeInvalidArgument, err, "%v", err)
			}
			defer d.Close()
			defer func() { res.ScratchFull = d.QuotaHit() }()
			scratchDir = d
		}
		for _, mt := range req.Mounts {
			if err := checkMount(mt); err != nil {
				return fail(abi.CodeInvalidArgument, err, "%v", err)
			}
			switch {
			case mt.Granted:
				d, err := m.host.openGrantedMount(mt)
				if err != nil {
					return fail(abi.CodeDenied, err, "%v", err)
				}
				defer d.Close()
				g := fileGrant{path: mt.GuestPath, dir: d}
				fsc = fsc.(sysfs.FSConfig).WithSysFSMount(d.FS(&fileAuditor{inv: &inst.invocation, grant: g}), mt.GuestPath)
			default:
				fsc = dirMount(fsc, mt)
			}
		}
		if scratchDir != nil {
			// After the mounts, where a snapshot's capture has it
			// (mountCaptureScratch).
			fsc = mountScratch(fsc, scratchDir, &inst.invocation)
		}
		if req.FS != nil {
			fsc = req.FS(fsc)
		}
		if m.files != nil {
			// The granted directories (files.go), beside the mounts,
			// which they may not overlap.
			if err := m.checkGuestPaths(req.Mounts); err != nil {
				return fail(abi.CodeInvalidArgument, err, "%v", err)
			}
			if !m.files.acquire() {
				return fail(abi.CodeUnavailable, nil, "the module was closed")
			}
			defer m.files.release()
			fsc = m.mountFileGrants(fsc, &inst.invocation)
		}
		if req.Ops {
			fsc = transport.NewDevice(cctx, inst).Mount(fsc)
		}
		mc = mc.WithFSConfig(fsc)
	}
	img := m.imageFor(ctx, req, lim)
	if img != nil && img.IsShared() {
		alloc.UseMapping(uint64(img.Pages) * 65536) // the image mapped, not copied (enterImage)
	}
	runStart := time.Now()
	actx := inst.sess.Attach(experimental.WithMemoryAllocator(cctx, alloc))
	mod, err := m.host.runtime.InstantiateModule(actx, m.code.cm, mc)
	switch {
	case err != nil:
	case img != nil:
		alloc.KeepWhile(mod)
		err = m.enterImage(actx, mod, img, req.Entry, alloc)
	default:
		err = startModule(actx, mod, abi.ExportStart)
	}
	took := time.Since(runStart)
	inst.sess.End()
	if mod != nil {
		_ = mod.Close(context.Background())
	}
	inst.mem = alloc

	peak, needsConfirm := inst.mem.Peak(), inst.needsConfirm
	failed := func(code abi.Code, err error, format string, args ...any) (RunResult, string, error) {
		return RunResult{Duration: took, PeakMemoryBytes: peak}, needsConfirm,
			&Error{Module: m.name, Action: errAction, Code: code, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	var exit *sys.ExitError
	switch {
	case over.Exceeded() != "":
		// First, whatever the command did next: a program that ignores
		// the write error and exits cleanly before the cancellation
		// reaches it still lost output, and a truncated output reported
		// as a success is a wrong answer nobody can see.
		return failed(abi.CodeOutputTooLarge, err, "%s exceeded %d bytes; the command was stopped", over.Exceeded(), lim.MaxOutputBytes)
	case err == nil:
		// A grow refused during the run that the guest survived is its
		// business; only an initial memory over the limit fails the run.
		if inst.mem.InitialHit() {
			return failed(abi.CodeMemoryLimit, nil, "the module's initial memory exceeds the limit of %d pages (%d MiB)", lim.MemoryLimitPages, lim.MemoryLimitPages/16)
		}
		return RunResult{ExitCode: 0, Duration: took, PeakMemoryBytes: peak, FromSnapshot: img != nil}, needsConfirm, nil
	case inst.mem.Hit():
		return failed(abi.CodeMemoryLimit, err, "the guest tried to grow its memory past the limit of %d pages (%d MiB)", lim.MemoryLimitPages, lim.MemoryLimitPages/16)
	case inst.sess.Fault() != nil:
		return failed(abi.CodeGuestFault, inst.sess.Fault(), "%s", inst.sess.Fault().Error())
	case isDeadline(err, cctx):
		return failed(abi.CodeTimeout, err, "did not finish within %s", lim.Timeout)
	case errors.As(err, &exit) && exit.ExitCode() == sys.ExitCodeContextCanceled:
		return failed(abi.CodeCanceled, err, "the caller canceled the run")
	case errors.As(err, &exit):
		return RunResult{ExitCode: exit.ExitCode(), Duration: took, PeakMemoryBytes: peak, FromSnapshot: img != nil}, needsConfirm, nil
	default:
		return failed(abi.CodeTrap, err, "%s", firstLine(err))
	}
}

// commandConfig is the module configuration of a run of m as a WASI
// command: argv (the module's name, then args), env in name order, the
// output streams, the clocks, sleeps that end with the context sleepCtx
// returns, crypto randomness, and no start functions: the host runs them
// itself, under the run's context (interrupt.go). Stdin and the file
// system are the caller's to add.
func (m *Module) commandConfig(args []string, env map[string]string, stdout, stderr io.Writer, sleepCtx func() context.Context) wazero.ModuleConfig {
	mc := wazero.NewModuleConfig().
		WithName("").
		WithArgs(append([]string{m.name}, args...)...).
		WithStdout(stdout).WithStderr(stderr).
		WithSysWalltime().WithSysNanotime().
		WithNanosleep(nanosleep(sleepCtx)).
		WithRandSource(rand.Reader).
		WithStartFunctions()
	for _, k := range slices.Sorted(maps.Keys(env)) {
		mc = mc.WithEnv(k, env[k])
	}
	return mc
}

// dirMount adds mt, a host directory, to fsc: read-only or read-write.
func dirMount(fsc wazero.FSConfig, mt Mount) wazero.FSConfig {
	if mt.ReadOnly {
		return fsc.WithReadOnlyDirMount(mt.HostDir, mt.GuestPath)
	}
	return fsc.WithDirMount(mt.HostDir, mt.GuestPath)
}

// checkEnv refuses environment variable names a WASI environment cannot
// carry.
func checkEnv(env map[string]string) error {
	for k := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("environment variable name %q is invalid (empty, or contains '=' or NUL)", k)
		}
	}
	return nil
}

// checkMount refuses a mount without a host directory or with a relative
// guest path.
func checkMount(mt Mount) error {
	if mt.HostDir == "" || !strings.HasPrefix(mt.GuestPath, "/") {
		return fmt.Errorf("mount %q at %q: want a host directory and an absolute guest path", mt.HostDir, mt.GuestPath)
	}
	return nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
