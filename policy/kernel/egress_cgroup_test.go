package kernel_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/internal/egresstest"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy/kernel"
	"golang.org/x/sys/unix"
)

// v2Root is where the unified hierarchy is mounted.
func v2Root() string {
	if kernel.CgroupUnified() {
		return "/sys/fs/cgroup"
	}
	return "/sys/fs/cgroup/unified"
}

// v2Cgroup makes a v2 cgroup the caller owns, as the native runner's job
// cgroup is: under /sys/fs/cgroup/moat on a unified host, in the unified
// hierarchy beside the v1 controllers on a hybrid one.
func v2Cgroup(t *testing.T, name string) string {
	t.Helper()
	var dir string
	if kernel.CgroupUnified() {
		cg, err := kernel.NewJobCgroup(name, kernel.JobLimits{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cg.Destroy() })
		return cg.Dir("")
	}
	root := v2Root()
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		t.Fatalf("no cgroup v2 hierarchy at %s: %v", root, err)
	}
	dir = filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	return dir
}

// TestEgressForCgroup: rules on a cgroup the caller owns hold its
// processes to the granted TCP target, by the chain alone (no Landlock
// here): the target's port over IPv6, another port, and UDP to the
// target's own port are all refused, with the errno the REJECT rules give
// (a TCP reset: ECONNREFUSED; a datagram dropped in OUTPUT: EPERM), and
// nothing reaches the listeners. Close removes the rules and keeps the
// cgroup, which is the caller's.
func TestEgressForCgroup(t *testing.T) {
	testenv.Root(t, "egress rules need root (iptables and cgroups); CI runs as root")
	python, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Fatal("python3 is required (make tools installs it)")
	}
	a, b := egresstest.NewListener(t), egresstest.NewListener(t)
	dir := v2Cgroup(t, "egtest-"+strconv.Itoa(os.Getpid()))
	id := "c" + strconv.Itoa(os.Getpid())
	e, err := kernel.NewEgressForCgroup(id, dir, []kernel.EgressTarget{{IP: net.IPv4(127, 0, 0, 1), Port: a.Port}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			e.Close()
		}
	}()
	if e.CgroupDir() != dir {
		t.Errorf("CgroupDir %s, want the given %s", e.CgroupDir(), dir)
	}
	const (
		refused = "111" // ECONNREFUSED: the chain's TCP reset
		dropped = "1"   // EPERM: a datagram rejected in OUTPUT
	)
	cases := []struct {
		name, probe, inCgroup, outside string
	}{
		{"tcp4 target", fmt.Sprintf("tcp,127.0.0.1,%d", a.Port), "connected", "connected"},
		{"tcp4 other port", fmt.Sprintf("tcp,127.0.0.1,%d", b.Port), refused, "connected"},
		{"tcp6 target's port", fmt.Sprintf("tcp,::1,%d", a.Port), refused, "connected"},
		{"tcp6 other port", fmt.Sprintf("tcp,::1,%d", b.Port), refused, "connected"},
		{"tcp6 v4-mapped other port", fmt.Sprintf("tcp,::ffff:127.0.0.1,%d", b.Port), refused, "connected"},
		{"udp4 target's port", fmt.Sprintf("udp,127.0.0.1,%d", a.Port), dropped, "sent"},
		{"udp4 other port", fmt.Sprintf("udp,127.0.0.1,%d", b.Port), dropped, "sent"},
		{"udp6 other port", fmt.Sprintf("udp,::1,%d", b.Port), dropped, "sent"},
	}
	probe := func(inCgroup bool) []string {
		t.Helper()
		args := []string{"-c", egresstest.Probe}
		for _, c := range cases {
			args = append(args, c.probe)
		}
		cmd := exec.Command(python, args...)
		if inCgroup {
			fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("probe: %v\n%s", err, out)
		}
		lines := strings.Fields(string(out))
		if len(lines) != len(cases) {
			t.Fatalf("probe printed %q, want %d lines", out, len(cases))
		}
		return lines
	}
	got := probe(true)
	for i, c := range cases {
		if got[i] != c.inCgroup {
			t.Errorf("%s (%s) from the cgroup: %s, want %s", c.name, c.probe, got[i], c.inCgroup)
		}
	}
	at, au := a.Sync(t)
	bt, bu := b.Sync(t)
	if at != 1 || au != 0 || bt != 0 || bu != 0 {
		t.Errorf("reached the listeners from the cgroup: target's port tcp %d udp %d, other port tcp %d udp %d; want only the one TCP connection to the target", at, au, bt, bu)
	}
	// The same probes from outside the cgroup reach everything: the
	// refusals above are the chain's, not the machine's.
	got = probe(false)
	for i, c := range cases {
		if got[i] != c.outside {
			t.Errorf("%s (%s) from outside: %s, want %s", c.name, c.probe, got[i], c.outside)
		}
	}
	chain := e.Chain()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	for _, cmd := range []string{"iptables", "ip6tables"} {
		rules, err := exec.Command(cmd, "-S").CombinedOutput()
		if err != nil {
			t.Fatalf("%s -S: %v\n%s", cmd, err, rules)
		}
		if strings.Contains(string(rules), chain) {
			t.Errorf("%s: chain %s left behind:\n%s", cmd, chain, rules)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		t.Errorf("Close removed the caller's cgroup %s: %v", dir, err)
	}
	if err := e.Close(); err != nil {
		t.Errorf("a second Close: %v, want nil", err)
	}
}

// TestEgressForCgroupRefuses: a cgroup the rules could not name exactly
// (outside the v2 hierarchy, relative, not a directory, with "..") is
// refused before any rule is made, naming the path.
func TestEgressForCgroupRefuses(t *testing.T) {
	testenv.Root(t, "egress rules need root (iptables and cgroups); CI runs as root")
	dir := v2Cgroup(t, "egref-"+strconv.Itoa(os.Getpid()))
	for _, tt := range []struct{ name, dir, want string }{
		{"outside the hierarchy", t.TempDir(), "is not a cgroup in the v2 hierarchy"},
		{"relative", "moat/job-x", "is not an absolute path"},
		{"dot-dot", dir + "/../" + filepath.Base(dir), "is not a clean path"},
		{"the root itself", v2Root(), "is not a cgroup in the v2 hierarchy"},
		{"missing", dir + "-gone", "no such file or directory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, err := kernel.NewEgressForCgroup("r"+strconv.Itoa(os.Getpid()), tt.dir, nil)
			if err == nil {
				e.Close()
				t.Fatalf("NewEgressForCgroup(%s): no error", tt.dir)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.dir) {
				t.Errorf("err %q, want it to name %s and say %q", err, tt.dir, tt.want)
			}
			if errors.Is(err, os.ErrNotExist) != (tt.name == "missing") {
				t.Errorf("err %v: errors.Is(ErrNotExist) wrong", err)
			}
		})
	}
}
