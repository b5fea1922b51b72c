// Package atomicfile writes a file whole or not at all, as wazero writes
// its compile cache: the bytes go to a temporary file beside the target,
// which is synced and renamed over it. A reader, or a process sharing the
// directory, sees the old file or the new one, never half of one, and a
// crash leaves at most a stray temporary file.
package atomicfile

import (
	"io"
	"os"
	"path/filepath"
)

// Write writes data to path (mode 0600: moat's caches hold machine code,
// guests' memory and builds, the host's alone). path's directory must
// exist.
func Write(path string, data []byte) error {
	return WriteFrom(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFrom is Write of what write writes, streamed to the temporary
// file: nothing is renamed over path when write fails.
func WriteFrom(path string, write func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	err = write(f)
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
