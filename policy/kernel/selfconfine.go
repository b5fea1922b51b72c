package kernel

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// ConfineMode says how hard the host confines itself.
type ConfineMode string

const (
	ConfineOff        ConfineMode = "off"         // no self-confinement (debugging)
	ConfineBestEffort ConfineMode = "best-effort" // apply what the kernel offers; report the rest
	ConfineStrict     ConfineMode = "strict"      // refuse to run unless every layer applies
)

// ParseConfineMode checks a --confine value.
func ParseConfineMode(s string) (ConfineMode, error) {
	switch m := ConfineMode(s); m {
	case ConfineOff, ConfineBestEffort, ConfineStrict:
		return m, nil
	}
	return "", fmt.Errorf("--confine %q: use off, best-effort or strict", s)
}

// HostConfinement is what the confined host process may still do once its
// start-up is done: read the system and its module trees, read and write
// its data and cache directories, and nothing else on the filesystem; no
// execve (native children come from a launcher started earlier), no
// ptrace, namespaces, setuid, bpf, io_uring, mount or MPTCP.
type HostConfinement struct {
	Mode      ConfineMode
	ReadOnly  []string // module trees and other inputs
	ReadWrite []string // data dir, cache dir
	BindTCP   []uint16 // ports the host serves on (moat serve); none: no TCP at all
	// ConnectTCP are the ports the host may connect to: those of the
	// egress targets its modules are granted (an Extism plug-in's
	// http_request). The grant itself (scheme, host, address) is checked
	// in Go at dial time; this is the kernel's backstop. None: no TCP
	// connection at all.
	ConnectTCP []uint16
	// ConnectAnyTCP leaves outgoing TCP unfiltered by the kernel, for a
	// grant that names any port ("*" or host:*), which no port list can
	// express; the dial-time check in Go still applies.
	ConnectAnyTCP bool
	// MemoryBytes and Pids limit the host's own cgroup (moat/host-<pid>),
	// a backstop for the whole host process. Zero: no cgroup. Needs root.
	MemoryBytes int64
	Pids        int64
	// GrantRead and GrantWrite are the directories the host's modules are
	// granted (filesystem: in the profiles; the manifest's, for moat run):
	// readable, and for GrantWrite writable, though never executable and
	// never a place for symlinks, FIFOs or sockets, since the host makes
	// none there for a guest (package host/grantfs). A missing one is
	// skipped: a module granted it fails its load.
	GrantRead, GrantWrite []string
	// AllowExec keeps execve allowed (for a host that still starts native
	// children itself); the launcher design makes this unnecessary.
	AllowExec bool
}

// HostEtc are the parts of /etc the confined host may read: name
// resolution and TLS roots, not the user database or secrets.
var HostEtc = append([]string{"/etc/hosts", "/etc/resolv.conf", "/etc/ssl", "/etc/ca-certificates"}, SystemEtc...)

// HostReport says which layers the host applied, and why any are missing.
type HostReport struct {
	Applied []string
	Missing map[string]string
}

// ConfineHost applies the host's own Landlock layer (broad) and seccomp
// filter to every thread of the calling process. Call it after start-up
// (files opened, listeners bound, launcher started), before running guest
// code. In strict mode a missing layer is an error and nothing is applied
// past it; in best-effort mode it is reported.
func ConfineHost(c HostConfinement) (*HostReport, error) {
	r := &HostReport{Missing: map[string]string{}}
	if c.Mode == ConfineOff || c.Mode == "" {
		r.Missing["all"] = "--confine=off"
		return r, nil
	}
	missing := func(layer, why string) error {
		r.Missing[layer] = why
		if c.Mode == ConfineStrict {
			return fmt.Errorf("confine (strict): %s is unavailable: %s", layer, why)
		}
		return nil
	}

	if c.MemoryBytes > 0 || c.Pids > 0 {
		if os.Geteuid() != 0 {
			if err := missing("cgroup", "not root: the host cannot create its own cgroup"); err != nil {
				return r, err
			}
		} else if err := joinHostCgroup(c.MemoryBytes, c.Pids); err != nil {
			if err := missing("cgroup", err.Error()); err != nil {
				return r, err
			}
		} else {
			r.Applied = append(r.Applied, "cgroup")
		}
	}

	if abi, err := LandlockABI(); err != nil || abi < 1 {
		if err := missing("landlock", fmt.Sprintf("the kernel offers no Landlock (%v)", err)); err != nil {
			return r, err
		}
	} else {
		// Best effort drops only what this kernel lacks; a ruleset the
		// kernel refuses is moat's own mistake, and never a reason to run
		// without the layer.
		if err := restrictHost(c); err != nil {
			return r, fmt.Errorf("confine: the host's Landlock ruleset was refused (%w); not running without it", err)
		}
		r.Applied = append(r.Applied, fmt.Sprintf("landlock (ABI %d)", abi))
		for _, f := range LandlockGaps(abi) {
			if err := missing(f.Layer, f.Why); err != nil {
				return r, err
			}
		}
	}

	if !SeccompSupported() {
		if err := missing("seccomp", "the kernel does not support seccomp filters"); err != nil {
			return r, err
		}
	} else {
		deny := HostDenyList
		if c.AllowExec {
			deny = ChildDenyList
		}
		if err := loadFilters(deny); err != nil {
			if err := missing("seccomp", err.Error()); err != nil {
				return r, err
			}
		} else {
			r.Applied = append(r.Applied, "seccomp")
		}
	}
	return r, nil
}

// Access rights of the host's layer (the child's are in package child).
const (
	accessDev   = landlock.AccessFSSet(ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSTruncate)
	accessNoJob = landlock.AccessFSSet(ll.AccessFSExecute | ll.AccessFSIoctlDev | ll.AccessFSMakeChar | ll.AccessFSMakeBlock)
	// accessNoGrant: what a directory granted to modules never allows the
	// host either.
	accessNoGrant = accessNoJob | landlock.AccessFSSet(ll.AccessFSMakeSym|ll.AccessFSMakeFifo|ll.AccessFSMakeSock)
)

// isDir reports whether p (after symlinks) is a directory; Landlock refuses
// directory rights on a regular file.
func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// restrictHost is the broad Landlock layer: read the system, read (never
// write) the module trees, read and write the data directories, no TCP
// except the ports the host serves, and IPC scoping.
func restrictHost(c HostConfinement) error {
	cfg := landlock.V7.BestEffort()
	if c.ConnectAnyTCP {
		cfg.HandledAccessNet &^= landlock.AccessNetSet(ll.AccessNetConnectTCP)
	}
	read := landlock.AccessFSSet(ll.AccessFSReadFile | ll.AccessFSReadDir)
	rules := []landlock.Rule{
		landlock.PathAccess(read, append(append([]string{}, SystemDirs...), "/proc")...).IgnoreIfMissing(),
		landlock.PathAccess(accessDev, DeviceFiles...).IgnoreIfMissing(),
	}
	var roDirs, roFiles []string
	for _, p := range append(append([]string{}, HostEtc...), c.ReadOnly...) {
		abs, err := filepath.Abs(p)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			continue // a missing optional path
		}
		if isDir(abs) {
			roDirs = append(roDirs, abs)
		} else {
			roFiles = append(roFiles, abs)
		}
	}
	if len(roDirs) > 0 {
		rules = append(rules, landlock.PathAccess(read, roDirs...))
	}
	if len(roFiles) > 0 {
		rules = append(rules, landlock.PathAccess(ll.AccessFSReadFile, roFiles...))
	}
	if len(c.ReadWrite) > 0 {
		var rw []string
		for _, p := range c.ReadWrite {
			abs, err := filepath.Abs(p)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(abs, 0o700); err != nil {
				return fmt.Errorf("create %s before confining: %w", abs, err)
			}
			rw = append(rw, abs)
		}
		rules = append(rules, landlock.PathAccess(cfg.HandledAccessFS&^accessNoJob, rw...))
	}
	for _, g := range []struct {
		dirs   []string
		access landlock.AccessFSSet
	}{{c.GrantRead, read}, {c.GrantWrite, cfg.HandledAccessFS &^ accessNoGrant}} {
		var dirs []string
		for _, p := range g.dirs {
			if isDir(p) {
				dirs = append(dirs, p)
			}
		}
		if len(dirs) > 0 {
			rules = append(rules, landlock.PathAccess(g.access, dirs...))
		}
	}
	if !c.ConnectAnyTCP {
		// With ConnectAnyTCP the ruleset does not handle connect at all,
		// and a rule for it would be refused.
		for _, p := range c.ConnectTCP {
			rules = append(rules, landlock.ConnectTCP(p))
		}
	}
	for _, p := range c.BindTCP {
		rules = append(rules, landlock.BindTCP(p))
	}
	if err := cfg.Restrict(rules...); err != nil {
		return errors.New("landlock: " + err.Error())
	}
	return nil
}

// LandlockGap is a part of Landlock this kernel lacks: best effort runs
// without it, and says so.
type LandlockGap struct{ Layer, Why string }

// LandlockGaps are the parts of moat's Landlock layers (ABI 7) that a
// kernel with Landlock ABI abi cannot apply.
func LandlockGaps(abi int) []LandlockGap {
	var gaps []LandlockGap
	for _, f := range []struct {
		abi         int
		layer, what string
	}{
		{2, "landlock-refer", "renames and links across directories are not governed"},
		{3, "landlock-truncate", "truncation is not governed"},
		{4, "landlock-tcp", "TCP bind and connect are not governed"},
		{5, "landlock-ioctl", "device ioctls are not governed"},
		{6, "landlock-scope", "signals and abstract unix sockets out of the domain are not refused"},
	} {
		if abi < f.abi {
			gaps = append(gaps, LandlockGap{f.layer, fmt.Sprintf("Landlock ABI %d (needs %d): %s", abi, f.abi, f.what)})
		}
	}
	return gaps
}

// joinHostCgroup moves the host into a cgroup of its own with the given
// limits. A process cannot remove the cgroup it is in, so each host's
// cgroup outlives it: its backstop watcher (moat's CLI) or the next host
// to start removes it.
func joinHostCgroup(memory, pids int64) error {
	removeStaleHostCgroups()
	name, err := HostCgroupName(os.Getpid())
	if err != nil {
		return err
	}
	cg, err := NewJobCgroup(name, JobLimits{MemoryBytes: memory, Pids: pids})
	if err != nil {
		return err
	}
	return cg.AddSelf()
}

// HostCgroupName is the name of the cgroup (under CgroupParent) of the
// host process pid: host-<pid>-<start time>. The start time (in clock ticks
// since boot, from /proc/<pid>/stat) makes it the name of that process and
// of no later one that reuses its pid, so a sweep or a watcher acting on
// the name of a dead host never touches a live one.
func HostCgroupName(pid int) (string, error) {
	start, err := processStart(pid)
	if err != nil {
		return "", fmt.Errorf("cgroup: host %d: %w", pid, err)
	}
	return fmt.Sprintf("host-%d-%d", pid, start), nil
}

// processStart reads field 22 (starttime) of /proc/<pid>/stat.
func processStart(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return 0, errors.New("malformed stat")
	}
	return strconv.ParseUint(fields[19], 10, 64) // field 22 is the 20th after the name
}

// removeStaleHostCgroups removes the empty moat/host-* cgroups of hosts
// that are gone: never one whose process (same pid, same start time) still
// runs, such as another host that has made its cgroup and not yet joined.
func removeStaleHostCgroups() {
	removeStale("host-*", 0, func(name string) bool {
		var pid int
		var start uint64
		if _, err := fmt.Sscanf(name, "host-%d-%d", &pid, &start); err != nil {
			return true // an older name (host-<pid>): only its emptiness counts
		}
		now, err := processStart(pid)
		return err != nil || now != start
	})
}

// RemoveStaleCgroups removes the empty moat/<pattern> cgroups older than
// minAge that processes which have exited (or crashed) left behind. A
// cgroup with a member is never removed (the kernel refuses); minAge
// spares one that another process has just created and not yet joined.
func RemoveStaleCgroups(pattern string, minAge time.Duration) {
	removeStale(pattern, minAge, func(string) bool { return true })
}

// removeStale removes the empty moat/<pattern> cgroups older than minAge
// whose owner gone says is gone.
func removeStale(pattern string, minAge time.Duration, gone func(name string) bool) {
	var roots []string
	if CgroupUnified() {
		roots = []string{"/sys/fs/cgroup"}
	} else if mounts, err := v1Mounts(); err == nil {
		for _, ctl := range v1Controllers {
			if mp, ok := mounts[ctl]; ok {
				roots = append(roots, mp)
			}
		}
	}
	for _, root := range roots {
		dirs, _ := filepath.Glob(filepath.Join(root, CgroupParent, pattern))
		for _, d := range dirs {
			fi, err := os.Stat(d)
			if err != nil || time.Since(fi.ModTime()) < minAge || !gone(filepath.Base(d)) {
				continue
			}
			if len(readPids(d)) == 0 {
				_ = os.Remove(d)
			}
		}
	}
}
