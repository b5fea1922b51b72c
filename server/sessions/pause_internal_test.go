package sessions

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUntarTreeHostile: a workspace's tar from an image is written
// beneath its directory only: names that lead out, kinds a workspace
// does not hold and sizes past the quota are refused, and nothing lands
// outside.
func TestUntarTreeHostile(t *testing.T) {
	type entry struct {
		name, link string
		kind       byte
		size       int
	}
	for _, tt := range []struct {
		name    string
		entries []entry
		want    string
	}{
		{"dotdot", []entry{{name: "../escape", kind: tar.TypeReg, size: 1}}, "clean relative"},
		{"absolute", []entry{{name: "/etc/escape", kind: tar.TypeReg, size: 1}}, "clean relative"},
		{"unclean", []entry{{name: "a/../../escape", kind: tar.TypeReg, size: 1}}, "clean relative"},
		{"through a link out", []entry{{name: "l", link: "..", kind: tar.TypeSymlink}, {name: "l/escape", kind: tar.TypeReg, size: 1}}, "escape"},
		{"device", []entry{{name: "dev", kind: tar.TypeChar}}, "kind"},
		{"hard link", []entry{{name: "h", link: "/etc/passwd", kind: tar.TypeLink}}, "kind"},
		{"past the quota", []entry{{name: "a", kind: tar.TypeReg, size: 600}, {name: "b", kind: tar.TypeReg, size: 600}}, "disk_quota_bytes"},
		{"past max_files", []entry{{name: "a", kind: tar.TypeDir}, {name: "b", kind: tar.TypeDir}, {name: "c", kind: tar.TypeDir}, {name: "d", kind: tar.TypeDir}}, "max_files"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, e := range tt.entries {
				if err := tw.WriteHeader(&tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.kind, Size: int64(e.size), Mode: 0o600}); err != nil {
					t.Fatal(err)
				}
				tw.Write(bytes.Repeat([]byte("x"), e.size))
			}
			tw.Close()
			base := t.TempDir()
			dir := filepath.Join(base, "ws")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			err := untarTree(&buf, dir, 1000, 3)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("untar: %v, want an error with %q", err, tt.want)
			}
			if _, err := os.Stat(filepath.Join(base, "escape")); err == nil {
				t.Fatal("a file landed outside the workspace")
			}
		})
	}
}

// TestReadImageHostile: an image that is not whole and of this format is
// refused before anything of it is used.
func TestReadImageHostile(t *testing.T) {
	seal := func(body []byte) []byte {
		sum := sha256.Sum256(body)
		return append(body, sum[:]...)
	}
	header := func(h string) []byte {
		b := append([]byte{}, imageMagic...)
		b = binary.AppendUvarint(b, uint64(len(h)))
		return append(b, h...)
	}
	good := seal(header(`{"id":"s1","user":"u","org":"o","contexts":[],"tar":0}`))
	if h, _, _, err := readImage(bytes.NewReader(good), 1<<20); err != nil || h.ID != "s1" {
		t.Fatalf("a good image: %v", err)
	}
	other := append([]byte("moatsess\x02"), good[len(imageMagic):]...)
	for name, b := range map[string][]byte{
		"empty":                {},
		"another version":      seal(other[:len(other)-32]),
		"flipped":              func() []byte { c := bytes.Clone(good); c[len(imageMagic)+3] ^= 1; return c }(),
		"cut":                  good[:len(good)-1],
		"huge header":          seal(append(append([]byte{}, imageMagic...), binary.AppendUvarint(nil, 1<<40)...)),
		"context past the end": seal(header(`{"id":"s1","contexts":[{"info":{"name":"python","language":"python"},"bytes":99999}],"tar":0}`)),
		"bad context name":     seal(header(`{"id":"s1","contexts":[{"info":{"name":"../x","language":"python"},"bytes":1}],"tar":0}`)),
		"tar size lies":        seal(header(`{"id":"s1","contexts":[],"tar":5}`)),
	} {
		if _, _, _, err := readImage(bytes.NewReader(b), 1<<20); err == nil {
			t.Errorf("%s: read", name)
		}
	}
	if _, _, _, err := readImage(bytes.NewReader(good), 10); err == nil || !strings.Contains(err.Error(), "larger") {
		t.Errorf("past the bound: %v", err)
	}
}
