package bundle_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/policy"
)

const pagesYAML = "pages:\n  - {name: main, entry: index.html, files: [page.js]}\n"

func pagesManifest(t *testing.T) *policy.Manifest {
	t.Helper()
	mf, err := policy.ParseManifest("moat.yaml", []byte(wasmManifest+pagesYAML))
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

// section is a custom section named name with payload p.
func section(name string, p []byte) []byte {
	var body []byte
	body = binary.AppendUvarint(body, uint64(len(name)))
	body = append(body, name...)
	body = append(body, p...)
	out := binary.AppendUvarint([]byte{0}, uint64(len(body)))
	return append(out, body...)
}

// payload is a PageSection payload of version 1 holding files in order
// (name, content, name, content...).
func payload(files ...string) []byte {
	p := []byte{1}
	p = binary.AppendUvarint(p, uint64(len(files)/2))
	for _, f := range files {
		p = binary.AppendUvarint(p, uint64(len(f)))
		p = append(p, f...)
	}
	return p
}

// TestModulePageSection: `moat build` (EmbedPages) puts a compiled
// module's page files in its moat.pages section, so its digest and
// signature cover them; every path that reads a module (a directory, an
// archive, the store) gives them back as Files, as a Script's.
func TestModulePageSection(t *testing.T) {
	mf := pagesManifest(t)
	dir := plugin(t, map[string]string{"moat.yaml": wasmManifest + pagesYAML, "index.html": "<p>hi</p>", "page.js": "1", "other.js": "not a page's"})
	// A module with a custom section of its own, and a stale moat.pages,
	// which EmbedPages replaces.
	in := append(append(bytes.Clone(wasm), section("producers", []byte("x"))...), section(bundle.PageSection, payload("index.html", "old"))...)
	built, err := bundle.EmbedPages(in, mf, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(built, []byte("producers")) || bytes.Contains(built, []byte("old")) || bytes.Count(built, []byte(bundle.PageSection)) != 1 {
		t.Errorf("EmbedPages kept the stale section or dropped another: %q", built)
	}
	again, _ := bundle.EmbedPages(built, mf, dir)
	if !bytes.Equal(again, built) {
		t.Errorf("EmbedPages is not idempotent")
	}
	os.WriteFile(filepath.Join(dir, "hello.wasm"), built, 0o644)
	b, err := bundle.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b.Kind != bundle.Wasm || !bytes.Equal(b.Signed, built) || string(b.Files["index.html"]) != "<p>hi</p>" || string(b.Files["page.js"]) != "1" || len(b.Files) != 2 {
		t.Errorf("Open: kind %v, Files %q", b.Kind, b.Files)
	}
	a, err := bundle.FromArchive(map[string][]byte{"moat.yaml": []byte(wasmManifest + pagesYAML), "hello.wasm": built})
	if err != nil || string(a.Files["page.js"]) != "1" {
		t.Errorf("FromArchive: %v, %v", err, a)
	}
	s, err := bundle.FromStored("hello", []byte(wasmManifest+pagesYAML), built, nil, nil)
	if err != nil || string(s.Files["index.html"]) != "<p>hi</p>" {
		t.Errorf("FromStored: %v, %v", err, s)
	}
	// The manifest names a file the section lacks (edited after the build).
	mf2, _ := policy.ParseManifest("moat.yaml", []byte(mf2Text))
	if _, err := bundle.FromArchive(map[string][]byte{"moat.yaml": []byte(mf2Text), "hello.wasm": built}); err == nil || !strings.Contains(err.Error(), "more.css is not among") || !strings.Contains(err.Error(), "moat build") {
		t.Errorf("a page file missing from the section: %v", err)
	}
	// A page file missing from the directory at build.
	os.Remove(filepath.Join(dir, "page.js"))
	if _, err := bundle.EmbedPages(wasm, mf2, dir); err == nil || !strings.Contains(err.Error(), "pages[0] (main): its file page.js") {
		t.Errorf("EmbedPages without a page's file: %v", err)
	}
	// No pages: no section, and one already there is dropped.
	plain, _ := policy.ParseManifest("moat.yaml", []byte(wasmManifest))
	if out, err := bundle.EmbedPages(in, plain, dir); err != nil || bytes.Contains(out, []byte(bundle.PageSection)) {
		t.Errorf("EmbedPages of a manifest without pages: %v, %q", err, out)
	}
}

const mf2Text = wasmManifest + "pages:\n  - {name: main, entry: index.html, files: [page.js, more.css]}\n"

// TestModulePageSectionHostile: a module's bytes are an upload's; every
// length in its section is bounded before it is used, and a section that
// is not what `moat build` writes for this manifest is refused with that
// fix, naming what is wrong.
func TestModulePageSectionHostile(t *testing.T) {
	mf := pagesManifest(t)
	good := payload("index.html", "<p>", "page.js", "1")
	huge := append([]byte{1, 1, 7}, append([]byte("page.js"), binary.AppendUvarint(nil, 1<<40)...)...)
	for _, tc := range []struct {
		name, want string
		module     []byte
	}{
		{"duplicate name", "holds \"page.js\" twice", section(bundle.PageSection, payload("index.html", "<p>", "page.js", "1", "page.js", "2"))},
		{"dot dot", "which no page of the manifest names", section(bundle.PageSection, payload("../index.html", "x"))},
		{"unnamed file", "which no page of the manifest names", section(bundle.PageSection, payload("index.html", "<p>", "secret.txt", "x"))},
		{"second section", "two moat.pages sections", append(section(bundle.PageSection, good), section(bundle.PageSection, good)...)},
		{"oversized entry", "past the", section(bundle.PageSection, huge)},
		{"too many files", "count of files", section(bundle.PageSection, binary.AppendUvarint([]byte{1}, 1<<20))},
		{"truncated content", "page.js is truncated", section(bundle.PageSection, good[:len(good)-1])},
		{"truncated name", "name is truncated", section(bundle.PageSection, []byte{1, 1, 10, 'i'})},
		{"trailing bytes", "after its last file", section(bundle.PageSection, append(bytes.Clone(good), 0))},
		{"unknown version", "unknown version", section(bundle.PageSection, append([]byte{2}, good[1:]...))},
		{"section past the module", "past the end of the module", []byte{0, 0x7f, 1}},
		{"custom name truncated", "name is truncated", []byte{0, 2, 9, 'm'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := append(bytes.Clone(wasm), tc.module...)
			_, err := bundle.ReadPages(m, mf)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadPages: %v, want %q", err, tc.want)
			}
			_, err = bundle.FromStored("hello", []byte(wasmManifest+pagesYAML), m, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("FromStored: %v, want %q", err, tc.want)
			}
		})
	}
	if files, err := bundle.ReadPages(append(bytes.Clone(wasm), section(bundle.PageSection, good)...), mf); err != nil || len(files) != 2 {
		t.Errorf("the good section: %v, %q", err, files)
	}
}
