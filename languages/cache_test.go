package languages_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/languages"
)

// fakeLang is only an Info for BuildKey; the cache never builds.
type keyLang struct{ info languages.Info }

func (k keyLang) Info() languages.Info { return k.info }
func (keyLang) Validate(languages.Source, languages.ValidationProfile) []languages.Violation {
	return nil
}
func (keyLang) Build(context.Context, languages.BuildEnv, languages.Source) (*languages.Artifact, error) {
	return nil, nil
}

func TestBuildKey(t *testing.T) {
	l := keyLang{languages.Info{Name: "c", Version: "19.1.7"}}
	base := files("main.c", "int main(){}")
	k := languages.BuildKey(l, base)
	for name, other := range map[string]string{
		"content":  languages.BuildKey(l, files("main.c", "int main(){ }")),
		"name":     languages.BuildKey(l, files("app.c", "int main(){}")),
		"version":  languages.BuildKey(keyLang{languages.Info{Name: "c", Version: "19.1.8"}}, base),
		"language": languages.BuildKey(keyLang{languages.Info{Name: "cpp", Version: "19.1.7"}}, base),
		// length-prefixing: moving bytes between name and content changes the key
		"boundary": languages.BuildKey(l, files("main.cint", " main(){}")),
		"files":    languages.BuildKey(l, files("main.c", "int main(){}", "x.h", "")),
		"main":     languages.BuildKey(l, languages.Source{Files: files("a.c", "", "b.c", "").Files, Main: "b.c"}),
	} {
		if other == k {
			t.Errorf("changing the %s keeps the key", name)
		}
	}
	if languages.BuildKey(l, files("main.c", "int main(){}")) != k {
		t.Error("the key is not deterministic")
	}
	if languages.BuildKey(l, languages.Source{Files: files("a.c", "", "b.c", "").Files}) ==
		languages.BuildKey(l, languages.Source{Files: files("b.c", "", "a.c", "").Files}) {
		t.Error("the entry file (the first) does not change the key")
	}
}

func TestBuildCacheRoundTrip(t *testing.T) {
	dir := t.TempDir()
	c, err := languages.OpenBuildCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	key := languages.BuildKey(keyLang{languages.Info{Name: "x"}}, files("a", "b"))
	if _, ok := c.Get(key); ok {
		t.Fatal("hit in an empty cache")
	}
	interp := bytes.Repeat([]byte{0, 'a', 's', 'm'}, 1000)
	a := &languages.Artifact{Kind: languages.ArtifactInterpreted, WASM: interp, Files: files("main.py", "print(1)").Files,
		Args: []string{"/src/main.py"}, Env: map[string]string{"K": "V"}, BuildLog: "warning"}
	if err := c.Put(key, a); err != nil {
		t.Fatal(err)
	}
	// A second artifact with the same WASM stores the bytes once.
	key2 := languages.BuildKey(keyLang{languages.Info{Name: "x"}}, files("a", "c"))
	if err := c.Put(key2, &languages.Artifact{Kind: languages.ArtifactInterpreted, WASM: interp}); err != nil {
		t.Fatal(err)
	}
	blobs, _ := filepath.Glob(filepath.Join(dir, "blobs", "*"))
	if len(blobs) != 1 {
		t.Errorf("%d blobs, want 1 (content-addressed): %v", len(blobs), blobs)
	}
	// A new cache over the directory (a new process) reads it from disk.
	c2, _ := languages.OpenBuildCache(dir)
	got, ok := c2.Get(key)
	if !ok || got.Kind != a.Kind || !bytes.Equal(got.WASM, interp) || got.Args[0] != "/src/main.py" || got.Env["K"] != "V" ||
		string(got.Files[0].Content) != "print(1)" || got.BuildLog != "warning" {
		t.Fatalf("round trip: %+v", got)
	}
	// A damaged blob is a miss, not a wrong artifact.
	os.WriteFile(blobs[0], []byte("short"), 0o600)
	c3, _ := languages.OpenBuildCache(dir)
	if _, ok := c3.Get(key); ok {
		t.Fatal("a truncated blob was served")
	}
	// No temporary files are left behind.
	left, _ := filepath.Glob(filepath.Join(dir, "*", ".*.tmp")) // atomicfile's temporary names
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestBuildCacheConcurrentWriters: processes sharing a cache directory may
// store the same key at once; readers see a whole entry or none.
func TestBuildCacheConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	key := languages.BuildKey(keyLang{languages.Info{Name: "x"}}, files("a", "b"))
	wasm := bytes.Repeat([]byte("0123456789"), 100_000)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := languages.OpenBuildCache(dir)
			if err != nil {
				t.Error(err)
				return
			}
			if err := c.Put(key, &languages.Artifact{Kind: languages.ArtifactWASM, WASM: wasm}); err != nil {
				t.Error(err)
			}
			r, _ := languages.OpenBuildCache(dir)
			if a, ok := r.Get(key); ok && !bytes.Equal(a.WASM, wasm) {
				t.Error("a reader saw a partial artifact")
			}
		}()
	}
	wg.Wait()
}

// TestBuildCacheSharesBlobs: artifacts with the same WASM read from disk
// share one copy in memory (an interpreter is 26 MB).
func TestBuildCacheSharesBlobs(t *testing.T) {
	dir := t.TempDir()
	c, _ := languages.OpenBuildCache(dir)
	interp := bytes.Repeat([]byte("interp"), 10_000)
	k1 := languages.BuildKey(keyLang{languages.Info{Name: "x"}}, files("a.py", "1"))
	k2 := languages.BuildKey(keyLang{languages.Info{Name: "x"}}, files("a.py", "2"))
	for _, k := range []string{k1, k2} {
		if err := c.Put(k, &languages.Artifact{Kind: languages.ArtifactInterpreted, WASM: interp}); err != nil {
			t.Fatal(err)
		}
	}
	fresh, _ := languages.OpenBuildCache(dir) // as a new process
	a1, ok1 := fresh.Get(k1)
	a2, ok2 := fresh.Get(k2)
	if !ok1 || !ok2 || !bytes.Equal(a1.WASM, interp) {
		t.Fatal("miss")
	}
	if &a1.WASM[0] != &a2.WASM[0] {
		t.Error("two artifacts with the same interpreter hold two copies of it")
	}
}

// TestReadOutputRefusesSymlinks: a confined compiler owns its work dir and
// could plant out.wasm, or a directory on its path, as a symlink to a file
// only moat may read, or a FIFO to hang it.
func TestReadOutputRefusesSymlinks(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("\x00asm secret"), 0o600)
	if err := os.Symlink(secret, filepath.Join(dir, "out.wasm")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(secret), filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "ok.wasm"), []byte("\x00asm"), 0o644)
	for _, c := range []struct{ name, want string }{
		{"out.wasm", "too many levels of symbolic links"},
		{"sub/secret", "too many levels of symbolic links"},
		{"../" + filepath.Base(dir) + "/ok.wasm", "cross-device link"},
		{secret, "cross-device link"},
		{"d", "not a regular file"},
		{"fifo", "not a regular file"},
		{"/proc/self/root" + secret, "cross-device link"},
	} {
		if b, err := languages.ReadOutput(dir, c.name); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: read %q, err %v; want an error with %q", c.name, b, err, c.want)
		}
	}
	if b, err := languages.ReadOutput(dir, "ok.wasm"); err != nil || string(b) != "\x00asm" {
		t.Fatalf("%q %v", b, err)
	}
}

// TestBuildCacheEvictsLeastRecentlyUsed: past its bound the cache removes
// the builds used longest ago, and a blob only with the last entry that
// uses it; what it keeps still reads back whole.
func TestBuildCacheEvictsLeastRecentlyUsed(t *testing.T) {
	dir := t.TempDir()
	c, err := languages.OpenBuildCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	const blob = 100_000
	c.SetMaxBytes(5*blob + 50_000) // room for five builds with their own WASM
	key := func(i int) string {
		return languages.BuildKey(keyLang{languages.Info{Name: "x"}}, files("a.c", strconv.Itoa(i)))
	}
	wasm := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, blob) }
	shared := bytes.Repeat([]byte("interp"), blob/6)
	put := func(i int, w []byte, age time.Duration) {
		t.Helper()
		if err := c.Put(key(i), &languages.Artifact{Kind: languages.ArtifactWASM, WASM: w}); err != nil {
			t.Fatal(err)
		}
		when := time.Now().Add(-age)
		p := filepath.Join(dir, "builds", key(i)[:2], key(i)+".json")
		if err := os.Chtimes(p, when, when); err != nil {
			t.Fatal(err)
		}
	}
	// Builds 0..3 with their own WASM, oldest first; 10 and 11 share one.
	for i := range 4 {
		put(i, wasm(i), time.Duration(10-i)*time.Hour)
	}
	put(10, shared, 20*time.Hour)
	put(11, shared, time.Minute)
	// Build 0 is used again: it becomes the most recent.
	fresh, _ := languages.OpenBuildCache(dir) // as another process: a disk hit
	if _, ok := fresh.Get(key(0)); !ok {
		t.Fatal("build 0 missing before the bound was reached")
	}
	// Two more builds take the cache over its bound.
	put(4, wasm(4), 0)
	put(5, wasm(5), 0)

	reopened, _ := languages.OpenBuildCache(dir) // no memory layer
	has := func(i int) bool { _, ok := reopened.Get(key(i)); return ok }
	for i, want := range map[int]bool{
		0: true,            // used again just now
		1: false, 2: false, // the least recently used
		10: false,                            // the oldest of all, but its blob is still 11's
		3:  true, 11: true, 4: true, 5: true, // 90% of the bound reached without them
	} {
		if got := has(i); got != want {
			t.Errorf("build %d cached: %v, want %v", i, got, want)
		}
	}
	if a, ok := reopened.Get(key(11)); !ok || !bytes.Equal(a.WASM, shared) {
		t.Error("the shared blob went with the older of its two entries")
	}
	var total int64
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			fi, _ := d.Info()
			total += fi.Size()
		}
		return nil
	})
	if max := int64(5*blob + 50_000); total > max {
		t.Errorf("cache holds %d bytes, over its bound of %d", total, max)
	}
	blobs, _ := os.ReadDir(filepath.Join(dir, "blobs"))
	if len(blobs) != 5 { // 0, 3, 4, 5 and the shared one
		t.Errorf("%d blobs left, want 5 (the evicted builds' blobs removed)", len(blobs))
	}
}
