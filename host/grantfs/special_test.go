package grantfs_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/grantfs"
	"github.com/moat-sandbox/moat/internal/testenv"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"golang.org/x/sys/unix"
)

// opened watches dir with inotify and returns what reports the names of
// dir's entries opened since (IN_OPEN: the kernel's own record that an
// open reached the inode, whatever kind it is).
func opened(t *testing.T, dir string) func() []string {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_OPEN); err != nil {
		t.Fatal(err)
	}
	return func() []string {
		var names []string
		buf := make([]byte, 64<<10)
		for {
			n, err := unix.Read(fd, buf)
			if errors.Is(err, unix.EAGAIN) || n <= 0 {
				return names
			}
			for b := buf[:n]; len(b) >= unix.SizeofInotifyEvent; {
				l := int(binary.NativeEndian.Uint32(b[12:16]))
				name := b[unix.SizeofInotifyEvent : unix.SizeofInotifyEvent+l]
				if i := bytes.IndexByte(name, 0); i >= 0 {
					name = name[:i]
				}
				if len(name) > 0 {
					names = append(names, string(name))
				}
				b = b[unix.SizeofInotifyEvent+l:]
			}
		}
	}
}

// TestSpecialFilesNeverOpened: a FIFO, a device node and a socket in a
// granted directory, named directly or through a link, for reading,
// writing, creating or truncating, read-only grant or read-write, are
// refused with EPERM and reported, at once, and never opened: inotify
// sees no open of them, and a writer blocked opening the FIFO stays
// blocked (an open for reading, even non-blocking and closed at once,
// would have let it go on to a SIGPIPE).
func TestSpecialFilesNeverOpened(t *testing.T) {
	testenv.Slow(t, "72 opens of special files through guests")
	if os.Geteuid() != 0 {
		testenv.Require(t, "mknod of a device node needs root")
	}
	testenv.Timing(t)
	base := t.TempDir()
	grant := filepath.Join(base, "grant")
	if err := os.Mkdir(grant, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(grant, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	// A character device: /dev/null's numbers, so nothing harmful is
	// reached even if it were opened.
	if err := unix.Mknod(filepath.Join(grant, "chardev"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(grant, "blockdev"), unix.S_IFBLK|0o666, int(unix.Mkdev(7, 200))); err != nil {
		t.Fatal(err)
	}
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sock)
	if err := unix.Bind(sock, &unix.SockaddrUnix{Name: filepath.Join(grant, "sock")}); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("fifo", filepath.Join(grant, "link_fifo")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("chardev", filepath.Join(grant, "link_dev")); err != nil {
		t.Fatal(err)
	}

	// A writer waiting for a reader, as a program feeding the FIFO would.
	writerIn := make(chan struct{})
	go func() {
		f, err := os.OpenFile(filepath.Join(grant, "fifo"), os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		close(writerIn)
	}()
	time.Sleep(50 * time.Millisecond)
	seen := opened(t, grant)

	var cases int
	for _, rw := range []bool{false, true} {
		fsys, rec := open(t, grant, rw)
		for _, name := range []string{"fifo", "chardev", "blockdev", "sock", "link_fifo", "link_dev"} {
			for _, flag := range []experimentalsys.Oflag{
				experimentalsys.O_RDONLY, experimentalsys.O_WRONLY, experimentalsys.O_RDWR,
				experimentalsys.O_WRONLY | experimentalsys.O_TRUNC, experimentalsys.O_WRONLY | experimentalsys.O_CREAT,
				experimentalsys.O_RDONLY | experimentalsys.O_NONBLOCK,
			} {
				cases++
				start := time.Now()
				f, e := fsys.OpenFile(name, flag, 0o644)
				if f != nil {
					f.Close()
				}
				want := experimentalsys.EPERM
				if !rw && flag&(experimentalsys.O_WRONLY|experimentalsys.O_RDWR|experimentalsys.O_TRUNC|experimentalsys.O_CREAT) != 0 {
					want = experimentalsys.EROFS // a read-only grant refuses the intent first
				}
				if e != want {
					t.Errorf("rw=%v open %s flag %#x: errno %v, want %v", rw, name, flag, e, want)
				}
				if d := time.Since(start); d > 100*time.Millisecond {
					t.Errorf("rw=%v open %s flag %#x took %s", rw, name, flag, d)
				}
			}
		}
		for _, name := range []string{"fifo", "chardev", "blockdev", "sock", "link_fifo", "link_dev"} {
			why := grantfs.RefusedSpecial
			if !slices.ContainsFunc(rec.refused, func(s string) bool { return s == "access "+name+": "+why || s == "write "+name+": "+why }) {
				t.Errorf("rw=%v: no refusal of %s reported: %q", rw, name, rec.refused)
			}
		}
	}
	if got := seen(); len(got) != 0 {
		t.Errorf("the kernel saw opens of %q in the granted directory", got)
	}
	time.Sleep(200 * time.Millisecond)
	select {
	case <-writerIn:
		t.Error("the FIFO's writer got a reader: the FIFO was opened")
	default:
	}
	// Let the writer go: a reader of our own.
	r, err := os.OpenFile(filepath.Join(grant, "fifo"), os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	<-writerIn
	r.Close()
	// A regular file beside them opens as ever, and inotify sees it (the
	// watch works).
	fsys, _ := open(t, grant, false)
	if err := os.WriteFile(filepath.Join(grant, "plain"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	seen()
	f, e := fsys.OpenFile("plain", experimentalsys.O_RDONLY, 0)
	if e != 0 {
		t.Fatalf("open plain: %v", e)
	}
	f.Close()
	if got := seen(); !slices.Contains(got, "plain") {
		t.Errorf("inotify saw %q after opening plain; the watch sees nothing", got)
	}
	t.Logf("%d refused opens", cases)
}
