package server

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
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
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/toolchains"
)

// registry holds the loaded current version of every module of every
// organization. The store is the truth (which versions exist, which is
// current); the registry is what is compiled and pooled in memory.
type registry struct {
	s   *Server
	dir string // the module bytes, by digest

	mu     sync.RWMutex
	loaded map[modKey]*entry
	// commit serializes storing a version and swapping it in, so that
	// two uploads of one name leave the store and the registry agreeing
	// on which is current.
	commit sync.Mutex
}

type modKey struct{ org, name string }

type entry struct {
	mod     *host.Module
	version store.ModuleVersion
}

func newRegistry(s *Server) *registry {
	return &registry{s: s, dir: filepath.Join(s.cfg.DataDir, "modules"), loaded: map[modKey]*entry{}}
}

func (r *registry) get(org, name string) *entry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.loaded[modKey{org, name}]
}

// loadAll loads the current version of every stored module. A module that
// no longer loads (its file is gone, the profile changed) is logged and
// left out; the server still starts, and re-uploading fixes it.
func (r *registry) loadAll(ctx context.Context) error {
	mods, err := r.s.store.Modules(ctx, "")
	if err != nil {
		return fmt.Errorf("server: list modules: %w", err)
	}
	for _, v := range mods {
		wasm, err := os.ReadFile(r.fileFor(v))
		if err != nil {
			r.s.log.Error("module not loaded", "org", v.Org, "module", v.Name, "digest", v.Digest, "err", err)
			continue
		}
		m, err := r.load(ctx, v, wasm, "startup-"+newID())
		if err != nil {
			r.s.log.Error("module not loaded", "org", v.Org, "module", v.Name, "digest", v.Digest, "err", err)
			continue
		}
		r.loaded[modKey{v.Org, v.Name}] = &entry{mod: m, version: v}
	}
	r.s.log.Info("modules loaded", "count", len(r.loaded), "stored", len(mods))
	return nil
}

func (r *registry) file(digest string) string { return filepath.Join(r.dir, digest+".wasm") }

// Where an interpreted plugin's upload lives: its sources as a tar (the
// bytes its digest is of), and unpacked for the interpreter's /src.
func (r *registry) scriptFile(digest string) string { return filepath.Join(r.dir, digest+".tar") }
func (r *registry) scriptDir(digest string) string  { return filepath.Join(r.dir, digest+".src") }

// fileFor is where v's uploaded bytes are: an interpreted plugin's
// sources when they were stored, else the module.
func (r *registry) fileFor(v store.ModuleVersion) string {
	if _, err := os.Stat(r.scriptFile(v.Digest)); err == nil {
		return r.scriptFile(v.Digest)
	}
	return r.file(v.Digest)
}

// removeFiles removes everything stored for a digest.
func (r *registry) removeFiles(digest string) error {
	var errs []error
	for _, p := range []string{r.file(digest), r.scriptFile(digest), r.scriptDir(digest)} {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// load loads one version with the checks of `moat run`: the signature
// against the profile's trusted keys, the manifest against the profile.
// An interpreted plugin's bytes are its sources (a tar): it is built for
// its interpreter and loaded as a host.Script.
func (r *registry) load(ctx context.Context, v store.ModuleVersion, wasm []byte, correlation string) (*host.Module, error) {
	opts := host.LoadOptions{Name: v.Name, Signature: v.Signature, CorrelationID: correlation}
	if v.Manifest != nil {
		mf, err := policy.ParseManifest("moat.yaml", v.Manifest)
		if err != nil {
			return nil, err
		}
		opts.Manifest, opts.ManifestBytes = mf, v.Manifest
	}
	if l, ok := languages.ScriptLanguage(opts.Manifest); ok && !isWasm(wasm) {
		bad := func(code abi.Code, format string, args ...any) error {
			return &host.Error{Module: v.Name, Code: code, Reason: fmt.Sprintf(format, args...)}
		}
		files, err := untar(wasm)
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
	return r.s.hostFor(v.Org).Load(ctx, wasm, opts)
}

// isScript reports whether mf names an interpreted language.
func isScript(mf *policy.Manifest) bool { _, ok := languages.ScriptLanguage(mf); return ok }

// isWasm reports whether stored bytes are a module (an interpreted
// plugin's are its sources, as a tar).
func isWasm(b []byte) bool { return bytes.HasPrefix(b, []byte("\x00asm")) }

// untar reads what languages.PackSources wrote.
func untar(b []byte) (map[string][]byte, error) {
	return unpack("application/x-tar", b)
}

// put makes v (already stored) the current version of its module.
func (r *registry) put(ctx context.Context, m *host.Module, v store.ModuleVersion) {
	r.mu.Lock()
	old := r.loaded[modKey{v.Org, v.Name}]
	r.loaded[modKey{v.Org, v.Name}] = &entry{mod: m, version: v}
	r.mu.Unlock()
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
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, e := range r.loaded {
		e.mod.Close(ctx)
		delete(r.loaded, k)
	}
}

func (r *registry) each(f func(modKey, *entry)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for k, e := range r.loaded {
		f(k, e)
	}
}

// writeFile stores uploaded bytes at dst (a path named by their digest),
// atomically: a crash leaves the old file or the new one, never half of
// one.
func (r *registry) writeFile(dst string, wasm []byte) error {
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return err
	}
	if _, err := os.Stat(dst); err == nil {
		return nil // content-addressed: the same bytes are there
	}
	tmp, err := os.CreateTemp(r.dir, ".upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(wasm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
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

func (s *Server) listModules(c echo.Context) error {
	p := principalOf(c)
	out := []ModuleJSON{}
	versions, err := s.store.Modules(c.Request().Context(), p.Org)
	if err != nil {
		return err
	}
	for _, v := range versions {
		if e := s.modules.get(p.Org, v.Name); e != nil {
			out = append(out, describeModule(e))
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"modules": out})
}

// lookup finds the principal's module: another organization's is a 404 like
// a missing one, so that names do not leak between tenants.
func (s *Server) lookup(c echo.Context) (*entry, error) {
	name := c.Param("name")
	e := s.modules.get(principalOf(c).Org, name)
	if e == nil {
		return nil, problem(http.StatusNotFound, "not_found", "no module %q in organization %s; GET /v1/modules lists them", name, principalOf(c).Org)
	}
	return e, nil
}

func (s *Server) getModule(c echo.Context) error {
	e, err := s.lookup(c)
	if err != nil {
		return err
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
	vs, err := s.store.ModuleVersions(c.Request().Context(), p.Org, c.Param("name"))
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
	s.modules.commit.Lock()
	defer s.modules.commit.Unlock()
	orphans, err := s.store.ModuleDelete(ctx, p.Org, c.Param("name"))
	if errors.Is(err, store.ErrModuleNotFound) {
		return problem(http.StatusNotFound, "not_found", "no module %q in organization %s", c.Param("name"), p.Org)
	}
	if err != nil {
		return err
	}
	s.modules.remove(ctx, p.Org, c.Param("name"))
	s.auditModule(c, store.ModuleVersion{Org: p.Org, Name: c.Param("name")}, "delete", nil)
	for _, d := range orphans {
		if err := s.modules.removeFiles(d); err != nil {
			s.log.Warn("module file not removed", "digest", d, "err", err)
		}
	}
	return c.NoContent(http.StatusNoContent)
}

// auditModule records an upload or a deletion for the principal's
// organization. (The host's own load and signature events name the module
// but not the organization that uploaded it.)
func (s *Server) auditModule(c echo.Context, v store.ModuleVersion, what string, err error) {
	p := principalOf(c)
	ev := audit.Event{Kind: audit.KindLoad, Decision: audit.Allow, CorrelationID: correlationID(c), Module: v.Name,
		User: p.User, Org: p.Org, Rule: "api " + what, Attrs: map[string]string{"api": what}}
	switch {
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
// body with ?name=. The module is loaded with every check before it is
// stored, so a refused upload changes nothing.
func (s *Server) uploadModule(c echo.Context) error {
	limit := int64(s.cfg.Limits.MaxModuleBytes)
	body, err := readBody(c, limit, "limits.max_module_bytes")
	if err != nil {
		return err
	}
	up, err := parseUpload(c.Request().Header.Get(echo.HeaderContentType), body)
	if err != nil {
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
	m, err := s.modules.load(ctx, v, up.wasm, correlationID(c))
	s.auditModule(c, v, "upload", err)
	if err != nil {
		var fe *policy.FileError
		if errors.As(err, &fe) {
			return problem(http.StatusBadRequest, "invalid_argument", "manifest: %v", err)
		}
		return fromHostError(err)
	}
	if err := s.modules.writeFile(s.modules.fileFor(v), up.wasm); err != nil {
		m.Close(ctx)
		return fmt.Errorf("store module %s: %w", v.Digest, err)
	}
	s.modules.commit.Lock()
	if err := s.store.ModulePut(ctx, v); err != nil {
		s.modules.commit.Unlock()
		m.Close(ctx)
		return err
	}
	v.Current = true
	s.modules.put(ctx, m, v)
	s.modules.commit.Unlock()
	s.metrics.uploads.Inc()
	c.Response().Header().Set(echo.HeaderLocation, "/v1/modules/"+v.Name)
	return c.JSON(http.StatusCreated, describeModule(s.modules.get(p.Org, v.Name)))
}

func parseUpload(contentType string, body []byte) (*upload, error) {
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
		files, err := unpack(mt, body)
		if err != nil {
			return bad("archive: %v", err)
		}
		return fromArchive(files)
	default:
		return bad("Content-Type %q: send multipart/form-data (parts module, manifest, signature), an archive (application/x-tar, application/gzip or application/zip) or application/wasm", contentType)
	}
	if len(up.wasm) == 0 {
		if mf, err := policy.ParseManifest(host.ManifestFile, up.manifest); err == nil && isScript(mf) {
			return bad("no module: an interpreted plugin is uploaded as an archive of its directory (moat.yaml and its sources; application/x-tar, application/gzip or application/zip)")
		}
		return bad("no module: send the .wasm file as the module part")
	}
	return up, nil
}

// unpack reads the regular files of a tar, tar.gz or zip archive, by base
// name: an archive of a plugin directory, whatever its top folder.
func unpack(mt string, body []byte) (map[string][]byte, error) {
	files := map[string][]byte{}
	add := func(name string, r io.Reader) error {
		b, err := io.ReadAll(r)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		base := path.Base(name)
		if _, dup := files[base]; dup {
			return fmt.Errorf("two files are named %s; the archive must hold one plugin", base)
		}
		files[base] = b
		return nil
	}
	if mt == "application/zip" {
		zr, err := zip.NewReader(bytes.NewReader(body), int64(len(body)))
		if err != nil {
			return nil, err
		}
		for _, f := range zr.File {
			if f.FileInfo().IsDir() {
				continue
			}
			rc, err := f.Open()
			if err != nil {
				return nil, err
			}
			err = add(f.Name, rc)
			rc.Close()
			if err != nil {
				return nil, err
			}
		}
		return files, nil
	}
	var r io.Reader = bytes.NewReader(body)
	if mt == "application/gzip" || mt == "application/x-gzip" || bytes.HasPrefix(body, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, err
		}
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if err := add(h.Name, tr); err != nil {
				return nil, err
			}
		}
	}
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
