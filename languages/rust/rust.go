// Package rust is the Rust language: Debian's rustc (1.63) with its
// wasm32-wasi standard library builds a WASI command. There is no crate
// registry here: a submission is one crate of its own files (the entry
// file is the crate root; `mod x;` finds x.rs beside it). Import it for its
// side effect of registering "rust".
//
// Validation profile rules: "use:PATH" refuses a `use PATH` (or a longer
// path under it), e.g. "use:std::net" or "use:std::process"; "unsafe"
// refuses the unsafe keyword.
package rust

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
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

// registered: Info may run rustc for its version only after init (see
// clangwasm.Compiler.Registered for why).
var registered atomic.Bool

func init() {
	languages.Register(Rust)
	registered.Store(true)
}

// Rust is the registered language.
var Rust = &Language{}

// Language compiles Rust.
type Language struct{}

// rustc is Debian's, by full path: rustup's shims come earlier on PATH and
// its toolchains have no wasm32 standard library.
const rustcName, rustcPkg = "rustc", "rustc and libstd-rust-dev-wasm32"

// The std for the target; rustc executes the bundled linker (rust-lld)
// from the host's lib dir.
const (
	wasmStd    = "/usr/lib/rustlib/wasm32-wasi/lib"
	hostRustLb = "/usr/lib/rustlib/x86_64-unknown-linux-gnu"
)

var flags = []string{"--edition=2021", "--target", "wasm32-wasi", "-C", "opt-level=2", "-C", "strip=symbols"}

// BuildID is part of the build cache key.
func (*Language) BuildID() string { return strings.Join(flags, " ") }

var version = sync.OnceValues(func() (string, error) {
	bin, err := toolchains.Binary(rustcName, rustcPkg)
	if err != nil {
		return "", err
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", bin, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 2 {
		return "", fmt.Errorf("%s --version: unexpected %q", bin, out)
	}
	return f[1], nil
})

func versionOrUnknown() string {
	if !registered.Load() {
		return ""
	}
	v, err := version()
	if err != nil {
		return "unavailable"
	}
	return v
}

// Info describes Rust.
func (*Language) Info() languages.Info {
	return languages.Info{
		Name: "rust", Aliases: []string{"rs", "rustc"}, Version: versionOrUnknown(),
		Path: languages.PathCompiled, Extensions: []string{".rs"},
		Toolchain: "rustc " + versionOrUnknown() + " (Debian, wasm32-wasi std, no crates)",
	}
}

// Available reports what is missing.
func (*Language) Available() error {
	if _, err := version(); err != nil {
		return err
	}
	if _, err := os.Stat(wasmStd); err != nil {
		return fmt.Errorf("%w: %s is missing (install the Debian package libstd-rust-dev-wasm32: `moat toolchains install rust` as root)", toolchains.ErrMissing, wasmStd)
	}
	return nil
}

var unsafeRe = regexp.MustCompile(`\bunsafe\b`)

// pathRe matches a use of the path target ("std::net") in a line: the
// path itself, a longer path under it, or a grouped import of its last
// element (`use std::{io, net}`).
func pathRe(target string) *regexp.Regexp {
	parts := strings.Split(target, "::")
	full := `\b` + strings.Join(quoteAll(parts), `\s*::\s*`) + `\b`
	if len(parts) < 2 {
		return regexp.MustCompile(full)
	}
	head := strings.Join(quoteAll(parts[:len(parts)-1]), `\s*::\s*`)
	grouped := `\b` + head + `\s*::\s*\{[^}]*\b` + regexp.QuoteMeta(parts[len(parts)-1]) + `\b`
	return regexp.MustCompile(full + `|` + grouped)
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = regexp.QuoteMeta(strings.TrimSpace(s))
	}
	return out
}

// Validate adds the "use:" and "unsafe" checks.
func (*Language) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	vs := languages.ValidateCommon(src, p)
	vs = append(vs, languages.DenyLines(src, p, "use:", func(line, target string) bool {
		code, _, _ := strings.Cut(line, "//")
		return pathRe(target).MatchString(code)
	})...)
	if slices.Contains(p.Deny, "unsafe") {
		for _, f := range src.Files {
			for i, line := range strings.Split(string(f.Content), "\n") {
				code, _, _ := strings.Cut(line, "//")
				if unsafeRe.MatchString(code) {
					vs = append(vs, languages.Violation{Rule: languages.RuleDeny, File: f.Name, Line: i + 1,
						Message: "unsafe is denied by the validation profile: remove the unsafe block"})
				}
			}
		}
	}
	if !strings.HasSuffix(src.Entry().Name, ".rs") {
		vs = append(vs, languages.Violation{Rule: languages.RuleFiles, File: src.Entry().Name, Message: "the entry file must be a .rs file (the crate root)"})
	}
	return vs
}

// Build compiles the crate rooted at the entry file into a WASI command.
func (l *Language) Build(ctx context.Context, env languages.BuildEnv, src languages.Source) (*languages.Artifact, error) {
	dir := filepath.Join(env.WorkDir, "src")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := languages.WriteSource(dir, src.Files); err != nil {
		return nil, err
	}
	wasm, log, err := l.rustc(ctx, env, filepath.Join("src", filepath.FromSlash(src.Entry().Name)), "bin", "main", "out.wasm", nil)
	if err != nil {
		return nil, err
	}
	return &languages.Artifact{Kind: languages.ArtifactWASM, WASM: wasm, BuildLog: log}, nil
}

// BuildPlugin compiles DIR/lib.rs (or DIR/src/lib.rs) as a cdylib: a
// reactor exporting the plugin's #[no_mangle] functions.
func (l *Language) BuildPlugin(ctx context.Context, env languages.BuildEnv, dir string) ([]byte, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	var root string
	for _, c := range []string{"lib.rs", "src/lib.rs"} {
		if _, err := os.Stat(filepath.Join(abs, c)); err == nil {
			root = filepath.Join("plugin", c)
			break
		}
	}
	if root == "" {
		return nil, fmt.Errorf("rust: no lib.rs or src/lib.rs in %s: a plugin is a library crate", dir)
	}
	if err := languages.CopyPluginSource(abs, filepath.Join(env.WorkDir, "plugin")); err != nil {
		return nil, err
	}
	// The moat crate is the one this binary carries (package guests), not
	// whatever a Cargo.toml's path dependency points at: it is compiled
	// first, as an rlib with the plugin's flags, and handed to the plugin
	// as the extern crate moat, so `moat::...` resolves wherever the
	// plugin lies and no file outside the work dir is read.
	if err := guests.Write(filepath.Join(env.WorkDir, "moat-sdk"), "rust"); err != nil {
		return nil, fmt.Errorf("rust: %w", err)
	}
	if err := l.sdk(ctx, env); err != nil {
		return nil, fmt.Errorf("rust: compiling the moat SDK crate: %w", err)
	}
	wasm, _, err := l.rustc(ctx, env, root, "cdylib", "main", "out.wasm", []string{"--extern", "moat=libmoat.rlib"})
	return wasm, err
}

// sdk puts the moat crate, compiled (libmoat.rlib), into the work dir:
// kept once compiled, per machine (env.MachineStateDir, else the data
// directory's StateDir), under a key of rustc's version, the flags and the
// crate's every file, so a plugin's rebuild compiles the plugin alone
// (the SDK took most of every Rust plugin build's 28-34 s). Only the host
// writes the kept copy, written whole (a rename) or not at all; a build
// reads its own copy in its work dir.
func (l *Language) sdk(ctx context.Context, env languages.BuildEnv) error {
	keep := env.MachineStateDir
	if keep == "" {
		keep = env.StateDir
	}
	const out = "libmoat.rlib"
	var kept string
	if keep != "" {
		key, err := sdkKey(filepath.Join(env.WorkDir, "moat-sdk"))
		if err != nil {
			return err
		}
		kept = filepath.Join(keep, "moat-sdk-"+key+".rlib")
		if b, err := os.ReadFile(kept); err == nil {
			return os.WriteFile(filepath.Join(env.WorkDir, out), b, 0o644)
		}
	}
	rlib, _, err := l.rustc(ctx, env, "moat-sdk/src/lib.rs", "rlib", "moat", out, nil)
	if err != nil || kept == "" {
		return err
	}
	if err := os.MkdirAll(keep, 0o755); err != nil {
		return nil // not kept: the next build compiles it again
	}
	tmp, err := os.CreateTemp(keep, ".moat-sdk-*")
	if err != nil {
		return nil
	}
	_, werr := tmp.Write(rlib)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Chmod(tmp.Name(), 0o644) != nil || os.Rename(tmp.Name(), kept) != nil {
		os.Remove(tmp.Name())
	}
	return nil
}

// sdkKey names a compiled SDK crate: rustc's version, the flags, and the
// path and bytes of each file of the crate's directory.
func sdkKey(dir string) (string, error) {
	v, err := version()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", v, strings.Join(flags, " "))
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(rel), len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// rustc compiles the crate rooted at root (relative to the work dir) into
// out in the work dir.
func (*Language) rustc(ctx context.Context, env languages.BuildEnv, root, crateType, crateName, out string, extra []string) ([]byte, string, error) {
	if err := Rust.Available(); err != nil {
		return nil, "", err
	}
	bin, err := toolchains.Binary(rustcName, rustcPkg)
	if err != nil {
		return nil, "", err
	}
	args := append([]string{bin}, flags...)
	args = append(args, "--crate-type", crateType, "--crate-name", crateName, "-o", out)
	args = append(args, extra...)
	args = append(args, root)
	res, err := languages.RunTool(ctx, env, languages.Tool{Command: args, ExtraExec: []string{hostRustLb, "/usr/bin/rust-lld", "/usr/lib/llvm-14/bin"},
		MemoryBytes: 1 << 30})
	if err != nil {
		return nil, "", err
	}
	if err := languages.CompileFailure("rust", res); err != nil {
		return nil, "", err
	}
	wasm, err := languages.ReadOutput(env.WorkDir, out)
	if err != nil {
		return nil, "", fmt.Errorf("rust: rustc succeeded but wrote no %s: %w", out, err)
	}
	return wasm, string(res.Stderr), nil
}
