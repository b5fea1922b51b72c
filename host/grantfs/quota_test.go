package grantfs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/host/grantfs"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// unnamedRecorder is a recorder that is told of errnos WASI cannot name.
type unnamedRecorder struct {
	recorder
	unnamed []syscall.Errno
}

func (r *unnamedRecorder) Unnamed(e syscall.Errno) { r.unnamed = append(r.unnamed, e) }

// TestQuotaHostile: a limited directory (a run's scratch) refuses every
// way of passing its bytes or its names with ENOSPC, told to the host as
// such (the guest reads EIO otherwise), writes what fits of a write that
// only partly does, frees what a removal frees, and leaves the disk as
// the refusal found it.
func TestQuotaHostile(t *testing.T) {
	const maxBytes, maxFiles = 1000, 5
	open := func(t *testing.T) (string, *grantfs.Dir, experimentalsys.FS, *unnamedRecorder) {
		dir := t.TempDir()
		d, err := grantfs.Open(dir, true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		d.Limit(grantfs.Quota{MaxBytes: maxBytes, MaxFiles: maxFiles})
		r := &unnamedRecorder{}
		return dir, d, d.FS(r), r
	}
	create := func(t *testing.T, fsys experimentalsys.FS, name string) (experimentalsys.File, experimentalsys.Errno) {
		return fsys.OpenFile(name, experimentalsys.O_CREAT|experimentalsys.O_RDWR, 0o644)
	}
	cases := []struct {
		name  string
		do    func(t *testing.T, fsys experimentalsys.FS) experimentalsys.Errno // the refused step
		hit   string
		bytes int64 // what is counted after
		files int64
		disk  func(t *testing.T, dir string)
	}{
		{"one write past the bytes", func(t *testing.T, fsys experimentalsys.FS) experimentalsys.Errno {
			f, _ := create(t, fsys, "a")
			defer f.Close()
			if n, e := f.Write(make([]byte, 1500)); n != maxBytes || e != 0 {
				t.Fatalf("the write that partly fits: %d, %v; want %d written", n, e, maxBytes)
			}
			_, e := f.Write([]byte("x"))
			return e
		}, grantfs.QuotaBytes, maxBytes, 1, func(t *testing.T, dir string) { size(t, filepath.Join(dir, "a"), maxBytes) }},
		{"many small writes", func(t *testing.T, fsys experimentalsys.FS) experimentalsys.Errno {
			f, _ := create(t, fsys, "a")
			defer f.Close()
			for i := 0; ; i++ {
				if _, e := f.Write(make([]byte, 64)); e != 0 {
					return e
				}
				if i > 100 {
					t.Fatal("never refused")
				}
			}
		}, grantfs.QuotaBytes, maxBytes, 1, func(t *testing.T, dir string) { size(t, filepath.Join(dir, "a"), maxBytes) }},
		{"a sparse pwrite far out", func(t *testing.T, fsys experimentalsys.FS) experimentalsys.Errno {
			f, _ := create(t, fsys, "a")
			defer f.Close()
			_, e := f.Pwrite([]byte("x"), 1<<40)
			return e
		}, grantfs.QuotaBytes, 0, 1, func(t *testing.T, dir string) { size(t, filepath.Join(dir, "a"), 0) }},
		{"a truncate that grows", func(t *testing.T, fsys experimentalsys.FS) experimentalsys.Errno {
			f, _ := create(t, fsys, "a")
			defer f.Close()
			return f.Truncate(1 << 40)
		}, grantfs.QuotaBytes, 0, 1, func(t *testing.T, dir string) { size(t, filepath.Join(dir, "a"), 0) }},
		{"appends across two files", func(t *testing.T, fsys experimentalsys.FS) experimentalsys.Errno {
			a, _ := fsys.OpenFile("a", experimentalsys.O_CREAT|experimentalsys.O_WRONLY|experimentalsys.O_APPEND, 0o644)
			defer a.Close()
			a.Write(make([]byte, 600))
			b, _ := fsys.OpenFile("b", experimentalsys.O_CREAT|experimentalsys.O_WRONLY|experimentalsys.O_APPEND, 0o644)
			defer b.Close()
			if n, _ := b.Write(make([]byte, 600)); n != 400 {
				t.Fatalf("wrote %d, want the 400 that fit", n)
			}
			_, e := b.Write([]byte("x"))
			return e
		}, grantfs.QuotaBytes, maxBytes, 2, nil},
		{"many empty files", func(t *testing.T, fsys experimentalsys.FS) experimentalsys.Errno {
			for i := 0; ; i++ {
				f, e := create(t, fsys, fmt.Sprint("f", i))
				if e != 0 {
					return e
				}
				f.Close()
				if i > 100 {
					t.Fatal("never refused")
				}
			}
		}, grantfs.QuotaFiles, 0, maxFiles, func(t *testing.T, dir string) { count(t, dir, maxFiles) }},
		{"directories count as names", func(t *testing.T, fsys experimentalsys.FS) experimentalsys.Errno {
			for i := 0; ; i++ {
				if e := fsys.Mkdir(fmt.Sprint("d", i), 0o755); e != 0 {
					return e
				}
			}
		}, grantfs.QuotaFiles, 0, maxFiles, func(t *testing.T, dir string) { count(t, dir, maxFiles) }},
		{"hard links count as names", func(t *testing.T, fsys experimentalsys.FS) experimentalsys.Errno {
			f, _ := create(t, fsys, "a")
			f.Close()
			for i := 0; ; i++ {
				if e := fsys.Link("a", fmt.Sprint("l", i)); e != 0 {
					return e
				}
			}
		}, grantfs.QuotaFiles, 0, maxFiles, func(t *testing.T, dir string) { count(t, dir, maxFiles) }},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			dir, d, fsys, r := open(t)
			if e := tt.do(t, fsys); e != experimentalsys.EIO {
				t.Fatalf("refused with %v, want EIO told as ENOSPC", e)
			}
			if len(r.unnamed) == 0 || r.unnamed[len(r.unnamed)-1] != syscall.ENOSPC {
				t.Fatalf("told %v, want ENOSPC", r.unnamed)
			}
			if d.QuotaHit() != tt.hit {
				t.Fatalf("hit %q, want %q", d.QuotaHit(), tt.hit)
			}
			if b, f := d.Usage(); b != tt.bytes || f != tt.files {
				t.Fatalf("usage %d bytes %d names, want %d and %d", b, f, tt.bytes, tt.files)
			}
			if tt.disk != nil {
				tt.disk(t, dir)
			}
		})
	}
	t.Run("removals free what they held", func(t *testing.T) {
		_, d, fsys, _ := open(t)
		f, _ := create(t, fsys, "a")
		f.Write(make([]byte, maxBytes))
		f.Close()
		if e := fsys.Link("a", "b"); e != 0 {
			t.Fatal(e)
		}
		fsys.Unlink("a") // the file lives on as b: its bytes stay counted
		if b, n := d.Usage(); b != maxBytes || n != 1 {
			t.Fatalf("after unlinking one of two links: %d bytes %d names", b, n)
		}
		fsys.Unlink("b")
		fsys.Mkdir("d", 0o755)
		fsys.Rmdir("d")
		if b, n := d.Usage(); b != 0 || n != 0 {
			t.Fatalf("after removing everything: %d bytes %d names", b, n)
		}
		g, _ := create(t, fsys, "c")
		g.Write(make([]byte, 700))
		g.Close()
		h, _ := create(t, fsys, "e")
		h.Write(make([]byte, 200))
		h.Close()
		if e := fsys.Rename("e", "c"); e != 0 { // c's 700 bytes go
			t.Fatal(e)
		}
		t2, _ := fsys.OpenFile("c", experimentalsys.O_WRONLY|experimentalsys.O_TRUNC, 0)
		t2.Close()
		if b, n := d.Usage(); b != 0 || n != 1 {
			t.Fatalf("after a rename over a file and a truncating open: %d bytes %d names", b, n)
		}
		if d.QuotaHit() != "" {
			t.Fatalf("hit %q with nothing refused", d.QuotaHit())
		}
	})
}

func size(t *testing.T, p string, want int64) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil || fi.Size() != want {
		t.Fatalf("%s: %v, size want %d", p, err, want)
	}
}

func count(t *testing.T, dir string, want int) {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil || len(es) != want {
		t.Fatalf("%s holds %d names (%v), want %d", dir, len(es), err, want)
	}
}
