// Package php is the PHP language: scripts run by Debian's PHP 8.2 CLI
// (/usr/bin/php, package php8.2-cli) as a confined native process
// (host/native: no network, read-only system, a job dir to write,
// limits); see docs/RATIONALE.md for why not a WASI build. Import it for
// its side effect of registering "php".
//
// PHP runs with -n: Debian's php.ini and conf.d live in /etc, which a
// confined job does not read, so a run has PHP's defaults and its
// compiled-in extensions (Core, date, hash, json, pcre, random, SPL,
// standard, ...) and nothing an operator's php.ini would add. Errors go
// to stderr, and PHP's own memory_limit is the run's memory limit less a
// headroom (languages.NativeTuner), so a script that exhausts it reports
// memory-limit.
//
// Validation profile rules: "function:NAME" refuses a call of NAME
// (e.g. "function:exec", "function:fsockopen", "function:proc_open").
package php

import (
	"context"
	"regexp"
	"strconv"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/internal/nativelang"
)

func init() {
	languages.Register(PHP)
	PHP.interp.Registered()
}

// PHP is the registered language.
var PHP = &Language{interp: &nativelang.Interpreter{
	Binary: "php", Package: "php8.2-cli", Flag: "-nv", Pattern: `PHP (\d+\.\d+\.\d+)`,
}}

// Language runs PHP scripts.
type Language struct{ interp *nativelang.Interpreter }

var (
	_ languages.Language    = (*Language)(nil)
	_ languages.Checker     = (*Language)(nil)
	_ languages.NativeTuner = (*Language)(nil)
)

// Info describes PHP.
func (l *Language) Info() languages.Info {
	return languages.Info{
		Name: "php", Aliases: []string{"php8", "php8.2"}, Version: l.interp.VersionOrUnknown(),
		Path: languages.PathNative, Extensions: []string{".php"},
		Toolchain: "/usr/bin/php " + l.interp.VersionOrUnknown() + " -n (native, confined)",
		Why:       "PHP's WASI builds are old and unmaintained; Debian's PHP CLI runs under every kernel layer, its memory_limit the run's",
	}
}

// Available reports what is missing.
func (l *Language) Available() error { return l.interp.Available() }

// Validate adds the "function:" check.
func (l *Language) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	vs := languages.ValidateCommon(src, p)
	return append(vs, languages.DenyLines(src, p, "function:", func(line, target string) bool {
		return regexp.MustCompile(`(?i)(^|[^\w$>:])` + regexp.QuoteMeta(target) + `\s*\(`).MatchString(line)
	})...)
}

// Build packages the script: nothing is compiled (a parse error is a
// runtime error with PHP's message).
func (l *Language) Build(_ context.Context, _ languages.BuildEnv, src languages.Source) (*languages.Artifact, error) {
	if err := l.interp.Available(); err != nil {
		return nil, err
	}
	return l.interp.Artifact(src, []string{"-n", "-d", "display_errors=stderr", "-d", "log_errors=0", "-d", "html_errors=0"}, nil, nil), nil
}

// OutOfMemory is how PHP's fatal error for its memory_limit begins.
const OutOfMemory = "Allowed memory size of"

// TuneNative sets PHP's memory_limit to the run's memory limit less 16
// MiB (PHP's own, the interpreter's code and the job's tmpfs are outside
// it), at least 8 MiB.
func (l *Language) TuneNative(a *languages.Artifact, lim languages.ExecLimits) languages.NativeTuning {
	limit := max(lim.MemoryBytes-16<<20, 8<<20)
	cmd := []string{a.Command[0], "-d", "memory_limit=" + strconv.FormatInt(limit, 10)}
	cmd = append(cmd, a.Command[1:]...)
	return languages.NativeTuning{Command: cmd, OutOfMemory: OutOfMemory, Unset: []string{"PHPRC", "PHP_INI_SCAN_DIR"}}
}
