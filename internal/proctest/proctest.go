// Package proctest reads /proc for tests: the processes a job left
// running (by the cgroup they are in), the children of a process, and this
// process's resident memory. The tests of host/native, languages/all,
// host and cmd/moat each scanned /proc their own way; this is the one way.
//
// It imports nothing of ours, so a test names the cgroup it looks for
// itself ("/"+kernel.CgroupParent+"/job-"+tag). Everything here is Linux's
// /proc; a process that ends while it is read is skipped, as it would be
// if the scan had come a moment later.
package proctest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Process is one process as /proc showed it when it was listed.
type Process struct {
	PID  int
	PPID int
	// Cgroups are the lines of /proc/PID/cgroup, one per hierarchy
	// ("0::/moat/job-x" on cgroup v2).
	Cgroups []string
}

// Stat is /proc/PID/stat, trimmed (pid, command, state, ...): what a test
// shows of a process it did not expect; "" when it has ended.
func (p Process) Stat() string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/stat")
	return strings.TrimSpace(string(b))
}

// Zombie reports whether p has exited and not been reaped (state Z).
func (p Process) Zombie() bool {
	st := p.Stat()
	i := strings.LastIndexByte(st, ')')
	return i > 0 && strings.HasPrefix(st[i+1:], " Z")
}

// List is every process /proc lists.
func List() []Process {
	ents, _ := os.ReadDir("/proc")
	var out []Process
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, ok := read(pid)
		if ok {
			out = append(out, p)
		}
	}
	return out
}

// read reads pid's parent and cgroups; false when it has ended.
func read(pid int) (Process, bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	cg, err := os.ReadFile(dir + "cgroup")
	if err != nil {
		return Process{}, false
	}
	p := Process{PID: pid, PPID: -1}
	for line := range strings.SplitSeq(strings.TrimSpace(string(cg)), "\n") {
		if line != "" {
			p.Cgroups = append(p.Cgroups, line)
		}
	}
	p.PPID = parentOf(pid)
	return p, true
}

// parentOf is pid's parent, from /proc/PID/status; -1 when it has ended.
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// Children lists the processes whose parent is pid.
func Children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err == nil && parentOf(n) == pid {
			out = append(out, n)
		}
	}
	return out
}

// InCgroup lists, as Stat shows them, the processes one of whose cgroup
// lines contains part ("/moat/job-x"): what a job left running.
func InCgroup(part string) []string {
	var out []string
	for _, p := range List() {
		for _, line := range p.Cgroups {
			if strings.Contains(line, part) {
				out = append(out, p.Stat())
				break
			}
		}
	}
	return out
}

// ResidentBytes is this process's resident set (VmRSS); it fails the test
// when /proc/self/status does not say.
func ResidentBytes(t testing.TB) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}
