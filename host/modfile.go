package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ReadModule reads a module from path: a .wasm file, or a plugin directory
// holding DIRNAME.wasm or exactly one .wasm file. It returns the bytes and
// a module name derived from the file or directory name.
func ReadModule(path string) (wasm []byte, name string, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, "", fmt.Errorf("module %s: %w", path, unwrapPathError(err))
	}
	file := path
	if st.IsDir() {
		base := filepath.Base(filepath.Clean(path))
		if abs, err := filepath.Abs(path); err == nil {
			base = filepath.Base(abs)
		}
		file = filepath.Join(path, base+".wasm")
		if _, err := os.Stat(file); err != nil {
			matches, _ := filepath.Glob(filepath.Join(path, "*.wasm"))
			switch len(matches) {
			case 0:
				return nil, "", fmt.Errorf("module %s: the directory holds no .wasm file; build the plugin first (for Go: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o %s .)", path, file)
			case 1:
				file = matches[0]
			default:
				return nil, "", fmt.Errorf("module %s: the directory holds %d .wasm files and none is named %s.wasm; name the file to run", path, len(matches), base)
			}
		}
		name = base
	} else {
		name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	wasm, err = os.ReadFile(file)
	if err != nil {
		return nil, "", fmt.Errorf("module %s: %w", file, unwrapPathError(err))
	}
	return wasm, SanitizeModuleName(name), nil
}

// SanitizeModuleName turns a file name into a valid module name: lower
// case, other characters replaced by '-'.
func SanitizeModuleName(s string) string {
	var b strings.Builder
	for i, r := range strings.ToLower(s) {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || i > 0 && strings.ContainsRune("._-", r)
		if !ok {
			r = '-'
			if i == 0 {
				r = 'm'
			}
		}
		b.WriteRune(r)
	}
	n := b.String()
	if len(n) > 64 {
		n = n[:64]
	}
	if n == "" {
		n = "module"
	}
	return n
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
