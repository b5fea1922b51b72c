package wasmsnap_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// TestOpenRefusesForeignImages: a file that is not the image saved under
// its name is refused with the reason (never restored): another image
// copied or renamed over it, a truncated one, another format's, an empty
// file, a module's with other globals; a missing one is fs.ErrNotExist.
func TestOpenRefusesForeignImages(t *testing.T) {
	dir := t.TempDir()
	img := &wasmsnap.Image{Pages: 1, Globals: []uint64{7}, Runs: []wasmsnap.Run{{Off: 16, Data: []byte("state")}}}
	other := filepath.Join(dir, "other.img")
	if err := wasmsnap.Save(other, img); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(other)
	v2 := append([]byte("moatimg\x02"), good[len("moatimg\x03"):]...)
	for _, c := range []struct {
		name  string
		bytes []byte // nil: no file
		want  string
	}{
		{"missing", nil, "no such file"},
		{"copied from another image", good, `made as "other.img"`},
		{"truncated", good[:len(good)/2], "not an image"},
		{"empty", []byte{}, "not an image"},
		{"the previous format", v2, "not an image"},
		{"garbage", []byte("#!/bin/sh\nrm -rf /\n"), "not an image"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "m.img")
			os.Remove(path)
			if c.bytes != nil {
				if err := os.WriteFile(path, c.bytes, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := wasmsnap.Open(path, 1)
			if got != nil || err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Open = %v, %v; want no image, an error saying %q", got, err, c.want)
			}
			if (c.bytes == nil) != errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Open's error %v: fs.ErrNotExist only for a missing file", err)
			}
		})
	}
	if _, err := wasmsnap.Open(other, 2); err == nil || !strings.Contains(err.Error(), "has 1 globals; the module has 2") {
		t.Errorf("Open for other globals: %v", err)
	}
	if got, err := wasmsnap.Open(other, 1); err != nil || got.Key != "other.img" {
		t.Errorf("Open of the image saved there = %+v, %v", got, err)
	}
}
