package wasmsnap_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/wasmsnap"
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
	wasmsnap.Prune(dir, 250)
	for name, want := range map[string]bool{"old.img": false, "mid.img": true, "new.img": true, "x.entry": true} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s kept: %v, want %v", name, err == nil, want)
		}
	}
}

// An image saved is loaded back; one of a module with other globals, a
// damaged one or none at all is not.
func TestSaveLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "images", "m.img")
	img := &wasmsnap.Image{Pages: 1, Globals: []uint64{7}, Runs: []wasmsnap.Run{{Off: 16, Data: []byte("state")}}}
	if wasmsnap.Load(path, 1) != nil {
		t.Fatal("loaded an image that was never saved")
	}
	if err := wasmsnap.Save(path, img); err != nil {
		t.Fatal(err)
	}
	if got := wasmsnap.Load(path, 1); got == nil || string(got.Runs[0].Data) != "state" {
		t.Fatalf("loaded %+v", got)
	}
	if wasmsnap.Load(path, 2) != nil {
		t.Error("loaded an image for a module with other globals")
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("image file: %v, %v; want mode 0600", info, err)
	}
	b, _ := os.ReadFile(path)
	b[len(b)/2] ^= 1
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if wasmsnap.Load(path, 1) != nil {
		t.Error("loaded a damaged image")
	}
}
