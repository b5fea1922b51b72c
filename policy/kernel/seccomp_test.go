package kernel

import (
	"encoding/binary"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompData is struct seccomp_data as a filter on this little-endian
// machine sees it, for x/net/bpf's interpreter: the kernel loads each
// 32-bit word in host order, the interpreter in network order, so each
// word is written big-endian at its offset (an argument's low half first,
// where a little-endian machine keeps it).
func seccompData(auditArch uint32, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], auditArch)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[20+8*i:], uint32(a>>32))
	}
	return b
}

// TestFilterDecisions runs moat's assembled filters in a BPF interpreter
// on system calls as each ABI presents them, so every rule is held here
// whatever the running kernel offers (this machine kind's kernel has no
// x32 ABI at all, so the x32 cases of the hostile corpus prove nothing
// about the filter there).
func TestFilterDecisions(t *testing.T) {
	info, err := arch.GetInfo("")
	if err != nil {
		t.Skip(err)
	}
	if info.ID != arch.X86_64.ID {
		t.Skipf("the cases are written with x86-64 numbers; this is %s", info.Name)
	}
	const i386 = 0x40000003 // AUDIT_ARCH_I386
	native := uint32(info.ID)
	nr := func(name string) uint32 { return uint32(info.SyscallNames[name]) }
	allow, eperm := retAllow, retEPERM
	cases := []struct {
		name string
		arch uint32
		nr   uint32
		args []uint64
		host bool // the host's filter (execve denied) instead of the child's
		want uint32
	}{
		{"getpid", native, nr("getpid"), nil, false, allow},
		{"read", native, nr("read"), nil, false, allow},
		{"execve child", native, nr("execve"), nil, false, allow},
		{"execve host", native, nr("execve"), nil, true, eperm},
		{"execveat host", native, nr("execveat"), nil, true, eperm},
		{"i386 getpid", i386, 20, nil, false, retENOSYS},
		{"i386 keyctl", i386, 288, nil, false, retENOSYS},
		{"i386 unshare host", i386, 310, nil, true, retENOSYS},
		{"i386 with a native number", i386, nr("getpid"), nil, false, retENOSYS},
		{"x32 getpid", native, nr("getpid") | x32SyscallBit, nil, false, retENOSYS},
		{"x32 keyctl", native, nr("keyctl") | x32SyscallBit, nil, false, retENOSYS},
		{"x32 ptrace (x32-only number)", native, 521 | x32SyscallBit, nil, false, retENOSYS},
		{"number above every ABI", native, 0xffffffff, nil, false, retENOSYS},
		{"keyctl", native, nr("keyctl"), nil, false, eperm},
		{"add_key", native, nr("add_key"), nil, false, eperm},
		{"request_key", native, nr("request_key"), nil, false, eperm},
		{"unshare", native, nr("unshare"), nil, false, eperm},
		{"io_uring_setup", native, nr("io_uring_setup"), nil, false, eperm},
		{"perf_event_open", native, nr("perf_event_open"), nil, false, eperm},
		{"clone thread", native, nr("clone"), []uint64{unix.CLONE_VM | unix.CLONE_THREAD}, false, allow},
		{"clone newuser", native, nr("clone"), []uint64{unix.CLONE_NEWUSER}, false, eperm},
		{"clone newnet with high bits", native, nr("clone"), []uint64{unix.CLONE_NEWNET | 1<<40}, false, eperm},
		{"clone3", native, nr("clone3"), nil, false, retENOSYS},
		{"socket inet", native, nr("socket"), []uint64{unix.AF_INET, unix.SOCK_STREAM, 0}, false, allow},
		{"socket unix", native, nr("socket"), []uint64{unix.AF_UNIX, unix.SOCK_STREAM, 0}, false, allow},
		{"socket netlink", native, nr("socket"), []uint64{unix.AF_NETLINK, unix.SOCK_RAW, 0}, false, allow},
		{"socket vsock", native, nr("socket"), []uint64{unix.AF_VSOCK, unix.SOCK_STREAM, 0}, false, retNoAF},
		{"socket vsock high bits", native, nr("socket"), []uint64{unix.AF_VSOCK | 1<<32, unix.SOCK_STREAM, 0}, false, retNoAF},
		{"socket inet high bits", native, nr("socket"), []uint64{unix.AF_INET | 1<<32, unix.SOCK_STREAM, 0}, false, allow},
		{"socket mptcp", native, nr("socket"), []uint64{unix.AF_INET, unix.SOCK_STREAM, ipprotoMPTCP}, false, eperm},
		{"socket mptcp high bits", native, nr("socket"), []uint64{unix.AF_INET6, unix.SOCK_STREAM, ipprotoMPTCP | 1<<32}, false, eperm},
		{"socketpair unix", native, nr("socketpair"), []uint64{unix.AF_UNIX}, false, allow},
		{"socketpair inet", native, nr("socketpair"), []uint64{unix.AF_INET}, false, retNoAF},
		{"memfd", native, nr("memfd_create"), []uint64{0, unix.MFD_CLOEXEC}, false, eperm},
		{"memfd noexec seal", native, nr("memfd_create"), []uint64{0, unix.MFD_CLOEXEC | mfdNoexecSeal}, false, allow},
		{"execveat path", native, nr("execveat"), []uint64{0, 0, 0, 0, 0}, false, allow},
		{"execveat empty path", native, nr("execveat"), []uint64{3, 0, 0, 0, atEmptyPath}, false, eperm},
	}
	vms := map[bool]*bpf.VM{}
	for host, deny := range map[bool][]string{false: ChildDenyList, true: HostDenyList} {
		f, err := Assemble(FilterRules(deny))
		if err != nil {
			t.Fatal(err)
		}
		raw := make([]bpf.RawInstruction, len(f))
		for i, in := range f {
			raw[i] = bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
		}
		prog, ok := bpf.Disassemble(raw)
		if !ok {
			t.Fatalf("the filter does not disassemble")
		}
		if vms[host], err = bpf.NewVM(prog); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		got, err := vms[c.host].Run(seccompData(c.arch, c.nr, c.args...))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if uint32(got) != c.want {
			t.Errorf("%s: action %#x, want %#x", c.name, got, c.want)
		}
	}
}
