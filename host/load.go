package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/driver"
	"github.com/moat-sandbox/moat/internal/pool"
	"github.com/moat-sandbox/moat/internal/wasmrewrite"
	"github.com/moat-sandbox/moat/policy"
	"github.com/tetratelabs/wazero/api"
)

// Load compiles wasm (or reuses the compilation of the same bytes) and
// prepares it to run. A plugin is instantiated once here, so a module that
// fails its ABI check or its _initialize fails at load, not on first use.
//
// Load does the stages every kind of module shares, once, in this order:
// the name, the signature (before anything of the module runs or is even
// compiled), the policy and file grants, the limits, the models, the
// action names, the audit. What a kind does differently is its loader's
// (the loaders table): how it is named and what its signature covers,
// what it compiles, and the runtime that serves its calls.
func (h *Host) Load(ctx context.Context, wasm []byte, opts LoadOptions) (_ *Module, err error) {
	ld := &loading{h: h, wasm: wasm, opts: opts}
	defer func() {
		if err != nil {
			ld.abandon(ctx)
		}
	}()
	l := loaderFor(wasm, opts)
	if err := l.check(ld); err != nil {
		return nil, err
	}
	signer, err := h.verifySignature(ctx, ld.name, ld.signed, opts, opts.CorrelationID, ld.name+ld.sigExt)
	if err != nil {
		return nil, err
	}
	m := &Module{host: h, name: ld.name, digest: ld.digest, code: &wasmCode{},
		policy: &modulePolicy{profile: h.profile, manifest: opts.Manifest, implicit: opts.Manifest == nil, sources: ld.sources}}
	ld.m = m
	if opts.Template {
		m.code.src = wasm
	}
	if err := l.prepare(ctx, ld); err != nil {
		return nil, err
	}
	// Policy first for declared modules, so a refused module never runs;
	// an implicit manifest needs the action list, so it is applied once
	// the runtime has started.
	m.limits = opts.Limits.Or(h.cfg.Limits)
	if !m.policy.implicit {
		if err := h.declaredPolicy(ctx, ld, signer); err != nil {
			return nil, err
		}
	}
	if err := validateLimits(m.limits); err != nil {
		return nil, ld.fail(abi.CodeInvalidArgument, err, "%v", err)
	}
	m.config = opts.config()
	if m.rt, m.acts.names, err = l.start(ctx, ld); err != nil {
		return nil, err
	}
	if err := m.checkActionNames(ld.origin); err != nil {
		return nil, ld.fail(abi.CodeBadModule, err, "%v", err)
	}
	if m.policy.implicit {
		if err := h.implicitPolicy(ctx, m, ld.kind, signer, opts); err != nil {
			return nil, err
		}
	}
	if err := m.mapActions(); err != nil {
		return nil, ld.fail(abi.CodeBadModule, nil, "%v", err)
	}
	m.info.Kind, m.info.Actions = ld.kind, m.acts.public
	m.info.Mode, m.info.Signer = string(m.policy.eval.Mode), m.policy.eval.Signer
	if w, ok := m.rt.(warmer); ok && !opts.CheckOnly {
		if err := w.warm(ctx); err != nil {
			return nil, err
		}
	}
	m.code.compiled, ld.compiled = ld.compiled, nil
	return m, nil
}

// loader loads one kind of module: the part of Host.Load that is not the
// same for every kind. The first loader of loaders whose match accepts a
// load's arguments loads it.
type loader struct {
	// kinds are what it loads, the first its name: a WebAssembly
	// module's kind is known once it is compiled. Each is claimed at
	// init in the registry of kinds (foreign.go), beside the drivers'.
	kinds []Kind
	match func(wasm []byte, opts LoadOptions) bool
	// check validates the options, before anything else, and sets the
	// module's name and digest, and what its signature covers.
	check func(ld *loading) error
	// prepare runs after the signature is checked and before the policy
	// is: it compiles what runs and reads what the module is (ld.kind,
	// m.info, m.code).
	prepare func(ctx context.Context, ld *loading) error
	// start makes the runtime that serves the module's calls, once its
	// policy, file grants and limits are in effect, and lists its actions
	// as the module registers them.
	start func(ctx context.Context, ld *loading) (moduleRuntime, []string, error)
}

// loaders is the table of loaders, the most specific first: the one
// place a load's kind decides what happens.
var loaders = []*loader{nativeLoader, scriptLoader, wasmLoader}

func loaderFor(wasm []byte, opts LoadOptions) *loader {
	for _, l := range loaders {
		if l.match(wasm, opts) {
			return l
		}
	}
	return wasmLoader
}

// loading is one Host.Load under way: what its shared stages and its
// loader hand each other.
type loading struct {
	h      *Host
	wasm   []byte
	opts   LoadOptions
	name   string
	digest string
	signed []byte // what the signature covers
	sigExt string // the signature file's extension, after the name
	// sources are what the module's policy binding covers beyond its
	// digest: a script's sources, a native plugin's files.
	sources []byte
	kind    Kind
	m       *Module
	// compiled is the host's machine code of the module, released
	// unless the load succeeds.
	compiled *compiled
	bounded  []byte // the module, its tables bounded: what a driver runs
	// source is what is compiled, and codeDigest names it: the module,
	// or the module as a snapshot prepared it (fromSnapshot).
	source     []byte
	codeDigest string
	// mounts, when set, are where the host mounts the module's own files
	// (a script's): no file grant may overlap them.
	mounts *[]Mount
	// noFileGrants refuses file grants to the kind, saying why.
	noFileGrants string
	// origin says where the module's action names come from, in the
	// refusal of a bad one.
	origin string
}

func (ld *loading) fail(code abi.Code, err error, format string, args ...any) error {
	return &Error{Module: ld.name, Code: code, Reason: fmt.Sprintf(format, args...), Err: err}
}

// abandon releases what a load that failed holds.
func (ld *loading) abandon(ctx context.Context) {
	if m := ld.m; m != nil {
		if m.rt != nil {
			m.Close(ctx)
		}
		m.closeFileGrants()
		m.views.Detach() // once: Close may have

	}
	ld.h.release(ld.compiled) // a load that failed keeps no machine code
}

// nameFromManifest names the module as its manifest does, checking that
// the load does not name it otherwise; "" when there is no manifest and
// the load names it not.
func (ld *loading) nameFromManifest() error {
	ld.name = ld.opts.Name
	if mf := ld.opts.Manifest; mf != nil {
		if ld.name != "" && ld.name != mf.Name {
			return &Error{Module: ld.name, Code: abi.CodeInvalidArgument, Reason: fmt.Sprintf("the manifest names the module %q, the load names it %q: use one name", mf.Name, ld.name)}
		}
		ld.name = mf.Name
	}
	return nil
}

// declaredPolicy applies a declared manifest's policy, opens its file
// grants, sets the module's limits and attaches the op families' views
// (db's models among them), before the module runs.
func (h *Host) declaredPolicy(ctx context.Context, ld *loading, signer string) error {
	m, opts := ld.m, ld.opts
	if err := h.applyPolicy(ctx, m, signer, opts.CorrelationID); err != nil {
		return err
	}
	if err := h.openFileGrants(ctx, m, opts.CorrelationID, ld.noFileGrants); err != nil {
		return err
	}
	if sc := m.code.script; sc != nil && sc.Resident { // a driver.Interpreter's (Ruby's) instances too
		if err := h.openMountGrants(m, sc.Mounts); err != nil {
			return err
		}
	}
	if ld.mounts != nil {
		if err := m.checkGuestPaths(*ld.mounts); err != nil {
			return ld.fail(abi.CodeInvalidArgument, err, "%v", err)
		}
	}
	m.limits = opts.Limits.Or(manifestLimits(m.policy.eval.Limits)).Or(h.cfg.Limits)
	return h.attachFamilies(ctx, m, opts)
}

// implicitPolicy applies the policy of a module loaded without a
// manifest (one declaring the actions it registers, and nothing else),
// and attaches the op families' views.
func (h *Host) implicitPolicy(ctx context.Context, m *Module, kind Kind, signer string, opts LoadOptions) error {
	mf := &policy.Manifest{Name: m.name, Version: "0.0.0", Kind: manifestKind(kind)}
	for _, a := range m.acts.names {
		mf.Actions = append(mf.Actions, policy.Action{Name: a, Export: a})
	}
	m.policy.manifest = mf
	if err := h.applyPolicy(ctx, m, signer, opts.CorrelationID); err != nil {
		return err
	}
	return h.attachFamilies(ctx, m, opts)
}

// wasmLoader loads a WebAssembly module: a moat plugin (pooled instances),
// a WASI command (run once per Module.Run) or a foreign module its driver
// runs (Extism), as its imports and exports say.
var wasmLoader = &loader{
	kinds: []Kind{KindPlugin, KindCommand},
	match: func([]byte, LoadOptions) bool { return true },
	check: checkWasm,
	prepare: func(ctx context.Context, ld *loading) error {
		if snap := ld.opts.Snapshot; snap != nil {
			if err := ld.fromSnapshot(ctx, snap); err != nil {
				return err
			}
		}
		if err := compileWasm(ctx, ld, nil); err != nil {
			return err
		}
		if mf := ld.opts.Manifest; mf != nil && mf.Kind != "" && mf.Kind != manifestKind(ld.kind) {
			return ld.fail(abi.CodeBadModule, nil, "the manifest says kind %s, but the module is of kind %s: write kind: %s", mf.Kind, manifestKind(ld.kind), manifestKind(ld.kind))
		}
		return nil
	},
	start: func(ctx context.Context, ld *loading) (moduleRuntime, []string, error) {
		m := ld.m
		switch ld.kind {
		case KindPlugin:
			rt := &pooledRuntime{m: m, newInstance: m.newInstance}
			actions, err := m.prepare(ctx, rt)
			return rt, actions, err
		case KindCommand:
			return &wasiCommand{m: m}, nil, nil
		}
		// its tables bounded too; its runtime keeps CloseOnContextDone
		return m.startDriver(ctx, ld.kind, ld.bounded)
	},
}

// checkWasm names a WebAssembly module and checks its first bytes.
func checkWasm(ld *loading) error {
	if like := ld.like(); like != nil {
		ld.digest = like.digest
	} else {
		ld.digest = Digest(ld.wasm)
	}
	ld.signed, ld.sigExt = ld.wasm, ".wasm.minisig"
	ld.source, ld.codeDigest = ld.wasm, ld.digest
	if err := ld.nameFromManifest(); err != nil {
		return err
	}
	if ld.name == "" {
		ld.name = "module-" + ld.digest[:12]
	}
	if err := ValidateModuleName(ld.name); err != nil {
		return ld.fail(abi.CodeInvalidArgument, err, "%v", err)
	}
	if err := checkMagic(ld.wasm); err != nil {
		return ld.fail(abi.CodeBadModule, nil, "%v", err)
	}
	return nil
}

// compileWasm bounds the module's tables, compiles it (in interp's
// runtime, when a script's interpreter compiles it), and reads its kind
// from its imports and exports.
func compileWasm(ctx context.Context, ld *loading, interp driver.Interpreter) error {
	h, opts, m := ld.h, ld.opts, ld.m
	// A table is the one part of a WebAssembly instance wazero does not let an
	// embedder bound (a Go slice of 8-byte references, sized by the module's
	// declaration): before compiling, Load bounds every table of a module so
	// that together they hold at most Limits.MaxTableElements references
	// (wasmrewrite.LimitTables, whose doc says how), and refuses a module whose
	// tables need more at their minimum. Only the compiled copy is rewritten;
	// the module's digest and signature stay those of its author's bytes.
	tableCap := opts.Limits.Or(h.cfg.Limits).MaxTableElements
	if tableCap > wasmrewrite.MaxTableElementsCeiling {
		return ld.fail(abi.CodeInvalidArgument, nil, "table cap is %d elements: the most a module's tables may hold is %d", tableCap, wasmrewrite.MaxTableElementsCeiling)
	}
	var lay *wasmrewrite.Layout
	if c := ld.likeCode(interp, tableCap); c != nil {
		ld.compiled, m.code.cm, lay = c, c.cm, ld.opts.Like.code.lay
	} else {
		var code []byte
		var err error
		code, _, lay, err = wasmrewrite.LimitTables(ld.source, tableCap)
		if err != nil {
			var tle *wasmrewrite.TableLimitError
			if errors.As(err, &tle) {
				return ld.fail(abi.CodeMemoryLimit, err, "%v", err)
			}
			return ld.fail(abi.CodeBadModule, err, "invalid WebAssembly: %v", err)
		}
		if err := lay.CheckCounts(); err != nil {
			return ld.fail(abi.CodeMemoryLimit, err, "%v", err)
		}
		ld.bounded = code // what a foreign driver or a script's Interpreter runs, in a runtime of its own
		if interp != nil {
			if err := compileInInterpreter(ctx, ld, interp); err != nil {
				return err
			}
		} else {
			// Check for the end of the invocation at every loop header
			// (interrupt.go). The compilation's key is what decides the bytes
			// compiled: the module, its table cap and the rewrite's version.
			code, key, err := h.rewrite(ld.codeDigest, tableCap, code, lay, opts.Toolchain)
			if err != nil {
				return ld.fail(abi.CodeBadModule, err, "invalid WebAssembly: %v", err)
			}
			c, err := h.compile(ctx, key, code, compileFor{name: ld.name, correlation: opts.CorrelationID, local: opts.LocalCode, firstTime: opts.FirstTime, toolchain: opts.Toolchain})
			if err != nil {
				var pe *fs.PathError
				switch {
				case ctx.Err() != nil:
					return ld.fail(abi.CodeCanceled, err, "the load was canceled while the module compiled: %v", err)
				case errors.As(err, &pe):
					// wazero compiled the module and could not keep it: the
					// host's fault, not the module's.
					return ld.fail(abi.CodeInternal, err, "the compile cache %s: %v; give the host a directory it can write (Config.CacheDir; in moat: cache_dir, --cache-dir, $MOAT_CACHE_DIR)", h.cacheDir, firstLine(err))
				}
				return ld.fail(abi.CodeBadModule, err, "invalid WebAssembly: %v", firstLine(err))
			}
			ld.compiled, m.code.cm = c, c.cm
		}
	}
	wc := m.code
	wc.isolation, wc.maxIdle = opts.Isolation, opts.MaxIdle
	if wc.isolation == "" {
		wc.isolation = IsolationPooled
	}
	if wc.isolation != IsolationPooled && wc.isolation != IsolationFresh {
		return ld.fail(abi.CodeInvalidArgument, nil, "isolation %q is not %q or %q", wc.isolation, IsolationPooled, IsolationFresh)
	}
	if wc.maxIdle <= 0 {
		wc.maxIdle = 8
	}
	wc.idle = pool.New[*instance](wc.maxIdle)
	m.info = describe(ld.name, ld.digest, len(ld.wasm), wc.cm, ld.compiled)
	if opts.Template {
		wc.lay = lay
	}
	if lay.Memory != nil {
		wc.memMin = lay.Memory.Min
		m.info.MemoryMin = lay.Memory.Min
	}
	exports := wc.cm.ExportedFunctions()
	_, wc.hasInit = exports[abi.ExportInitWASI]
	return ld.readKind(exports, lay, interp != nil)
}

// compileInInterpreter compiles a script's interpreter in its own runtime
// (a driver.Interpreter): the bytes with bounded tables and without the host's
// rewrite. The interpreter's own runtime does not say whether its cache
// answered: its compile is reported as first-time work always.
func compileInInterpreter(ctx context.Context, ld *loading, interp driver.Interpreter) error {
	var done func()
	if ld.opts.FirstTime != nil {
		done = ld.opts.FirstTime("load")
	}
	rt, cm, err := interp.Compile(ctx, ld.h.InterpreterEnv(), ld.bounded)
	if done != nil {
		done()
	}
	if err != nil {
		var e *Error
		switch {
		case errors.As(err, &e):
			return err
		case ctx.Err() != nil:
			return ld.fail(abi.CodeCanceled, err, "the load was canceled while the interpreter compiled: %v", err)
		}
		return ld.fail(abi.CodeBadModule, err, "the interpreter: %v", firstLine(err))
	}
	ld.m.code.interpRT, ld.m.code.cm = rt, cm
	return nil
}

// readKind says what a compiled module is, from its imports and exports,
// and refuses one that is none of the kinds the host runs.
func (ld *loading) readKind(exports map[string]api.FunctionDefinition, lay *wasmrewrite.Layout, interpreted bool) error {
	m := ld.m
	if k := driverKind(m.info, ld.opts.Manifest); !interpreted && k != "" {
		ld.kind = k // its driver checks the imports it provides
		name := strings.ToUpper(string(k[:1])) + string(k[1:])
		ld.noFileGrants = name + " plug-ins get no file grants (their instances are the " + name + " driver's); build the plug-in as a moat plugin, or remove filesystem: from moat.yaml"
		ld.origin = "the plug-in exports as a function"
		return nil
	}
	if !interpreted { // an interpreter provides its own imports
		if err := ld.h.checkImports(m.info.Imports, lay.Imports); err != nil {
			return ld.fail(abi.CodeBadModule, nil, "%v", err)
		}
	}
	_, hasInvoke := exports[abi.ExportInvoke]
	_, hasStart := exports[abi.ExportStart]
	switch {
	case interpreted:
		ld.kind = KindCommand // the script loader makes it KindScript
	case hasInvoke && hasStart:
		return ld.fail(abi.CodeBadModule, nil, "exports both %s and %s: a moat plugin must be a reactor (build Go plugins with -buildmode=c-shared, C with -mexec-model=reactor)",
			abi.ExportInvoke, abi.ExportStart)
	case hasInvoke:
		ld.kind = KindPlugin
		if err := checkPluginExports(exports); err != nil {
			return ld.fail(abi.CodeBadModule, nil, "%v", err)
		}
		if _, ok := m.code.cm.ExportedMemories()[abi.ExportMemory]; !ok {
			return ld.fail(abi.CodeBadModule, nil, "exports no memory named %q; the host passes input and output through it", abi.ExportMemory)
		}
	case hasStart:
		ld.kind = KindCommand
	default:
		return ld.fail(abi.CodeBadModule, nil, "exports neither %s (a moat plugin) nor %s (a WASI command); exports are: %s",
			abi.ExportInvoke, abi.ExportStart, exportNames(exports))
	}
	return nil
}

// like is LoadOptions.Like when the load's bytes are the very slice that
// Template module was loaded from; else nil.
func (ld *loading) like() *Module {
	l := ld.opts.Like
	if l == nil || l.code == nil || len(l.code.src) == 0 || len(ld.wasm) != len(l.code.src) || &ld.wasm[0] != &l.code.src[0] {
		return nil
	}
	return l
}

// likeCode is the compiled code of LoadOptions.Like, with a reference
// taken, when this load would compile exactly it; else nil.
func (ld *loading) likeCode(interp driver.Interpreter, tableCap uint32) *compiled {
	l := ld.like()
	if l == nil || interp != nil {
		return nil
	}
	key := fmt.Sprintf("%s-tables%d-%s", ld.codeDigest, tableCap, wasmrewrite.DeadlineVersion)
	h := ld.h
	h.compileMu.Lock()
	defer h.compileMu.Unlock()
	c := h.compiled[key]
	if c == nil || c.refs == 0 || l.code.lay == nil {
		return nil
	}
	select {
	case <-c.done:
	default:
		return nil
	}
	if c.err != nil || c.cm == nil {
		return nil
	}
	c.refs++
	return c
}
