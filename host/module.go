package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/pool"
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
type Module struct {
	host      *Host
	name      string
	digest    string
	kind      Kind
	cm        wazero.CompiledModule
	config    map[string]string
	limits    Limits
	isolation Isolation
	maxIdle   int
	hasInit   bool
	memMin    uint32 // the declared initial memory, in pages
	info      Info
	snap      *snapshotState // runs may start from an image (snapshot.go)

	actions   []string          // as the module registers them (moat_actions)
	actionIdx map[string]uint32 // module action name -> index
	public    []string          // action names callers use (the manifest's)
	publicIdx map[string]uint32 // public name -> index
	policy    *modulePolicy
	diskQuota int64
	models    *store.Models // the manifest's models, migrated at load (models.go); nil: none
	dbQuota   store.DBQuota
	runner    Runner // a foreign module's driver (KindExtism) or a native plugin's workers; nil otherwise
	script    *Script
	scriptRT  wazero.Runtime // the runtime of the script's Interpreter (cm is compiled there), or nil: the host's
	source    []byte         // a native plugin's files, as signed
	compiled  *compiled      // its machine code, released by Close
	http      moduleHTTP     // its outbound requests' client (outbound.go)
	files     *fileGrants    // its granted directories (files.go); nil: none
	filesOnce sync.Once      // Close drops the module's reference once

	idle *pool.LIFO[*instance] // a plugin's and a resident script's warm instances

	mu sync.Mutex // guards compiled
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

// Signature is one imported or exported function.
type Signature struct {
	Module string   `json:"module,omitempty"` // imports only
	Name   string   `json:"name"`
	Params []string `json:"params"`
	Result []string `json:"results"`
}

func (s Signature) String() string {
	name := s.Name
	if s.Module != "" {
		name = s.Module + "." + s.Name
	}
	return fmt.Sprintf("%s(%s) -> (%s)", name, strings.Join(s.Params, ", "), strings.Join(s.Result, ", "))
}

// checkImports refuses, at load and with the import named, what
// instantiation would refuse in wazero's wording, or what would fail only
// when called: an import of a module this host does not provide, of a
// function its modules do not export or with another signature, and any
// import of a table, memory, global or tag (the host's modules export
// functions only).
func (h *Host) checkImports(funcs []Signature, others []importDecl) error {
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
			imp.kind, imp.module, imp.name, abi.ImportModule, wasi_snapshot_preview1.ModuleName)
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

// Load compiles wasm (or reuses the compilation of the same bytes) and
// prepares it to run. A plugin is instantiated once here, so a module that
// fails its ABI check or its _initialize fails at load, not on first use.
func (h *Host) Load(ctx context.Context, wasm []byte, opts LoadOptions) (*Module, error) {
	if opts.Native != nil {
		if len(wasm) > 0 {
			return nil, &Error{Module: opts.Name, Code: abi.CodeInvalidArgument, Reason: "a native plugin has no WebAssembly: pass nil bytes with LoadOptions.Native"}
		}
		return h.loadNative(ctx, opts)
	}
	digest := Digest(wasm)
	name := opts.Name
	if mf := opts.Manifest; mf != nil {
		if name != "" && name != mf.Name {
			return nil, &Error{Module: name, Code: abi.CodeInvalidArgument, Reason: fmt.Sprintf("the manifest names the module %q, the load names it %q: use one name", mf.Name, name)}
		}
		name = mf.Name
	}
	if name == "" {
		name = "module-" + digest[:12]
	}
	fail := func(code abi.Code, err error, format string, args ...any) (*Module, error) {
		return nil, &Error{Module: name, Code: code, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	if err := ValidateModuleName(name); err != nil {
		return fail(abi.CodeInvalidArgument, err, "%v", err)
	}
	if err := checkMagic(wasm); err != nil {
		return fail(abi.CodeBadModule, nil, "%v", err)
	}
	// The signature is checked before anything of the module runs, or is
	// even compiled.
	signed := wasm
	if opts.Script != nil {
		// A script's own bytes are its sources; the interpreter's are
		// the same for every plugin and would let one plugin's
		// signature stand for another's.
		signed = opts.Script.Source
		if opts.Signature != nil && len(signed) == 0 {
			return fail(abi.CodeInvalidArgument, nil, "a signed script needs Script.Source, the sources its signature covers")
		}
	}
	signer, err := h.verifySignature(ctx, name, signed, opts, opts.CorrelationID)
	if err != nil {
		return nil, err
	}
	// Bound the module's tables in the bytes that are compiled (tables.go);
	// the digest and signature stay those of wasm.
	tableCap := opts.Limits.Or(h.cfg.Limits).MaxTableElements
	if tableCap > MaxTableElementsCeiling {
		return fail(abi.CodeInvalidArgument, nil, "table cap is %d elements: the most a module's tables may hold is %d", tableCap, MaxTableElementsCeiling)
	}
	// A module whose runs start from a snapshot has its globals and its
	// entry exported (snapshot.go); its compiled code is its own.
	codeDigest, source := digest, wasm
	var globals int
	if opts.Snapshot == nil && opts.Script != nil && opts.Script.Resident {
		opts.Snapshot = opts.Script.Snapshot
	}
	if opts.Snapshot != nil {
		var err error
		var entry uint32
		if source, globals, entry, err = h.prepareSnapshot(ctx, digest, wasm, opts.Snapshot, opts.FirstTime); err != nil {
			return fail(abi.CodeBadModule, err, "snapshot: %v", err)
		}
		codeDigest = fmt.Sprintf("%s-snap%d", digest, entry)
	}
	code, _, lay, err := limitTables(source, tableCap)
	if err != nil {
		var tle *TableLimitError
		if errors.As(err, &tle) {
			return fail(abi.CodeMemoryLimit, err, "%v", err)
		}
		return fail(abi.CodeBadModule, err, "invalid WebAssembly: %v", err)
	}
	if err := lay.checkCounts(); err != nil {
		return fail(abi.CodeMemoryLimit, err, "%v", err)
	}
	bounded := code // what a foreign driver or a script's Interpreter runs, in a runtime of its own
	interp := scriptInterpreter(opts)
	var c *compiled
	var cm wazero.CompiledModule
	var scriptRT wazero.Runtime
	if interp != nil {
		// The interpreter compiles in its own runtime (interpreter.go),
		// the bytes with bounded tables and without the host's rewrite.
		// The interpreter's own runtime does not say whether its cache
		// answered: its compile is reported as first-time work always.
		var done func()
		if opts.FirstTime != nil {
			done = opts.FirstTime("load")
		}
		scriptRT, cm, err = interp.Compile(ctx, h, bounded)
		if done != nil {
			done()
		}
		if err != nil {
			var e *Error
			switch {
			case errors.As(err, &e):
				return nil, err
			case ctx.Err() != nil:
				return fail(abi.CodeCanceled, err, "the load was canceled while the interpreter compiled: %v", err)
			}
			return fail(abi.CodeBadModule, err, "the interpreter: %v", firstLine(err))
		}
	} else {
		// Check for the end of the invocation at every loop header
		// (interrupt.go). The compilation's key is what decides the bytes
		// compiled: the module, its table cap and the rewrite's version.
		code, key, err := h.rewrite(codeDigest, tableCap, code, lay)
		if err != nil {
			return fail(abi.CodeBadModule, err, "invalid WebAssembly: %v", err)
		}
		c, err = h.compile(ctx, key, code, compileFor{name: name, correlation: opts.CorrelationID, local: opts.LocalCode, firstTime: opts.FirstTime})
		if err != nil {
			var pe *fs.PathError
			switch {
			case ctx.Err() != nil:
				return fail(abi.CodeCanceled, err, "the load was canceled while the module compiled: %v", err)
			case errors.As(err, &pe):
				// wazero compiled the module and could not keep it: the
				// host's fault, not the module's.
				return fail(abi.CodeInternal, err, "the compile cache %s: %v; give the host a directory it can write (Config.CacheDir; in moat: cache_dir, --cache-dir, $MOAT_CACHE_DIR)", h.cacheDir, firstLine(err))
			}
			return fail(abi.CodeBadModule, err, "invalid WebAssembly: %v", firstLine(err))
		}
		cm = c.cm
	}
	loaded := false
	defer func() {
		if !loaded {
			h.release(c) // a load that failed keeps no machine code
		}
	}()
	m := &Module{
		host: h, name: name, digest: digest, cm: cm, scriptRT: scriptRT, isolation: opts.Isolation, maxIdle: opts.MaxIdle,
		policy: &modulePolicy{profile: h.profile, manifest: opts.Manifest, implicit: opts.Manifest == nil},
	}
	defer func() {
		if !loaded {
			m.closeFileGrants()
		}
	}()
	if opts.Snapshot != nil {
		m.snap = &snapshotState{spec: *opts.Snapshot, globals: globals}
		m.snap.scope.org, m.snap.scope.manifest = opts.Org, manifestBytes(opts)
	}
	if m.isolation == "" {
		m.isolation = IsolationPooled
	}
	if m.isolation != IsolationPooled && m.isolation != IsolationFresh {
		return fail(abi.CodeInvalidArgument, nil, "isolation %q is not %q or %q", m.isolation, IsolationPooled, IsolationFresh)
	}
	if m.maxIdle <= 0 {
		m.maxIdle = 8
	}
	m.idle = pool.New[*instance](m.maxIdle)
	m.info = describe(name, digest, len(wasm), cm, c)
	if lay.memory != nil {
		m.memMin = lay.memory.min
		m.info.MemoryMin = lay.memory.min
	}
	exports := cm.ExportedFunctions()
	_, m.hasInit = exports[abi.ExportInitWASI]
	if interp == nil && (importsExtism(m.info) || opts.Manifest != nil && opts.Manifest.Kind == policy.KindExtism) {
		m.kind = KindExtism // its driver checks the imports it provides
	}
	if m.kind != KindExtism && interp == nil { // an interpreter provides its own imports
		if err := h.checkImports(m.info.Imports, lay.imports); err != nil {
			return fail(abi.CodeBadModule, nil, "%v", err)
		}
	}
	_, hasInvoke := exports[abi.ExportInvoke]
	_, hasStart := exports[abi.ExportStart]
	switch {
	case m.kind == KindExtism:
	case interp != nil:
		m.kind = KindCommand // its Run starts it; loadScript makes it KindScript
	case hasInvoke && hasStart:
		return fail(abi.CodeBadModule, nil, "exports both %s and %s: a moat plugin must be a reactor (build Go plugins with -buildmode=c-shared, C with -mexec-model=reactor)",
			abi.ExportInvoke, abi.ExportStart)
	case hasInvoke:
		m.kind = KindPlugin
		if err := m.checkPluginExports(exports); err != nil {
			return fail(abi.CodeBadModule, nil, "%v", err)
		}
		if _, ok := cm.ExportedMemories()[abi.ExportMemory]; !ok {
			return fail(abi.CodeBadModule, nil, "exports no memory named %q; the host passes input and output through it", abi.ExportMemory)
		}
	case hasStart:
		m.kind = KindCommand
	default:
		return fail(abi.CodeBadModule, nil, "exports neither %s (a moat plugin) nor %s (a WASI command); exports are: %s",
			abi.ExportInvoke, abi.ExportStart, exportNames(exports))
	}
	if opts.Script != nil {
		if err := m.loadScript(opts); err != nil {
			return nil, err
		}
	} else if mf := opts.Manifest; mf != nil {
		if mf.Kind != "" && mf.Kind != manifestKind(m.kind) {
			return fail(abi.CodeBadModule, nil, "the manifest says kind %s, but the module is of kind %s: write kind: %s", mf.Kind, manifestKind(m.kind), manifestKind(m.kind))
		}
	}

	// Policy first for declared modules, so a refused module never runs;
	// an implicit manifest needs the action list, so it is built after the
	// first instance.
	m.limits = opts.Limits.Or(h.cfg.Limits)
	if !m.policy.implicit {
		if err := h.applyPolicy(ctx, m, signer, opts.CorrelationID); err != nil {
			return nil, err
		}
		if err := h.openFileGrants(ctx, m, opts.CorrelationID); err != nil {
			return nil, err
		}
		if m.script != nil {
			if err := m.checkGuestPaths(m.script.Mounts); err != nil {
				return fail(abi.CodeInvalidArgument, err, "%v", err)
			}
		}
		m.limits = opts.Limits.Or(manifestLimits(m.policy.eval.Limits)).Or(h.cfg.Limits)
		if err := h.loadModels(ctx, m, opts); err != nil {
			return nil, err
		}
	}
	if err := m.limits.validate(); err != nil {
		return fail(abi.CodeInvalidArgument, err, "%v", err)
	}
	m.config = opts.config()
	switch m.kind {
	case KindPlugin:
		if err := m.prepare(ctx); err != nil {
			return nil, err
		}
	case KindExtism:
		if err := m.loadForeign(ctx, bounded); err != nil { // its tables bounded too; its runtime keeps CloseOnContextDone
			return nil, err
		}
	}
	if err := m.checkActionNames(); err != nil {
		m.Close(ctx)
		return fail(abi.CodeBadModule, err, "%v", err)
	}
	if m.policy.implicit {
		mf := &policy.Manifest{Name: name, Version: "0.0.0", Kind: manifestKind(m.kind)}
		for _, a := range m.actions {
			mf.Actions = append(mf.Actions, policy.Action{Name: a, Export: a})
		}
		m.policy.manifest = mf
		if err := h.applyPolicy(ctx, m, signer, opts.CorrelationID); err != nil {
			m.Close(ctx)
			return nil, err
		}
	}
	if err := m.mapActions(); err != nil {
		m.Close(ctx)
		return fail(abi.CodeBadModule, nil, "%v", err)
	}
	m.diskQuota = int64(m.policy.eval.Limits.Disk)
	m.info.Kind = m.kind
	m.info.Actions = m.public
	m.info.Mode = string(m.policy.eval.Mode)
	m.info.Signer = m.policy.eval.Signer
	if m.script != nil && m.script.Resident && !opts.CheckOnly {
		// The first instance now, as a plugin's: a script that fails as
		// it starts, or registers other actions than its manifest's,
		// fails its load, and the first call finds a warm instance.
		inst, err := m.newResidentInstance(ctx, m.limits)
		if err != nil {
			m.Close(ctx)
			return nil, err
		}
		m.put(inst)
	}
	m.compiled, loaded = c, true
	return m, nil
}

// mapActions maps the manifest's action names to the module's action
// indexes, checking that each declared export exists.
func (m *Module) mapActions() error {
	m.publicIdx = map[string]uint32{}
	for _, a := range m.policy.manifest.Actions {
		export := a.Export
		if export == "" {
			export = a.Name
		}
		idx, ok := m.actionIdx[export]
		if !ok {
			return fmt.Errorf("the manifest declares action %s (export %s), which the module does not register; it registers: %s",
				a.Name, export, strings.Join(m.actions, ", "))
		}
		m.publicIdx[a.Name] = idx
		m.public = append(m.public, a.Name)
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

func (m *Module) checkPluginExports(exports map[string]api.FunctionDefinition) error {
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
func (m *Module) prepare(ctx context.Context) error {
	inst, err := m.newInstance(ctx, m.limits)
	if err != nil {
		return err
	}
	fail := func(code abi.Code, format string, args ...any) error {
		inst.close()
		return &Error{Module: m.name, Code: code, Reason: fmt.Sprintf(format, args...)}
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
	m.actionIdx = map[string]uint32{}
	for _, a := range strings.Split(strings.TrimRight(string(list), "\n"), "\n") {
		if a == "" {
			continue
		}
		if _, dup := m.actionIdx[a]; dup {
			return fail(abi.CodeBadModule, "action %q is listed twice by %s", a, abi.ExportActions)
		}
		m.actionIdx[a] = uint32(len(m.actions))
		m.actions = append(m.actions, a)
	}
	if len(m.actions) == 0 {
		return fail(abi.CodeBadModule, "the module registers no actions (its %s list is empty)", abi.ExportActions)
	}
	m.put(inst)
	return nil
}

// Name is the module's name.
func (m *Module) Name() string { return m.name }

// Digest is the hex SHA-256 of the module's bytes.
func (m *Module) Digest() string { return m.digest }

// Kind says whether the module is a plugin or a command.
func (m *Module) Kind() Kind { return m.kind }

// Actions lists a plugin's actions as callers name them: the manifest's
// names, or the module's own when it has no manifest.
func (m *Module) Actions() []string { return append([]string(nil), m.public...) }

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
	idle := m.idle.Close()
	m.mu.Lock()
	c := m.compiled
	m.compiled = nil
	m.mu.Unlock()
	for _, inst := range idle {
		inst.close()
	}
	// Its machine code is freed with the last module using it; calls in
	// flight finish on their instances (wazero allows closing a compiled
	// module under them), and keep its granted directories until then.
	defer m.host.release(c)
	defer m.closeHTTP()
	m.closeFileGrants()
	if m.runner != nil {
		return m.runner.Close(ctx)
	}
	return nil
}

// manifestKind is the manifest kind of a module kind.
func manifestKind(k Kind) policy.Kind {
	switch k {
	case KindCommand:
		return policy.KindWASICommand
	case KindExtism:
		return policy.KindExtism
	case KindNative:
		return policy.KindNative
	}
	return policy.KindMoat
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
		if mod == InterruptModule {
			continue // the host's, not the author's (interrupt.go)
		}
		info.Imports = append(info.Imports, Signature{Module: mod, Name: n, Params: typeList(def.ParamTypes()), Result: typeList(def.ResultTypes())})
	}
	exports := cm.ExportedFunctions()
	for _, n := range slices.Sorted(maps.Keys(exports)) {
		if n == InterruptStartExport {
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

// MaxActionName is the longest action name, in bytes.
const MaxActionName = 64

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
// action name (ValidateActionName).
func (m *Module) checkActionNames() error {
	origin := "the module registers (" + abi.ExportActions + ")"
	switch {
	case m.kind == KindExtism:
		origin = "the plug-in exports as a function"
	case m.script != nil:
		origin = "the manifest declares"
	}
	for _, a := range m.actions {
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
