package native

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/egresstest"
	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestAllowNetHostile: a job granted one TCP target (127.0.0.1:A) tries
// every other way out of the host's network namespace it shares: another
// port, the target's port over IPv6, a v4-mapped IPv6 address, UDP to the
// target's own port and to another, UDP over IPv6. Each is refused with
// the errno of the layer that holds it: Landlock (EACCES) where the
// kernel governs TCP connect and the port is not granted, else the job's
// iptables chain (ECONNREFUSED from its TCP reset; EPERM for a datagram it
// drops in OUTPUT); and nothing but the one granted connection reaches the
// listeners. The chain matches the job cgroup itself on a pure cgroup v2
// host and a v2 cgroup beside the v1 ones on a hybrid host: internal/vmtest
// runs this test under v2. Nothing is left behind: no cgroup, no chain.
func TestAllowNetHostile(t *testing.T) {
	needPython(t)
	testenv.Root(t, "egress allowlists need root (iptables); CI runs as root")
	a, b := egresstest.NewListener(t), egresstest.NewListener(t)
	cases := []struct {
		name, probe string
		// want is the outcome; "deny-port" is a TCP port the grant does
		// not name, refused by Landlock or, without it, the chain.
		want string
	}{
		{"tcp4 target", fmt.Sprintf("tcp,127.0.0.1,%d", a.Port), "connected"},
		{"tcp4 other port", fmt.Sprintf("tcp,127.0.0.1,%d", b.Port), "deny-port"},
		{"tcp6 target's port", fmt.Sprintf("tcp,::1,%d", a.Port), "111"},
		{"tcp6 other port", fmt.Sprintf("tcp,::1,%d", b.Port), "deny-port"},
		{"tcp6 v4-mapped other port", fmt.Sprintf("tcp,::ffff:127.0.0.1,%d", b.Port), "deny-port"},
		{"udp4 target's port", fmt.Sprintf("udp,127.0.0.1,%d", a.Port), "1"},
		{"udp4 other port", fmt.Sprintf("udp,127.0.0.1,%d", b.Port), "1"},
		{"udp6 target's port", fmt.Sprintf("udp,::1,%d", a.Port), "1"},
		{"udp6 other port", fmt.Sprintf("udp,::1,%d", b.Port), "1"},
	}
	cmd := []string{python, "-c", egresstest.Probe}
	for _, c := range cases {
		cmd = append(cmd, c.probe)
	}
	res := run(t, Spec{Command: cmd, AllowNet: []string{fmt.Sprintf("127.0.0.1:%d", a.Port)}})
	if res.Status != StatusOK {
		t.Fatalf("status %s reason %q stderr %q", res.Status, res.Reason, res.Stderr)
	}
	if !slices.Contains(res.Layers, fmt.Sprintf("egress(127.0.0.1:%d)", a.Port)) {
		t.Errorf("layers %v lack egress(127.0.0.1:%d)", res.Layers, a.Port)
	}
	// Landlock governs TCP connect from ABI 4 on (the VM's 6.1 kernel
	// has ABI 3: there the chain alone holds).
	denyPort := "111"
	if slices.Contains(res.Layers, "landlock") &&
		!slices.ContainsFunc(res.Unavailable, func(u string) bool { return strings.HasPrefix(u, "landlock-tcp:") }) {
		denyPort = "13"
	}
	got := strings.Fields(string(res.Stdout))
	if len(got) != len(cases) {
		t.Fatalf("probe printed %q (stderr %q), want %d lines", res.Stdout, res.Stderr, len(cases))
	}
	for i, c := range cases {
		want := c.want
		if want == "deny-port" {
			want = denyPort
		}
		if got[i] != want {
			t.Errorf("%s (%s): %s, want %s", c.name, c.probe, got[i], want)
		}
	}
	at, au := a.Sync(t)
	bt, bu := b.Sync(t)
	if at != 1 || au != 0 || bt != 0 || bu != 0 {
		t.Errorf("reached the listeners from the job: target's port tcp %d udp %d, other port tcp %d udp %d; want only the one TCP connection to the target", at, au, bt, bu)
	}
	assertNoEgressLeft(t)
}

// assertNoEgressLeft: no job chain in either table and no egress cgroup.
func assertNoEgressLeft(t *testing.T) {
	t.Helper()
	for _, cmd := range []string{"iptables", "ip6tables"} {
		rules, err := exec.Command(cmd, "-S").CombinedOutput()
		if err != nil {
			t.Fatalf("%s -S: %v\n%s", cmd, err, rules)
		}
		if strings.Contains(string(rules), "MOAT-E") {
			t.Errorf("%s: an egress chain was left behind:\n%s", cmd, rules)
		}
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/unified/moat-egress/*/cgroup.procs"); len(left) > 0 {
		t.Errorf("egress cgroups left behind: %v", left)
	}
}
