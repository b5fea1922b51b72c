package native

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/internal/testwasm"
)

// The hostile corpus of the native runner: each case runs
// testdata/hostileprobe as a confined job, which tries one escape and
// prints what the kernel answered (see its doc). A case passes when the
// answer is exactly the refusal the layer promises.

var (
	probeOnce sync.Once
	probePath string
	probeErr  error
	probeDir  string
)

// hostileProbe builds testdata/hostileprobe once per test binary. Its
// directory is removed by TestMain.
func hostileProbe(t *testing.T) string {
	t.Helper()
	probeOnce.Do(func() {
		probeDir, probeErr = os.MkdirTemp("", "moat-probe-")
		if probeErr != nil {
			return
		}
		if probeErr = os.Chmod(probeDir, 0o755); probeErr != nil {
			return
		}
		probePath = filepath.Join(probeDir, "hostileprobe")
		cmd := exec.Command("go", "build", "-o", probePath, "./testdata/hostileprobe")
		cmd.Dir = testwasm.RepoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if msg, err := cmd.CombinedOutput(); err != nil {
			probeErr = err
			t.Logf("%s", msg)
		}
	})
	if probeErr != nil {
		t.Fatalf("build hostileprobe: %v", probeErr)
	}
	return probePath
}

// removeProbe removes what hostileProbe built.
func removeProbe() {
	if probeDir != "" {
		os.RemoveAll(probeDir)
	}
}

// hostileCase is one escape attempt and the answer that means it failed.
type hostileCase struct {
	args []string
	want string
}

// runProbe runs the probe with args as a confined job and returns its one
// line of output.
func runProbe(t *testing.T, spec Spec, args ...string) string {
	t.Helper()
	spec.Command = append([]string{hostileProbe(t)}, args...)
	res := run(t, spec)
	if res.Status != StatusOK {
		t.Fatalf("probe %q: status %s exit %d stderr %q reason %q", args, res.Status, res.ExitCode, res.Stderr, res.Reason)
	}
	return strings.TrimSpace(string(res.Stdout))
}

func runHostile(t *testing.T, cases []hostileCase, spec Spec) {
	t.Helper()
	for _, c := range cases {
		t.Run(strings.Join(c.args, "-"), func(t *testing.T) {
			if got := runProbe(t, spec, c.args...); got != c.want {
				t.Errorf("%q: got %q, want %q", c.args, got, c.want)
			}
		})
	}
}

// TestHostileSyscallABIs: every system call through a foreign ABI is
// refused, whatever it is, and so are the dangerous native ones.
func TestHostileSyscallABIs(t *testing.T) {
	var cases []hostileCase
	for _, n := range []string{"getpid", "keyctl", "add_key", "request_key", "unshare", "setns", "io_uring_setup",
		"perf_event_open", "bpf", "userfaultfd", "ptrace", "mount", "setuid32", "kexec_load", "socketcall", "socket",
		"chroot", "init_module", "personality", "open"} {
		cases = append(cases, hostileCase{[]string{"i386", n}, "ENOSYS"})
	}
	for _, n := range []string{"getpid", "keyctl", "add_key", "unshare", "io_uring_setup", "perf_event_open", "bpf",
		"userfaultfd", "ptrace", "mount", "setuid", "socket", "kexec_load"} {
		cases = append(cases, hostileCase{[]string{"x32", n}, "ENOSYS"})
	}
	for _, c := range []struct{ name, want string }{
		{"getpid", "ok"},
		{"keyctl", "EPERM"}, {"add_key", "EPERM"}, {"request_key", "EPERM"},
		{"unshare-user", "EPERM"}, {"unshare-net", "EPERM"},
		{"clone-newuser", "EPERM"}, {"clone-newns", "EPERM"}, {"clone3", "ENOSYS"}, {"setns", "EPERM"},
		{"io_uring_setup", "EPERM"}, {"perf_event_open", "EPERM"}, {"bpf", "EPERM"}, {"userfaultfd", "EPERM"},
		{"ptrace", "EPERM"}, {"process_vm_readv", "EPERM"},
		{"mount", "EPERM"}, {"umount", "EPERM"}, {"pivot_root", "EPERM"}, {"chroot", "EPERM"},
		{"fsopen", "EPERM"}, {"open_tree", "EPERM"},
		{"setuid", "EPERM"}, {"setresuid", "EPERM"}, {"setgroups", "EPERM"},
		{"kexec_load", "EPERM"}, {"init_module", "EPERM"}, {"syslog", "EPERM"}, {"iopl", "EPERM"}, {"acct", "EPERM"},
		{"open_by_handle_at", "EPERM"}, {"pidfd_getfd", "EPERM"},
		{"socket-inet", "ok"}, {"socket-unix", "ok"},
		{"socket-mptcp", "EPERM"}, {"socket-mptcp6", "EPERM"}, {"socket-mptcp-high", "EPERM"},
		{"socket-vsock", "EAFNOSUPPORT"}, {"socket-vsock-high", "EAFNOSUPPORT"}, {"socket-packet", "EAFNOSUPPORT"},
		{"socket-alg", "EAFNOSUPPORT"}, {"socket-key", "EAFNOSUPPORT"}, {"socketpair-inet", "EAFNOSUPPORT"},
		{"memfd", "EPERM"}, {"memfd-exec-flag", "EPERM"}, {"memfd-sealed", "ok"},
		{"memfd-exec", "EACCES"}, {"execveat-empty", "EPERM"},
	} {
		cases = append(cases, hostileCase{[]string{"native", c.name}, c.want})
	}
	runHostile(t, cases, Spec{})
}
