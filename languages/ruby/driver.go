package ruby

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/driver"
	"github.com/moat-sandbox/moat/internal/wasmlimit"
	"github.com/moat-sandbox/moat/internal/wasmsnap"
	"github.com/moat-sandbox/moat/languages"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"
)

// The reactor's exports and imports, named as wit-bindgen named them.
const (
	exportRealloc      = "cabi_realloc"
	exportInit         = "ruby-init: func(args: list<string>) -> ()"
	exportInitLoadpath = "ruby-init-loadpath: func() -> ()"
	exportEval         = "rb-eval-string-protect: func(str: string) -> tuple<handle<rb-abi-value>, s32>"
	exportRStringPtr   = "rstring-ptr: func(value: handle<rb-abi-value>) -> string"
	exportPostRString  = "cabi_post_rstring-ptr"

	importJSHost       = "rb-js-abi-host"
	importCanonicalABI = "canonical_abi"
)

// engine is a wazero runtime with the reactor's imports, and the compiled
// interpreters, for one compilation-cache directory.
type engine struct {
	rt       wazero.Runtime
	mu       sync.Mutex
	compiled map[[32]byte]wazero.CompiledModule
	keys     map[wazero.CompiledModule][32]byte // each one's digest
	globals  map[wazero.CompiledModule]int      // how many globals each defines
	stubbed  bool                               // the import modules are instantiated
	cacheDir string
	images   map[wazero.CompiledModule]*imageState

	// last remembers the bytes of the last compile: artifacts from Build
	// share Interpreter's slice, and hashing 30 MB on every run costs
	// milliseconds.
	last   []byte
	lastCM wazero.CompiledModule
}

var (
	enginesMu sync.Mutex
	engines   = map[string]*engine{} // by cache directory
)

// engineFor returns the engine of h's cache directory, making it once.
// Engines live as long as the process: the compiled interpreter is the
// expensive part, and a host is usually the process's only one. The
// machine's cache, when the host has one, is its directory: the engine
// keeps only what ruby.wasm, the machine's toolchain, makes alone (its
// machine code, the image of CRuby's start), the same for every data
// directory; a plugin's images are the host's, in its own cache.
func engineFor(ctx context.Context, env driver.InterpreterEnv) (*engine, error) {
	enginesMu.Lock()
	defer enginesMu.Unlock()
	dir := env.MachineCacheDir
	if dir == "" {
		dir = env.CacheDir
	}
	if e, ok := engines[dir]; ok {
		return e, nil
	}
	cache, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		return nil, fmt.Errorf("ruby: compilation cache in %s: %w", dir, err)
	}
	rt := wazero.NewRuntimeWithConfig(context.WithoutCancel(ctx), wasmlimit.NewRuntimeConfig(cache))
	if err := env.InstantiateWASI(ctx, rt); err != nil { // a sleep works as in every language (host/wasipoll.go)
		rt.Close(ctx)
		return nil, fmt.Errorf("ruby: instantiate WASI: %w", err)
	}
	e := &engine{rt: rt, compiled: map[[32]byte]wazero.CompiledModule{}, globals: map[wazero.CompiledModule]int{}, keys: map[wazero.CompiledModule][32]byte{},
		cacheDir: dir, images: map[wazero.CompiledModule]*imageState{}}
	engines[dir] = e
	return e, nil
}

// compile returns the compiled interpreter, compiling (or loading from the
// disk cache) once per engine, and provides its imports.
func (e *engine) compile(ctx context.Context, wasm []byte, preparing func(string) func()) (wazero.CompiledModule, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(wasm) > 0 && len(wasm) == len(e.last) && &wasm[0] == &e.last[0] {
		return e.lastCM, nil
	}
	key := sha256.Sum256(wasm)
	if cm, ok := e.compiled[key]; ok {
		e.last, e.lastCM = wasm, cm
		return cm, nil
	}
	// First-time work only when the cache directory has never held this
	// interpreter's machine code (compiledMarker): a later process reads
	// it back in a second, and must not say it compiles "once" again.
	marker := compiledMarker(e.cacheDir, key)
	if _, err := os.Stat(marker); err != nil && preparing != nil {
		defer preparing("load")()
	}
	// Its globals exported, so that a run can start from the snapshot
	// (snapshot.go); one compiled module serves cold runs too.
	prepared, globals, err := wasmsnap.Prepare(wasm, nil)
	if err != nil {
		return nil, &host.Error{Module: "ruby", Code: abi.CodeBadModule, Reason: "prepare the interpreter: " + err.Error(), Err: err}
	}
	cm, err := e.rt.CompileModule(context.WithoutCancel(ctx), prepared)
	if err != nil {
		return nil, &host.Error{Module: "ruby", Code: abi.CodeBadModule, Reason: "compile the interpreter: " + firstLine(err), Err: err}
	}
	if _, ok := cm.ExportedFunctions()[exportEval]; !ok {
		return nil, &host.Error{Module: "ruby", Code: abi.CodeBadModule, Reason: "the module does not export " + exportEval + ": not a ruby.wasm reactor"}
	}
	if !e.stubbed {
		if err := instantiateImports(ctx, e.rt, cm); err != nil {
			return nil, err
		}
		e.stubbed = true
	}
	e.compiled[key] = cm
	e.globals[cm], e.keys[cm] = globals, key
	if err := os.MkdirAll(filepath.Dir(marker), 0o700); err == nil {
		_ = os.WriteFile(marker, nil, 0o600)
	}
	e.last, e.lastCM = wasm, cm
	return cm, nil
}

// compiledMarker is the file that says dir's compilation cache holds the
// machine code of the interpreter whose bytes' digest is key, as this
// build's wazero compiles it (wazero names its own files by a digest of
// the prepared bytes that this package does not see).
func compiledMarker(dir string, key [32]byte) string {
	return filepath.Join(dir, "ruby-compiled", hex.EncodeToString(key[:16])+"-"+wazeroBuild())
}

// wazeroBuild names the wazero this binary was built with (its version
// and go.sum hash): another compiles other code.
var wazeroBuild = sync.OnceValue(func() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/tetratelabs/wazero" {
				if m.Replace != nil {
					m = m.Replace
				}
				sum := sha256.Sum256([]byte(m.Version + " " + m.Sum))
				return hex.EncodeToString(sum[:8])
			}
		}
	}
	return "unknown"
})

// instantiateImports provides rb-js-abi-host (every function traps: there
// is no JavaScript engine) and canonical_abi (the handle table), with the
// signatures the module declares.
func instantiateImports(ctx context.Context, rt wazero.Runtime, cm wazero.CompiledModule) error {
	jsHost := rt.NewHostModuleBuilder(importJSHost)
	canon := rt.NewHostModuleBuilder(importCanonicalABI)
	for _, def := range cm.ImportedFunctions() {
		mod, name, _ := def.Import()
		params, results := def.ParamTypes(), def.ResultTypes()
		switch mod {
		case importJSHost:
			fn := api.GoModuleFunc(func(context.Context, api.Module, []uint64) {
				panic(fmt.Errorf("ruby: JavaScript interop (%s) is not available: there is no JavaScript engine in moat's Ruby; do not require \"js\"", strings.SplitN(name, ":", 2)[0]))
			})
			jsHost.NewFunctionBuilder().WithGoModuleFunction(fn, params, results).Export(name)
		case importCanonicalABI:
			var fn api.GoModuleFunc
			switch name {
			case "resource_new_rb-abi-value":
				fn = func(ctx context.Context, _ api.Module, stack []uint64) {
					stack[0] = uint64(handlesOf(ctx).add(uint32(stack[0])))
				}
			case "resource_get_rb-abi-value":
				fn = func(ctx context.Context, _ api.Module, stack []uint64) {
					stack[0] = uint64(handlesOf(ctx).get(uint32(stack[0])))
				}
			case "resource_drop_js-abi-value":
				fn = func(context.Context, api.Module, []uint64) {} // no JS values are ever made
			default:
				return fmt.Errorf("ruby: the interpreter imports %s.%s, which this driver does not know", mod, name)
			}
			canon.NewFunctionBuilder().WithGoModuleFunction(fn, params, results).Export(name)
		}
	}
	if _, err := jsHost.Instantiate(ctx); err != nil {
		return fmt.Errorf("ruby: provide %s: %w", importJSHost, err)
	}
	if _, err := canon.Instantiate(ctx); err != nil {
		return fmt.Errorf("ruby: provide %s: %w", importCanonicalABI, err)
	}
	return nil
}

// handles is one run's canonical-ABI table: wit-bindgen hands Ruby values
// to the host as handles, and the host hands them back.
type handles struct{ raw []uint32 }

type handlesKey struct{}

func handlesOf(ctx context.Context) *handles {
	h, ok := ctx.Value(handlesKey{}).(*handles)
	if !ok {
		panic(errors.New("ruby: canonical_abi called outside a run"))
	}
	return h
}

func (h *handles) add(raw uint32) uint32 {
	h.raw = append(h.raw, raw)
	return uint32(len(h.raw)) // handles start at 1
}

func (h *handles) get(handle uint32) uint32 {
	if handle == 0 || int(handle) > len(h.raw) {
		panic(fmt.Errorf("ruby: the interpreter used handle %d, which it was never given", handle))
	}
	return h.raw[handle-1]
}

// RunArtifact implements languages.ArtifactRunner: one fresh instance of
// the interpreter runs the script, with stdin, ARGV, the environment and
// /src. Limits hit are *host.Error values (timeout, memory_limit,
// output_too_large), as Module.Run reports them.
func (Language) RunArtifact(ctx context.Context, env languages.RunEnv, a *languages.Artifact, in languages.RunInput) (*languages.RunOutput, error) {
	if env.Host == nil {
		return nil, errors.New("ruby: RunEnv.Host is nil")
	}
	if len(a.Args) == 0 {
		return nil, errors.New("ruby: the artifact names no script (Args[0])")
	}
	ienv := env.Host.InterpreterEnv()
	e, err := engineFor(ctx, ienv)
	if err != nil {
		return nil, err
	}
	cm, err := e.compile(ctx, a.WASM, env.Preparing)
	if err != nil {
		return nil, err
	}
	lim := limitsOf(in.Limits, env.Host.Limits())
	fail := func(code abi.Code, err error, format string, args ...any) (*languages.RunOutput, error) {
		return nil, &host.Error{Module: "ruby", Code: code, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	for k := range in.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fail(abi.CodeInvalidArgument, nil, "environment variable name %q is invalid (empty, or contains '=' or NUL)", k)
		}
	}

	cctx, cancel := context.WithTimeout(ctx, lim.timeout)
	defer cancel()
	over := wasmlimit.NewOutputCap(cancel)
	var stdout, stderr bytes.Buffer
	out := over.Writer(languages.OutputTee(&stdout, "stdout", in.Output), "stdout", lim.output)
	errw := over.Writer(languages.OutputTee(&stderr, "stderr", in.Output), "stderr", lim.output)
	mc := wazero.NewModuleConfig().
		WithName("").
		WithArgs("ruby").
		WithStdin(bytes.NewReader(in.Stdin)).WithStdout(out).WithStderr(errw).
		WithSysWalltime().WithSysNanotime().
		WithNanosleep(ienv.Nanosleep(func() context.Context { return cctx })). // a sleep ends at the deadline
		WithRandSource(rand.Reader).
		WithStartFunctions("_initialize") // wasi-vfs unpacks the stdlib
	envs := map[string]string{}
	maps.Copy(envs, a.Env)
	maps.Copy(envs, in.Env)
	for _, k := range slices.Sorted(maps.Keys(envs)) {
		mc = mc.WithEnv(k, envs[k])
	}
	fsc := wazero.NewFSConfig()
	if in.SrcDir != "" {
		fsc = fsc.WithReadOnlyDirMount(in.SrcDir, "/src")
	}
	// The run's scratch directory at "/", after /src, as the capture has
	// an empty one (snapshot.go).
	var scratch *host.ScratchFS
	if in.Scratch != nil {
		if scratch, err = host.OpenScratchFS(*in.Scratch); err != nil {
			return fail(abi.CodeInvalidArgument, err, "%v", err)
		}
		defer scratch.Close()
		fsc = scratch.Mount(fsc)
	}
	mc = mc.WithFSConfig(fsc)

	alloc := wasmlimit.NewAllocator(lim.memory)
	rctx := context.WithValue(experimental.WithMemoryAllocator(cctx, alloc), handlesKey{}, &handles{})
	if scratch != nil {
		rctx = scratch.Context(rctx) // ENOSPC past its quota, not EIO
	}
	argv := append(slices.Clone(a.Args[1:]), in.Args...)
	var code int
	setup, fromSnapshot := fromImage(argv, envs)
	var img *wasmsnap.Image
	if fromSnapshot && in.SrcDir != "" && in.Scratch != nil {
		img = e.image(ctx, cm, env.Preparing)
	}
	if img != nil && uint64(img.Pages)*65536 <= lim.memory {
		code, err = driveImage(rctx, e.rt, cm, mc, img, setup, a.Args[0])
	} else {
		code, err = drive(rctx, e.rt, cm, mc, a.Args[0], argv)
	}
	var exit *sys.ExitError
	switch {
	case over.Exceeded() != "":
		// Whatever the script did after: one that ignores the write error
		// and ends cleanly still lost output (Module.Run does the same).
		return fail(abi.CodeOutputTooLarge, err, "%s exceeded %d bytes; the script was stopped", over.Exceeded(), lim.output)
	case err == nil && alloc.InitialHit():
		return fail(abi.CodeMemoryLimit, nil, "the interpreter's initial memory exceeds the limit of %d MiB", lim.memory>>20)
	case err == nil && alloc.Hit() && code != 0:
		// A script that failed after a refused grow (NoMemoryError) failed
		// for want of memory, whatever it printed.
		return fail(abi.CodeMemoryLimit, nil, "the script tried to grow its memory past the limit of %d MiB: %s", lim.memory>>20, firstLineOf(stderr.String()))
	case err == nil:
	case alloc.Hit():
		return fail(abi.CodeMemoryLimit, err, "the interpreter tried to grow its memory past the limit of %d MiB", lim.memory>>20)
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		return fail(abi.CodeTimeout, err, "did not finish within %s", lim.timeout)
	case ctx.Err() != nil:
		return fail(abi.CodeCanceled, err, "the caller canceled the run")
	case errors.As(err, &exit):
		code = int(exit.ExitCode()) // exit! or a WASI proc_exit
	default:
		return fail(abi.CodeTrap, err, "%s", firstLine(err))
	}
	res := &languages.RunOutput{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: code, PeakMemory: alloc.Peak()}
	if scratch != nil {
		res.ScratchFull = scratch.Full()
	}
	return res, nil
}

// drive instantiates the interpreter and runs script with argv, returning
// the exit status the wrapper computed.
func drive(ctx context.Context, rt wazero.Runtime, cm wazero.CompiledModule, mc wazero.ModuleConfig, script string, argv []string) (int, error) {
	mod, err := rt.InstantiateModule(ctx, cm, mc)
	if err != nil {
		return 0, err
	}
	defer mod.Close(context.Background())
	g := guest{ctx: ctx, mod: mod, realloc: mod.ExportedFunction(exportRealloc)}
	if err := g.start(argv); err != nil {
		return 0, err
	}
	if _, err := g.eval(noProcesses + "nil"); err != nil {
		return 0, err
	}
	return g.status(g.eval(scriptWrapper(script)))
}

// start runs ruby-init with argv as ARGV, and ruby-init-loadpath.
func (g guest) start(argv []string) error {
	args := append([]string{"ruby", "--disable-gems", "-EUTF-8", "-e_=0", "--"}, argv...)
	list, err := g.stringList(args)
	if err != nil {
		return err
	}
	if _, err := g.mod.ExportedFunction(exportInit).Call(g.ctx, uint64(list), uint64(len(args))); err != nil {
		return err
	}
	_, err = g.mod.ExportedFunction(exportInitLoadpath).Call(g.ctx)
	return err
}

// eval evaluates code with rb-eval-string-protect, returning the handle of
// its value.
func (g guest) eval(code string) (uint32, error) {
	src, n, err := g.cstring(code)
	if err != nil {
		return 0, err
	}
	r, err := g.mod.ExportedFunction(exportEval).Call(g.ctx, uint64(src), uint64(n))
	if err != nil {
		return 0, err
	}
	handle, state, err := g.pair(uint32(r[0]))
	if err != nil {
		return 0, err
	}
	if state != 0 {
		// The wrapper rescues every exception, so this is a fatal error of
		// the interpreter itself (a throw without catch, say).
		return 0, fmt.Errorf("ruby: the script ended with an uncaught non-exception (protect state %d)", state)
	}
	return handle, nil
}

// status reads the exit status the wrapper evaluated to (a string), the
// value of handle; err is the evaluation's.
func (g guest) status(handle uint32, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	status, err := g.text(handle)
	if err != nil {
		return 0, err
	}
	code, err := strconv.Atoi(status)
	if err != nil {
		return 0, fmt.Errorf("ruby: the wrapper returned %q, not an exit status", status)
	}
	return code, nil
}

// text reads the string that is the value of handle.
func (g guest) text(handle uint32) (string, error) {
	r, err := g.mod.ExportedFunction(exportRStringPtr).Call(g.ctx, uint64(handle))
	if err != nil {
		return "", err
	}
	ptr, n, err := g.pair(uint32(r[0]))
	if err != nil {
		return "", err
	}
	b, ok := g.mod.Memory().Read(ptr, uint32(n))
	if !ok {
		return "", fmt.Errorf("ruby: rstring-ptr returned [%d, +%d), outside memory", ptr, n)
	}
	s := string(b)
	if post := g.mod.ExportedFunction(exportPostRString); post != nil {
		_, _ = post.Call(g.ctx, r[0])
	}
	return s, nil
}

// scriptWrapper is the Ruby that runs the script: it loads it as the main
// program and turns its end into an exit status string, printing an
// uncaught exception as ruby would. It is evaluated on its own, after the
// prelude (noProcesses, or a run from the image's setup), so that its
// lines, which a backtrace shows, are the same either way.
func scriptWrapper(script string) string {
	return `$stdout.sync = true
$stderr.sync = true
$0 = ` + rubyQuote(script) + `
begin
  load($0)
  0
rescue SystemExit => e
  e.status
rescue Exception => e
  $stderr.print(e.full_message(highlight: false))
  1
end.to_s`
}

// noProcesses makes Ruby's ways of starting a process raise
// NotImplementedError, as CRuby does for fork where the platform has none.
// WASI has no processes, and ruby.wasm's stubs lie about it: system
// returns true with a "pid -1 exit 0" status though nothing ran, spawn
// returns nil, and backticks and IO.popen raise a garbled ArgumentError
// ("string contains null byte"). A program must learn that its command
// did not run. This is honesty, not confinement: nothing could run anyway.
const noProcesses = "module Kernel\n" +
	"  %i[system spawn exec \x60].each do |name|\n" +
	"    define_method(name) { |*| raise NotImplementedError, \"#{name}() function is unimplemented on this machine\" }\n" +
	"    module_function name\n" +
	"  end\n" +
	"end\n" +
	"[[Process, %i[spawn exec]], [IO, %i[popen]]].each do |mod, names|\n" +
	"  names.each { |name| mod.define_singleton_method(name) { |*| raise NotImplementedError, \"#{name}() function is unimplemented on this machine\" } }\n" +
	"end\n"

// rubyQuote is a single-quoted Ruby literal (no interpolation).
func rubyQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// guest writes canonical-ABI values into the instance's memory.
type guest struct {
	ctx     context.Context
	mod     api.Module
	realloc api.Function
}

func (g guest) alloc(size, align uint32) (uint32, error) {
	r, err := g.realloc.Call(g.ctx, 0, 0, uint64(align), uint64(size))
	if err != nil {
		return 0, err
	}
	return uint32(r[0]), nil
}

// cstring copies s with a NUL after it (CRuby reads argv and source as C
// strings) and returns its address and length without the NUL.
func (g guest) cstring(s string) (uint32, uint32, error) {
	p, err := g.alloc(uint32(len(s)+1), 1)
	if err != nil {
		return 0, 0, err
	}
	if !g.mod.Memory().Write(p, append([]byte(s), 0)) {
		return 0, 0, fmt.Errorf("ruby: cabi_realloc returned %d, outside memory", p)
	}
	return p, uint32(len(s)), nil
}

// stringList lays out a list<string>: (pointer, length) pairs.
func (g guest) stringList(ss []string) (uint32, error) {
	list, err := g.alloc(uint32(8*len(ss)), 4)
	if err != nil {
		return 0, err
	}
	for i, s := range ss {
		p, n, err := g.cstring(s)
		if err != nil {
			return 0, err
		}
		if !g.mod.Memory().WriteUint32Le(list+uint32(8*i), p) || !g.mod.Memory().WriteUint32Le(list+uint32(8*i)+4, n) {
			return 0, fmt.Errorf("ruby: the argument list at %d is outside memory", list)
		}
	}
	return list, nil
}

// pair reads two 32-bit values at a return area.
func (g guest) pair(at uint32) (uint32, int32, error) {
	a, ok1 := g.mod.Memory().ReadUint32Le(at)
	b, ok2 := g.mod.Memory().ReadUint32Le(at + 4)
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("ruby: a return area at %d is outside memory", at)
	}
	return a, int32(b), nil
}

type limits struct {
	timeout time.Duration
	memory  uint64
	output  int
}

func limitsOf(l languages.ExecLimits, d host.Limits) limits {
	out := limits{timeout: l.Timeout, memory: uint64(l.MemoryBytes), output: int(l.MaxOutputBytes)}
	if out.timeout <= 0 {
		out.timeout = d.Timeout
	}
	if out.memory == 0 {
		out.memory = uint64(d.MemoryLimitPages) * 65536
	}
	if out.output <= 0 {
		out.output = d.MaxOutputBytes
	}
	return out
}

func firstLineOf(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSuffix(s, " (recovered by wazero)")
}
