package proctest

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestProcesses: a child this test starts is listed with its parent and
// cgroup, found by its cgroup and among the test's children; the test's
// own resident set is read.
func TestProcesses(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep to start: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	child := cmd.Process.Pid
	if kids := Children(os.Getpid()); !slices.Contains(kids, child) {
		t.Fatalf("Children(%d) = %v, want %d among them", os.Getpid(), kids, child)
	}
	var found *Process
	for _, p := range List() {
		if p.PID == child {
			found = &p
		}
	}
	if found == nil || found.PPID != os.Getpid() || len(found.Cgroups) == 0 {
		t.Fatalf("List: the child is %+v, want parent %d and its cgroups", found, os.Getpid())
	}
	if st := found.Stat(); !strings.HasPrefix(st, strings.Fields(st)[0]+" (sleep)") || found.Zombie() {
		t.Errorf("Stat = %q (zombie %v)", st, found.Zombie())
	}
	// The child's own cgroup line (what a job's test looks for) finds it.
	line := found.Cgroups[len(found.Cgroups)-1]
	if procs := InCgroup(line); !slices.ContainsFunc(procs, func(s string) bool { return strings.Contains(s, "(sleep)") }) {
		t.Errorf("InCgroup(%q) = %q, want the child", line, procs)
	}
	if rss := ResidentBytes(t); rss < 1<<20 {
		t.Errorf("ResidentBytes = %d, less than 1 MiB", rss)
	}
	cmd.Process.Kill()
	cmd.Process.Wait()
	if (Process{PID: child}).Stat() != "" {
		t.Errorf("a reaped process still has a stat")
	}
}
