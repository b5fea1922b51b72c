package bundle_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/internal/plugintree"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/languages"
	_ "github.com/moat-sandbox/moat/languages/javascript" // an interpreted language, for Script
	"github.com/moat-sandbox/moat/policy"
)

// wasm is the smallest module: its magic and version.
var wasm = []byte("\x00asm\x01\x00\x00\x00")

const (
	wasmManifest   = "name: hello\nversion: 0.1.0\nactions:\n  - name: greet\n"
	scriptManifest = "name: hello-js\nversion: 0.1.0\nlanguage: javascript\nkind: moat\nactions:\n  - name: greet\n"
	nativeManifest = "name: hello-native\nversion: 0.1.0\nlanguage: python\nkind: native\ncommand: [python3, main.py]\nactions:\n  - name: greet\n"
)

// plugin writes files into a new plugin directory, readable by every uid
// (a native plugin's must be).
func plugin(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "plugin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// unpackGzipTar reads the archive Archive writes, base name → content, as
// moat serve unpacks an upload.
func unpackGzipTar(t *testing.T, body []byte) map[string][]byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return untar(t, zr)
}

func untar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(h.Name)] = b
	}
}

// TestKindDecidedOnce: each kind of plugin, read from its directory
// (moat run, sign, deploy), uploaded as the archive deploy sends
// (FromArchive) and reloaded from what the server stores (FromStored),
// is the same kind with the same signed bytes and signature on all three:
// a plugin that runs with moat run is the plugin the server accepts, and
// it signs the same on both.
func TestKindDecidedOnce(t *testing.T) {
	sig := "untrusted comment: a signature's bytes\n"
	cases := []struct {
		name  string
		files map[string]string
		kind  bundle.Kind
	}{
		{"module", map[string]string{"moat.yaml": wasmManifest, "hello.wasm": string(wasm), "hello.wasm.minisig": sig}, bundle.Wasm},
		{"script", map[string]string{"moat.yaml": scriptManifest, "main.js": "moat.log('hi')\n", "util.js": "//\n", "README.md": "not a source", "hello-js.minisig": sig}, bundle.Script},
		{"script shipping its module", map[string]string{"moat.yaml": scriptManifest, "main.js": "//\n", "hello-js.wasm": string(wasm)}, bundle.Wasm},
		{"native", map[string]string{"moat.yaml": nativeManifest, "main.py": "print()\n", "lib.py": "#\n", "hello-native.minisig": sig}, bundle.Native},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := plugin(t, tc.files)
			b, err := bundle.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			if b.Kind != tc.kind {
				t.Fatalf("Open: kind %v, want %v", b.Kind, tc.kind)
			}
			if got := bundle.IsActionPlugin(dir); got != (tc.kind != bundle.Wasm) {
				t.Errorf("IsActionPlugin = %v for a %v plugin", got, tc.kind)
			}
			body, ct, err := b.Archive()
			if err != nil {
				t.Fatal(err)
			}
			var files map[string][]byte
			if tc.kind == bundle.Wasm {
				if !strings.HasPrefix(ct, "multipart/form-data") {
					t.Fatalf("Archive of a module: Content-Type %q, want a multipart form", ct)
				}
				files = map[string][]byte{}
				for name, c := range tc.files {
					files[name] = []byte(c)
				}
			} else {
				if ct != "application/gzip" {
					t.Fatalf("Archive: Content-Type %q, want application/gzip", ct)
				}
				files = unpackGzipTar(t, body)
			}
			up, err := bundle.FromArchive(files)
			if err != nil {
				t.Fatal(err)
			}
			stored, err := bundle.FromStored(b.Name, b.ManifestBytes, b.Signed, b.Signature, func(p []byte) (map[string][]byte, error) {
				return untar(t, bytes.NewReader(p)), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range []struct {
				from string
				b    *bundle.Bundle
			}{{"FromArchive", up}, {"FromStored", stored}} {
				if o.b.Kind != b.Kind || o.b.Name != b.Name || !bytes.Equal(o.b.Signed, b.Signed) || !bytes.Equal(o.b.Signature, b.Signature) ||
					!bytes.Equal(o.b.ManifestBytes, b.ManifestBytes) {
					t.Errorf("%s: kind %v name %q, %d signed bytes, signature %q; Open: kind %v name %q, %d signed bytes, signature %q",
						o.from, o.b.Kind, o.b.Name, len(o.b.Signed), o.b.Signature, b.Kind, b.Name, len(b.Signed), b.Signature)
				}
			}
			if b.Signature == nil && tc.files[b.Name+".minisig"] != "" {
				t.Errorf("Open found no signature")
			}
			if tc.kind == bundle.Script {
				if _, ok := b.Files["README.md"]; ok {
					t.Errorf("a Script's files are its sources: README.md is among them")
				}
				if b.Source().Main != "main.js" {
					t.Errorf("entry point %q, want main.js", b.Source().Main)
				}
			}
			if tc.kind == bundle.Native {
				if _, ok := b.Files[b.Name+".minisig"]; ok {
					t.Errorf("a Native plugin's signature is among the files it signs")
				}
				_, opts, err := b.LoadOptions(context.Background(), bundle.LoadEnv{})
				if err != nil {
					t.Fatal(err)
				}
				if opts.Native == nil || opts.Native.Dir != b.Dir || !bytes.Equal(opts.Native.Source, b.Signed) {
					t.Errorf("LoadOptions of a Native plugin: %+v", opts.Native)
				}
			}
			if tc.kind == bundle.Wasm {
				mod, opts, err := b.LoadOptions(context.Background(), bundle.LoadEnv{})
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(mod, wasm) || opts.Name != b.Name || opts.Manifest != b.Manifest || !bytes.Equal(opts.Signature, b.Signature) {
					t.Errorf("LoadOptions of a module: %d bytes, %+v", len(mod), opts)
				}
			}
		})
	}
}

// TestOpenBareModule: a .wasm without a manifest is named by its file (or
// its directory), and an archive holding one alone by its file.
func TestOpenBareModule(t *testing.T) {
	dir := plugin(t, map[string]string{"My Module.wasm": string(wasm)})
	b, err := bundle.Open(filepath.Join(dir, "My Module.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if b.Kind != bundle.Wasm || b.Name != "my-module" || b.Manifest != nil {
		t.Errorf("Open: kind %v name %q manifest %v", b.Kind, b.Name, b.Manifest)
	}
	if b, err = bundle.Open(dir); err != nil || b.Name != "plugin" {
		t.Errorf("Open(dir): %v, name %q, want the directory's name", err, b.Name)
	}
	a, err := bundle.FromArchive(map[string][]byte{"My Module.wasm": wasm})
	if err != nil || a.Name != "my-module" {
		t.Errorf("FromArchive: %v, name %q", err, a.Name)
	}
	if _, err := bundle.FromArchive(map[string][]byte{"a.wasm": wasm, "b.wasm": wasm}); err == nil || !strings.Contains(err.Error(), "several .wasm files") {
		t.Errorf("FromArchive of two modules: %v", err)
	}
	if _, err := bundle.FromArchive(map[string][]byte{policy.ManifestFile: []byte(scriptManifest), "util.js": nil}); err == nil || !strings.Contains(err.Error(), "javascript plugin: no main.js") {
		t.Errorf("FromArchive of a script without its entry point: %v", err)
	}
}

// TestOpenRefusesLinks: every kind's files are read by plugintree's rule.
func TestOpenRefusesLinks(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"module": {"moat.yaml": wasmManifest},
		"script": {"moat.yaml": scriptManifest},
		"native": {"moat.yaml": nativeManifest},
	} {
		dir := plugin(t, files)
		link := map[string]string{"module": "hello.wasm", "script": "main.js", "native": "main.py"}[name]
		secret := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(secret, wasm, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(secret, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
		if _, err := bundle.Open(dir); !plugintree.IsError(err) || !strings.Contains(err.Error(), link) {
			t.Errorf("%s: Open with %s a link: %v, want plugintree's refusal naming it", name, link, err)
		}
	}
}

// TestKernelGrantsBesideTheBundle: the kernel layer moat run confines
// itself to is the one policy derives from the bundle's manifest.
func TestKernelGrantsBesideTheBundle(t *testing.T) {
	p, err := policy.LoadProfile("dev")
	if err != nil {
		t.Fatal(err)
	}
	dir := plugin(t, map[string]string{"moat.yaml": scriptManifest + "capabilities:\n  http: [\"http://127.0.0.1:8080\"]\n", "main.js": "//\n"})
	b, err := bundle.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	k := b.KernelGrants(p)
	if len(k.ConnectTCP) != 1 || k.ConnectTCP[0] != 8080 {
		t.Errorf("KernelGrants = %+v, want port 8080", k)
	}
	if h := bundle.HostKernelGrants(p); !h.ConnectAnyTCP {
		t.Errorf("HostKernelGrants(dev) = %+v: dev grants any target", h)
	}
}

// TestKindDecidedOnlyHere: no entry point decides a plugin's kind on its
// own. Outside this package, the manifest's kind: native and the question
// "is this language interpreted" are read only by the packages that
// define them (policy, languages) and by the host's runtimes, which run
// the kind they are handed; the CLI and the server go through KindOf (by
// Open, FromArchive, FromStored). A new kind is then this package's files
// and its runtime in host, nothing else.
func TestKindDecidedOnlyHere(t *testing.T) {
	root := testwasm.RepoRoot(t)
	// Exceptions, each with why (none today: moat build asks KindOf too).
	allowed := map[string]string{}
	used := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case strings.HasPrefix(d.Name(), ".") && rel != ".", d.Name() == "testdata", d.Name() == "node_modules",
				rel == "bundle", rel == "policy", rel == "languages", rel == "host":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, decides := range []string{"languages.ScriptLanguage(", "policy.KindNative"} {
			if !bytes.Contains(src, []byte(decides)) {
				continue
			}
			if _, ok := allowed[rel]; ok {
				used[rel] = true
				continue
			}
			t.Errorf("%s uses %s: it decides a plugin's kind on its own; ask package bundle (Open, FromArchive, FromStored, KindOf)", rel, decides)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for f := range allowed {
		if !used[f] {
			t.Errorf("%s no longer decides a kind: remove its exception", f)
		}
	}
}

// TestPagesTravelWithThePlugin: a page's files are signed and stored
// with an interpreted or native plugin's files (its pack), on every path
// (a directory, an archive, the store), but are not its sources; a
// missing one, or a compiled module whose .wasm does not hold them
// (TestModulePageSection), is refused naming the page.
func TestPagesTravelWithThePlugin(t *testing.T) {
	const pages = "pages:\n  - {name: main, entry: index.html, files: [page.js]}\n"
	files := map[string]string{"moat.yaml": scriptManifest + pages, "main.js": "export function greet() {}",
		"index.html": "<p>hi</p>", "page.js": "1", "notes.txt": "not shipped"}
	b, err := bundle.Open(plugin(t, files))
	if err != nil {
		t.Fatal(err)
	}
	if string(b.Files["index.html"]) != "<p>hi</p>" || b.Files["notes.txt"] != nil {
		t.Errorf("Files = %v; want the page's files and the sources only", b.Files)
	}
	// What the signature covers is the pack of what the host gets.
	if !bytes.Equal(b.Signed, languages.PackSources(b.Source())) {
		t.Errorf("Signed is not the pack of the sources the host gets")
	}
	raw := map[string][]byte{}
	for n, c := range files {
		raw[n] = []byte(c)
	}
	a, err := bundle.FromArchive(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Signed, b.Signed) {
		t.Errorf("an archive's pack differs from its directory's")
	}
	s, err := bundle.FromStored("hello-js", []byte(files["moat.yaml"]), b.Signed, nil, func(tarball []byte) (map[string][]byte, error) {
		out := map[string][]byte{}
		tr := tar.NewReader(bytes.NewReader(tarball))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return out, nil
			}
			if err != nil {
				return nil, err
			}
			out[h.Name], _ = io.ReadAll(tr)
		}
	})
	if err != nil || string(s.Files["page.js"]) != "1" {
		t.Fatalf("FromStored: %v, %v", err, s)
	}
	if !bytes.Equal(languages.PackSources(s.Source()), b.Signed) {
		t.Errorf("a stored version's sources do not pack to what was signed")
	}

	delete(files, "page.js")
	if _, err := bundle.Open(plugin(t, files)); err == nil || !strings.Contains(err.Error(), "pages[0] (main): its file page.js is not among the plugin's files") {
		t.Errorf("missing page file: %v", err)
	}
	dir := plugin(t, map[string]string{"moat.yaml": wasmManifest + pages, "index.html": "x", "page.js": "1"})
	os.WriteFile(filepath.Join(dir, "hello.wasm"), wasm, 0o644)
	if _, err := bundle.Open(dir); err == nil || !strings.Contains(err.Error(), "pages (main): the module holds no pages' files") || !strings.Contains(err.Error(), "moat build") {
		t.Errorf("compiled module with pages, built without them: %v", err)
	}
}
