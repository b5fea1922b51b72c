package sqlite_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/host/store/sqlite"
)

var bscope = store.Scope{Org: "acme", Module: "m"}

// seedStore makes a store in dir with kv entries and two media items.
func seedStore(t *testing.T, dir string) (media []string) {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 3 {
		if err := s.KVPut(ctx, bscope, fmt.Sprint("k", i), []byte(fmt.Sprint("v", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		it, _, err := s.MediaPut(ctx, store.MediaNew{Org: "acme", Module: "m", User: "ann", Type: "application/pdf", Data: bytes.Repeat([]byte{byte('a' + i)}, 1000+i)}, 0)
		if err != nil {
			t.Fatal(err)
		}
		media = append(media, it.ID)
	}
	return media
}

// listing is every path under dir with its size, to show nothing changed.
func listing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && p != dir {
			out = append(out, fmt.Sprintf("%s %d", strings.TrimPrefix(p, dir), fi.Size()*int64(btoi(fi.Mode().IsRegular()))))
		}
		return nil
	})
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// entries unpacks a backup's entries, to build forged ones from.
type entry struct {
	h    tar.Header
	data []byte
}

func readEntries(t *testing.T, b []byte) []entry {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var es []entry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return es
		}
		if err != nil {
			t.Fatal(err)
		}
		d, _ := io.ReadAll(tr)
		es = append(es, entry{*h, d})
	}
}

func writeEntries(t *testing.T, es []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range es {
		h := e.h
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(e.data)
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// remanifest rewrites the manifest to match es (a forger who knows the
// format).
func remanifest(t *testing.T, es []entry) []entry {
	t.Helper()
	var m sqlite.BackupManifest
	last := len(es) - 1
	if err := json.Unmarshal(es[last].data, &m); err != nil {
		t.Fatal(err)
	}
	m.Files = nil
	for _, e := range es[:last] {
		sum := sha256.Sum256(e.data)
		m.Files = append(m.Files, sqlite.BackupEntry{Name: e.h.Name, Size: int64(len(e.data)), SHA256: hex.EncodeToString(sum[:])})
	}
	es[last].data, _ = json.Marshal(m)
	return es
}

// TestBackupRestoreRoundTrip: a backup restores to the same kv entries and
// media bytes in an empty directory.
func TestBackupRestoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	ids := seedStore(t, src)
	var buf bytes.Buffer
	m, err := sqlite.Backup(ctx, src, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != 1+len(ids) {
		t.Errorf("manifest lists %d files, want %d", len(m.Files), 1+len(ids))
	}
	if left, _ := filepath.Glob(filepath.Join(src, ".backup-*")); len(left) != 0 {
		t.Errorf("the backup left %v behind", left)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	if _, err := sqlite.Restore(ctx, bytes.NewReader(buf.Bytes()), dst, sqlite.RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 3 {
		v, ok, err := s.KVGet(ctx, bscope, fmt.Sprint("k", i))
		if err != nil || !ok || string(v) != fmt.Sprint("v", i) {
			t.Errorf("k%d = %q %v %v", i, v, ok, err)
		}
	}
	for i, id := range ids {
		_, data, err := s.MediaRead(ctx, "acme", id, 1<<20)
		if err != nil || !bytes.Equal(data, bytes.Repeat([]byte{byte('a' + i)}, 1000+i)) {
			t.Errorf("media %s: %d bytes, %v", id, len(data), err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dst, ".restore-*")); len(left) != 0 {
		t.Errorf("the restore left %v behind", left)
	}
}

// TestRestoreHostile: every archive a restore must refuse is refused with
// its reason, and the target directory is exactly as it was (no file
// written, none left in a staging directory), and nothing outside it is
// written either.
func TestRestoreHostile(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	seedStore(t, src)
	var buf bytes.Buffer
	if _, err := sqlite.Backup(ctx, src, &buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	outside := filepath.Join(t.TempDir(), "escaped")
	forge := func(f func(es []entry) []entry) []byte {
		return writeEntries(t, f(readEntries(t, good)))
	}
	file := func(name string, data []byte) entry {
		return entry{tar.Header{Name: name, Mode: 0o600, Typeflag: tar.TypeReg}, data}
	}
	manifestLast := func(es []entry, extra ...entry) []entry {
		last := es[len(es)-1]
		return append(append(es[:len(es)-1:len(es)-1], extra...), last)
	}
	tests := []struct {
		name    string
		archive []byte
		want    string
	}{
		{"truncated", good[:len(good)/2], "damaged or truncated"},
		{"truncated to the header", good[:20], "damaged or truncated"},
		{"not gzip", []byte("moat backup, honest"), "not a gzip-compressed backup"},
		{"empty", nil, "not a gzip-compressed backup"},
		{"database byte changed", forge(func(es []entry) []entry {
			es[0].data = slices.Clone(es[0].data)
			es[0].data[len(es[0].data)/2] ^= 0xff
			return es
		}), "does not match MANIFEST.json"},
		{"database forged with a matching manifest", forge(func(es []entry) []entry {
			es[0].data = bytes.Repeat([]byte("x"), 4096)
			return remanifest(t, es)
		}), "is not a whole SQLite database"},
		{"media file dropped with a matching manifest", forge(func(es []entry) []entry {
			return remanifest(t, append(es[:1:1], es[2:]...))
		}), "missing from the archive"},
		{"path traversal", forge(func(es []entry) []entry {
			return manifestLast(es, file("../"+filepath.Base(filepath.Dir(outside))+"/escaped", []byte("x")))
		}), "is not a file a backup holds"},
		{"path traversal inside media", forge(func(es []entry) []entry {
			return manifestLast(es, file("media/../../escaped", []byte("x")))
		}), "is not a file a backup holds"},
		{"absolute path", forge(func(es []entry) []entry {
			return manifestLast(es, file(outside, []byte("x")))
		}), "is not a file a backup holds"},
		{"symlink", forge(func(es []entry) []entry {
			return manifestLast(es, entry{tar.Header{Name: "media/" + strings.Repeat("a", 64) + "/aa/" + strings.Repeat("a", 64), Typeflag: tar.TypeSymlink, Linkname: outside}, nil})
		}), "is not a regular file"},
		{"hard link", forge(func(es []entry) []entry {
			return manifestLast(es, entry{tar.Header{Name: "moat.db", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}, nil})
		}), "is not a regular file"},
		{"directory entry", forge(func(es []entry) []entry {
			return manifestLast(es, entry{tar.Header{Name: "media/", Typeflag: tar.TypeDir, Mode: 0o700}, nil})
		}), "is not a regular file"},
		{"duplicate database", forge(func(es []entry) []entry { return manifestLast(es, es[0]) }), "is there twice"},
		{"no manifest", forge(func(es []entry) []entry { return es[:len(es)-1] }), "has no MANIFEST.json"},
		{"entry after the manifest", forge(func(es []entry) []entry { return append(es, file("moat.db", []byte("late"))) }), "must be last"},
		{"file not in the manifest", forge(func(es []entry) []entry {
			return manifestLast(es, file("media/"+strings.Repeat("b", 64)+"/bb/"+strings.Repeat("b", 64), []byte("stowaway")))
		}), "is not listed in MANIFEST.json"},
		{"manifest lists a missing file", forge(func(es []entry) []entry {
			es = remanifest(t, es)
			var m sqlite.BackupManifest
			json.Unmarshal(es[len(es)-1].data, &m)
			m.Files = append(m.Files, sqlite.BackupEntry{Name: "media/" + strings.Repeat("c", 64) + "/cc/" + strings.Repeat("c", 64), Size: 1})
			es[len(es)-1].data, _ = json.Marshal(m)
			return es
		}), "which the archive lacks"},
		{"other format", forge(func(es []entry) []entry {
			es[len(es)-1].data = bytes.Replace(es[len(es)-1].data, []byte("moat-backup/1"), []byte("moat-backup/9"), 1)
			return es
		}), `format "moat-backup/9"`},
		{"manifest not JSON", forge(func(es []entry) []entry { es[len(es)-1].data = []byte("{"); return es }), "does not parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			dst := filepath.Join(parent, "data")
			os.Mkdir(dst, 0o700)
			os.WriteFile(filepath.Join(dst, "unrelated"), []byte("keep"), 0o600)
			before := listing(t, parent)
			_, err := sqlite.Restore(ctx, bytes.NewReader(tt.archive), dst, sqlite.RestoreOptions{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Restore: %v, want a refusal saying %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), "nothing was written") {
				t.Errorf("the refusal does not say nothing was written: %v", err)
			}
			if after := listing(t, parent); !slices.Equal(before, after) {
				t.Errorf("the target changed:\nbefore %v\nafter  %v", before, after)
			}
			if _, err := os.Lstat(outside); err == nil {
				t.Errorf("%s was written outside the target", outside)
			}
		})
	}
	// The target's own state refuses too, before the archive is read.
	t.Run("over a store in use", func(t *testing.T) {
		dst := t.TempDir()
		seedStore(t, dst)
		s, err := store.Open(ctx, dst) // a running moat: serve, run
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		before := listing(t, dst)
		_, err = sqlite.Restore(ctx, bytes.NewReader(good), dst, sqlite.RestoreOptions{Force: true})
		if !errors.Is(err, sqlite.ErrInUse) || !strings.Contains(err.Error(), "stop every moat") {
			t.Fatalf("Restore over an open store: %v, want ErrInUse", err)
		}
		if after := listing(t, dst); !slices.Equal(before, after) {
			t.Errorf("the target changed:\nbefore %v\nafter  %v", before, after)
		}
	})
	t.Run("over a store without force", func(t *testing.T) {
		dst := t.TempDir()
		seedStore(t, dst)
		before := listing(t, dst)
		_, err := sqlite.Restore(ctx, bytes.NewReader(good), dst, sqlite.RestoreOptions{})
		if err == nil || !strings.Contains(err.Error(), "--force") {
			t.Fatalf("Restore over a store: %v, want a refusal naming --force", err)
		}
		if after := listing(t, dst); !slices.Equal(before, after) {
			t.Errorf("the target changed:\nbefore %v\nafter  %v", before, after)
		}
		// With force, the old store goes aside whole, and a store
		// opened on the restore is a store.
		rep, err := sqlite.Restore(ctx, bytes.NewReader(good), dst, sqlite.RestoreOptions{Force: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(rep.Aside, "moat.db")); err != nil {
			t.Errorf("the old store is not aside: %v", err)
		}
		if s, err := store.Open(ctx, dst); err != nil {
			t.Error(err)
		} else {
			s.Close()
		}
	})
	t.Run("bigger than the bound", func(t *testing.T) {
		dst := t.TempDir()
		_, err := sqlite.Restore(ctx, bytes.NewReader(good), dst, sqlite.RestoreOptions{MaxBytes: 1000})
		if err == nil || !strings.Contains(err.Error(), "more than 1000 bytes") {
			t.Fatalf("Restore: %v, want the bound's refusal", err)
		}
		if l := listing(t, dst); len(l) != 0 {
			t.Errorf("wrote %v", l)
		}
	})
}

// TestBackupWhileWriting: a backup taken while a writer adds keys in
// order holds a prefix of them (one snapshot: never a later key without
// an earlier one), and media stored meanwhile is either whole in it or
// absent.
func TestBackupWhileWriting(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	seedStore(t, src)
	s, err := store.Open(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	var written atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			if err := s.KVPut(ctx, bscope, fmt.Sprintf("w%06d", i), []byte("x")); err != nil {
				t.Error(err)
				return
			}
			if i%10 == 0 {
				if _, _, err := s.MediaPut(ctx, store.MediaNew{Org: "acme", Module: "m", User: "ann", Type: "application/pdf", Data: []byte(fmt.Sprint("media ", i))}, 0); err != nil {
					t.Error(err)
					return
				}
			}
			written.Add(1)
		}
	}()
	for written.Load() < 50 {
		runtime.Gosched()
	}
	var bufs [3]bytes.Buffer
	for i := range bufs {
		if _, err := sqlite.Backup(ctx, src, &bufs[i]); err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	for i := range bufs {
		dst := filepath.Join(t.TempDir(), "r")
		if _, err := sqlite.Restore(ctx, bytes.NewReader(bufs[i].Bytes()), dst, sqlite.RestoreOptions{}); err != nil {
			t.Fatalf("backup %d does not restore: %v", i, err)
		}
		r, err := store.Open(ctx, dst)
		if err != nil {
			t.Fatal(err)
		}
		keys, _, err := r.KVList(ctx, bscope, "w", "", 1000000)
		if err != nil {
			t.Fatal(err)
		}
		for j, k := range keys {
			if k != fmt.Sprintf("w%06d", j) {
				t.Fatalf("backup %d: key %d is %s: a gap, so not one snapshot", i, j, k)
			}
		}
		if len(keys) == 0 {
			t.Errorf("backup %d holds none of the writes", i)
		}
		r.Close()
	}
}

// What a backup or restore killed midway left (a snapshot, a staging
// directory) is removed by the next Open once it is old; a young one,
// which may be in use, is kept.
func TestBackupLeftoversSwept(t *testing.T) {
	dir := t.TempDir()
	seedStore(t, dir)
	old := time.Now().Add(-2 * time.Hour)
	snap := filepath.Join(dir, ".backup-0123456789abcdef.db")
	stage := filepath.Join(dir, ".restore-42")
	young := filepath.Join(dir, ".backup-fedcba9876543210.db")
	os.WriteFile(snap, []byte("x"), 0o600)
	os.MkdirAll(filepath.Join(stage, "media"), 0o700)
	os.WriteFile(filepath.Join(stage, "moat.db"), []byte("x"), 0o600)
	os.WriteFile(young, []byte("x"), 0o600)
	os.Chtimes(snap, old, old)
	os.Chtimes(stage, old, old)
	s, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, p := range []string{snap, stage} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is still there", p)
		}
	}
	if _, err := os.Lstat(young); err != nil {
		t.Errorf("a young snapshot was removed: %v", err)
	}
}
