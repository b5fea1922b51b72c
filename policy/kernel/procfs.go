package kernel

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
)

// ProcEnv names the operator's setting for a native job's /proc where the
// container runtime masks the pod's (`MOAT_NATIVE_PROC=bind`).
//
// Why a setting: every native job is the init of its own pid namespace
// and mounts a fresh proc for it, which lists the job's processes only.
// Inside a user namespace (moat without root, as in an unprivileged pod)
// the kernel mounts a new proc only while the mount namespace holds one
// that is fully visible (fs/namespace.c, mnt_already_visible), and a
// container runtime masks parts of the pod's /proc (/proc/kcore,
// /proc/keys, /proc/timer_list... covered, /proc/sys read-only): the
// mount fails with EPERM, and the job is refused. What is left is to bind
// the pod's /proc, masks included, into the job's root. The job then
// still has its own pid namespace (it can name and signal only its own
// processes); Landlock grants a job no access to /proc, so it can neither
// list it nor read any process's files there (its own included); and the
// kernel would refuse it the memory, environment, fds and root of every
// other process anyway (an ancestor or sibling user namespace). What it
// gains over a fresh proc is what needs no read: the pod's pids (readlink
// /proc/self names the job's pid in the pod) and whether a pid exists
// (stat). That is less than the fresh proc a host gives, so moat does it
// only when the operator says so, by this name, and `moat doctor` and
// each run's Unavailable report it.
const ProcEnv = "MOAT_NATIVE_PROC"

// ProcBindValue is ProcEnv's one accepted value.
const ProcBindValue = "bind"

// ProcPlan is how native jobs get their /proc on this machine.
type ProcPlan struct {
	// Bind: bind the pod's /proc (masks included) instead of mounting a
	// fresh one; set only when a fresh one cannot be mounted and the
	// operator opted in (ProcEnv).
	Bind bool
	// Masked are the mounts over parts of /proc that keep a fresh one
	// from being mounted in a user namespace; empty where it can be.
	Masked []string
	// Note says what a job loses with Bind, for its Unavailable list.
	Note string
	// Err, when set, refuses native jobs: a fresh proc cannot be mounted
	// and the operator has not opted in to the bound one.
	Err error
}

var (
	procPlanOnce sync.Once
	procPlan     ProcPlan
)

// NativeProc returns the /proc plan of native jobs in this process,
// worked out once (the mounts of a process's /proc do not change under
// it) from /proc/self/mountinfo, the uid and ProcEnv.
func NativeProc() ProcPlan {
	procPlanOnce.Do(func() { procPlan = planProc(os.Geteuid() == 0 && initUserNS(), readMountinfo(), os.Getenv(ProcEnv)) })
	return procPlan
}

func readMountinfo() []byte {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	return b
}

// initUserNS reports whether this process is in the initial user
// namespace, where root mounts a proc without the visibility rule.
func initUserNS() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295"
}

// planProc decides: privileged (root of the initial user namespace) or an
// unmasked /proc, a fresh proc; masked, the bound one if setting says
// bind, else refused with the ways out.
func planProc(privileged bool, mountinfo []byte, setting string) ProcPlan {
	setting = strings.TrimSpace(setting)
	if setting != "" && setting != ProcBindValue {
		return ProcPlan{Err: fmt.Errorf("%s=%q: the one value is %q (bind the pod's /proc into native jobs where a fresh one cannot be mounted); unset it for a fresh /proc only", ProcEnv, clipProc(setting), ProcBindValue)}
	}
	if privileged {
		return ProcPlan{}
	}
	masked := procMasks(mountinfo)
	if len(masked) == 0 {
		return ProcPlan{}
	}
	shown := masked
	if len(shown) > 4 {
		shown = append(shown[:4:4], "…")
	}
	if setting == ProcBindValue {
		return ProcPlan{Bind: true, Masked: masked,
			Note: "procfs: the pod's /proc is bound, not a fresh one (" + ProcEnv + "=bind; the runtime masks " + strings.Join(shown, ", ") + "): the job's pids there are the pod's; Landlock still denies it every read and listing of /proc"}
	}
	return ProcPlan{Masked: masked, Err: fmt.Errorf(
		"native jobs need a /proc of their own, and the container runtime masks this one (%s), so the kernel refuses a new proc in a user namespace: "+
			"set %s=bind to bind the pod's /proc into each job (its pids there are then the pod's; docs/SECURITY.md), "+
			"or run the pod with procMount: Unmasked (hostUsers: false)", strings.Join(shown, ", "), ProcEnv)}
}

func clipProc(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// procMasks lists the mount points strictly below /proc in mountinfo (the
// runtime's masks and read-only binds), but binfmt_misc, which the kernel
// allows under a fresh proc (it sits on an empty directory).
func procMasks(mountinfo []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if !strings.HasPrefix(mp, "/proc/") || mp == "/proc/sys/fs/binfmt_misc" {
			continue
		}
		out = append(out, mp)
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] >= '0' && s[i+1] <= '3' {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// probeProcfsLayer reports whether native jobs get a /proc of their own.
func probeProcfsLayer(context.Context) LayerStatus {
	l := LayerStatus{Name: probeProcfs}
	p := NativeProc()
	switch {
	case p.Err != nil:
		l.Missing = p.Err.Error()
	case p.Bind:
		l.Missing = "the runtime masks /proc (" + strings.Join(p.Masked, ", ") + "): a fresh proc cannot be mounted in a user namespace"
		l.Detail = ProcEnv + "=bind is set: native jobs run with the pod's /proc bound (its pids are the pod's; Landlock denies them every read of it)"
	default:
		l.Available = true
		l.Detail = "each native job mounts a fresh /proc of its own pid namespace"
	}
	return l
}
