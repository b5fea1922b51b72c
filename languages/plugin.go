package languages

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/moat-sandbox/moat/internal/plugintree"
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
// The tree is read as every path reads a plugin's tree (package
// plugintree): a link or a special file is refused, naming it; build
// outputs and dependency trees (dot entries, node_modules, target) are
// left out unread, and so is *.wasm; more than MaxPluginSourceBytes is
// refused.
func CopyPluginSource(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	return plugintree.Walk(src, plugintree.Options{SkipOutputs: true, MaxBytes: MaxPluginSourceBytes}, func(e plugintree.Entry) error {
		t := filepath.Join(dst, filepath.FromSlash(e.Rel))
		switch {
		case e.Info.IsDir():
			return os.MkdirAll(t, 0o755)
		case strings.HasSuffix(e.Rel, ".wasm"):
			return nil
		}
		b, err := e.Read()
		if err != nil {
			return err
		}
		return os.WriteFile(t, b, 0o644)
	})
}
