package kernel

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/internal/hostile"
	"github.com/moat-sandbox/moat/internal/testenv"
	"golang.org/x/sys/unix"
)

const hostConfineEnv = "MOAT_TEST_CONFINE_HOST"

// TestConfineHostHolds confines a helper process as the host confines
// itself, with grants that once switched the whole Landlock layer off (a
// target with any port next to one with a port), and attacks it: files
// outside its trees, execve, and system calls through the i386 and x32
// entries.
func TestConfineHostHolds(t *testing.T) {
	if abi, err := LandlockABI(); err != nil || abi < 4 || !SeccompSupported() {
		testenv.Require(t, fmt.Sprintf("needs Landlock ABI 4+ and seccomp (ABI %d, %v)", abi, err))
	}
	for _, c := range []struct {
		name    string
		anyPort bool
		ports   string
	}{
		{"ports", false, "443"},
		{"any-port-and-ports", true, "443,8080"},
		{"any-port", true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestConfineHostHelper$", "-test.v")
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%v|%s", hostConfineEnv, t.TempDir(), c.anyPort, c.ports))
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "HOST-HOLDS") {
				t.Fatalf("helper: %v\n%s", err, out)
			}
		})
	}
}

func TestConfineHostHelper(t *testing.T) {
	v := os.Getenv(hostConfineEnv)
	if v == "" {
		t.Skip("run by TestConfineHostHolds")
	}
	parts := strings.Split(v, "|")
	c := HostConfinement{Mode: ConfineBestEffort, ReadWrite: []string{parts[0]}, ConnectAnyTCP: parts[1] == "true"}
	if parts[2] != "" {
		for _, p := range strings.Split(parts[2], ",") {
			var n uint16
			fmt.Sscan(p, &n)
			c.ConnectTCP = append(c.ConnectTCP, n)
		}
	}
	rep, err := ConfineHost(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("applied %v missing %v", rep.Applied, rep.Missing)
	if !strings.HasPrefix(strings.Join(rep.Applied, ","), "landlock") {
		t.Fatalf("Landlock not applied: %v %v", rep.Applied, rep.Missing)
	}
	if _, err := os.ReadFile("/etc/shadow"); !errors.Is(err, syscall.EACCES) {
		t.Errorf("read /etc/shadow: %v, want EACCES", err)
	}
	if err := os.WriteFile("/usr/moat-host-test", nil, 0o600); !errors.Is(err, syscall.EACCES) {
		t.Errorf("write /usr: %v, want EACCES", err)
	}
	if err := exec.Command("/bin/true").Run(); !errors.Is(err, syscall.EPERM) {
		t.Errorf("exec: %v, want EPERM", err)
	}
	for name, nr := range map[string]uintptr{"getpid": 20, "keyctl": 288, "unshare": 310, "io_uring_setup": 425, "perf_event_open": 336} {
		errno, ok := hostile.I386(nr, 0, 0, 0)
		if ok && errno != syscall.ENOSYS {
			t.Errorf("i386 %s: errno %v, want ENOSYS", name, errno)
		}
	}
	for name, nr := range map[string]uintptr{"getpid": unix.SYS_GETPID, "keyctl": unix.SYS_KEYCTL, "unshare": unix.SYS_UNSHARE} {
		if errno := hostile.X32(nr, 0, 0, 0); errno != syscall.ENOSYS {
			t.Errorf("x32 %s: errno %v, want ENOSYS", name, errno)
		}
	}
	if _, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0); !errors.Is(err, syscall.EAFNOSUPPORT) {
		t.Errorf("vsock socket: %v, want EAFNOSUPPORT", err)
	}
	if _, _, errno := syscall.RawSyscall(unix.SYS_KEYCTL, 0, uintptr(0xfffffffc), 0); errno != syscall.EPERM {
		t.Errorf("keyctl: %v, want EPERM", errno)
	}
	fmt.Println("HOST-HOLDS")
}

const hostGrantsEnv = "MOAT_TEST_CONFINE_GRANTS"

// TestConfineHostGrants: the directories modules are granted are the
// host's to read (GrantRead) or to write (GrantWrite), but the host may
// make no symlink or FIFO in them, and may still touch nothing else.
func TestConfineHostGrants(t *testing.T) {
	if abi, err := LandlockABI(); err != nil || abi < 1 {
		testenv.Require(t, fmt.Sprintf("needs Landlock (%v)", err))
	}
	base := t.TempDir()
	for _, d := range []string{"data", "ro", "rw", "other"} {
		if err := os.Mkdir(base+"/"+d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(base+"/"+d+"/f", []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestConfineHostGrantsHelper$", "-test.v")
	cmd.Env = append(os.Environ(), hostGrantsEnv+"="+base)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "GRANTS-HOLD") {
		t.Fatalf("helper: %v\n%s", err, out)
	}
}

func TestConfineHostGrantsHelper(t *testing.T) {
	base := os.Getenv(hostGrantsEnv)
	if base == "" {
		t.Skip("run by TestConfineHostGrants")
	}
	if _, err := ConfineHost(HostConfinement{Mode: ConfineBestEffort, ReadWrite: []string{base + "/data"},
		GrantRead: []string{base + "/ro", base + "/missing"}, GrantWrite: []string{base + "/rw"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(base + "/ro/f"); err != nil {
		t.Errorf("read ro/f: %v", err)
	}
	if err := os.WriteFile(base+"/ro/g", nil, 0o644); !errors.Is(err, syscall.EACCES) {
		t.Errorf("write ro/g: %v, want EACCES", err)
	}
	if err := os.WriteFile(base+"/rw/g", []byte("y"), 0o644); err != nil {
		t.Errorf("write rw/g: %v", err)
	}
	if err := os.Mkdir(base+"/rw/d", 0o755); err != nil {
		t.Errorf("mkdir rw/d: %v", err)
	}
	if err := os.Rename(base+"/rw/g", base+"/rw/d/g"); err != nil {
		t.Errorf("rename within rw: %v", err)
	}
	if err := os.Symlink("/etc/shadow", base+"/rw/sl"); !errors.Is(err, syscall.EACCES) {
		t.Errorf("symlink in rw: %v, want EACCES", err)
	}
	if err := syscall.Mkfifo(base+"/rw/fifo", 0o644); !errors.Is(err, syscall.EACCES) {
		t.Errorf("mkfifo in rw: %v, want EACCES", err)
	}
	if _, err := os.ReadFile(base + "/other/f"); !errors.Is(err, syscall.EACCES) {
		t.Errorf("read other/f: %v, want EACCES", err)
	}
	fmt.Println("GRANTS-HOLD")
}
