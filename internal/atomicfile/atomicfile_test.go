package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/internal/atomicfile"
)

// TestWrite: the file holds the new bytes, mode 0600, over an old one, and
// no temporary file is left; a directory that does not exist fails and
// leaves nothing.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	for _, data := range []string{"old", "new bytes"} {
		if err := atomicfile.Write(p, []byte(data)); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != data {
			t.Fatalf("after writing %q: %q, %v", data, b, err)
		}
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in the directory, want only f", len(entries))
	}
	if err := atomicfile.Write(filepath.Join(dir, "missing", "f"), []byte("x")); err == nil {
		t.Error("a write into a missing directory succeeded")
	}
}
