package grantfs_test

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/grantfs"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
)

// recorder is the Auditor of these tests: it keeps what it is told, and
// refuses with EPERM once deny is set (as the host does when an
// invocation's audit budget is used up).
type recorder struct {
	mu      sync.Mutex
	made    []grantfs.Change
	refused []string // kind path: why
	deny    bool
	epoch   uint64
}

func (r *recorder) Admit(grantfs.Change) experimentalsys.Errno {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.deny {
		return experimentalsys.EPERM
	}
	return 0
}

func (r *recorder) Made(c grantfs.Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.made = append(r.made, c)
}

func (r *recorder) Refused(c grantfs.Change, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refused = append(r.refused, c.Kind+" "+c.Path+": "+why)
}

func (r *recorder) Epoch() uint64 { return r.epoch }

// tree makes the hostile layout every test uses, under a fresh directory:
//
//	outside/secret                 "s3cret", outside the grant
//	grant/file.txt                 "hello"
//	grant/sub/inner.txt            "inner"
//	grant/link_passwd   -> /etc/passwd
//	grant/link_abs      -> <grant>/file.txt (absolute, though inside)
//	grant/link_up       -> ../outside/secret
//	grant/link_ok       -> sub/inner.txt
//	grant/loop1 <-> grant/loop2
//	grant/dir_out       -> ../outside
//	grant/dangling      -> ../outside/new
//	grant/fifo                     a FIFO
//	grant/hardlink                 a hard link to outside/linked (made by the operator)
//	grantdata/x                    a sibling whose name has grant's as a prefix
func tree(t *testing.T) (base, grant string) {
	t.Helper()
	base = t.TempDir()
	grant = filepath.Join(base, "grant")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"outside", "grant/sub", "grantdata"} {
		must(os.MkdirAll(filepath.Join(base, d), 0o755))
	}
	for name, body := range map[string]string{"outside/secret": "s3cret", "outside/linked": "linked", "grant/file.txt": "hello",
		"grant/sub/inner.txt": "inner", "grantdata/x": "sibling"} {
		must(os.WriteFile(filepath.Join(base, name), []byte(body), 0o644))
	}
	for name, target := range map[string]string{"link_passwd": "/etc/passwd", "link_abs": filepath.Join(grant, "file.txt"),
		"link_up": "../outside/secret", "link_ok": "sub/inner.txt", "loop1": "loop2", "loop2": "loop1", "dir_out": "../outside",
		"dangling": "../outside/new"} {
		must(os.Symlink(target, filepath.Join(grant, name)))
	}
	must(syscall.Mkfifo(filepath.Join(grant, "fifo"), 0o644))
	must(os.Link(filepath.Join(base, "outside/linked"), filepath.Join(grant, "hardlink")))
	return base, grant
}

func open(t *testing.T, grant string, rw bool) (experimentalsys.FS, *recorder) {
	t.Helper()
	d, err := grantfs.Open(grant, rw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	r := &recorder{epoch: 1}
	return d.FS(r), r
}

func readAll(t *testing.T, f experimentalsys.File) string {
	t.Helper()
	var b strings.Builder
	buf := make([]byte, 64)
	for {
		n, e := f.Read(buf)
		if e != 0 {
			t.Fatalf("read: %v", e)
		}
		if n == 0 {
			return b.String()
		}
		b.Write(buf[:n])
	}
}

// TestReadOnlyConfinement opens every hostile name of the tree read-only:
// names inside read; names that lead outside, however they do, are EPERM
// and reported; loops are ELOOP; a FIFO is refused without blocking.
func TestReadOnlyConfinement(t *testing.T) {
	_, grant := tree(t)
	fsys, rec := open(t, grant, false)
	for _, tt := range []struct {
		path string
		want string                // the content, when the open succeeds
		errn experimentalsys.Errno // else the errno
	}{
		{"file.txt", "hello", 0},
		{"/file.txt", "hello", 0}, // wazero joins a "." descriptor's name with "/"
		{"sub/inner.txt", "inner", 0},
		{"link_ok", "inner", 0},
		{"sub/../file.txt", "hello", 0},
		{"hardlink", "linked", 0}, // the operator's hard link is the file itself
		{"link_passwd", "", experimentalsys.EPERM},
		{"link_abs", "", experimentalsys.EPERM}, // absolute links are refused even when they point inside
		{"link_up", "", experimentalsys.EPERM},
		{"dir_out/secret", "", experimentalsys.EPERM},
		{"../outside/secret", "", experimentalsys.EPERM},
		{"sub/../../outside/secret", "", experimentalsys.EPERM},
		{"../grantdata/x", "", experimentalsys.EPERM}, // a prefix is not a parent
		{"sub/../../grant/file.txt", "", experimentalsys.EPERM},
		{"loop1", "", experimentalsys.ELOOP},
		{"fifo", "", experimentalsys.EPERM},
		{"missing", "", experimentalsys.ENOENT},
	} {
		t.Run(tt.path, func(t *testing.T) {
			f, e := fsys.OpenFile(tt.path, experimentalsys.O_RDONLY, 0)
			if e != tt.errn {
				t.Fatalf("open %s: errno %v, want %v", tt.path, e, tt.errn)
			}
			if e != 0 {
				return
			}
			defer f.Close()
			if got := readAll(t, f); got != tt.want {
				t.Errorf("read %q, want %q", got, tt.want)
			}
		})
	}
	for _, want := range []string{"access link_passwd: " + grantfs.RefusedOutside, "access ../outside/secret: " + grantfs.RefusedOutside,
		"access fifo: " + grantfs.RefusedSpecial} {
		if !slices.Contains(rec.refused, want) {
			t.Errorf("refusals %q lack %q", rec.refused, want)
		}
	}
	if len(rec.made) != 0 {
		t.Errorf("a read-only grant reported changes: %v", rec.made)
	}
	// Stat follows links beneath the root only; Lstat and Readlink show the
	// link itself, whatever it names.
	if _, e := fsys.Stat("link_passwd"); e != experimentalsys.EPERM {
		t.Errorf("stat link_passwd: %v, want EPERM", e)
	}
	if st, e := fsys.Lstat("link_passwd"); e != 0 || st.Mode&fs.ModeSymlink == 0 {
		t.Errorf("lstat link_passwd: %v %v", st.Mode, e)
	}
	if s, e := fsys.Readlink("link_passwd"); e != 0 || s != "/etc/passwd" {
		t.Errorf("readlink: %q %v", s, e)
	}
	if st, e := fsys.Stat("link_ok"); e != 0 || st.Size != 5 {
		t.Errorf("stat link_ok: %+v %v", st, e)
	}
}

// TestReadOnlyRefusesEveryChange: EROFS for every change, before the
// kernel sees it, each reported; the tree is unchanged after.
func TestReadOnlyRefusesEveryChange(t *testing.T) {
	base, grant := tree(t)
	fsys, rec := open(t, grant, false)
	for _, tt := range []struct {
		name string
		do   func() experimentalsys.Errno
	}{
		{"open for writing", func() experimentalsys.Errno {
			_, e := fsys.OpenFile("file.txt", experimentalsys.O_WRONLY, 0)
			return e
		}},
		{"open read-write", func() experimentalsys.Errno {
			_, e := fsys.OpenFile("file.txt", experimentalsys.O_RDWR, 0)
			return e
		}},
		{"create", func() experimentalsys.Errno {
			_, e := fsys.OpenFile("new.txt", experimentalsys.O_WRONLY|experimentalsys.O_CREAT, 0o644)
			return e
		}},
		{"truncate through a read-only open", func() experimentalsys.Errno {
			_, e := fsys.OpenFile("file.txt", experimentalsys.O_RDONLY|experimentalsys.O_TRUNC, 0)
			return e
		}},
		{"mkdir", func() experimentalsys.Errno { return fsys.Mkdir("d", 0o755) }},
		{"unlink", func() experimentalsys.Errno { return fsys.Unlink("file.txt") }},
		{"rmdir", func() experimentalsys.Errno { return fsys.Rmdir("sub") }},
		{"rename", func() experimentalsys.Errno { return fsys.Rename("file.txt", "moved.txt") }},
		{"link", func() experimentalsys.Errno { return fsys.Link("file.txt", "hl") }},
		{"symlink", func() experimentalsys.Errno { return fsys.Symlink("file.txt", "sl") }},
		{"chmod", func() experimentalsys.Errno { return fsys.Chmod("file.txt", 0o777) }},
		{"utimes", func() experimentalsys.Errno { return fsys.Utimens("file.txt", 0, 0) }},
		{"futimes on a read-only descriptor", func() experimentalsys.Errno {
			f, e := fsys.OpenFile("file.txt", experimentalsys.O_RDONLY, 0)
			if e != 0 {
				return e
			}
			defer f.Close()
			return f.Utimens(0, 0)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if e := tt.do(); e != experimentalsys.EROFS {
				t.Errorf("errno %v, want EROFS", e)
			}
		})
	}
	// A descriptor opened read-only cannot write either: the kernel says
	// EBADF, the grant needs no say.
	f, e := fsys.OpenFile("file.txt", experimentalsys.O_RDONLY, 0)
	if e != 0 {
		t.Fatal(e)
	}
	if _, e := f.Write([]byte("x")); e != experimentalsys.EBADF {
		t.Errorf("write through a read-only descriptor: %v, want EBADF", e)
	}
	if e := f.Truncate(0); e == 0 {
		t.Error("truncate through a read-only descriptor succeeded")
	}
	f.Close()
	if b, _ := os.ReadFile(filepath.Join(grant, "file.txt")); string(b) != "hello" {
		t.Errorf("file.txt is %q", b)
	}
	fi, _ := os.Stat(filepath.Join(grant, "file.txt"))
	if fi.Mode().Perm() != 0o644 || fi.ModTime().Unix() == 0 {
		t.Errorf("file.txt changed: %v %v", fi.Mode(), fi.ModTime())
	}
	for _, p := range []string{"grant/new.txt", "grant/d", "grant/moved.txt", "grant/hl", "grant/sl"} {
		if _, err := os.Lstat(filepath.Join(base, p)); err == nil {
			t.Errorf("%s exists", p)
		}
	}
	if len(rec.refused) != 13 || !strings.HasSuffix(rec.refused[0], grantfs.RefusedReadOnly) {
		t.Errorf("refusals: %q", rec.refused)
	}
}

// TestReadWrite makes each kind of change and checks the report of each.
func TestReadWrite(t *testing.T) {
	base, grant := tree(t)
	fsys, rec := open(t, grant, true)
	f, e := fsys.OpenFile("new.txt", experimentalsys.O_WRONLY|experimentalsys.O_CREAT|experimentalsys.O_EXCL, 0o755)
	if e != 0 {
		t.Fatal(e)
	}
	if _, e := f.Write([]byte("written")); e != 0 {
		t.Fatal(e)
	}
	f.Close()
	steps := []struct {
		name string
		do   func() experimentalsys.Errno
		want experimentalsys.Errno
	}{
		{"mkdir", func() experimentalsys.Errno { return fsys.Mkdir("d", 0o7777) }, 0},
		{"mkdir under a file", func() experimentalsys.Errno { return fsys.Mkdir("file.txt/x", 0o755) }, experimentalsys.ENOENT},
		{"rename", func() experimentalsys.Errno { return fsys.Rename("new.txt", "d/new.txt") }, 0},
		{"link", func() experimentalsys.Errno { return fsys.Link("d/new.txt", "d/hl") }, 0},
		{"unlink a directory", func() experimentalsys.Errno { return fsys.Unlink("d") }, experimentalsys.EISDIR},
		{"rmdir a file", func() experimentalsys.Errno { return fsys.Rmdir("d/hl") }, experimentalsys.ENOTDIR},
		{"rmdir not empty", func() experimentalsys.Errno { return fsys.Rmdir("d") }, experimentalsys.ENOTEMPTY},
		{"unlink", func() experimentalsys.Errno { return fsys.Unlink("d/hl") }, 0},
		{"chmod", func() experimentalsys.Errno { return fsys.Chmod("d/new.txt", 0o4777) }, 0},
		{"utimes", func() experimentalsys.Errno { return fsys.Utimens("d/new.txt", 1e9, 2e9) }, 0},
		{"rmdir the grant itself", func() experimentalsys.Errno { return fsys.Rmdir(".") }, experimentalsys.EINVAL},
	}
	for _, s := range steps {
		if e := s.do(); e != s.want {
			t.Errorf("%s: errno %v, want %v", s.name, e, s.want)
		}
	}
	fi, err := os.Stat(filepath.Join(grant, "d/new.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// No setuid, setgid, sticky or execute bit on a file a guest made.
	if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 || fi.Mode().Perm()&0o111 != 0 {
		t.Errorf("d/new.txt mode %v", fi.Mode())
	}
	if fi.ModTime().Unix() != 2 {
		t.Errorf("mtime %v", fi.ModTime())
	}
	if di, _ := os.Stat(filepath.Join(grant, "d")); di.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
		t.Errorf("d mode %v", di.Mode())
	}
	var kinds []string
	for _, c := range rec.made {
		kinds = append(kinds, c.Kind+" "+c.Path+" "+c.To+" "+c.Detail)
	}
	want := []string{"write new.txt  create,exclusive", "mkdir d  ", "rename new.txt d/new.txt ", "link d/new.txt d/hl ", "unlink d/hl  ",
		"chmod d/new.txt  ", "utimes d/new.txt  "}
	if !slices.Equal(kinds, want) {
		t.Errorf("made:\n%q\nwant\n%q", kinds, want)
	}
	if b, _ := os.ReadFile(filepath.Join(base, "outside/secret")); string(b) != "s3cret" {
		t.Errorf("outside/secret is %q", b)
	}
}

// TestReadWriteConfinement: no change leads outside, whatever the names.
func TestReadWriteConfinement(t *testing.T) {
	base, grant := tree(t)
	fsys, rec := open(t, grant, true)
	for _, tt := range []struct {
		name string
		do   func() experimentalsys.Errno
		want experimentalsys.Errno
	}{
		{"write through a link out", func() experimentalsys.Errno {
			_, e := fsys.OpenFile("link_up", experimentalsys.O_WRONLY|experimentalsys.O_TRUNC, 0)
			return e
		}, experimentalsys.EPERM},
		{"create through a dangling link out", func() experimentalsys.Errno {
			_, e := fsys.OpenFile("dangling", experimentalsys.O_WRONLY|experimentalsys.O_CREAT, 0o644)
			return e
		}, experimentalsys.EPERM},
		{"create in a linked directory out", func() experimentalsys.Errno {
			_, e := fsys.OpenFile("dir_out/new", experimentalsys.O_WRONLY|experimentalsys.O_CREAT, 0o644)
			return e
		}, experimentalsys.EPERM},
		{"rename out", func() experimentalsys.Errno { return fsys.Rename("file.txt", "../outside/stolen") }, experimentalsys.EPERM},
		{"rename out through a link", func() experimentalsys.Errno { return fsys.Rename("file.txt", "dir_out/stolen") }, experimentalsys.EPERM},
		{"rename in from outside", func() experimentalsys.Errno { return fsys.Rename("../outside/secret", "got") }, experimentalsys.EPERM},
		{"hard link to a file outside", func() experimentalsys.Errno { return fsys.Link("../outside/secret", "hl") }, experimentalsys.EPERM},
		{"hard link to a file outside through a link", func() experimentalsys.Errno { return fsys.Link("dir_out/secret", "hl") }, experimentalsys.EPERM},
		{"hard link placed outside", func() experimentalsys.Errno { return fsys.Link("file.txt", "../outside/hl") }, experimentalsys.EPERM},
		{"symlink", func() experimentalsys.Errno { return fsys.Symlink("/etc/shadow", "sl") }, experimentalsys.EPERM},
		{"relative symlink", func() experimentalsys.Errno { return fsys.Symlink("file.txt", "sl") }, experimentalsys.EPERM},
		{"mkdir outside", func() experimentalsys.Errno { return fsys.Mkdir("../outside/d", 0o755) }, experimentalsys.EPERM},
		{"mkdir through a link", func() experimentalsys.Errno { return fsys.Mkdir("dir_out/d", 0o755) }, experimentalsys.EPERM},
		{"unlink outside", func() experimentalsys.Errno { return fsys.Unlink("dir_out/secret") }, experimentalsys.EPERM},
		{"unlink in the prefix sibling", func() experimentalsys.Errno { return fsys.Unlink("../grantdata/x") }, experimentalsys.EPERM},
		{"chmod through a link", func() experimentalsys.Errno { return fsys.Chmod("link_up", 0o666) }, experimentalsys.EPERM},
		{"utimes through a link", func() experimentalsys.Errno { return fsys.Utimens("link_passwd", 0, 0) }, experimentalsys.EPERM},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if e := tt.do(); e != tt.want {
				t.Errorf("errno %v, want %v", e, tt.want)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(base, "outside/secret")); string(b) != "s3cret" {
		t.Errorf("outside/secret is %q", b)
	}
	ents, _ := os.ReadDir(filepath.Join(base, "outside"))
	if len(ents) != 2 {
		t.Errorf("outside holds %v", ents)
	}
	if fi, _ := os.Stat(filepath.Join(base, "outside/secret")); fi.Mode().Perm() != 0o644 {
		t.Errorf("outside/secret mode %v", fi.Mode())
	}
	if b, _ := os.ReadFile("/etc/passwd"); len(b) == 0 {
		t.Error("/etc/passwd is empty")
	}
	if len(rec.made) != 0 {
		t.Errorf("changes reported as made: %v", rec.made)
	}
	if !slices.Contains(rec.refused, "symlink sl: "+grantfs.RefusedSymlink) || !slices.Contains(rec.refused, "rename file.txt: "+grantfs.RefusedOutside) {
		t.Errorf("refusals: %q", rec.refused)
	}
}

// TestAuditorDecides: a change the Auditor does not admit is not made,
// and a descriptor kept across invocations is reported again.
func TestAuditorDecides(t *testing.T) {
	_, grant := tree(t)
	fsys, rec := open(t, grant, true)
	f, e := fsys.OpenFile("file.txt", experimentalsys.O_RDWR, 0)
	if e != 0 {
		t.Fatal(e)
	}
	defer f.Close()
	if _, e := f.Write([]byte("H")); e != 0 {
		t.Fatal(e)
	}
	if len(rec.made) != 1 {
		t.Fatalf("made %v", rec.made)
	}
	rec.epoch = 2 // the next invocation, on the same instance
	if _, e := f.Pwrite([]byte("E"), 2); e != 0 {
		t.Fatal(e)
	}
	if _, e := f.Write([]byte("L")); e != 0 {
		t.Fatal(e)
	}
	if len(rec.made) != 2 || rec.made[1].Detail != "descriptor" {
		t.Fatalf("made %v", rec.made)
	}
	rec.deny, rec.epoch = true, 3
	if _, e := f.Write([]byte("x")); e != experimentalsys.EPERM {
		t.Errorf("write past the budget: %v", e)
	}
	if e := fsys.Mkdir("d", 0o755); e != experimentalsys.EPERM {
		t.Errorf("mkdir past the budget: %v", e)
	}
	if _, e := fsys.OpenFile("link_passwd", experimentalsys.O_RDONLY, 0); e != experimentalsys.EPERM {
		t.Errorf("open out past the budget: %v", e)
	}
	if b, _ := os.ReadFile(filepath.Join(grant, "file.txt")); string(b) != "HLElo" {
		t.Errorf("file.txt is %q", b)
	}
	if _, err := os.Stat(filepath.Join(grant, "d")); err == nil {
		t.Error("d was made past the budget")
	}
}

// TestReaddir lists a directory through its descriptor, in pieces and
// rewound, with the types getdents reports.
func TestReaddir(t *testing.T) {
	_, grant := tree(t)
	fsys, _ := open(t, grant, false)
	d, e := fsys.OpenFile(".", experimentalsys.O_RDONLY|experimentalsys.O_DIRECTORY, 0)
	if e != 0 {
		t.Fatal(e)
	}
	defer d.Close()
	read := func() map[string]fs.FileMode {
		got := map[string]fs.FileMode{}
		for {
			ents, e := d.Readdir(3)
			if e != 0 {
				t.Fatal(e)
			}
			if len(ents) == 0 {
				return got
			}
			for _, en := range ents {
				got[en.Name] = en.Type
			}
		}
	}
	got := read()
	want := map[string]fs.FileMode{"file.txt": 0, "sub": fs.ModeDir, "link_passwd": fs.ModeSymlink, "link_abs": fs.ModeSymlink,
		"link_up": fs.ModeSymlink, "link_ok": fs.ModeSymlink, "loop1": fs.ModeSymlink, "loop2": fs.ModeSymlink, "dir_out": fs.ModeSymlink,
		"dangling": fs.ModeSymlink, "fifo": fs.ModeNamedPipe, "hardlink": 0}
	if len(got) != len(want) {
		t.Errorf("got %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
	if _, e := d.Seek(0, io.SeekStart); e != 0 {
		t.Fatal(e)
	}
	if again := read(); len(again) != len(want) {
		t.Errorf("after a rewind: %v", again)
	}
}

// TestSwapRace replaces a directory of the grant with a symlink leading
// outside, and back, as fast as it can, while files are opened and made
// through it: nothing outside is ever read or made.
func TestSwapRace(t *testing.T) {
	base, grant := tree(t)
	if err := os.WriteFile(filepath.Join(base, "outside/inner.txt"), []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	fsys, _ := open(t, grant, true)
	sub, parked := filepath.Join(grant, "sub"), filepath.Join(grant, "parked")
	link := filepath.Join(grant, "swap")
	if err := os.Symlink("../outside", link); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var swaps atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			// sub is the directory, then the link out, then the directory.
			if os.Rename(sub, parked) == nil && os.Rename(link, sub) == nil {
				swaps.Add(1)
				_ = os.Rename(sub, link)
				_ = os.Rename(parked, sub)
			}
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	var opened, outside int
	for i := 0; time.Now().Before(deadline); i++ {
		f, e := fsys.OpenFile("sub/inner.txt", experimentalsys.O_RDONLY, 0)
		if e == 0 {
			buf := make([]byte, 16)
			n, _ := f.Read(buf)
			f.Close()
			opened++
			if string(buf[:n]) == "s3cret" {
				outside++
			}
		}
		if w, e := fsys.OpenFile("sub/made", experimentalsys.O_WRONLY|experimentalsys.O_CREAT, 0o644); e == 0 {
			w.Close()
			_ = fsys.Unlink("sub/made")
		}
	}
	stop.Store(true)
	<-done
	if outside > 0 {
		t.Fatalf("read outside the grant %d times of %d", outside, opened)
	}
	if _, err := os.Stat(filepath.Join(base, "outside/made")); err == nil {
		t.Fatal("a file was made outside the grant")
	}
	if swaps.Load() < 100 || opened < 100 {
		t.Fatalf("the race hardly ran: %d swaps, %d opens", swaps.Load(), opened)
	}
	t.Logf("%d swaps, %d opens inside, none outside", swaps.Load(), opened)
}

// TestOpenResolvesOnce: the directory opened is the one the path named
// then; RealPath says which, symlinks resolved.
func TestOpenResolvesOnce(t *testing.T) {
	base, grant := tree(t)
	alias := filepath.Join(base, "alias")
	if err := os.Symlink(grant, alias); err != nil {
		t.Fatal(err)
	}
	d, err := grantfs.Open(alias, false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.RealPath() != grant {
		t.Errorf("RealPath %s, want %s", d.RealPath(), grant)
	}
	// Pointing the alias elsewhere afterwards changes nothing.
	os.Remove(alias)
	os.Symlink(filepath.Join(base, "outside"), alias)
	f, e := d.FS(&recorder{}).OpenFile("file.txt", experimentalsys.O_RDONLY, 0)
	if e != 0 {
		t.Fatal(e)
	}
	f.Close()
	if _, err := grantfs.Open(filepath.Join(grant, "file.txt"), false); err == nil {
		t.Error("a file opened as a grant")
	}
	if _, err := grantfs.Open(filepath.Join(base, "missing"), false); err == nil {
		t.Error("a missing directory opened as a grant")
	}
}

// TestWazeroDirFSFollowsLinksOut is why a grant is not wazero's DirFS:
// DirFS joins the guest's name to the directory and lets the kernel
// follow links, so a link in the directory reads a file outside it. If
// this ever fails, wazero confines DirFS itself, and docs/RATIONALE.md's
// "File grants are os.Root, not wazero's DirFS" should say so.
func TestWazeroDirFSFollowsLinksOut(t *testing.T) {
	_, grant := tree(t)
	f, e := sysfs.DirFS(grant).OpenFile("link_up", experimentalsys.O_RDONLY, 0)
	if e != 0 {
		t.Fatalf("DirFS refused the link: %v", e)
	}
	defer f.Close()
	if got := readAll(t, f); got != "s3cret" {
		t.Fatalf("DirFS read %q through link_up", got)
	}
}

// BenchmarkOpenRead opens and reads a file three directories deep, through
// a grant (os.Root: one openat per element) and through wazero's DirFS
// (one open of the joined path), which a grant does not use.
func BenchmarkOpenRead(b *testing.B) {
	dir := b.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a/b/c"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a/b/c/f"), []byte("hello"), 0o644); err != nil {
		b.Fatal(err)
	}
	d, err := grantfs.Open(dir, false)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	buf := make([]byte, 16)
	for _, bc := range []struct {
		name string
		fs   experimentalsys.FS
	}{{"grant", d.FS(&recorder{})}, {"wazero-dirfs", sysfs.DirFS(dir)}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				f, e := bc.fs.OpenFile("a/b/c/f", experimentalsys.O_RDONLY, 0)
				if e != 0 {
					b.Fatal(e)
				}
				if _, e := f.Read(buf); e != 0 {
					b.Fatal(e)
				}
				f.Close()
			}
		})
	}
}
