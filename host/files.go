package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/moat-sandbox/moat/host/grantfs"
	"github.com/moat-sandbox/moat/host/transport"
	"github.com/moat-sandbox/moat/policy"
	"github.com/tetratelabs/wazero"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
)

// This file is where the filesystem capability becomes directories a
// guest can use: each effective grant (manifest ∩ profile, read-write only
// when both say rw) is opened once at load, checked against what no grant
// may reach, and mounted in every instance as a WASI preopen at the
// grant's own path (package grantfs confines it). Every change a guest
// makes there is an op event of the audit trail, charged to the
// invocation's audit budget like any op.

// The ops file changes and refusals are recorded as.
const (
	// OpFileWrite is every change in a granted directory (attrs.change
	// says which: write, mkdir, unlink, rmdir, rename, link, symlink,
	// chmod, utimes).
	OpFileWrite = "fs.write"
	// OpFileRead is a read the grant refused (a path or link leading
	// outside, a FIFO or device). Reads that succeed are not recorded.
	OpFileRead = "fs.read"
)

// maxAuditPath bounds a guest's path in an audit event: a path is the
// guest's string, and a WASI path may be as long as guest memory.
const maxAuditPath = 512

// fileGrant is one granted directory of a loaded module.
type fileGrant struct {
	path string // where the guest sees it: the path granted
	dir  *grantfs.Dir
}

// fileGrants are a module's open directories. They close when the module
// has closed and so has the last instance using them: a call in flight
// when its module is replaced keeps its directories to the end.
type fileGrants struct {
	list  []fileGrant
	mu    sync.Mutex
	refs  int  // the module's, and each live instance's
	owned bool // the module's reference is held (releaseOwner)
}

func (fg *fileGrants) grants() []fileGrant {
	if fg == nil {
		return nil
	}
	return fg.list
}

// acquire takes a reference for an instance; false once the directories
// are closed.
func (fg *fileGrants) acquire() bool {
	if fg == nil {
		return true
	}
	fg.mu.Lock()
	defer fg.mu.Unlock()
	if fg.refs == 0 {
		return false
	}
	fg.refs++
	return true
}

// releaseOwner drops the module's reference, once however often it is
// called (a load that failed, Module.Close).
func (fg *fileGrants) releaseOwner() {
	if fg == nil {
		return
	}
	fg.mu.Lock()
	owned := fg.owned
	fg.owned = false
	fg.mu.Unlock()
	if owned {
		fg.release()
	}
}

// release drops a reference, closing the directories with the last.
func (fg *fileGrants) release() {
	if fg == nil {
		return
	}
	fg.mu.Lock()
	fg.refs--
	last := fg.refs == 0
	fg.mu.Unlock()
	if last {
		for _, g := range fg.list {
			g.dir.Close()
		}
	}
}

// openFileGrants opens the module's effective file grants and checks each
// directory opened (symlinks resolved) against what no grant may reach:
// /proc, /sys and /dev, and the host's own data and cache directories (the
// store, the compiled machine code it runs, other modules' files), either
// way round, since a grant of a parent of the data directory reaches it
// too. A grant that cannot be opened or is refused refuses the load,
// audited.
func (h *Host) openFileGrants(ctx context.Context, m *Module, correlation, refused string) error {
	gs := m.policy.eval.Effective.Filesystem
	if len(gs) == 0 {
		return nil
	}
	refuse := func(g policy.FileGrant, reason string, err error) error {
		m.closeFileGrants()
		reason = fmt.Sprintf("filesystem %s: %s", g.String(), reason)
		h.audit.Record(ctx, audit.Event{Kind: audit.KindLoad, Decision: audit.Deny, CorrelationID: correlation, Module: m.name,
			Rule: "capabilities.filesystem", Reason: reason})
		return &Error{Module: m.name, Code: abi.CodeDenied, Reason: reason, Err: err}
	}
	if refused != "" { // the module's kind gets none (its loader says why)
		return refuse(gs[0], refused, nil)
	}
	m.files = &fileGrants{refs: 1, owned: true}
	protected := h.protectedDirs()
	for _, g := range gs {
		if err := policy.CheckFilePath(g.Path); err != nil { // a manifest built by hand
			return refuse(g, err.Error(), err)
		}
		d, err := grantfs.Open(g.Path, g.RW)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return refuse(g, fmt.Sprintf("no such directory (%v); create it, or remove the grant", err), err)
		case errors.Is(err, fs.ErrPermission):
			return refuse(g, fmt.Sprintf("the host may not open it (%v): check its permissions, and that the host's own confinement allows it (moat serve allows what its profiles grant, moat run what the manifest asks for)", err), err)
		case err != nil:
			return refuse(g, fmt.Sprintf("cannot open the directory (%v); grant a directory", err), err)
		}
		m.files.list = append(m.files.list, fileGrant{path: g.Path, dir: d})
		real := d.RealPath()
		if err := policy.CheckFilePath(real); err != nil {
			return refuse(g, fmt.Sprintf("it is %s: %v", real, err), err)
		}
		p, err := reachesProtected(real, protected)
		switch {
		case err != nil:
			return refuse(g, fmt.Sprintf("cannot tell whether %s reaches moat's own directories (%v); grant a directory the host can read", real, err), err)
		case p != nil:
			return refuse(g, fmt.Sprintf("%s reaches moat's own %s %s: a module must never touch the store, the compiled code the host runs, or other modules' files; grant a directory apart from it", real, p.what, p.path), nil)
		}
	}
	return nil
}

type protectedDir struct{ what, path string }

// protectedDirs are the host's own directories, resolved as grants are.
func (h *Host) protectedDirs() []protectedDir {
	var out []protectedDir
	for _, p := range []protectedDir{{"data directory", h.cfg.DataDir}, {"cache directory", h.cfg.CacheDir}} {
		abs, err := filepath.Abs(p.path)
		if err != nil {
			continue
		}
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
		out = append(out, protectedDir{p.what, abs})
	}
	return out
}

// openGrantedMount opens a Mount.Granted directory, refusing one that
// reaches moat's own data or cache directory.
func (h *Host) openGrantedMount(mt Mount) (*grantfs.Dir, error) {
	d, err := grantfs.Open(mt.HostDir, !mt.ReadOnly)
	if err != nil {
		return nil, fmt.Errorf("mount %s at %s: %w", mt.HostDir, mt.GuestPath, err)
	}
	real := d.RealPath()
	p, err := reachesProtected(real, h.protectedDirs())
	switch {
	case err != nil:
		d.Close()
		return nil, fmt.Errorf("mount %s at %s: cannot tell whether it reaches moat's own directories: %w", mt.HostDir, mt.GuestPath, err)
	case p != nil:
		d.Close()
		return nil, fmt.Errorf("mount %s at %s: it reaches moat's own %s %s, which a guest must never touch; give a directory apart from it", mt.HostDir, mt.GuestPath, p.what, p.path)
	}
	return d, nil
}

// openMountGrants opens a resident script's Mount.Granted directories
// (a session's workspace, package server/sessions) once, as the module's
// file grants are: each mounted in every instance at its guest path, its
// changes audited and bounded by the mount's quota. A resident instance
// lives across calls, so a directory opened per run (Run's) would not do.
func (h *Host) openMountGrants(m *Module, mounts []Mount) error {
	for _, mt := range mounts {
		if !mt.Granted {
			continue
		}
		d, err := h.openGrantedMount(mt)
		if err != nil {
			m.closeFileGrants()
			return &Error{Module: m.name, Code: abi.CodeDenied, Reason: err.Error(), Err: err}
		}
		if mt.MaxBytes > 0 || mt.MaxFiles > 0 {
			d.Limit(grantfs.Quota{MaxBytes: mt.MaxBytes, MaxFiles: mt.MaxFiles})
		}
		if m.files == nil {
			m.files = &fileGrants{refs: 1, owned: true}
		}
		m.files.list = append(m.files.list, fileGrant{path: filepath.Clean(mt.GuestPath), dir: d})
	}
	return nil
}

// reachesProtected returns the first of the host's own directories that
// dir (resolved) is, lies within or holds, or nil. Names are compared
// first; then what the directories are (grantfs.Overlap: device and
// inode up the tree, and the mounts below each), since a bind mount of
// the data directory at another path has a name apart from it. A
// protected directory that does not exist yet is compared by name only.
func reachesProtected(dir string, protected []protectedDir) (*protectedDir, error) {
	for i, p := range protected {
		if policy.PathWithin(dir, p.path) || policy.PathWithin(p.path, dir) {
			return &protected[i], nil
		}
	}
	for i, p := range protected {
		if _, err := os.Stat(p.path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		over, err := grantfs.Overlap(dir, p.path)
		if err != nil {
			return nil, err
		}
		if over {
			return &protected[i], nil
		}
	}
	return nil, nil
}

// closeFileGrants drops the module's reference to its directories.
func (m *Module) closeFileGrants() {
	m.files.releaseOwner()
}

// checkGuestPaths refuses a grant at or around a path the host mounts
// itself for a command or script (its sources, an interpreter's library,
// the device file): one directory must not hide the other.
func (m *Module) checkGuestPaths(mounts []Mount) error {
	paths := []string{transport.DeviceDir}
	for _, mt := range mounts {
		if mt.Granted && m.code.script != nil && m.code.script.Resident {
			continue // one of the grants (openMountGrants)
		}
		paths = append(paths, filepath.Clean(mt.GuestPath))
	}
	for _, g := range m.files.grants() {
		for _, p := range paths {
			if policy.PathWithin(g.path, p) || policy.PathWithin(p, g.path) {
				return fmt.Errorf("the file grant %s overlaps %s, where the host mounts the plugin's own files; grant another directory", g.path, p)
			}
		}
	}
	return nil
}

// mountFileGrants adds the module's granted directories to fsc, each a
// preopen at its own path whose changes inv audits.
func (m *Module) mountFileGrants(fsc wazero.FSConfig, inv *invocation) wazero.FSConfig {
	for _, g := range m.files.grants() {
		fsc = fsc.(sysfs.FSConfig).WithSysFSMount(g.dir.FS(&fileAuditor{inv: inv, grant: g}), g.path)
	}
	return fsc
}

// fileAuditor is grantfs.Auditor for one instance's view of one grant: it
// reports to the invocation the instance serves at the time.
type fileAuditor struct {
	inv   *invocation
	grant fileGrant
}

// Admit refuses a change outside an invocation (a module's start
// functions run before any caller, and no change may go unattributed),
// and any change or refusal report once the invocation's audit budget is
// used up, as every op is refused then (budget.Admit).
func (a *fileAuditor) Admit(c grantfs.Change) experimentalsys.Errno {
	env := &a.inv.env
	if err := budget.From(orBackground(env.Context)).Admit([]byte(opOf(c))); err != nil {
		return experimentalsys.EPERM
	}
	if env.Principal.User == "" && env.Principal.Org == "" {
		a.record(c, audit.Deny, "no invocation is in flight (a start function): a file change needs a caller to answer for it", "")
		return experimentalsys.EPERM
	}
	return 0
}

func (a *fileAuditor) Made(c grantfs.Change) { a.record(c, audit.Allow, "", audit.NewID()) }

func (a *fileAuditor) Refused(c grantfs.Change, why string) { a.record(c, audit.Deny, why, "") }

func (a *fileAuditor) Epoch() uint64 { return a.inv.epoch }

// Unnamed implements grantfs.UnnamedErrnoReporter: the WASI wrapper of
// the call in flight gives the guest errno, not EIO (wasierrno.go).
func (a *fileAuditor) Unnamed(errno syscall.Errno) { a.inv.fsErrno = errno }

func opOf(c grantfs.Change) string {
	if c.Kind == grantfs.KindAccess {
		return OpFileRead
	}
	return OpFileWrite
}

// record writes the op event of a change: the grant as its target, the
// path relative to it, never what was written.
func (a *fileAuditor) record(c grantfs.Change, decision, why, mutation string) {
	env := &a.inv.env
	mode := "read-only"
	if a.grant.dir.RW() {
		mode = "read-write"
	}
	ev := audit.Event{Kind: audit.KindOp, Decision: decision, CorrelationID: env.CorrelationID, Module: a.inv.m.name,
		Action: env.Action, Op: opOf(c), User: env.Principal.User, Org: env.Principal.Org, MutationID: mutation,
		Rule:  "filesystem " + a.grant.path + " (" + mode + ")",
		Attrs: map[string]string{"target": a.grant.path, "change": c.Kind, "path": auditPath(c.Path)}}
	if c.To != "" {
		ev.Attrs["to"] = auditPath(c.To)
	}
	if c.Detail != "" {
		ev.Attrs["detail"] = c.Detail
	}
	if decision == audit.Deny {
		ev.Reason = fmt.Sprintf("%s %s %s: %s", opOf(c), c.Kind, auditPath(c.Path), why)
	}
	a.inv.m.host.audit.Record(orBackground(env.Context), ev)
}

func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// auditPath bounds a guest's path for the trail: valid UTF-8, at most
// maxAuditPath bytes, and says how much was cut.
func auditPath(p string) string {
	p = strings.ToValidUTF8(p, "\uFFFD")
	if len(p) <= maxAuditPath {
		return p
	}
	cut := maxAuditPath
	for cut > 0 && !utf8.RuneStart(p[cut]) {
		cut--
	}
	return p[:cut] + fmt.Sprintf("…[%d more bytes]", len(p)-cut)
}
