// Package bash is the bash language: scripts run by Debian's /usr/bin/bash
// as a confined native process (host/native: no network, read-only
// system, a job dir to write, limits), since bash has no WASM build.
// Import it for its side effect of registering "bash".
//
// A script may execute bash itself and the text utilities in Utilities
// (cat, sort, grep, sed, awk...): Landlock lets nothing else execute.
//
// Validation profile rules: "command:NAME" refuses a script that mentions
// the command NAME as a word (e.g. "command:curl", "command:eval").
package bash

import (
	"context"
	"path/filepath"
	"regexp"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/internal/nativelang"
)

func init() {
	languages.Register(Bash)
	Bash.interp.Registered()
}

// Bash is the registered language.
var Bash = &Language{interp: &nativelang.Interpreter{
	Binary: "bash", Package: "bash", Flag: "--version", Pattern: `version (\d+\.\d+\.\d+)`,
}}

// Utilities are the programs a script may execute besides bash.
var Utilities = []string{
	"cat", "sort", "uniq", "head", "tail", "wc", "tr", "cut", "grep", "sed", "awk", "mawk", "seq", "expr",
	"printf", "echo", "date", "sleep", "tee", "xargs", "basename", "dirname", "rev", "fold", "paste",
	"comm", "join", "nl", "od", "factor", "true", "false", "test", "yes", "env", "ls", "mkdir", "rm", "cp", "mv", "touch",
	"sha256sum", "md5sum", "base64", "bc", "dc",
}

// Language runs bash scripts.
type Language struct{ interp *nativelang.Interpreter }

// Info describes bash.
func (l *Language) Info() languages.Info {
	return languages.Info{
		Name: "bash", Aliases: []string{"sh", "shell"}, Version: l.interp.VersionOrUnknown(),
		Path: languages.PathNative, Extensions: []string{".sh", ".bash"},
		Toolchain: "/usr/bin/bash " + l.interp.VersionOrUnknown() + " (native, confined)",
		Why:       "a shell runs other programs, which WASI cannot; Debian's bash and its text utilities run under every kernel layer",
	}
}

// Available reports what is missing.
func (l *Language) Available() error { return l.interp.Available() }

// Validate adds the "command:" check.
func (l *Language) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	vs := languages.ValidateCommon(src, p)
	return append(vs, languages.DenyLines(src, p, "command:", func(line, target string) bool {
		return regexp.MustCompile(`(^|[\s;|&(` + "`" + `$])` + regexp.QuoteMeta(target) + `($|[\s;|&)])`).MatchString(line)
	})...)
}

// Build packages the script: nothing is compiled.
func (l *Language) Build(_ context.Context, _ languages.BuildEnv, src languages.Source) (*languages.Artifact, error) {
	if err := l.interp.Available(); err != nil {
		return nil, err
	}
	exe := make([]string, len(Utilities))
	for i, u := range Utilities {
		exe[i] = filepath.Join("/usr/bin", u)
	}
	return l.interp.Artifact(src, nil, nil, exe), nil
}
