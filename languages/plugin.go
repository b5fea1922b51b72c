package languages

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// PluginBuilder is implemented by a compiled language that can build a
// moat plugin (a WASI reactor exporting the moat ABI) from a source
// directory, for `moat build`. The directory is trusted no more than a
// code-execution submission: it is copied into env.WorkDir
// (CopyPluginSource) with the guest SDK the binary carries (package
// guests), and the compiler runs under RunTool reading and writing only
// env.WorkDir (and the toolchain, read-only).
type PluginBuilder interface {
	BuildPlugin(ctx context.Context, env BuildEnv, dir string) ([]byte, error)
}

// MaxPluginSourceBytes bounds what CopyPluginSource copies.
const MaxPluginSourceBytes = 64 << 20

// CopyPluginSource copies the plugin's source directory into dst, so the
// confined compiler reads a copy in its own work dir rather than a tree
// the job uid may not be able to reach (a directory under a 0700 home).
// Build outputs and dependency trees (.git, node_modules, target, *.wasm)
// are left out; more than MaxPluginSourceBytes is refused.
func CopyPluginSource(src, dst string) error {
	var total int64
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		name := d.Name()
		if rel != "." && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "target") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		t := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(t, 0o755)
		case !d.Type().IsRegular() || strings.HasSuffix(name, ".wasm"):
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if total += int64(len(b)); total > MaxPluginSourceBytes {
			return fmt.Errorf("%s holds more than %d MiB of source: move build outputs out of it", src, MaxPluginSourceBytes>>20)
		}
		return os.WriteFile(t, b, 0o644)
	})
}
