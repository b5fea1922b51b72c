package sessions

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/policy"
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

// readAll reads an image as Resume does: its header, its contexts, its
// workspace into a directory of t's.
func readAll(t *testing.T, r io.Reader, max int64) (*imageHeader, error) {
	ir, err := openImage(r, max)
	if err != nil {
		return nil, err
	}
	if _, err := ir.contexts(); err != nil {
		return nil, err
	}
	return ir.h, ir.workspace(t.TempDir(), 1<<20, 100)
}

// TestReadImageHostile: an image that is not whole and of this format is
// refused before anything of it is used (a version 1 image, read whole,
// as a version 2 one, streamed).
func TestReadImageHostile(t *testing.T) {
	seal := func(body []byte) []byte {
		sum := sha256.Sum256(body)
		return append(body, sum[:]...)
	}
	header := func(magic []byte, h string) []byte {
		b := append([]byte{}, magic...)
		b = binary.AppendUvarint(b, uint64(len(h)))
		return append(b, h...)
	}
	var emptyTar bytes.Buffer
	tar.NewWriter(&emptyTar).Close()
	seal2 := func(body []byte) []byte {
		return binary.BigEndian.AppendUint32(body, crc32.Checksum(body, castagnoli))
	}
	v2 := func(h string) []byte { return seal2(append(header(imageMagic, h), emptyTar.Bytes()...)) }
	for _, tt := range []struct {
		version string
		good    []byte
		bad     map[string][]byte
	}{
		{"1", seal(header(imageMagicV1, `{"id":"s1","user":"u","org":"o","contexts":[],"tar":0}`)), map[string][]byte{
			"context past the end": seal(header(imageMagicV1, `{"id":"s1","contexts":[{"info":{"name":"python","language":"python"},"bytes":99999}],"tar":0}`)),
			"bad context name":     seal(header(imageMagicV1, `{"id":"s1","contexts":[{"info":{"name":"../x","language":"python"},"bytes":1}],"tar":0}`)),
			"tar size lies":        seal(header(imageMagicV1, `{"id":"s1","contexts":[],"tar":5}`)),
			"huge header":          seal(append(append([]byte{}, imageMagicV1...), binary.AppendUvarint(nil, 1<<40)...)),
		}},
		{"2", v2(`{"id":"s1","user":"u","org":"o","contexts":[]}`), map[string][]byte{
			"context past the end": v2(`{"id":"s1","contexts":[{"info":{"name":"python","language":"python"},"bytes":99999}]}`),
			"bad context name":     v2(`{"id":"s1","contexts":[{"info":{"name":"../x","language":"python"},"bytes":1}]}`),
			"no tar":               seal2(header(imageMagic, `{"id":"s1","contexts":[]}`)),
			"bytes after the sum":  append(v2(`{"id":"s1","contexts":[]}`), 0),
			"huge header":          seal2(append(append([]byte{}, imageMagic...), binary.AppendUvarint(nil, 1<<40)...)),
		}},
	} {
		good := tt.good
		if h, err := readAll(t, bytes.NewReader(good), 1<<20); err != nil || h.ID != "s1" {
			t.Fatalf("v%s: a good image: %v", tt.version, err)
		}
		other := append([]byte("moatsess\x09"), good[len(imageMagic):]...)
		bad := map[string][]byte{
			"empty":           {},
			"another version": other,
			"flipped":         func() []byte { c := bytes.Clone(good); c[len(imageMagic)+3] ^= 1; return c }(),
			"flipped at end":  func() []byte { c := bytes.Clone(good); c[len(c)-40] ^= 1; return c }(),
			"cut":             good[:len(good)-1],
		}
		maps.Copy(bad, tt.bad)
		for name, b := range bad {
			if _, err := readAll(t, bytes.NewReader(b), 1<<20); err == nil {
				t.Errorf("v%s: %s: read", tt.version, name)
			}
		}
		if _, err := readAll(t, bytes.NewReader(good), 10); err == nil || !strings.Contains(err.Error(), "larger") {
			t.Errorf("v%s: past the bound: %v", tt.version, err)
		}
	}
}

// TestWriteImageStreams: a session's image, written as a stream, reads
// back with its header and its workspace's files; one past
// MaxImageBytes is refused as it is written, and a workspace past its
// quota too.
func TestWriteImageStreams(t *testing.T) {
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ws, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "d", "big"), bytes.Repeat([]byte("x"), 100<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	m := &Manager{cfg: Config{DiskQuotaBytes: 1 << 20, MaxFiles: 100}}
	s := &Session{m: m, id: "s1", owner: policy.Principal{User: "u", Org: "o"}, dir: ws, env: map[string]string{"A": "b"}}
	st := &sessionState{contexts: map[string]*pendingContext{}}
	var buf bytes.Buffer
	n, err := s.writeImage(&buf, st, 1<<20)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("write: %d bytes (%d in the buffer): %v", n, buf.Len(), err)
	}
	ir, err := openImage(bytes.NewReader(buf.Bytes()), 1<<20)
	if err != nil || ir.h.ID != "s1" || ir.h.Env["A"] != "b" {
		t.Fatalf("open: %v", err)
	}
	if _, err := ir.contexts(); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := ir.workspace(out, 1<<20, 100); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(out, "a.txt")); err != nil || string(b) != "kept" {
		t.Fatalf("a.txt: %q %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(out, "d", "big")); err != nil || fi.Size() != 100<<10 {
		t.Fatalf("d/big: %v", err)
	}
	// An intact image whose workspace this server's quota refuses: the
	// quota is named, not damage.
	ir, err = openImage(bytes.NewReader(buf.Bytes()), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := ir.workspace(t.TempDir(), 10<<10, 100); err == nil || !strings.Contains(err.Error(), "disk_quota_bytes") {
		t.Fatalf("a workspace past this server's quota: %v", err)
	}
	// A cut one: damage, whatever the tar made of it.
	ir, err = openImage(bytes.NewReader(buf.Bytes()[:buf.Len()-5000]), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := ir.workspace(t.TempDir(), 1<<20, 100); !errors.Is(err, errBadImage) {
		t.Fatalf("a cut image: %v", err)
	}
	h, err := readImageHeader(bytes.NewReader(buf.Bytes()))
	if err != nil || h.ID != "s1" {
		t.Fatalf("the header alone: %v", err)
	}
	if _, err := s.writeImage(io.Discard, st, 50<<10); !errors.Is(err, errImageTooLarge) {
		t.Fatalf("past max_image_bytes: %v", err)
	}
	m.cfg.DiskQuotaBytes = 10 << 10
	if _, err := s.writeImage(io.Discard, st, 1<<20); err == nil || !strings.Contains(err.Error(), "disk_quota_bytes") {
		t.Fatalf("past the quota: %v", err)
	}
}

// TestPausedListing: Manager.Paused lists the caller's paused sessions
// alone, from the images' headers: not another user's of the same
// organization, nor another organization's, nor a file that is no image,
// nor an image whose header names another id; an expired image is
// deleted as it is met; a live session is not listed again.
func TestPausedListing(t *testing.T) {
	dir := t.TempDir()
	images := DirImages(filepath.Join(dir, "images"))
	m := &Manager{cfg: Config{DiskQuotaBytes: 1 << 20, MaxFiles: 100, Images: images}, live: map[string]*Session{}}
	now := time.Now().UTC()
	put := func(id, user, org string, expires time.Time, as string) {
		t.Helper()
		ws := t.TempDir()
		s := &Session{m: m, id: id, owner: policy.Principal{User: user, Org: org}, dir: ws, start: now, expires: expires}
		var buf bytes.Buffer
		if _, err := s.writeImage(&buf, &sessionState{contexts: map[string]*pendingContext{}}, 1<<20); err != nil {
			t.Fatal(err)
		}
		if err := images.PutImage(context.Background(), org, as, &buf); err != nil {
			t.Fatal(err)
		}
	}
	later := now.Add(time.Hour)
	put("s1", "ann", "acme", later, "s1")
	put("s2", "bob", "acme", later, "s2")
	put("s3", "ann", "evil", later, "s3")
	put("s4", "ann", "acme", now.Add(-time.Second), "s4")
	put("s5", "ann", "acme", later, "s6") // a header naming another id
	put("s7", "ann", "acme", later, "s7")
	m.live["s7"] = &Session{id: "s7"}
	orgDir := filepath.Join(dir, "images", host.SnapshotKey([]byte("acme")))
	if err := os.WriteFile(filepath.Join(orgDir, "s8.img"), []byte("not an image"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := m.Paused(context.Background(), policy.Principal{User: "ann", Org: "acme"})
	if err != nil || len(got) != 1 || got[0].ID != "s1" || got[0].State != StatePaused {
		t.Fatalf("ann's paused sessions: %+v %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(orgDir, "s4.img")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the expired image is still there: %v", err)
	}
	if got, _ := m.Paused(context.Background(), policy.Principal{User: "eve", Org: "other"}); len(got) != 0 {
		t.Errorf("another organization's list: %+v", got)
	}
}
