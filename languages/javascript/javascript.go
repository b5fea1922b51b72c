// Package javascript runs JavaScript in QuickJS-NG compiled to WASI. The
// interpreter comes from the Go module github.com/paralin/go-quickjs-wasi
// (QuickJS-NG v0.11.0, embedded in the binary: nothing is fetched at run
// time), and a run is
//
//	qjs --std -e BOOTSTRAP /src/main.js ARGS...
//
// with the submission's files mounted read-only at /src; the bootstrap
// (bootstrap.go) runs main.js as qjs would and turns an uncaught MoatError
// into the action's error code. --std makes the
// std and os modules globals, so scripts read stdin (std.in.getline()),
// the environment (std.getenv) and exit with a code (std.exit). A script
// that uses import or export runs as an ES module; ./moat.js, the guest
// SDK, sits beside it and reaches the op table through the device-file
// transport when the run enables it.
//
// Importing the package registers the language as "javascript" (aliases
// js, qjs, quickjs).
package javascript

import (
	"context"
	"slices"
	"strings"

	quickjswasi "github.com/paralin/go-quickjs-wasi"

	jssdk "github.com/moat-sandbox/moat/guests/js"
	"github.com/moat-sandbox/moat/languages"
)

func init() { languages.Register(Language{}) }

// Language is JavaScript on QuickJS-NG.
type Language struct{}

// Version is the QuickJS-NG release the interpreter was built from.
var Version = strings.TrimPrefix(quickjswasi.Version, "v")

// Info implements languages.Language.
func (Language) Info() languages.Info {
	return languages.Info{
		Name:       "javascript",
		Aliases:    []string{"js", "qjs", "quickjs"},
		Version:    Version,
		Path:       languages.PathInterpreted,
		Extensions: []string{".js", ".mjs"},
		Toolchain:  "QuickJS-NG " + Version + " (WASI)",
	}
}

// Build implements languages.Language. There is nothing to compile: the
// artifact is the interpreter, the files and the command line. Syntax
// errors surface when the script runs, as QuickJS reports them (exit code
// 1 and a SyntaxError on stderr).
func (Language) Build(_ context.Context, _ languages.BuildEnv, src languages.Source) (*languages.Artifact, error) {
	entry := src.Entry()
	files := slices.Clone(src.Files)
	if !hasFile(files, jssdk.FileName) {
		files = append(files, languages.File{Name: jssdk.FileName, Content: jssdk.SDK})
	}
	return &languages.Artifact{
		Kind:  languages.ArtifactInterpreted,
		WASM:  quickjswasi.QuickJSWASM,
		Files: files,
		Args:  []string{"--std", "-e", bootstrap(isModule(entry.Name, string(entry.Content))), "/src/" + entry.Name},
	}, nil
}

func hasFile(files []languages.File, name string) bool {
	return slices.ContainsFunc(files, func(f languages.File) bool { return f.Name == name })
}
