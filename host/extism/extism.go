// Package extism runs stock Extism plug-ins in moat, with moat's policy,
// limits, pools and audit around them. Import it for its side effect:
//
//	import _ "github.com/moat-sandbox/moat/host/extism"
//
// and host.Load recognizes a module that imports extism:host/env (or whose
// moat.yaml says kind: extism) as a host.KindExtism module; each exported
// function of type () -> i32 is an action, called the Extism way: the
// input through the kernel's input, the output through output_set, a
// failure as error_set plus a non-zero return, which becomes a
// *driver.Error with code guest_error and the plug-in's message.
//
// The plug-in runs on the extism go-sdk (CompiledPlugin, one per module,
// compiled once with the host's compilation cache; Plugin instances pooled
// per module), with:
//   - config: the manifest's config and LoadOptions.Config (moat run
//     --config), read by the PDKs' config_get;
//   - vars: Extism's per-instance variables; like a moat plugin's globals,
//     they live as long as the pooled instance (IsolationFresh: one call);
//   - logging: the PDKs' log_* calls go to the host's logger, tagged with
//     the module, action, principal and correlation id; WASI stdout and
//     stderr too, and stderr's last line is quoted when a call traps. The
//     log_* functions are relinked to moat's (guestLog), which cut a
//     message at abi.MaxLogMessage before copying it and charge each
//     record to the invocation's log budget, as log.write does;
//   - limits: the call's deadline (the instance is discarded when it
//     passes), a memory limit per instance that covers both the plug-in's
//     memory and the Extism kernel's (input, output, vars), and the output
//     cap;
//   - moat's ops: the host function extism:host/user moat_call(op, req)
//     -> reply, all three Extism memory offsets, goes through the same op
//     table, grants, principal and audit as a moat plugin's moat.call (see
//     guests/extism/README.md), with the same bounds: a request over
//     abi.MaxRequestBytes, or past the invocation's budget, is refused
//     before the host copies it;
//   - Extism's own http_request: relinked to moat's implementation (see
//     relink.go, http.go), which asks policy for every request and
//     redirect, and refuses private, loopback, link-local and metadata
//     addresses at dial time unless a grant names the address itself.
//
// File system access (Extism's allowed_paths) is not offered: an Extism
// plug-in sees no files.
package extism

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"unsafe"

	extism "github.com/extism/go-sdk"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/host/driver"
	"github.com/moat-sandbox/moat/internal/pool"
	"github.com/moat-sandbox/moat/internal/wasmlimit"
	"github.com/moat-sandbox/moat/internal/wasmrewrite"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// The imports an Extism plug-in may use.
const (
	// EnvModule is the Extism kernel every PDK imports.
	EnvModule = "extism:host/env"
	// UserModule is where Extism hosts put their own functions; moat's is
	// CallFunction.
	UserModule = "extism:host/user"
	// CallFunction is moat's one host function for Extism plug-ins:
	//
	//	moat_call(op: i64, req: i64) -> i64
	//
	// op and req are Extism memory offsets of the op name ("kv.get") and
	// its JSON request; the result is the offset of a new block holding
	// {"resp": <the op's JSON reply>} or {"error": {"code", "message"}}.
	// The guest keeps ownership of op and req and owns the reply block.
	CallFunction = "moat_call"

	// httpModule is where moat's http_request lives; relink moves a
	// plug-in's imports of Extism's HTTP functions there.
	httpModule = "moat:extism/http"
	// logModule is where moat's log_* functions live; relink moves a
	// plug-in's imports of Extism's log functions there.
	logModule = "moat:extism/log"
	// varsModule is where moat's config_get, var_get and var_set live;
	// relink moves a plug-in's imports of Extism's there.
	varsModule = "moat:extism/vars"
)

// envFunctions are the functions of extism:host/env in go-sdk v1.7.1.
var envFunctions = []string{
	"alloc", "free", "load_u8", "input_load_u8", "store_u64", "store_u8", "input_set", "output_set",
	"input_length", "input_offset", "output_length", "output_offset", "length", "length_unsafe", "reset",
	"error_set", "error_get", "memory_bytes", "input_load_u64", "load_u64", "config_get", "var_get", "var_set",
	"http_request", "http_status_code", "http_headers", "get_log_level",
	"log_trace", "log_debug", "log_info", "log_warn", "log_error",
}

// httpFunctions move to httpModule.
var httpFunctions = []string{"http_request", "http_status_code", "http_headers"}

// varsFunctions move to varsModule: the go-sdk's copy the whole name
// (and value) block before they look at its length.
var varsFunctions = []string{"config_get", "var_get", "var_set"}

// logFunctions move to logModule: the go-sdk's copy the whole message
// block, however large, and log it, outside the invocation's log budget.
var logFunctions = map[string]extism.LogLevel{
	"log_trace": extism.LogLevelTrace, "log_debug": extism.LogLevelDebug, "log_info": extism.LogLevelInfo,
	"log_warn": extism.LogLevelWarn, "log_error": extism.LogLevelError,
}

func init() { driver.Register(Kind, extismDriver{}) }

// Kind is the kind of module this package's driver runs: a manifest's
// kind: extism, and a module's Info.Kind (host.KindExtism).
const Kind = "extism"

// extismDriver runs Extism plug-ins: the driver.Driver this package
// registers.
type extismDriver struct{}

var _ driver.Driver = extismDriver{}

// Recognizes implements driver.Driver: every Extism PDK imports the
// Extism kernel, extism:host/env.
func (extismDriver) Recognizes(imports []driver.Signature) bool {
	return slices.ContainsFunc(imports, func(s driver.Signature) bool { return s.Module == EnvModule })
}

// Load implements driver.Driver.
func (extismDriver) Load(ctx context.Context, spec driver.Spec) (driver.Runner, error) {
	fail := func(format string, args ...any) (driver.Runner, error) {
		return nil, &driver.Error{Code: abi.CodeBadModule, Reason: fmt.Sprintf(format, args...)}
	}
	moves := map[string]string{}
	for _, imp := range spec.Imports {
		switch {
		case imp.Module == wasi_snapshot_preview1.ModuleName:
		case imp.Module == EnvModule && slices.Contains(envFunctions, imp.Name):
			if slices.Contains(httpFunctions, imp.Name) {
				moves[imp.Module+"\x00"+imp.Name] = httpModule
			}
			if _, ok := logFunctions[imp.Name]; ok {
				moves[imp.Module+"\x00"+imp.Name] = logModule
			}
			if slices.Contains(varsFunctions, imp.Name) {
				moves[imp.Module+"\x00"+imp.Name] = varsModule
			}
		case imp.Module == UserModule && imp.Name == CallFunction:
			if !slices.Equal(imp.Params, []string{"i64", "i64"}) || !slices.Equal(imp.Result, []string{"i64"}) {
				return fail("imports %s.%s as %s; moat's is %s(i64, i64) -> (i64)", imp.Module, imp.Name, imp, CallFunction)
			}
		case imp.Module == UserModule:
			return fail("imports the host function %s.%s, which moat does not provide: moat's one host function for Extism plug-ins is %s.%s (see guests/extism/README.md)",
				imp.Module, imp.Name, UserModule, CallFunction)
		default:
			return fail("imports %s.%s; an Extism plug-in in moat may import %s, %s.%s and WASI", imp.Module, imp.Name, EnvModule, UserModule, CallFunction)
		}
	}
	wasm, err := relink(spec.Wasm, moves)
	if err != nil {
		return fail("cannot read the import section: %v", err)
	}
	// The deadline: every loop, every call and every bulk operation of
	// the plug-in reaches the host's yield (driver.Spec.Deadline).
	// CloseOnContextDone alone checks loop headers only.
	if spec.Deadline == nil || spec.Yield == nil {
		return fail("the host gave the driver no deadline rewrite (driver.Spec.Deadline and Yield)")
	}
	if wasm, err = spec.Deadline(wasm); err != nil {
		return fail("invalid WebAssembly: %v", err)
	}
	p := &plugin{spec: spec, functions: functions(spec.Exports)}
	if spec.MaxIdle > 0 { // else nil: a pool that keeps nothing
		p.idle = pool.New[*instance](spec.MaxIdle)
	}
	if len(p.functions) == 0 {
		return fail("exports no function of type () -> (i32) or () -> (); an Extism plug-in's functions take no parameters")
	}
	// One runtime per module, made by the go-sdk. It shares the host's
	// compilation cache, so the module is compiled once per machine (the
	// host has compiled the same bytes when nothing was relinked), and
	// CloseOnContextDone lets a deadline stop a plug-in in a loop: the
	// configuration every moat runtime has (wasmlimit.NewRuntimeConfig).
	rc := wasmlimit.NewRuntimeConfig(spec.Cache)
	manifest := extism.Manifest{
		Wasm:   []extism.Wasm{extism.WasmData{Data: wasm, Name: "main"}},
		Config: spec.Config,
		Memory: &extism.ManifestMemory{MaxVarBytes: maxVarBytes, MaxHttpResponseBytes: -1},
	}
	yield := extism.NewHostFunctionWithStack(wasmrewrite.InterruptYield, func(ctx context.Context, _ *extism.CurrentPlugin, stack []uint64) {
		spec.Yield(ctx, stack)
	}, nil, []extism.ValueType{api.ValueTypeI32})
	yield.SetNamespace(wasmrewrite.InterruptModule)
	cp, err := extism.NewCompiledPlugin(ctx, manifest, extism.PluginConfig{RuntimeConfig: rc, EnableWasi: true}, append(p.hostFunctions(), yield))
	if err != nil {
		return fail("the extism go-sdk cannot load it: %v", firstLine(err))
	}
	p.compiled = cp
	setLogLevel(ctx, spec.Logger)
	return p, nil
}

// maxVarBytes bounds an instance's Extism vars, as the Extism default does.
const maxVarBytes = 1 << 20

// functions lists the exports that can be called as Extism functions.
func functions(exports []driver.Signature) []string {
	var out []string
	for _, e := range exports {
		if len(e.Params) != 0 || len(e.Result) > 1 || len(e.Result) == 1 && e.Result[0] != "i32" {
			continue
		}
		if e.Name == "_start" || e.Name == "_initialize" || strings.HasPrefix(e.Name, "__") {
			continue
		}
		out = append(out, e.Name)
	}
	return out
}

// plugin is one loaded Extism module: the compiled plug-in and its pool.
type plugin struct {
	spec      driver.Spec
	functions []string
	compiled  *extism.CompiledPlugin

	idle *pool.LIFO[*instance] // internal/pool

	mu     sync.Mutex
	active int  // calls in flight
	closed bool // Close was called: the runtime goes when active reaches 0
}

// Functions implements driver.Runner.
func (p *plugin) Functions() []string { return p.functions }

// Close implements driver.Runner. Calls in flight finish; the compiled
// plug-in (the go-sdk's runtime) is released after the last of them.
func (p *plugin) Close(ctx context.Context) error {
	p.mu.Lock()
	idle, last := p.idle.Close(), !p.closed && p.active == 0
	p.closed = true
	p.mu.Unlock()
	for _, inst := range idle {
		inst.close()
	}
	if last {
		return p.release(ctx)
	}
	return nil
}

func (p *plugin) release(ctx context.Context) error {
	return p.compiled.Close(ctx)
}

// begin counts a call in; it fails once the module is closed.
func (p *plugin) begin() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return &driver.Error{Code: abi.CodeUnavailable, Reason: "the module was closed"}
	}
	p.active++
	return nil
}

// end counts a call out, releasing the runtime after a Close.
func (p *plugin) end() {
	p.mu.Lock()
	p.active--
	last := p.closed && p.active == 0
	p.mu.Unlock()
	if last {
		_ = p.release(context.Background())
	}
}

// instance is one go-sdk Plugin with what moat keeps beside it.
type instance struct {
	p      *extism.Plugin
	mems   *allocator
	stderr *lineWriter
	stdout *lineWriter
	http   httpState
	state  *callState // the current call, for the log callback
	// ctx is the context of the call the instance serves (of its
	// instantiation, before the first): the plug-in's WASI sleeps end
	// with it (driver.Spec.Nanosleep).
	ctx context.Context
}

// callState is the current call, reached by host functions through the
// context.
type callState struct {
	call *driver.Call
	inst *instance
	// err is why a host function stopped the guest (a denied request, a
	// bad pointer): it is the call's error, whatever wazero reports.
	err *driver.Error
}

type stateKey struct{}

func stateOf(ctx context.Context) *callState {
	s, _ := ctx.Value(stateKey{}).(*callState)
	if s == nil {
		panic("moat: an Extism host function was called outside an invocation")
	}
	return s
}

// abort stops the guest from inside a host function with err as the call's
// error.
func (s *callState) abort(code abi.Code, format string, args ...any) {
	if s.err == nil {
		s.err = &driver.Error{Code: code, Reason: fmt.Sprintf(format, args...)}
	}
	panic(s.err)
}

// Call implements driver.Runner.
func (p *plugin) Call(ctx context.Context, c *driver.Call) ([]byte, error) {
	if err := p.begin(); err != nil {
		return nil, err
	}
	defer p.end()
	inst, err := p.get(ctx, c)
	if err != nil {
		return nil, err
	}
	st := &callState{call: c, inst: inst}
	inst.state = st
	inst.ctx = ctx
	// Nothing of the last invocation's requests reaches this one: the
	// instance may have served another principal, whose responses (a
	// Set-Cookie, a token in a header) http_headers would hand over.
	inst.http = httpState{}
	inst.mems.setLimit(c.Limits.MemoryLimitPages)
	inst.stdout.begin(c.Log)
	inst.stderr.begin(c.Log)
	rc, out, err := inst.p.CallWithContext(context.WithValue(ctx, stateKey{}, st), c.Function, c.Input)
	inst.stdout.end()
	inst.stderr.end()
	inst.state, inst.ctx = nil, nil
	reusable := err == nil
	defer func() {
		// Cleared before the instance goes back: once in the pool,
		// another call may take it (a deferred clear ran after put, and
		// raced that call; TestConcurrentCalls under -race).
		inst.http = httpState{}
		if reusable {
			p.put(inst)
		} else {
			inst.close()
		}
	}()
	fail := func(code abi.Code, cause error, format string, args ...any) ([]byte, error) {
		return nil, &driver.Error{Code: code, Reason: fmt.Sprintf(format, args...), Err: cause}
	}
	var exit *sys.ExitError
	switch {
	case err == nil && rc != 0:
		return fail(abi.CodeGuestError, nil, "%s returned %d without setting an error", c.Function, rc)
	case err == nil:
		return out, nil
	case inst.mems.Hit():
		return fail(abi.CodeMemoryLimit, err, "the plug-in tried to grow its memory past the limit of %d pages (%d MiB)%s",
			c.Limits.MemoryLimitPages, c.Limits.MemoryLimitPages/16, inst.stderr.note())
	case st.err != nil:
		// Not st.err.Err = err: wazero's error wraps the panic value,
		// st.err itself, and the cycle would never end an errors.Is.
		return nil, st.err
	case errors.As(err, &exit) && exit.ExitCode() == sys.ExitCodeDeadlineExceeded || ctx.Err() == context.DeadlineExceeded:
		return fail(abi.CodeTimeout, err, "did not finish within %s", c.Limits.Timeout)
	case errors.As(err, &exit) && exit.ExitCode() == sys.ExitCodeContextCanceled || ctx.Err() == context.Canceled:
		return fail(abi.CodeCanceled, err, "the caller canceled the invocation")
	case errors.As(err, &exit):
		return fail(abi.CodeTrap, err, "the plug-in exited with code %d%s", exit.ExitCode(), inst.stderr.note())
	}
	// The Extism error convention: the function set an error and returned
	// non-zero. The go-sdk returns the message as the error, so the
	// message the kernel holds tells a guest error from a trap.
	if msg := inst.p.GetErrorWithContext(ctx); msg != "" && msg == err.Error() {
		reusable = true
		return fail(abi.CodeGuestError, nil, "%s", clipReason(msg))
	}
	return fail(abi.CodeTrap, err, "%s%s", clipReason(firstLine(err)), inst.stderr.note())
}

// maxReason bounds a reason a plug-in's message becomes: error_set takes
// any length, and the reason travels on into logs, the audit trail and an
// HTTP problem's detail.
const maxReason = 4 << 10

// clipReason cuts s to maxReason bytes (on a UTF-8 boundary), saying how
// much was cut.
func clipReason(s string) string {
	if len(s) <= maxReason {
		return s
	}
	return strings.ToValidUTF8(s[:maxReason], "") + fmt.Sprintf("…[%d more bytes cut]", len(s)-maxReason)
}

// get takes an idle instance or makes one under the call's deadline and
// memory limit.
func (p *plugin) get(ctx context.Context, c *driver.Call) (*instance, error) {
	if !p.spec.Fresh {
		if inst, ok := p.idle.Get(); ok {
			if inst.mems.size() <= uint64(c.Limits.MemoryLimitPages)*65536 {
				return inst, nil
			}
			inst.close() // grown past this call's memory limit: make one within it
		}
	}
	// wazero allocates a memory's minimum whole at instantiation: refuse
	// one over the limit before it costs the host anything.
	if min := p.spec.MemoryMin; min > c.Limits.MemoryLimitPages {
		return nil, &driver.Error{Code: abi.CodeMemoryLimit,
			Reason: fmt.Sprintf("the plug-in declares an initial memory of %d pages (%d MiB), over the limit of %d pages (%d MiB)",
				min, min/16, c.Limits.MemoryLimitPages, c.Limits.MemoryLimitPages/16)}
	}
	inst := &instance{mems: &allocator{}, stdout: newLineWriter("stdout", slog.LevelInfo), stderr: newLineWriter("stderr", slog.LevelWarn)}
	inst.mems.setLimit(c.Limits.MemoryLimitPages)
	inst.ctx = ctx
	defer func() { inst.ctx = nil }()
	mc := wazero.NewModuleConfig().
		WithStdout(inst.stdout).WithStderr(inst.stderr).
		WithSysWalltime().WithSysNanotime().
		WithNanosleep(p.spec.Nanosleep(func() context.Context { return inst.ctx })).
		WithRandSource(rand.Reader)
	ictx := experimental.WithMemoryAllocator(ctx, inst.mems)
	ep, err := p.compiled.Instance(ictx, extism.PluginInstanceConfig{ModuleConfig: mc})
	if err != nil {
		e := &driver.Error{Code: abi.CodeTrap, Reason: "instantiation failed: " + firstLine(err), Err: err}
		switch {
		case inst.mems.Hit():
			e.Code, e.Reason = abi.CodeMemoryLimit, fmt.Sprintf("instantiation needs more memory than the limit of %d pages (%d MiB)", c.Limits.MemoryLimitPages, c.Limits.MemoryLimitPages/16)
		case ctx.Err() == context.DeadlineExceeded:
			e.Code, e.Reason = abi.CodeTimeout, fmt.Sprintf("instantiation did not finish within %s", c.Limits.Timeout)
		}
		return nil, e
	}
	if inst.mems.Hit() {
		_ = ep.Close(context.Background())
		return nil, &driver.Error{Code: abi.CodeMemoryLimit,
			Reason: fmt.Sprintf("the plug-in's initial memory exceeds the limit of %d pages (%d MiB)", c.Limits.MemoryLimitPages, c.Limits.MemoryLimitPages/16)}
	}
	ep.SetLogger(inst.log)
	inst.p = ep
	return inst, nil
}

// put returns a healthy instance to the pool, or closes it.
func (p *plugin) put(inst *instance) {
	if !p.spec.Fresh && inst.mems.size() <= uint64(p.spec.Limits.MemoryLimitPages)*65536 {
		if p.idle.Put(inst) { // refused when full or closed
			return
		}
	}
	inst.close()
}

func (inst *instance) close() {
	if inst.p != nil {
		_ = inst.p.Close(context.Background())
	}
}

// log receives the plug-in's log_* calls.
func (inst *instance) log(level extism.LogLevel, msg string) {
	st := inst.state
	if st == nil {
		return
	}
	st.call.Log().LogAttrs(context.Background(), slogLevel(level), msg, slog.String("source", "guest"))
}

func slogLevel(l extism.LogLevel) slog.Level {
	switch l {
	case extism.LogLevelTrace:
		return slog.LevelDebug - 4
	case extism.LogLevelDebug:
		return slog.LevelDebug
	case extism.LogLevelInfo:
		return slog.LevelInfo
	case extism.LogLevelWarn:
		return slog.LevelWarn
	}
	return slog.LevelError
}

var logLevelMu sync.Mutex

// setLogLevel lowers the go-sdk's log level (a process-wide setting, off
// by default, that plug-ins read with get_log_level to skip formatting) to
// the lowest level logger records. It never raises it: another host in the
// process may need the lower one.
func setLogLevel(ctx context.Context, logger *slog.Logger) {
	want := extism.LogLevelError
	for _, l := range []extism.LogLevel{extism.LogLevelWarn, extism.LogLevelInfo, extism.LogLevelDebug, extism.LogLevelTrace} {
		if logger.Enabled(ctx, slogLevel(l)) {
			want = l
		}
	}
	logLevelMu.Lock()
	defer logLevelMu.Unlock()
	if want < current {
		extism.SetLogLevel(want)
		current = want
	}
}

var current = extism.LogLevelOff

// hostFunctions are moat's functions for the plug-in: moat_call, and the
// HTTP functions relink moved to httpModule.
func (p *plugin) hostFunctions() []extism.HostFunction {
	i64 := extism.ValueTypeI64
	call := extism.NewHostFunctionWithStack(CallFunction, moatCall, []extism.ValueType{i64, i64}, []extism.ValueType{i64})
	call.SetNamespace(UserModule)
	req := extism.NewHostFunctionWithStack("http_request", httpRequest, []extism.ValueType{i64, i64}, []extism.ValueType{i64})
	status := extism.NewHostFunctionWithStack("http_status_code", httpStatusCode, nil, []extism.ValueType{api.ValueTypeI32})
	headers := extism.NewHostFunctionWithStack("http_headers", httpHeaders, nil, []extism.ValueType{i64})
	for _, f := range []*extism.HostFunction{&req, &status, &headers} {
		f.SetNamespace(httpModule)
	}
	cfg := extism.NewHostFunctionWithStack("config_get", configGet, []extism.ValueType{i64}, []extism.ValueType{i64})
	vget := extism.NewHostFunctionWithStack("var_get", varGet, []extism.ValueType{i64}, []extism.ValueType{i64})
	vset := extism.NewHostFunctionWithStack("var_set", varSet, []extism.ValueType{i64, i64}, nil)
	for _, f := range []*extism.HostFunction{&cfg, &vget, &vset} {
		f.SetNamespace(varsModule)
	}
	fns := []extism.HostFunction{call, req, status, headers, cfg, vget, vset}
	for _, name := range slices.Sorted(maps.Keys(logFunctions)) {
		f := extism.NewHostFunctionWithStack(name, guestLog(logFunctions[name]), []extism.ValueType{i64}, nil)
		f.SetNamespace(logModule)
		fns = append(fns, f)
	}
	return fns
}

// The Extism kernel's config and vars, as the go-sdk v1.7.1 implements
// them (same results, same traps), except that a name or value is never
// copied before its length is checked: a name longer than every key is
// not found, a value that cannot fit in the vars (maxVarBytes) is the
// go-sdk's "Variable store is full" trap. The go-sdk's copy whatever
// length the plug-in's blocks have, up to its memory limit.

// configGet is config_get(name) -> value offset, 0 when not set.
func configGet(ctx context.Context, cp *extism.CurrentPlugin, stack []uint64) {
	config := stateOf(ctx).inst.p.Config
	longest := 0
	for k := range config {
		longest = max(longest, len(k))
	}
	name, ok := readName(ctx, cp, stack[0], longest, "config_get")
	v, set := config[name]
	if !ok || !set {
		stack[0] = 0
		return
	}
	off, err := cp.WriteString(v)
	if err != nil {
		stateOf(ctx).abort(abi.CodeMemoryLimit, "config_get: no room for the %d-byte value in Extism memory: %v", len(v), err)
	}
	stack[0] = off
}

// varGet is var_get(name) -> value offset, 0 when not set; it frees name.
func varGet(ctx context.Context, cp *extism.CurrentPlugin, stack []uint64) {
	vars := stateOf(ctx).inst.p.Var
	longest := 0
	for k := range vars {
		longest = max(longest, len(k))
	}
	name, ok := readName(ctx, cp, stack[0], longest, "var_get")
	_ = cp.Free(stack[0])
	v, set := vars[name]
	if !ok || !set {
		stack[0] = 0
		return
	}
	off, err := cp.WriteBytes(v)
	if err != nil {
		stateOf(ctx).abort(abi.CodeMemoryLimit, "var_get: no room for the %d-byte value in Extism memory: %v", len(v), err)
	}
	stack[0] = off
}

// varSet is var_set(name, value): value 0 removes the var; it frees both.
func varSet(ctx context.Context, cp *extism.CurrentPlugin, stack []uint64) {
	ep := stateOf(ctx).inst.p
	full := func() { panic("Variable store is full") } // the go-sdk's words and panic
	name, ok := readName(ctx, cp, stack[0], int(ep.MaxVarBytes), "var_set")
	_ = cp.Free(stack[0])
	switch {
	case stack[1] == 0:
		if ok { // a name too long to read is no var either
			delete(ep.Var, name)
		}
		return
	case !ok:
		full()
	}
	// The go-sdk's accounting: every var's name and value, and a slice
	// and a string header per var, the new one included.
	const overhead = int(unsafe.Sizeof([]byte{}) + unsafe.Sizeof(""))
	size := overhead + len(name)
	for k, v := range ep.Var {
		size += overhead + len(k) + len(v)
	}
	n, err := cp.Length(stack[1])
	if err != nil {
		stateOf(ctx).abort(abi.CodeGuestFault, "var_set: the value at offset %d is not an Extism memory block: %v", stack[1], err)
	}
	if uint64(size)+n >= uint64(ep.MaxVarBytes) {
		_ = cp.Free(stack[1])
		full()
	}
	view, ok := blockView(cp, stack[1], n)
	if !ok {
		stateOf(ctx).abort(abi.CodeGuestFault, "var_set: the value [%d, +%d) is outside Extism memory", stack[1], n)
	}
	ep.Var[name] = bytes.Clone(view)
	_ = cp.Free(stack[1])
}

// readName reads the name block at off when it is at most limit bytes
// long; ok is false, and nothing is copied, when it is longer.
func readName(ctx context.Context, cp *extism.CurrentPlugin, off uint64, limit int, fn string) (name string, ok bool) {
	n, err := cp.Length(off)
	if err != nil {
		stateOf(ctx).abort(abi.CodeGuestFault, "%s: the name at offset %d is not an Extism memory block: %v", fn, off, err)
	}
	if n > uint64(limit) {
		return "", false
	}
	view, ok := blockView(cp, off, n)
	if !ok {
		stateOf(ctx).abort(abi.CodeGuestFault, "%s: the name [%d, +%d) is outside Extism memory", fn, off, n)
	}
	return string(view), true
}

// guestLog is Extism's log_<level>(msg): the block at msg is the message,
// freed once logged. Unlike the go-sdk's, it never copies more than
// abi.MaxLogMessage bytes of it (a longer message is cut, and says so),
// and each record is charged to the invocation's log budget
// (limits.budget.log_records and log_bytes) as log.write's are: past it
// the record is dropped, the first drop audited. A level the host's log
// does not record costs nothing.
func guestLog(level extism.LogLevel) func(context.Context, *extism.CurrentPlugin, []uint64) {
	return func(ctx context.Context, cp *extism.CurrentPlugin, stack []uint64) {
		st := stateOf(ctx)
		off := stack[0]
		defer func() { _ = cp.Free(off) }()
		log := st.call.Log()
		if !log.Enabled(ctx, slogLevel(level)) {
			return
		}
		n, err := cp.Length(off)
		if err != nil {
			st.abort(abi.CodeGuestFault, "log: the message at offset %d is not an Extism memory block: %v", off, err)
		}
		keep := min(n, abi.MaxLogMessage)
		view, ok := blockView(cp, off, keep)
		if !ok {
			st.abort(abi.CodeGuestFault, "log: the message [%d, +%d) is outside Extism memory", off, n)
		}
		msg := string(view)
		if keep < n {
			msg += fmt.Sprintf(" ... (cut: the message is %d bytes; the limit is %d)", n, abi.MaxLogMessage)
		}
		if budget.From(ctx).Log(len(msg)) != nil {
			return // dropped; the budget's first refusal is audited
		}
		log.LogAttrs(ctx, slogLevel(level), msg, slog.String("source", "guest"))
	}
}

// moatCall is extism:host/user moat_call: one op of moat's op table.
//
// The op name and the request are Extism memory blocks of any size the
// plug-in's memory limit allows; the host checks their lengths before it
// copies a byte of them, as every transport does: an op name longer than
// any op's is unknown_op, a request over abi.MaxRequestBytes too_large,
// and the copy is held in the invocation's budget (budget.Limits.HeldBytes)
// while the op runs, past which it is resource_exhausted. Each is a reply
// to the guest, which goes on; the first hit of a budget limit is audited.
func moatCall(ctx context.Context, cp *extism.CurrentPlugin, stack []uint64) {
	st := stateOf(ctx)
	bud := budget.From(ctx)
	reply, err := func() ([]byte, error) {
		op, release, err := readBlock(cp, stack[0], maxOpNameBytes, bud, CallFunction+": the op name", func(n uint64) error {
			return abi.Errorf(abi.CodeUnknownOp, "%s: the op name is %d bytes; no op's name is longer than %d", CallFunction, n, maxOpNameBytes)
		})
		if err != nil {
			return nil, err
		}
		defer release()
		req, release, err := readBlock(cp, stack[1], abi.MaxRequestBytes, bud, fmt.Sprintf("%s %.64s: the request", CallFunction, op), func(n uint64) error {
			return abi.Errorf(abi.CodeTooLarge, "op %.64s: the request is %d bytes; the limit is %d (abi.MaxRequestBytes)", op, n, abi.MaxRequestBytes)
		})
		if err != nil {
			return nil, err
		}
		defer release()
		return st.call.Dispatch(ctx, op, req)
	}()
	if f, ok := err.(*blockFault); ok {
		st.abort(abi.CodeGuestFault, "%s", f.reason)
	}
	var out []byte
	if err != nil {
		e := abi.AsError(err)
		b, merr := abi.Marshal(struct {
			Error *abi.Error `json:"error"`
		}{e})
		if merr != nil {
			st.abort(abi.CodeInternal, "%s: encode the error: %v", CallFunction, merr)
		}
		out = b
	} else {
		out = make([]byte, 0, len(reply)+9)
		out = append(append(append(out, `{"resp":`...), reply...), '}')
	}
	off, err := cp.WriteBytes(out)
	if err != nil {
		st.abort(abi.CodeMemoryLimit, "%s: no room for the %d-byte reply in Extism memory: %v", CallFunction, len(out), err)
	}
	stack[0] = off
}

// maxOpNameBytes bounds the op name moat_call copies: every op's name is
// far shorter, so a longer one is refused as unknown without a copy.
const maxOpNameBytes = 256

// blockFault is an offset that is no Extism memory block (or one that runs
// past the kernel's memory): the plug-in broke the ABI.
type blockFault struct{ reason string }

func (f *blockFault) Error() string { return f.reason }

// readBlock copies the Extism memory block at off into host memory, after
// checking its length: over limit it returns over(length) and copies
// nothing; past the invocation's held bytes (b) it is resource_exhausted;
// a *blockFault when off is no block. The copy is held in b until release
// is called. (The go-sdk's CurrentPlugin.ReadBytes copies whatever length
// the block has, so it is never used on a block the guest sized.)
func readBlock(cp *extism.CurrentPlugin, off uint64, limit int, b *budget.Budget, what string, over func(n uint64) error) (block []byte, release func(), err error) {
	n, err := cp.Length(off)
	if err != nil {
		return nil, nil, &blockFault{fmt.Sprintf("%s at offset %d is not an Extism memory block: %v", what, off, err)}
	}
	if n > uint64(limit) {
		return nil, nil, over(n)
	}
	if n == 0 {
		return nil, func() {}, nil
	}
	view, ok := blockView(cp, off, n)
	if !ok {
		return nil, nil, &blockFault{fmt.Sprintf("%s [%d, +%d) is outside Extism memory (%d bytes)", what, off, n, cp.Memory().Size())}
	}
	if err := b.Hold(int64(n), what); err != nil {
		return nil, nil, err
	}
	return bytes.Clone(view), func() { b.Release(int64(n)) }, nil
}

// blockView is the n bytes of Extism memory at off, without a copy; ok is
// false when they are not all inside it. The caller has checked n against
// its limit (cp.Length) first.
func blockView(cp *extism.CurrentPlugin, off, n uint64) (view []byte, ok bool) {
	if off > math.MaxUint32 || n > math.MaxUint32 {
		return nil, false
	}
	return cp.Memory().Read(uint32(off), uint32(n))
}

// firstLine drops wazero's wasm stack trace from an error message.
func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSuffix(s, " (recovered by wazero)")
}
