package languages

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/toolchains"
)

// AnonymousPrincipal runs a job whose request names no principal (the
// CLI's local runs); audit records carry it.
var AnonymousPrincipal = policy.Principal{User: "anonymous", Org: "local"}

// Checker is implemented by a language that needs a toolchain or an
// interpreter WASM: Available returns nil when it can build and run, else
// an error saying what is missing and how to get it.
type Checker interface {
	Available() error
}

// ExecutorConfig configures an Executor.
type ExecutorConfig struct {
	// Host runs the WASM artifacts (its runtime, compilation cache, store
	// and profile apply). Required.
	Host *host.Host
	// Audit records native runs: each denial a kernel layer made, then
	// the run (WASM runs are recorded by Host as they run). Give the
	// trail the host records to (host.Config.Audit), so a job's events
	// are in one place. nil: native runs are not recorded.
	Audit *audit.Log
	// BuildCacheDir holds build artifacts by content hash. Required.
	BuildCacheDir string
	// BuildCacheMaxBytes bounds the build cache on disk: past it, the
	// least recently used builds are removed. 0 means
	// DefaultBuildCacheMaxBytes; negative, no bound.
	BuildCacheMaxBytes int64
	// StateDir holds the languages' persistent state (see
	// BuildEnv.StateDir). Default: BuildCacheDir/state.
	StateDir string
	// MachineStateDir holds what the languages build from their
	// toolchains alone, for every data directory of the machine (see
	// BuildEnv.MachineStateDir; moat gives toolchains.StateDir()). Empty:
	// StateDir keeps it, built again for each data directory.
	MachineStateDir string
	// ToolchainDir overrides toolchains.Dir().
	ToolchainDir string
	// Limits are the defaults for requests that leave a limit at zero.
	// Zero fields take DefaultExecLimits.
	Limits ExecLimits
	// MaxCompileTimeout bounds a build whoever waits for it: builds are
	// shared between the jobs that ask for the same one at once, so a
	// build runs under a context of the executor's, not of any job's,
	// and ends when its last waiter has given up (each waits under its
	// own compile timeout) or at this bound. Default
	// DefaultMaxCompileTimeout; it is raised to Limits.CompileTimeout if
	// that is larger.
	MaxCompileTimeout time.Duration
}

// DefaultMaxCompileTimeout is ExecutorConfig.MaxCompileTimeout's default:
// above any compile timeout a request should need, below a build left
// running for good.
const DefaultMaxCompileTimeout = 10 * time.Minute

// DefaultExecLimits apply where neither the request nor the executor's
// configuration sets a limit.
var DefaultExecLimits = ExecLimits{
	Timeout:        10 * time.Second,
	CompileTimeout: 60 * time.Second,
	MemoryBytes:    256 << 20,
	MaxOutputBytes: 1 << 20,
	ScratchBytes:   host.DefaultScratchBytes,
	ScratchFiles:   host.DefaultScratchFiles,
}

func (l ExecLimits) or(d ExecLimits) ExecLimits {
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	if l.CompileTimeout <= 0 {
		l.CompileTimeout = d.CompileTimeout
	}
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.MaxOutputBytes <= 0 {
		l.MaxOutputBytes = d.MaxOutputBytes
	}
	if l.ScratchBytes <= 0 {
		l.ScratchBytes = d.ScratchBytes
	}
	if l.ScratchFiles <= 0 {
		l.ScratchFiles = d.ScratchFiles
	}
	return l
}

// Executor runs code-execution jobs: Lookup → Validate → Build (cached) →
// Run. It is safe for concurrent use; concurrent jobs with the same source
// share one build.
type Executor struct {
	cfg    ExecutorConfig
	cache  *BuildCache
	limits ExecLimits

	flightMu sync.Mutex
	flight   map[string]*buildCall

	modMu   sync.Mutex
	modules map[wasmID]*host.Module
}

// wasmID identifies WASM bytes by their backing array, so the executor
// hashes a 26 MB interpreter once per process rather than once per run.
// Artifacts from the cache and from an interpreted language's Build share
// their bytes, so the same interpreter keeps one identity.
type wasmID struct {
	p *byte
	n int
}

// buildCall is one build in flight, shared by the jobs waiting for it.
// It runs under a context of the executor's (ctx), never a job's: one
// job's deadline or disconnect must not fail another's build. waiters
// counts the jobs still waiting; when the last one leaves before the
// build is done, the build is canceled and forgotten, so the next job
// asking for it starts afresh rather than inheriting a cancellation.
type buildCall struct {
	done    chan struct{}
	a       *Artifact
	err     error
	waiters int // under Executor.flightMu
	cancel  context.CancelFunc
}

// NewExecutor prepares an executor. It creates the cache directories.
func NewExecutor(cfg ExecutorConfig) (*Executor, error) {
	if cfg.Host == nil {
		return nil, errors.New("languages: executor: no Host configured")
	}
	if cfg.BuildCacheDir == "" {
		return nil, errors.New("languages: executor: no BuildCacheDir configured")
	}
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(cfg.BuildCacheDir, "state")
	}
	if cfg.ToolchainDir == "" {
		cfg.ToolchainDir = toolchains.Dir()
	}
	c, err := OpenBuildCache(cfg.BuildCacheDir)
	if err != nil {
		return nil, fmt.Errorf("languages: executor: %w", err)
	}
	if cfg.BuildCacheMaxBytes != 0 {
		c.SetMaxBytes(cfg.BuildCacheMaxBytes)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("languages: executor: state dir: %w", err)
	}
	lim := cfg.Limits.or(DefaultExecLimits)
	if cfg.MaxCompileTimeout <= 0 {
		cfg.MaxCompileTimeout = DefaultMaxCompileTimeout
	}
	cfg.MaxCompileTimeout = max(cfg.MaxCompileTimeout, lim.CompileTimeout)
	return &Executor{cfg: cfg, cache: c, limits: lim,
		flight: map[string]*buildCall{}, modules: map[wasmID]*host.Module{}}, nil
}

// LanguageStatus is one row of `moat langs`.
type LanguageStatus struct {
	Info
	Available bool   `json:"available"`
	Missing   string `json:"missing,omitempty"` // what to install, when not available
}

// Languages lists every registered language and whether it can run here.
func (e *Executor) Languages() []LanguageStatus { return Statuses() }

// Statuses lists every registered language and whether it can run here.
func Statuses() []LanguageStatus {
	var out []LanguageStatus
	for _, l := range All() {
		s := LanguageStatus{Info: l.Info(), Available: true}
		if c, ok := l.(Checker); ok {
			if err := c.Available(); err != nil {
				s.Available, s.Missing = false, err.Error()
			}
		}
		if err := nativeUsable(s.Info); s.Available && err != nil {
			s.Available, s.Missing = false, err.Error()
		}
		out = append(out, s)
	}
	return out
}

// Exec runs one job. A program that fails, is refused or hits a limit is
// an ExecResult with a Status; the error is for moat's own failures (a
// toolchain missing, the disk full, the caller's context canceled).
func (e *Executor) Exec(ctx context.Context, req ExecRequest) (*ExecResult, error) {
	res := &ExecResult{Language: req.Language}
	lang, err := Lookup(req.Language)
	if err != nil {
		res.Status, res.Message = StatusInvalid, err.Error()
		res.Violations = []Violation{{Rule: "language", Message: err.Error()}}
		return res, nil
	}
	info := lang.Info()
	res.Language, res.Version = info.Name, info.Version
	if vs := e.validate(lang, req); len(vs) > 0 {
		res.Status, res.Violations = StatusInvalid, vs
		res.Message = fmt.Sprintf("%d problem(s) with the submission; first: %s", len(vs), vs[0])
		return res, nil
	}
	if c, ok := lang.(Checker); ok {
		if err := c.Available(); err != nil {
			return nil, fmt.Errorf("exec %s: %w", info.Name, err)
		}
	}
	if err := nativeUsable(info); err != nil {
		return nil, fmt.Errorf("exec %s: %w", info.Name, err)
	}
	lim := req.Limits.or(e.limits)

	began := time.Now()
	art, cached, err := e.build(ctx, lang, req.Source, lim, req.Preparing)
	res.CompileTime, res.BuildCached = time.Since(began), cached
	if !cached {
		e.auditBuild(ctx, req, res.CompileTime, err)
	}
	var ce *CompileError
	var le *BuildLimitError
	switch {
	case errors.As(err, &ce):
		res.Status, res.CompileOutput = StatusCompileError, ce.Output
		res.Message = "the compiler refused the source; see compile_output"
		return res, nil
	case errors.As(err, &le):
		res.Status, res.Message = le.Status, "compile stage: "+le.Error()
		return res, nil
	case err != nil:
		e.auditSurvivors(ctx, req, "build", err)
		if ctx.Err() != nil && !errors.As(err, new(*native.SurvivorsError)) {
			return nil, fmt.Errorf("exec %s: %w", info.Name, ctx.Err())
		}
		return nil, fmt.Errorf("exec %s: %w", info.Name, err)
	}
	if art.BuildLog != "" {
		res.CompileOutput = art.BuildLog
	}
	if err := e.run(ctx, lang, art, req, lim, res); err != nil {
		e.auditSurvivors(ctx, req, "run", err)
		return nil, fmt.Errorf("exec %s: %w", info.Name, err)
	}
	return res, nil
}

// validate runs the generic checks and then the language's, dropping the
// language's repeats of generic violations. The generic checks run first
// and alone when they fail: a language's own checks may assume clean
// names, and unsafe names must never reach the disk.
func (e *Executor) validate(l Language, req ExecRequest) []Violation {
	common := ValidateCommon(req.Source, req.Validation)
	if len(common) > 0 {
		return common
	}
	var out []Violation
	for _, v := range l.Validate(req.Source, req.Validation) {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	if err := ValidateFilesOut(req.FilesOut); err != nil {
		out = append(out, Violation{Rule: "files_out", Message: err.Error()})
	}
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			out = append(out, Violation{Rule: "env", Message: fmt.Sprintf("environment variable name %q is invalid: use a non-empty name without '=' or NUL", k)})
		}
	}
	return out
}

// build returns the artifact for src, from the cache or by building it
// (once, however many jobs ask at the same time).
//
// The build itself runs under the executor's context (see buildCall),
// bounded by MaxCompileTimeout; each job waits for it under its own
// context and its own compile timeout. So a job's 1 ms compile timeout
// or its client's disconnect ends that job's wait, with its own timeout
// or cancellation, and never the build another job is waiting for; and
// what a build ends with is only ever the build's own outcome (the
// artifact, a compile error, a tool's limit, the executor's bound).
func (e *Executor) build(ctx context.Context, l Language, src Source, lim ExecLimits, preparing func(string) func()) (*Artifact, bool, error) {
	key := BuildKey(l, src)
	if a, ok := e.cache.Get(key); ok {
		return a, true, nil
	}
	if preparing != nil {
		defer preparing("build")()
	}
	e.flightMu.Lock()
	c, joined := e.flight[key]
	if !joined {
		bctx, cancel := context.WithCancel(context.Background())
		c = &buildCall{done: make(chan struct{}), cancel: cancel}
		e.flight[key] = c
		go e.runBuild(bctx, key, c, l, src)
	}
	c.waiters++
	e.flightMu.Unlock()

	wctx, cancel := context.WithTimeout(ctx, lim.CompileTimeout)
	defer cancel()
	select {
	case <-c.done:
	case <-wctx.Done():
	}
	if e.leave(key, c) {
		// This job canceled the build: it reports once the build has
		// ended, that is once the compiler's processes are dead and its
		// cgroup removed (native.Run returns only then). A job that
		// reported at once would let its caller exit (moat exec) in
		// the middle of that kill, leaving the compiler frozen in its
		// cgroup for good. A compiler that survived the kill is the
		// job's error, not its timeout.
		<-c.done
		var se *native.SurvivorsError
		if errors.As(c.err, &se) {
			return nil, false, c.err
		}
	} else {
		select {
		case <-c.done: // done, even if this job's wait ended at the same time
			if c.err != nil {
				return nil, false, c.err
			}
			return c.a, joined, nil
		default:
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	return nil, false, &BuildLimitError{Status: StatusTimeout, Tool: l.Info().Name, Reason: fmt.Sprintf("compile time limit %s passed", lim.CompileTimeout)}
}

// leave ends one job's wait for c. The last job to leave a build still
// running cancels it, and takes it out of the flight map at once, so a
// job arriving later starts a build of its own; it reports true, and must
// wait for c.done before it reports.
func (e *Executor) leave(key string, c *buildCall) (canceled bool) {
	e.flightMu.Lock()
	defer e.flightMu.Unlock()
	c.waiters--
	if c.waiters > 0 {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		if e.flight[key] == c {
			delete(e.flight, key)
		}
		c.cancel()
		return true
	}
}

// runBuild builds src for the jobs waiting on c, under ctx (the
// executor's) and MaxCompileTimeout, and stores a success in the cache.
// A failure is not stored: the next job to ask builds again.
func (e *Executor) runBuild(ctx context.Context, key string, c *buildCall, l Language, src Source) {
	a, err := e.buildNow(ctx, l, src, e.cfg.MaxCompileTimeout)
	if err == nil {
		err = e.cache.Put(key, a)
	}
	e.flightMu.Lock()
	if e.flight[key] == c {
		delete(e.flight, key)
	}
	c.a, c.err = a, err
	if err != nil {
		c.a = nil
	}
	e.flightMu.Unlock()
	close(c.done)
	c.cancel()
}

// Building reports how many builds are in flight: each is shared by the
// jobs waiting for it.
func (e *Executor) Building() int {
	e.flightMu.Lock()
	defer e.flightMu.Unlock()
	return len(e.flight)
}

// buildNow runs the language's Build under timeout. ctx is the
// executor's; a build that runs past timeout is a BuildLimitError naming
// MaxCompileTimeout, the bound it passed.
func (e *Executor) buildNow(ctx context.Context, l Language, src Source, timeout time.Duration) (*Artifact, error) {
	work, err := os.MkdirTemp("", "moat-build-")
	if err != nil {
		return nil, fmt.Errorf("build dir: %w", err)
	}
	defer os.RemoveAll(work)
	state := filepath.Join(e.cfg.StateDir, l.Info().Name)
	if err := os.MkdirAll(state, 0o755); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	env := BuildEnv{WorkDir: work, ToolchainDir: e.cfg.ToolchainDir, StateDir: state}
	if e.cfg.MachineStateDir != "" {
		env.MachineStateDir = filepath.Join(e.cfg.MachineStateDir, l.Info().Name)
	}
	a, err := l.Build(bctx, env, src)
	if err != nil {
		if ctx.Err() == nil && bctx.Err() != nil {
			var le *BuildLimitError
			var ce *CompileError
			if !errors.As(err, &le) && !errors.As(err, &ce) {
				return nil, &BuildLimitError{Status: StatusTimeout, Tool: l.Info().Name,
					Reason: fmt.Sprintf("compile time limit %s passed (the executor's bound on any build, MaxCompileTimeout)", timeout)}
			}
		}
		return nil, err
	}
	if a == nil {
		return nil, fmt.Errorf("%s: Build returned no artifact", l.Info().Name)
	}
	return a, nil
}

// run executes the artifact and fills res.
func (e *Executor) run(ctx context.Context, l Language, a *Artifact, req ExecRequest, lim ExecLimits, res *ExecResult) error {
	env := map[string]string{}
	maps.Copy(env, a.Env)
	maps.Copy(env, req.Env)

	var srcDir string
	if len(a.Files) > 0 {
		d, err := os.MkdirTemp("", "moat-src-")
		if err != nil {
			return fmt.Errorf("source dir: %w", err)
		}
		defer os.RemoveAll(d)
		// Readable by the job uid, writable by nobody but moat: the
		// program sees its sources read-only.
		if err := os.Chmod(d, 0o755); err != nil {
			return err
		}
		if err := WriteSource(d, a.Files); err != nil {
			return err
		}
		srcDir = d
	}

	if a.Kind != ArtifactNative && (len(req.Files) > 0 || req.WorkDir != "") {
		return fmt.Errorf("files and a working directory are for native runs; a %s run takes directories as mounts", l.Info().Name)
	}
	var scratch *host.Scratch
	if a.Kind != ArtifactNative {
		d, err := newScratch()
		if err != nil {
			return err
		}
		// Removed whatever the run ends with: it runs in this process.
		defer os.RemoveAll(d)
		// Made by moat a moment ago, so nothing in it is the guest's yet.
		if err := WriteSource(d, req.WorkFiles); err != nil {
			return err
		}
		scratch = scratchOf(d, lim)
		defer func() {
			if res.ScratchFull != "" {
				note := scratchNote(res.ScratchFull, lim)
				if res.Message == "" {
					res.Message = note
				} else {
					res.Message += " (" + note + ")"
				}
			}
		}()
		if len(req.FilesOut) > 0 {
			defer func() {
				files, err := collectFiles(d, req.FilesOut, lim.MaxOutputBytes)
				res.Files = files
				if err != nil && res.Message == "" {
					res.Message = err.Error()
				}
			}()
		}
	} else if len(req.FilesOut) > 0 {
		res.Status = StatusInvalid
		res.Message = "files_out: a " + l.Info().Name + " run is native: its working directory ends with it, and files_out is for WASM runs; print what you need to stdout"
		res.Violations = []Violation{{Rule: "files_out", Message: res.Message}}
		return nil
	}
	if r, ok := l.(ArtifactRunner); ok {
		if len(req.Mounts) > 0 {
			return fmt.Errorf("a %s run gets no host directories; run it without --dir and --file", l.Info().Name)
		}
		began := time.Now()
		out, err := r.RunArtifact(ctx, RunEnv{Host: e.cfg.Host, Preparing: req.Preparing}, a, RunInput{Stdin: req.Stdin, Args: req.Args, Env: env, Limits: lim, SrcDir: srcDir, Scratch: scratch, Output: req.Output})
		res.RunTime = time.Since(began)
		if out != nil {
			res.Stdout, res.Stderr, res.ExitCode, res.PeakMemory = out.Stdout, out.Stderr, out.ExitCode, out.PeakMemory
			res.ScratchFull = out.ScratchFull
		}
		return e.wasmOutcome(ctx, err, res)
	}
	switch a.Kind {
	case ArtifactWASM, ArtifactInterpreted:
		if a.Kind == ArtifactInterpreted && srcDir == "" && len(a.Files) > 0 {
			return errors.New("interpreted artifact without a source dir")
		}
		return e.runWASM(ctx, l, a, req, lim, env, srcDir, scratch, res)
	case ArtifactNative:
		return e.runNative(ctx, l, a, req, lim, env, srcDir, res)
	default:
		return fmt.Errorf("artifact kind %q is not one of %s, %s, %s", a.Kind, ArtifactWASM, ArtifactInterpreted, ArtifactNative)
	}
}

func (e *Executor) runWASM(ctx context.Context, l Language, a *Artifact, req ExecRequest, lim ExecLimits, env map[string]string, srcDir string, scratch *host.Scratch, res *ExecResult) error {
	// A submission's own build is one-off: its machine code is not
	// shared through the store (host.LoadOptions.LocalCode); an
	// interpreter's is, and is the same for every run.
	var snap *host.Snapshot
	sn, snaps := l.(Snapshotter)
	if snaps && a.Kind == ArtifactInterpreted {
		snap = sn.Snapshot(a)
	}
	m, err := e.module(ctx, l, a.WASM, a.Kind == ArtifactWASM, snap, req.Preparing)
	if err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	who := req.Principal
	if who.User == "" && who.Org == "" {
		who = AnonymousPrincipal
	}
	rr := host.RunRequest{
		Stdin: bytes.NewReader(req.Stdin), Stdout: OutputTee(&stdout, "stdout", req.Output), Stderr: OutputTee(&stderr, "stderr", req.Output),
		Args: append(append([]string{}, a.Args...), req.Args...), Env: env,
		Principal: who, CorrelationID: req.CorrelationID,
		Limits:  host.Limits{Timeout: lim.Timeout, MemoryLimitPages: pages(lim.MemoryBytes), MaxOutputBytes: int(lim.MaxOutputBytes)},
		Scratch: scratch,
	}
	rr.Mounts = a.RunMounts(srcDir)
	for _, mt := range req.Mounts {
		if filepath.Clean(mt.GuestPath) == host.ScratchGuestPath {
			return fmt.Errorf("mount %s at /: the run's working directory, its scratch directory, is there; give another guest path, e.g. %s:/data", mt.HostDir, mt.HostDir)
		}
		for _, own := range rr.Mounts {
			if pathWithin(mt.GuestPath, own.GuestPath) || pathWithin(own.GuestPath, mt.GuestPath) {
				return fmt.Errorf("mount %s at %s: it overlaps %s, where the run's own files are; give another guest path", mt.HostDir, mt.GuestPath, own.GuestPath)
			}
		}
		mt.Granted = true
		rr.Mounts = append(rr.Mounts, mt)
	}
	if snap != nil {
		rr.Entry, _ = sn.EntryCode(a, req.Args, env)
	}
	began := time.Now()
	out, err := m.Run(ctx, rr)
	res.RunTime = time.Since(began)
	if err == nil {
		res.RunTime = out.Duration
	}
	res.PeakMemory, res.ScratchFull = out.PeakMemoryBytes, out.ScratchFull
	res.Stdout, res.Stderr, res.ExitCode = stdout.Bytes(), stderr.Bytes(), int(out.ExitCode)
	return e.wasmOutcome(ctx, err, res)
}

// wasmOutcome maps a WASM run's error (a *host.Error, or nil) to a status.
func (e *Executor) wasmOutcome(ctx context.Context, err error, res *ExecResult) error {
	if err == nil {
		if res.ExitCode == 0 {
			res.Status = StatusOK
		} else {
			res.Status, res.Message = StatusRuntimeError, fmt.Sprintf("the program exited with status %d", res.ExitCode)
		}
		return nil
	}
	var he *host.Error
	if !errors.As(err, &he) {
		return err
	}
	res.Message = he.Reason
	switch he.Code {
	case abi.CodeTimeout:
		res.Status = StatusTimeout
	case abi.CodeMemoryLimit:
		res.Status = StatusMemoryLimit
	case abi.CodeOutputTooLarge:
		res.Status = StatusOutputLimit
	case abi.CodeTrap, abi.CodeGuestFault:
		res.Status, res.ExitCode = StatusRuntimeError, -1
	case abi.CodeCanceled:
		return fmt.Errorf("run: %w", context.Cause(ctx))
	default:
		return err
	}
	return nil
}

// module loads wasm on the host once per process (the host itself caches
// the machine code by digest, on disk and in memory).
func (e *Executor) module(ctx context.Context, l Language, wasm []byte, localCode bool, snap *host.Snapshot, preparing func(string) func()) (*host.Module, error) {
	if len(wasm) == 0 {
		return nil, errors.New("the artifact has no WASM")
	}
	id := wasmID{p: unsafe.SliceData(wasm), n: len(wasm)}
	e.modMu.Lock()
	m, ok := e.modules[id]
	e.modMu.Unlock()
	if ok {
		return m, nil
	}
	// The host says when the load does first-time work (FirstTime): a
	// load its compilation cache answers is no "preparing".
	// An interpreter is the machine's toolchain (host.LoadOptions.Toolchain):
	// its machine code and command image are made once per machine.
	m, err := e.cfg.Host.Load(ctx, wasm, host.LoadOptions{Name: "exec-" + l.Info().Name, Isolation: host.IsolationFresh, LocalCode: localCode, Snapshot: snap, FirstTime: preparing,
		Toolchain: !localCode})
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	e.modMu.Lock()
	defer e.modMu.Unlock()
	if len(e.modules) >= 4*memEntries {
		// The modules are cheap handles over compiled code the host keeps;
		// forgetting them only costs a re-hash on next use.
		clear(e.modules)
	}
	e.modules[id] = m
	return m, nil
}

func pages(b int64) uint32 {
	p := (b + 65535) / 65536
	if p > host.MaxMemoryLimitPages {
		p = host.MaxMemoryLimitPages
	}
	return uint32(p)
}

// NativeTuning is how a native language's run is fitted to its limits:
// a runtime that sizes itself from its command line (the JVM's heap,
// stacks and threads) rather than from the cgroup it runs in is told
// them there. Zero fields leave the executor's choice.
type NativeTuning struct {
	// Command replaces the artifact's Command for this run.
	Command []string
	// Pids is the run's process-and-thread limit (native.Spec.Pids).
	Pids int64
	// AddressSpace is the run's RLIMIT_AS (native.Spec.AddressSpace),
	// for a runtime that reserves more address space than it uses.
	AddressSpace uint64
	// Unset are variables taken out of the request's environment: a
	// runtime's own options variables (JAVA_TOOL_OPTIONS), through which
	// a request could undo the tuning.
	Unset []string
	// ReadOnly are more paths the run may read (a runtime's
	// configuration outside the system directories).
	ReadOnly []string
	// OutOfMemory is what the runtime prints (to stdout or stderr) as it ends for
	// want of the memory it was given: a failed run whose output holds
	// it is reported as StatusMemoryLimit. A program can print it too,
	// and so choose its own status: nothing more.
	OutOfMemory string
}

// NativeTuner is implemented by a native language whose runs must be told
// their limits (see NativeTuning). The executor calls it for every run;
// the build cache keeps the artifact untuned, so one build serves runs of
// any limits.
type NativeTuner interface {
	TuneNative(a *Artifact, lim ExecLimits) NativeTuning
}

func (e *Executor) runNative(ctx context.Context, l Language, a *Artifact, req ExecRequest, lim ExecLimits, env map[string]string, srcDir string, res *ExecResult) error {
	if len(a.Command) == 0 {
		return errors.New("native artifact without a command")
	}
	var tune NativeTuning
	if t, ok := l.(NativeTuner); ok {
		tune = t.TuneNative(a, lim)
	}
	command := a.Command
	if len(tune.Command) > 0 {
		command = tune.Command
	}
	if len(tune.Unset) > 0 {
		env = maps.Clone(env)
		for _, k := range tune.Unset {
			delete(env, k)
		}
	}
	cmd := make([]string, 0, len(command)+len(req.Args))
	for _, c := range command {
		// "/src:" heads a JVM class path (kotlin's: its classes, then
		// the standard library's jar).
		if srcDir != "" && (c == "/src" || strings.HasPrefix(c, "/src/") || strings.HasPrefix(c, "/src:")) {
			c = srcDir + strings.TrimPrefix(c, "/src")
		}
		cmd = append(cmd, c)
	}
	cmd = append(cmd, req.Args...)
	// HOME and TMPDIR are the job dir the runner makes: a fresh tmpfs of
	// the job's own, its size the disk limit.
	envv := []string{"PATH=" + native.DefaultPath, "LANG=C.UTF-8"}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		envv = append(envv, k+"="+env[k])
	}
	// The job dir, its working directory, is its scratch: a tmpfs of its
	// own of ScratchBytes holding at most ScratchFiles names, as a WASM
	// run's scratch directory (and so are its /tmp, /run and /dev/shm).
	spec := native.Spec{Command: cmd, Stdin: req.Stdin, Env: envv, Timeout: lim.Timeout,
		MemoryBytes: lim.MemoryBytes, MaxOutput: int(lim.MaxOutputBytes), StopAtMaxOutput: true, ExtraExec: a.ExtraExec,
		DiskBytes: lim.ScratchBytes, DiskFiles: lim.ScratchFiles, Pids: tune.Pids, AddressSpace: tune.AddressSpace}
	if srcDir != "" {
		spec.ReadOnly = []string{srcDir}
	}
	spec.ReadOnly = append(spec.ReadOnly, tune.ReadOnly...)
	if len(req.WorkFiles) > 0 {
		// Copied into the job dir as the job starts (its working
		// directory, a tmpfs of its own), from a directory only moat
		// wrote: names checked as sources' are, no links.
		seed, err := os.MkdirTemp("", "moat-seed-")
		if err != nil {
			return fmt.Errorf("work files: %w", err)
		}
		defer os.RemoveAll(seed)
		if err := WriteSource(seed, req.WorkFiles); err != nil {
			return fmt.Errorf("work files: %w", err)
		}
		spec.Seed = seed
	}
	if err := nativeMounts(&spec, req); err != nil {
		return err
	}
	var r *native.Result
	var err error
	if req.Output != nil {
		r, err = runNativeStreaming(ctx, spec, req.Output)
	} else {
		r, err = native.Run(ctx, spec)
	}
	if err != nil {
		return err
	}
	e.auditNative(ctx, req, &spec, r)
	res.Stdout, res.Stderr, res.ExitCode, res.Signal = r.Stdout, r.Stderr, r.ExitCode, r.Signal
	res.RunTime, res.PeakMemory = r.Wall, r.PeakMemory
	switch {
	case r.Status == native.StatusRefused:
		return fmt.Errorf("confinement refused the run: %s", r.Reason)
	case r.Status == native.StatusKilled && ctx.Err() != nil:
		return fmt.Errorf("run: %w", ctx.Err())
	case r.Truncated:
		// Before the deadline and the memory limit: the job is killed the
		// moment a stream passes the cap (StopAtMaxOutput), so whatever
		// else the kill looked like, the output is cut, and a cut output
		// must show in the status.
		res.Status, res.Message = StatusOutputLimit, fmt.Sprintf("the output passed %d bytes; the rest was dropped", lim.MaxOutputBytes)
		if r.Status == native.StatusTimeout || r.Status == native.StatusMemoryLimit {
			res.Message += " (" + r.Reason + ")"
		}
	case r.Status == native.StatusTimeout:
		res.Status, res.Message = StatusTimeout, r.Reason
	case r.Status == native.StatusMemoryLimit:
		res.Status, res.Message = StatusMemoryLimit, r.Reason
	case r.Status == native.StatusOK:
		res.Status = StatusOK
	case tune.OutOfMemory != "" && (bytes.Contains(r.Stderr, []byte(tune.OutOfMemory)) || bytes.Contains(r.Stdout, []byte(tune.OutOfMemory))):
		res.Status, res.Message = StatusMemoryLimit, "the program ran out of the memory its runtime was given under the memory limit of "+strconv.FormatInt(lim.MemoryBytes>>20, 10)+" MiB"
	case r.Status == native.StatusKilled:
		res.Status, res.Message = StatusRuntimeError, "killed by signal "+r.Signal
	default:
		res.Status, res.Message = StatusRuntimeError, fmt.Sprintf("the program exited with status %d", r.ExitCode)
	}
	// A fork bomb usually ends at the deadline or the memory limit, not
	// at the pids limit itself: whatever ended it, say that it was held
	// back, since it explains the status (and its stderr's fork errors).
	if r.PidsLimitHit && res.Status != StatusOK {
		pids := spec.Pids
		if pids <= 0 {
			pids = native.DefaultPids
		}
		res.Message += fmt.Sprintf(" (it hit the process limit of %d)", pids)
	}
	return nil
}

// auditNative records a native run in the host's audit trail: every
// denial a kernel layer made that the host observed (OOM kill, pids limit,
// deadline, refused confinement), then the run itself, under the job's
// correlation id. WASM runs are audited by the host as they run.
func (e *Executor) auditNative(ctx context.Context, req ExecRequest, spec *native.Spec, r *native.Result) {
	a := e.cfg.Audit
	if a == nil {
		return
	}
	tmpl := audit.Event{CorrelationID: req.CorrelationID, Module: "lang:" + req.Language, Action: "exec",
		User: req.Principal.User, Org: req.Principal.Org}
	deny := native.AuditDenials(a, tmpl)
	for _, d := range r.Denials(spec) {
		deny(d, req.CorrelationID)
	}
	ev := tmpl
	ev.Kind, ev.Decision, ev.Code, ev.DurationNS = audit.KindInvocation, audit.Allow, string(r.Status), int64(r.Wall)
	ev.Attrs = map[string]string{"exit": strconv.Itoa(r.ExitCode), "layers": strings.Join(r.Layers, ","), "warm": strconv.FormatBool(r.Warm)}
	a.Record(ctx, ev)
}

// auditBuild records a build this job ran (not one it found in the cache
// or joined): one event per compile, so that a grader's 50 tests of one
// program show one compile in the trail, and an operator sees what the
// compilers cost. Its code is ok, compile-error, or the limit's status.
func (e *Executor) auditBuild(ctx context.Context, req ExecRequest, took time.Duration, err error) {
	a := e.cfg.Audit
	if a == nil {
		return
	}
	code := "ok"
	var ce *CompileError
	var le *BuildLimitError
	switch {
	case errors.As(err, &ce):
		code = string(StatusCompileError)
	case errors.As(err, &le):
		code = string(le.Status)
	case err != nil:
		code = "error"
	}
	a.Record(context.WithoutCancel(ctx), audit.Event{Kind: audit.KindInvocation, Decision: audit.Allow, CorrelationID: req.CorrelationID,
		Module: "lang:" + req.Language, Action: "build", User: req.Principal.User, Org: req.Principal.Org, Code: code, DurationNS: int64(took)})
}

// auditSurvivors records a job whose processes outlived the kill at its
// end (native.SurvivorsError) as a denied confinement event: the host
// failed to hold the job to its limits, and an operator must look. Other
// errors are not audited here.
func (e *Executor) auditSurvivors(ctx context.Context, req ExecRequest, stage string, err error) {
	var se *native.SurvivorsError
	a := e.cfg.Audit
	if a == nil || !errors.As(err, &se) {
		return
	}
	a.Record(context.WithoutCancel(ctx), audit.Event{Kind: audit.KindConfinement, Decision: audit.Deny, CorrelationID: req.CorrelationID,
		Module: "lang:" + req.Language, Action: "exec", User: req.Principal.User, Org: req.Principal.Org,
		Rule: "job-survived", Code: "survivors", Reason: stage + ": " + se.Error()})
}

// nativeMounts adds a request's mounts, files and working directory to a
// native run: each bound at its own path, read-only or as an operator's
// read-write grant (never handed to the job's uid), or, given a guest path
// of its own, bound there (native.Spec.Mounts).
func nativeMounts(spec *native.Spec, req ExecRequest) error {
	for _, mt := range req.Mounts {
		if filepath.Clean(mt.GuestPath) != filepath.Clean(mt.HostDir) {
			spec.Mounts = append(spec.Mounts, native.Mount{Source: filepath.Clean(mt.HostDir), Target: mt.GuestPath, RW: !mt.ReadOnly})
			continue
		}
		if err := native.CheckGrant(mt.HostDir); err != nil {
			return err
		}
		if mt.ReadOnly {
			spec.ReadOnly = append(spec.ReadOnly, mt.HostDir)
		} else {
			spec.Granted = append(spec.Granted, mt.HostDir)
		}
	}
	for _, f := range req.Files {
		if err := native.CheckGrant(f); err != nil {
			return err
		}
		spec.ReadOnly = append(spec.ReadOnly, f)
	}
	spec.WorkDir = req.WorkDir
	return nil
}

// pathWithin says whether p is dir or lies beneath it.
func pathWithin(p, dir string) bool {
	p, dir = filepath.Clean(p), filepath.Clean(dir)
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// runNativeStreaming is native.Run with the output handed to out as it
// is written: the job starts as a native.Process whose writers keep the
// first MaxOutput bytes of each stream for the result, pass each chunk
// on, and kill the job when a stream passes the cap (StopAtMaxOutput).
func runNativeStreaming(ctx context.Context, spec native.Spec, out func(string, []byte)) (*native.Result, error) {
	max := spec.MaxOutput
	if max <= 0 {
		max = native.DefaultMaxOutput
	}
	var proc atomic.Pointer[native.Process]
	var truncated atomic.Bool
	over := func() {
		truncated.Store(true)
		if p := proc.Load(); p != nil && spec.StopAtMaxOutput {
			p.Kill()
		}
	}
	stdout := &streamWriter{name: "stdout", max: max, out: out, over: over}
	stderr := &streamWriter{name: "stderr", max: max, out: out, over: over}
	p, err := native.Start(spec, native.Stdio{Stdout: stdout, Stderr: stderr})
	if err != nil {
		return nil, err
	}
	proc.Store(p)
	if truncated.Load() && spec.StopAtMaxOutput { // passed the cap before the Store
		p.Kill()
	}
	stop := context.AfterFunc(ctx, p.Kill)
	defer stop()
	res, err := p.Wait()
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil && res.Status != native.StatusOK {
		res.Status, res.Reason = native.StatusKilled, ctx.Err().Error()
	}
	res.Stdout, res.Stderr, res.Truncated = stdout.buf.Bytes(), stderr.buf.Bytes(), truncated.Load()
	return res, nil
}

// OutputTee is buf, or, when out is set (a caller streaming the run,
// ExecRequest.Output), a writer that keeps each write in buf and hands it
// to out as the guest makes it. The host's output cap sits above it
// (host.RunRequest.Stdout: at most MaxOutputBytes reach it, and the run is
// stopped past them), so out sees what the result will hold and no more.
// It does not copy: out must not keep b.
func OutputTee(buf *bytes.Buffer, stream string, out func(string, []byte)) io.Writer {
	if out == nil {
		return buf
	}
	return &teeWriter{buf: buf, name: stream, out: out}
}

type teeWriter struct {
	buf  *bytes.Buffer
	name string
	out  func(string, []byte)
}

func (w *teeWriter) Write(b []byte) (int, error) {
	w.buf.Write(b)
	if len(b) > 0 {
		w.out(w.name, b)
	}
	return len(b), nil
}

// streamWriter keeps the first max bytes of a stream and hands each
// chunk (cut at the cap) to out.
type streamWriter struct {
	name string
	max  int
	buf  bytes.Buffer
	out  func(string, []byte)
	over func()
}

func (w *streamWriter) Write(b []byte) (int, error) {
	n := len(b)
	if room := w.max - w.buf.Len(); room < len(b) {
		b = b[:max(room, 0)]
		w.over()
	}
	if len(b) > 0 {
		w.buf.Write(b)
		w.out(w.name, b)
	}
	return n, nil
}

// nativeUsable is native.Usable for a language whose compiler or
// interpreter runs as a native job (compiled and native languages), nil
// for the others: where native jobs cannot be confined (a masked /proc
// without MOAT_NATIVE_PROC=bind), such a language is unavailable, named
// as such, never half-run.
func nativeUsable(info Info) error {
	if info.Path != PathCompiled && info.Path != PathNative {
		return nil
	}
	return native.Usable()
}
