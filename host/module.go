package host

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/driver"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/internal/wasmrewrite"
	"github.com/moat-sandbox/moat/policy"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Kind is what a module is, read from its imports and exports.
type Kind string

const (
	// KindPlugin is a moat plugin: a reactor exporting moat_invoke.
	KindPlugin Kind = "moat-plugin"
	// KindCommand is a WASI command: it exports _start and runs once.
	KindCommand Kind = "wasi-command"
	// KindScript is an interpreter (a WASI command) serving a manifest's
	// actions by running a script once per call: an interpreted plugin,
	// loaded with LoadOptions.Script.
	KindScript Kind = "script"
	// KindExtism is an Extism plug-in: it imports extism:host/env, and
	// each exported function is an action. It runs only when a driver for
	// it is registered, which importing
	// github.com/moat-sandbox/moat/host/extism does.
	KindExtism Kind = "extism"
	// KindNative is a native plugin (kind: native in moat.yaml): no
	// WebAssembly, but long-lived worker processes started from the
	// manifest's command, each confined by every kernel layer (its own
	// uid, cgroup, root filesystem and empty network namespace; Landlock;
	// seccomp), speaking the op table over the pipe transport. Load it
	// with LoadOptions.Native.
	KindNative Kind = "native"
)

// Isolation says how instances are shared between invocations.
type Isolation string

const (
	// IsolationPooled reuses instances between invocations (the default):
	// globals and memory persist from one call to the next, as in a
	// long-lived plugin. An instance that failed is never reused.
	IsolationPooled Isolation = "pooled"
	// IsolationFresh makes a new instance for each invocation and discards
	// it after, so no state survives a call. It costs an instantiation
	// (about 15 µs for a small module, 2–4 ms for a Go guest).
	IsolationFresh Isolation = "fresh"
)

// LoadOptions configure one loaded module.
type LoadOptions struct {
	// Name identifies the module: its log records and its storage scope.
	// 1–64 characters of a-z, 0-9, '.', '_' and '-', starting with a
	// letter or digit. Default: "module-" and the first 12 digest digits.
	Name string
	// Config is what config.get returns to the guest.
	Config map[string]string
	// Isolation defaults to IsolationPooled.
	Isolation Isolation
	// MaxIdle bounds the pooled instances kept between invocations.
	// Default 8.
	MaxIdle int
	// Limits override the manifest's and the host's for this module.
	Limits Limits
	// Manifest declares the module's actions, requirements and requested
	// capabilities (moat.yaml). Without one, the module's actions are
	// whatever it exports, with no role requirements and no capabilities
	// beyond log.write and config.get.
	Manifest *policy.Manifest
	// ManifestBytes are the manifest as it was signed; Signature is the
	// module's .minisig file. Both are checked against the profile's
	// trusted keys.
	ManifestBytes []byte
	Signature     []byte
	// CorrelationID tags the load's audit events.
	CorrelationID string
	// Script makes a WASI command (an interpreter) serve the manifest's
	// actions; see Script.
	Script *Script
	// Snapshot lets the runs of a WASI command (an interpreter) start
	// from an image of its state instead of from _start (snapshot.go):
	// RunRequest.Entry for a run, and a resident Script's instances.
	Snapshot *Snapshot
	// ResidentImage, for a resident Script with a Snapshot, is the image
	// its instances start from instead of one captured from its own top
	// level: another module's of the same interpreter, code and mounts
	// (Module.ResidentImage, Module.CaptureResident; residentimage.go).
	// An instance that cannot start from it fails; none starts cold.
	ResidentImage *ResidentImage
	// Template makes the module keep a reference to the bytes it was
	// loaded from, so that later loads of the same slice may name it in
	// Like. Like makes a load of the bytes a Template module was loaded
	// from (the same slice, not merely equal bytes) reuse that module's
	// digest, snapshot preparation and machine code instead of hashing,
	// rewriting and looking them up again: ~100 ms of a 26 MB
	// interpreter's load. server/sessions loads a module per code context
	// this way. Any other bytes are loaded as without it.
	Template bool
	Like     *Module
	// Native loads a native plugin (kind: native) instead of WebAssembly:
	// Load's wasm must then be empty. See Native.
	Native *Native
	// NativeWorkers, for a native plugin, replaces Config.NativeWorkers:
	// a share of them (WorkerSlots.Within), such as its organization's.
	NativeWorkers *native.WorkerSlots
	// LocalCode keeps the module's compiled code to this host when it
	// shares code through the store (Config.CodeKey): nothing is fetched
	// for it or stored. For one-off modules, such as the build of a
	// submission to the code-execution routes: storing each would cost a
	// database write of megabytes per run and evict the code of the
	// modules replicas keep loading.
	LocalCode bool
	// Toolchain says the bytes are the machine's toolchain (an
	// interpreter moat runs), not a tenant's: what the load makes from
	// them alone, its machine code, snapshot entry and command image, is
	// kept in Config.MachineCacheDir for every host of the machine
	// (machinecache.go). A resident script's image, or one with file
	// grants, stays in the host's cache directory: it may hold a
	// tenant's state.
	Toolchain bool
	// FirstTime, when set, is called as the load starts work a later load
	// of the same bytes on this machine does not repeat (compiling to
	// machine code that the compilation cache does not hold yet, finding
	// a snapshot's entry), and the func it returns when that work ends.
	// It is not called for a load the cache answers, so a caller that
	// shows "compiling it to machine code, once" says it only when true.
	FirstTime func(stage string) (done func())
	// CheckOnly loads the module to look at it (moat build and moat
	// inspect of an interpreted plugin): everything is checked and
	// compiled, but no instance starts, so none of the module's code
	// runs: a resident script's top level (and with it the snapshot
	// image, made from it under the module's grants) waits for a load
	// that serves calls.
	CheckOnly bool

	// Org is the organization the module is loaded for (as moat serve
	// loads each organization's modules), or "" when callers of every
	// organization share it. The models of its manifest (db.*) are kept
	// and migrated per (Org, module name), so two organizations' modules
	// of one name never see each other's models; only Org's callers may
	// use them.
	Org string
}

// config is what config.get answers: the manifest's config, then
// LoadOptions.Config over it.
func (opts *LoadOptions) config() map[string]string {
	c := map[string]string{}
	if mf := opts.Manifest; mf != nil {
		maps.Copy(c, mf.Config)
	}
	maps.Copy(c, opts.Config)
	return c
}

// Module is a compiled module ready to run. It is safe for concurrent use.
//
// Its fields are what every kind of module shares; how its calls run is
// its runtime's (runtime.go), chosen by its loader (load.go).
type Module struct {
	host   *Host
	name   string
	digest string
	rt     moduleRuntime // runs its calls: one per execution mode
	code   *wasmCode     // its WebAssembly and instances; empty for a native plugin
	config map[string]string
	limits Limits
	info   Info
	acts   actionTable
	policy *modulePolicy
	views  ops.Views   // each op family's view of it, attached at load (attach.go)
	files  *fileGrants // its granted directories (files.go); nil: none
}

// actionTable maps the names callers use to the actions a module
// registers.
type actionTable struct {
	names     []string          // as the module registers them (moat_actions, a driver's functions, the manifest's exports)
	idx       map[string]uint32 // registered name -> index in names
	public    []string          // action names callers use (the manifest's)
	publicIdx map[string]uint32 // public name -> index in names
}

// Info describes a module for `moat inspect` and the API.
type Info struct {
	Name      string      `json:"name"`
	Digest    string      `json:"digest"`
	Kind      Kind        `json:"kind"`
	Size      int         `json:"size"`
	Reactor   bool        `json:"reactor"` // exports _initialize
	Actions   []string    `json:"actions,omitempty"`
	Imports   []Signature `json:"imports"`
	Exports   []Signature `json:"exports"`
	Compile   CompileInfo `json:"compile"`
	Mode      string      `json:"mode,omitempty"`   // trusted or sandboxed
	Signer    string      `json:"signer,omitempty"` // the trusted key that signed it
	MemoryMin uint32      `json:"memory_min_pages"`
	MemoryMax uint32      `json:"memory_max_pages,omitempty"`
}

// CompileInfo says how this process got the module's machine code.
type CompileInfo struct {
	FromDiskCache bool `json:"from_disk_cache"`
	// FromSharedCode: compiled by another host on the same store and
	// shared through it (Config.CodeKey).
	FromSharedCode bool          `json:"from_shared_code,omitempty"`
	Duration       time.Duration `json:"duration_ns"`
}

// Signature is one imported or exported function (the driver SPI's
// type: a driver reads a module's imports and exports).
type Signature = driver.Signature

// checkImports refuses, at load and with the import named, what
// instantiation would refuse in wazero's wording, or what would fail only
// when called: an import of a module this host does not provide, of a
// function its modules do not export or with another signature, and any
// import of a table, memory, global or tag (the host's modules export
// functions only).
func (h *Host) checkImports(funcs []Signature, others []wasmrewrite.Import) error {
	for _, imp := range funcs {
		exports, ok := h.provided[imp.Module]
		if !ok {
			return fmt.Errorf("imports %s.%s, which this host does not provide (it provides the %q and %q modules)",
				imp.Module, imp.Name, abi.ImportModule, wasi_snapshot_preview1.ModuleName)
		}
		want, ok := exports[imp.Name]
		if !ok {
			return fmt.Errorf("imports %s.%s, which the %q module does not export (it exports: %s)",
				imp.Module, imp.Name, imp.Module, exportList(exports))
		}
		if !slices.Equal(imp.Params, want.Params) || !slices.Equal(imp.Result, want.Result) {
			return fmt.Errorf("imports %s.%s as (%s) -> (%s); the host's is (%s) -> (%s)", imp.Module, imp.Name,
				strings.Join(imp.Params, ", "), strings.Join(imp.Result, ", "), strings.Join(want.Params, ", "), strings.Join(want.Result, ", "))
		}
	}
	for _, imp := range others {
		return fmt.Errorf("imports the %s %s.%s: this host provides functions only (from the %q and %q modules)",
			imp.Kind, imp.Module, imp.Name, abi.ImportModule, wasi_snapshot_preview1.ModuleName)
	}
	return nil
}

func exportList(exports map[string]Signature) string {
	names := slices.Sorted(maps.Keys(exports))
	if len(names) > 12 {
		names = append(names[:12], "...")
	}
	return strings.Join(names, ", ")
}

// the signatures of the plugin exports, checked at load
var pluginExports = map[string][2][]api.ValueType{
	abi.ExportVersion: {nil, {api.ValueTypeI32}},
	abi.ExportActions: {nil, {api.ValueTypeI64}},
	abi.ExportAlloc:   {{api.ValueTypeI32}, {api.ValueTypeI32}},
	abi.ExportInvoke:  {{api.ValueTypeI32, api.ValueTypeI32, api.ValueTypeI32}, {api.ValueTypeI64}},
}

// mapActions maps the manifest's action names to the module's action
// indexes, checking that each declared export exists.
func (m *Module) mapActions() error {
	m.acts.idx = map[string]uint32{}
	for i, a := range m.acts.names {
		m.acts.idx[a] = uint32(i) // a driver's duplicate: the last
	}
	m.acts.publicIdx = map[string]uint32{}
	for _, a := range m.policy.manifest.Actions {
		export := a.Export
		if export == "" {
			export = a.Name
		}
		idx, ok := m.acts.idx[export]
		if !ok {
			return fmt.Errorf("the manifest declares action %s (export %s), which the module does not register; it registers: %s",
				a.Name, export, strings.Join(m.acts.names, ", "))
		}
		m.acts.publicIdx[a.Name] = idx
		m.acts.public = append(m.acts.public, a.Name)
	}
	return nil
}

// manifestLimits converts the policy's effective limits to host limits.
func manifestLimits(l policy.Limits) Limits {
	return Limits{
		Timeout:          time.Duration(l.Timeout),
		MemoryLimitPages: uint32(min(uint64(l.Memory)/65536, MaxMemoryLimitPages)),
	}
}

func checkMagic(wasm []byte) error {
	switch {
	case len(wasm) == 0:
		return fmt.Errorf("the module is empty (0 bytes)")
	case bytes.HasPrefix(wasm, []byte("\x00asm")):
		return nil
	case bytes.HasPrefix(bytes.TrimSpace(wasm), []byte("(module")):
		return fmt.Errorf("this is WebAssembly text (.wat), not a binary module: compile it with `wat2wasm file.wat`")
	default:
		head := wasm[:min(len(wasm), 4)]
		return fmt.Errorf("not a WebAssembly binary: it starts with %q, not \"\\x00asm\"", head)
	}
}

func checkPluginExports(exports map[string]api.FunctionDefinition) error {
	for _, name := range []string{abi.ExportVersion, abi.ExportActions, abi.ExportAlloc, abi.ExportInvoke} {
		want := pluginExports[name]
		def, ok := exports[name]
		if !ok {
			return fmt.Errorf("a moat plugin must export %s; it is missing (is the guest built with the moat SDK?)", name)
		}
		if !sameTypes(def.ParamTypes(), want[0]) || !sameTypes(def.ResultTypes(), want[1]) {
			return fmt.Errorf("export %s has signature (%s) -> (%s); ABI v%d needs (%s) -> (%s)", name,
				typeNames(def.ParamTypes()), typeNames(def.ResultTypes()), abi.Version, typeNames(want[0]), typeNames(want[1]))
		}
	}
	return nil
}

// prepare makes the first instance of a plugin: it checks the ABI version,
// reads the action list, and keeps the instance in the pool.
func (m *Module) prepare(ctx context.Context, rt *pooledRuntime) ([]string, error) {
	inst, err := m.newInstance(ctx, m.limits)
	if err != nil {
		return nil, err
	}
	fail := func(code abi.Code, format string, args ...any) ([]string, error) {
		inst.close()
		return nil, &Error{Module: m.name, Code: code, Reason: fmt.Sprintf(format, args...)}
	}
	// The module's own code runs here: under the module's timeout, like
	// any of its calls, so a guest spinning in moat_version cannot hold
	// the load for ever.
	ctx, cancel := context.WithTimeout(ctx, m.limits.Timeout)
	defer cancel()
	v, err := inst.mod.ExportedFunction(abi.ExportVersion).Call(ctx)
	if err != nil {
		return fail(abi.CodeBadModule, "%s trapped: %v", abi.ExportVersion, firstLine(err))
	}
	if got := uint32(v[0]); got != abi.Version {
		return fail(abi.CodeABIVersion, "the module speaks moat ABI v%d; this host speaks v%d: rebuild it with a moat SDK for ABI v%d",
			got, abi.Version, abi.Version)
	}
	r, err := inst.mod.ExportedFunction(abi.ExportActions).Call(ctx)
	if err != nil {
		return fail(abi.CodeBadModule, "%s trapped: %v", abi.ExportActions, firstLine(err))
	}
	ptr, n := abi.Unpack(r[0])
	list, ok := inst.mod.Memory().Read(ptr, n)
	if !ok {
		return fail(abi.CodeGuestFault, "%s returned [%d, +%d), outside guest memory", abi.ExportActions, ptr, n)
	}
	var actions []string
	seen := map[string]bool{}
	for _, a := range strings.Split(strings.TrimRight(string(list), "\n"), "\n") {
		if a == "" {
			continue
		}
		if seen[a] {
			return fail(abi.CodeBadModule, "action %q is listed twice by %s", a, abi.ExportActions)
		}
		seen[a] = true
		actions = append(actions, a)
	}
	if len(actions) == 0 {
		return fail(abi.CodeBadModule, "the module registers no actions (its %s list is empty)", abi.ExportActions)
	}
	rt.put(inst)
	return actions, nil
}

// Name is the module's name.
func (m *Module) Name() string { return m.name }

// Digest is the hex SHA-256 of the module's bytes.
func (m *Module) Digest() string { return m.digest }

// Kind says whether the module is a plugin or a command.
func (m *Module) Kind() Kind { return m.info.Kind }

// Actions lists a plugin's actions as callers name them: the manifest's
// names, or the module's own when it has no manifest.
func (m *Module) Actions() []string { return append([]string(nil), m.acts.public...) }

// Manifest is the module's manifest (an implicit one when it was loaded
// without moat.yaml).
func (m *Module) Manifest() *policy.Manifest { return m.policy.manifest }

// Evaluation is what the profile granted the module.
func (m *Module) Evaluation() *policy.Evaluation { return m.policy.eval }

// Info describes the module.
func (m *Module) Info() Info { return m.info }

// Close discards the module's idle instances. Invocations in flight finish
// and their instances are then closed rather than pooled.
func (m *Module) Close(ctx context.Context) error {
	var err error
	if m.rt != nil {
		err = m.rt.close(ctx) // its idle instances, its driver's module, its workers
	}
	m.code.mu.Lock()
	c := m.code.compiled
	m.code.compiled = nil
	m.code.mu.Unlock()
	// Its machine code is freed with the last module using it; calls in
	// flight finish on their instances (wazero allows closing a compiled
	// module under them), and keep its granted directories until then.
	defer m.host.release(c)
	defer m.views.Detach() // its http client
	m.closeFileGrants()
	return err
}

// manifestKind is the manifest kind of a module kind.
func manifestKind(k Kind) policy.Kind {
	switch k {
	case KindPlugin, KindScript:
		return policy.KindMoat
	case KindCommand:
		return policy.KindWASICommand
	}
	return policy.Kind(k) // native, and a driver's kind: the manifest's name is the module's

}

// describe reads cm's imports and exports; c is the host's compilation of
// it, nil for a Script's Interpreter, which compiles in its own runtime.
func describe(name, digest string, size int, cm wazero.CompiledModule, c *compiled) Info {
	info := Info{Name: name, Digest: digest, Size: size}
	if c != nil {
		info.Compile = CompileInfo{FromDiskCache: c.fromCache, FromSharedCode: c.fromStore, Duration: c.took}
	}
	for _, def := range cm.ImportedFunctions() {
		mod, n, _ := def.Import()
		if mod == wasmrewrite.InterruptModule {
			continue // the host's, not the author's (interrupt.go)
		}
		info.Imports = append(info.Imports, Signature{Module: mod, Name: n, Params: typeList(def.ParamTypes()), Result: typeList(def.ResultTypes())})
	}
	exports := cm.ExportedFunctions()
	for _, n := range slices.Sorted(maps.Keys(exports)) {
		if n == wasmrewrite.InterruptStartExport {
			continue // the host's, not the author's (interrupt.go)
		}
		def := exports[n]
		info.Exports = append(info.Exports, Signature{Name: n, Params: typeList(def.ParamTypes()), Result: typeList(def.ResultTypes())})
	}
	_, info.Reactor = exports[abi.ExportInitWASI]
	for _, mem := range cm.ExportedMemories() {
		info.MemoryMin = mem.Min()
		if max, ok := mem.Max(); ok {
			info.MemoryMax = max
		}
	}
	for _, mem := range cm.ImportedMemories() {
		info.MemoryMin = mem.Min()
	}
	return info
}

// ValidateModuleName checks a module name: 1–64 characters of a-z, 0-9,
// '.', '_' and '-', starting with a letter or digit. Names scope storage
// and appear in URLs and file names.
func ValidateModuleName(s string) error {
	return checkName("module name", s, false)
}

// ValidateActionName checks an action name: 1–64 characters of A-Z, a-z,
// 0-9, '.', '_' and '-', starting with a letter or digit, as a manifest's
// actions are (policy.ParseManifest). Action names come from the module
// itself (moat_actions, an Extism plug-in's exports) as well as from
// manifests, and they travel into audit rows, log records, metric labels,
// URLs and the operator's terminal: a newline there forges a row, an
// escape sequence drives the terminal. So every name is checked at load,
// whatever its origin, and a module with one bad name is refused whole.
func ValidateActionName(s string) error {
	return checkName("action name", s, true)
}

// checkName is the one alphabet of module and action names. The name is
// quoted in the error (%q), so the error itself carries no raw control
// byte.
func checkName(what, s string, upper bool) error {
	if s == "" || len(s) > MaxActionName {
		if len(s) > 2*MaxActionName {
			return fmt.Errorf("%s %q... (%d bytes) must be 1 to %d characters long", what, s[:MaxActionName], len(s), MaxActionName)
		}
		return fmt.Errorf("%s %q must be 1 to %d characters long", what, s, MaxActionName)
	}
	for i, r := range s {
		if r == utf8.RuneError && !strings.HasPrefix(s[i:], string(utf8.RuneError)) {
			return fmt.Errorf("%s %q: byte %#x at %d is not UTF-8", what, s, s[i], i)
		}
		ok := r >= 'a' && r <= 'z' || upper && r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && strings.ContainsRune("._-", r)
		if !ok {
			allowed := "a-z, 0-9"
			if upper {
				allowed = "A-Z, a-z, 0-9"
			}
			return fmt.Errorf("%s %q: character %q at %d is not allowed (use %s, and . _ - after the first)", what, s, r, i, allowed)
		}
	}
	return nil
}

// checkActionNames refuses a module any of whose action names, as the
// module registers them or as its manifest declares them, is not a valid
// action name (ValidateActionName). origin says where the module's names
// come from (its loader's), "" for moat_actions.
func (m *Module) checkActionNames(origin string) error {
	if origin == "" {
		origin = "the module registers (" + abi.ExportActions + ")"
	}
	for _, a := range m.acts.names {
		if err := ValidateActionName(a); err != nil {
			return fmt.Errorf("an action %s is refused: %w; rename it in the module's source", origin, err)
		}
	}
	if m.policy.implicit || m.policy.manifest == nil {
		return nil
	}
	for _, a := range m.policy.manifest.Actions {
		if err := ValidateActionName(a.Name); err != nil {
			return fmt.Errorf("an action the manifest declares is refused: %w", err)
		}
	}
	return nil
}

func sameTypes(a, b []api.ValueType) bool { return bytes.Equal(a, b) }

func typeList(ts []api.ValueType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = api.ValueTypeName(t)
	}
	return out
}

func typeNames(ts []api.ValueType) string { return strings.Join(typeList(ts), ", ") }

func exportNames(exports map[string]api.FunctionDefinition) string {
	if len(exports) == 0 {
		return "(none)"
	}
	return strings.Join(slices.Sorted(maps.Keys(exports)), ", ")
}

// firstLine drops wazero's wasm stack trace from an error message: callers
// get a one-line reason; the trace goes to the debug log.
func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSuffix(s, " (recovered by wazero)")
}
