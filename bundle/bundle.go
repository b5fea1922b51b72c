// Package bundle is what a plugin is: its kind, its manifest, the bytes
// its digest and signature cover, and its files, read once from wherever
// the plugin comes from — a directory (`moat run`, `moat sign`, `moat
// verify`, `moat deploy`, `moat inspect`), an uploaded archive (moat
// serve's POST /v1/modules) or a version moat serve's store keeps (its
// reload and load on demand) — and turned into what host.Host.Load takes.
//
// The kind is decided here and nowhere else (Open, FromArchive,
// FromStored): a plugin that runs with `moat run` is the same plugin,
// signed over the same bytes, when it is uploaded, because the three
// entry points share the one decision. What a signature covers (Signed) is
// defined once too: a module's bytes, or the canonical pack of an
// interpreted or native plugin's files (languages.PackSources). The
// directory is read by the one rule of package plugintree (regular files
// and directories, no links), and the kernel layer a plugin's grants need
// (KernelGrants) is derived beside it, from the same manifest.
//
// It is a public package, not internal/, because an embedder that loads
// plugins from disk needs exactly this: Open a directory, then Load with
// LoadOptions (examples/polyglot does so, as moat run does).
package bundle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/plugintree"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/toolchains"
)

// Kind is how a plugin reaches the host.
type Kind int

const (
	// Wasm is a WebAssembly module: built by `moat build` (or by hand),
	// its bytes what the digest and signature cover.
	Wasm Kind = iota + 1
	// Script is an interpreted plugin (its manifest's language is one
	// whose path is languages.PathInterpreted, and it ships no .wasm):
	// its sources are the plugin, run by its language's interpreter as a
	// host.Script; their pack is what the digest and signature cover.
	Script
	// Native is a native plugin (kind: native in its manifest): its flat
	// directory's files, run by confined workers (host.Native); their
	// pack, its signature left out, is what the digest and signature
	// cover.
	Native
)

func (k Kind) String() string {
	switch k {
	case Wasm:
		return "wasm"
	case Script:
		return "script"
	case Native:
		return "native"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Bundle is one plugin, read from a directory, an archive or the store.
type Bundle struct {
	Name          string
	Kind          Kind
	Manifest      *policy.Manifest // nil for a bare module
	ManifestBytes []byte
	// Signed is what the plugin's digest is of and what its signature
	// covers: the module's bytes (Wasm), or languages.PackSources of its
	// files (Script: its sources; Native: every file but its signature).
	Signed    []byte
	Signature []byte // nil when unsigned
	// Files are the plugin's files by base name (Script: its sources;
	// Native: every file but its signature; Wasm: its pages' files, from
	// its PageSection, nil when it has no pages).
	Files map[string][]byte
	// Language is a Script's interpreted language.
	Language languages.Language

	// Where Open read the plugin; empty for FromArchive and FromStored
	// but for Path, the module's file name in the archive.
	Dir           string // the plugin's directory (a module's: its file's)
	Path          string // the .wasm file (Wasm), or Dir
	ManifestPath  string
	SignaturePath string

	src languages.Source // a Script's sources, its entry point named
}

// Source is a Script's sources as its language builds them.
func (b *Bundle) Source() languages.Source { return b.src }

// Bounds on a native plugin's directory as Open packs it (its digest and
// signature are of the pack): a directory past them is almost surely not
// a plugin's sources (a virtualenv, a build tree).
const (
	maxNativeFiles = 4096
	maxNativeBytes = 64 << 20
)

// Open reads the plugin at path: a plugin directory, or a .wasm file (with
// the moat.yaml beside it when that manifest names this file). A directory
// whose moat.yaml says kind: native is a Native plugin; one whose manifest
// names an interpreted language and that holds no .wasm is a Script;
// anything else is a module (Wasm): the file the manifest names, or
// DIRNAME.wasm, or the directory's only .wasm file. Every file is read by
// package plugintree's rule: a link or a special file is refused, naming
// it, so that what is run, signed and deployed is what lies in the
// directory.
func Open(path string) (*Bundle, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", path, unwrapPathError(err))
	}
	dir := path
	if !st.IsDir() {
		dir = filepath.Dir(path)
	}
	mf, raw, mpath, err := readManifest(dir)
	if err != nil {
		return nil, err
	}
	if st.IsDir() && mf != nil {
		switch kindOf(mf, func() bool { w, _ := filepath.Glob(filepath.Join(dir, "*.wasm")); return len(w) > 0 }) {
		case Native:
			return openNative(dir, mf, raw)
		case Script:
			return openScript(dir, mf, raw)
		}
	}
	return openWasm(path, st, mf, raw, mpath)
}

// OpenScript reads the directory dir as a Script, whatever else it holds
// (a .wasm beside the sources): `moat build` checks and prepares an
// interpreted plugin's sources, which its language says it has. Its
// manifest must name an interpreted language.
func OpenScript(dir string) (*Bundle, error) {
	mf, raw, mpath, err := readManifest(dir)
	if err != nil {
		return nil, err
	}
	if mf == nil {
		return nil, fmt.Errorf("%s: no %s", dir, policy.ManifestFile)
	}
	if _, ok := languages.ScriptLanguage(mf); !ok {
		return nil, fmt.Errorf("%s: language %q is not interpreted", mpath, mf.Language)
	}
	return openScript(dir, mf, raw)
}

// KindOf is the one decision of a plugin's kind from its manifest (nil
// for a bare module) and whether it ships a module of its own (a .wasm in
// its directory or archive; stored bytes that are a module).
func KindOf(mf *policy.Manifest, hasModule bool) Kind {
	return kindOf(mf, func() bool { return hasModule })
}

// kindOf is KindOf, hasModule asked only when it decides.
func kindOf(mf *policy.Manifest, hasModule func() bool) Kind {
	switch {
	case mf == nil:
		return Wasm
	case mf.Kind == policy.KindNative:
		return Native
	}
	if _, ok := languages.ScriptLanguage(mf); ok && !hasModule() {
		return Script
	}
	return Wasm
}

// IsActionPlugin reports whether the directory at path holds a plugin
// that only serves actions (Script or Native): one a WASI command's
// --dir, --file and arguments after -- do not apply to.
func IsActionPlugin(path string) bool {
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		return false
	}
	mf, _, _, err := readManifest(path)
	if err != nil || mf == nil {
		return false
	}
	k := kindOf(mf, func() bool { w, _ := filepath.Glob(filepath.Join(path, "*.wasm")); return len(w) > 0 })
	return k == Script || k == Native
}

func openWasm(path string, st fs.FileInfo, mf *policy.Manifest, raw []byte, mpath string) (*Bundle, error) {
	b := &Bundle{Kind: Wasm}
	dir := path
	if !st.IsDir() {
		dir = filepath.Dir(path)
	}
	if mf != nil {
		file := mf.Module
		if file == "" {
			file = mf.Name + ".wasm"
		}
		if st.IsDir() || filepath.Base(path) == file {
			b.Manifest, b.ManifestBytes, b.ManifestPath = mf, raw, mpath
			b.Path, b.Name = filepath.Join(dir, file), mf.Name
		}
	}
	if b.Path == "" {
		var err error
		if st.IsDir() {
			if b.Path, err = findWasm(path); err != nil {
				return nil, err
			}
			b.Name = SanitizeName(dirName(path))
		} else {
			b.Path = path
			b.Name = SanitizeName(strings.TrimSuffix(filepath.Base(b.Path), filepath.Ext(b.Path)))
		}
	}
	b.Dir = filepath.Dir(b.Path)
	var err error
	if b.Signed, err = plugintree.ReadFile(b.Dir, filepath.Base(b.Path)); err != nil {
		hint := ""
		if errors.Is(err, fs.ErrNotExist) && b.Manifest != nil {
			hint = fmt.Sprintf(" (named by %s; build the module first: moat build %s)", b.ManifestPath, filepath.Dir(b.ManifestPath))
		}
		return nil, fmt.Errorf("module %s: %w%s", b.Path, unwrapPathError(err), hint)
	}
	if err := b.modulePages(); err != nil {
		return nil, fmt.Errorf("module %s: %w", b.Path, err)
	}
	b.SignaturePath = policy.SignatureFile(b.Path)
	if sig, err := plugintree.ReadFile(filepath.Dir(b.SignaturePath), filepath.Base(b.SignaturePath)); err == nil {
		b.Signature = sig
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("signature %s: %w", b.SignaturePath, unwrapPathError(err))
	}
	return b, nil
}

// openScript reads an interpreted plugin's directory: its sources (the
// files with its language's extensions, at the top of dir; the entry point
// main<ext>), packed as its "module", its signature NAME.minisig beside
// moat.yaml.
func openScript(dir string, mf *policy.Manifest, raw []byte) (*Bundle, error) {
	l, _ := languages.ScriptLanguage(mf)
	exts := l.Info().Extensions
	pages := mf.PageFiles()
	files := map[string][]byte{}
	err := plugintree.Walk(dir, plugintree.Options{Flat: true, MaxBytes: languages.MaxPluginSourceBytes}, func(e plugintree.Entry) error {
		if e.Info.IsDir() || !slices.Contains(exts, filepath.Ext(e.Rel)) && !slices.Contains(pages, e.Rel) {
			return nil
		}
		b, err := e.Read()
		if err != nil {
			return err
		}
		files[e.Rel] = b
		return nil
	})
	if plugintree.IsError(err) {
		return nil, err // it names the file
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	b, err := scriptOf(mf, raw, l, files)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	b.Dir, b.Path, b.ManifestPath = dir, dir, filepath.Join(dir, policy.ManifestFile)
	b.SignaturePath = filepath.Join(dir, mf.Name+".minisig")
	if b.Signature, err = plugintree.ReadFile(dir, mf.Name+".minisig"); errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return b, err
}

// scriptOf is a Script of language l whose files (base name → content)
// hold its sources.
func scriptOf(mf *policy.Manifest, raw []byte, l languages.Language, files map[string][]byte) (*Bundle, error) {
	src, err := languages.PluginSource(l, files)
	if err != nil {
		return nil, err
	}
	if err := checkPageFiles(mf, files); err != nil {
		return nil, err
	}
	src = withPageFiles(mf, src, files)
	b := &Bundle{Name: mf.Name, Kind: Script, Manifest: mf, ManifestBytes: raw, Language: l, src: src,
		Signed: languages.PackSources(src), Files: map[string][]byte{}}
	for _, f := range src.Files {
		b.Files[f.Name] = f.Content
	}
	return b, nil
}

// withPageFiles adds the pages' files to a Script's sources: they are
// signed and stored with them (a page is the plugin's as much as its code
// is), and what the signature covers is the pack of the sources the
// host gets (host.Script.Source), so they are in /src beside the code,
// where the interpreter ignores them.
func withPageFiles(mf *policy.Manifest, src languages.Source, files map[string][]byte) languages.Source {
	for _, name := range mf.PageFiles() {
		if c, ok := files[name]; ok && !slices.ContainsFunc(src.Files, func(f languages.File) bool { return f.Name == name }) {
			src.Files = append(slices.Clip(src.Files), languages.File{Name: name, Content: c})
		}
	}
	slices.SortFunc(src.Files, func(a, b languages.File) int { return strings.Compare(a.Name, b.Name) })
	return src
}

// openNative reads a native plugin's directory: every regular file of it
// but its signature, packed (nativeSource) as moat serve packs
// the same directory uploaded as an archive, so the digest and signature
// are the same on both. It refuses what a worker running as another uid
// could not read, and subdirectories (an upload is flattened), naming the
// fix.
func openNative(dir string, mf *policy.Manifest, raw []byte) (*Bundle, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, err
	}
	unreadable := func(p string, mode fs.FileMode) error {
		return fmt.Errorf("%s is not readable by other users (mode %v), and the plugin's workers run as a uid of their own: chmod -R a+rX %s", p, mode.Perm(), abs)
	}
	if fi.Mode().Perm()&0o005 != 0o005 {
		return nil, unreadable(abs, fi.Mode())
	}
	files := map[string][]byte{}
	err = plugintree.Walk(abs, plugintree.Options{Flat: true, MaxFiles: maxNativeFiles, MaxBytes: maxNativeBytes}, func(e plugintree.Entry) error {
		switch {
		case e.Info.IsDir():
			return fmt.Errorf("%s is a directory: a native plugin is one flat directory (moat serve flattens an uploaded archive), so keep its files beside moat.yaml and install libraries as system packages", e.Path)
		case e.Info.Mode().Perm()&0o004 == 0:
			return unreadable(e.Path, e.Info.Mode())
		}
		b, err := e.Read()
		if err != nil {
			return err
		}
		files[e.Rel] = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := checkPageFiles(mf, files); err != nil {
		return nil, err
	}
	b := nativeOf(mf, raw, files)
	b.Dir, b.Path, b.ManifestPath = abs, abs, filepath.Join(abs, policy.ManifestFile)
	b.SignaturePath = filepath.Join(abs, mf.Name+".minisig")
	if b.Signature, err = plugintree.ReadFile(abs, mf.Name+".minisig"); errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// nativeOf is a Native plugin of files, its flat directory (its signature
// among them is left out of Files and Signed, and kept as Signature).
func nativeOf(mf *policy.Manifest, raw []byte, files map[string][]byte) *Bundle {
	src := nativeSource(mf.Name, files)
	b := &Bundle{Name: mf.Name, Kind: Native, Manifest: mf, ManifestBytes: raw, Signed: languages.PackSources(src),
		Signature: files[mf.Name+".minisig"], Files: map[string][]byte{}}
	for _, f := range src.Files {
		b.Files[f.Name] = f.Content
	}
	return b
}

// nativeSource is a native plugin's files as a languages.Source, for
// languages.PackSources: every file of its flat directory (base name →
// content, as a directory is read or an upload unpacked) but its signature
// (NAME.minisig, whose content cannot be part of what it signs), in name
// order. Its pack is what the plugin's digest is of and what `moat sign`
// signs, on the CLI and the server alike.
func nativeSource(name string, files map[string][]byte) languages.Source {
	var src languages.Source
	for n, b := range files {
		if n == name+".minisig" {
			continue
		}
		src.Files = append(src.Files, languages.File{Name: n, Content: b})
	}
	slices.SortFunc(src.Files, func(a, b languages.File) int { return strings.Compare(a.Name, b.Name) })
	return src
}

// FromArchive finds the plugin among an uploaded archive's files (base
// name → content, as moat serve unpacks it) the way Open finds it in a
// directory: kind: native, an interpreted plugin's sources (when no .wasm
// is among them), or the module moat.yaml names, or the only .wasm file.
// Without a manifest the name comes from the module's file name.
func FromArchive(files map[string][]byte) (*Bundle, error) {
	raw := files[policy.ManifestFile]
	if raw == nil {
		file := ""
		for name := range files {
			if strings.HasSuffix(name, ".wasm") {
				if file != "" {
					return nil, fmt.Errorf("it holds several .wasm files and no %s to say which is the module", policy.ManifestFile)
				}
				file = name
			}
		}
		return moduleFrom(files, file, &Bundle{Kind: Wasm, Name: SanitizeName(strings.TrimSuffix(file, ".wasm"))})
	}
	mf, err := policy.ParseManifest(policy.ManifestFile, raw)
	if err != nil {
		return nil, err
	}
	hasModule := func() bool {
		for n := range files {
			if strings.HasSuffix(n, ".wasm") {
				return true
			}
		}
		return false
	}
	switch kindOf(mf, hasModule) {
	case Native:
		if err := checkPageFiles(mf, files); err != nil {
			return nil, err
		}
		return nativeOf(mf, raw, files), nil
	case Script:
		l, _ := languages.ScriptLanguage(mf)
		b, err := scriptOf(mf, raw, l, files)
		if err != nil {
			return nil, fmt.Errorf("%s plugin: %w", mf.Language, err)
		}
		b.Signature = files[mf.Name+".minisig"]
		return b, nil
	}
	file := mf.Module
	if file == "" {
		file = mf.Name + ".wasm"
	}
	return moduleFrom(files, file, &Bundle{Kind: Wasm, Name: mf.Name, Manifest: mf, ManifestBytes: raw})
}

// checkPageFiles checks that the pages' files are among the plugin's
// (policy.Manifest.CheckPageFiles).
func checkPageFiles(mf *policy.Manifest, files map[string][]byte) error {
	return mf.CheckPageFiles(func(name string) bool { _, ok := files[name]; return ok })
}

// modulePages reads a compiled module's pages' files from its
// PageSection into b.Files (ReadPages) and checks that every page's file
// is there: its digest and signature are of the .wasm alone, so its pages
// are in it, put there by `moat build`. The error names that fix.
func (b *Bundle) modulePages() error {
	if b.Manifest == nil || len(b.Manifest.Pages) == 0 {
		return nil // a section there is served by no page; the host ignores it
	}
	files, err := ReadPages(b.Signed, b.Manifest)
	if err != nil {
		return err
	}
	if files == nil {
		return fmt.Errorf("%s: pages (%s): the module holds no pages' files (its %s section); a compiled module carries them in its .wasm, signed with it: build it with moat build, which puts them there",
			b.Manifest.File, b.Manifest.Pages[0].Name, PageSection)
	}
	if err := checkPageFiles(b.Manifest, files); err != nil {
		return fmt.Errorf("%w (in the module's %s section: build it again with moat build)", err, PageSection)
	}
	b.Files = files
	return nil
}

// moduleFrom completes b, a module, with file and its signature from files.
func moduleFrom(files map[string][]byte, file string, b *Bundle) (*Bundle, error) {
	b.Path = filepath.Base(file)
	b.Signed = files[b.Path]
	if b.Signed == nil {
		return nil, fmt.Errorf("no module file %q; build the plugin before packing it", file)
	}
	if err := b.modulePages(); err != nil {
		return nil, fmt.Errorf("module %s: %w", file, err)
	}
	b.SignaturePath = policy.SignatureFile(b.Path)
	b.Signature = files[b.SignaturePath]
	return b, nil
}

// FromStored is a version as moat serve's store keeps it: its manifest
// (nil for a bare module), the bytes it stored (Signed) and its signature.
// A Script's or a Native plugin's stored bytes are the pack of its files;
// unpack reads them back (moat serve's archive reader, under its limits).
// A Script's stored bytes that are a module (a plugin that shipped one)
// make it a Wasm plugin, as its directory would.
func FromStored(name string, manifest, signed, signature []byte, unpack func([]byte) (map[string][]byte, error)) (*Bundle, error) {
	b := &Bundle{Name: name, Kind: Wasm, ManifestBytes: manifest, Signed: signed, Signature: signature}
	if manifest == nil {
		return b, nil
	}
	mf, err := policy.ParseManifest(policy.ManifestFile, manifest)
	if err != nil {
		return nil, err
	}
	b.Manifest = mf
	if b.Kind = kindOf(mf, func() bool { return isModule(signed) }); b.Kind == Wasm {
		if err := b.modulePages(); err != nil {
			return nil, &StoredError{Err: err, Unpacked: true}
		}
		return b, nil
	}
	files, err := unpack(signed)
	if err != nil {
		return nil, &StoredError{Err: err}
	}
	if err := checkPageFiles(mf, files); err != nil {
		return nil, &StoredError{Err: err, Unpacked: true}
	}
	if b.Kind == Native {
		b.Files = files
		return b, nil
	}
	b.Language, _ = languages.ScriptLanguage(mf)
	if b.src, err = languages.PluginSource(b.Language, files); err != nil {
		return nil, &StoredError{Err: err, Unpacked: true}
	}
	b.src = withPageFiles(mf, b.src, files)
	b.Files = files
	return b, nil
}

// StoredError is a stored version whose bytes do not hold its files: they
// do not unpack, or (Unpacked) hold no entry point or not its pages' files
// (a compiled module holds none).
type StoredError struct {
	Err      error
	Unpacked bool
}

func (e *StoredError) Error() string { return "stored sources: " + e.Err.Error() }
func (e *StoredError) Unwrap() error { return e.Err }

// isModule reports whether b is a WebAssembly module (by its magic): a
// Script's stored bytes are its sources' pack unless it shipped a module.
func isModule(b []byte) bool { return len(b) >= 4 && string(b[:4]) == "\x00asm" }

// ScriptBuilder builds a Script's sources into its interpreter's module
// and the host.Script that serves its actions. srcDir is where the build
// writes the files mounted at /src; the caller keeps it while the plugin
// is loaded. moat serve takes one in its Config, as it takes an Executor.
type ScriptBuilder interface {
	BuildScript(ctx context.Context, l languages.Language, src languages.Source, srcDir string) (*languages.ScriptPlugin, error)
}

// Builder is the ScriptBuilder of the languages registered in package
// languages (languages.BuildScriptPlugin), with the toolchains in
// ToolchainDir ("" is toolchains.Dir() at each build).
type Builder struct{ ToolchainDir string }

var _ ScriptBuilder = Builder{}

// BuildScript implements ScriptBuilder.
func (bd Builder) BuildScript(ctx context.Context, l languages.Language, src languages.Source, srcDir string) (*languages.ScriptPlugin, error) {
	dir := bd.ToolchainDir
	if dir == "" {
		dir = toolchains.Dir()
	}
	return languages.BuildScriptPlugin(ctx, l, src, srcDir, dir)
}

// LoadEnv is where a bundle is loaded: what a Script is built with and
// where its files go, and where a Native plugin's files lie.
type LoadEnv struct {
	// Scripts builds a Script; nil is Builder{}.
	Scripts ScriptBuilder
	// ScriptDir is where a Script's build writes its /src.
	ScriptDir string
	// NativeDir is the directory of a Native plugin's files, readable by
	// its workers; "" is the directory Open read.
	NativeDir string
}

// LoadOptions returns the module bytes and the options host.Host.Load
// takes for b: its name, manifest and signature, and for a Script the
// interpreter's module and its host.Script (built now), for a Native
// plugin its host.Native (nil module bytes). The caller adds what is its
// own (Org, Config, Limits, the Native's Env and ReadOnly, ...).
func (b *Bundle) LoadOptions(ctx context.Context, env LoadEnv) ([]byte, host.LoadOptions, error) {
	opts := host.LoadOptions{Name: b.Name, Manifest: b.Manifest, ManifestBytes: b.ManifestBytes, Signature: b.Signature}
	switch b.Kind {
	case Script:
		s := env.Scripts
		if s == nil {
			s = Builder{}
		}
		sp, err := s.BuildScript(ctx, b.Language, b.src, env.ScriptDir)
		if err != nil {
			return nil, opts, err
		}
		opts.Script = sp.Script
		return sp.WASM, opts, nil
	case Native:
		dir := env.NativeDir
		if dir == "" {
			dir = b.Dir
		}
		opts.Native = &host.Native{Dir: dir, Source: b.Signed}
		return nil, opts, nil
	}
	return b.Signed, opts, nil
}

// KernelGrants is the kernel layer (Landlock's ports and paths) that a
// host running b under p needs for b's effective grants
// (policy.Profile.KernelGrants): `moat run` confines itself to it. It is
// the one path from a plugin's grants to the kernel layer; moat serve,
// which learns its plugins after it confines itself, takes
// HostKernelGrants of its profiles instead.
func (b *Bundle) KernelGrants(p *policy.Profile) policy.KernelGrants {
	return p.KernelGrants(b.Manifest)
}

// HostKernelGrants is the kernel layer of a host that loads plugins after
// it confines itself (moat serve): every grant the profiles could give
// any plugin (policy.HostKernelGrants).
func HostKernelGrants(profiles ...*policy.Profile) policy.KernelGrants {
	return policy.HostKernelGrants(profiles...)
}

func readManifest(dir string) (*policy.Manifest, []byte, string, error) {
	p := filepath.Join(dir, policy.ManifestFile)
	raw, err := plugintree.ReadFile(dir, policy.ManifestFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, "", nil
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("manifest %s: %w", p, unwrapPathError(err))
	}
	mf, err := policy.ParseManifest(p, raw)
	if err != nil {
		return nil, nil, "", err
	}
	return mf, raw, p, nil
}

func dirName(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return filepath.Base(abs)
	}
	return filepath.Base(filepath.Clean(path))
}

func findWasm(dir string) (string, error) {
	base := dirName(dir)
	file := filepath.Join(dir, base+".wasm")
	if _, err := os.Stat(file); err == nil {
		return file, nil
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "*.wasm"))
	switch len(matches) {
	case 0:
		return "", fmt.Errorf("module %s: the directory holds no .wasm file and no %s; build the plugin first: `moat new NAME --lang LANG` makes one with its %s, and `moat build %s` builds it", dir, policy.ManifestFile, policy.ManifestFile, dir)
	case 1:
		return matches[0], nil
	default:
		return "", fmt.Errorf("module %s: the directory holds %d .wasm files and none is named %s.wasm; name the file to run, or add a %s", dir, len(matches), base, policy.ManifestFile)
	}
}

// SanitizeName turns a file name into a valid module name: lower case,
// other characters replaced by '-'.
func SanitizeName(s string) string {
	var b strings.Builder
	for i, r := range strings.ToLower(s) {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || i > 0 && strings.ContainsRune("._-", r)
		if !ok {
			r = '-'
			if i == 0 {
				r = 'm'
			}
		}
		b.WriteRune(r)
	}
	n := b.String()
	if len(n) > 64 {
		n = n[:64]
	}
	if n == "" {
		n = "module"
	}
	return n
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
