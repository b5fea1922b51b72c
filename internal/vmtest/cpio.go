package vmtest

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// archive is an initramfs under construction: the kernel unpacks a cpio
// archive in the "newc" format (uncompressed here: it is read from memory
// at boot, and compressing 60 MB of test binaries costs more than it saves).
type archive struct {
	entries map[string]entry
}

type entry struct {
	mode    uint32 // type and permission bits, as in stat(2)
	src     string // host file to copy (regular files)
	data    []byte // contents (regular files without src) or link target
	rdevMaj uint32
	rdevMin uint32
}

const (
	modeDir  = 0o040000
	modeReg  = 0o100000
	modeLink = 0o120000
	modeChr  = 0o020000
)

func newArchive() *archive { return &archive{entries: map[string]entry{}} }

// dirs adds the parents of name (without a leading slash) as directories.
func (a *archive) dirs(name string) {
	for i := strings.IndexByte(name, '/'); i > 0; i = indexFrom(name, '/', i+1) {
		if _, ok := a.entries[name[:i]]; !ok {
			a.entries[name[:i]] = entry{mode: modeDir | 0o755}
		}
	}
}

func indexFrom(s string, c byte, from int) int {
	if j := strings.IndexByte(s[from:], c); j >= 0 {
		return from + j
	}
	return -1
}

func clean(name string) string { return strings.TrimPrefix(name, "/") }

func (a *archive) dir(name string, perm uint32) {
	name = clean(name)
	a.dirs(name)
	a.entries[name] = entry{mode: modeDir | perm}
}

func (a *archive) file(name, src string, perm uint32) {
	name = clean(name)
	a.dirs(name)
	a.entries[name] = entry{mode: modeReg | perm, src: src}
}

func (a *archive) bytes(name string, data []byte, perm uint32) {
	name = clean(name)
	a.dirs(name)
	a.entries[name] = entry{mode: modeReg | perm, data: data}
}

func (a *archive) symlink(name, target string) {
	name = clean(name)
	a.dirs(name)
	a.entries[name] = entry{mode: modeLink | 0o777, data: []byte(target)}
}

func (a *archive) chardev(name string, perm, major, minor uint32) {
	name = clean(name)
	a.dirs(name)
	a.entries[name] = entry{mode: modeChr | perm, rdevMaj: major, rdevMin: minor}
}

// writeTo writes the archive, parents before children, and the trailer.
func (a *archive) writeTo(w io.Writer) error {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	sort.Strings(names) // a parent sorts before its children
	ino := uint32(1)
	for _, n := range names {
		e := a.entries[n]
		if err := writeEntry(w, n, ino, e); err != nil {
			return fmt.Errorf("initramfs %s: %w", n, err)
		}
		ino++
	}
	return writeRecord(w, "TRAILER!!!", 0, entry{}, 0, nil)
}

func writeEntry(w io.Writer, name string, ino uint32, e entry) error {
	switch {
	case e.src != "":
		f, err := os.Open(e.src)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		return writeRecord(w, name, ino, e, fi.Size(), f)
	case e.data != nil:
		return writeRecord(w, name, ino, e, int64(len(e.data)), bytes.NewReader(e.data))
	}
	return writeRecord(w, name, ino, e, 0, nil)
}

// writeRecord writes one newc header, the name and the body, each padded
// to four bytes.
func writeRecord(w io.Writer, name string, ino uint32, e entry, size int64, body io.Reader) error {
	nlink := uint32(1)
	if e.mode&0o170000 == modeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, e.mode, 0, 0, nlink, 0, size, 0, 0, e.rdevMaj, e.rdevMin, len(name)+1, 0)
	if _, err := io.WriteString(w, hdr+name+"\x00"+pad(len(hdr)+len(name)+1)); err != nil {
		return err
	}
	if body != nil {
		n, err := io.Copy(w, body)
		if err != nil {
			return err
		}
		if n != size {
			return fmt.Errorf("copied %d bytes, want %d (changed while packing)", n, size)
		}
	}
	_, err := io.WriteString(w, pad(int(size)))
	return err
}

func pad(n int) string { return strings.Repeat("\x00", (4-n%4)%4) }
