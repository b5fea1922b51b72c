package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/grantfs"
	"github.com/tetratelabs/wazero"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
)

// A code-execution run must be able to write a file: `open("out.txt",
// "w")` is the first thing a program that makes output does. A WASI
// command without a mount has no files at all, and every libc resolves a
// relative name against its working directory, "/" (WASI has no chdir a
// host can set), so the run's scratch directory is mounted at "/": what
// the program writes by a relative name lands in it, and the run's other
// mounts (its sources, an interpreter's library) keep their own paths
// beneath, which a libc prefers (the longest preopen that is a prefix).
//
// The directory is the caller's: it makes it empty and removes it after
// the run (package languages does, whatever the run ended with). It is
// served by package grantfs, so no name or link the guest makes leads out
// of it and no symlink, FIFO or device is made or opened in it, under a
// Quota of bytes and names that grantfs keeps (ENOSPC to the guest past
// it, never a host failure). Its changes are not audited one by one: it
// is the run's own space, like its memory, and a program writing 10 000
// files would flood the trail; the first refusal for the quota is.

// Scratch is a run's writable working directory (RunRequest.Scratch).
type Scratch struct {
	// Dir is an empty directory on the host, made by the caller, who
	// removes it after the run.
	Dir string
	// MaxBytes and MaxFiles bound what the run keeps in it: the sizes of
	// its files and the names it makes. Zero takes the defaults;
	// negative is refused.
	MaxBytes, MaxFiles int64
}

func (s Scratch) quota() grantfs.Quota {
	q := grantfs.Quota{MaxBytes: s.MaxBytes, MaxFiles: s.MaxFiles}
	if q.MaxBytes == 0 {
		q.MaxBytes = DefaultScratchBytes
	}
	if q.MaxFiles == 0 {
		q.MaxFiles = DefaultScratchFiles
	}
	return q
}

// openScratch opens s.Dir for a run, under its quota.
func openScratch(s Scratch) (*grantfs.Dir, error) {
	if s.Dir == "" || s.MaxBytes < 0 || s.MaxFiles < 0 {
		return nil, fmt.Errorf("scratch directory %q (max %d bytes, %d files): want a directory and limits of 0 (the defaults) or more", s.Dir, s.MaxBytes, s.MaxFiles)
	}
	d, err := grantfs.Open(s.Dir, true)
	if err != nil {
		return nil, fmt.Errorf("scratch directory: %w", err)
	}
	d.Limit(s.quota())
	return d, nil
}

// mountScratch adds the scratch directory d at ScratchGuestPath.
func mountScratch(fsc wazero.FSConfig, d *grantfs.Dir, inv *invocation) wazero.FSConfig {
	return fsc.(sysfs.FSConfig).WithSysFSMount(d.FS(&scratchAuditor{inv: inv, dir: d}), ScratchGuestPath)
}

// mountCaptureScratch adds an empty directory at ScratchGuestPath to a
// snapshot's capture or probe run, whose image is then entered by runs
// that have a scratch directory there (Snapshot.Scratch): libc numbered
// the preopens at its start. It returns the cleanup.
func mountCaptureScratch(fsc wazero.FSConfig) (wazero.FSConfig, func(), error) {
	dir, err := os.MkdirTemp("", "moat-scratch-")
	if err != nil {
		return fsc, func() {}, fmt.Errorf("snapshot scratch directory: %w", err)
	}
	d, err := openScratch(Scratch{Dir: dir, MaxFiles: 1, MaxBytes: 1})
	if err != nil {
		os.RemoveAll(dir)
		return fsc, func() {}, err
	}
	fsc = fsc.(sysfs.FSConfig).WithSysFSMount(d.FS(&scratchAuditor{dir: d}), ScratchGuestPath)
	return fsc, func() { d.Close(); os.RemoveAll(dir) }, nil
}

// ScratchFS is a scratch directory for a driver that runs its guest in a
// wazero runtime of its own (the Ruby interpreter's), where a RunRequest
// cannot carry it: the same directory, quota and errnos as a Module.Run's.
type ScratchFS struct {
	dir   *grantfs.Dir
	errno syscall.Errno
	audit scratchAuditor
}

// OpenScratchFS opens s for one run. Close it after the run.
func OpenScratchFS(s Scratch) (*ScratchFS, error) {
	d, err := openScratch(s)
	if err != nil {
		return nil, err
	}
	f := &ScratchFS{dir: d}
	f.audit = scratchAuditor{dir: d, slot: &f.errno}
	return f, nil
}

// Mount adds the directory to fsc at ScratchGuestPath.
func (f *ScratchFS) Mount(fsc wazero.FSConfig) wazero.FSConfig {
	return fsc.(sysfs.FSConfig).WithSysFSMount(f.dir.FS(&f.audit), ScratchGuestPath)
}

// Context readies ctx, the guest's, so that WASI gives the guest ENOSPC
// when the quota refuses a change (wasierrno.go), not EIO.
func (f *ScratchFS) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, errnoSlotKey{}, &f.errno)
}

// Full names the limit a change was refused for, as RunResult.ScratchFull.
func (f *ScratchFS) Full() string { return f.dir.QuotaHit() }

// Close closes the directory (the caller removes it).
func (f *ScratchFS) Close() error { return f.dir.Close() }

// scratchAuditor admits every change in a scratch directory (its quota is
// the bound), records nothing but the first refusal for the quota, and
// gives the guest ENOSPC for it (wasierrno.go). inv is nil for a capture.
type scratchAuditor struct {
	inv      *invocation
	dir      *grantfs.Dir
	slot     *syscall.Errno // a ScratchFS's, when inv is nil
	recorded bool
}

func (a *scratchAuditor) Admit(grantfs.Change) experimentalsys.Errno { return 0 }
func (a *scratchAuditor) Made(grantfs.Change)                        {}
func (a *scratchAuditor) Refused(grantfs.Change, string)             {}

func (a *scratchAuditor) Epoch() uint64 {
	if a.inv == nil {
		return 0
	}
	return a.inv.epoch
}

// Unnamed implements grantfs.UnnamedErrnoReporter.
func (a *scratchAuditor) Unnamed(errno syscall.Errno) {
	if a.inv == nil {
		if a.slot != nil {
			*a.slot = errno
		}
		return
	}
	a.inv.fsErrno = errno
	hit := a.dir.QuotaHit()
	if hit == "" || a.recorded || !errors.Is(errno, syscall.ENOSPC) {
		return
	}
	a.recorded = true
	env := &a.inv.env
	q := a.dir.Limits()
	limit := strconv.FormatInt(q.MaxBytes, 10) + " bytes"
	if hit == grantfs.QuotaFiles {
		limit = strconv.FormatInt(q.MaxFiles, 10) + " files"
	}
	a.inv.m.host.audit.Record(orBackground(env.Context), audit.Event{Kind: audit.KindOp, Decision: audit.Deny, CorrelationID: env.CorrelationID,
		Module: a.inv.m.name, Action: env.Action, Op: OpFileWrite, User: env.Principal.User, Org: env.Principal.Org,
		Rule: "scratch quota", Code: "no_space", Reason: "the run's scratch directory is full: it holds at most " + limit,
		Attrs: map[string]string{"target": ScratchGuestPath, "limit": hit}})
}
