package main_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy/kernel"
)

// TestExecKill9AllowNetSweep: a moat exec --native --allow-net killed with
// SIGKILL while its job runs leaves the job's egress rules (the jump from
// OUTPUT and the chain, IPv4 and IPv6) and, on a hybrid host, the v2
// cgroup they match; the next moat exec kills the job's processes, then
// removes those rules, then the cgroups: nothing is left.
func TestExecKill9AllowNetSweep(t *testing.T) {
	needRootCgroups(t)
	if _, err := exec.LookPath("iptables"); err != nil {
		testenv.Require(t, "needs iptables (make tools installs it)")
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	data := t.TempDir()
	before := jobLeftovers()
	cmd := exec.Command(moatBin, "exec", "--data", data, "--native", "--timeout", "60s", "--allow-net", l.Addr().String(), "--", "sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	runner := fmt.Sprintf("-%d-", cmd.Process.Pid)
	ours := func() []kernel.EgressRule {
		rules, err := kernel.EgressRules()
		if err != nil {
			t.Fatal(err)
		}
		var out []kernel.EgressRule
		for _, r := range rules {
			if strings.Contains(r.CgroupPath, runner) {
				out = append(out, r)
			}
		}
		return out
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(ours()) < 2 {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("moat exec --allow-net made no egress rule of its own (rules: %+v)", ours())
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	time.Sleep(200 * time.Millisecond)
	if len(ours()) == 0 {
		t.Fatal("the killed moat exec left no rule: the case tests nothing")
	}
	if r := moat(t, "", "exec", "--data", data, "--native", "--", "true"); r.code != 0 {
		t.Fatalf("the next moat exec: %+v", r)
	}
	if left := ours(); len(left) != 0 {
		t.Errorf("egress rules of the killed runner left: %+v", left)
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		out, _ := exec.Command(tool, "-S").CombinedOutput()
		for line := range strings.SplitSeq(string(out), "\n") {
			if strings.Contains(line, runner) {
				t.Errorf("%s: left behind: %s", tool, line)
			}
		}
	}
	if ents, err := os.ReadDir("/sys/fs/cgroup/unified/moat-egress"); err == nil {
		for _, e := range ents {
			if strings.Contains(e.Name(), runner) {
				t.Errorf("egress cgroup left behind: %s", e.Name())
			}
		}
	}
	assertNoNewLeftovers(t, before)
}
