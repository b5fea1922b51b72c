package kernel

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestSweepEgressOfDeadRunner: the rules and cgroup of a runner that died
// without removing them are swept once no process is left in the cgroup
// (not before: the jump is what holds such a process), and a live
// runner's rules are never touched.
func TestSweepEgressOfDeadRunner(t *testing.T) {
	testenv.Root(t, "egress rules need root (iptables and cgroups); CI runs as root")
	root, err := v2Root()
	if err != nil {
		t.Skip("no cgroup v2 hierarchy: egress rules cannot be made here")
	}
	// The "runner": a process whose pid and start time name the cgroup,
	// killed below as a crashed moat would be.
	runner := exec.Command("/bin/sleep", "300")
	if err := runner.Start(); err != nil {
		t.Fatal(err)
	}
	start, err := processStart(runner.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	id := "tsw" + strconv.Itoa(os.Getpid())
	dir := filepath.Join(root, egressParent, fmt.Sprintf("%s-%d-%d-%s", egressKind, runner.Process.Pid, start, id))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	targets := []EgressTarget{{IP: net.IPv4(127, 0, 0, 1), Port: 9}, {IP: net.IPv6loopback, Port: 9}}
	dead, err := newEgress(id, dir, targets, true)
	if err != nil {
		os.Remove(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dead.Close() })
	live, err := NewEgress("tlv"+strconv.Itoa(os.Getpid()), targets)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Close() })

	// A member of the dead runner's cgroup, still running.
	member := exec.Command("/bin/sleep", "300")
	if err := member.Start(); err != nil {
		t.Fatal(err)
	}
	defer member.Process.Kill()
	if err := writeFile(dir, "cgroup.procs", strconv.Itoa(member.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	_ = runner.Process.Kill()
	_ = runner.Wait()

	chains := func() map[string]int {
		rules, err := EgressRules()
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, r := range rules {
			n[r.Chain]++
		}
		return n
	}
	if n := chains(); n[dead.Chain()] != 2 || n[live.Chain()] != 2 {
		t.Fatalf("before the sweep: jumps per chain %v, want 2 (IPv4 and IPv6) for %s and %s", n, dead.Chain(), live.Chain())
	}
	if err := SweepEgress(); err != nil {
		t.Fatal(err)
	}
	if n := chains(); n[dead.Chain()] != 2 {
		t.Fatalf("the sweep removed the rules of a cgroup a process is still in: %v", n)
	}
	_ = member.Process.Kill()
	_ = member.Wait()
	if err := SweepEgress(); err != nil {
		t.Fatal(err)
	}
	n := chains()
	if n[dead.Chain()] != 0 {
		t.Errorf("the dead runner's jumps are left: %v", n)
	}
	if n[live.Chain()] != 2 {
		t.Errorf("the live runner's jumps were touched: %v", n)
	}
	for _, f := range egressFamilies() {
		list, _ := f.t.ListChains("filter")
		if slices.Contains(list, dead.Chain()) {
			t.Errorf("%s chain %s is left", f.name, dead.Chain())
		}
		if !slices.Contains(list, live.Chain()) {
			t.Errorf("%s chain %s of the live runner is gone", f.name, live.Chain())
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the dead runner's cgroup %s is left", dir)
	}
	if _, err := os.Stat(live.CgroupDir()); err != nil {
		t.Errorf("the live runner's cgroup: %v", err)
	}
}
