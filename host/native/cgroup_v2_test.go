package native

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/policy/kernel"
)

// The tests named TestV2* run the native runner on the cgroup v2 paths.
// This machine kind mounts the v1 controllers, so here they skip;
// internal/vmtest boots a kernel with only the unified hierarchy and runs
// them there with MOAT_REQUIRE_CGROUP_V2=1, where a skip is a failure.

func needV2(t *testing.T) {
	t.Helper()
	needRoot(t)
	if !kernel.CgroupUnified() {
		if os.Getenv("MOAT_REQUIRE_CGROUP_V2") == "1" {
			t.Fatal("MOAT_REQUIRE_CGROUP_V2=1 but /sys/fs/cgroup is not the unified hierarchy")
		}
		t.Skip("this host mounts cgroup v1 controllers; internal/vmtest runs this test under cgroup v2")
	}
}

// v2Wrappers are the wrappers each case runs through: this test binary
// re-executed, and the slim moat-confine an installed moat uses, when
// MOAT_CONFINE_WRAPPER names one (internal/vmtest builds it for the guest).
func v2Wrappers(t *testing.T) map[string]string {
	w := map[string]string{"self-exe": ""}
	if p := os.Getenv("MOAT_CONFINE_WRAPPER"); p != "" {
		w["moat-confine"] = p
	} else if os.Getenv("MOAT_REQUIRE_CGROUP_V2") == "1" {
		t.Fatal("MOAT_REQUIRE_CGROUP_V2=1 needs MOAT_CONFINE_WRAPPER (a moat-confine binary)")
	}
	return w
}

const v2Parent = "/sys/fs/cgroup/" + kernel.CgroupParent

// TestV2JobBornInCgroup: on v2 the wrapper is cloned into the job cgroup
// (clone3 CLONE_INTO_CGROUP): it is there the moment the clone returns,
// before it runs a single instruction, and so is the command it becomes.
func TestV2JobBornInCgroup(t *testing.T) {
	needV2(t)
	for name, wrapper := range v2Wrappers(t) {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			j, err := start(Spec{Command: []string{"sleep", "20"}, Wrapper: wrapper}, nil, &stdout, &stderr)
			if err != nil {
				t.Fatal(err)
			}
			pid := j.cmd.Process.Pid
			// Read before anything else: a wrapper that joined by itself
			// would still be in this process's cgroup now.
			atClone, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
			var atExec []byte
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "sleep" {
					atExec, _ = os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
					break
				}
			}
			dir, members := "", []int(nil)
			if j.cg != nil {
				dir, members = j.cg.Dir(""), j.cg.Pids()
			}
			j.kill()
			_ = j.cmd.Wait()
			j.cleanup()
			if j.cg == nil {
				t.Fatalf("no job cgroup (layers %v, unavailable %v)", j.res.Layers, j.res.Unavailable)
			}
			if !j.cg.V2() || !j.cmd.SysProcAttr.UseCgroupFD {
				t.Errorf("v2 %v, UseCgroupFD %v: want the child cloned into its v2 job cgroup (clone3 CLONE_INTO_CGROUP)", j.cg.V2(), j.cmd.SysProcAttr.UseCgroupFD)
			}
			want := "0::/" + kernel.CgroupParent + "/" + filepath.Base(dir)
			if got := strings.TrimSpace(string(atClone)); got != want {
				t.Errorf("the wrapper's cgroup when the clone returned: %q, want %q", got, want)
			}
			if got := strings.TrimSpace(string(atExec)); got != want {
				t.Errorf("the command's cgroup once it runs: %q, want %q (stderr %q)", got, want, stderr.Bytes())
			}
			if len(members) != 1 || members[0] != pid {
				t.Errorf("job cgroup members %v, want the child %d alone", members, pid)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("job cgroup %s left after cleanup (%v)", dir, err)
			}
		})
	}
}

// TestV2Limits: each limit of a job holds on v2 and ends in the status
// that names it: memory → memory-limit (the cgroup's OOM kill), pids →
// PidsLimitHit (the fork refused with EAGAIN), CPU → at most the quota.
func TestV2Limits(t *testing.T) {
	needV2(t)
	cases := []struct {
		name  string
		spec  Spec
		check func(t *testing.T, r *Result)
	}{
		// python3 takes its 512 MiB at once, so the OOM kill comes at once
		// (TestMemoryLimit and TestPool also run a shell that creeps up).
		{"memory", Spec{Command: []string{python, "-c", "x = b'a' * (512 << 20); print(len(x))"},
			MemoryBytes: 64 << 20, Timeout: 20 * time.Second}, func(t *testing.T, r *Result) {
			if r.Status != StatusMemoryLimit || r.Reason != fmt.Sprintf("memory limit %d bytes: the OOM killer ended a process", 64<<20) {
				t.Errorf("status %s reason %q, want memory-limit naming the 64 MiB limit", r.Status, r.Reason)
			}
			if r.PeakMemory == 0 || r.PeakMemory > 64<<20 {
				t.Errorf("peak memory %d, want up to the 64 MiB limit (memory.peak)", r.PeakMemory)
			}
		}},
		{"pids", Spec{Command: []string{"sh", "-c", "for i in $(seq 1 100); do sleep 2 & done; wait"},
			ExtraExec: []string{"/usr/bin/seq", "/usr/bin/sleep"}, Pids: 16, Timeout: 10 * time.Second}, func(t *testing.T, r *Result) {
			if !r.PidsLimitHit {
				t.Errorf("PidsLimitHit false, want true (pids.events max)")
			}
			if !strings.Contains(string(r.Stderr), "Cannot fork") && !strings.Contains(string(r.Stderr), "Resource temporarily unavailable") {
				t.Errorf("stderr %q: want the shell's refused fork", r.Stderr)
			}
			if r.Status == StatusMemoryLimit || r.Status == StatusTimeout {
				t.Errorf("status %s, want the fork refused, not an OOM kill or the timeout", r.Status)
			}
		}},
		{"cpu-quarter", Spec{Command: []string{"sh", "-c", "while :; do :; done"}, CPUQuota: 0.25, Timeout: 2 * time.Second},
			func(t *testing.T, r *Result) {
				if r.Status != StatusTimeout {
					t.Errorf("status %s, want timeout", r.Status)
				}
				// cpu.max 25000/100000: a quarter of a core at most.
				if ratio := r.CPU.Seconds() / r.Wall.Seconds(); ratio > 0.25*1.2 || ratio < 0.08 {
					t.Errorf("cpu %s in wall %s = %.2f cores, want about 0.25 (cpu.max)", r.CPU, r.Wall, ratio)
				}
			}},
	}
	for wname, wrapper := range v2Wrappers(t) {
		for _, c := range cases {
			t.Run(wname+"/"+c.name, func(t *testing.T) {
				if c.spec.Command[0] == python {
					needPython(t)
				}
				spec := c.spec
				spec.Wrapper = wrapper
				r := run(t, spec)
				if !strings.Contains(strings.Join(r.Layers, ","), "cgroup") {
					t.Fatalf("layers %v, unavailable %v: want the cgroup layer", r.Layers, r.Unavailable)
				}
				c.check(t, r)
			})
		}
	}
}

// TestV2NothingLeftBehind: jobs that end every way (OOM kill, refused
// forks with children left running, timeout, exit), eight at once, leave
// no job cgroup and no populated cgroup under moat/.
func TestV2NothingLeftBehind(t *testing.T) {
	needV2(t)
	needPython(t)
	specs := []Spec{
		{Command: []string{python, "-c", "x = b'a' * (256 << 20)"}, MemoryBytes: 48 << 20},
		{Command: []string{"sh", "-c", "for i in $(seq 1 40); do sleep 30 & done; wait"}, ExtraExec: []string{"/usr/bin/seq", "/usr/bin/sleep"}, Pids: 8, Timeout: 3 * time.Second},
		{Command: []string{"sh", "-c", "sleep 30 & sleep 30 & while :; do :; done"}, ExtraExec: []string{"/usr/bin/sleep"}, Timeout: time.Second},
		{Command: []string{"sh", "-c", "sleep 30 & exit 3"}, ExtraExec: []string{"/usr/bin/sleep"}},
	}
	want := []Status{StatusMemoryLimit, "", StatusTimeout, StatusRuntimeError}
	before := jobProcs()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := Run(t.Context(), specs[i%len(specs)])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("run %d: %v", i, err)
				return
			}
			if w := want[i%len(specs)]; w != "" && r.Status != w {
				t.Errorf("run %d: status %s, want %s (reason %q)", i, r.Status, w, r.Reason)
			}
		}()
	}
	wg.Wait()
	assertClean(t, before)
	deadline := time.Now().Add(3 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(v2Parent, "cgroup.events"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "populated 0") {
			break
		}
		if time.Now().After(deadline) {
			left, _ := filepath.Glob(filepath.Join(v2Parent, "*", "cgroup.procs"))
			t.Fatalf("%s still populated: %s (cgroups %v)", v2Parent, b, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
