// Package python holds moat.py, the moat guest SDK for Python. The python
// language ships it beside each script (as moat.py, unless the submission
// has a file of that name); the script's directory is on sys.path, so a
// script imports it with
//
//	import moat
//
// A native plugin (python3 as a confined worker on the pipe transport)
// finds it through PYTHONPATH: WriteSDK puts it in a directory the worker
// may read.
//
// See moat.py for the API and the two transports underneath.
package python

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// SDK is the source of moat.py.
//
//go:embed moat.py
var SDK []byte

// FileName is the name the SDK has beside a script.
const FileName = "moat.py"

// Wanted reports whether a native worker declared with language and
// command runs Python, and so needs this SDK: the manifest says language:
// python, or its program is python, python3 or python3.N. moat run and
// moat serve decide it alike.
func Wanted(language string, command []string) bool {
	if language == "python" {
		return true
	}
	if len(command) == 0 {
		return false
	}
	p := filepath.Base(command[0])
	return p == "python" || p == "python3" || strings.HasPrefix(p, "python3.")
}

// WriteSDK writes moat.py into dir (created 0755 if missing), readable by
// every uid (a confined worker runs as a uid of its own), unless the same
// bytes are there already, and returns the environment a native python3
// worker needs to import it: PYTHONPATH=dir, and no bytecode written (the
// directory is read-only to the worker).
func WriteSDK(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("python SDK: %w", err)
	}
	path := filepath.Join(dir, FileName)
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, SDK) {
		tmp, err := os.CreateTemp(dir, ".moat-*.py")
		if err != nil {
			return nil, fmt.Errorf("python SDK: %w", err)
		}
		_, werr := tmp.Write(SDK)
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o644)); err != nil {
			os.Remove(tmp.Name())
			return nil, fmt.Errorf("python SDK: %w", err)
		}
		if err := os.Rename(tmp.Name(), path); err != nil {
			os.Remove(tmp.Name())
			return nil, fmt.Errorf("python SDK: %w", err)
		}
	}
	return []string{"PYTHONPATH=" + dir, "PYTHONDONTWRITEBYTECODE=1"}, nil
}
