package toolchains_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/toolchains"
)

type entry struct {
	name, body, link string
	typ              byte
}

func tarball(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.name, Typeflag: typ, Mode: 0o644, Size: int64(len(e.body)), Linkname: e.link}
		if typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

func integrity(b []byte) string {
	s := sha512.Sum512(b)
	return "sha512-" + base64.StdEncoding.EncodeToString(s[:])
}

// registry serves one tarball at npm's path for pkg.
func registry(t *testing.T, pkg toolchains.NPMPackage, body []byte) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != strings.TrimPrefix(pkg.TarballURL("http://x"), "http://x") {
			http.NotFound(w, r)
			return
		}
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	t.Setenv(toolchains.EnvNPMRegistry, srv.URL)
}

func TestInstallNPM(t *testing.T) {
	defer toolchains.SetMaxPackageFiles(100)()
	good := tarball(t, entry{name: "package/package.json", body: `{"version":"1.0.0","bin":{"tool":"./dist/tool.wasm","../escape":"dist/tool.wasm","climb":"../../../etc/passwd"}}`},
		entry{name: "package/dist/tool.wasm", body: "\x00asm"},
		entry{name: "package/evil-link", link: "/etc/shadow", typ: tar.TypeSymlink})
	tests := []struct {
		name      string
		served    []byte
		integrity string // "" : the served bytes'
		wantErr   string
	}{
		{name: "pinned bytes install", served: good},
		{name: "other bytes are refused", served: tarball(t, entry{name: "package/dist/tool.wasm", body: "evil"}), integrity: integrity(good), wantErr: "pinned release"},
		{name: "climbing out is refused", served: tarball(t, entry{name: "package/../../../outside", body: "x"}), wantErr: "leaves the package"},
		{name: "absolute path is refused", served: tarball(t, entry{name: "package//etc/x/../../../../../../tmp/outside", body: "x"}), wantErr: "leaves the package"},
		{name: "a duplicate entry is refused", served: tarball(t, entry{name: "package/a", body: "1"}, entry{name: "package/a", body: "2"}), wantErr: "exists"},
		{name: "too many entries", served: manyDirs(t, 101), wantErr: "more than 100 entries"},
		{name: "not a tarball", served: []byte("<html>captive portal</html>"), wantErr: "unpack"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pkg := toolchains.NPMPackage{Name: "@moat-test/tool", Version: "1.0.0", Integrity: tt.integrity}
			if pkg.Integrity == "" {
				pkg.Integrity = integrity(tt.served)
			}
			registry(t, pkg, tt.served)
			dir := t.TempDir()
			var last int64
			err := toolchains.InstallNPM(context.Background(), dir, pkg, func(done, _ int64) { last = done })
			pkgDir := filepath.Join(dir, "npm", "node_modules", "@moat-test", "tool")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tt.wantErr)
				}
				if toolchains.NPMInstalled(dir, pkg) {
					t.Error("a refused package counts as installed")
				}
				if _, err := os.Stat(pkgDir); err == nil {
					t.Error("a refused package left its directory")
				}
				if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "outside")); err == nil {
					t.Error("an entry was written outside the package")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if last != int64(len(tt.served)) {
				t.Errorf("progress saw %d bytes, want %d", last, len(tt.served))
			}
			if b, err := os.ReadFile(filepath.Join(pkgDir, "dist", "tool.wasm")); err != nil || string(b) != "\x00asm" {
				t.Errorf("dist/tool.wasm = %q, %v", b, err)
			}
			if _, err := os.Lstat(filepath.Join(pkgDir, "evil-link")); err == nil {
				t.Error("a symlink was unpacked")
			}
			if !toolchains.NPMInstalled(dir, pkg) {
				t.Error("not installed after InstallNPM")
			}
			// package.json's bin, as npm links it; nothing outside.
			bin := filepath.Join(dir, "npm", "node_modules", ".bin")
			if b, err := os.ReadFile(filepath.Join(bin, "tool")); err != nil || string(b) != "\x00asm" {
				t.Errorf(".bin/tool: %q, %v", b, err)
			}
			ents, _ := os.ReadDir(bin)
			if len(ents) != 1 {
				t.Errorf(".bin holds %d entries, want only tool", len(ents))
			}
			if _, err := os.Lstat(filepath.Join(dir, "npm", "node_modules", "escape")); err == nil {
				t.Error("a bin name climbed out of .bin")
			}
			other := pkg
			other.Integrity = integrity([]byte("another release"))
			if toolchains.NPMInstalled(dir, other) {
				t.Error("installed counts for another checksum")
			}
		})
	}
}

// TestPinnedIntegrity: every pinned checksum is a well-formed sha512, so
// a typo fails here and not on a user's machine.
func TestPinnedIntegrity(t *testing.T) {
	for _, p := range toolchains.Provisions() {
		for _, pkg := range p.NPM {
			b, ok := strings.CutPrefix(pkg.Integrity, "sha512-")
			sum, err := base64.StdEncoding.DecodeString(b)
			if !ok || err != nil || len(sum) != sha512.Size {
				t.Errorf("%s: integrity %q is not sha512-BASE64", pkg, pkg.Integrity)
			}
		}
	}
}

// manyDirs is a tarball of n empty directories.
func manyDirs(t *testing.T, n int) []byte {
	es := make([]entry, n)
	for i := range es {
		es[i] = entry{name: fmt.Sprintf("package/d%d/", i), typ: tar.TypeDir}
	}
	return tarball(t, es...)
}
