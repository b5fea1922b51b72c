package languages

import (
	"context"
	"os"
	"path/filepath"
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
