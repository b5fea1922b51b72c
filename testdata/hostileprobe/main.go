// Command hostileprobe is the attacker inside moat's hostile tests: run as
// a confined native job, it tries one escape and prints one line saying
// what the kernel answered: "ok" when the attempt worked, else the errno's
// name (EPERM, EACCES, ENOSYS, ...), or a word the case documents.
//
//	hostileprobe i386 keyctl        a system call through the i386 entry
//	hostileprobe x32 unshare        ... through the x32 numbering
//	hostileprobe native socket-vsock
//	hostileprobe connect-unix /tmp/host.sock
//
// It is a static Go program (no loader, no libc) so that it needs nothing
// from the job's filesystem but itself.
package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/moat-sandbox/moat/internal/hostile"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: hostileprobe CASE [ARG...]")
		os.Exit(2)
	}
	fmt.Println(probe(os.Args[1], os.Args[2:]))
}

// result names what a system call returned.
func result(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if n := unix.ErrnoName(errno); n != "" {
			return n
		}
		return "errno" + strconv.Itoa(int(errno))
	}
	return "error: " + err.Error()
}

func rawResult(r1 uintptr, errno syscall.Errno) string {
	if errno != 0 {
		return result(errno)
	}
	return "ok"
}

// i386Numbers are system call numbers of the i386 ABI.
var i386Numbers = map[string]uintptr{
	"getpid": 20, "keyctl": 288, "add_key": 286, "request_key": 287, "unshare": 310, "setns": 346,
	"io_uring_setup": 425, "perf_event_open": 336, "bpf": 357, "userfaultfd": 374, "ptrace": 26,
	"mount": 21, "setuid32": 213, "kexec_load": 283, "socketcall": 102, "socket": 359, "chroot": 61,
	"init_module": 128, "personality": 136, "open": 5,
}

// x32Numbers are x86-64 numbers the x32 ABI reaches with bit 30 set.
var x32Numbers = map[string]uintptr{
	"getpid": 39, "keyctl": 250, "add_key": 248, "unshare": 272, "io_uring_setup": 425,
	"perf_event_open": 298, "bpf": 321, "userfaultfd": 323, "ptrace": 521, "mount": 165, "setuid": 105,
	"socket": 41, "kexec_load": 528,
}

// harmless arguments: what the call would do if it got through is confined
// to this process (join a session keyring, unshare a user+net namespace).
func i386Args(name string) (uintptr, uintptr, uintptr) {
	switch name {
	case "keyctl":
		return 1, 0, 0 // KEYCTL_JOIN_SESSION_KEYRING, anonymous
	case "unshare":
		return unix.CLONE_NEWUSER | unix.CLONE_NEWNET, 0, 0
	case "socket":
		return unix.AF_INET, unix.SOCK_STREAM, 262
	case "personality":
		return 0xffffffff, 0, 0
	}
	return 0, 0, 0
}

func probe(name string, args []string) string {
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	switch name {
	case "noop":
		return "reexec"
	case "uid":
		return strconv.Itoa(os.Getuid())
	case "i386":
		nr, ok := i386Numbers[arg(0)]
		if !ok {
			return "unknown call"
		}
		a1, a2, a3 := i386Args(arg(0))
		errno, ok := hostile.I386(nr, a1, a2, a3)
		if !ok {
			return "unsupported"
		}
		return rawResult(0, errno)
	case "x32":
		nr, ok := x32Numbers[arg(0)]
		if !ok {
			return "unknown call"
		}
		a1, a2, a3 := i386Args(arg(0))
		return rawResult(0, hostile.X32(nr, a1, a2, a3))
	case "native":
		return native(arg(0))
	case "connect-unix":
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			return result(err)
		}
		defer unix.Close(fd)
		if err := unix.Connect(fd, &unix.SockaddrUnix{Name: arg(0)}); err != nil {
			return result(err)
		}
		_, err = unix.Write(fd, []byte("escaped\n"))
		return result(err)
	case "connect-abstract":
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			return result(err)
		}
		defer unix.Close(fd)
		return result(unix.Connect(fd, &unix.SockaddrUnix{Name: "@" + arg(0)}))
	case "dgram-unix":
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
		if err != nil {
			return result(err)
		}
		defer unix.Close(fd)
		return result(unix.Sendto(fd, []byte("escaped"), 0, &unix.SockaddrUnix{Name: arg(0)}))
	case "connect-tcp", "connect-udp":
		network := "tcp"
		if name == "connect-udp" {
			network = "udp"
		}
		c, err := net.Dial(network, arg(0))
		if err != nil {
			var op *net.OpError
			if errors.As(err, &op) {
				var se *os.SyscallError
				if errors.As(op.Err, &se) {
					return result(se.Err)
				}
			}
			return result(err)
		}
		defer c.Close()
		_, err = c.Write([]byte("escaped\n"))
		return result(err)
	case "stat":
		_, err := os.Lstat(arg(0))
		return result(unwrap(err))
	case "read":
		_, err := os.ReadFile(arg(0))
		return result(unwrap(err))
	case "write":
		return result(unwrap(os.WriteFile(arg(0), []byte("x"), 0o644)))
	case "mkdir":
		return result(unwrap(os.Mkdir(arg(0), 0o755)))
	case "fill":
		// Write up to N MiB into a file, then report how it ended.
		n, _ := strconv.Atoi(arg(1))
		f, err := os.Create(arg(0))
		if err != nil {
			return result(unwrap(err))
		}
		defer f.Close()
		buf := make([]byte, 1<<20)
		for i := 0; i < n; i++ {
			if _, err := f.Write(buf); err != nil {
				return result(unwrap(err))
			}
		}
		return "ok"
	case "copy-exec":
		// Copy this binary to PATH and run it.
		self, err := os.ReadFile("/proc/self/exe")
		if err != nil {
			return "read self: " + result(unwrap(err))
		}
		if err := os.WriteFile(arg(0), self, 0o755); err != nil {
			return "write: " + result(unwrap(err))
		}
		return result(syscall.Exec(arg(0), []string{arg(0), "noop"}, nil))
	case "mmap-exec":
		// Map a file of the job's executable (what the loader does for
		// LD_PRELOAD).
		self, err := os.ReadFile("/proc/self/exe")
		if err != nil {
			return "read self: " + result(unwrap(err))
		}
		if err := os.WriteFile(arg(0), self[:4096], 0o755); err != nil {
			return "write: " + result(unwrap(err))
		}
		f, err := os.Open(arg(0))
		if err != nil {
			return result(unwrap(err))
		}
		defer f.Close()
		m, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE)
		if err == nil {
			unix.Munmap(m)
		}
		return result(err)
	case "kill":
		pid, _ := strconv.Atoi(arg(0))
		return result(unix.Kill(pid, 0))
	case "ls":
		ents, err := os.ReadDir(arg(0))
		if err != nil {
			return result(unwrap(err))
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return strings.Join(names, " ")
	case "sockets":
		// Pathname sockets visible anywhere in the job's filesystem.
		var found []string
		walkAll(func(p string, fi os.FileInfo) {
			if fi.Mode()&os.ModeSocket != 0 {
				found = append(found, p)
			}
		})
		if len(found) == 0 {
			return "none"
		}
		return strings.Join(found, " ")
	case "writable":
		// Directories outside the job dir this job can create files in.
		var found []string
		skip := arg(0)
		walkAll(func(p string, fi os.FileInfo) {
			if !fi.IsDir() || p == skip || strings.HasPrefix(p, skip+"/") || strings.HasPrefix(p, "/proc") {
				return
			}
			if unix.Access(p, unix.W_OK) == nil {
				f, err := os.CreateTemp(p, ".probe")
				if err == nil {
					f.Close()
					os.Remove(f.Name())
					found = append(found, p)
				}
			}
		})
		if len(found) == 0 {
			return "none"
		}
		return strings.Join(found, " ")
	case "fds":
		// Open descriptors until refused.
		for i := 0; i < 100000; i++ {
			if _, err := unix.Open("/dev/null", unix.O_RDONLY, 0); err != nil {
				return result(err)
			}
		}
		return "ok"
	case "env":
		return strings.Join(os.Environ(), " ")
	}
	return "unknown case " + name
}

// walkAll visits what a job could reach: "/" itself is not listable (no
// Landlock right on it), so the usual top-level directories are tried by
// name, and the working directory.
func walkAll(visit func(string, os.FileInfo)) {
	for _, d := range []string{"/tmp", "/var", "/run", "/dev", "/etc", "/usr", "/home", "/root", "/srv", "/opt", "/mnt", "/media", "/lib", "/lib64", "/bin", "/sbin", "/boot", "/work", "."} {
		if fi, err := os.Lstat(d); err == nil {
			visit(d, fi)
			if fi.IsDir() {
				walk(d, 1, visit)
			}
		}
	}
}

// walk visits the tree under dir (not /proc or /sys), a few levels deep.
func walk(dir string, depth int, visit func(string, os.FileInfo)) {
	if depth > 6 || dir == "/proc" || dir == "/sys" {
		return
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		p := strings.TrimSuffix(dir, "/") + "/" + e.Name()
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		visit(p, fi)
		if fi.IsDir() {
			walk(p, depth+1, visit)
		}
	}
}

func unwrap(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func native(name string) string {
	ptr := func(s string) uintptr { p, _ := unix.BytePtrFromString(s); return uintptr(unsafe.Pointer(p)) }
	sys := func(nr uintptr, a ...uintptr) string {
		var x [6]uintptr
		copy(x[:], a)
		r1, _, errno := syscall.RawSyscall6(nr, x[0], x[1], x[2], x[3], x[4], x[5])
		if errno == 0 && nr == unix.SYS_CLONE && r1 == 0 {
			syscall.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0) // the child of a clone that got through
		}
		return rawResult(r1, errno)
	}
	const high = 1 << 32
	switch name {
	case "getpid":
		return sys(unix.SYS_GETPID)
	case "keyctl":
		return sys(unix.SYS_KEYCTL, 0, uintptr(0xfffffffc), 1) // KEYCTL_GET_KEYRING_ID, user keyring, create
	case "add_key":
		return sys(unix.SYS_ADD_KEY, ptr("user"), ptr("moat-probe"), ptr("secret"), 6, uintptr(0xfffffffc))
	case "request_key":
		return sys(unix.SYS_REQUEST_KEY, ptr("user"), ptr("moat-probe"), 0, 0)
	case "unshare-user":
		return sys(unix.SYS_UNSHARE, unix.CLONE_NEWUSER)
	case "unshare-net":
		return sys(unix.SYS_UNSHARE, unix.CLONE_NEWNET)
	case "clone-newuser":
		return sys(unix.SYS_CLONE, unix.CLONE_NEWUSER|uintptr(syscall.SIGCHLD))
	case "clone-newns":
		return sys(unix.SYS_CLONE, unix.CLONE_NEWNS|uintptr(syscall.SIGCHLD))
	case "clone3":
		return sys(unix.SYS_CLONE3, 0, 0)
	case "setns":
		return sys(unix.SYS_SETNS, 0, 0)
	case "io_uring_setup":
		var params [120]byte
		return sys(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])))
	case "perf_event_open":
		var attr [128]byte
		return sys(unix.SYS_PERF_EVENT_OPEN, uintptr(unsafe.Pointer(&attr[0])), 0, ^uintptr(0), ^uintptr(0), 0)
	case "bpf":
		return sys(unix.SYS_BPF, 0, 0, 0)
	case "userfaultfd":
		return sys(unix.SYS_USERFAULTFD, 0)
	case "ptrace":
		return sys(unix.SYS_PTRACE, unix.PTRACE_TRACEME)
	case "process_vm_readv":
		return sys(unix.SYS_PROCESS_VM_READV, 1, 0, 0, 0, 0, 0)
	case "mount":
		return sys(unix.SYS_MOUNT, ptr("none"), ptr("/"), ptr("tmpfs"), 0, 0)
	case "umount":
		return sys(unix.SYS_UMOUNT2, ptr("/proc"), unix.MNT_DETACH)
	case "pivot_root":
		return sys(unix.SYS_PIVOT_ROOT, ptr("."), ptr("."))
	case "chroot":
		return sys(unix.SYS_CHROOT, ptr("."))
	case "setuid":
		return sys(unix.SYS_SETUID, 0)
	case "setresuid":
		return sys(unix.SYS_SETRESUID, 0, 0, 0)
	case "setgroups":
		return sys(unix.SYS_SETGROUPS, 0, 0)
	case "kexec_load":
		return sys(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0)
	case "init_module":
		return sys(unix.SYS_INIT_MODULE, 0, 0, 0)
	case "syslog":
		return sys(unix.SYS_SYSLOG, 10, 0, 0) // SYSLOG_ACTION_SIZE_BUFFER
	case "open_by_handle_at":
		return sys(unix.SYS_OPEN_BY_HANDLE_AT, 0, 0, 0)
	case "pidfd_getfd":
		return sys(unix.SYS_PIDFD_GETFD, 0, 0, 0)
	case "fsopen":
		return sys(unix.SYS_FSOPEN, ptr("tmpfs"), 0)
	case "open_tree":
		return sys(unix.SYS_OPEN_TREE, ^uintptr(99), ptr("/"), 1) // AT_FDCWD, OPEN_TREE_CLONE
	case "iopl":
		return sys(unix.SYS_IOPL, 3)
	case "acct":
		return sys(unix.SYS_ACCT, 0)
	case "socket-inet":
		return sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 0)
	case "socket-unix":
		return sys(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0)
	case "socket-mptcp":
		return sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 262)
	case "socket-mptcp6":
		return sys(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_STREAM, 262)
	case "socket-mptcp-high":
		return sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 262|high)
	case "socket-vsock":
		return sys(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	case "socket-vsock-high":
		return sys(unix.SYS_SOCKET, unix.AF_VSOCK|high, unix.SOCK_STREAM, 0)
	case "socket-packet":
		return sys(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0)
	case "socket-raw":
		return sys(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	case "socket-alg":
		return sys(unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET, 0)
	case "socket-key":
		return sys(unix.SYS_SOCKET, unix.AF_KEY, unix.SOCK_RAW, 2)
	case "socketpair-inet":
		var fds [2]int32
		return sys(unix.SYS_SOCKETPAIR, unix.AF_INET, unix.SOCK_STREAM, 0, uintptr(unsafe.Pointer(&fds[0])))
	case "memfd":
		return sys(unix.SYS_MEMFD_CREATE, ptr("probe"), unix.MFD_CLOEXEC)
	case "memfd-exec-flag":
		return sys(unix.SYS_MEMFD_CREATE, ptr("probe"), unix.MFD_CLOEXEC|0x10) // MFD_EXEC
	case "memfd-sealed":
		return sys(unix.SYS_MEMFD_CREATE, ptr("probe"), unix.MFD_CLOEXEC|0x8) // MFD_NOEXEC_SEAL
	case "memfd-exec":
		// Copy this binary into a sealed memfd and try to run it.
		fd, err := unix.MemfdCreate("probe", 0x8)
		if err != nil {
			return "memfd_create: " + result(err)
		}
		self, err := os.ReadFile("/proc/self/exe")
		if err != nil {
			return "read self: " + result(unwrap(err))
		}
		f := os.NewFile(uintptr(fd), "memfd")
		if _, err := f.Write(self); err != nil {
			return "write: " + result(err)
		}
		_ = unix.Fchmod(fd, 0o755) // refused by the seal; the exec tells
		p := "/proc/self/fd/" + strconv.Itoa(fd)
		return result(syscall.Exec(p, []string{p, "noop"}, nil))
	case "execveat-empty":
		fd, err := unix.Open("/proc/self/exe", unix.O_RDONLY, 0)
		if err != nil {
			return "open self: " + result(err)
		}
		argv, _ := syscall.SlicePtrFromStrings([]string{"probe", "noop"})
		envv, _ := syscall.SlicePtrFromStrings([]string{})
		return sys(unix.SYS_EXECVEAT, uintptr(fd), ptr(""), uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])), unix.AT_EMPTY_PATH)
	case "execve-self":
		return result(syscall.Exec("/proc/self/exe", []string{"probe", "noop"}, nil))
	}
	return "unknown native case " + name
}
