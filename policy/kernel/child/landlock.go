package child

import (
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// ELFInterpreter is the dynamic loader of x86-64 binaries. The kernel opens
// it with execute access when it runs a dynamically linked target, so the
// child's Landlock layer must allow executing it.
const ELFInterpreter = "/lib64/ld-linux-x86-64.so.2"

// SystemDirs are readable (files and listings, never executable) by a
// confined child.
var SystemDirs = []string{"/usr", "/lib", "/lib64", "/bin", "/sbin"}

// SystemEtc are the parts of /etc a confined child may read. /etc as a whole
// is not readable: it holds the user database (/etc/passwd, /etc/group) and
// host configuration a job has no business reading.
var SystemEtc = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/localtime", "/etc/nsswitch.conf",
	"/etc/host.conf", "/etc/gai.conf", "/etc/mime.types", "/etc/python3", "/etc/python3.11",
	"/etc/python3.12", "/etc/python3.13", "/etc/ssl", "/etc/alternatives",
}

// DeviceFiles are readable and writable by a confined child (no ioctl).
var DeviceFiles = []string{"/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"}

// ChildFS is what a confined child may touch on the filesystem and the network.
type ChildFS struct {
	Target      string   // the resolved target binary: read and execute
	Interpreter string   // ELF interpreter; default ELFInterpreter
	ExtraExec   []string // more binaries the target may execute (read and execute)
	ReadOnly    []string // more paths to read (files or directories, no execute)
	ReadWrite   []string // directories to read and write (the job dir), no execute
	// Granted are directories the operator granted read-write to a
	// plugin (filesystem: [/srv/out:rw]): files and directories may be
	// made, written, renamed and removed there, but no symlink, FIFO,
	// socket or device node, and nothing executed; the same as a WASM
	// guest may do in them (package host/grantfs). Read-only grants are
	// ReadOnly.
	Granted []string `json:",omitempty"`
	// Mounts are host directories shown at another path in the job's own
	// root (moat exec --native --dir HOST:GUEST), read-only or, with RW,
	// as Granted: the rules name the guest path, which exists only inside
	// the job's root (RootSpec), so they need one. CheckMount says which
	// guest paths a root can take.
	Mounts     []Mount  `json:",omitempty"`
	ConnectTCP []uint16 // TCP ports the child may connect to; none: all TCP connect and bind denied
}

// Mount is a host directory bound at Target in the job's root.
type Mount struct {
	Source string // the host's directory: absolute, symlinks resolved
	Target string // where the job sees it: absolute and clean
	RW     bool   // read-write as ChildFS.Granted; else read-only
}

// LandlockABI returns the Landlock ABI version of the running kernel, or 0
// (with the error) when Landlock is unavailable.
func LandlockABI() (int, error) { return ll.LandlockGetABIVersion() }

// Access rights used for the child.
const (
	accessRead  = landlock.AccessFSSet(ll.AccessFSReadFile | ll.AccessFSReadDir)
	accessExec  = landlock.AccessFSSet(ll.AccessFSExecute | ll.AccessFSReadFile)
	accessDev   = landlock.AccessFSSet(ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSTruncate)
	accessNoJob = landlock.AccessFSSet(ll.AccessFSExecute | ll.AccessFSIoctlDev | ll.AccessFSMakeChar | ll.AccessFSMakeBlock)
	// accessNoGrant is what a granted directory never allows: beyond the
	// job dir's exclusions, the kinds of file other programs reading the
	// directory could be led astray by (a symlink out, a FIFO to block on).
	accessNoGrant = accessNoJob | landlock.AccessFSSet(ll.AccessFSMakeSym|ll.AccessFSMakeFifo|ll.AccessFSMakeSock)
)

// RestrictChild applies the child's Landlock layer to the calling process
// (all threads) and everything it executes afterwards: read-only system
// directories, execute only on the target, its loader and spec.ExtraExec,
// read-write (but not execute) only on spec.ReadWrite and spec.Granted
// (no symlinks, FIFOs or sockets made there), the device files in
// DeviceFiles, no TCP connect or bind except spec.ConnectTCP, and IPC
// scoping (no signals or abstract unix sockets out of the domain). It uses
// Landlock ABI 7 in best-effort mode: an older kernel gets what it supports,
// a kernel without Landlock gets nothing (check LandlockABI first).
func RestrictChild(spec ChildFS) error {
	interp := spec.Interpreter
	if interp == "" {
		interp = ELFInterpreter
	}
	cfg := landlock.V7.BestEffort()
	var files, dirs []string
	var mountRO, mountRW []string
	for _, m := range spec.Mounts {
		if m.RW {
			mountRW = append(mountRW, m.Target)
		} else {
			mountRO = append(mountRO, m.Target)
		}
	}
	for _, p := range append(append(append([]string{}, SystemEtc...), spec.ReadOnly...), mountRO...) {
		if isDir(p) {
			dirs = append(dirs, p)
		} else {
			files = append(files, p)
		}
	}
	execs := []string{interp}
	if spec.Target != "" {
		execs = append(execs, spec.Target)
	}
	execs = append(execs, spec.ExtraExec...)
	rules := []landlock.Rule{
		landlock.PathAccess(accessRead, append(append([]string{}, SystemDirs...), dirs...)...).IgnoreIfMissing(),
		landlock.PathAccess(accessExec, execs...).IgnoreIfMissing(),
		landlock.PathAccess(accessDev, DeviceFiles...).IgnoreIfMissing(),
	}
	if len(files) > 0 {
		rules = append(rules, landlock.PathAccess(ll.AccessFSReadFile, files...).IgnoreIfMissing())
	}
	if len(spec.ReadWrite) > 0 {
		rw := cfg.HandledAccessFS &^ accessNoJob
		rules = append(rules, landlock.PathAccess(rw, spec.ReadWrite...))
	}
	if granted := append(append([]string{}, spec.Granted...), mountRW...); len(granted) > 0 {
		rules = append(rules, landlock.PathAccess(cfg.HandledAccessFS&^accessNoGrant, granted...))
	}
	for _, p := range spec.ConnectTCP {
		rules = append(rules, landlock.ConnectTCP(p))
	}
	return cfg.Restrict(rules...)
}

// isDir reports whether p (after symlinks) is a directory; Landlock refuses
// directory rights on a regular file.
func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
