package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	pysdk "github.com/moat-sandbox/moat/guests/python"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
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
// sweeps the store's orphan blobs (uploads that never got their version).
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
// An interpreted plugin's bytes are its sources (a tar): it is built for
// its interpreter and loaded as a host.Script.
func (r *registry) load(ctx context.Context, v store.ModuleVersion, wasm []byte, correlation string) (*host.Module, error) {
	opts := host.LoadOptions{Name: v.Name, Org: v.Org, Signature: v.Signature, CorrelationID: correlation}
	if v.Manifest != nil {
		mf, err := policy.ParseManifest("moat.yaml", v.Manifest)
		if err != nil {
			return nil, err
		}
		opts.Manifest, opts.ManifestBytes = mf, v.Manifest
	}
	if opts.Manifest != nil && opts.Manifest.Kind == policy.KindNative {
		nat, err := r.native(v, opts.Manifest, wasm)
		if err != nil {
			return nil, err
		}
		opts.Native, opts.NativeWorkers = nat, r.orgWorkers(v.Org)
		return r.s.hostFor(v.Org).Load(ctx, nil, opts)
	}
	if l, ok := languages.ScriptLanguage(opts.Manifest); ok && !isWasm(wasm) {
		bad := func(code abi.Code, format string, args ...any) error {
			return &host.Error{Module: v.Name, Code: code, Reason: fmt.Sprintf(format, args...)}
		}
		files, err := unpack("application/x-tar", wasm, r.s.cfg.Limits.Archive)
		if err != nil {
			return nil, fmt.Errorf("%s: stored sources: %w", v.Name, err)
		}
		src, err := languages.PluginSource(l, files)
		if err != nil {
			return nil, bad(abi.CodeInvalidArgument, "%v", err)
		}
		sp, err := languages.BuildScriptPlugin(ctx, l, src, r.scriptDir(v.Digest), toolchains.Dir())
		switch {
		case errors.Is(err, toolchains.ErrMissing):
			return nil, bad(abi.CodeUnavailable, "%v", err)
		case err != nil:
			return nil, bad(abi.CodeInvalidArgument, "%v", err)
		}
		opts.Script = sp.Script
		wasm = sp.WASM
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
// operator allows native plugins, its stored sources (a tar: PackSources
// of its flat directory) unpacked where its workers can read them, and
// the Python SDK beside them for a Python plugin.
func (r *registry) native(v store.ModuleVersion, mf *policy.Manifest, src []byte) (*host.Native, error) {
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
		files, err := unpack("application/x-tar", src, r.s.cfg.Limits.Archive)
		if err != nil {
			return nil, fmt.Errorf("%s: stored sources: %w", v.Name, err)
		}
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
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
				return nil, err
			}
		}
		if err := os.Rename(tmp, dir); err != nil {
			if _, serr := os.Stat(dir); serr != nil { // not another load's, made meanwhile
				return nil, err
			}
		}
	}
	nat := &host.Native{Dir: dir, Source: src}
	if pysdk.Wanted(mf.Language, mf.Command) {
		sdk := filepath.Join(root, "python-sdk")
		env, err := pysdk.WriteSDK(sdk)
		if err != nil {
			return nil, err
		}
		nat.Env, nat.ReadOnly = env, []string{sdk}
	}
	return nat, nil
}

// isScript reports whether mf names an interpreted language.
func isScript(mf *policy.Manifest) bool { _, ok := languages.ScriptLanguage(mf); return ok }

// isWasm reports whether stored bytes are a module (an interpreted
// plugin's are its sources, as a tar).
func isWasm(b []byte) bool { return bytes.HasPrefix(b, []byte("\x00asm")) }

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

// ModuleJSON describes a module in responses.
type ModuleJSON struct {
	Name       string       `json:"name"`
	Org        string       `json:"org"`
	Digest     string       `json:"digest"`
	Version    string       `json:"version,omitempty"`
	Kind       host.Kind    `json:"kind"`
	Size       int64        `json:"size"`
	Mode       string       `json:"mode"`
	Signer     string       `json:"signer,omitempty"`
	Actions    []ActionJSON `json:"actions"`
	UploadedBy string       `json:"uploaded_by"`
	UploadedAt time.Time    `json:"uploaded_at"`
	// State is "loading" for a module the store holds that this replica
	// is still loading (kind, mode and signer are then not known yet),
	// "not_loadable" for one that does not load here; empty when loaded.
	State string `json:"state,omitempty"`
}

// ActionJSON is an action of a module and who may call it.
type ActionJSON struct {
	Name        string   `json:"name"`
	Roles       []string `json:"roles,omitempty"`
	Permissions []string `json:"permissions,omitempty"`
	Confirm     bool     `json:"confirm,omitempty"`
}

func describeModule(e *entry) ModuleJSON {
	info := e.mod.Info()
	out := ModuleJSON{
		Name: e.version.Name, Org: e.version.Org, Digest: e.version.Digest, Version: e.version.Version, Kind: info.Kind,
		Size: e.version.Size, Mode: info.Mode, Signer: info.Signer, Actions: []ActionJSON{},
		UploadedBy: e.version.UploadedBy, UploadedAt: e.version.UploadedAt,
	}
	mf := e.mod.Manifest()
	for _, a := range e.mod.Actions() {
		aj := ActionJSON{Name: a}
		if ma, ok := mf.Action(a); ok {
			aj.Roles, aj.Permissions, aj.Confirm = ma.Roles, ma.Permissions, ma.Confirm
		}
		out.Actions = append(out.Actions, aj)
	}
	return out
}

// listModules lists what the store holds: a module this replica has not
// loaded yet is loaded (the loads shared and run at once, waited for up
// to modules.load_wait), and one still loading after that is listed from
// the store with state "loading" rather than left out.
func (s *Server) listModules(c echo.Context) error {
	p := principalOf(c)
	ctx := c.Request().Context()
	out := []ModuleJSON{}
	versions, err := s.store.Modules(ctx, p.Org)
	if err != nil {
		return err
	}
	for _, v := range versions {
		if s.modules.get(p.Org, v.Name) == nil {
			s.modules.shared(p.Org, v.Name, "request") // start every load before waiting for one
		}
	}
	deadline := time.Now().Add(s.modules.loadWait()) // one wait for all
	for _, v := range versions {
		e, err := s.modules.ensureUntil(ctx, p.Org, v.Name, deadline)
		var le *loadingError
		var fe *loadFailedError
		switch {
		case e != nil:
			out = append(out, describeModule(e))
		case errors.As(err, &le):
			out = append(out, describeStored(v, "loading"))
		case errors.As(err, &fe):
			out = append(out, describeStored(v, "not_loadable"))
		case err != nil:
			return err
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"modules": out})
}

// describeStored describes a stored version this replica has not loaded,
// from what the store says of it.
func describeStored(v store.ModuleVersion, state string) ModuleJSON {
	out := ModuleJSON{Name: v.Name, Org: v.Org, Digest: v.Digest, Version: v.Version, Size: v.Size, Actions: []ActionJSON{},
		UploadedBy: v.UploadedBy, UploadedAt: v.UploadedAt, State: state}
	if v.Manifest != nil {
		if mf, err := policy.ParseManifest("moat.yaml", v.Manifest); err == nil {
			for _, a := range mf.Actions {
				out.Actions = append(out.Actions, ActionJSON{Name: a.Name, Roles: a.Roles, Permissions: a.Permissions, Confirm: a.Confirm})
			}
		}
	}
	return out
}

// lookup finds the principal's module, loading it on demand when the store
// holds it and this replica has not loaded it yet (ensure): a stored
// module is never a 404. Another organization's is a 404 like a missing
// one, so that names do not leak between tenants.
func (s *Server) lookup(c echo.Context) (*entry, error) {
	org, name := principalOf(c).Org, c.Param("name")
	e, err := s.modules.ensure(c.Request().Context(), org, name)
	if perr := s.moduleProblem(org, name, correlationID(c), e, err); perr != nil {
		return nil, perr
	}
	return e, nil
}

// getModule describes a module: loaded on demand like an invocation's,
// and, while it still loads (or when it does not load here), described
// from what the store holds with its state, as GET /v1/modules lists it.
func (s *Server) getModule(c echo.Context) error {
	org, name := principalOf(c).Org, c.Param("name")
	e, err := s.modules.ensure(c.Request().Context(), org, name)
	var le *loadingError
	var fe *loadFailedError
	if errors.As(err, &le) || errors.As(err, &fe) {
		state := "loading"
		if fe != nil {
			state = "not_loadable"
		}
		if cur, cerr := s.modules.current(c.Request().Context(), org, name); cerr == nil && cur != nil {
			return c.JSON(http.StatusOK, describeStored(*cur, state))
		}
	}
	if perr := s.moduleProblem(org, name, correlationID(c), e, err); perr != nil {
		return perr
	}
	return c.JSON(http.StatusOK, describeModule(e))
}

// VersionJSON is one uploaded version of a module.
type VersionJSON struct {
	Digest     string    `json:"digest"`
	Version    string    `json:"version,omitempty"`
	Size       int64     `json:"size"`
	Signed     bool      `json:"signed"`
	Current    bool      `json:"current"`
	UploadedBy string    `json:"uploaded_by"`
	UploadedAt time.Time `json:"uploaded_at"`
}

func (s *Server) moduleVersions(c echo.Context) error {
	p := principalOf(c)
	var vs []store.ModuleVersion
	err := store.ErrModuleNotFound // no upload has an invalid name; the store may refuse it (NUL)
	if host.ValidateModuleName(c.Param("name")) == nil {
		vs, err = s.store.ModuleVersions(c.Request().Context(), p.Org, c.Param("name"))
	}
	if errors.Is(err, store.ErrModuleNotFound) {
		return problem(http.StatusNotFound, "not_found", "no module %q in organization %s", c.Param("name"), p.Org)
	}
	if err != nil {
		return err
	}
	out := make([]VersionJSON, len(vs))
	for i, v := range vs {
		out[i] = VersionJSON{Digest: v.Digest, Version: v.Version, Size: v.Size, Signed: v.Signature != nil, Current: v.Current, UploadedBy: v.UploadedBy, UploadedAt: v.UploadedAt}
	}
	return c.JSON(http.StatusOK, map[string]any{"name": c.Param("name"), "versions": out})
}

func (s *Server) deleteModule(c echo.Context) error {
	p := principalOf(c)
	ctx := c.Request().Context()
	name := c.Param("name")
	if err := s.mayManage(c, PermModuleDelete, name); err != nil {
		return err
	}
	s.modules.commit.Lock()
	defer s.modules.commit.Unlock()
	var orphans []string
	err := store.ErrModuleNotFound // no upload has an invalid name; the store may refuse it (NUL)
	if host.ValidateModuleName(name) == nil {
		orphans, err = s.store.ModuleDelete(ctx, p.Org, name)
	}
	if errors.Is(err, store.ErrModuleNotFound) {
		return problem(http.StatusNotFound, "not_found", "no module %q in organization %s", name, p.Org)
	}
	if err != nil {
		return err
	}
	s.modules.remove(ctx, p.Org, name)
	s.auditModule(c, store.ModuleVersion{Org: p.Org, Name: name}, "delete", nil)
	s.modules.removeOrphans(orphans, "")
	return c.NoContent(http.StatusNoContent)
}

// Module management permissions. A principal manages its organization's
// modules through a permission, held the way an action's permissions are:
// by a role that the organization's profile gives it in role_permissions.
// While the profile gives a permission to no role at all, the default
// holds it: the role admin (DefaultModuleRole). Naming the permission
// under any role hands the decision to role_permissions entirely.
const (
	// PermModuleUpload uploads a module or a new version of one, which
	// replaces the current version (and so the code every caller runs).
	PermModuleUpload = "module.upload"
	// PermModuleDelete deletes a module with all its versions.
	PermModuleDelete = "module.delete"
	// DefaultModuleRole holds both permissions unless the profile's
	// role_permissions gives them to a role.
	DefaultModuleRole = "admin"
)

// mayManage checks that the caller holds perm over its organization's
// modules; a refusal is a 403 and a deny event.
func (s *Server) mayManage(c echo.Context, perm, module string) error {
	p := principalOf(c)
	ok, rule, reason := s.holds(p, perm)
	if ok {
		return nil
	}
	s.hostFor(p.Org).Audit().Record(c.Request().Context(), audit.Event{Kind: audit.KindDecision, Decision: audit.Deny,
		CorrelationID: correlationID(c), Module: module, User: p.User, Org: p.Org, Rule: rule, Reason: reason,
		Code: string(abi.CodeDenied), Attrs: map[string]string{"api": perm}})
	return problem(http.StatusForbidden, string(abi.CodeDenied), "%s", reason)
}

// holds says whether p holds the API permission perm in its
// organization's profile, and when not, the rule and the reason of the
// refusal: held the way an action's permissions are, by a role that
// role_permissions gives it; while the profile gives perm to no role at
// all, the role admin (DefaultModuleRole) holds it.
func (s *Server) holds(p policy.Principal, perm string) (ok bool, rule, reason string) {
	prof := s.hostFor(p.Org).Profile()
	configured := false
	for _, perms := range prof.RolePermissions {
		if slices.Contains(perms, perm) {
			configured = true
			break
		}
	}
	if configured {
		if slices.Contains(prof.Permissions(p.Roles), perm) {
			return true, "", ""
		}
		return false, "profile " + prof.Name + ": role_permissions " + perm,
			fmt.Sprintf("%s@%s needs permission %s, which none of its roles %v holds in profile %s (role_permissions)",
				p.User, p.Org, perm, orEmpty(p.Roles), prof.Name)
	}
	if p.HasRole(DefaultModuleRole) {
		return true, "", ""
	}
	return false, "default: role " + DefaultModuleRole + " holds " + perm,
		fmt.Sprintf("%s@%s needs role %s for %s (its roles are %v): profile %s gives %s to no role in role_permissions, so only %s may",
			p.User, p.Org, DefaultModuleRole, perm, orEmpty(p.Roles), prof.Name, perm, DefaultModuleRole)
}

func orEmpty(roles []string) []string {
	if roles == nil {
		return []string{}
	}
	return roles
}

// auditModule records an upload or a deletion for the principal's
// organization. (The host's own load and signature events name the module
// but not the organization that uploaded it.) A refusal names its rule.
func (s *Server) auditModule(c echo.Context, v store.ModuleVersion, what string, err error) {
	p := principalOf(c)
	ev := audit.Event{Kind: audit.KindLoad, Decision: audit.Allow, CorrelationID: correlationID(c), Module: v.Name,
		User: p.User, Org: p.Org, Rule: "api " + what, Attrs: map[string]string{"api": what}}
	var (
		re *refusal
		pr *Problem
	)
	switch {
	case errors.As(err, &re):
		ev.Decision, ev.Reason, ev.Code, ev.Rule = audit.Deny, "upload refused: "+re.p.Detail, re.p.Code, re.rule
	case errors.As(err, &pr):
		ev.Decision, ev.Reason, ev.Code = audit.Deny, "upload refused: "+pr.Detail, pr.Code
	case err != nil:
		ev.Decision, ev.Reason, ev.Code = audit.Deny, "upload refused: "+err.Error(), string(host.CodeOf(err))
	case what == "upload":
		ev.Reason = "uploaded version " + v.Digest[:12] + " (" + orNone(v.Version) + ") and made it current"
		ev.Attrs["digest"] = v.Digest
	default:
		ev.Reason = "deleted with all its versions"
	}
	s.hostFor(p.Org).Audit().Record(c.Request().Context(), ev)
}

// refusal is an upload refused by a server rule (quota, rollback): its
// problem for the client and its rule for the audit trail.
type refusal struct {
	p    *Problem
	rule string
}

func (r *refusal) Error() string { return r.p.Detail }

func orNone(s string) string {
	if s == "" {
		return "no manifest version"
	}
	return "version " + s
}

// upload is what a client sent: the module bytes and, optionally, the
// manifest and the signature.
type upload struct {
	name      string
	wasm      []byte
	manifest  []byte
	signature []byte
}

// uploadModule takes a module as multipart/form-data (parts module,
// manifest, signature, name), as one archive (tar, tar.gz or zip holding
// moat.yaml, the .wasm and its .minisig), or as a bare application/wasm
// body with ?name=. Only a holder of PermModuleUpload may; the module is
// loaded with every check before it is stored, so a refused upload
// changes nothing; storing it keeps the organization within
// limits.module_quota, pruning old versions (store.ModuleQuota).
func (s *Server) uploadModule(c echo.Context) error {
	if err := s.mayManage(c, PermModuleUpload, c.QueryParam("name")); err != nil {
		return err
	}
	limit := int64(s.cfg.Limits.MaxModuleBytes)
	body, err := readBody(c, limit, "limits.max_module_bytes")
	if err != nil {
		return err
	}
	up, err := parseUpload(c.Request().Header.Get(echo.HeaderContentType), body, s.cfg.Limits.Archive)
	if err != nil {
		s.auditModule(c, store.ModuleVersion{Name: c.QueryParam("name")}, "upload", err)
		var re *refusal
		if errors.As(err, &re) {
			return re.p
		}
		return err
	}
	if up.name == "" {
		up.name = c.QueryParam("name")
	}
	p := principalOf(c)
	ctx := c.Request().Context()
	v := store.ModuleVersion{Org: p.Org, Name: up.name, Digest: host.Digest(up.wasm), Size: int64(len(up.wasm)),
		Manifest: up.manifest, Signature: up.signature, UploadedBy: p.User, UploadedAt: time.Now().UTC()}
	if up.manifest != nil {
		mf, err := policy.ParseManifest("moat.yaml", up.manifest)
		if err != nil {
			return problem(http.StatusBadRequest, "invalid_argument", "manifest: %v", err)
		}
		if v.Name != "" && v.Name != mf.Name {
			return problem(http.StatusBadRequest, "invalid_argument", "the manifest names the module %q but the upload names it %q; drop name or make them agree", mf.Name, v.Name)
		}
		v.Name, v.Version = mf.Name, mf.Version
	}
	if v.Name == "" {
		return problem(http.StatusBadRequest, "invalid_argument", "the module has no name: upload its moat.yaml as the manifest part, or give a name part or ?name=")
	}
	if err := host.ValidateModuleName(v.Name); err != nil {
		return problem(http.StatusBadRequest, "invalid_argument", "%v", err)
	}
	// The digest's files stay until this upload is stored or refused,
	// whatever another organization deletes meanwhile.
	defer s.modules.pin(v.Digest)()
	m, err := s.modules.load(ctx, v, up.wasm, correlationID(c))
	if err != nil {
		s.auditModule(c, v, "upload", err)
		var fe *policy.FileError
		if errors.As(err, &fe) {
			return problem(http.StatusBadRequest, "invalid_argument", "manifest: %v", err)
		}
		return fromHostError(err)
	}
	if hook := s.modules.beforeCommit; hook != nil {
		hook()
	}
	// The rollback check compares with the loaded current version: load
	// it first when it was uploaded through another replica (outside
	// commit, which its load takes).
	if !s.cfg.Modules.AllowSignedRollback {
		if _, err := s.modules.ensure(ctx, v.Org, v.Name); err != nil {
			m.Close(ctx)
			return s.moduleProblem(v.Org, v.Name, correlationID(c), nil, err)
		}
	}
	s.modules.commit.Lock()
	pruned, err := s.commitUpload(ctx, m, &v, up.wasm)
	s.modules.commit.Unlock()
	if err != nil {
		m.Close(ctx)
		var re *refusal
		if errors.As(err, &re) {
			s.auditModule(c, v, "upload", err)
			return re.p
		}
		return err
	}
	s.auditModule(c, v, "upload", nil)
	for _, pv := range pruned {
		s.hostFor(p.Org).Audit().Record(ctx, audit.Event{Kind: audit.KindLoad, Decision: audit.Allow, CorrelationID: correlationID(c),
			Module: pv.Name, User: p.User, Org: p.Org, Rule: "limits.module_quota",
			Reason: fmt.Sprintf("pruned version %s (%s, %d bytes, uploaded %s by %s) to keep organization %s within its module quota",
				pv.Digest[:12], orNone(pv.Version), pv.Size, pv.UploadedAt.Format(time.RFC3339), pv.UploadedBy, p.Org),
			Attrs: map[string]string{"api": "prune", "digest": pv.Digest}})
	}
	s.metrics.uploads.Inc()
	c.Response().Header().Set(echo.HeaderLocation, "/v1/modules/"+v.Name)
	return c.JSON(http.StatusCreated, describeModule(s.modules.get(p.Org, v.Name)))
}

// commitUpload stores a loaded version and makes it current; the caller
// holds commit. It refuses a signed version older than the signed current
// one (modules.allow_signed_rollback), and a version the organization's
// quota cannot hold even after pruning; it returns the versions pruned.
func (s *Server) commitUpload(ctx context.Context, m *host.Module, v *store.ModuleVersion, wasm []byte) ([]store.ModuleVersion, error) {
	if !s.cfg.Modules.AllowSignedRollback {
		cur := s.modules.get(v.Org, v.Name)
		// What the store says is current, not only what this replica
		// has loaded: a version stored through another replica since
		// (not loaded here yet) would otherwise escape the check.
		stored, err := s.modules.current(ctx, v.Org, v.Name)
		if err != nil {
			return nil, err
		}
		if stored != nil && (cur == nil || !sameCode(cur.version, *stored)) {
			return nil, &refusal{rule: "modules.allow_signed_rollback", p: &Problem{Type: ProblemType("unavailable"), Title: http.StatusText(http.StatusServiceUnavailable),
				Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: 2,
				Detail: fmt.Sprintf("module %s was changed through another replica during this upload and is not loaded here yet; retry the upload", v.Name)}}
		}
		if cur != nil {
			if err := checkRollback(cur, m, *v); err != nil {
				return nil, err
			}
		}
	}
	// The bytes before the version that refers to them (store.BlobGrace
	// keeps them from the sweep meanwhile).
	if err := s.store.ModuleBlobPut(ctx, v.Digest, wasm); err != nil {
		return nil, fmt.Errorf("store module %s: %w", v.Digest, err)
	}
	q := s.cfg.Limits.ModuleQuota
	pruned, err := s.store.ModulePut(ctx, *v, store.ModuleQuota{Bytes: int64(q.Bytes), Versions: q.Versions, KeepPerModule: q.KeepPerModule})
	var qe *store.QuotaError
	if errors.As(err, &qe) {
		knob := "limits.module_quota." + qe.Limit
		// The file may have been written for this upload alone: take it
		// back unless a stored version refers to it.
		if n, err := s.store.ModuleDigestRefs(ctx, v.Digest); err == nil && n == 0 {
			s.modules.removeOrphans([]string{v.Digest}, v.Digest)
		}
		return nil, &refusal{rule: knob, p: problem(http.StatusRequestEntityTooLarge, "quota_exceeded",
			"%v: %s is %d; delete modules (DELETE /v1/modules/{name}) or ask the operator to raise %s", qe, knob, qe.Max, knob)}
	}
	if err != nil {
		return nil, err
	}
	// A prune or deletion through another replica that orphaned these
	// same bytes between the two calls took their blob (store.BlobGrace):
	// store it again, and the version again, so that the replicas that
	// found it missing load it at the change.
	if _, err := s.store.ModuleBlobGet(ctx, v.Org, v.Digest); errors.Is(err, store.ErrModuleNotFound) {
		s.log.Warn("module upload: its bytes were removed by a racing prune or deletion of the same bytes; storing them again", "org", v.Org, "module", v.Name, "digest", v.Digest)
		if err := s.store.ModuleBlobPut(ctx, v.Digest, wasm); err != nil {
			return nil, fmt.Errorf("store module %s: %w", v.Digest, err)
		}
		more, err := s.store.ModulePut(ctx, *v, store.ModuleQuota{Bytes: int64(q.Bytes), Versions: q.Versions, KeepPerModule: q.KeepPerModule})
		if err != nil {
			return nil, err
		}
		pruned.Versions = append(pruned.Versions, more.Versions...)
		pruned.Orphans = append(pruned.Orphans, more.Orphans...)
	} else if err != nil {
		return nil, err
	}
	v.Current = true
	s.modules.put(ctx, m, *v)
	s.modules.removeOrphans(pruned.Orphans, "")
	return pruned.Versions, nil
}

// checkRollback refuses replacing a module whose current version is signed
// by a trusted key with a trusted-signed version that is not newer: a
// signed release stays valid forever, so without this anyone who may
// upload could put back an old signed version with a known hole over its
// fix. Re-uploading the current version itself (same bytes and version) is
// not a rollback.
func checkRollback(cur *entry, m *host.Module, v store.ModuleVersion) error {
	curSigner, newSigner := cur.mod.Info().Signer, m.Info().Signer
	if curSigner == "" || newSigner == "" {
		return nil
	}
	if cur.version.Digest == v.Digest && cur.version.Version == v.Version {
		return nil
	}
	if policy.CompareVersions(v.Version, cur.version.Version) > 0 {
		return nil
	}
	return &refusal{rule: "modules.allow_signed_rollback", p: problem(http.StatusConflict, "rollback",
		"module %s is at version %s signed by %s (digest %s); this upload is version %s signed by %s (digest %s): a signed module's version must increase, "+
			"so that an old signed release cannot be put back over its fix; upload a higher version, delete the module first, or set modules.allow_signed_rollback: true in the server config",
		v.Name, orDash(cur.version.Version), curSigner, cur.version.Digest[:12], orDash(v.Version), newSigner, v.Digest[:12])}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func parseUpload(contentType string, body []byte, lim ArchiveLimits) (*upload, error) {
	mt, params, _ := mime.ParseMediaType(contentType)
	bad := func(format string, args ...any) (*upload, error) {
		return nil, problem(http.StatusBadRequest, "invalid_argument", format, args...)
	}
	up := &upload{}
	switch mt {
	case "multipart/form-data":
		mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				return bad("multipart body: %v", err)
			}
			data, err := io.ReadAll(part)
			if err != nil {
				return bad("multipart part %s: %v", part.FormName(), err)
			}
			switch part.FormName() {
			case "module":
				up.wasm = data
			case "manifest":
				up.manifest = data
			case "signature":
				up.signature = data
			case "name":
				up.name = strings.TrimSpace(string(data))
			default:
				return bad("unknown part %q; the parts are module, manifest, signature and name", part.FormName())
			}
		}
	case "application/wasm", "application/octet-stream":
		up.wasm = body
	case "application/x-tar", "application/tar", "application/gzip", "application/x-gzip", "application/zip":
		files, err := unpack(mt, body, lim)
		if err != nil {
			return nil, &refusal{p: archiveProblem(err), rule: archiveRule(err)}
		}
		return fromArchive(files)
	default:
		return bad("Content-Type %q: send multipart/form-data (parts module, manifest, signature), an archive (application/x-tar, application/gzip or application/zip) or application/wasm", contentType)
	}
	if len(up.wasm) == 0 {
		if mf, err := policy.ParseManifest(host.ManifestFile, up.manifest); err == nil && (isScript(mf) || mf.Kind == policy.KindNative) {
			return bad("no module: an interpreted or native plugin is uploaded as an archive of its directory (moat.yaml and its sources; application/x-tar, application/gzip or application/zip)")
		}
		return bad("no module: send the .wasm file as the module part")
	}
	return up, nil
}

// fromArchive finds the plugin in an archive the way ReadBundle finds it in
// a directory: the module moat.yaml names, or the only .wasm file.
func fromArchive(files map[string][]byte) (*upload, error) {
	up := &upload{manifest: files[host.ManifestFile]}
	file := ""
	if up.manifest != nil {
		mf, err := policy.ParseManifest(host.ManifestFile, up.manifest)
		if err != nil {
			return nil, problem(http.StatusBadRequest, "invalid_argument", "archive: %v", err)
		}
		if mf.Kind == policy.KindNative {
			// A native plugin: its flat directory is the upload, packed
			// as `moat run` and `moat sign` pack it.
			up.wasm = languages.PackSources(languages.NativeSource(mf.Name, files))
			up.signature = files[mf.Name+".minisig"]
			return up, nil
		}
		hasModule := slices.ContainsFunc(slices.Collect(maps.Keys(files)), func(n string) bool { return strings.HasSuffix(n, ".wasm") })
		if l, ok := languages.ScriptLanguage(mf); ok && !hasModule {
			// An interpreted plugin: its sources are the upload.
			src, err := languages.PluginSource(l, files)
			if err != nil {
				return nil, problem(http.StatusBadRequest, "invalid_argument", "archive: %s plugin: %v", mf.Language, err)
			}
			// The canonical form of the sources: what the version's
			// digest is of, and what a signature (NAME.minisig, from
			// `moat sign DIR`) covers.
			up.wasm = languages.PackSources(src)
			up.signature = files[mf.Name+".minisig"]
			return up, nil
		}
		file = mf.Module
		if file == "" {
			file = mf.Name + ".wasm"
		}
	} else {
		for name := range files {
			if strings.HasSuffix(name, ".wasm") {
				if file != "" {
					return nil, problem(http.StatusBadRequest, "invalid_argument", "archive: it holds several .wasm files and no %s to say which is the module", host.ManifestFile)
				}
				file = name
			}
		}
		up.name = host.SanitizeModuleName(strings.TrimSuffix(file, ".wasm"))
	}
	up.wasm = files[path.Base(file)]
	if up.wasm == nil {
		return nil, problem(http.StatusBadRequest, "invalid_argument", "archive: no module file %q; build the plugin before packing it", file)
	}
	up.signature = files[policy.SignatureFile(path.Base(file))]
	return up, nil
}

// ModulesConfig configures module management, as modules in the server
// config.
type ModulesConfig struct {
	// AllowSignedRollback lets a module whose current version is signed
	// by a trusted key be replaced by a trusted-signed version that is not
	// newer (by manifest version). Default false: a signed release cannot
	// be put back over a newer one (see checkRollback); to roll back on
	// purpose, delete the module first, or turn this on for the while.
	AllowSignedRollback bool `yaml:"allow_signed_rollback"`
	// AllowNative lets organizations upload native plugins (kind: native):
	// native code run as confined long-lived workers (their own uid,
	// cgroup, root filesystem, no network, Landlock, seccomp), which needs
	// root and the kernel layers. Default false: a server runs only
	// WebAssembly unless its operator says otherwise.
	AllowNative bool `yaml:"allow_native"`
	// MaxNativeWorkers bounds the native plugin workers of all
	// organizations at once (each a process with its own memory limit):
	// a plugin that would start past it is refused at load (503), one
	// that would grow past it waits for its own workers. Default 32;
	// from 1 to 4096.
	MaxNativeWorkers int `yaml:"max_native_workers"`
	// MaxNativeWorkersPerOrg bounds one organization's share of them, so
	// that no organization's plugins can take every worker. Default a
	// quarter of max_native_workers (at least 1); from 1 to
	// max_native_workers.
	MaxNativeWorkersPerOrg int `yaml:"max_native_workers_per_org"`
	// SharedCodeBytes bounds the compiled code the replicas keep in the
	// database when they share it (code_key_file): past it, the least
	// recently used artifacts are evicted (a module whose code was
	// evicted is compiled once more by the next replica that loads it,
	// which stores it again). Default 2GiB; from 256MiB (the largest
	// artifact shared) to 1TiB.
	SharedCodeBytes policy.ByteSize `yaml:"shared_code_bytes"`
	// LoadWait bounds how long a request waits for a module this replica
	// is loading on demand (a module the store holds that was uploaded
	// or changed through another replica and is not loaded here yet):
	// past it the request is answered 503 with Retry-After, and the load
	// goes on. Default 30s; from 1ms to 10m.
	LoadWait policy.Duration `yaml:"load_wait"`
}

// ModuleQuotaConfig bounds the module versions each organization keeps,
// as limits.module_quota in the server config. Old versions are pruned at
// upload by store.ModuleQuota's rule: each module keeps its newest
// keep_per_module versions, then the organization's oldest versions that
// are not current go until it is within bytes and versions; a current
// version is never pruned, and an upload that cannot fit even so is
// refused (413 quota_exceeded).
type ModuleQuotaConfig struct {
	// Bytes bounds the sizes of all versions of all the organization's
	// modules. Default 1GiB; from 1KiB to 1TiB.
	Bytes policy.ByteSize `yaml:"bytes"`
	// Versions bounds their number. Default 200; from 1 to 100000.
	Versions int `yaml:"versions"`
	// KeepPerModule is how many versions of each module are kept, the
	// current one included. Default 5; from 1 to 1000.
	KeepPerModule int `yaml:"keep_per_module"`
}

// Defaults of ModuleQuotaConfig.
const (
	DefaultModuleQuotaBytes    = 1 << 30
	DefaultModuleQuotaVersions = 200
	DefaultModuleKeepPerModule = 5
)

func (q *ModuleQuotaConfig) fillDefaults() {
	if q.Bytes == 0 {
		q.Bytes = DefaultModuleQuotaBytes
	}
	if q.Versions == 0 {
		q.Versions = DefaultModuleQuotaVersions
	}
	if q.KeepPerModule == 0 {
		q.KeepPerModule = DefaultModuleKeepPerModule
	}
}

func (q ModuleQuotaConfig) validate(fail func(field, format string, args ...any) error) error {
	const k = "limits.module_quota."
	switch {
	case q.Bytes < 1<<10 || q.Bytes > 1<<40:
		return fail(k+"bytes", "%s is outside 1KiB to 1TiB; the default is %s", q.Bytes, policy.ByteSize(DefaultModuleQuotaBytes))
	case q.Versions < 1 || q.Versions > 100_000:
		return fail(k+"versions", "%d is outside 1 to 100000; the default is %d", q.Versions, DefaultModuleQuotaVersions)
	case q.KeepPerModule < 1 || q.KeepPerModule > 1000:
		return fail(k+"keep_per_module", "%d is outside 1 to 1000; the default is %d", q.KeepPerModule, DefaultModuleKeepPerModule)
	}
	return nil
}

// checkModuleGrants refuses a profile that grants by module name (its
// modules: section) when more than one organization uses it. A module's
// name is chosen by whoever uploads it, in their own organization, so in
// a shared profile modules.billing would give the grants meant for one
// organization's billing to every organization's module of that name. The
// default profile is every organization's that has none of its own.
func (c *Config) checkModuleGrants(fail func(field, format string, args ...any) error) error {
	byName := func(name string) []string {
		p, err := policy.LoadProfile(name)
		if err != nil || len(p.Modules) == 0 {
			return nil
		}
		return slices.Sorted(maps.Keys(p.Modules))
	}
	if mods := byName(c.Profile); mods != nil {
		return fail("profile", "profile %s grants by module name (modules: %s) and is the profile of every organization without one of its own, "+
			"so any organization's module named %s would get those grants; give the organization that owns them its own profile under profiles:, "+
			"or grant through a signing key (keys:) instead", c.Profile, strings.Join(mods, ", "), mods[0])
	}
	users := map[string][]string{}
	for _, org := range slices.Sorted(maps.Keys(c.Profiles)) {
		users[c.Profiles[org]] = append(users[c.Profiles[org]], org)
	}
	for _, org := range slices.Sorted(maps.Keys(c.Profiles)) {
		name := c.Profiles[org]
		if orgs := users[name]; len(orgs) > 1 {
			if mods := byName(name); mods != nil {
				return fail("profiles."+org, "profile %s grants by module name (modules: %s) and is shared by organizations %s, "+
					"so each one's module named %s would get the grants; give each organization a profile of its own",
					name, strings.Join(mods, ", "), strings.Join(orgs, ", "), mods[0])
			}
		}
	}
	return nil
}
