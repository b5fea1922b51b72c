package kernel

import (
	"fmt"
	"runtime"

	"github.com/moat-sandbox/moat/policy/kernel/child"
	"golang.org/x/net/bpf"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"
)

// ChildDenyList are the system calls a confined native child gets EPERM for:
// debugging other processes, namespaces and mounts, kernel modules and
// kexec, eBPF, perf, userfaultfd, keyrings, credential changes, handle-based
// opens, quotas, port I/O, io_uring (it bypasses seccomp) and pidfd_getfd.
// clone with a namespace flag and socket(..., IPPROTO_MPTCP) are denied by
// the filter as well (MPTCP escapes Landlock's TCP rules); clone3, which
// cannot be filtered by argument, returns ENOSYS so libc falls back to clone.
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
	"pidfd_getfd",
}

// HostDenyList is ChildDenyList plus execve and execveat: for confining the
// host process itself once it no longer needs to start programs. It is not
// applied anywhere yet.
var HostDenyList = append(append([]string{}, ChildDenyList...), "execve", "execveat")

// NamespaceCloneFlags are the clone flags that create namespaces; clone with
// any of them is denied.
const NamespaceCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// ipprotoMPTCP is IPPROTO_MPTCP (262).
const ipprotoMPTCP = 262

// SeccompSupported reports whether the kernel supports seccomp filters.
func SeccompSupported() bool { return seccomp.Supported() }

// childPolicies returns the filters to load, one per action: go-seccomp-bpf
// only evaluates the first syscall group of a policy (each group ends with a
// return of the default action), so each action gets its own filter.
func childPolicies(deny []string) []seccomp.Policy {
	enosys := seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: []seccomp.SyscallGroup{{
		Action: seccomp.Action(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)),
		Names:  []string{"clone3"},
	}}}
	eperm := seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: []seccomp.SyscallGroup{{
		Action: seccomp.ActionErrno, // EPERM
		Names:  deny,
		NamesWithCondtions: []seccomp.NameWithConditions{
			{Name: "clone", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: NamespaceCloneFlags}}},
			{Name: "socket", Conditions: []seccomp.Condition{{Argument: 2, Operation: seccomp.Equal, Value: ipprotoMPTCP}}},
		},
	}}}
	return []seccomp.Policy{enosys, eperm}
}

// ChildFilters compiles the child filter (ChildDenyList, namespace clones
// and MPTCP sockets → EPERM, clone3 → ENOSYS) for the wrapper, which loads
// it with child.LoadFilters.
func ChildFilters() ([]child.Filter, error) {
	var out []child.Filter
	for _, p := range childPolicies(ChildDenyList) {
		insts, err := p.Assemble()
		if err != nil {
			return nil, fmt.Errorf("seccomp: assemble: %w", err)
		}
		raw, err := bpf.Assemble(insts)
		if err != nil {
			return nil, fmt.Errorf("seccomp: assemble BPF: %w", err)
		}
		f := make(child.Filter, len(raw))
		for i, r := range raw {
			f[i] = child.Instruction{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
		}
		out = append(out, f)
	}
	return out, nil
}

func loadFilters(deny []string) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, p := range childPolicies(deny) {
		if err := seccomp.LoadFilter(seccomp.Filter{NoNewPrivs: true, Flag: seccomp.FilterFlagTSync, Policy: p}); err != nil {
			return fmt.Errorf("seccomp: %w", err)
		}
	}
	return nil
}
