package languages_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

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
	left, _ := filepath.Glob(filepath.Join(dir, "*", ".tmp-*"))
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
// could plant out.wasm as a symlink to a file only moat may read.
func TestReadOutputRefusesSymlinks(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("\x00asm secret"), 0o600)
	link := filepath.Join(dir, "out.wasm")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	if b, err := languages.ReadOutput(link); err == nil {
		t.Fatalf("read %q through a symlink", b)
	}
	os.Remove(link)
	os.Mkdir(link, 0o755)
	if _, err := languages.ReadOutput(link); err == nil {
		t.Fatal("read a directory")
	}
	os.Remove(link)
	os.WriteFile(link, []byte("\x00asm"), 0o644)
	if b, err := languages.ReadOutput(link); err != nil || string(b) != "\x00asm" {
		t.Fatalf("%q %v", b, err)
	}
}
