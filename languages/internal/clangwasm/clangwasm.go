// Package clangwasm is what the C and C++ languages share: Debian's
// clang-19 with wasi-libc (and libc++ for C++) targeting wasm32-wasi, run
// confined by languages.RunTool.
package clangwasm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/moat-sandbox/moat/guests"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/toolchains"
)

// LLVMBin is where clang-19 finds its linker (wasm-ld), which it executes.
const LLVMBin = "/usr/lib/llvm-19/bin"

// Compiler is one clang front end: C or C++.
type Compiler struct {
	Lang       string   // "c" or "cpp"
	Binary     string   // "clang-19" or "clang++-19"
	Package    string   // the Debian package that provides it
	Sources    []string // extensions compiled (others, headers, are only present)
	Flags      []string // language flags for every build
	Sysroot    string   // a file that must exist for this language (libc++ for C++)
	SysrootPkg string

	registered atomic.Bool
}

// Registered marks the language as registered: from now on Info may ask
// the compiler for its version. Before, at init, it must not: every moat
// process (and every confined child, which is moat re-executed) would
// otherwise run each toolchain at start-up.
func (c *Compiler) Registered() { c.registered.Store(true) }

// The flags of every build. wasm32-wasi, not wasm32-wasip1: Debian's
// wasi-libc lives under /usr/include/wasm32-wasi, and the p1 triple makes
// clang look in the host's /usr/include instead.
var commonFlags = []string{"--target=wasm32-wasi", "-O2", "-Wl,--strip-all"}

// BuildID is part of the build cache key.
func (c *Compiler) BuildID() string {
	return strings.Join(append(append([]string{}, commonFlags...), c.Flags...), " ")
}

var versionOnce sync.Map // binary -> func() (string, error)

// Version is the compiler's version ("19.1.7"), read once from
// `clang --version`. It runs the trusted binary bare: there is no
// untrusted input.
func (c *Compiler) Version() (string, error) {
	f, _ := versionOnce.LoadOrStore(c.Binary, sync.OnceValues(func() (string, error) {
		bin, err := toolchains.Binary(c.Binary, c.Package)
		if err != nil {
			return "", err
		}
		out, err := exec.Command(bin, "--version").Output()
		if err != nil {
			return "", fmt.Errorf("%s --version: %w", bin, err)
		}
		m := regexp.MustCompile(`clang version (\S+)`).FindSubmatch(out)
		if m == nil {
			return "", fmt.Errorf("%s --version: no version in %q", bin, firstLine(out))
		}
		return string(m[1]), nil
	}))
	return f.(func() (string, error))()
}

// Available reports what is missing.
func (c *Compiler) Available() error {
	if _, err := c.Version(); err != nil {
		return err
	}
	if c.Sysroot != "" {
		if _, err := os.Stat(c.Sysroot); err != nil {
			return fmt.Errorf("%w: %s is missing (install the Debian package %s: `moat toolchains install` as root)", toolchains.ErrMissing, c.Sysroot, c.SysrootPkg)
		}
	}
	if _, err := os.Stat("/usr/lib/wasm32-wasi/libc.a"); err != nil {
		return fmt.Errorf("%w: wasi-libc is missing (install the Debian package wasi-libc: `moat toolchains install c` as root)", toolchains.ErrMissing)
	}
	return nil
}

// VersionOrUnknown is Version for Info, which cannot fail: "unavailable"
// when the compiler is missing, "" during registration.
func (c *Compiler) VersionOrUnknown() string {
	if !c.registered.Load() {
		return ""
	}
	v, err := c.Version()
	if err != nil {
		return "unavailable"
	}
	return v
}

var includeRe = regexp.MustCompile(`^\s*#\s*include\s*[<"]([^>"]+)[>"]`)

// Validate adds the include checks: a profile's Deny entry
// "include:sys/socket.h" refuses a submission that includes that header.
func (c *Compiler) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	vs := languages.ValidateCommon(src, p)
	vs = append(vs, languages.DenyLines(src, p, "include:", func(line, target string) bool {
		m := includeRe.FindStringSubmatch(line)
		return m != nil && path.Clean(m[1]) == path.Clean(target)
	})...)
	if !slices.ContainsFunc(src.Files, func(f languages.File) bool { return c.isSource(f.Name) }) {
		vs = append(vs, languages.Violation{Rule: languages.RuleFiles, File: src.Entry().Name,
			Message: fmt.Sprintf("no %s source file: name the entry file with one of %s", c.Lang, strings.Join(c.Sources, ", "))})
	}
	return vs
}

func (c *Compiler) isSource(name string) bool {
	return slices.Contains(c.Sources, strings.ToLower(path.Ext(name)))
}

// Build compiles every source file of the submission into one WASI command.
func (c *Compiler) Build(ctx context.Context, env languages.BuildEnv, src languages.Source) (*languages.Artifact, error) {
	if err := c.Available(); err != nil {
		return nil, err
	}
	dir := filepath.Join(env.WorkDir, "src")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := languages.WriteSource(dir, src.Files); err != nil {
		return nil, err
	}
	var files []string
	for _, f := range src.Files {
		if c.isSource(f.Name) {
			files = append(files, filepath.Join("src", filepath.FromSlash(f.Name)))
		}
	}
	return c.compile(ctx, env, files, []string{"-Isrc"}, nil)
}

// BuildPlugin compiles every source file directly in dir into a reactor
// (no _start; exports are the plugin's, see guests/c).
func (c *Compiler) BuildPlugin(ctx context.Context, env languages.BuildEnv, dir string) ([]byte, error) {
	if err := c.Available(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(abs)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range ents {
		if !e.IsDir() && c.isSource(e.Name()) {
			files = append(files, filepath.Join("plugin", e.Name()))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no %s files in %s", c.Lang, strings.Join(c.Sources, "/"), dir)
	}
	if err := languages.CopyPluginSource(abs, filepath.Join(env.WorkDir, "plugin")); err != nil {
		return nil, err
	}
	// The guest SDK's header is the one this binary carries (package
	// guests), written beside the sources over any moat.h the plugin has
	// (`moat new` puts one there for editors): a plugin builds wherever it
	// lies, against the ABI of the moat that builds it.
	if err := guests.Write(filepath.Join(env.WorkDir, "plugin"), c.Lang); err != nil {
		return nil, fmt.Errorf("%s: %w", c.Lang, err)
	}
	incs := []string{"-Iplugin"}
	a, err := c.compile(ctx, env, files, incs, []string{"-mexec-model=reactor"})
	if err != nil {
		return nil, err
	}
	return a.WASM, nil
}

func (c *Compiler) compile(ctx context.Context, env languages.BuildEnv, files, incs, extra []string, readOnly ...string) (*languages.Artifact, error) {
	cc, err := toolchains.Binary(c.Binary, c.Package)
	if err != nil {
		return nil, err
	}
	args := []string{cc}
	args = append(args, commonFlags...)
	args = append(args, c.Flags...)
	args = append(args, extra...)
	args = append(args, incs...)
	args = append(args, "-o", "out.wasm")
	args = append(args, files...)
	// PATH holds only the linker under the name clang looks for: clang
	// runs wasm-opt after linking when it finds one on PATH (binaryen's,
	// in /usr/bin), which would make the output depend on what else is
	// installed, and Debian's clang ignores --ld-path for wasm.
	bin := filepath.Join(env.WorkDir, ".bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	if err := os.Symlink(filepath.Join(LLVMBin, "lld"), filepath.Join(bin, "wasm-ld-19")); err != nil {
		return nil, err
	}
	res, err := languages.RunTool(ctx, env, languages.Tool{Command: args, Env: []string{"PATH=" + bin},
		ExtraExec: []string{LLVMBin}, ReadOnly: readOnly, MemoryBytes: 1 << 30})
	if err != nil {
		return nil, err
	}
	if err := languages.CompileFailure(c.Lang, res); err != nil {
		return nil, err
	}
	wasm, err := languages.ReadOutput(env.WorkDir, "out.wasm")
	if err != nil {
		return nil, fmt.Errorf("%s: the compiler succeeded but wrote no module: %w", c.Lang, err)
	}
	return &languages.Artifact{Kind: languages.ArtifactWASM, WASM: wasm, BuildLog: string(res.Stderr)}, nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}
