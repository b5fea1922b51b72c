package native

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Every job runs as a uid (and gid) of its own, leased from a range for
// as long as the job lives: two concurrent jobs never share a uid, so
// they share no keyring, no RLIMIT_NPROC count, and cannot signal or
// ptrace each other even if every other layer failed.
const (
	// UIDBase is the first uid of the range: far above the uids of
	// users and of /etc/subuid ranges (which start at 100000).
	UIDBase = 1_600_000_000
	// UIDCount is the range's size: how many jobs can run at once on one
	// machine, across every moat process.
	UIDCount = 65536
)

// UIDLockDir holds one lock file per leased uid. A lease is an flock on
// its file: the kernel drops it when the holder exits, crashed or not, so
// a uid is never lost, and every moat process on the machine (moat serve,
// moat run, tests) leases from the same range without sharing a uid.
var UIDLockDir = "/run/moat/uids"

// uidLease is a leased uid; release frees it.
type uidLease struct {
	uid int
	f   *os.File
}

func (l *uidLease) release() {
	if l != nil && l.f != nil {
		l.f.Close() // drops the flock
		l.f = nil
	}
}

// leaseUID leases a free uid of the range, starting at a random point so
// that a just-released uid is rarely handed out again at once.
func leaseUID() (*uidLease, error) {
	if err := os.MkdirAll(UIDLockDir, 0o700); err != nil {
		return nil, fmt.Errorf("uid range: %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	start := int(binary.LittleEndian.Uint32(b[:]) % UIDCount)
	for i := range UIDCount {
		uid := UIDBase + (start+i)%UIDCount
		f, err := os.OpenFile(filepath.Join(UIDLockDir, strconv.Itoa(uid)), os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("uid range: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
			return &uidLease{uid: uid, f: f}, nil
		} else if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("uid range: lock %d: %w", uid, err)
		}
		f.Close()
	}
	return nil, fmt.Errorf("uid range: all %d uids from %d are leased: that many jobs run at once", UIDCount, UIDBase)
}

// handOver gives the caller's job dir to the job's uid: the directory and
// what is in it, never following a symlink (Lchown on each entry; nothing
// runs in the dir meanwhile: a previous job's processes died with its pid
// namespace). A regular file with more than one link is left alone: it
// is a hard link to a file shared between jobs (a seeded build cache),
// which must stay its owner's.
func handOver(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
					return nil
				}
			}
		}
		return os.Lchown(p, uid, gid)
	})
}
