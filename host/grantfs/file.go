package grantfs

import (
	"encoding/binary"
	"io"
	"io/fs"
	"os"
	"unsafe"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
	"golang.org/x/sys/unix"
)

// file is a file or directory a guest opened in a granted directory.
// Everything it does is by descriptor: once open, nothing is resolved by
// name again (wazero's own file reopens directories by path to rewind
// them, which a rename could redirect).
type file struct {
	seekMethod[int64]
	fs     *dirFS
	f      *os.File
	fd     int
	name   string // as opened, relative to the directory, for the audit
	flag   experimentalsys.Oflag
	dir    bool
	st     sys.Stat_t // at open: Dev and Ino do not change
	epoch  uint64     // the invocation whose change report covers writes through it; 0: none
	closed bool

	dirents []experimentalsys.Dirent // read from the kernel, not yet returned
	dirEOF  bool
}

var _ experimentalsys.File = (*file)(nil)

func (f *file) Dev() (uint64, experimentalsys.Errno) { return f.st.Dev, f.check() }

func (f *file) Ino() (sys.Inode, experimentalsys.Errno) { return f.st.Ino, f.check() }

func (f *file) IsDir() (bool, experimentalsys.Errno) { return f.dir, f.check() }

func (f *file) check() experimentalsys.Errno {
	if f.closed {
		return experimentalsys.EBADF
	}
	return 0
}

func (f *file) IsAppend() bool { return f.flag&experimentalsys.O_APPEND != 0 }

// SetAppend implements experimentalsys.File with fcntl on the descriptor.
// Appending to a file opened read-only changes nothing: writes through it
// still fail.
func (f *file) SetAppend(enable bool) experimentalsys.Errno {
	if e := f.check(); e != 0 {
		return e
	}
	if f.dir {
		return experimentalsys.EISDIR
	}
	fl, err := unix.FcntlInt(uintptr(f.fd), unix.F_GETFL, 0)
	if err != nil {
		return experimentalsys.UnwrapOSError(err)
	}
	if enable {
		fl |= unix.O_APPEND
	} else {
		fl &^= unix.O_APPEND
	}
	if _, err := unix.FcntlInt(uintptr(f.fd), unix.F_SETFL, fl); err != nil {
		return experimentalsys.UnwrapOSError(err)
	}
	if enable {
		f.flag |= experimentalsys.O_APPEND
	} else {
		f.flag &^= experimentalsys.O_APPEND
	}
	return 0
}

func (f *file) Stat() (sys.Stat_t, experimentalsys.Errno) {
	if e := f.check(); e != 0 {
		return sys.Stat_t{}, e
	}
	fi, err := f.f.Stat()
	if err != nil {
		return sys.Stat_t{}, experimentalsys.UnwrapOSError(err)
	}
	return sys.NewStat_t(fi), 0
}

func (f *file) Read(buf []byte) (int, experimentalsys.Errno) {
	if e := f.check(); e != 0 {
		return 0, e
	}
	if f.dir {
		return 0, experimentalsys.EISDIR
	}
	if len(buf) == 0 {
		return 0, 0
	}
	n, err := f.f.Read(buf)
	return n, ioErrno(err)
}

func (f *file) Pread(buf []byte, off int64) (int, experimentalsys.Errno) {
	if e := f.check(); e != 0 {
		return 0, e
	}
	if f.dir {
		return 0, experimentalsys.EISDIR
	}
	if len(buf) == 0 {
		return 0, 0
	}
	n, err := f.f.ReadAt(buf, off)
	return n, ioErrno(err)
}

// seekMethod gives file its Seek. experimentalsys.File's Seek returns an
// Errno where io.Seeker's returns an error, and go vet's stdmethods check
// reports any method named Seek whose first parameter is an int64 and
// whose results differ from io.Seeker's. On a type parameter's offset the
// check does not apply, and seekMethod[int64].Seek has exactly the
// signature wazero asks for.
type seekMethod[Offset ~int64] struct{ f *file }

func (s seekMethod[Offset]) Seek(offset Offset, whence int) (Offset, experimentalsys.Errno) {
	n, e := s.f.seek(int64(offset), whence)
	return Offset(n), e
}

func (f *file) seek(offset int64, whence int) (int64, experimentalsys.Errno) {
	if e := f.check(); e != 0 {
		return 0, e
	}
	if f.dir {
		// Only a rewind, which wazero's fd_readdir asks for with
		// cookie 0; the kernel's position restarts with it.
		if offset != 0 || whence != io.SeekStart {
			return 0, experimentalsys.EISDIR
		}
		if _, err := unix.Seek(f.fd, 0, io.SeekStart); err != nil {
			return 0, experimentalsys.UnwrapOSError(err)
		}
		f.dirents, f.dirEOF = nil, false
		return 0, 0
	}
	n, err := unix.Seek(f.fd, offset, whence)
	return n, experimentalsys.UnwrapOSError(err)
}

// Readdir implements experimentalsys.File from getdents64 on the
// descriptor, without "." and ".." (wazero adds its own). An entry whose
// type the filesystem does not report is looked up with fstatat on the
// descriptor, never by a path.
func (f *file) Readdir(n int) ([]experimentalsys.Dirent, experimentalsys.Errno) {
	if e := f.check(); e != 0 {
		return nil, e
	}
	if !f.dir {
		return nil, experimentalsys.ENOTDIR
	}
	var buf []byte
	for (n <= 0 || len(f.dirents) < n) && !f.dirEOF {
		if buf == nil {
			buf = make([]byte, 8<<10)
		}
		m, err := unix.Getdents(f.fd, buf)
		if err != nil {
			return nil, experimentalsys.UnwrapOSError(err)
		}
		if m == 0 {
			f.dirEOF = true
			break
		}
		f.dirents = append(f.dirents, f.parseDirents(buf[:m])...)
	}
	k := len(f.dirents)
	if n > 0 && n < k {
		k = n
	}
	out := f.dirents[:k:k]
	f.dirents = f.dirents[k:]
	return out, 0
}

// linux_dirent64: d_ino u64, d_off s64, d_reclen u16, d_type u8, d_name.
const direntName = int(unsafe.Offsetof(unix.Dirent{}.Name))

func (f *file) parseDirents(b []byte) []experimentalsys.Dirent {
	var out []experimentalsys.Dirent
	for len(b) >= direntName {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < direntName || reclen > len(b) {
			break
		}
		rec := b[:reclen]
		b = b[reclen:]
		nameBytes := rec[direntName:]
		if i := indexNUL(nameBytes); i >= 0 {
			nameBytes = nameBytes[:i]
		}
		nm := string(nameBytes)
		if nm == "." || nm == ".." || nm == "" {
			continue
		}
		d := experimentalsys.Dirent{Ino: binary.NativeEndian.Uint64(rec[0:8]), Name: nm}
		switch rec[18] {
		case unix.DT_REG:
		case unix.DT_DIR:
			d.Type = fs.ModeDir
		case unix.DT_LNK:
			d.Type = fs.ModeSymlink
		case unix.DT_FIFO:
			d.Type = fs.ModeNamedPipe
		case unix.DT_SOCK:
			d.Type = fs.ModeSocket
		case unix.DT_CHR:
			d.Type = fs.ModeDevice | fs.ModeCharDevice
		case unix.DT_BLK:
			d.Type = fs.ModeDevice
		default:
			var st unix.Stat_t
			if err := unix.Fstatat(f.fd, nm, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
				d.Type = modeType(st.Mode)
			}
		}
		out = append(out, d)
	}
	return out
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

func modeType(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	}
	return 0
}

// writing reports a change through the descriptor to the Auditor once
// per invocation: its open was reported in the invocation that opened
// it; a later one that writes through it (a pooled instance keeps its
// descriptors) is reported too. A descriptor without write access is
// left to the kernel, which refuses it.
func (f *file) writing(detail string) experimentalsys.Errno {
	if f.flag&3 == experimentalsys.O_RDONLY || !f.fs.dir.rw {
		return 0
	}
	ep := f.fs.audit.Epoch()
	if ep == f.epoch {
		return 0
	}
	c := Change{Kind: KindWrite, Path: f.name, Detail: detail}
	if e := f.fs.audit.Admit(c); e != 0 {
		return e
	}
	f.epoch = ep
	f.fs.audit.Made(c)
	return 0
}

// beforeWrite is what Write and Pwrite check before n bytes are written:
// the descriptor is open and no directory, and a write that changes
// something is asked of (and reported to) the audit. skip is true for an
// empty write, which changes nothing and is not audited.
func (f *file) beforeWrite(n int) (skip bool, e experimentalsys.Errno) {
	if e := f.check(); e != 0 {
		return true, e
	}
	if f.dir {
		return true, experimentalsys.EISDIR
	}
	if n == 0 {
		return true, 0
	}
	if e := f.writing("descriptor"); e != 0 {
		return true, e
	}
	return false, 0
}

func (f *file) Write(buf []byte) (int, experimentalsys.Errno) {
	if skip, e := f.beforeWrite(len(buf)); skip {
		return 0, e
	}
	if f.fs.dir.quota != nil {
		fitted, old, e := f.fit(buf, -1)
		if e != 0 {
			return 0, e
		}
		defer f.settle(old)
		buf = fitted
	}
	n, err := f.f.Write(buf)
	return n, experimentalsys.UnwrapOSError(f.fs.note(err))
}

func (f *file) Pwrite(buf []byte, off int64) (int, experimentalsys.Errno) {
	if skip, e := f.beforeWrite(len(buf)); skip {
		return 0, e
	}
	if f.fs.dir.quota != nil && off >= 0 {
		fitted, old, e := f.fit(buf, off)
		if e != 0 {
			return 0, e
		}
		defer f.settle(old)
		buf = fitted
	}
	n, err := f.f.WriteAt(buf, off)
	return n, experimentalsys.UnwrapOSError(f.fs.note(err))
}

func (f *file) Truncate(size int64) experimentalsys.Errno {
	if e := f.check(); e != 0 {
		return e
	}
	if f.dir {
		return experimentalsys.EISDIR
	}
	if size < 0 {
		return experimentalsys.EINVAL
	}
	if e := f.writing("descriptor,truncate"); e != 0 {
		return e
	}
	if u := f.fs.dir.quota; u != nil {
		var st unix.Stat_t
		if err := unix.Fstat(f.fd, &st); err != nil {
			return experimentalsys.UnwrapOSError(err)
		}
		if err := u.resize(st.Size, size); err != nil {
			return experimentalsys.UnwrapOSError(f.fs.note(err))
		}
		if err := f.f.Truncate(size); err != nil {
			_ = u.resize(size, st.Size)
			return experimentalsys.UnwrapOSError(f.fs.note(err))
		}
		return 0
	}
	return experimentalsys.UnwrapOSError(f.fs.note(f.f.Truncate(size)))
}

func (f *file) Sync() experimentalsys.Errno {
	if e := f.check(); e != 0 {
		return e
	}
	return experimentalsys.UnwrapOSError(f.fs.note(f.f.Sync()))
}

func (f *file) Datasync() experimentalsys.Errno {
	if e := f.check(); e != 0 {
		return e
	}
	return experimentalsys.UnwrapOSError(f.fs.note(unix.Fdatasync(f.fd)))
}

// Utimens implements experimentalsys.File: futimens works on a
// descriptor opened read-only, so the grant decides here, not the open
// mode. Each call is a change of its own.
func (f *file) Utimens(atim, mtim int64) experimentalsys.Errno {
	if e := f.check(); e != 0 {
		return e
	}
	return f.fs.change(Change{Kind: KindUtimes, Path: f.name}, func() error {
		// utimensat(fd, NULL, times, 0) is futimens: the descriptor's
		// file, whatever its name is now.
		ts := [2]unix.Timespec{timespec(atim), timespec(mtim)}
		_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(f.fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
		if e != 0 {
			return e
		}
		return nil
	})
}

func timespec(ns int64) unix.Timespec {
	if ns == experimentalsys.UTIME_OMIT {
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	}
	return unix.NsecToTimespec(ns)
}

func (f *file) Close() experimentalsys.Errno {
	if f.closed {
		return 0
	}
	f.closed = true
	return experimentalsys.UnwrapOSError(f.fs.note(f.f.Close()))
}

// ioErrno is an errno for a read: end of file is not an error.
func ioErrno(err error) experimentalsys.Errno {
	if err == io.EOF {
		return 0
	}
	return experimentalsys.UnwrapOSError(err)
}
