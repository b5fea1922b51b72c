// Package assemblyscript is the AssemblyScript language: the npm
// assemblyscript compiler (run by node) with @assemblyscript/wasi-shim
// builds a WASI command. Import it for its side effect of registering
// "assemblyscript".
//
// The shim gives programs process.argv, process.env, process.exit,
// console.log and process.stdin.read(buffer) (stdin, read through WASI
// fd_read).
//
// Validation profile rules: "external:MODULE" refuses a declaration
// imported from the host module MODULE (`@external("MODULE", ...)`), and
// "import:PATH" refuses `import ... from "PATH"`.
//
// asc's configuration is resolved relative to its working directory, and
// an absolute `extends` path or --config path breaks the shim's library
// lookup (AS111 "wasi_abort not found"): the build writes an asconfig.json
// whose `extends` is the shim's config relative to the build directory.
package assemblyscript

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/moat-sandbox/moat/guests"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/toolchains"
)

func init() { languages.Register(AS) }

// AS is the registered language.
var AS = &Language{}

// Language compiles AssemblyScript.
type Language struct{}

const (
	ascJS      = "assemblyscript/bin/asc.js"
	shimConfig = "@assemblyscript/wasi-shim/asconfig.json"
	nodeBin    = "node"
)

var flags = []string{"-O3", "--noAssert"}

// BuildID is part of the build cache key.
func (*Language) BuildID() string {
	return strings.Join(flags, " ") + " " + pkgVersion("@assemblyscript/wasi-shim")
}

func pkgVersion(pkg string) string {
	p, err := toolchains.NPMFile(pkg + "/package.json")
	if err != nil {
		return "unavailable"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "unavailable"
	}
	var v struct{ Version string }
	if json.Unmarshal(b, &v) != nil || v.Version == "" {
		return "unavailable"
	}
	return v.Version
}

var version = sync.OnceValue(func() string { return pkgVersion("assemblyscript") })

// Info describes AssemblyScript.
func (*Language) Info() languages.Info {
	return languages.Info{
		Name: "assemblyscript", Aliases: []string{"as", "asc"}, Version: version(),
		Path: languages.PathCompiled, Extensions: []string{".ts", ".as"},
		Toolchain: "asc " + version() + " + wasi-shim " + pkgVersion("@assemblyscript/wasi-shim") + " (node)",
	}
}

// Available reports what is missing.
func (*Language) Available() error {
	if _, err := toolchains.Binary(nodeBin, "nodejs"); err != nil {
		return err
	}
	for _, f := range []string{ascJS, shimConfig} {
		if _, err := toolchains.NPMFile(f); err != nil {
			return err
		}
	}
	return nil
}

var (
	externalRe = regexp.MustCompile(`@external\(\s*["']([^"']+)["']`)
	importRe   = regexp.MustCompile(`\bfrom\s+["']([^"']+)["']`)
)

// Validate adds the "external:" and "import:" checks.
func (*Language) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	vs := languages.ValidateCommon(src, p)
	vs = append(vs, languages.DenyLines(src, p, "external:", func(line, target string) bool {
		m := externalRe.FindStringSubmatch(line)
		return m != nil && m[1] == target
	})...)
	vs = append(vs, languages.DenyLines(src, p, "import:", func(line, target string) bool {
		m := importRe.FindStringSubmatch(line)
		return m != nil && m[1] == target
	})...)
	if e := src.Entry().Name; !strings.HasSuffix(e, ".ts") && !strings.HasSuffix(e, ".as") {
		vs = append(vs, languages.Violation{Rule: languages.RuleFiles, File: e, Message: "the entry file must be a .ts file"})
	}
	return vs
}

// Build compiles the entry file (and what it imports) into a WASI command.
func (l *Language) Build(ctx context.Context, env languages.BuildEnv, src languages.Source) (*languages.Artifact, error) {
	dir := filepath.Join(env.WorkDir, "src")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := languages.WriteSource(dir, src.Files); err != nil {
		return nil, err
	}
	wasm, log, err := l.asc(ctx, env, "src/"+src.Entry().Name, nil, nil)
	if err != nil {
		return nil, err
	}
	return &languages.Artifact{Kind: languages.ArtifactWASM, WASM: wasm, BuildLog: log}, nil
}

// BuildPlugin compiles DIR/index.ts (or DIR/assembly/index.ts, or
// DIR/main.ts) into a reactor: no _start, the plugin's exported functions,
// and the SDK's abort (--use abort=.../moat/abort).
//
// The SDK is the moat.ts this binary carries (package guests), never a
// file outside the work dir. A plugin made by `moat new` imports it as
// "./moat": the copy gets the binary's moat.ts beside the code, over the
// plugin's own (there for editors) or where it has none (a checkout that
// does not keep the generated file), as C's moat.h and Rust's crate are
// provided. One laid out as the moat tree's examples are, whose entry
// imports "../../guests/assemblyscript/moat", finds it there, because the
// copy sits at src/plugin with the SDK at guests/assemblyscript in the
// work dir. abort is the SDK module the entry imports, so that module is
// compiled once.
func (l *Language) BuildPlugin(ctx context.Context, env languages.BuildEnv, dir string) ([]byte, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	const plugin = "src/plugin"
	var entry string
	for _, c := range []string{"index.ts", "assembly/index.ts", "main.ts"} {
		if _, err := os.Stat(filepath.Join(abs, c)); err == nil {
			entry = plugin + "/" + c
			break
		}
	}
	if entry == "" {
		return nil, fmt.Errorf("assemblyscript: no index.ts, assembly/index.ts or main.ts in %s", dir)
	}
	if err := languages.CopyPluginSource(abs, filepath.Join(env.WorkDir, filepath.FromSlash(plugin))); err != nil {
		return nil, err
	}
	sdkDir := plugin
	if treeSDK(filepath.Join(env.WorkDir, filepath.FromSlash(entry))) {
		sdkDir = "guests/assemblyscript"
	}
	if err := guests.Write(filepath.Join(env.WorkDir, filepath.FromSlash(sdkDir)), "assemblyscript"); err != nil {
		return nil, fmt.Errorf("assemblyscript: %w", err)
	}
	wasm, _, err := l.asc(ctx, env, entry, []string{"--exportStart", "_initialize", "--use", "abort=" + sdkDir + "/moat/abort"}, nil)
	return wasm, err
}

// treeSDK reports whether the entry file imports the SDK as the moat
// tree's examples do (".../guests/assemblyscript/moat"), not from beside
// it. The entry re-exports the SDK's four exports, so it names the SDK's
// path itself.
func treeSDK(entry string) bool {
	b, err := os.ReadFile(entry)
	if err != nil {
		return false
	}
	for _, m := range importRe.FindAllStringSubmatch(string(b), -1) {
		if strings.HasSuffix(strings.TrimSuffix(m[1], ".ts"), "guests/assemblyscript/moat") {
			return true
		}
	}
	return false
}

func (l *Language) asc(ctx context.Context, env languages.BuildEnv, entry string, extra, readOnly []string) ([]byte, string, error) {
	if err := l.Available(); err != nil {
		return nil, "", err
	}
	node, _ := toolchains.Binary(nodeBin, "nodejs")
	asc, _ := toolchains.NPMFile(ascJS)
	shim, _ := toolchains.NPMFile(shimConfig)
	rel, err := filepath.Rel(env.WorkDir, shim)
	if err != nil {
		return nil, "", err
	}
	cfg, _ := json.Marshal(map[string]string{"extends": filepath.ToSlash(rel)})
	if err := os.WriteFile(filepath.Join(env.WorkDir, "asconfig.json"), cfg, 0o644); err != nil {
		return nil, "", err
	}
	npm := filepath.Dir(filepath.Dir(filepath.Dir(asc))) // .../npm/node_modules
	args := []string{node, asc, entry, "--config", "asconfig.json", "-o", "out.wasm"}
	args = append(args, flags...)
	args = append(args, extra...)
	res, err := languages.RunTool(ctx, env, languages.Tool{
		Command: args, ReadOnly: append([]string{npm}, readOnly...),
		MemoryBytes: 1 << 30,
		// asc runs binaryen as WASM inside node, and V8 reserves about
		// 10 GB of address space per WASM memory for its guard regions
		// (node 20 cannot turn the trap handler off): RLIMIT_AS must allow
		// the reservation; the cgroup bounds the memory actually used.
		AddressSpace: 64 << 30,
	})
	if err != nil {
		return nil, "", err
	}
	if err := languages.CompileFailure("assemblyscript", res); err != nil {
		return nil, "", err
	}
	wasm, err := languages.ReadOutput(env.WorkDir, "out.wasm")
	if err != nil {
		return nil, "", fmt.Errorf("assemblyscript: asc succeeded but wrote no module: %w", err)
	}
	return wasm, string(res.Stderr), nil
}
