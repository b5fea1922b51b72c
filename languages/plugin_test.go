package languages_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/internal/plugintree"
	"github.com/moat-sandbox/moat/languages"
)

// TestCopyPluginSource: the build's copy of a plugin takes its sources
// (subdirectories too) into a destination it makes, leaves out modules,
// dot entries, node_modules and target unread, and refuses a link or a
// FIFO anywhere else, naming it, without copying the link's target.
func TestCopyPluginSource(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "id")
	os.WriteFile(secret, []byte("SECRET"), 0o600)
	plugin := func(t *testing.T) string {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
		os.MkdirAll(filepath.Join(dir, "node_modules", "x"), 0o755)
		os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "sub", "a.go"), []byte("package sub\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "p.wasm"), []byte("\x00asm"), 0o644)
		os.Symlink(secret, filepath.Join(dir, ".env"))
		os.Symlink(secret, filepath.Join(dir, "node_modules", "x", "k"))
		return dir
	}
	dst := filepath.Join(t.TempDir(), "plugin")
	if err := languages.CopyPluginSource(plugin(t), dst); err != nil {
		t.Fatal(err)
	}
	var got []string
	filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dst, p)
			got = append(got, rel)
		}
		return nil
	})
	if strings.Join(got, ",") != "main.go,sub/a.go" {
		t.Errorf("copied %v, want main.go and sub/a.go", got)
	}
	for _, tc := range []struct {
		name, entry string
		plant       func(p string)
		want        string
	}{
		{"link to a file outside", "helpers.go", func(p string) { os.Symlink(secret, p) }, "helpers.go is a symbolic link (to " + secret + ")"},
		{"link in a subdirectory", "sub/k.go", func(p string) { os.Symlink(secret, p) }, "k.go is a symbolic link"},
		{"link to a directory outside", "lib", func(p string) { os.Symlink(filepath.Dir(secret), p) }, "lib is a symbolic link"},
		{"FIFO", "pipe.go", func(p string) { syscall.Mkfifo(p, 0o644) }, "pipe.go is a FIFO"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := plugin(t)
			tc.plant(filepath.Join(dir, tc.entry))
			dst := filepath.Join(t.TempDir(), "plugin")
			err := languages.CopyPluginSource(dir, dst)
			if !plugintree.IsError(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CopyPluginSource: %v; want a refusal with %q", err, tc.want)
			}
			filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
				if b, _ := os.ReadFile(p); err == nil && !d.IsDir() && string(b) == "SECRET" {
					t.Errorf("%s holds the secret", p)
				}
				return nil
			})
		})
	}
}
