package kernel

import (
	"fmt"
	"runtime"
	"slices"

	"github.com/moat-sandbox/moat/policy/kernel/child"
	"golang.org/x/net/bpf"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/sys/unix"
)

// ChildDenyList are the system calls a confined native child gets EPERM for:
// debugging other processes, namespaces and mounts, kernel modules and
// kexec, eBPF, perf, userfaultfd, keyrings (a uid's keyring outlives its
// jobs: it must never hold anything), credential changes, handle-based
// opens, quotas, port I/O, io_uring (it bypasses seccomp), pidfd_getfd,
// the kernel log and uselib.
//
// Beyond these names the filter refuses (see FilterRules): every system
// call that does not come through the native ABI (i386 int 0x80 and x32
// on x86-64, the 32-bit ABI on arm64), clone with a namespace flag,
// socket(..., IPPROTO_MPTCP) (MPTCP escapes Landlock's TCP rules), socket
// families other than unix, inet, inet6 and netlink (vsock reaches the
// hypervisor whatever the network namespace), execveat of a descriptor
// (AT_EMPTY_PATH: memfd execution) and memfd_create without
// MFD_NOEXEC_SEAL (a memfd lives on an internal mount that Landlock does
// not govern); clone3, which cannot be filtered by argument, returns
// ENOSYS so libc falls back to clone.
var ChildDenyList = []string{
	"ptrace", "process_vm_readv", "process_vm_writev",
	"kexec_load", "kexec_file_load",
	"unshare", "setns", "mount", "umount2", "pivot_root", "chroot",
	"swapon", "swapoff", "reboot",
	"init_module", "finit_module", "delete_module",
	"bpf", "userfaultfd", "perf_event_open",
	"setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid",
	"keyctl", "add_key", "request_key",
	"open_by_handle_at", "name_to_handle_at",
	"acct", "quotactl", "quotactl_fd", "iopl", "ioperm",
	"fsopen", "fsmount", "fsconfig", "fspick", "move_mount", "open_tree", "mount_setattr",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"pidfd_getfd", "syslog", "uselib",
}

// HostDenyList is ChildDenyList plus execve and execveat: for confining the
// host process itself once it no longer needs to start programs (native
// children come from a launcher started before).
var HostDenyList = append(append([]string{}, ChildDenyList...), "execve", "execveat")

// NamespaceCloneFlags are the clone flags that create namespaces; clone with
// any of them is denied.
const NamespaceCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// Argument values the filter checks.
const (
	ipprotoMPTCP   = 262    // IPPROTO_MPTCP
	atEmptyPath    = 0x1000 // AT_EMPTY_PATH
	mfdNoexecSeal  = 0x0008 // MFD_NOEXEC_SEAL (Linux 6.3)
	x32SyscallBit  = 0x40000000
	seccompDataNr  = 0
	seccompDataArc = 4
)

// SocketFamilies are the address families a confined process may open
// sockets of; any other gets EAFNOSUPPORT.
var SocketFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// SeccompSupported reports whether the kernel supports seccomp filters.
func SeccompSupported() bool { return seccomp.Supported() }

// condition says when a Rule applies, looking at one argument's low 32 bits
// (every argument moat checks is an int or a flag word below 2^32; the
// kernel ignores the high half of an int, so comparing 64 bits would let a
// caller set the high half and slip past an equality test).
type condition int

const (
	always   condition = iota
	bitsSet            // arg & Value != 0
	bitsZero           // arg & Value == 0
	equal              // arg == Value
	notIn              // arg not in Values
)

// Rule is one line of a seccomp filter: the system call, a condition on
// one argument, and the action (a SECCOMP_RET_* value).
type Rule struct {
	Syscall string
	Cond    condition
	Arg     int
	Value   uint32
	Values  []uint32
	Action  uint32
}

// Actions.
var (
	retAllow  = uint32(unix.SECCOMP_RET_ALLOW)
	retEPERM  = uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
	retENOSYS = uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	retNoAF   = uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT))
)

// FilterRules are the rules of moat's filter, in order (the first that
// matches decides): deny names EPERM, and the argument checks described at
// ChildDenyList.
func FilterRules(deny []string) []Rule {
	rules := []Rule{{Syscall: "clone3", Action: retENOSYS}}
	for _, n := range deny {
		rules = append(rules, Rule{Syscall: n, Action: retEPERM})
	}
	rules = append(rules,
		Rule{Syscall: "clone", Cond: bitsSet, Arg: 0, Value: NamespaceCloneFlags, Action: retEPERM},
		Rule{Syscall: "socket", Cond: notIn, Arg: 0, Values: SocketFamilies, Action: retNoAF},
		Rule{Syscall: "socket", Cond: equal, Arg: 2, Value: ipprotoMPTCP, Action: retEPERM},
		Rule{Syscall: "socketpair", Cond: notIn, Arg: 0, Values: []uint32{unix.AF_UNIX}, Action: retNoAF},
		Rule{Syscall: "memfd_create", Cond: bitsZero, Arg: 1, Value: mfdNoexecSeal, Action: retEPERM},
	)
	if !slices.Contains(deny, "execveat") {
		rules = append(rules, Rule{Syscall: "execveat", Cond: bitsSet, Arg: 4, Value: atEmptyPath, Action: retEPERM})
	}
	return rules
}

// Assemble compiles rules into one seccomp program for the architecture
// moat runs on. Its first instructions refuse, with ENOSYS, every system
// call made through another ABI the kernel offers this process (i386 on
// x86-64 and arm on arm64 carry another audit arch; x32 shares x86-64's and
// sets bit 30 of the number), so the rules, written with native numbers,
// can never be sidestepped by numbering the same call another way.
func Assemble(rules []Rule) (child.Filter, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: seccompDataArc, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: retENOSYS},
		bpf.LoadAbsolute{Off: seccompDataNr, Size: 4},
	}
	if info.ID == arch.X86_64.ID {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallBit, SkipFalse: 1},
			bpf.RetConstant{Val: retENOSYS})
	}
	// Each rule is a block that starts and ends with the system call
	// number in the accumulator, so blocks only ever jump forward within
	// themselves and no jump outgrows the 8-bit offsets of classic BPF.
	for _, r := range rules {
		nr, ok := info.SyscallNames[r.Syscall]
		if !ok {
			return nil, fmt.Errorf("seccomp: system call %q is unknown on %s", r.Syscall, info.Name)
		}
		arg := bpf.LoadAbsolute{Off: uint32(16 + 8*r.Arg), Size: 4} // the low half on little-endian machines
		reload := bpf.LoadAbsolute{Off: seccompDataNr, Size: 4}
		ret := bpf.RetConstant{Val: r.Action}
		switch r.Cond {
		case always:
			prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 1}, ret)
		case bitsSet, bitsZero, equal:
			test := bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: r.Value, SkipFalse: 1}
			switch r.Cond {
			case bitsZero:
				test = bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: r.Value, SkipTrue: 1}
			case equal:
				test = bpf.JumpIf{Cond: bpf.JumpEqual, Val: r.Value, SkipFalse: 1}
			}
			prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 4}, arg, test, ret, reload)
		case notIn:
			n := len(r.Values)
			if n == 0 || n > 200 {
				return nil, fmt.Errorf("seccomp: rule for %s: %d values", r.Syscall, n)
			}
			prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: uint8(n + 3)}, arg)
			for i, v := range r.Values {
				prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipTrue: uint8(n - i)})
			}
			prog = append(prog, ret, reload)
		default:
			return nil, fmt.Errorf("seccomp: rule for %s: unknown condition %d", r.Syscall, r.Cond)
		}
	}
	prog = append(prog, bpf.RetConstant{Val: retAllow})
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble: %w", err)
	}
	if len(raw) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: filter has %d instructions, the kernel takes %d", len(raw), unix.BPF_MAXINSNS)
	}
	f := make(child.Filter, len(raw))
	for i, r := range raw {
		f[i] = child.Instruction{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return f, nil
}

// ChildFilters compiles the child filter (FilterRules(ChildDenyList)) for
// the wrapper, which loads it with child.LoadFilters.
func ChildFilters() ([]child.Filter, error) {
	f, err := Assemble(FilterRules(ChildDenyList))
	if err != nil {
		return nil, err
	}
	return []child.Filter{f}, nil
}

// loadFilters installs the filter for deny on every thread of the calling
// process.
func loadFilters(deny []string) error {
	f, err := Assemble(FilterRules(deny))
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return child.LoadFilters([]child.Filter{f})
}
