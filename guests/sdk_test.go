//go:build !wasip1

package guests

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFilesMatchTheTree: the SDK the binary carries is the tree's SDK,
// file for file (a new file in a subdirectory the embed patterns miss
// fails here), with no tests and nothing else.
func TestFilesMatchTheTree(t *testing.T) {
	for _, tc := range []struct {
		lang string
		tree map[string]string // directory in the repo → prefix in Files
		only []string          // or exactly these files: repo path → Files path
	}{
		{lang: "go", tree: map[string]string{"../abi": "abi", "go": "guests/go"}},
		{lang: "rust", tree: map[string]string{"rust/src": "src"}, only: []string{"rust/Cargo.toml", "Cargo.toml"}},
		{lang: "c", only: []string{"c/moat.h", "moat.h"}},
		{lang: "cpp", only: []string{"c/moat.h", "moat.h"}},
		{lang: "assemblyscript", only: []string{"assemblyscript/moat.ts", "moat.ts"}},
		{lang: "javascript", only: []string{"js/moat.js", "moat.js"}},
		{lang: "python", only: []string{"python/moat.py", "moat.py"}},
		{lang: "python-native", only: []string{"python/moat.py", "moat.py"}},
		{lang: "ruby", only: []string{"ruby/moat.rb", "moat.rb"}},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			got, err := Files(tc.lang)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]byte{}
			for dir, prefix := range tc.tree {
				err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
					if err != nil {
						return err
					}
					if d.IsDir() {
						if d.Name() == "testdata" {
							return filepath.SkipDir
						}
						return nil
					}
					n := d.Name()
					if tc.lang == "go" && (!strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") || n == "source.go") {
						return nil
					}
					rel, _ := filepath.Rel(dir, p)
					b, err := os.ReadFile(p)
					want[prefix+"/"+filepath.ToSlash(rel)] = b
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < len(tc.only); i += 2 {
				b, err := os.ReadFile(tc.only[i])
				if err != nil {
					t.Fatal(err)
				}
				want[tc.only[i+1]] = b
			}
			if tc.lang == "go" {
				if !bytes.Contains(got["go.mod"], []byte("module "+GoModulePath+"\n")) {
					t.Errorf("go.mod: %s", got["go.mod"])
				}
				delete(got, "go.mod")
			}
			for n, b := range want {
				if g, ok := got[n]; !ok {
					t.Errorf("%s is in the tree but not in the binary's SDK", n)
				} else if !bytes.Equal(g, b) {
					t.Errorf("%s differs from the tree's", n)
				}
			}
			for n := range got {
				if _, ok := want[n]; !ok {
					t.Errorf("the binary's SDK has %s, which is not the tree's SDK", n)
				}
			}
		})
	}
	if _, err := Files("cobol"); err == nil {
		t.Error("Files(cobol): no error")
	}
}

// TestScaffold: every language's template renders with the name, and an
// occupied directory is refused without a write.
func TestScaffold(t *testing.T) {
	for _, lang := range Languages {
		t.Run(lang, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "my-plugin")
			files, err := Scaffold(dir, "my-plugin", lang)
			if err != nil {
				t.Fatal(err)
			}
			mf, err := os.ReadFile(filepath.Join(dir, "moat.yaml"))
			if err != nil || !bytes.Contains(mf, []byte("name: my-plugin\n")) {
				t.Fatalf("moat.yaml: %v\n%s", err, mf)
			}
			named := false
			for _, f := range files {
				if strings.HasSuffix(f, ".tmpl") {
					t.Errorf("%s kept its .tmpl suffix", f)
				}
				b, _ := os.ReadFile(filepath.Join(dir, f))
				if bytes.Contains(b, []byte("{{")) && !strings.HasPrefix(f, ".moat-sdk/") && f != "moat.h" && f != "moat.ts" {
					t.Errorf("%s holds an unexpanded template action", f)
				}
				if f != "moat.yaml" && f != "README.md" && bytes.Contains(b, []byte("my-plugin")) {
					named = true
				}
			}
			if !named {
				t.Errorf("no code file names the plugin: %v", files)
			}
			// Every plugin gets a page (a compiled one's `moat build`
			// puts into its .wasm).
			hasPage := slices.Contains(files, "index.html") && slices.Contains(files, "page.js") && bytes.Contains(mf, []byte("entry: index.html"))
			if !hasPage {
				t.Errorf("no page for a %s plugin: %v", lang, files)
			}
			if _, err := Scaffold(dir, "my-plugin", lang); !errors.Is(err, ErrExists) {
				t.Errorf("a second Scaffold into %s: %v, want ErrExists", dir, err)
			}
		})
	}
	for _, bad := range []string{"", "A", "a_b", "../x", "x/y", "-x", "x-", "a--b", "1x", strings.Repeat("x", 64), "x\n"} {
		if CheckName(bad) == nil {
			t.Errorf("CheckName(%q) accepted it", bad)
		}
	}
	if _, err := Scaffold(t.TempDir(), "ok", "cobol"); err == nil {
		t.Error("Scaffold in cobol: no error")
	}
}
