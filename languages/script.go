package languages

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/driver"
	"github.com/moat-sandbox/moat/policy"
)

// ScriptPlugin is an interpreted plugin ready to load: the interpreter's
// WASM and the host.Script that makes it serve the manifest's actions.
type ScriptPlugin struct {
	WASM   []byte
	Script *host.Script
}

// ScriptLanguage returns the interpreted language mf names (one whose path
// is PathInterpreted): the plugin is then a script its interpreter runs,
// unless it ships a module of its own (a .wasm in the directory, the
// archive or the stored bytes): bundle.KindOf, the one decision of a
// plugin's kind, asks both.
func ScriptLanguage(mf *policy.Manifest) (Language, bool) {
	if mf == nil || mf.Language == "" {
		return nil, false
	}
	l, err := Lookup(mf.Language)
	if err != nil || l.Info().Path != PathInterpreted {
		return nil, false
	}
	return l, true
}

// PluginSource picks a plugin's source among files (base name → content):
// those with the language's extensions. The entry point is main with the
// language's extension, as in the plugin's directory.
func PluginSource(l Language, files map[string][]byte) (Source, error) {
	exts := l.Info().Extensions
	var src Source
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if !slices.Contains(exts, filepath.Ext(name)) {
			continue
		}
		src.Files = append(src.Files, File{Name: name, Content: files[name]})
		if strings.TrimSuffix(name, filepath.Ext(name)) == "main" {
			src.Main = name
		}
	}
	if src.Main == "" {
		return Source{}, fmt.Errorf("no main%s: an interpreted plugin's entry point is main with its language's extension", exts[0])
	}
	return src, nil
}

// PackSources is the canonical form of a plugin's sources: a tar of its
// files in name order with nothing but names, sizes and a fixed mode, so
// the same sources are the same bytes. It is what an interpreted or
// native plugin's signature covers (in place of a module's bytes) and, in
// moat serve, what its version's digest is of: bundle.Bundle.Signed, on
// every path a plugin is read by.
func PackSources(src Source) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := slices.Clone(src.Files)
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	for _, f := range files {
		_ = tw.WriteHeader(&tar.Header{Name: f.Name, Mode: 0o644, Size: int64(len(f.Content)), Typeflag: tar.TypeReg, Format: tar.FormatUSTAR})
		_, _ = tw.Write(f.Content)
	}
	_ = tw.Close()
	return buf.Bytes()
}

// BuildScriptPlugin builds an interpreted plugin's source for l. Its files
// (the sources and the language's SDK) go into a directory under srcRoot
// named by their content, mounted read-only at /src: loads of the same
// plugin share it, a new version (or a new SDK) gets its own, and one
// being served is never rewritten under it. The caller keeps srcRoot for
// as long as the plugin is loaded. Only interpreted languages have script
// plugins; a compiled language's plugin is a module (`moat build`).
func BuildScriptPlugin(ctx context.Context, l Language, src Source, srcRoot, toolchainDir string) (*ScriptPlugin, error) {
	in := l.Info()
	if in.Path != PathInterpreted {
		return nil, fmt.Errorf("%s plugins are compiled to a module: build it with `moat build` and load the .wasm", in.Name)
	}
	if vs := ValidateCommon(src, ValidationProfile{}); len(vs) > 0 {
		return nil, fmt.Errorf("%s plugin: %v", in.Name, vs[0])
	}
	work, err := os.MkdirTemp("", "moat-plugin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	a, err := l.Build(ctx, BuildEnv{WorkDir: work, ToolchainDir: toolchainDir}, src)
	if err != nil {
		return nil, err
	}
	if a.Kind != ArtifactInterpreted || len(a.WASM) == 0 {
		return nil, fmt.Errorf("%s: the build made no interpreter artifact (kind %s)", in.Name, a.Kind)
	}
	dir, err := writeSourceDir(srcRoot, a.Files)
	if err != nil {
		return nil, fmt.Errorf("%s plugin: %w", in.Name, err)
	}
	resident := false
	if d, ok := l.(ResidentDetector); ok {
		resident = d.Resident(src)
	}
	sc := &host.Script{Args: a.Args, Env: a.Env, Source: PackSources(src), Mounts: a.RunMounts(dir), Resident: resident}
	// What /src holds is a.Files, whatever the directory's name: an image
	// of the plugin is named by them (host.Mount.Content).
	for i := range sc.Mounts {
		if sc.Mounts[i].HostDir == dir {
			sc.Mounts[i].Content = filesDigest(a.Files)
		}
	}
	if p, ok := l.(InterpreterProvider); ok {
		if !resident {
			return nil, fmt.Errorf("%s plugin: %s registers no action handler; a %s plugin serves its actions from handlers, one instance many calls: %s",
				in.Name, src.Entry().Name, in.Name, p.HandlerHint())
		}
		sc.Interpreter = p.ScriptInterpreter()
	}
	if sn, ok := l.(Snapshotter); ok && resident {
		sc.Snapshot = sn.ResidentSnapshot(a, src)
	}
	return &ScriptPlugin{WASM: a.WASM, Script: sc}, nil
}

// InterpreterProvider is implemented by the interpreted languages whose
// interpreter the host cannot run as a WASI command (Ruby's is a
// wit-bindgen reactor): ScriptInterpreter makes and starts their plugins'
// instances (driver.Interpreter), and the plugins must be resident, since
// that is the one way the host serves them. HandlerHint shows how a
// script registers a handler, for the error that refuses one that does
// not.
type InterpreterProvider interface {
	ScriptInterpreter() driver.Interpreter
	HandlerHint() string
}

// ResidentDetector is implemented by the interpreted languages whose
// plugins may be resident (host.Script.Resident): Resident says whether
// the plugin's entry file registers its actions' handlers (moat.action),
// so that its interpreter starts once and serves many calls. A script
// that does not is run once per call, its action in $MOAT_ACTION.
type ResidentDetector interface {
	Resident(src Source) bool
}

// writeSourceDir writes files into root/<their digest>, unless a complete
// copy is there already: written to a temporary name and renamed, so the
// directory is whole or absent.
func writeSourceDir(root string, files []File) (string, error) {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%d:%s%d:", len(f.Name), f.Name, len(f.Content))
		h.Write(f.Content)
	}
	dir := filepath.Join(root, hex.EncodeToString(h.Sum(nil))[:32])
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(root, ".tmp-")
	if err != nil {
		return "", err
	}
	for _, f := range files {
		p := filepath.Join(tmp, filepath.FromSlash(f.Name))
		err := os.MkdirAll(filepath.Dir(p), 0o755)
		if err == nil {
			err = os.WriteFile(p, f.Content, 0o644)
		}
		if err != nil {
			os.RemoveAll(tmp)
			return "", err
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
			return dir, nil // another load wrote the same files first
		}
		return "", err
	}
	return dir, nil
}

// filesDigest names files by their names and contents, in name order.
func filesDigest(files []File) string {
	fs := slices.Clone(files)
	slices.SortFunc(fs, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	h := sha256.New()
	for _, f := range fs {
		fmt.Fprintf(h, "%d:%s%d:", len(f.Name), f.Name, len(f.Content))
		h.Write(f.Content)
	}
	return hex.EncodeToString(h.Sum(nil))
}
