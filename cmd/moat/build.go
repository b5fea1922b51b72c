package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/toolchains"
	"github.com/spf13/cobra"
)

func init() { registerCommand(newBuildCmd) }

func newBuildCmd(g *globalFlags) *cobra.Command {
	var timeout time.Duration
	var out string
	cmd := &cobra.Command{
		Use:   "build DIR",
		Short: "Build a plugin from source: DIR/moat.yaml names the language, the module is written beside it",
		Long: `Build the plugin in DIR into the WebAssembly module its manifest names.

DIR/moat.yaml's language: picks the compiler and module: the output file
(default <name>.wasm), written into DIR. Plugins are WASI reactors exporting
the moat ABI: Go builds with -buildmode=c-shared; C and C++ with
-mexec-model=reactor (every .c/.cpp file in DIR); Rust builds DIR/lib.rs or
DIR/src/lib.rs as a cdylib; AssemblyScript builds DIR/index.ts or
DIR/assembly/index.ts with _initialize as its start.

The guest SDK is the one inside this binary, never a copy the plugin points
at: Go gets it as a local module replacing github.com/moat-sandbox/moat,
Rust as the crate moat, C and C++ as moat.h beside the sources,
AssemblyScript as moat.ts. Nothing is downloaded, and the same source gives
the same bytes wherever it lies (make examples builds through here too).

An interpreted plugin (JavaScript, Python, Ruby) has no module to write:
build checks it (the manifest, the sources, the language's checks) and
compiles its interpreter into the compile cache, running none of its code;
a resident plugin's snapshot is made at its first call. A native plugin
(kind: native) has nothing to build either: build reads it as moat run and
an upload do (links and special files refused) and prepares nothing.

The compiler runs confined, as for ` + "`moat exec --lang`" + `: no network, the
toolchains read-only, a scratch directory to write. DIR (for Go, the
plugin's module) is copied into the scratch directory, so it need not be
readable by the compiler's uid; the module is copied into DIR afterwards.`,
		Example: `  moat new hello --lang go && moat build hello && moat run hello greet --input World
  moat build examples/hello-go && moat run examples/hello-go greet --input World
  moat build --out /tmp/hello.wasm examples/hello-c`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return buildPlugin(cmd.Context(), g, args[0], out, timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "limit of the build (the first Go build on a machine compiles the standard library)")
	cmd.Flags().StringVar(&out, "out", "", "where to write the module (default: DIR/ and the manifest's module: file)")
	return g.withServerConfig(cmd, "keep the build's language state in its data_dir")
}

// checkNative is moat build of a native plugin: nothing is compiled (its
// worker is the manifest's command, run confined when the plugin is
// loaded); the plugin is read as moat run and an upload read it, so what
// they would refuse is refused here.
func checkNative(dir string) error {
	b, err := bundle.Open(dir)
	if err != nil {
		return usagef("%v", err)
	}
	fmt.Fprintf(os.Stderr, "==> %s (native, %s) checked: manifest, %d action(s), %d file(s); nothing to build: its worker (%s) runs as a confined process when the plugin is loaded\n",
		termSafe(b.Manifest.Name), termSafe(b.Manifest.Language), len(b.Manifest.Actions), len(b.Files), termSafe(strings.Join(b.Manifest.Command, " ")))
	return nil
}

func buildPlugin(ctx context.Context, g *globalFlags, dir, out string, timeout time.Duration) error {
	mfPath := filepath.Join(dir, "moat.yaml")
	mf, err := policy.LoadManifest(mfPath)
	if err != nil {
		return usagef("%v", err)
	}
	if mf.Language == "" {
		return usagef("%s has no language: field: add one, e.g. language: go (see `moat langs`)", mfPath)
	}
	lang, err := languages.Lookup(mf.Language)
	if err != nil {
		return usagef("%s: language: %v", mfPath, err)
	}
	info := lang.Info()
	// The kind is the bundle's to decide, as for every other entry point;
	// a build ignores a module already there (it would write it anew).
	switch bundle.KindOf(mf, false) {
	case bundle.Script:
		if out != "" {
			return usagef("--out: %s is %s: its sources are the module, there is nothing to write; leave --out out", info.Name, info.Path)
		}
		return buildInterpreted(ctx, g, dir, mf, lang)
	case bundle.Native:
		if out != "" {
			return usagef("--out: %s is a native plugin: its files are the plugin, there is nothing to write; leave --out out", termSafe(mf.Name))
		}
		return checkNative(dir)
	}
	pb, ok := lang.(languages.PluginBuilder)
	if !ok {
		return usagef("%s cannot build plugins yet", info.Name)
	}
	if c, ok := lang.(languages.Checker); ok {
		if err := c.Available(); err != nil {
			return err
		}
	}
	if out == "" {
		name := mf.Module
		if name == "" {
			name = mf.Name + ".wasm"
		}
		out = filepath.Join(dir, name)
	}
	work, err := os.MkdirTemp("", "moat-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	state := filepath.Join(g.data(), "lang-state", info.Name)
	if err := os.MkdirAll(state, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "==> building %s (%s, %s) in %s\n", mf.Name, info.Name, info.Toolchain, dir)
	machine := toolchains.StateDir()
	if machine != "" {
		machine = filepath.Join(machine, info.Name)
	}
	if info.Name == "go" {
		// Once per machine when the toolchains' state is moat's to write
		// (toolchains.StateDir), else once per data directory: the
		// message says which.
		where := "once per machine"
		if machine == "" {
			where = "once per data directory"
		}
		fmt.Fprintf(os.Stderr, "    (the first Go build also compiles the standard library for wasip1, 40 s or more, %s: `moat toolchains warm go` does it ahead)\n", where)
	}
	began := time.Now()
	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wasm, err := pb.BuildPlugin(bctx, languages.BuildEnv{WorkDir: work, ToolchainDir: toolchains.Dir(), StateDir: state, MachineStateDir: machine}, dir)
	var ce *languages.CompileError
	var le *languages.BuildLimitError
	switch {
	case errors.As(err, &ce):
		fmt.Fprintln(os.Stderr, ce.Output)
		fmt.Fprintf(os.Stderr, "moat: build of %s failed: the compiler refused the source (above)\n", dir)
		return exitError{code: exitFailure}
	case errors.As(err, &le):
		fmt.Fprintf(os.Stderr, "moat: %v\n", le)
		if le.Status == languages.StatusTimeout {
			return exitError{code: exitTimeout}
		}
		return exitError{code: exitMemory}
	case err != nil:
		return fmt.Errorf("build %s: %w", dir, err)
	}
	// A compiled module's pages' files go in its moat.pages section, so
	// its digest and signature cover them (bundle.EmbedPages).
	if wasm, err = bundle.EmbedPages(wasm, mf, dir); err != nil {
		return usagef("%v", err)
	}
	// A temporary file of our own (O_EXCL), renamed over out: a link
	// planted at out or at a fixed temporary name is replaced, never
	// written through.
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(wasm)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	fmt.Fprintf(os.Stderr, "==> wrote %s (%d bytes, sha256 %s) in %s\n", out, len(wasm), host.Digest(wasm)[:12], time.Since(began).Round(10*time.Millisecond))
	return nil
}
