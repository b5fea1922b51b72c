package host

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The images on disk stay under their bound: the least recently used go
// first, and other files are left alone.
func TestPruneImages(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	for i, name := range []string{"old.img", "mid.img", "new.img", "x.entry"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, 100), 0o600); err != nil {
			t.Fatal(err)
		}
		at := now.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	pruneImages(dir, 250)
	for name, want := range map[string]bool{"old.img": false, "mid.img": true, "new.img": true, "x.entry": true} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s kept: %v, want %v", name, err == nil, want)
		}
	}
}
