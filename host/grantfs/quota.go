package grantfs

import (
	"io"
	"io/fs"
	"sync"
	"syscall"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"golang.org/x/sys/unix"
)

// A run's scratch directory is written by the guest alone, on the host's
// disk: without a bound, one loop filling it fills the host's /tmp (or
// its inodes, with empty files) for every other run and for the host
// itself. The kernel's quotas need a filesystem of their own per run and
// privileges the host may not have, so a Dir can carry a Quota it keeps
// itself: the bytes of the files beneath it (their apparent size, so a
// sparse file cannot cheat) and the names made in it (files, directories,
// links). It is counted as the guest changes things, from an empty
// directory: the guest is the only writer. A change that would pass a
// limit is refused with ENOSPC, what a full disk says, which the guest
// reads as such (UnnamedErrnoReporter), and a write that only partly
// fits writes what fits, as write(2) does on a full disk.

// Quota bounds what a guest may keep in a directory. A limit <= 0 is no
// limit.
type Quota struct {
	MaxBytes int64 // the sum of the sizes of its files
	MaxFiles int64 // the names made in it: files, directories, links
}

// Quota limits, as QuotaHit names them.
const (
	QuotaBytes = "bytes"
	QuotaFiles = "files"
)

// usage is a Quota and what is used of it.
type usage struct {
	q     Quota
	mu    sync.Mutex
	bytes int64
	files int64
	hit   string // the first limit a change was refused for
}

// Limit bounds the directory, which must be empty, by q. Call it before
// the first FS.
func (d *Dir) Limit(q Quota) { d.quota = &usage{q: q} }

// Usage is what the guest keeps in a limited directory: bytes and names.
func (d *Dir) Usage() (bytes, files int64) {
	if d.quota == nil {
		return 0, 0
	}
	d.quota.mu.Lock()
	defer d.quota.mu.Unlock()
	return d.quota.bytes, d.quota.files
}

// QuotaHit names the first limit (QuotaBytes, QuotaFiles) a change was
// refused for; "" when none was.
func (d *Dir) QuotaHit() string {
	if d.quota == nil {
		return ""
	}
	d.quota.mu.Lock()
	defer d.quota.mu.Unlock()
	return d.quota.hit
}

// Limits is the directory's quota (the zero Quota when it has none).
func (d *Dir) Limits() Quota {
	if d.quota == nil {
		return Quota{}
	}
	return d.quota.q
}

func (u *usage) refuse(limit string) error {
	if u.hit == "" {
		u.hit = limit
	}
	return syscall.ENOSPC
}

// addName counts a name about to be made; ENOSPC when none is left.
func (u *usage) addName() error {
	if u == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.q.MaxFiles > 0 && u.files >= u.q.MaxFiles {
		return u.refuse(QuotaFiles)
	}
	u.files++
	return nil
}

// dropName uncounts a name removed, or one counted and then not made.
func (u *usage) dropName() {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.files = max(0, u.files-1)
}

// resize counts a file's size going from old to size: ENOSPC, and
// nothing counted, when it grows past the limit.
func (u *usage) resize(old, size int64) error {
	if u == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if size > old && u.q.MaxBytes > 0 && u.bytes+(size-old) > u.q.MaxBytes {
		return u.refuse(QuotaBytes)
	}
	u.bytes = max(0, u.bytes+size-old)
	return nil
}

// room is how many more bytes the files may grow by; -1 without a limit.
func (u *usage) room() int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.q.MaxBytes <= 0 {
		return -1
	}
	return max(0, u.q.MaxBytes-u.bytes)
}

// removed uncounts a name that was removed, given what it was before
// (fi, from Lstat): its size goes too when it was a file's last link.
func (u *usage) removed(fi fs.FileInfo) {
	if u == nil {
		return
	}
	u.dropName()
	if fi != nil && fi.Mode().IsRegular() {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink <= 1 {
			_ = u.resize(fi.Size(), 0)
		}
	}
}

// fit cuts a write of buf at offset off (-1: the descriptor's position,
// or the end for an append) to what the quota has room for. It returns
// the file's size before the write, for settle, and ENOSPC when not one
// byte fits.
func (f *file) fit(buf []byte, off int64) ([]byte, int64, experimentalsys.Errno) {
	u := f.fs.dir.quota
	var st unix.Stat_t
	if err := unix.Fstat(f.fd, &st); err != nil {
		return nil, 0, experimentalsys.UnwrapOSError(err)
	}
	if off < 0 {
		if f.IsAppend() {
			off = st.Size
		} else {
			pos, err := f.f.Seek(0, io.SeekCurrent)
			if err != nil {
				return nil, 0, experimentalsys.UnwrapOSError(err)
			}
			off = pos
		}
	}
	room := u.room()
	if room < 0 {
		return buf, st.Size, 0
	}
	end := off + int64(len(buf))
	if over := end - (st.Size + room); over > 0 && end > st.Size {
		if over >= int64(len(buf)) {
			u.mu.Lock()
			err := u.refuse(QuotaBytes)
			u.mu.Unlock()
			return nil, st.Size, experimentalsys.UnwrapOSError(f.fs.note(err))
		}
		buf = buf[:int64(len(buf))-over]
	}
	return buf, st.Size, 0
}

// settle counts what a write or truncation changed the file's size by.
func (f *file) settle(old int64) {
	var st unix.Stat_t
	if unix.Fstat(f.fd, &st) == nil {
		u := f.fs.dir.quota
		u.mu.Lock()
		u.bytes = max(0, u.bytes+st.Size-old)
		u.mu.Unlock()
	}
}
