package child

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ConfineEnv is the environment variable that turns the moat binary into
// the confinement wrapper: it holds a ConfineSpec as JSON.
const ConfineEnv = "MOAT_CONFINE"

// ConfineFromFD3 as ConfineEnv's value makes the wrapper read its spec from
// fd 3 until EOF: a warm wrapper is started before its job is known (see
// host/native.Pool) and blocks there.
const ConfineFromFD3 = "fd:3"

// ConfineAckFD and ConfineAck are a warm wrapper's acknowledgement: once it
// has read and parsed its spec from fd 3, it writes the one byte ConfineAck
// on fd 4 (its status pipe) before it does anything else. The runner counts
// a warm wrapper as taken only on that byte: a wrapper that died before it
// (after the spec was written, even) sends the job to a cold start instead
// of failing it. Anything else on fd 4 after the byte is the status pipe's
// usual failure reason.
const (
	ConfineAckFD = 4
	ConfineAck   = 0x06 // ASCII ACK: never the first byte of a reason
)

// ConfineExitCode is the exit status of a wrapper that failed before it
// could exec the target; its reason is a "moat-confine: ..." line on
// stderr (and on the status fd, when given).
const ConfineExitCode = 125

// ConfinePrefix starts the wrapper's one-line failure report.
const ConfinePrefix = "moat-confine: "

// Package child is the confinement wrapper's side of moat's kernel layers:
// what a native child applies to itself, in order, before it execs its
// target (cgroup, mount namespace, rlimits, uid, Landlock, seccomp). It is a
// leaf package so the wrapper binary (cmd/moat-confine) links nothing else:
// every millisecond of its start-up is paid by every native run. The
// parent's side (building the cgroup, compiling the seccomp filters,
// probing) is package kernel.

// ConfineSpec tells the re-exec'd wrapper how to confine itself before it
// executes the target. The runner (host/native) builds it.
type ConfineSpec struct {
	Path string   // resolved target binary
	Args []string // argv, Args[0] included
	Env  []string // the target's whole environment
	Dir  string   // working directory (the job dir)

	CgroupProcs []string // cgroup.procs files to join (v1); empty when the parent placed the child
	MountProc   bool     // in a new mount+pid namespace: make / rprivate and mount a fresh /proc
	// Root, with MountProc, replaces the host's tree with a root of the
	// job's own (see RootSpec); nil keeps the host's tree.
	Root     *RootSpec `json:",omitempty"`
	Hostname string    // in a new UTS namespace: set this host name (best effort)
	Rlimits  Rlimits
	SetIDs   bool // switch to UID/GID (the wrapper runs as root)
	DropCaps bool // root of its own user namespace only: drop every capability for good before the exec
	UID, GID int
	FS       ChildFS
	Landlock bool
	Seccomp  bool
	// SeccompFilters are the compiled child filters, one per action, built
	// by the parent (policy/kernel.ChildFilters): the wrapper loads them
	// without linking a BPF assembler, which keeps its start-up short.
	SeccompFilters []Filter
	StatusFD       int // > 2: write the failure reason here too; close-on-exec, so EOF means the exec happened
}

// ConfineMain runs the confinement wrapper when ConfineEnv is set, and
// returns at once otherwise. Call it first thing in main() of the moat
// binary and in TestMain of test packages that start confined children:
//
//	func main() { kernel.ConfineMain(); ... }
//
// When it is the wrapper it never returns: it joins the job cgroup, makes
// the mount namespace private and mounts a fresh /proc, sets rlimits, drops
// to the job uid and gid, applies Landlock and the seccomp filter, and execs
// the target with its clean environment. Any failure before the exec
// writes one "moat-confine: ..." line to stderr and exits with
// ConfineExitCode.
func ConfineMain() {
	raw, ok := os.LookupEnv(ConfineEnv)
	if !ok {
		return
	}
	warm := raw == ConfineFromFD3
	if warm {
		f := os.NewFile(3, "confine-spec")
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil || len(b) == 0 {
			confineFail(0, fmt.Errorf("no spec on fd 3 (%v)", err))
		}
		raw = string(b)
	}
	var spec ConfineSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		confineFail(0, fmt.Errorf("bad %s: %w", ConfineEnv, err))
	}
	if warm {
		// After the parse: a wrapper that cannot read this runner's
		// spec (another moat version) sends the job to a cold start.
		if _, err := unix.Write(ConfineAckFD, []byte{ConfineAck}); err != nil {
			confineFail(0, fmt.Errorf("acknowledge the spec on fd %d: %w", ConfineAckFD, err))
		}
	}
	err := confine(&spec)
	confineFail(spec.StatusFD, err)
}

// confine applies every layer and execs; it returns only with an error.
func confine(s *ConfineSpec) error {
	runtime.LockOSThread()
	if s.StatusFD > 2 {
		unix.CloseOnExec(s.StatusFD)
	}
	if len(s.CgroupProcs) > 0 {
		if err := JoinCgroup(s.CgroupProcs, 0); err != nil {
			return err
		}
	}
	if s.MountProc && s.Root != nil {
		if err := buildRoot(s.FS, s.Root); err != nil {
			return err
		}
	} else if s.MountProc {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("mount --make-rprivate /: %w", err)
		}
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("mount /proc: %w", err)
		}
	}
	if s.Hostname != "" {
		_ = unix.Sethostname([]byte(s.Hostname))
	}
	uid := os.Getuid()
	if s.SetIDs {
		uid = s.UID
	}
	// RLIMIT_AS comes last, just before the exec: the wrapper's own Go
	// runtime may already hold more address space than the command may.
	early := s.Rlimits
	early.AddressSpace = 0
	if err := ApplyRlimits(early, uid); err != nil {
		return err
	}
	if s.SetIDs {
		if err := unix.Setgroups(nil); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := unix.Setresgid(s.GID, s.GID, s.GID); err != nil {
			return fmt.Errorf("setresgid %d: %w", s.GID, err)
		}
		if err := unix.Setresuid(s.UID, s.UID, s.UID); err != nil {
			return fmt.Errorf("setresuid %d: %w", s.UID, err)
		}
		if os.Getuid() != s.UID || os.Geteuid() != s.UID || os.Getgid() != s.GID {
			return fmt.Errorf("uid switch to %d:%d did not take", s.UID, s.GID)
		}
	}
	if s.DropCaps {
		if err := dropCaps(); err != nil {
			return err
		}
	}
	// A credential change clears the parent-death signal; set it again so a
	// crash of the runner still kills the job.
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0)
	if s.Dir != "" {
		if err := os.Chdir(s.Dir); err != nil {
			return fmt.Errorf("chdir: %w", err)
		}
	}
	if s.Landlock {
		fs := s.FS
		if s.MountProc && s.Root != nil {
			// The job's own scratch tmpfs are its to use.
			fs.ReadWrite = append(append([]string{}, fs.ReadWrite...), ScratchDirs...)
		}
		if err := RestrictChild(fs); err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
	}
	if s.Seccomp {
		if err := LoadFilters(s.SeccompFilters); err != nil {
			return err
		}
	}
	return execWithAS(s)
}

// execWithAS sets RLIMIT_AS and execs with no Go allocation in between (an
// allocation could fail under the new limit); an exec failure is reported
// with raw writes and exit_group.
func execWithAS(s *ConfineSpec) error {
	if len(s.Args) == 0 {
		return errors.New("no argv")
	}
	path, err := syscall.BytePtrFromString(s.Path)
	if err != nil {
		return err
	}
	argv, err := syscall.SlicePtrFromStrings(s.Args)
	if err != nil {
		return err
	}
	envv, err := syscall.SlicePtrFromStrings(s.Env)
	if err != nil {
		return err
	}
	prefix := ConfinePrefix + "exec " + s.Path + ": "
	if as := s.Rlimits.AddressSpace; as > 0 {
		var cur unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_AS, &cur); err != nil {
			return fmt.Errorf("getrlimit AS: %w", err)
		}
		lim := unix.Rlimit{Cur: min(as, cur.Max), Max: min(as, cur.Max)}
		if err := unix.Setrlimit(unix.RLIMIT_AS, &lim); err != nil {
			return fmt.Errorf("setrlimit AS=%d: %w", as, err)
		}
	}
	_, _, errno := syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(path)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])))
	for _, fd := range []int{2, s.StatusFD} {
		if fd == 2 || fd > 2 {
			rawWrite(fd, prefix)
			rawWrite(fd, errno.Error()) // a static string: no allocation
			rawWrite(fd, "\n")
		}
	}
	syscall.RawSyscall(syscall.SYS_EXIT_GROUP, ConfineExitCode, 0, 0)
	return nil // not reached
}

func rawWrite(fd int, s string) {
	if len(s) > 0 {
		syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(len(s)))
	}
}

func confineFail(fd int, err error) {
	if err == nil {
		err = errors.New("exec returned without an error")
	}
	msg := ConfinePrefix + strings.ReplaceAll(err.Error(), "\n", " ") + "\n"
	os.Stderr.WriteString(msg)
	if fd > 2 {
		_, _ = unix.Write(fd, []byte(msg))
	}
	os.Exit(ConfineExitCode)
}

// Securebits (linux/securebits.h).
const (
	secbitNoRoot              = 1 << 0
	secbitNoRootLocked        = 1 << 1
	secbitNoSetuidFixup       = 1 << 2
	secbitNoSetuidFixupLocked = 1 << 3
	secbitKeepCapsLocked      = 1 << 5
	secbitNoCapAmbientRaise   = 1 << 6
	secbitNoCapAmbientLocked  = 1 << 7
)

// dropCaps makes sure the exec'd program holds no capability although it
// runs as uid 0 of its user namespace: it empties the bounding and ambient
// sets and sets the NOROOT securebits (locked), so execve grants nothing.
func dropCaps() error {
	for c := 0; c < 64; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) {
				break // past CAP_LAST_CAP
			}
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	bits := secbitNoRoot | secbitNoRootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLocked |
		secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientLocked
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0); err != nil {
		return fmt.Errorf("set securebits: %w", err)
	}
	return nil
}
