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
// code-execution submission: the compiler runs under RunTool with dir and
// its enclosing project readable, and writes only env.WorkDir.
type PluginBuilder interface {
	BuildPlugin(ctx context.Context, env BuildEnv, dir string) ([]byte, error)
}

// ProjectRoot returns the nearest ancestor of dir (or dir itself) holding
// a go.mod or a .git, or dir when there is
// none: the tree a plugin build may read (its SDK, its module's go.mod).
func ProjectRoot(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return dir
	}
	for d := abs; ; d = filepath.Dir(d) {
		for _, marker := range []string{"go.mod", ".git"} {
			if _, err := os.Stat(filepath.Join(d, marker)); err == nil {
				return d
			}
		}
		if filepath.Dir(d) == d {
			return abs
		}
	}
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

// Reachable reports whether p can be read by any user: every directory
// above it is world-searchable and p itself world-readable. A confined job
// runs as another uid (65534 when moat is root), so a path that is not
// reachable cannot be granted to it.
func Reachable(p string) bool {
	abs, err := filepath.Abs(p)
	if err != nil {
		return false
	}
	fi, err := os.Stat(abs)
	if err != nil || fi.Mode().Perm()&0o004 == 0 {
		return false
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if filepath.Dir(d) == d {
			return true
		}
	}
}
