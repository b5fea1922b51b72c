// Package grantfs serves a directory the operator granted to a module
// (filesystem: in moat.yaml and the profile) as a WASI filesystem: a
// wazero experimental sys.FS that the host mounts as a preopen at the
// same path inside the guest.
//
// Every name a guest gives is resolved beneath the granted directory by
// Go's os.Root: each path element is opened relative to the one before
// with O_NOFOLLOW, a symbolic link is read and resolved again beneath the
// root, and ".." or a link that would leave the directory is refused, so
// neither "..", an absolute link, nor a link swapped in between a check
// and a use can lead outside. wazero's own DirFS joins strings and lets
// the kernel follow links, which is why the host never uses it for a
// grant. Operations on the last element that os.Root does not offer with
// the right semantics (unlink and rmdir apart) are made with the *at
// system calls on a descriptor of the parent os.Root opened, never by a
// path from "/".
//
// A read-only Dir refuses every change with EROFS before the kernel sees
// it, and opens files without write access, so a descriptor cannot write
// either. A read-write Dir asks its Auditor before each change and tells
// it after: the host charges the invocation's audit budget and records
// the change (kind, path relative to the directory, never contents).
// Confinement refusals (a path or link leading outside, a symlink to be
// made, a FIFO or device to be opened) are EPERM and reported too.
package grantfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
)

// Dir is one granted directory, opened once when its module loads and
// shared by the module's instances (each gets its own FS, for its own
// Auditor). It is safe for concurrent use.
type Dir struct {
	root *os.Root
	path string // the directory opened: the grant's path with symlinks resolved
	rw   bool
	// quota, when set (Limit), bounds what the guest keeps beneath it.
	quota *usage
}

// Open opens the directory at path for a grant, read-write or not. path
// is resolved to the directory it names (symlinks followed) and opened
// once: RealPath says which directory that was, so the caller can check
// it against what no grant may reach, and every later operation uses the
// open directory, so replacing path afterwards changes nothing.
func Open(path string, rw bool) (*Dir, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("grantfs: %w", err)
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("grantfs: %w", err)
	}
	// The directory opened must be the one resolved: a rename or a link
	// swapped in between would make RealPath lie.
	opened, err1 := root.Stat(".")
	named, err2 := os.Stat(real)
	if err := errors.Join(err1, err2); err != nil {
		root.Close()
		return nil, fmt.Errorf("grantfs: %w", err)
	}
	if !os.SameFile(opened, named) {
		root.Close()
		return nil, fmt.Errorf("grantfs: %s changed while it was opened; try again", path)
	}
	return &Dir{root: root, path: real, rw: rw}, nil
}

// RealPath is the directory Open opened, symlinks resolved.
func (d *Dir) RealPath() string { return d.path }

// RW reports whether the grant allows changes.
func (d *Dir) RW() bool { return d.rw }

// Close closes the directory. Files a guest still holds stay open until
// their instance closes them; new opens fail with EBADF.
func (d *Dir) Close() error { return d.root.Close() }

// FS returns the directory as a wazero filesystem whose changes are
// reported to a, for one instance (wazero.FSConfig's WithSysFSMount).
func (d *Dir) FS(a Auditor) experimentalsys.FS { return &dirFS{dir: d, audit: a} }

// Change is one change a guest asks for in a granted directory, or one
// access the grant refused.
type Change struct {
	Kind string // one of the Kind constants
	// Path is the name the guest gave, relative to the directory and
	// cleaned ("." is the directory itself). It is the guest's string:
	// the caller bounds it before it logs or stores it.
	Path string
	// To is the second name of a rename or a link, or the target of a
	// symlink, as the guest gave it.
	To string
	// Detail says more of a KindWrite: how the file was opened
	// ("create", "truncate", "append", "exclusive", comma-separated), or
	// "descriptor" for a write through a descriptor the guest opened in
	// an earlier invocation (Auditor.Epoch).
	Detail string
}

// The kinds of Change.
const (
	KindWrite   = "write"   // a file opened for writing, created or truncated; or written through an older descriptor
	KindMkdir   = "mkdir"   // a directory made
	KindUnlink  = "unlink"  // a name removed
	KindRmdir   = "rmdir"   // a directory removed
	KindRename  = "rename"  // Path renamed to To
	KindLink    = "link"    // a hard link To made to Path
	KindSymlink = "symlink" // a symlink at Path to To: always refused (see Dir)
	KindChmod   = "chmod"   // permissions changed
	KindUtimes  = "utimes"  // times changed
	KindAccess  = "access"  // a read that the grant refused (only refusals are reported)
)

// Refusal reasons, as Auditor.Refused is told.
const (
	RefusedReadOnly = "the grant is read-only"
	RefusedOutside  = "the path leads outside the granted directory"
	RefusedSymlink  = "symlinks cannot be made in a granted directory"
	RefusedSpecial  = "only regular files and directories may be opened in a granted directory"
)

// UnnamedErrnoReporter is an optional interface of an Auditor: it is told
// when an operation failed with an errno that WASI preview 1 has but the
// filesystem interface (wazero's experimental sys.Errno) does not, and
// that the guest would otherwise read as EIO: ENOSPC (the granted
// directory's disk is full), EDQUOT (its quota is used up) and EFBIG. The
// host gives the guest that errno in place of EIO (see host's WASI
// wrappers).
type UnnamedErrnoReporter interface {
	Unnamed(errno syscall.Errno)
}

// unnamed are the errnos UnnamedErrnoReporter is told of.
var unnamed = []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG}

// Auditor is told of the changes a guest makes in a read-write directory,
// and of what the grant refuses. Its methods are called on the guest's
// goroutine, during the host call that asked.
type Auditor interface {
	// Admit is asked before a change is made and before a refusal is
	// reported. A non-zero Errno refuses (EPERM when the invocation's
	// audit budget is used up, or no invocation is in flight), and
	// nothing changes.
	Admit(c Change) experimentalsys.Errno
	// Made reports a change that was made.
	Made(c Change)
	// Refused reports a change or an access the grant refused, and why
	// (one of the Refused constants).
	Refused(c Change, why string)
	// Epoch names the invocation in flight: a descriptor opened for
	// writing in one invocation and written in another (a pooled instance
	// keeps its descriptors) is reported again, once per invocation.
	Epoch() uint64
}

// note tells the Auditor, when it asks to be told, of an errno the guest
// would read as EIO (UnnamedErrnoReporter), and returns err.
func (f *dirFS) note(err error) error {
	var e syscall.Errno
	if err != nil && errors.As(err, &e) && slices.Contains(unnamed, e) {
		if r, ok := f.audit.(UnnamedErrnoReporter); ok {
			r.Unnamed(e)
		}
	}
	return err
}
