// Package atomicfile writes a file whole or not at all, as wazero writes
// its compile cache: the bytes go to a temporary file beside the target,
// which is synced and renamed over it. A reader, or a process sharing the
// directory, sees the old file or the new one, never half of one, and a
// crash leaves at most a stray temporary file.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes data to path (mode 0600: moat's caches hold machine code,
// guests' memory and builds, the host's alone). path's directory must
// exist.
func Write(path string, data []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
