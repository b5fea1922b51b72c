// Package ruby runs Ruby in CRuby 3.4 compiled to WASI: ruby.wasm from
// npm @ruby/3.4-wasm-wasi@2.10.1 (dist/ruby+stdlib.wasm, the standard
// library packed inside), provisioned by `make toolchains`.
//
// That build is not a WASI command. It is a reactor with wit-bindgen
// exports (ruby-init, ruby-init-loadpath, rb-eval-string-protect...) and
// imports for the JavaScript interop of browsers (rb-js-abi-host.*) and a
// canonical-ABI handle table (canonical_abi.*). So the language runs its
// artifacts itself (languages.ArtifactRunner) with a small driver, in a
// wazero runtime of its own that provides those imports:
//
//   - the rb-js-abi-host functions trap with a clear message: there is no
//     JavaScript here, so require "js" cannot work;
//   - canonical_abi is a per-run handle table for Ruby values;
//   - strings cross as NUL-terminated buffers from cabi_realloc (CRuby
//     reads argv as C strings);
//   - each run is a fresh instance: ruby-init with ARGV, ruby-init-loadpath,
//     then one rb-eval-string-protect of a wrapper that loads /src/main.rb
//     and turns SystemExit and uncaught exceptions into an exit status
//     (printing the exception as ruby does). $stdout and $stderr are
//     synchronous, because the reactor never runs ruby_cleanup to flush.
//     Everything before the wrapper is done once and kept as an image
//     (snapshot.go): a run restores it and sets ARGV, ENV and the seed,
//     ~21 ms instead of ~240.
//
// The module is 30 MB and takes about 12 s to compile cold; its machine
// code goes to the host's compilation cache, and the runtime and compiled
// module are kept per cache directory for the life of the process.
// at_exit blocks do not run (no interpreter shutdown in a reactor).
//
// Importing the package registers the language as "ruby" (alias rb).
package ruby

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	rbsdk "github.com/moat-sandbox/moat/guests/ruby"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/toolchains"
)

func init() { languages.Register(Language{}) }

// Language is Ruby on ruby.wasm.
type Language struct{}

var _ languages.ArtifactRunner = Language{}

const (
	// Version is the CRuby release inside ruby.wasm.
	Version = "3.4.1"
	// NPMPackage is where `make toolchains` puts the interpreter, relative
	// to the npm tree (toolchains.NPMFile).
	NPMPackage = "@ruby/3.4-wasm-wasi/dist/ruby+stdlib.wasm"
)

// Info implements languages.Language.
func (Language) Info() languages.Info {
	return languages.Info{
		Name:       "ruby",
		Aliases:    []string{"rb"},
		Version:    Version,
		Path:       languages.PathInterpreted,
		Extensions: []string{".rb"},
		Toolchain:  "CRuby " + Version + " (ruby.wasm 2.10.1, WASI reactor driven by moat)",
	}
}

// Build implements languages.Language: the artifact is the interpreter and
// the files, with moat.rb, the SDK, beside them (unless the source has a
// file of that name); the first Arg is the script as the guest sees it.
func (Language) Build(_ context.Context, env languages.BuildEnv, src languages.Source) (*languages.Artifact, error) {
	wasm, err := Interpreter(env.ToolchainDir)
	if err != nil {
		return nil, err
	}
	files := slices.Clone(src.Files)
	if !slices.ContainsFunc(files, func(f languages.File) bool { return f.Name == rbsdk.FileName }) {
		files = append(files, languages.File{Name: rbsdk.FileName, Content: rbsdk.SDK})
	}
	return &languages.Artifact{
		Kind:  languages.ArtifactInterpreted,
		WASM:  wasm,
		Files: files,
		Args:  []string{"/src/" + src.Entry().Name},
	}, nil
}

// Available implements languages.Checker: the interpreter WASM is
// provisioned (`moat toolchains install ruby`), so `moat langs` says
// "available" only when a run can start.
func (Language) Available() error {
	if _, err := toolchains.NPMFile(NPMPackage); err != nil {
		return fmt.Errorf("ruby: %w", err)
	}
	return nil
}

// Interpreter returns ruby+stdlib.wasm from toolchainDir (or, when empty,
// the directory package toolchains finds), read once per process.
func Interpreter(toolchainDir string) ([]byte, error) {
	b, err := toolchains.ReadNPMFile(toolchainDir, NPMPackage)
	if err != nil {
		return nil, fmt.Errorf("ruby: %w", err)
	}
	return b, nil
}

// sdkID is part of the build key (languages.BuildIdentifier): a build
// carries moat.rb, so a moat with another SDK must not reuse it.
var sdkID = func() string {
	h := sha256.Sum256(rbsdk.SDK)
	return hex.EncodeToString(h[:8])
}()

// BuildID implements languages.BuildIdentifier.
func (Language) BuildID() string { return "sdk-" + sdkID }
