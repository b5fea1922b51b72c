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
	"maps"
	"path/filepath"
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

// Info describes native Python, with the data packages Debian installed
// beside it (numpy, pandas: python3-numpy, python3-pandas).
func (l *Language) Info() languages.Info {
	tc := "/usr/bin/python3 " + l.interp.VersionOrUnknown() + " (native, confined)"
	if pk := DataPackages(); len(pk) > 0 {
		tc += " with " + strings.Join(pk, ", ")
	}
	return languages.Info{
		Name: "python3-native", Aliases: []string{"pynative", "python-native"}, Version: l.interp.VersionOrUnknown(),
		Path: languages.PathNative, Extensions: []string{".py"},
		Toolchain: tc,
		Why:       "for what the WASI CPython (\"python\") lacks: C extension modules (numpy, pandas), threads, the full standard library",
	}
}

// distPackages is where Debian's python3-* packages install.
const distPackages = "/usr/lib/python3/dist-packages"

// dataPackages are the packages Info names when Debian installed them:
// what Judge0's and Piston's users ask for most.
var dataPackages = []string{"numpy", "pandas"}

// DataPackages lists the data packages installed for /usr/bin/python3,
// each with its version ("numpy 1.24.2"), read from the metadata
// directories Debian's packages install (no interpreter is started).
func DataPackages() []string {
	var out []string
	for _, name := range dataPackages {
		for _, pat := range []string{name + "-*.egg-info", name + "-*.dist-info"} {
			m, _ := filepath.Glob(filepath.Join(distPackages, pat))
			if len(m) == 0 {
				continue
			}
			v := strings.TrimPrefix(filepath.Base(m[0]), name+"-")
			v = strings.TrimSuffix(strings.TrimSuffix(v, ".egg-info"), ".dist-info")
			v, _, _ = strings.Cut(v, "-py") // numpy-1.24.2-py3.11.egg-info
			out = append(out, name+" "+v)
			break
		}
	}
	return out
}

// threadEnv holds the numerical libraries numpy and pandas load to one
// thread each. OpenBLAS (numpy's BLAS on Debian) otherwise starts a
// thread per CPU of the host the moment numpy is imported: on a large
// host that alone passes the job's process limit (native.DefaultPids,
// 64), where pthread_create fails and OpenBLAS aborts; and a job has one
// CPU's quota anyway, so more threads only contend for it. A program
// may still start threads of its own, within the process limit.
var threadEnv = map[string]string{
	"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
	"NUMEXPR_NUM_THREADS": "1", "NUMEXPR_MAX_THREADS": "1", "BLIS_NUM_THREADS": "1",
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
	env := map[string]string{"PYTHONUNBUFFERED": "1"}
	maps.Copy(env, threadEnv)
	return l.interp.Artifact(src, []string{"-s", "-B"}, env, nil), nil
}
