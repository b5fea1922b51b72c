package toolchains

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// EnvGoRoot names the environment variable that picks the Go toolchain
// used to build Go submissions (a GOROOT). Default: the GOROOT of the
// `go` found in /usr/local/go/bin, /usr/lib/go/bin or PATH.
const EnvGoRoot = "MOAT_GOROOT"

// GoRoot returns the GOROOT of the Go toolchain that builds Go guests,
// and its version ("go1.26.8"). It asks the toolchain once per process.
func GoRoot() (root, version string, err error) {
	r := goRoot()
	return r.root, r.version, r.err
}

type goInfo struct {
	root, version string
	err           error
}

var goRoot = sync.OnceValue(func() goInfo {
	var bin string
	if r := os.Getenv(EnvGoRoot); r != "" {
		bin = filepath.Join(r, "bin", "go")
	} else {
		for _, c := range []string{"/usr/local/go/bin/go", "/usr/lib/go/bin/go"} {
			if _, err := os.Stat(c); err == nil {
				bin = c
				break
			}
		}
		if bin == "" {
			p, err := exec.LookPath("go")
			if err != nil {
				return goInfo{err: fmt.Errorf("%w: no Go toolchain (install Go 1.24 or later in /usr/local/go, or set %s)", ErrMissing, EnvGoRoot)}
			}
			bin = p
		}
	}
	cmd := exec.Command(bin, "env", "GOROOT", "GOVERSION")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=")
	out, err := cmd.Output()
	if err != nil {
		return goInfo{err: fmt.Errorf("%w: %s env: %v", ErrMissing, bin, err)}
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		return goInfo{err: fmt.Errorf("%s env GOROOT GOVERSION: unexpected %q", bin, out)}
	}
	root, err := filepath.EvalSymlinks(f[0])
	if err != nil {
		return goInfo{err: err}
	}
	return goInfo{root: root, version: f[1]}
})
