package host

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/moat-sandbox/moat/host/internal/codeshare"
	"github.com/moat-sandbox/moat/internal/atomicfile"
	"github.com/moat-sandbox/moat/internal/moatdir"
)

// The machine's cache (Config.MachineCacheDir).
//
// An interpreter's first load costs a minute of CPU: wazero compiles
// CPython's 26 MB (or ruby.wasm's 40) to machine code, the host rewrites
// it, finds its snapshot entry and captures the image of its start. None
// of that depends on the data directory: it is made from the toolchains'
// bytes alone. Kept per data directory, every new one (a server's
// data_dir, a user's home, a test's, `moat exec --data`) paid it again, so
// a loaded machine answered a first `moat exec --lang python` after 70 s.
// So what a load of the machine's toolchain makes (LoadOptions.Toolchain)
// is kept once per machine, beside the toolchains: the rewritten module
// and the snapshot entry and the command image read from there directly,
// and wazero's file (wazero reads only its own cache directory) hard-linked
// into the host's cache directory before the compile, and from it into the
// machine's after. What a tenant's code makes, and every image that may
// hold a tenant's state (a resident script's, one with file grants), stays
// in the host's own cache directory.
//
// Each file is named by everything that shapes it, as in the host's own
// cache: wazero's by the module's bytes and the CPU's features, under a
// directory of wazero's version and platform, itself under one named by
// the build's wazero, Go and runtime configuration (machineCodeDir); the
// rewritten module by its digest, table cap and the rewrite's version; an
// image by its inputs (imageInputs). Each carries its own check (wazero's
// checksum and version, the rewritten module's CRC, the image format's),
// and a file that fails it is made again. The directory is trusted as the
// host's own cache is, so it must be as private: the host uses it only
// when it is owned by the user it runs as and writable by no one else
// (moatdir.OwnedDir), else it keeps everything in its cache directory.

// machineDirFor returns dir when the host may use it as the machine's
// cache (made when missing, the host's alone), else "" with the reason.
func machineDirFor(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := moatdir.OwnedDir(dir); err != nil {
		return "", err
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return dir, nil
}

// codeDir is where a load keeps what it makes from its bytes alone (the
// rewritten module, the snapshot entry): the machine's cache for the
// machine's toolchain (LoadOptions.Toolchain), else the cache directory.
func (h *Host) codeDir(toolchain bool) string {
	if toolchain && h.machineDir != "" {
		return h.machineDir
	}
	return h.cacheDir
}

// machineCodeFile is where the machine's cache keeps the wazero file the
// host's compilation cache keeps at file (a path under the cache
// directory); "" when it has no place there.
func (h *Host) machineCodeFile(file string) string {
	rel, err := filepath.Rel(h.cacheDir, file)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return ""
	}
	fp := codeshare.CurrentFingerprint(h.cfg.DebugInfo, hostCloseOnContextDone)
	id := SnapshotKey([]byte(fp.WazeroSum), []byte(fp.GoVersion), []byte(fp.RuntimeConfig))[:16]
	return filepath.Join(h.machineDir, "code-"+id, rel)
}

// shareFile makes to the same file as from when to is missing and from is
// a regular file: a hard link (no copy, and either name may go without
// the other), else a copy written whole under a temporary name. It
// reports whether to is there now.
func shareFile(from, to string) bool {
	if _, err := os.Lstat(to); err == nil {
		return true
	}
	fi, err := os.Lstat(from)
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		return false
	}
	if err := os.Link(from, to); err == nil || errors.Is(err, os.ErrExist) {
		return true
	}
	f, err := os.Open(from)
	if err != nil {
		return false
	}
	defer f.Close()
	return atomicfile.WriteFrom(to, func(w io.Writer) error {
		_, err := io.Copy(w, f)
		return err
	}) == nil
}
