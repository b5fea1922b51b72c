package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	pysdk "github.com/moat-sandbox/moat/guests/python"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/toolchains"
)

// registry holds the loaded current version of every module of every
// organization. The store is the truth (which versions exist, which is
// current, and their bytes: store.ModuleBlobGet); the registry is what is
// compiled and pooled in memory, kept in step with the store by follow,
// so that replicas sharing one database serve the same modules.
//
// RATIONALE: module bytes live in the store on both backends (its blob
// table), not in files of the data directory: one path to test, and
// replicas on different machines need no shared disk. The data directory
// keeps only what can be rebuilt (the compile cache, interpreted plugins'
// builds). Files of an older data directory (modules/DIGEST.wasm, .tar)
// are moved into the store the first time they are loaded.
type registry struct {
	s   *Server
	dir string // interpreted plugins' builds, by digest; legacy module files

	mu     sync.RWMutex
	loaded map[modKey]*entry
	// commit serializes storing a version and swapping it in, so that
	// two uploads of one name leave the store and the registry agreeing
	// on which is current, and a change from another replica (follow) is
	// swapped in only while the store still says it is current. Build
	// directories are removed only under it, so that a deletion's "no
	// version refers to this digest" and the removal are one step
	// against an upload of the same bytes (builds are shared by digest,
	// across organizations).
	commit sync.Mutex

	// pins counts the uploads in flight of each digest, from before
	// their load (which builds an interpreted plugin into its digest's
	// directory) to their commit: a digest's files are not removed while
	// it is pinned, though no stored version refers to it yet.
	pinMu sync.Mutex
	pins  map[string]int

	// compiled is where the compilation cache keeps each loaded
	// digest's machine code (host.CompiledFile), so that removeFiles
	// takes it with the digest's other files: the cache is keyed by the
	// bytes and nothing else removes it, so every version ever uploaded
	// kept its machine code, outside the module quota.
	compiledMu sync.Mutex
	compiled   map[string][]string

	// beforeCommit, when set (by tests), runs in an upload after its
	// load and before it takes commit: where a racing deletion of the
	// same bytes in another organization would land.
	beforeCommit func()

	// beforeLoad, when set (by tests), runs in a sync (ondemand.go)
	// before it loads org/name: where a test holds a load in flight.
	beforeLoad func(org, name string)

	// nativeRoot holds native plugins' files, by digest, where their
	// workers (each a uid of its own) can read them: made at the first
	// native load under TMPDIR (a confined server's scratch, 0711),
	// removed by closeAll.
	nativeMu   sync.Mutex
	nativeRoot string
	orgSlots   map[string]*native.WorkerSlots // each organization's share of the server's native workers

	// flights are the syncs of module names in progress (ondemand.go):
	// one per name, shared by the change feed and every request waiting
	// for the name; failures are the versions that did not load here.
	// They run under life, which closeAll ends.
	flightMu sync.Mutex
	flights  map[modKey]*flight
	failures map[modKey]failedLoad
	flightWG sync.WaitGroup
	life     context.Context
	stopLife context.CancelFunc
}

// orgWorkers is org's share of the server's native worker slots.
func (r *registry) orgWorkers(org string) *native.WorkerSlots {
	r.nativeMu.Lock()
	defer r.nativeMu.Unlock()
	if r.orgSlots == nil {
		r.orgSlots = map[string]*native.WorkerSlots{}
	}
	w, ok := r.orgSlots[org]
	if !ok {
		w = r.s.nativeWorkers.Within(r.s.cfg.Modules.MaxNativeWorkersPerOrg)
		r.orgSlots[org] = w
	}
	return w
}

// nativeDir returns the directory of native plugins' files, making it
// at the first call.
func (r *registry) nativeDir(create bool) (string, error) {
	r.nativeMu.Lock()
	defer r.nativeMu.Unlock()
	if r.nativeRoot == "" && create {
		dir, err := os.MkdirTemp("", "moat-native-")
		if err != nil {
			return "", fmt.Errorf("native plugins: %w", err)
		}
		if err := os.Chmod(dir, 0o711); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("native plugins: %w", err)
		}
		r.nativeRoot = dir
	}
	return r.nativeRoot, nil
}

type modKey struct{ org, name string }

type entry struct {
	mod     *host.Module
	version store.ModuleVersion
}

func newRegistry(s *Server) *registry {
	life, stop := context.WithCancel(context.Background())
	return &registry{s: s, dir: filepath.Join(s.cfg.DataDir, "modules"), loaded: map[modKey]*entry{}, pins: map[string]int{}, compiled: map[string][]string{},
		flights: map[modKey]*flight{}, failures: map[modKey]failedLoad{}, life: life, stopLife: stop}
}

func (r *registry) get(org, name string) *entry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.loaded[modKey{org, name}]
}

// loadAll loads the current version of every stored module. A module that
// no longer loads (its bytes are gone, the profile changed) is logged and
// left out; the server still starts, and re-uploading fixes it.
func (r *registry) loadAll(ctx context.Context) error {
	mods, err := r.s.store.Modules(ctx, "")
	if err != nil {
		return fmt.Errorf("server: list modules: %w", err)
	}
	for _, v := range mods {
		m, err := r.fetchAndLoad(ctx, v, "startup-"+newID())
		if err != nil {
			r.s.log.Error("module not loaded", "org", v.Org, "module", v.Name, "digest", v.Digest, "err", err)
			continue
		}
		r.loaded[modKey{v.Org, v.Name}] = &entry{mod: m, version: v}
	}
	r.s.log.Info("modules loaded", "count", len(r.loaded), "stored", len(mods), "store", RedactURL(r.s.store.Path()))
	return nil
}

// fetchAndLoad reads v's bytes from the store and loads them.
func (r *registry) fetchAndLoad(ctx context.Context, v store.ModuleVersion, correlation string) (*host.Module, error) {
	wasm, err := r.bytes(ctx, v)
	if err != nil {
		return nil, err
	}
	return r.load(ctx, v, wasm, correlation)
}

// bytes returns v's uploaded bytes from the store. Bytes stored as a file
// by an older server (before the store kept them) are checked against
// the digest and moved into the store.
func (r *registry) bytes(ctx context.Context, v store.ModuleVersion) ([]byte, error) {
	wasm, err := r.s.store.ModuleBlobGet(ctx, v.Org, v.Digest)
	if !errors.Is(err, store.ErrModuleNotFound) {
		return wasm, err
	}
	for _, f := range []string{r.legacyScriptFile(v.Digest), r.legacyFile(v.Digest)} {
		b, ferr := os.ReadFile(f)
		if ferr != nil {
			continue
		}
		if host.Digest(b) != v.Digest {
			return nil, fmt.Errorf("module file %s does not hold the bytes of digest %s; upload the module again", f, v.Digest)
		}
		if perr := r.s.store.ModuleBlobPut(ctx, v.Digest, b); perr != nil {
			return nil, fmt.Errorf("move module file %s into the store: %w", f, perr)
		}
		os.Remove(f)
		return b, nil
	}
	return nil, fmt.Errorf("%w; upload the module again", err)
}

// Where an older server kept a module's bytes (a module, or an
// interpreted plugin's sources as a tar), and where an interpreted
// plugin's sources are unpacked and built for the interpreter's /src.
func (r *registry) legacyFile(digest string) string       { return filepath.Join(r.dir, digest+".wasm") }
func (r *registry) legacyScriptFile(digest string) string { return filepath.Join(r.dir, digest+".tar") }
func (r *registry) scriptDir(digest string) string        { return filepath.Join(r.dir, digest+".src") }

// follow applies the store's module changes (uploads, replacements and
// deletions through any replica, this one included) to the registry until
// ctx ends. A change it could not apply (the database away, a load that
// failed for a passing reason) is retried every second, by name: applying
// a change means making the registry agree with what the store says now,
// so late or repeated attempts are harmless. Every quarter hour it also
// sweeps the store's orphan blobs (uploads that never got their version)
// and its full rate buckets (store.RateSweep).
func (r *registry) follow(ctx context.Context, changes <-chan store.ModuleChange) {
	pending := map[modKey]bool{}
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	sweep := time.NewTicker(15 * time.Minute)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case c, ok := <-changes:
			if !ok {
				return
			}
			pending[modKey{c.Org, c.Name}] = true
			// Take what else is waiting, so a burst is applied once per name.
			for more := true; more; {
				select {
				case c, ok := <-changes:
					if !ok {
						return
					}
					pending[modKey{c.Org, c.Name}] = true
				default:
					more = false
				}
			}
		case <-retry.C:
		case now := <-sweep.C:
			if gone, err := r.s.store.ModuleBlobSweep(ctx, now); err != nil {
				r.s.log.Warn("module blob sweep", "err", err)
			} else if len(gone) > 0 {
				r.s.log.Info("module blob sweep: removed uploads that never got their version", "count", len(gone))
			}
			// Rate buckets that are full again (per-address buckets of
			// public routes, webhook replay keys): the same to RateTake
			// as none, and without the sweep one row for every source
			// address a public route ever saw.
			if n, err := r.s.store.RateSweep(ctx, now); err != nil {
				r.s.log.Warn("rate bucket sweep", "err", err)
			} else if n > 0 {
				r.s.log.Debug("rate bucket sweep: removed full buckets", "count", n)
			}
		}
		for k := range pending {
			// Through the shared flight: a request that is already
			// loading this name (ensure) and this change are one load.
			f := r.shared(k.org, k.name, "change")
			select {
			case <-f.done:
			case <-ctx.Done():
				return
			}
			if err := f.err; err != nil {
				if ctx.Err() != nil {
					return
				}
				r.s.log.Warn("module change not applied yet; retrying", "org", k.org, "module", k.name, "err", err)
				continue
			}
			delete(pending, k)
		}
	}
}

// syncOnce makes the registry's module org/name what the store says is
// current: loaded when it was uploaded or replaced, unloaded when deleted.
// A version that the store has but that does not load here is unloaded,
// not left serving the version it replaced (which may be what the upload
// meant to fix), logged, and returned as loadErr. It is called through
// shared (one at a time per name); why names its trigger in the log.
func (r *registry) syncOnce(ctx context.Context, org, name, why string) (loadErr, err error) {
	cur, err := r.current(ctx, org, name)
	if err != nil {
		return nil, err
	}
	if e := r.get(org, name); e != nil && cur != nil && sameCode(e.version, *cur) {
		r.mu.Lock()
		if e2 := r.loaded[modKey{org, name}]; e2 == e {
			r.loaded[modKey{org, name}] = &entry{mod: e.mod, version: *cur} // uploaded again: new time, uploader
		}
		r.mu.Unlock()
		return nil, nil
	} else if e == nil && cur == nil {
		return nil, nil
	}
	var m *host.Module
	if cur != nil {
		defer r.pin(cur.Digest)()
		if hook := r.beforeLoad; hook != nil {
			hook(org, name)
		}
		start := time.Now()
		wasm, err := r.bytes(ctx, *cur)
		if err != nil && !errors.Is(err, store.ErrModuleNotFound) {
			return nil, err // the database: retried
		}
		if err == nil {
			m, err = r.load(ctx, *cur, wasm, "sync-"+newID())
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			r.s.log.Error("module changed through another replica does not load here; unloaded", "org", org, "module", name, "digest", cur.Digest, "err", err)
			loadErr = err
			r.recordFailure(*cur, err)
		} else {
			// One line per load: what a replica spent loading, and the
			// proof that concurrent first requests shared one load.
			r.s.log.Info("module loaded on this replica", "org", org, "module", name, "digest", short(cur.Digest), "trigger", why,
				"took", time.Since(start).Round(time.Millisecond))
		}
	}
	r.commit.Lock()
	defer r.commit.Unlock()
	// The store may have moved on while this loaded (an upload through
	// this replica, or another change): swap in only what is still
	// current; the later change is applied on its own.
	now, err := r.current(ctx, org, name)
	if err != nil || (now == nil) != (cur == nil) || now != nil && !sameCode(*now, *cur) {
		if m != nil {
			m.Close(ctx)
		}
		return nil, err // a later change: applied on its own
	}
	old := r.get(org, name)
	if old != nil && cur != nil && sameCode(old.version, *cur) {
		// This replica's own upload swapped it in meanwhile.
		if m != nil {
			m.Close(ctx)
		}
		return nil, nil
	}
	if m != nil {
		r.put(ctx, m, *cur)
	} else {
		r.remove(ctx, org, name)
	}
	if old != nil && (cur == nil || old.version.Digest != cur.Digest) {
		if n, err := r.s.store.ModuleDigestRefs(ctx, old.version.Digest); err == nil && n == 0 {
			r.removeOrphans([]string{old.version.Digest}, "")
		}
	}
	return loadErr, nil
}

// current is the current version of org/name in the store, nil when the
// module does not exist.
func (r *registry) current(ctx context.Context, org, name string) (*store.ModuleVersion, error) {
	if host.ValidateModuleName(name) != nil {
		return nil, nil // no upload has this name; the store may refuse it (NUL)
	}
	vs, err := r.s.store.ModuleVersions(ctx, org, name)
	if errors.Is(err, store.ErrModuleNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for i := range vs {
		if vs[i].Current {
			return &vs[i], nil
		}
	}
	return nil, nil
}

// sameCode reports whether two versions load as the same module: the
// same bytes, manifest and signature (what host.Module.Binding covers).
func sameCode(a, b store.ModuleVersion) bool {
	return a.Digest == b.Digest && bytes.Equal(a.Manifest, b.Manifest) && bytes.Equal(a.Signature, b.Signature)
}

// pin keeps digest's files from removal until the returned func is called.
func (r *registry) pin(digest string) (unpin func()) {
	r.pinMu.Lock()
	r.pins[digest]++
	r.pinMu.Unlock()
	return func() {
		r.pinMu.Lock()
		if r.pins[digest]--; r.pins[digest] <= 0 {
			delete(r.pins, digest)
		}
		r.pinMu.Unlock()
	}
}

// removeOrphans removes the files of digests no stored version refers to
// any more, except those an upload in flight has pinned (besides the
// caller's own pin of own, if any). The caller holds commit.
func (r *registry) removeOrphans(digests []string, own string) {
	for _, d := range digests {
		r.pinMu.Lock()
		pins := r.pins[d]
		if d == own {
			pins--
		}
		pinned := pins > 0
		var err error
		if !pinned {
			err = r.removeFiles(d)
		}
		r.pinMu.Unlock()
		if err != nil {
			r.s.log.Warn("module file not removed", "digest", d, "err", err)
		}
	}
}

// removeFiles removes everything stored for a digest.
func (r *registry) removeFiles(digest string) error {
	var errs []error
	paths := []string{r.legacyFile(digest), r.legacyScriptFile(digest), r.scriptDir(digest)}
	if root, _ := r.nativeDir(false); root != "" {
		paths = append(paths, filepath.Join(root, digest))
	}
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	r.compiledMu.Lock()
	f := r.compiled[digest]
	delete(r.compiled, digest)
	r.compiledMu.Unlock()
	if err := host.ForgetCompiled(f); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// load loads one version with the checks of `moat run`: the signature
// against the profile's trusted keys, the manifest against the profile.
// Its kind is package bundle's decision (bundle.FromStored), as at upload:
// an interpreted plugin's bytes are its sources (a tar), built for its
// interpreter by the Config's ScriptBuilder and loaded as a host.Script;
// a native plugin's are its files, unpacked where its workers read them.
func (r *registry) load(ctx context.Context, v store.ModuleVersion, wasm []byte, correlation string) (*host.Module, error) {
	bad := func(code abi.Code, format string, args ...any) error {
		return &host.Error{Module: v.Name, Code: code, Reason: fmt.Sprintf(format, args...)}
	}
	b, err := bundle.FromStored(v.Name, v.Manifest, wasm, v.Signature, func(tar []byte) (map[string][]byte, error) {
		return unpack("application/x-tar", tar, r.s.cfg.Limits.Archive)
	})
	var se *bundle.StoredError
	switch {
	case errors.As(err, &se) && se.Unpacked:
		return nil, bad(abi.CodeInvalidArgument, "%v", se.Err)
	case errors.As(err, &se):
		return nil, fmt.Errorf("%s: stored sources: %w", v.Name, se.Err)
	case err != nil:
		return nil, err
	}
	env := bundle.LoadEnv{Scripts: r.s.cfg.ScriptBuilder, ScriptDir: r.scriptDir(v.Digest)}
	var sdk *host.Native
	if b.Kind == bundle.Native {
		if sdk, err = r.native(v, b); err != nil {
			return nil, err
		}
		env.NativeDir = sdk.Dir
	}
	wasm, opts, err := b.LoadOptions(ctx, env)
	switch {
	case errors.Is(err, toolchains.ErrMissing):
		return nil, bad(abi.CodeUnavailable, "%v", err)
	case err != nil:
		return nil, bad(abi.CodeInvalidArgument, "%v", err)
	}
	opts.Org, opts.CorrelationID = v.Org, correlation
	if b.Kind == bundle.Native {
		opts.Native.Env, opts.Native.ReadOnly = sdk.Env, sdk.ReadOnly
		opts.NativeWorkers = r.orgWorkers(v.Org)
		return r.s.hostFor(v.Org).Load(ctx, nil, opts)
	}
	h := r.s.hostFor(v.Org)
	m, err := h.Load(ctx, wasm, opts)
	if err == nil {
		// A plugin's interpreter is shared by every plugin of its
		// language: CacheFiles lists only a module's own code.
		if f := m.CacheFiles(); len(f) > 0 {
			r.compiledMu.Lock()
			r.compiled[v.Digest] = f
			r.compiledMu.Unlock()
		}
	}
	return m, err
}

// native prepares a native plugin's version to load: refused unless the
// operator allows native plugins, its files written where its workers can
// read them (a directory by digest), and the Python SDK beside them for a
// Python plugin. It returns the directory and the SDK's Env and ReadOnly.
func (r *registry) native(v store.ModuleVersion, b *bundle.Bundle) (*host.Native, error) {
	refuse := func(code abi.Code, format string, args ...any) (*host.Native, error) {
		return nil, &host.Error{Module: v.Name, Code: code, Reason: fmt.Sprintf(format, args...)}
	}
	if !r.s.cfg.Modules.AllowNative {
		return refuse(abi.CodeDenied, "native plugins (kind: native) run native code, and this server does not run them: the operator turns them on with modules.allow_native: true in the server config")
	}
	root, err := r.nativeDir(true)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, v.Digest)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		// Written whole under a temporary name, then renamed: a load of
		// the same digest never sees half the files.
		tmp, err := os.MkdirTemp(root, ".partial-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		if err := os.Chmod(tmp, 0o755); err != nil {
			return nil, err
		}
		for name, data := range b.Files {
			if err := os.WriteFile(filepath.Join(tmp, name), data, 0o644); err != nil {
				return nil, err
			}
		}
		if err := os.Rename(tmp, dir); err != nil {
			if _, serr := os.Stat(dir); serr != nil { // not another load's, made meanwhile
				return nil, err
			}
		}
	}
	nat := &host.Native{Dir: dir}
	if mf := b.Manifest; pysdk.Wanted(mf.Language, mf.Command) {
		sdk := filepath.Join(root, "python-sdk")
		env, err := pysdk.WriteSDK(sdk)
		if err != nil {
			return nil, err
		}
		nat.Env, nat.ReadOnly = env, []string{sdk}
	}
	return nat, nil
}

// put makes v (already stored) the current version of its module.
func (r *registry) put(ctx context.Context, m *host.Module, v store.ModuleVersion) {
	r.mu.Lock()
	old := r.loaded[modKey{v.Org, v.Name}]
	r.loaded[modKey{v.Org, v.Name}] = &entry{mod: m, version: v}
	r.mu.Unlock()
	r.recordFailure(v, nil)
	if old != nil && old.mod != m {
		old.mod.Close(ctx) // calls in flight finish on their instances
	}
}

func (r *registry) remove(ctx context.Context, org, name string) {
	r.mu.Lock()
	old := r.loaded[modKey{org, name}]
	delete(r.loaded, modKey{org, name})
	r.mu.Unlock()
	if old != nil {
		old.mod.Close(ctx)
	}
}

func (r *registry) closeAll(ctx context.Context) {
	r.stopFlights()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, e := range r.loaded {
		e.mod.Close(ctx)
		delete(r.loaded, k)
	}
	if root, _ := r.nativeDir(false); root != "" {
		os.RemoveAll(root)
	}
}

func (r *registry) each(f func(modKey, *entry)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for k, e := range r.loaded {
		f(k, e)
	}
}
