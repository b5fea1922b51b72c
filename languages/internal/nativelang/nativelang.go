// Package nativelang is what the native-path languages (bash, python3)
// share: a script run by a system interpreter under host/native.
package nativelang

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/toolchains"
)

// Interpreter is a system interpreter at a fixed path (never a PATH
// lookup: a pyenv or asdf shim is a script that Landlock would not let
// run, and not what was tested).
type Interpreter struct {
	Binary  string // "bash", in /usr/bin
	Package string // Debian package
	Flag    string // prints the version: "--version"
	Pattern string // a regexp whose first group is the version

	once       sync.Once
	version    string
	err        error
	registered atomic.Bool
}

// Registered lets Info run the interpreter for its version from now on
// (see clangwasm.Compiler.Registered for why not before).
func (i *Interpreter) Registered() { i.registered.Store(true) }

// Path is the interpreter's absolute path.
func (i *Interpreter) Path() string { return filepath.Join("/usr/bin", i.Binary) }

// Version runs the interpreter once, bare (no untrusted input), to read
// its version.
func (i *Interpreter) Version() (string, error) {
	i.once.Do(func() {
		bin, err := toolchains.Binary(i.Binary, i.Package)
		if err != nil {
			i.err = err
			return
		}
		out, err := exec.Command(bin, i.Flag).CombinedOutput()
		if err != nil {
			i.err = fmt.Errorf("%s %s: %w", bin, i.Flag, err)
			return
		}
		m := regexp.MustCompile(i.Pattern).FindSubmatch(out)
		if m == nil {
			i.err = fmt.Errorf("%s %s: no version in the output", bin, i.Flag)
			return
		}
		i.version = string(m[1])
	})
	return i.version, i.err
}

// VersionOrUnknown is Version for Info, which cannot fail.
func (i *Interpreter) VersionOrUnknown() string {
	if !i.registered.Load() {
		return ""
	}
	v, err := i.Version()
	if err != nil {
		return "unavailable"
	}
	return v
}

// Available reports what is missing.
func (i *Interpreter) Available() error {
	_, err := i.Version()
	return err
}

// Artifact is the run of src's entry file by the interpreter, with args
// placed between the interpreter and the script.
func (i *Interpreter) Artifact(src languages.Source, args []string, env map[string]string, extraExec []string) *languages.Artifact {
	cmd := append([]string{i.Path()}, args...)
	cmd = append(cmd, "/src/"+src.Entry().Name)
	var exe []string
	for _, e := range extraExec {
		if r, err := filepath.EvalSymlinks(e); err == nil {
			if fi, err := os.Stat(r); err == nil && fi.Mode().IsRegular() {
				exe = append(exe, r)
			}
		}
	}
	return &languages.Artifact{Kind: languages.ArtifactNative, Files: src.Files, Command: cmd, Env: env, ExtraExec: exe}
}
