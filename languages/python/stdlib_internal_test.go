package python

import (
	"archive/zip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnzipRefusesEntriesOutsideTheLibrary(t *testing.T) {
	for _, tc := range []struct {
		name  string
		entry string
		ok    bool
	}{
		{"a module", "os.pyc", true},
		{"a package file", "json/__init__.pyc", true},
		{"parent directory", "../evil.pyc", false},
		{"absolute path", "/etc/evil.pyc", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			zp := filepath.Join(dir, "lib.zip")
			f, err := os.Create(zp)
			if err != nil {
				t.Fatal(err)
			}
			zw := zip.NewWriter(f)
			w, err := zw.Create(tc.entry)
			if err != nil {
				t.Fatal(err)
			}
			w.Write([]byte("x"))
			zw.Close()
			f.Close()
			n, err := unzip(zp, filepath.Join(dir, "out"))
			if tc.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "not a relative path")) {
				t.Fatalf("unzip(%q) = %d, %v; want ok=%v", tc.entry, n, err, tc.ok)
			}
			if tc.ok {
				if b, err := os.ReadFile(filepath.Join(dir, "out", filepath.FromSlash(tc.entry))); err != nil || string(b) != "x" {
					t.Fatalf("extracted %q: %q, %v", tc.entry, b, err)
				}
			}
		})
	}
}
