package server_test

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/server"
)

// diskUse is the bytes of the regular files under dir, and how many of
// them there are.
func diskUse(t *testing.T, dir string) (bytes int64, files int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			bytes += fi.Size()
			files++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bytes, files
}

// TestModuleQuotaKeepsNothingPruned: an organization uploading 60
// versions of a 4 MiB module, 5 of them kept, leaves the data directory
// and the compilation cache holding about the 5: a pruned version's
// bytes leave the store with it (they were kept for an hour, outside the
// quota: 486 MiB for 60 uploads) and its machine code leaves the cache
// (kept forever). Under -short, 20 uploads.
func TestModuleQuotaKeepsNothingPruned(t *testing.T) {
	t.Parallel() // its own server and data directory; it mostly waits (uploads, task runners)
	const (
		size = 4 << 20
		kept = server.DefaultModuleKeepPerModule
	)
	uploads := 60
	if testing.Short() {
		// Enough that versions left behind (19 of 4 MiB) are over the
		// limit below (3 × kept), at a third of the uploads.
		uploads = 20
	}
	data, cache := t.TempDir(), t.TempDir()
	ts := start(t, data, func(c *server.Config) { c.CacheDir = cache })
	admin := ts.key(t, "acme", "ann", "admin")
	plugin, err := os.ReadFile(filepath.Join(testwasm.RepoRoot(t), "testdata/plugin.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	upload := func(i int) {
		r := ts.do(t, "POST", "/v1/modules?name=big", admin, strings.NewReader(string(variant(plugin, size+i))), "Content-Type", "application/wasm")
		if r.status != http.StatusCreated && r.status != http.StatusOK {
			t.Fatalf("upload %d: %d %s", i, r.status, r.body)
		}
	}
	upload(0)
	baseData, _ := diskUse(t, data)
	baseCache, baseFiles := diskUse(t, cache)
	for i := 1; i < uploads; i++ {
		upload(i)
	}
	r := ts.do(t, "GET", "/v1/modules/big/versions", admin, nil)
	var vs struct{ Versions []json.RawMessage }
	if err := json.Unmarshal(r.body, &vs); err != nil || len(vs.Versions) != kept {
		t.Fatalf("versions: %d %s; want %d kept", r.status, r.body, kept)
	}
	dataBytes, _ := diskUse(t, data)
	cacheBytes, cacheFiles := diskUse(t, cache)
	grew := dataBytes - baseData + cacheBytes - baseCache
	t.Logf("after %d uploads of %d MiB, %d kept: data %d MiB (from %d), cache %d MiB in %d files (from %d files)",
		uploads, size>>20, kept, dataBytes>>20, baseData>>20, cacheBytes>>20, cacheFiles, baseFiles)
	// The kept versions, one in flight, and the SQLite write-ahead log's
	// share: far below the versions uploaded.
	if limit := int64(3 * kept * size); grew > limit {
		t.Errorf("data and cache grew by %d MiB for %d kept versions of %d MiB; want at most %d MiB", grew>>20, kept, size>>20, limit>>20)
	}
	// Each kept version: its rewritten module and its machine code.
	if baseFiles != 2 || cacheFiles > 2*kept {
		t.Errorf("the compilation cache holds %d files (%d after the first upload); want 2 for each of the %d kept versions", cacheFiles, baseFiles, kept)
	}
}
