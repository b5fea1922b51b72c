package grantfs

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
	"golang.org/x/sys/unix"
)

// dirFS is a Dir as one instance's filesystem.
type dirFS struct {
	experimentalsys.UnimplementedFS
	dir   *Dir
	audit Auditor
}

// String names the directory, for wazero's messages.
func (f *dirFS) String() string { return f.dir.path }

// name turns a path wazero gives into one os.Root takes: relative, never
// empty. wazero joins a descriptor's name to a relative path with "/", so
// a directory opened as "." makes "/x".
func name(p string) string {
	p = strings.TrimLeft(p, "/")
	if p == "" {
		return "."
	}
	return p
}

// clean is the path reported to the Auditor.
func clean(p string) string { return path.Clean(name(p)) }

// errPathEscapes is os.Root's refusal of a path or link leading outside;
// the os package does not export it.
const errPathEscapes = "path escapes from parent"

// errno converts an error of an os.Root operation. outside reports a
// path or link that led outside the directory: os.Root refuses it, and
// the guest gets EPERM, as WASI's path resolution asks for.
func errno(err error) (e experimentalsys.Errno, outside bool) {
	if err == nil {
		return 0, false
	}
	var pe *os.PathError
	var le *os.LinkError
	inner := err
	switch {
	case errors.As(err, &pe):
		inner = pe.Err
	case errors.As(err, &le):
		inner = le.Err
	}
	if inner != nil && inner.Error() == errPathEscapes {
		return experimentalsys.EPERM, true
	}
	return experimentalsys.UnwrapOSError(err), false
}

// refuse reports a refused change (when the Auditor admits the report)
// and returns the errno the guest gets.
func (f *dirFS) refuse(c Change, why string, e experimentalsys.Errno) experimentalsys.Errno {
	if a := f.audit.Admit(c); a != 0 {
		return a
	}
	f.audit.Refused(c, why)
	return e
}

// change runs do for c in a read-write directory: refused with EROFS in a
// read-only one, asked of the Auditor first, reported after when it
// succeeded, and reported as refused when it led outside.
func (f *dirFS) change(c Change, do func() error) experimentalsys.Errno {
	if !f.dir.rw {
		return f.refuse(c, RefusedReadOnly, experimentalsys.EROFS)
	}
	if a := f.audit.Admit(c); a != 0 {
		return a
	}
	e, outside := errno(f.note(do()))
	switch {
	case outside:
		f.audit.Refused(c, RefusedOutside) // admitted above
	case e == 0:
		f.audit.Made(c)
	}
	return e
}

// read runs a read-only operation; one that leads outside is reported.
func (f *dirFS) read(p string, do func() error) experimentalsys.Errno {
	e, outside := errno(do())
	if outside {
		return f.refuse(Change{Kind: KindAccess, Path: clean(p)}, RefusedOutside, e)
	}
	return e
}

// writeIntent reports whether an open can change the file: write access,
// O_CREAT or O_TRUNC (Linux truncates even a read-only open with O_TRUNC).
func writeIntent(flag experimentalsys.Oflag) bool {
	return flag&(experimentalsys.O_RDWR|experimentalsys.O_WRONLY) != 0 ||
		flag&(experimentalsys.O_CREAT|experimentalsys.O_TRUNC) != 0
}

// openDetail describes how a file is opened for writing, for the audit.
func openDetail(flag experimentalsys.Oflag) string {
	var d []string
	for _, f := range []struct {
		bit  experimentalsys.Oflag
		name string
	}{{experimentalsys.O_CREAT, "create"}, {experimentalsys.O_TRUNC, "truncate"}, {experimentalsys.O_APPEND, "append"}, {experimentalsys.O_EXCL, "exclusive"}} {
		if flag&f.bit != 0 {
			d = append(d, f.name)
		}
	}
	return strings.Join(d, ",")
}

// osFlags converts wazero's open flags. O_NONBLOCK is always added (a
// FIFO would block the open, and the host's thread, until a writer came);
// the regular files and directories that are kept are blocking again
// (OpenFile).
// O_NOFOLLOW is os.Root's own on every element; the guest's is checked
// separately (OpenFile).
func osFlags(flag experimentalsys.Oflag) int {
	var o int
	switch flag & 3 {
	case experimentalsys.O_RDWR:
		o = os.O_RDWR
	case experimentalsys.O_WRONLY:
		o = os.O_WRONLY
	default:
		o = os.O_RDONLY
	}
	for _, f := range []struct {
		bit experimentalsys.Oflag
		os  int
	}{
		{experimentalsys.O_APPEND, os.O_APPEND}, {experimentalsys.O_CREAT, os.O_CREATE}, {experimentalsys.O_DIRECTORY, syscall.O_DIRECTORY},
		{experimentalsys.O_DSYNC, syscall.O_DSYNC}, {experimentalsys.O_EXCL, os.O_EXCL}, {experimentalsys.O_RSYNC, syscall.O_RSYNC},
		{experimentalsys.O_SYNC, os.O_SYNC}, {experimentalsys.O_TRUNC, os.O_TRUNC},
	} {
		if flag&f.bit != 0 {
			o |= f.os
		}
	}
	return o | syscall.O_NONBLOCK | syscall.O_NOCTTY
}

// Permissions a guest may give: nothing setuid, setgid or sticky, and no
// execute bit on a file (a directory needs its x bits to be entered). A
// file a guest wrote is data, never a program someone on the host might
// run, let alone one running as the host's user.
const (
	filePerm = 0o666
	dirPerm  = 0o777
)

// OpenFile implements experimentalsys.FS.
func (f *dirFS) OpenFile(p string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	n := name(p)
	write := writeIntent(flag)
	c := Change{Kind: KindWrite, Path: clean(p), Detail: openDetail(flag)}
	if write {
		if !f.dir.rw {
			return nil, f.refuse(c, RefusedReadOnly, experimentalsys.EROFS)
		}
		if a := f.audit.Admit(c); a != 0 {
			return nil, a
		}
	} else {
		c = Change{Kind: KindAccess, Path: c.Path}
	}
	if flag&experimentalsys.O_NOFOLLOW != 0 {
		// WASI's path_open without symlink_follow: a link as the last
		// element is ELOOP, not followed (os.Root would follow it, beneath
		// the root).
		if fi, err := f.dir.root.Lstat(n); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, experimentalsys.ELOOP
		}
	}
	// What the name is, before anything is opened: opening a FIFO, even
	// non-blocking and closed at once, is a reader its writer sees (a
	// writer blocked in open goes on, and then gets SIGPIPE), and opening
	// a device runs its driver's open (a tape rewinds, a terminal becomes
	// a controlling one). Stat follows links beneath the root, as the
	// open does, and opens nothing. Only what exists and is neither a
	// regular file nor a directory is refused here; a name swapped for a
	// FIFO between this and the open (by another program: a guest cannot
	// make one) is still refused after it, below.
	before, statErr := f.dir.root.Stat(n)
	if statErr == nil && !plain(before.Mode()) {
		if write {
			f.audit.Refused(c, RefusedSpecial) // admitted above
			return nil, experimentalsys.EPERM
		}
		return nil, f.refuse(c, RefusedSpecial, experimentalsys.EPERM)
	}
	// A quota (quota.go) counts the name a create makes, before it is
	// made, and frees the bytes a truncation drops.
	created := false
	if q := f.dir.quota; q != nil && write && flag&experimentalsys.O_CREAT != 0 && errors.Is(statErr, fs.ErrNotExist) {
		if err := q.addName(); err != nil {
			return nil, experimentalsys.UnwrapOSError(f.note(err))
		}
		created = true
	}
	osf, err := f.dir.root.OpenFile(n, osFlags(flag), perm.Perm()&filePerm)
	if created && err != nil {
		f.dir.quota.dropName()
	}
	if q := f.dir.quota; q != nil && err == nil && statErr == nil && before.Mode().IsRegular() && flag&experimentalsys.O_TRUNC != 0 {
		_ = q.resize(before.Size(), 0)
	}
	if e, outside := errno(f.note(err)); e != 0 {
		if outside {
			if write {
				f.audit.Refused(c, RefusedOutside) // admitted above
				return nil, e
			}
			return nil, f.refuse(c, RefusedOutside, e)
		}
		return nil, e
	}
	fi, err := osf.Stat()
	if err != nil {
		osf.Close()
		return nil, experimentalsys.UnwrapOSError(err)
	}
	if !plain(fi.Mode()) {
		// A FIFO, socket or device the operator (or another program)
		// left in the directory: opening it could block the host or
		// reach a device. It was opened non-blocking, and is closed
		// unused.
		osf.Close()
		if write {
			f.audit.Refused(c, RefusedSpecial)
			return nil, experimentalsys.EPERM
		}
		return nil, f.refuse(c, RefusedSpecial, experimentalsys.EPERM)
	}
	// Fd puts the descriptor back in blocking mode: a regular file or a
	// directory never blocks, and its reads and writes need no poller.
	fd := int(osf.Fd())
	file := &file{fs: f, f: osf, fd: fd, name: c.Path, flag: flag &^ experimentalsys.O_NONBLOCK, dir: fi.IsDir(), st: sys.NewStat_t(fi)}
	file.seekMethod.f = file
	if write {
		file.epoch = f.audit.Epoch()
		f.audit.Made(c)
	}
	return file, 0
}

// plain reports whether m is a regular file's or a directory's: the only
// kinds a granted directory opens.
func plain(m fs.FileMode) bool {
	t := m.Type()
	return t == 0 || t == fs.ModeDir
}

// Lstat implements experimentalsys.FS.
func (f *dirFS) Lstat(p string) (st sys.Stat_t, e experimentalsys.Errno) {
	e = f.read(p, func() error {
		fi, err := f.dir.root.Lstat(name(p))
		if err == nil {
			st = sys.NewStat_t(fi)
		}
		return err
	})
	return st, e
}

// Stat implements experimentalsys.FS.
func (f *dirFS) Stat(p string) (st sys.Stat_t, e experimentalsys.Errno) {
	e = f.read(p, func() error {
		fi, err := f.dir.root.Stat(name(p))
		if err == nil {
			st = sys.NewStat_t(fi)
		}
		return err
	})
	return st, e
}

// Readlink implements experimentalsys.FS: the link's text, which may name
// a place outside; following it is what stays beneath the root.
func (f *dirFS) Readlink(p string) (target string, e experimentalsys.Errno) {
	e = f.read(p, func() (err error) {
		target, err = f.dir.root.Readlink(name(p))
		return err
	})
	return target, e
}

// Mkdir implements experimentalsys.FS.
func (f *dirFS) Mkdir(p string, perm fs.FileMode) experimentalsys.Errno {
	e := f.change(Change{Kind: KindMkdir, Path: clean(p)}, func() error {
		if err := f.dir.quota.addName(); err != nil {
			return err
		}
		err := f.dir.root.Mkdir(name(p), perm.Perm()&dirPerm)
		if err != nil {
			f.dir.quota.dropName()
		}
		return err
	})
	if e == experimentalsys.ENOTDIR {
		e = experimentalsys.ENOENT // a parent that is a file, as wazero's DirFS answers
	}
	return e
}

// Chmod implements experimentalsys.FS. The mode is masked like a
// created file's (filePerm, dirPerm); os.Root acts on a link itself,
// never through it, if one is swapped in under it.
func (f *dirFS) Chmod(p string, perm fs.FileMode) experimentalsys.Errno {
	return f.change(Change{Kind: KindChmod, Path: clean(p)}, func() error {
		mode := perm.Perm() & dirPerm
		fi, err := f.dir.root.Stat(name(p))
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			mode &= filePerm
		}
		return f.dir.root.Chmod(name(p), mode)
	})
}

// Rename implements experimentalsys.FS. Both names are resolved beneath
// the root, and neither last element is followed: a link is moved, not
// its target.
func (f *dirFS) Rename(from, to string) experimentalsys.Errno {
	return f.change(Change{Kind: KindRename, Path: clean(from), To: clean(to)}, func() error {
		replaced, _ := f.dir.root.Lstat(name(to))
		if err := f.dir.root.Rename(name(from), name(to)); err != nil {
			return err
		}
		if replaced != nil && f.dir.quota != nil {
			if src, err := f.dir.root.Lstat(name(to)); err != nil || !os.SameFile(src, replaced) {
				f.dir.quota.removed(replaced)
			}
		}
		return nil
	})
}

// Link implements experimentalsys.FS: a hard link to a file beneath the
// root, at a name beneath it. A file outside cannot be named.
func (f *dirFS) Link(oldPath, newPath string) experimentalsys.Errno {
	return f.change(Change{Kind: KindLink, Path: clean(oldPath), To: clean(newPath)}, func() error {
		if err := f.dir.quota.addName(); err != nil {
			return err
		}
		err := f.dir.root.Link(name(oldPath), name(newPath))
		if err != nil {
			f.dir.quota.dropName()
		}
		return err
	})
}

// Symlink implements experimentalsys.FS: refused. A link the guest makes
// is followed beneath the root by moat, but not by whatever else reads
// the directory (the operator's tools, a web server, a backup), which
// would follow /srv/out/x -> /etc/shadow wherever it leads; and no check
// of its text holds once a directory holding it is renamed.
func (f *dirFS) Symlink(oldPath, link string) experimentalsys.Errno {
	c := Change{Kind: KindSymlink, Path: clean(link), To: oldPath}
	if !f.dir.rw {
		return f.refuse(c, RefusedReadOnly, experimentalsys.EROFS)
	}
	return f.refuse(c, RefusedSymlink, experimentalsys.EPERM)
}

// Unlink implements experimentalsys.FS: a name that is not a directory
// (EISDIR for one).
func (f *dirFS) Unlink(p string) experimentalsys.Errno {
	return f.change(Change{Kind: KindUnlink, Path: clean(p)}, func() error {
		return f.removeAt(p, 0)
	})
}

// Rmdir implements experimentalsys.FS: an empty directory (ENOTDIR for
// anything else).
func (f *dirFS) Rmdir(p string) experimentalsys.Errno {
	return f.change(Change{Kind: KindRmdir, Path: clean(p)}, func() error {
		return f.removeAt(p, unix.AT_REMOVEDIR)
	})
}

// removeAt removes p's last element from its parent, which os.Root opens:
// os.Root's Remove would remove a directory asked to unlink, or a file
// asked to rmdir. unlinkat never follows the element it removes.
func (f *dirFS) removeAt(p string, flags int) error {
	if f.dir.quota != nil {
		// What the name was, for the quota: a name, and a file's bytes
		// when it was the file's last link.
		fi, _ := f.dir.root.Lstat(name(p))
		if err := f.unlinkAt(p, flags); err != nil {
			return err
		}
		f.dir.quota.removed(fi)
		return nil
	}
	return f.unlinkAt(p, flags)
}

func (f *dirFS) unlinkAt(p string, flags int) error {
	dir, base := path.Split(path.Clean(name(p)))
	if dir == "" {
		dir = "."
	}
	parent, err := f.dir.root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer parent.Close()
	if err := unix.Unlinkat(int(parent.Fd()), base, flags); err != nil {
		return &os.PathError{Op: "unlinkat", Path: p, Err: err}
	}
	return nil
}

// Utimens implements experimentalsys.FS: a link's target, beneath the
// root (os.Root's Chtimes).
func (f *dirFS) Utimens(p string, atim, mtim int64) experimentalsys.Errno {
	return f.change(Change{Kind: KindUtimes, Path: clean(p)}, func() error {
		return f.dir.root.Chtimes(name(p), timeOf(atim), timeOf(mtim))
	})
}

// timeOf converts a WASI timestamp; UTIME_OMIT is the zero time, which
// Chtimes leaves unchanged.
func timeOf(ns int64) time.Time {
	if ns == experimentalsys.UTIME_OMIT {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
