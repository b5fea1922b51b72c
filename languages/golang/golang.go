// Package golang is the Go language: the stock Go toolchain builds a WASI
// command (GOOS=wasip1 GOARCH=wasm), run by wazero. Import it for its side
// effect of registering "go".
//
// A submission is one main package (its files, and a go.mod if it brings
// one; there is no module proxy, so only the standard library can be
// imported).
//
// Validation profile rules: "import:PATH" refuses a submission importing
// PATH or a package under it, e.g. "import:net" (also refuses net/http),
// "import:os/exec", "import:unsafe".
//
// # The build cache of the Go toolchain
//
// `go build` needs a writable GOCACHE, and building the standard library
// for wasip1 from nothing takes about 20 s of CPU, against 0.3 s for a
// hello world once the library is cached. A GOCACHE shared read-write by
// every job would be fast but poisonable: a submission runs code in the
// compiler's process only through the compiler, yet a confined job that
// can write the shared cache could plant an object file that later builds
// of other users link. So the cache is split by trust:
//
//   - the seed: a GOCACHE per toolchain version in the language's
//     MachineStateDir (shared by every data directory of the machine:
//     moat's is beside the toolchains, toolchains.StateDir), else its
//     StateDir, filled once by moat itself building a fixed program that
//     imports the commonly used standard packages (under the same
//     confinement), then made read-only to jobs (owned by root, 0644, when
//     moat is root);
//   - per build: a fresh GOCACHE whose entries are hard links to the
//     seed's files (copies when moat is not root, because the job then has
//     moat's uid and could write through a link). New entries land in the
//     job's own directories and are thrown away with them.
//
// A hello world then builds in about 0.5 s; a standard package the seed
// lacks is compiled in the job, costing that job alone.
package golang

import (
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moat-sandbox/moat/guests"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/internal/plugintree"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/toolchains"
	"golang.org/x/mod/modfile"
)

// registered: Info may run go for its version only after init (see
// clangwasm.Compiler.Registered for why).
var registered atomic.Bool

func init() {
	languages.Register(Go)
	registered.Store(true)
}

// Go is the registered language.
var Go = &Language{}

// Language compiles Go.
type Language struct {
	seedMu sync.Mutex
}

var buildFlags = []string{"-trimpath", "-buildvcs=false", "-ldflags=-s -w"}

// BuildID is part of the build cache key.
func (*Language) BuildID() string { return strings.Join(buildFlags, " ") + " wasip1/wasm" }

func version() string {
	if !registered.Load() {
		return ""
	}
	_, v, err := toolchains.GoRoot()
	if err != nil {
		return "unavailable"
	}
	return strings.TrimPrefix(v, "go")
}

// Info describes Go.
func (*Language) Info() languages.Info {
	return languages.Info{
		Name: "go", Aliases: []string{"golang"}, Version: version(),
		Path: languages.PathCompiled, Extensions: []string{".go"},
		Toolchain: "go " + version() + " (GOOS=wasip1 GOARCH=wasm)",
	}
}

// Available reports what is missing.
func (*Language) Available() error {
	_, _, err := toolchains.GoRoot()
	return err
}

// Validate adds the "import:" checks. It parses only the import clauses;
// a file that does not parse is left to the compiler, whose message is
// better.
func (*Language) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	vs := languages.ValidateCommon(src, p)
	var deny []string
	for _, d := range p.Deny {
		if t, ok := strings.CutPrefix(d, "import:"); ok && t != "" {
			deny = append(deny, t)
		}
	}
	hasGo := false
	for _, f := range src.Files {
		if !strings.HasSuffix(f.Name, ".go") {
			continue
		}
		hasGo = true
		if len(deny) == 0 {
			continue
		}
		fset := token.NewFileSet()
		af, err := parser.ParseFile(fset, f.Name, f.Content, parser.ImportsOnly)
		if err != nil {
			continue
		}
		for _, im := range af.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			for _, d := range deny {
				if path == d || strings.HasPrefix(path, d+"/") {
					vs = append(vs, languages.Violation{Rule: languages.RuleDeny, File: f.Name, Line: fset.Position(im.Pos()).Line,
						Message: fmt.Sprintf("import %q is denied by the validation profile (import:%s): remove it", path, d)})
				}
			}
		}
	}
	if !hasGo {
		vs = append(vs, languages.Violation{Rule: languages.RuleFiles, File: src.Entry().Name, Message: "no .go file: name the entry file main.go"})
	}
	return vs
}

// Build compiles the submission's main package into a WASI command.
func (l *Language) Build(ctx context.Context, env languages.BuildEnv, src languages.Source) (*languages.Artifact, error) {
	root, ver, err := toolchains.GoRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(env.WorkDir, "src")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := languages.WriteSource(dir, src.Files); err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(src.Files, func(f languages.File) bool { return f.Name == "go.mod" }) {
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module main\n\ngo "+goLine(ver)+"\n"), 0o644); err != nil {
			return nil, err
		}
	}
	wasm, log, err := l.goBuild(ctx, env, root, ver, "src", nil, nil)
	if err != nil {
		return nil, err
	}
	return &languages.Artifact{Kind: languages.ArtifactWASM, WASM: wasm, BuildLog: log}, nil
}

// BuildPlugin builds the main package in dir with -buildmode=c-shared: a
// reactor whose //go:wasmexport functions are the plugin (see guests/go).
//
// The compiler never reads the plugin where it lies: the plugin's module
// (the nearest go.mod above dir, unless that is moat's own module, as for
// the examples in the moat tree: then dir alone, under a go.mod of its
// own) is copied into the work dir, the Go SDK this binary carries is
// written beside it as a local module (package guests), and the copy's
// go.mod replaces github.com/moat-sandbox/moat with it. So a plugin
// builds with no network and no moat checkout, from a directory the
// compiler's uid could not read, against the ABI of the moat that builds
// it, and the same source gives the same bytes wherever it lies.
// There is no module proxy: other imports must be in the standard library
// or in the plugin's module.
func (l *Language) BuildPlugin(ctx context.Context, env languages.BuildEnv, dir string) ([]byte, error) {
	root, ver, err := toolchains.GoRoot()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	pkg, err := stagePlugin(abs, env.WorkDir)
	if err != nil {
		return nil, err
	}
	stageDone("stage", began)
	wasm, _, err := l.goBuild(ctx, env, root, ver, pkg, []string{"-buildmode=c-shared"}, nil)
	return wasm, err
}

// stageDone, when set (by the tests), hears how long each stage of a
// build took: the numbers behind the rebuild goal (issue 35).
var stageTimer func(stage string, d time.Duration)

func stageDone(stage string, began time.Time) {
	if f := stageTimer; f != nil {
		f(stage, time.Since(began))
	}
}

// stagePlugin copies the plugin in dir into work/plugin and the embedded
// Go SDK into work/moat-sdk, and returns the package's directory relative
// to work.
func stagePlugin(dir, work string) (string, error) {
	const sdkDir = "moat-sdk"
	if err := guests.Write(filepath.Join(work, sdkDir), "go"); err != nil {
		return "", fmt.Errorf("go: %w", err)
	}
	plugin := filepath.Join(work, "plugin")
	modRoot, data := "", []byte(nil)
	for d := dir; ; d = filepath.Dir(d) {
		// Read by the plugin tree's rule: a go.mod that is a link or a
		// FIFO (which would block) is refused, not followed.
		b, err := plugintree.ReadFile(d, "go.mod")
		if plugintree.IsError(err) {
			return "", err
		}
		if err == nil {
			if modfile.ModulePath(b) != guests.GoModulePath {
				modRoot, data = d, b
			}
			break
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	rel := "."
	var f *modfile.File
	if modRoot == "" {
		// No module of its own (or moat's, for an example in the tree):
		// the directory alone is the plugin.
		if err := languages.CopyPluginSource(dir, plugin); err != nil {
			return "", err
		}
		f = &modfile.File{}
		if err := f.AddModuleStmt("moat.local/plugin"); err != nil {
			return "", err
		}
		if err := f.AddGoStmt(guests.GoLanguageVersion); err != nil {
			return "", err
		}
	} else {
		if err := languages.CopyPluginSource(modRoot, plugin); err != nil {
			return "", err
		}
		rel, _ = filepath.Rel(modRoot, dir)
		var err error
		if f, err = modfile.Parse(filepath.Join(modRoot, "go.mod"), data, nil); err != nil {
			return "", fmt.Errorf("go: %w", err)
		}
	}
	for _, r := range slices.Clone(f.Replace) {
		if r.Old.Path == guests.GoModulePath {
			if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return "", err
			}
		}
	}
	if !slices.ContainsFunc(f.Require, func(r *modfile.Require) bool { return r.Mod.Path == guests.GoModulePath }) {
		if err := f.AddRequire(guests.GoModulePath, "v0.0.0"); err != nil {
			return "", err
		}
	}
	if err := f.AddReplace(guests.GoModulePath, "", "../"+sdkDir, ""); err != nil {
		return "", err
	}
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return "", fmt.Errorf("go: writing the plugin's go.mod: %w", err)
	}
	if err := os.WriteFile(filepath.Join(plugin, "go.mod"), out, 0o644); err != nil {
		return "", err
	}
	return filepath.Join("plugin", rel), nil
}

// goBuild runs `go build` on pkgDir (relative to the work dir, or
// absolute) into WorkDir/out.wasm, with a job GOCACHE made from the seed
// and, for a plugin (-buildmode=c-shared in extra), the SDK layer.
func (l *Language) goBuild(ctx context.Context, env languages.BuildEnv, root, ver, pkgDir string, extra, readOnly []string) (_ []byte, _ string, err error) {
	plugin := slices.Contains(extra, "-buildmode=c-shared")
	began := time.Now()
	var layers []string
	if plugin {
		layers, err = l.sdkLayers(ctx, env, root, ver)
	} else {
		var seed string
		seed, err = l.seed(ctx, env, root, ver)
		layers = []string{seed}
	}
	if err != nil {
		return nil, "", fmt.Errorf("go: preparing the standard library cache: %w", err)
	}
	stageDone("seed", began)
	began = time.Now()
	cache, err := os.MkdirTemp("", "moat-gocache-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(cache)
	for _, layer := range layers {
		if err := linkTree(layer, cache); err != nil {
			return nil, "", fmt.Errorf("go: job cache: %w", err)
		}
	}
	stageDone("job-cache", began)
	began = time.Now()
	args := append([]string{filepath.Join(root, "bin", "go"), "build", "-C", pkgDir}, buildFlags...)
	args = append(args, extra...)
	args = append(args, "-o", filepath.Join(env.WorkDir, "out.wasm"), ".")
	res, err := languages.RunTool(ctx, env, languages.Tool{
		Command:   args,
		Env:       goEnv(env, root, cache),
		ExtraExec: []string{filepath.Join(root, "pkg", "tool")},
		ReadOnly:  append([]string{root}, readOnly...),
		ReadWrite: []string{cache},
	})
	if err != nil {
		return nil, "", err
	}
	if err := languages.CompileFailure("go", res); err != nil {
		return nil, "", err
	}
	stageDone("go-build", began)
	if stageTimer != nil {
		stageTimer("go-build-cpu", res.CPU)
		stageTimer("go-build-wall-in-job", res.Wall)
	}
	wasm, err := languages.ReadOutput(env.WorkDir, "out.wasm")
	if err != nil {
		return nil, "", fmt.Errorf("go: go build succeeded but wrote no module: %w", err)
	}
	return wasm, string(res.Stderr), nil
}

// goEnv is the whole environment of a confined go command: no proxy, no
// network, no toolchain switching, no user configuration.
func goEnv(env languages.BuildEnv, root, cache string) []string {
	return []string{
		"PATH=" + filepath.Join(root, "bin") + ":" + native.DefaultPath,
		"GOROOT=" + root, "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0",
		"GOCACHE=" + cache, "GOPATH=" + filepath.Join(env.WorkDir, "gopath"),
		"GOMODCACHE=" + filepath.Join(env.WorkDir, "gopath", "mod"),
		"GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "GOTELEMETRY=off",
		"GOENV=off", "GOWORK=off", "GO111MODULE=on", "GOMAXPROCS=2",
	}
}

// goLine turns "go1.26.8" into "1.26" for a go.mod go line.
func goLine(ver string) string {
	v := strings.TrimPrefix(ver, "go")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) >= 2 {
		return parts[0] + "." + parts[1]
	}
	return v
}

// warmProgram imports the standard packages most submissions use; the
// seed is the GOCACHE of building it. Changing it changes the seed's name.
const warmProgram = `package main

import (
	"bufio"
	"bytes"
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
)

var _ = []any{bufio.NewReader, bytes.NewReader, heap.Init, json.Marshal, errors.New, math.Sqrt,
	big.NewInt, regexp.MustCompile, sort.Ints, strconv.Itoa, strings.ToUpper, time.Now, unicode.IsDigit}

func main() { fmt.Fprintln(os.Stdout, "warm") }
`

// seedTimeout bounds the one-time standard library build; it is not the
// job's compile limit (the first job on a host would otherwise always
// time out).
const seedTimeout = 10 * time.Minute

// sdkProgram is the plugin whose build fills the SDK layer: it imports
// the SDK, so the layer holds the SDK's packages (abi, guests/go) and the
// standard packages they import beyond the seed's, compiled as a plugin
// is (-buildmode=c-shared).
const sdkProgram = `package main

import moat "github.com/moat-sandbox/moat/guests/go"

func init() { moat.Action("warm", func(in []byte) ([]byte, error) { return in, nil }) }

func main() {}
`

// A cacheLayer is a read-only GOCACHE kept in the machine's state dir and
// built once by moat from a fixed program: the seed (the standard library,
// for commands and plugins), then, over it, the SDK layer (the SDK a
// plugin links). A job's GOCACHE is the layers linked together (linkTree),
// so a plugin's rebuild compiles the plugin's own packages alone, not the
// SDK (4 packages, about 2 s of a 3.5 s build on this machine kind).
type cacheLayer struct {
	name  string             // the directory under the state dir
	base  []string           // the layers below it, linked into its build's cache
	stage func(string) error // writes the program into the work dir's src
	modes [][]string         // go build's extra flags, a build each
}

// seed returns the read-only seed GOCACHE, building it on first use.
func (l *Language) seed(ctx context.Context, env languages.BuildEnv, root, ver string) (string, error) {
	return l.layer(ctx, env, root, ver, cacheLayer{
		name: "gocache-" + ver + "-" + shortHash(warmProgram),
		stage: func(work string) error {
			if err := os.MkdirAll(filepath.Join(work, "src"), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(work, "src", "main.go"), []byte(warmProgram), 0o644); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(work, "src", "go.mod"), []byte("module warm\n\ngo "+goLine(ver)+"\n"), 0o644)
		},
		modes: [][]string{nil, {"-buildmode=c-shared"}},
	})
}

// sdkLayers returns the seed and the SDK layer over it, building either on
// first use. The SDK layer's name holds a hash of the SDK's files, so a
// moat with another SDK builds its own.
func (l *Language) sdkLayers(ctx context.Context, env languages.BuildEnv, root, ver string) ([]string, error) {
	seed, err := l.seed(ctx, env, root, ver)
	if err != nil {
		return nil, err
	}
	files, err := guests.Files("go")
	if err != nil {
		return nil, fmt.Errorf("go: %w", err)
	}
	var sdk strings.Builder
	for _, n := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(&sdk, "%s %d\n%s\n", n, len(files[n]), files[n])
	}
	layer, err := l.layer(ctx, env, root, ver, cacheLayer{
		name: filepath.Base(seed) + "-sdk-" + shortHash(sdkProgram+sdk.String()),
		base: []string{seed},
		stage: func(work string) error {
			prog := filepath.Join(work, "program")
			if err := os.MkdirAll(prog, 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(prog, "main.go"), []byte(sdkProgram), 0o644); err != nil {
				return err
			}
			pkg, err := stagePlugin(prog, work)
			if err != nil {
				return err
			}
			// The layer's build runs in src, as the seed's does.
			return os.Rename(filepath.Join(work, pkg), filepath.Join(work, "src"))
		},
		modes: [][]string{{"-buildmode=c-shared"}},
	})
	if err != nil {
		return nil, err
	}
	return []string{seed, layer}, nil
}

// layer returns the read-only cache layer c, building it on first use:
// its program built (in each of c.modes, confined as a job) into a cache
// linked from c.base, then what the bases hold removed, so the layer
// holds only what the build added.
func (l *Language) layer(ctx context.Context, env languages.BuildEnv, root, ver string, c cacheLayer) (string, error) {
	keep := env.MachineStateDir
	if keep == "" {
		keep = env.StateDir
	}
	if keep == "" {
		return "", errors.New("no state dir to keep the seed in")
	}
	if err := os.MkdirAll(keep, 0o755); err != nil {
		return "", err
	}
	dir := filepath.Join(keep, c.name)
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return dir, nil
	}
	l.seedMu.Lock()
	defer l.seedMu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return dir, nil
	}
	work, err := os.MkdirTemp("", "moat-goseed-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	// The cache is filled inside the seed build's work dir, which the job
	// uid can reach (the state dir, under moat's 0700 data dir, it cannot),
	// then moved into the state dir.
	tmp := filepath.Join(work, "gocache")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return "", err
	}
	for _, b := range c.base {
		if err := linkTree(b, tmp); err != nil {
			return "", err
		}
	}
	if err := c.stage(work); err != nil {
		return "", err
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), seedTimeout)
	defer cancel()
	senv := languages.BuildEnv{WorkDir: work}
	for _, mode := range c.modes {
		args := append([]string{filepath.Join(root, "bin", "go"), "build", "-C", "src"}, buildFlags...)
		args = append(args, mode...)
		args = append(args, "-o", filepath.Join(work, "out.wasm"), ".")
		res, err := languages.RunTool(sctx, senv, languages.Tool{
			Command: args, Env: goEnv(senv, root, tmp),
			ExtraExec: []string{filepath.Join(root, "pkg", "tool")},
			ReadOnly:  []string{root}, ReadWrite: []string{tmp},
		})
		if err != nil {
			return "", err
		}
		if err := languages.CompileFailure("go", res); err != nil {
			return "", fmt.Errorf("the warm-up program did not build: %w", err)
		}
	}
	// Only what the build added: the bases' entries (links to them) and
	// bookkeeping files go; the job cache gets those from the bases.
	if len(c.base) > 0 {
		err := filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(tmp, p)
			if !strings.ContainsRune(rel, os.PathSeparator) {
				return os.Remove(p)
			}
			for _, b := range c.base {
				if _, err := os.Lstat(filepath.Join(b, rel)); err == nil {
					return os.Remove(p)
				}
			}
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	// Hand the seed to root and make it read-only for everyone else.
	if os.Geteuid() == 0 {
		err := filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && !d.Type().IsRegular() {
				return os.Remove(p) // the cache holds only files and directories
			}
			if err := os.Lchown(p, 0, 0); err != nil {
				return err
			}
			if d.IsDir() {
				return os.Chmod(p, 0o755)
			}
			return os.Chmod(p, 0o644)
		})
		if err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(ver+"\n"), 0o644); err != nil {
		return "", err
	}
	// Into the state dir: a rename when it is on the same filesystem,
	// else a copy into a staging dir there and a rename of that, so the
	// seed appears whole or not at all.
	var stage string
	if err := os.Rename(tmp, dir+".stage"); err == nil {
		stage = dir + ".stage"
	} else {
		os.RemoveAll(dir + ".stage")
		if stage, err = os.MkdirTemp(keep, ".seed-"); err != nil {
			return "", err
		}
		defer os.RemoveAll(stage)
		if err := os.Chmod(stage, 0o755); err != nil {
			return "", err
		}
		if err := copyTree(tmp, stage); err != nil {
			return "", err
		}
	}
	if err := os.Rename(stage, dir); err != nil {
		os.RemoveAll(stage)
		// Another process won the race: its seed is as good as ours.
		if _, serr := os.Stat(filepath.Join(dir, ".complete")); serr == nil {
			return dir, nil
		}
		return "", err
	}
	return dir, nil
}

// copyTree copies the regular files and directories of src into dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		if d.IsDir() {
			return os.Mkdir(filepath.Join(dst, rel), 0o755)
		}
		return copyFile(p, filepath.Join(dst, rel))
	})
}

// linkTree fills dst with a cache layer (over the layers below it, linked
// first): directories are
// made, entry files are hard links (as root: the job uid cannot write
// root's 0644 files, and the native runner's hand-over of the job's dirs
// leaves hard-linked files their owner's) or copies (not root: the job has
// our uid and could write through a link). Top-level bookkeeping files
// (trim.txt) are copied, since go rewrites them.
func linkTree(src, dst string) error {
	root := os.Geteuid() == 0
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		t := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if err := os.Mkdir(t, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			return nil
		case !strings.ContainsRune(rel, os.PathSeparator):
			if _, err := os.Lstat(t); err == nil {
				return nil // a lower layer's bookkeeping file is there already
			}
		case root:
			if err := os.Link(p, t); err == nil {
				return nil
			}
			// The seed is on another filesystem than the job's cache
			// (a data dir outside /tmp): copy, the job's own.
		}
		return copyFile(p, t)
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func shortHash(s string) string {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return strconv.FormatUint(h, 36)
}
