// Package host is moat's embedding API: load a WebAssembly module once,
// invoke its actions many times, each for a principal and under limits.
//
//	h, err := host.New(ctx, host.Config{DataDir: "moat-data"})
//	mod, err := h.Load(ctx, wasmBytes, host.LoadOptions{Name: "hello", Config: cfg})
//	res, err := mod.Invoke(ctx, host.Request{Action: "greet", Input: []byte("World"),
//		Principal: policy.Principal{User: "ann", Org: "acme"}})
//
// A Host owns one wazero runtime (the optimizing compiler, with a
// compilation cache on disk keyed by the module's content, and, with
// Config.CodeKey, filled from the compiled code other hosts on the same
// store shared), the store, and the op table. A Module is compiled once; instances are taken from a pool
// per module, or made fresh for each call with IsolationFresh. Every failure
// is an *Error carrying the module, the action and an abi.Code.
//
// Five kinds of module load:
//   - moat plugins (KindPlugin): reactors that import "moat" and export
//     moat_invoke, moat_alloc, moat_actions and moat_abi_version; Go guests
//     built with -buildmode=c-shared have their _initialize run once per
//     instance;
//   - WASI commands (KindCommand): a _start export, run with Module.Run on a
//     fresh instance with stdin, stdout, stderr, args and env;
//   - scripts (KindScript): an interpreter that is a WASI command, serving
//     a manifest's actions with one run of a script per call (see Script);
//   - Extism plug-ins (KindExtism): modules that import extism:host/env,
//     run by the driver that package host/extism registers (package
//     host/driver: the SPI through which other packages run a kind),
//     inside the same policy, limits, op table and audit;
//   - native plugins (KindNative): no WebAssembly, but confined worker
//     processes (see Native).
//
// Load does what every kind shares once, and a table of loaders what
// differs (load.go); each module's calls run on the runtime its loader
// chose (runtime.go). Adding a kind is a loader and a runtime.
package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/driver"
	"github.com/moat-sandbox/moat/host/internal/codeshare"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/transport"
	"github.com/moat-sandbox/moat/internal/wasmlimit"
	"github.com/moat-sandbox/moat/internal/wasmrewrite"
	"github.com/moat-sandbox/moat/policy"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	_ "github.com/moat-sandbox/moat/host/ops" // the op table registers itself
	"github.com/moat-sandbox/moat/internal/moatdir"
)

// DefaultDataDir is where the store and the compilation cache live when
// Config.DataDir is empty: $MOAT_DATA, else moat's home's data directory
// (/var/lib/moat/data as root, $XDG_DATA_HOME/moat/data or
// ~/.local/share/moat/data otherwise; see internal/moatdir), the same for
// every command and `moat serve` whatever the working directory; ./moat-data
// only when there is no home.
func DefaultDataDir() string { return moatdir.Data() }

// Config configures a Host. The zero value is usable.
type Config struct {
	// DataDir holds the store (moat.db) and, unless CacheDir is set, the
	// compilation cache. Default: DefaultDataDir().
	DataDir string
	// CacheDir holds compiled machine code, keyed by module content.
	// Default: DataDir/cache.
	CacheDir string
	// MachineCacheDir, when set, keeps what loads of the machine's
	// toolchain (LoadOptions.Toolchain: an interpreter's bytes, not a
	// tenant's) make from those bytes alone, for every host of the
	// machine whatever its data directory: their machine code, snapshot
	// entries and command images (machinecache.go). moat gives
	// toolchains.StateDir()/cache. It must be the host's alone: one
	// another user owns or may write is not used (the error is logged),
	// and everything stays in CacheDir.
	MachineCacheDir string
	// Store replaces the store the host would open in DataDir. The caller
	// keeps ownership: Close does not close it. An embedder that reads
	// the store itself (its tasks, its key-value data) opens it and hands
	// it here: the host does not hand out its own.
	Store *store.Store
	// Audit replaces the audit trail the host would start on its store,
	// so that an embedder records its own events (a server's refusals, a
	// CLI's confinement report) in the trail the host records to, and
	// flushes and queries it. It must write to the host's store. The
	// caller keeps ownership: Close flushes it and does not close it.
	Audit *audit.Log
	// Logger receives the host's records and the guests' log.write calls.
	// Default: slog.Default().
	Logger *slog.Logger
	// Limits are the defaults for every module; LoadOptions and Request
	// may lower or raise them. Zero fields take DefaultLimits.
	Limits Limits
	// Profile is the operator's policy: what modules may do, which keys
	// are trusted. Default: the built-in "minimal" profile.
	Profile *policy.Profile
	// OmitAllowedInvocationAudit leaves allowed, successful invocations
	// out of the audit trail (denials, failures, mutations, signature
	// checks and confirmations are always recorded). For hosts where a
	// store write per call is too much; off by default.
	OmitAllowedInvocationAudit bool
	// DebugInfo keeps wazero's DWARF line information in guest stack
	// traces. Off by default: wazero parses the DWARF sections whenever a
	// guest ends with an error, a non-zero exit included, which for a
	// large guest (CPython's 26 MB) costs ~1.7 s per run. Traps still name
	// the guest's functions (the name section).
	DebugInfo bool
	// NativeWorkers bounds the workers of all native plugins (kind:
	// native) the host runs at once, each a process with its own memory
	// limit; hosts on one machine should share one. Default: slots for
	// DefaultNativeWorkers, the host's own.
	NativeWorkers *native.WorkerSlots
	// CodeKey, when set, shares compiled machine code through the store
	// with every host holding the same key (replicas of moat serve on one
	// database): a module this host compiles is stored, and a module it
	// has not compiled is loaded from what another stored, in tens of
	// milliseconds rather than the seconds compiling takes. Each artifact
	// is authenticated with HMAC-SHA256 under this key, checked before a
	// byte of it reaches the cache directory, so a writer of the database
	// cannot make the host run code of its choosing (a failed check is
	// audited, kind shared_code, and the host compiles itself). At least
	// MinCodeKeyBytes bytes of secret: only hosts may hold it. Without it
	// nothing is shared or trusted: each host compiles for itself.
	CodeKey []byte
	// CodeBudget bounds the bytes of compiled code the store keeps for
	// all hosts (least recently used evicted; store.CodePut). Default
	// store.DefaultCodeBudget.
	CodeBudget int64
	// Families configures the op families (ops.Families names them), by
	// family name: each value is a pointer to the family's own
	// configuration type (its ops.Family.Config; for media,
	// *media.FamilyConfig). A family left out is provisioned with its
	// defaults. The host provisions each family's service from it at
	// New and releases it at Close. What other fields of Config held
	// before issue 29 is here: the ai family's models (*ai.FamilyConfig,
	// whose Service hosts of one process should share), the secrets a
	// grant injects (*ops.SecretsConfig), the http family's Resolver
	// (*ops.HTTPConfig), media's quota and decode bound
	// (*media.FamilyConfig), the bound on queued tasks and where they run
	// (*ops.TasksConfig: Origin, which was TaskOrigin). A family given
	// ops.Disabled is switched off on this host: not provisioned, no
	// module gets its view, and each of its ops is refused (denied,
	// audited with the rule "host: family disabled"), whatever a
	// module's grants.
	Families map[string]any
	// ObserveOp, when set, is called after every op a guest calls, with
	// its family, outcome, latency and sizes (a server's per-family
	// metrics). It runs on the guest's call path: it must be quick and
	// must not block. Nil costs nothing (not even the clock read).
	ObserveOp func(ops.Observation)
}

// Limits bound one invocation. They are the driver SPI's type too
// (host/driver), so a foreign module's driver gets them as they are.
type Limits = driver.Limits

// DefaultLimits apply where nothing else is set.
var DefaultLimits = Limits{
	Timeout:          10 * time.Second,
	MemoryLimitPages: 2048, // 128 MiB
	MaxInputBytes:    1 << 20,
	MaxOutputBytes:   1 << 20,
	MaxTableElements: wasmrewrite.DefaultMaxTableElements,
}

// validateLimits refuses limits past what a module can use.
func validateLimits(l Limits) error {
	if l.MemoryLimitPages > MaxMemoryLimitPages {
		return fmt.Errorf("memory limit is %d pages (%d MiB): the most a module can address is %d pages (4096 MiB)",
			l.MemoryLimitPages, l.MemoryLimitPages/16, MaxMemoryLimitPages)
	}
	if l.MaxTableElements > wasmrewrite.MaxTableElementsCeiling {
		return fmt.Errorf("table cap is %d elements: the most a module's tables may hold is %d (1 GiB of host memory)",
			l.MaxTableElements, wasmrewrite.MaxTableElementsCeiling)
	}
	if l.MaxOutputBytes > abi.MaxOutputLen {
		return fmt.Errorf("output cap is %d bytes: the ABI allows at most %d", l.MaxOutputBytes, abi.MaxOutputLen)
	}
	return nil
}

// Host runs modules. It is safe for concurrent use.
type Host struct {
	cfg       Config
	log       *slog.Logger
	store     *store.Store
	ownStore  bool
	ownAudit  bool
	cacheDir  string
	cache     wazero.CompilationCache
	runtime   wazero.Runtime
	compileMu sync.Mutex
	compiled  map[string]*compiled            // by digest of the bytes compiled
	provided  map[string]map[string]Signature // the host modules' functions, by module and name
	profile   *policy.Profile
	audit     *audit.Log
	share     *codeshare.Sharer // shared compiled code (Config.CodeKey; package host/internal/codeshare); nil: not shared
	services  *ops.Services     // the op families' services (Config.Families)
	// machineDir is Config.MachineCacheDir once checked; "" when unset
	// or refused.
	machineDir string
}

type compiled struct {
	cm        wazero.CompiledModule
	fromCache bool // this machine's compilation cache
	fromStore bool // compiled code another host shared (Config.CodeKey)
	took      time.Duration

	key   string
	files []string      // what the compilation cache keeps of it (cacheFiles)
	done  chan struct{} // closed when the compilation ended; then cm or err is set
	err   error
	refs  int // the loaded modules using it (and loads in progress); guarded by compileMu
}

// New starts a host: it opens (or creates) the data directory, the store
// and the compilation cache, and prepares the runtime.
func New(ctx context.Context, cfg Config) (*Host, error) {
	if cfg.DataDir == "" {
		cfg.DataDir = DefaultDataDir()
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(cfg.DataDir, "cache")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Limits = cfg.Limits.Or(DefaultLimits)
	if err := validateLimits(cfg.Limits); err != nil {
		return nil, fmt.Errorf("host: config limits: %w", err)
	}
	if cfg.Profile == nil {
		p, err := policy.LoadProfile("minimal")
		if err != nil {
			return nil, fmt.Errorf("host: built-in profile: %w", err)
		}
		cfg.Profile = p
	}
	if cfg.NativeWorkers == nil {
		cfg.NativeWorkers = native.NewWorkerSlots(DefaultNativeWorkers)
	}
	if n := len(cfg.CodeKey); n > 0 && n < MinCodeKeyBytes {
		return nil, fmt.Errorf("host: config code key: %d bytes; give at least %d bytes of secret (openssl rand -hex 32 makes one), or none to share no compiled code", n, MinCodeKeyBytes)
	}
	h := &Host{cfg: cfg, log: cfg.Logger, store: cfg.Store, cacheDir: cfg.CacheDir, compiled: map[string]*compiled{}, profile: cfg.Profile}
	if err := os.MkdirAll(cfg.CacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("host: create cache dir %s: %w (set Config.CacheDir, or Config.DataDir, to a directory the host may create)", cfg.CacheDir, err)
	}
	if d, err := machineDirFor(cfg.MachineCacheDir); err != nil {
		h.log.Warn("the machine's cache is not used: interpreters are compiled once per cache directory", "dir", cfg.MachineCacheDir, "err", err)
	} else {
		h.machineDir = d
	}
	if h.store == nil {
		s, err := store.Open(ctx, cfg.DataDir)
		if err != nil {
			return nil, fmt.Errorf("host: %w", err)
		}
		h.store, h.ownStore = s, true
	}
	if h.audit = cfg.Audit; h.audit == nil {
		h.audit, h.ownAudit = audit.New(h.store, h.log), true
	}
	services, err := ops.Provision(ctx, h.familyCore(), cfg.Families)
	if err != nil {
		h.closeStore()
		return nil, fmt.Errorf("host: config families: %w", err)
	}
	h.services = services
	cache, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
	if err != nil {
		h.services.Cleanup()
		h.closeStore()
		return nil, fmt.Errorf("host: compilation cache in %s: %w", cfg.CacheDir, err)
	}
	h.cache = cache
	// One runtime for all modules: compiled code, WASI and the moat import
	// are shared. Memory limits are per instance (see memory.go). A
	// deadline stops a guest stuck in a loop through the check the host
	// puts at every loop header (interrupt.go), so wazero's own, which
	// leaves the machine code at every iteration, is off.
	rc := wasmlimit.NewRuntimeConfig(cache).WithDebugInfoEnabled(cfg.DebugInfo).WithCloseOnContextDone(hostCloseOnContextDone)
	h.runtime = wazero.NewRuntimeWithConfig(ctx, rc)
	if err := instantiateWASI(ctx, h.runtime); err != nil {
		h.Close(ctx)
		return nil, fmt.Errorf("host: instantiate WASI: %w", err)
	}
	if err := transport.Instantiate(ctx, h.runtime); err != nil {
		h.Close(ctx)
		return nil, fmt.Errorf("host: %w", err)
	}
	if err := wasmrewrite.InstantiateYield(ctx, h.runtime); err != nil {
		h.Close(ctx)
		return nil, fmt.Errorf("host: %w", err)
	}
	h.provided = map[string]map[string]Signature{}
	for _, name := range []string{abi.ImportModule, wasi_snapshot_preview1.ModuleName} {
		fns := map[string]Signature{}
		for n, def := range h.runtime.Module(name).ExportedFunctionDefinitions() {
			fns[n] = Signature{Module: name, Name: n, Params: typeList(def.ParamTypes()), Result: typeList(def.ResultTypes())}
		}
		h.provided[name] = fns
	}
	if len(cfg.CodeKey) > 0 {
		share, err := codeshare.New(ctx, h.runtime, codeshare.Config{CacheDir: cfg.CacheDir, Key: cfg.CodeKey, Store: h.store,
			DebugInfo: cfg.DebugInfo, CloseOnContextDone: hostCloseOnContextDone, Budget: cfg.CodeBudget, Logger: h.log, Audit: h.audit})
		if err != nil {
			// Fail closed: nothing shared, nothing trusted; every module
			// still loads, compiled here.
			h.log.Error("compiled code is not shared: each module is compiled here", "err", err)
		}
		h.share = share
	}
	return h, nil
}

// SharesCode reports whether the host shares compiled code through its
// store (Config.CodeKey, and wazero names its files as moat predicts).
func (h *Host) SharesCode() bool { return h.share != nil }

// Profile is the operator profile the host enforces.
func (h *Host) Profile() *policy.Profile { return h.profile }

// Limits are the host's default limits.
func (h *Host) Limits() Limits { return h.cfg.Limits }

// Close releases the runtime, every module and instance, and the store if
// the host opened it.
func (h *Host) Close(ctx context.Context) error {
	var errs []error
	switch {
	case h.audit != nil && h.ownAudit:
		errs = append(errs, h.audit.Close(ctx))
	case h.audit != nil:
		errs = append(errs, h.audit.Flush(ctx))
	}
	if h.runtime != nil {
		errs = append(errs, h.runtime.Close(ctx))
	}
	if h.cache != nil {
		errs = append(errs, h.cache.Close(ctx))
	}
	errs = append(errs, h.services.Cleanup(), h.closeStore())
	return errors.Join(errs...)
}

func (h *Host) closeStore() error {
	if h.ownStore && h.store != nil {
		return h.store.Close()
	}
	return nil
}

// Digest is the content address of module bytes: hex SHA-256.
func Digest(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return hex.EncodeToString(sum[:])
}

// compile returns the compiled module for wasm, whose digest is key,
// compiling at most once per digest in this process and, through the disk cache, once per machine.
// Whether the disk cache answered is observed, not assumed: wazero writes a
// cache file only when it compiled, so a compile that adds no file was
// served from the cache.
func (h *Host) compile(ctx context.Context, key string, wasm []byte, who compileFor) (*compiled, error) {
	// One compilation per key at a time, and any number of keys at once:
	// a large module compiling does not hold up the loads of others, and
	// a load waiting for the same key's compilation gives up with its
	// context. Each caller holds a reference until its module is closed
	// (release): the machine code of a module nobody uses any more is
	// freed, so a server replacing modules does not grow without bound.
	h.compileMu.Lock()
	c, ok := h.compiled[key]
	if !ok {
		c = &compiled{key: key, done: make(chan struct{})}
		h.compiled[key] = c
	}
	c.refs++
	h.compileMu.Unlock()
	if ok {
		select {
		case <-c.done:
		case <-ctx.Done():
			h.release(c)
			return nil, ctx.Err()
		}
		if c.err != nil {
			h.release(c)
			return nil, c.err
		}
		return c, nil
	}
	// The cache's file names hash the whole code (a SHA-256 of CPython's
	// 26 MB): named once here, for the first-time check and for c.files.
	files := h.cacheFiles(key, wasm, who.toolchain)
	// The machine's toolchain: wazero's file from the machine's cache
	// when it has it, else into it once made (machinecache.go).
	var machine string
	if who.toolchain && h.machineDir != "" && len(files) == 2 {
		if machine = h.machineCodeFile(files[1]); machine != "" {
			shareFile(machine, files[1])
		}
	}
	if who.firstTime != nil && !allExist(files) {
		defer who.firstTime("load")()
	}
	start := time.Now()
	c.cm, c.fromCache, c.fromStore, c.err = h.compileCode(ctx, wasm, who)
	if c.err != nil && machine != "" && strings.Contains(c.err.Error(), "compilationcache") {
		// A torn or foreign file of the machine's cache (wazero checks
		// its version and checksum): made again here, and shared anew.
		h.log.Warn("the machine's compiled code is unusable: compiled again", "module", who.name, "file", machine, "err", c.err)
		_ = os.Remove(files[1])
		_ = os.Remove(machine)
		c.cm, c.fromCache, c.fromStore, c.err = h.compileCode(ctx, wasm, who)
	}
	if c.err == nil && machine != "" {
		shareFile(files[1], machine)
	}
	c.took = time.Since(start)
	c.files = files
	close(c.done)
	if c.err != nil {
		err := c.err
		h.release(c) // a failed compilation is not kept: the next load tries again
		return nil, err
	}
	return c, nil
}

// compileCode compiles wasm in the host's runtime, through the code
// shared by the store when the host shares it, and says where the code
// came from.
func (h *Host) compileCode(ctx context.Context, wasm []byte, who compileFor) (cm wazero.CompiledModule, fromCache, fromStore bool, err error) {
	if h.share != nil && !who.local {
		var from codeshare.Source
		cm, from, err = h.share.Compile(ctx, h.runtime, wasm, codeshare.For{Module: who.name, CorrelationID: who.correlation})
		return cm, from == codeshare.FromDisk, from == codeshare.FromStore, err
	}
	before := countFiles(h.cacheDir)
	cm, err = h.runtime.CompileModule(ctx, wasm)
	return cm, err == nil && countFiles(h.cacheDir) == before && before > 0, false, err
}

// compileFor names what a compilation is for, in logs and audit events,
// and whether its code stays local (LoadOptions.LocalCode).
type compileFor struct {
	name, correlation string
	local             bool
	firstTime         func(stage string) func() // LoadOptions.FirstTime
	toolchain         bool                      // LoadOptions.Toolchain
}

// allExist reports whether the compilation cache holds the machine code
// cacheFiles named (every file exists): a compile of it then reads, and is
// no first-time work.
func allExist(files []string) bool {
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			return false
		}
	}
	return len(files) > 0
}

// release drops one reference to c, freeing its machine code with the
// last.
func (h *Host) release(c *compiled) {
	if c == nil {
		return
	}
	h.compileMu.Lock()
	c.refs--
	last := c.refs == 0
	if last && h.compiled[c.key] == c {
		delete(h.compiled, c.key)
	}
	h.compileMu.Unlock()
	if last && c.cm != nil {
		_ = c.cm.Close(context.Background())
	}
}

func countFiles(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == rewrittenDir {
			return filepath.SkipDir // the host's rewritten modules, not wazero's files
		}
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}
