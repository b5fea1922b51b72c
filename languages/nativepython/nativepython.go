// Package nativepython is Python run natively: Debian's /usr/bin/python3
// as a confined process (host/native), for programs that need what the
// WASI CPython build lacks (C extension modules, threads, the full
// stdlib). Import it for its side effect of registering "python3-native".
// The WebAssembly Python is the "python" language.
//
// Validation profile rules: "import:MODULE" refuses `import MODULE` or
// `from MODULE import ...` (and submodules), e.g. "import:socket",
// "import:subprocess", "import:ctypes".
package nativepython

import (
	"context"
	"regexp"
	"strings"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/internal/nativelang"
)

func init() {
	languages.Register(Python)
	Python.interp.Registered()
}

// Python is the registered language.
var Python = &Language{interp: &nativelang.Interpreter{
	Binary: "python3", Package: "python3", Flag: "--version", Pattern: `Python (\d+\.\d+\.\d+)`,
}}

// Language runs Python scripts natively.
type Language struct{ interp *nativelang.Interpreter }

// Info describes native Python.
func (l *Language) Info() languages.Info {
	return languages.Info{
		Name: "python3-native", Aliases: []string{"pynative", "python-native"}, Version: l.interp.VersionOrUnknown(),
		Path: languages.PathNative, Extensions: []string{".py"},
		Toolchain: "/usr/bin/python3 " + l.interp.VersionOrUnknown() + " (native, confined)",
		Why:       "for what the WASI CPython (\"python\") lacks: C extension modules, threads, the full standard library",
	}
}

// Available reports what is missing.
func (l *Language) Available() error { return l.interp.Available() }

var importRe = regexp.MustCompile(`^\s*(?:from\s+([\w.]+)\s+import\b|import\s+(.+))`)

// Validate adds the "import:" check.
func (l *Language) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	vs := languages.ValidateCommon(src, p)
	return append(vs, languages.DenyLines(src, p, "import:", func(line, target string) bool {
		m := importRe.FindStringSubmatch(line)
		if m == nil {
			return false
		}
		var mods []string
		if m[1] != "" {
			mods = []string{m[1]}
		} else {
			for _, part := range strings.Split(m[2], ",") {
				if f := strings.Fields(part); len(f) > 0 {
					mods = append(mods, f[0])
				}
			}
		}
		for _, mod := range mods {
			if mod == target || strings.HasPrefix(mod, target+".") {
				return true
			}
		}
		return false
	})...)
}

// Build packages the script: nothing is compiled. -s leaves the user's
// site-packages out; bytecode is not written (the sources are read-only).
func (l *Language) Build(_ context.Context, _ languages.BuildEnv, src languages.Source) (*languages.Artifact, error) {
	if err := l.interp.Available(); err != nil {
		return nil, err
	}
	return l.interp.Artifact(src, []string{"-s", "-B"}, map[string]string{"PYTHONUNBUFFERED": "1"}, nil), nil
}
