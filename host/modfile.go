package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/moat-sandbox/moat/internal/plugintree"
	"github.com/moat-sandbox/moat/policy"
)

// ManifestFile is the name of a module's manifest beside it.
const ManifestFile = "moat.yaml"

// Bundle is a module as it lies on disk: the WebAssembly bytes, and the
// manifest and signature beside them when there are any.
type Bundle struct {
	Path          string // the .wasm file
	Wasm          []byte
	Name          string
	Manifest      *policy.Manifest
	ManifestPath  string
	ManifestBytes []byte
	Signature     []byte // the .minisig file, nil when unsigned
	SignaturePath string
}

// Options returns LoadOptions carrying the bundle's name, manifest and
// signature.
func (b *Bundle) Options() LoadOptions {
	return LoadOptions{Name: b.Name, Manifest: b.Manifest, ManifestBytes: b.ManifestBytes, Signature: b.Signature}
}

// ReadBundle reads a module from path: a plugin directory (holding
// moat.yaml and the module it names, or DIRNAME.wasm, or exactly one .wasm
// file), or a .wasm file (with the moat.yaml beside it when that manifest
// names this file). The signature is the module file plus ".minisig".
func ReadBundle(path string) (*Bundle, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", path, unwrapPathError(err))
	}
	b := &Bundle{}
	dir := path
	if !st.IsDir() {
		dir = filepath.Dir(path)
	}
	if mf, raw, mpath, err := readManifest(dir); err != nil {
		return nil, err
	} else if mf != nil {
		file := mf.Module
		if file == "" {
			file = mf.Name + ".wasm"
		}
		if st.IsDir() || filepath.Base(path) == file {
			b.Manifest, b.ManifestBytes, b.ManifestPath = mf, raw, mpath
			b.Path, b.Name = filepath.Join(dir, file), mf.Name
		}
	}
	if b.Path == "" {
		if st.IsDir() {
			if b.Path, err = findWasm(path); err != nil {
				return nil, err
			}
		} else {
			b.Path = path
		}
		b.Name = SanitizeModuleName(strings.TrimSuffix(filepath.Base(b.Path), filepath.Ext(b.Path)))
		if st.IsDir() {
			b.Name = SanitizeModuleName(dirName(path))
		}
	}
	// The module, its signature and manifest are files of the plugin's
	// tree, read by its rule (package plugintree): a link or a special
	// file is refused, so that what is run, signed and deployed is what
	// lies in the directory.
	if b.Wasm, err = plugintree.ReadFile(filepath.Dir(b.Path), filepath.Base(b.Path)); err != nil {
		hint := ""
		if errors.Is(err, fs.ErrNotExist) && b.Manifest != nil {
			hint = fmt.Sprintf(" (named by %s; build the module first: moat build %s)", b.ManifestPath, filepath.Dir(b.ManifestPath))
		}
		return nil, fmt.Errorf("module %s: %w%s", b.Path, unwrapPathError(err), hint)
	}
	b.SignaturePath = policy.SignatureFile(b.Path)
	if sig, err := plugintree.ReadFile(filepath.Dir(b.SignaturePath), filepath.Base(b.SignaturePath)); err == nil {
		b.Signature = sig
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("signature %s: %w", b.SignaturePath, unwrapPathError(err))
	}
	return b, nil
}

func readManifest(dir string) (*policy.Manifest, []byte, string, error) {
	p := filepath.Join(dir, ManifestFile)
	raw, err := plugintree.ReadFile(dir, ManifestFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, "", nil
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("manifest %s: %w", p, unwrapPathError(err))
	}
	mf, err := policy.ParseManifest(p, raw)
	if err != nil {
		return nil, nil, "", err
	}
	return mf, raw, p, nil
}

func dirName(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return filepath.Base(abs)
	}
	return filepath.Base(filepath.Clean(path))
}

func findWasm(dir string) (string, error) {
	base := dirName(dir)
	file := filepath.Join(dir, base+".wasm")
	if _, err := os.Stat(file); err == nil {
		return file, nil
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "*.wasm"))
	switch len(matches) {
	case 0:
		return "", fmt.Errorf("module %s: the directory holds no .wasm file and no %s; build the plugin first: `moat new NAME --lang LANG` makes one with its %s, and `moat build %s` builds it", dir, ManifestFile, ManifestFile, dir)
	case 1:
		return matches[0], nil
	default:
		return "", fmt.Errorf("module %s: the directory holds %d .wasm files and none is named %s.wasm; name the file to run, or add a %s", dir, len(matches), base, ManifestFile)
	}
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
