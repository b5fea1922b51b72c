package languages

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestCollectFilesHostile: what a scratch directory holds is the guest's
// making, and collectFiles reads none of it but regular files beneath
// it. The hostile entries are made on the host (a guest cannot make a
// link, FIFO or device in its scratch directory: grantfs refuses), as a
// directory swapped under the host would hold them: a link to
// /etc/passwd, a link to a directory outside, a FIFO (a read would
// block), a device, a name that is not text. None may be followed,
// opened or read; each is listed with why.
func TestCollectFilesHostile(t *testing.T) {
	testenv.Root(t, "mknod of a device needs root")
	dir := t.TempDir()
	outside := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("s3cret"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "ok.txt"), []byte("fine"), 0o644))
	must(os.Symlink("/etc/passwd", filepath.Join(dir, "passwd.txt")))
	must(os.Symlink(outside, filepath.Join(dir, "out")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo.txt"), 0o644))
	must(syscall.Mknod(filepath.Join(dir, "null.txt"), syscall.S_IFCHR|0o666, 1<<8|3)) // /dev/null's 1:3
	must(os.WriteFile(filepath.Join(dir, "bad\x1b[31m.txt"), []byte("x"), 0o644))
	done := make(chan struct{})
	var files []OutFile
	var err error
	go func() {
		defer close(done)
		files, err = collectFiles(dir, []string{"*.txt", "out/*"}, 1<<20)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("collectFiles blocked (on the FIFO?)")
	}
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]OutFile{}
	for _, f := range files {
		got[f.Name] = f
	}
	if f := got["ok.txt"]; f.Content != "fine" || f.Omitted != "" {
		t.Errorf("ok.txt: %+v", f)
	}
	for _, name := range []string{"passwd.txt", "fifo.txt", "null.txt"} {
		if f := got[name]; f.Content != "" || !strings.Contains(f.Omitted, "not a regular file") {
			t.Errorf("%s: %+v, want listed as not a regular file", name, f)
		}
	}
	if f := got[`"bad\x1b[31m.txt"`]; f.Content != "" || f.Omitted != "its name is not printable text" {
		t.Errorf("the name with an escape sequence: %+v (all: %+v)", f, files)
	}
	for _, f := range files {
		if strings.Contains(f.Content, "s3cret") || strings.Contains(f.Content, "root:") || strings.HasPrefix(f.Name, "out/") {
			t.Errorf("read through a link: %+v", f)
		}
	}
	if len(files) != 5 {
		t.Errorf("%d entries, want 5 (nothing beneath the link to a directory: it is never walked): %+v", len(files), files)
	}
}
