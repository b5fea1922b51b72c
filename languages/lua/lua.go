// Package lua is the Lua language: scripts run by Debian's
// /usr/bin/lua5.4 as a confined native process (host/native: no network,
// read-only system, a job dir to write, limits); see docs/RATIONALE.md for
// why not a WASI build. Import it for its side effect of registering
// "lua".
//
// A script's sibling modules load with require: the script's own
// directory is first on package.path.
//
// Validation profile rules: "require:MODULE" refuses `require "MODULE"`
// (or require("MODULE"), require 'MODULE') of MODULE or a submodule
// (e.g. "require:socket").
package lua

import (
	"context"
	"regexp"
	"strings"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/internal/nativelang"
)

func init() {
	languages.Register(Lua)
	Lua.interp.Registered()
}

// Lua is the registered language.
var Lua = &Language{interp: &nativelang.Interpreter{
	Binary: "lua5.4", Package: "lua5.4", Flag: "-v", Pattern: `Lua (\d+\.\d+\.\d+)`,
}}

// Language runs Lua scripts.
type Language struct{ interp *nativelang.Interpreter }

var (
	_ languages.Language = (*Language)(nil)
	_ languages.Checker  = (*Language)(nil)
)

// Info describes Lua.
func (l *Language) Info() languages.Info {
	return languages.Info{
		Name: "lua", Aliases: []string{"lua5.4", "lua54"}, Version: l.interp.VersionOrUnknown(),
		Path: languages.PathNative, Extensions: []string{".lua"},
		Toolchain: "/usr/bin/lua5.4 " + l.interp.VersionOrUnknown() + " (native, confined)",
		Why:       "Lua's WASI build lacks its error handling (setjmp) without patches; Debian's lua5.4 runs under every kernel layer",
	}
}

// Available reports what is missing.
func (l *Language) Available() error { return l.interp.Available() }

var requireRe = regexp.MustCompile(`\brequire\s*\(?\s*["']([\w.]+)["']`)

// Validate adds the "require:" check.
func (l *Language) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	vs := languages.ValidateCommon(src, p)
	return append(vs, languages.DenyLines(src, p, "require:", func(line, target string) bool {
		for _, m := range requireRe.FindAllStringSubmatch(line, -1) {
			if m[1] == target || strings.HasPrefix(m[1], target+".") {
				return true
			}
		}
		return false
	})...)
}

// pathFromScript puts the script's directory first on package.path. It
// runs before the script (lua's -e), reading the script's path from
// arg[0], which lua sets before it runs -e.
const pathFromScript = `package.path = (arg[0]:match("^(.*/)") or "./") .. "?.lua;" .. package.path`

// Build packages the script: nothing is compiled (lua compiles as it
// loads; a syntax error is a runtime error with lua's message).
func (l *Language) Build(_ context.Context, _ languages.BuildEnv, src languages.Source) (*languages.Artifact, error) {
	if err := l.interp.Available(); err != nil {
		return nil, err
	}
	return l.interp.Artifact(src, []string{"-e", pathFromScript}, nil, nil), nil
}
