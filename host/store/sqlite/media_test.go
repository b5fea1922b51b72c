package sqlite_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// TestMediaFiles: an item's bytes are one private file under media/,
// named by hashes (an organization called "../.." names no path), no
// temporary file outlives its put, a put the quota refuses leaves no
// file, and what a put that died left in media/tmp goes at the next Open.
func TestMediaFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	data := []byte("%PDF-1.7 the bytes")
	org := "../../escape"
	it, _, err := s.MediaPut(ctx, store.MediaNew{Org: org, Module: "m", Type: "application/pdf", Data: data}, 0)
	if err != nil {
		t.Fatal(err)
	}
	oh := sha256.Sum256([]byte(org))
	path := filepath.Join(dir, "media", hex.EncodeToString(oh[:]), it.ID[:2], it.ID)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("the item's file: %v", err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != int64(len(data)) {
		t.Errorf("the item's file: mode %v, %d bytes", fi.Mode(), fi.Size())
	}
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(filepath.Base(p), "moat.db") {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 1 || files[0] != path {
		t.Errorf("files beside the database: %v; want only %s", files, path)
	}
	if _, _, err := s.MediaPut(ctx, store.MediaNew{Org: org, Type: "application/pdf", Data: []byte("%PDF-1.7 more bytes, too many")}, 20); err == nil {
		t.Fatal("a put past the quota was stored")
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "media", "tmp")); len(entries) != 0 {
		t.Errorf("media/tmp holds %d files after the puts", len(entries))
	}

	// A put that died after writing its bytes left them in media/tmp.
	stale := filepath.Join(dir, "media", "tmp", "put-stale")
	young := filepath.Join(dir, "media", "tmp", "put-in-flight")
	for _, p := range []string{stale, young} {
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(stale, old, old)
	open(t, dir)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("a stale temporary file survived Open: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("Open removed a temporary file another process may be writing: %v", err)
	}

	// An item whose file an operator removed is whole again after a put
	// of its bytes, and reads as unavailable, not as another item, until
	// then.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.MediaOpen(ctx, org, it.ID); err == nil {
		t.Error("an item without its file opened")
	}
	if _, created, err := s.MediaPut(ctx, store.MediaNew{Org: org, Type: "application/pdf", Data: data}, 0); err != nil || created {
		t.Fatalf("put back: %v, created %v", err, created)
	}
	if _, data2, err := s.MediaRead(ctx, org, it.ID, abi.MaxMediaBytes); err != nil || string(data2) != string(data) {
		t.Errorf("after the put back: %q, %v", data2, err)
	}
}
