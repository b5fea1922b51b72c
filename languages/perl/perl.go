// Package perl is the Perl language: scripts run by Debian's /usr/bin/perl
// as a confined native process (host/native: no network, read-only
// system, a job dir to write, limits). Perl has no maintained WASI build
// (WebPerl targets the browser through Emscripten), and Debian's perl is
// what Judge0's and Piston's Perl users run. Import it for its side effect
// of registering "perl".
//
// Validation profile rules: "use:MODULE" refuses `use MODULE` or `require
// MODULE` of MODULE or anything under it (e.g. "use:Socket",
// "use:IO::Socket").
package perl

import (
	"context"
	"regexp"
	"strings"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/internal/nativelang"
)

func init() {
	languages.Register(Perl)
	Perl.interp.Registered()
}

// Perl is the registered language.
var Perl = &Language{interp: &nativelang.Interpreter{
	Binary: "perl", Package: "perl", Flag: "--version", Pattern: `\(v(\d+\.\d+\.\d+)\)`,
}}

// Language runs Perl scripts.
type Language struct{ interp *nativelang.Interpreter }

var _ languages.Language = (*Language)(nil)
var _ languages.Checker = (*Language)(nil)

// Info describes Perl.
func (l *Language) Info() languages.Info {
	return languages.Info{
		Name: "perl", Aliases: []string{"pl", "perl5"}, Version: l.interp.VersionOrUnknown(),
		Path: languages.PathNative, Extensions: []string{".pl", ".pm"},
		Toolchain: "/usr/bin/perl " + l.interp.VersionOrUnknown() + " (native, confined)",
		Why:       "Perl has no maintained WASI build; Debian's perl runs under every kernel layer",
	}
}

// Available reports what is missing.
func (l *Language) Available() error { return l.interp.Available() }

var useRe = regexp.MustCompile(`^\s*(?:use|require)\s+([A-Za-z_][\w:]*)`)

// Validate adds the "use:" check.
func (l *Language) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	vs := languages.ValidateCommon(src, p)
	return append(vs, languages.DenyLines(src, p, "use:", func(line, target string) bool {
		m := useRe.FindStringSubmatch(line)
		return m != nil && (m[1] == target || strings.HasPrefix(m[1], target+"::"))
	})...)
}

// Build packages the script: nothing is compiled. The script's own
// directory (/src, a word of its own so the executor finds it) is on
// @INC, so a submission's .pm files load.
func (l *Language) Build(_ context.Context, _ languages.BuildEnv, src languages.Source) (*languages.Artifact, error) {
	if err := l.interp.Available(); err != nil {
		return nil, err
	}
	return l.interp.Artifact(src, []string{"-I", languages.SrcGuestPath}, nil, nil), nil
}
