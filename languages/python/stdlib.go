package python

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/moat-sandbox/moat/toolchains"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// The standard library outside the interpreter.
//
// python.wasm carries its standard library as /usr/local/lib/python312.zip
// in its embedded (wasi-vfs) file system, and CPython imports from a zip
// through zipimport, which reads the zip's whole central directory in
// interpreted Python before the first module loads: 30 to 40 ms of every
// run's start-up on the test machine. The same compiled modules as plain
// files, with PYTHONHOME pointing at them, cut that to the cost of opening
// the files (BenchmarkRun: about 140 ms → 95 ms a run).
//
// `make toolchains` extracts them once (ExtractStdlib) into the toolchain
// directory; a run then mounts them read-only at GuestHome. Where they have
// not been extracted, Build leaves the interpreter on its zip, which works
// the same, only slower.
const (
	// StdlibDir is where ExtractStdlib puts the library, relative to the
	// toolchain directory: StdlibDir/lib/python3.12/*.pyc.
	StdlibDir = "python-stdlib/" + Version
	// GuestHome is where a run sees it: PYTHONHOME, so sys.prefix.
	GuestHome = "/opt/python"
	// stdlibMarker is written last: a directory without it is incomplete.
	stdlibMarker = ".complete"
	// zipInGuest is the zip inside python.wasm's embedded file system.
	zipInGuest = "/usr/local/lib/python312.zip"
)

// Stdlib returns the host directory to mount at GuestHome when the library
// has been extracted into toolchainDir (empty: the default toolchain
// directory), or "" when it has not.
func Stdlib(toolchainDir string) string {
	if toolchainDir == "" {
		if toolchainDir = toolchains.Dir(); toolchainDir == "" {
			return ""
		}
	}
	home := filepath.Join(toolchainDir, filepath.FromSlash(StdlibDir))
	if _, err := os.Stat(filepath.Join(home, stdlibMarker)); err != nil {
		return ""
	}
	return home
}

// ExtractStdlib copies the standard library out of wasm (python.wasm)
// into toolchainDir/StdlibDir, for Stdlib. It runs the interpreter once
// under a private wazero runtime with only a scratch directory mounted
// (the interpreter is the toolchain's own, not user code), unpacks the zip
// with archive/zip, and renames the result into place, so a failure or a
// concurrent extraction never leaves a half-written library in use.
// Progress lines go to progress (may be nil).
func ExtractStdlib(ctx context.Context, wasm []byte, toolchainDir string, progress io.Writer) error {
	if progress == nil {
		progress = io.Discard
	}
	final := filepath.Join(toolchainDir, filepath.FromSlash(StdlibDir))
	if Stdlib(toolchainDir) != "" {
		fmt.Fprintf(progress, "python: standard library already in %s\n", final)
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return fmt.Errorf("python stdlib: %w", err)
	}
	scratch, err := os.MkdirTemp(filepath.Dir(final), ".extract-")
	if err != nil {
		return fmt.Errorf("python stdlib: %w", err)
	}
	defer os.RemoveAll(scratch)

	fmt.Fprintf(progress, "python: compiling the interpreter to copy its standard library out (%d MB, about 5 s)\n", len(wasm)>>20)
	zipPath := filepath.Join(scratch, "python312.zip")
	if err := copyZipOut(ctx, wasm, scratch); err != nil {
		return err
	}
	fmt.Fprintf(progress, "python: unpacking the standard library into %s\n", final)
	home := filepath.Join(scratch, "home")
	n, err := unzip(zipPath, filepath.Join(home, "lib", "python3.12"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(home, stdlibMarker), []byte(Version+"\n"), 0o644); err != nil {
		return fmt.Errorf("python stdlib: %w", err)
	}
	os.RemoveAll(final) // an incomplete earlier attempt
	if err := os.Rename(home, final); err != nil {
		return fmt.Errorf("python stdlib: %w", err)
	}
	fmt.Fprintf(progress, "python: standard library ready (%d files)\n", n)
	return nil
}

// copyZipOut runs python.wasm to copy zipInGuest to dir/python312.zip.
func copyZipOut(ctx context.Context, wasm []byte, dir string) error {
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	var stderr bytes.Buffer
	cfg := wazero.NewModuleConfig().WithName("python").
		WithArgs("python", "-S", "-c", "import shutil; shutil.copyfile('"+zipInGuest+"', '/out/python312.zip')").
		WithFSConfig(wazero.NewFSConfig().WithDirMount(dir, "/out")).
		WithStderr(&stderr)
	_, err := r.InstantiateWithConfig(ctx, wasm, cfg)
	if err != nil && !isExit0(err) {
		return fmt.Errorf("python stdlib: copying %s out of the interpreter: %w: %s", zipInGuest, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

func isExit0(err error) bool {
	var ee interface{ ExitCode() uint32 }
	return errors.As(err, &ee) && ee.ExitCode() == 0
}

// unzip extracts the zip at path into dir, refusing entries that would
// land outside it, and returns the number of files written.
func unzip(path, dir string) (int, error) {
	zr, err := zip.OpenReader(path)
	if err != nil {
		return 0, fmt.Errorf("python stdlib: %w", err)
	}
	defer zr.Close()
	n := 0
	for _, f := range zr.File {
		name := filepath.FromSlash(f.Name)
		if !filepath.IsLocal(name) {
			return n, fmt.Errorf("python stdlib: zip entry %q is not a relative path inside the library", f.Name)
		}
		p := filepath.Join(dir, name)
		if f.FileInfo().IsDir() {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return n, fmt.Errorf("python stdlib: %w", err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return n, fmt.Errorf("python stdlib: %w", err)
		}
		if err := extractFile(f, p); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func extractFile(f *zip.File, p string) error {
	rc, err := f.Open()
	if err != nil {
		return fmt.Errorf("python stdlib: %s: %w", f.Name, err)
	}
	defer rc.Close()
	out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("python stdlib: %w", err)
	}
	if _, err := io.Copy(out, rc); err != nil {
		out.Close()
		return fmt.Errorf("python stdlib: %s: %w", f.Name, err)
	}
	return out.Close()
}
