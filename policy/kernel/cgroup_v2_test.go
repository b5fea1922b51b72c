package kernel

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// The tests named TestV2* exercise the cgroup v2 paths. This machine kind
// mounts the v1 controllers, so here they skip; internal/vmtest boots a
// kernel with only the unified hierarchy and runs them there with
// MOAT_REQUIRE_CGROUP_V2=1, where a skip is a failure.

const unifiedRoot = "/sys/fs/cgroup"

func needV2(t *testing.T) {
	t.Helper()
	testenv.Root(t, "needs root to create cgroups (CI runs as root)")
	if !CgroupUnified() {
		if os.Getenv("MOAT_REQUIRE_CGROUP_V2") == "1" {
			t.Fatal("MOAT_REQUIRE_CGROUP_V2=1 but /sys/fs/cgroup is not the unified hierarchy")
		}
		t.Skip("this host mounts cgroup v1 controllers; internal/vmtest runs this test under cgroup v2")
	}
}

func readCg(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// startIn starts sh -c script born in the cgroup at dir (clone3 with
// CLONE_INTO_CGROUP, as the native runner starts its wrapper).
func startIn(t *testing.T, dir, script string) *exec.Cmd {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	cmd := exec.Command("/bin/sh", "-c", script)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	t.Cleanup(func() {
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("stderr of %q: %s", script, stderr.String())
		}
	})
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// TestV2JobCgroup: a job cgroup on v2 is one directory under
// /sys/fs/cgroup/moat with the controllers enabled above it and each limit
// written; memory, pids and CPU usage are reported by Stats, counted again
// from zero after Reset; Destroy kills every member and removes the
// directory.
func TestV2JobCgroup(t *testing.T) {
	testenv.Timing(t)
	needV2(t)
	lim := JobLimits{MemoryBytes: 48 << 20, CPUQuota: 0.5, Pids: 6}
	cg, err := NewJobCgroup("v2test-"+strconv.Itoa(os.Getpid()), lim)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Destroy()
	dir := cg.Dir("")
	if !cg.V2() || dir != filepath.Join(unifiedRoot, CgroupParent, "v2test-"+strconv.Itoa(os.Getpid())) {
		t.Fatalf("V2 %v, dir %q: want a v2 cgroup under %s/%s", cg.V2(), dir, unifiedRoot, CgroupParent)
	}
	if got := cg.ProcsFiles(); len(got) != 1 || got[0] != filepath.Join(dir, "cgroup.procs") {
		t.Fatalf("ProcsFiles %v, want the one v2 cgroup.procs", got)
	}
	for _, d := range []string{unifiedRoot, filepath.Join(unifiedRoot, CgroupParent)} {
		ctl := " " + readCg(t, d, "cgroup.subtree_control") + " "
		for _, c := range []string{"memory", "pids", "cpu"} {
			if !strings.Contains(ctl, " "+c+" ") {
				t.Errorf("%s/cgroup.subtree_control %q lacks %s: the job's %s limit would not apply", d, ctl, c, c)
			}
		}
	}
	for file, want := range map[string]string{
		"memory.max": strconv.Itoa(48 << 20), "memory.swap.max": "0", "cpu.max": "50000 100000", "pids.max": "6",
	} {
		if got := readCg(t, dir, file); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}

	cases := []struct {
		name   string
		script string
		runFor time.Duration // then killed; 0: until it ends
		check  func(t *testing.T, peak uint64, oom, pidsHit bool, cpu time.Duration, wall time.Duration)
	}{
		// python3 takes its 200 MB at once: the OOM kill comes at once, where
		// a shell growing a string creeps up to the limit and thrashes.
		{"memory", `exec /usr/bin/python3 -c "x = b'a' * (200 << 20)"`, 0,
			func(t *testing.T, peak uint64, oom, pidsHit bool, cpu, wall time.Duration) {
				if !oom {
					t.Errorf("no OOM kill reported (memory.events oom_kill) for 200 MB under a 48 MiB limit")
				}
				if peak > 48<<20 {
					t.Errorf("peak %d bytes, over the 48 MiB limit", peak)
				}
			}},
		{"pids", `for i in 1 2 3 4 5 6 7 8 9 10; do sleep 5 & done; wait`, 0,
			func(t *testing.T, peak uint64, oom, pidsHit bool, cpu, wall time.Duration) {
				if !pidsHit || oom {
					t.Errorf("pids limit hit %v, oom %v: want a refused fork (pids.events max) and no OOM", pidsHit, oom)
				}
			}},
		{"cpu", `while :; do :; done`, 3 * time.Second,
			func(t *testing.T, peak uint64, oom, pidsHit bool, cpu, wall time.Duration) {
				// cpu.max 50000/100000: half a core at most.
				if r := cpu.Seconds() / wall.Seconds(); r > 0.5*1.15 || r < 0.15 {
					t.Errorf("cpu %s over wall %s = %.2f cores, want about 0.5 (cpu.max)", cpu, wall, r)
				}
				if oom || pidsHit {
					t.Errorf("oom %v, pids hit %v: want neither", oom, pidsHit)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A cgroup of its own per job, as the native runner makes: on
			// Debian's 6.1.0-48 (2026-11-27, under QEMU) a process cloned
			// into a cgroup that an earlier cgroup.kill emptied
			// (CLONE_INTO_CGROUP) was SIGKILLed within milliseconds, with
			// no OOM kill counted and nothing on stderr, so the case after
			// a killed one failed. moat never clones into a killed cgroup
			// (host/native makes a fresh one per wrapper).
			cg, err := NewJobCgroup("v2test-"+strconv.Itoa(os.Getpid())+"-"+c.name, lim)
			if err != nil {
				t.Fatal(err)
			}
			defer cg.Destroy()
			dir := cg.Dir("")
			if err := cg.Reset(lim); err != nil {
				t.Fatal(err)
			}
			if _, oom, pidsHit, cpu := cg.Stats(); oom || pidsHit || cpu != 0 {
				t.Fatalf("after Reset: oom %v, pids hit %v, cpu %d ns: want all counted from zero", oom, pidsHit, cpu)
			}
			start := time.Now()
			cmd := startIn(t, dir, c.script)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			limit, timeout := 20*time.Second, true
			if c.runFor > 0 {
				limit, timeout = c.runFor, false
			}
			var exit error
			select {
			case exit = <-done:
			case <-time.After(limit):
				if !timeout {
					_ = cg.Kill()
					<-done
					break
				}
				_ = cg.Kill()
				<-done
				t.Fatal("the job did not end in 20 s")
			}
			wall := time.Since(start)
			if err := cg.Kill(); err != nil { // the pids case leaves sleeps behind
				t.Fatal(err)
			}
			if left := cg.Pids(); len(left) != 0 {
				t.Fatalf("members %v after Kill", left)
			}
			peak, oom, pidsHit, cpu := cg.Stats()
			t.Logf("%s: peak %d, oom %v, pids hit %v, cpu %s, wall %s, ended by itself: %v", c.name, peak, oom, pidsHit, time.Duration(cpu), wall, exit)
			c.check(t, peak, oom, pidsHit, time.Duration(cpu), wall)
		})
	}

	// Destroy with members alive: cgroup.kill, then the directory goes.
	cmd := startIn(t, dir, "sleep 30 & sleep 30 & wait")
	deadline := time.Now().Add(5 * time.Second)
	for len(cg.Pids()) < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := cg.Destroy(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the member ended with %v, want SIGKILL from cgroup.kill", cmd.ProcessState)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists after Destroy (%v)", dir, err)
	}
	if err := cg.Reset(lim); err == nil {
		t.Error("Reset after Destroy: nil error, want one")
	}
}

// TestV2HostCgroup: ConfineHost with MemoryBytes and Pids moves the whole
// host process (every thread) into moat/host-<pid> with those limits, and
// the next host sweeps the cgroup the previous one left. The host runs as
// a helper process (confining this test process would confine the test).
func TestV2HostCgroup(t *testing.T) {
	if os.Getenv("MOAT_V2_HOST_HELPER") == "1" {
		v2HostHelper()
		return
	}
	needV2(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	runHost := func() v2HostReport {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, exe, "-test.run=^TestV2HostCgroup$", "-test.count=1")
		cmd.Env = append(os.Environ(), "MOAT_V2_HOST_HELPER=1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("host helper: %v\n%s", err, out)
		}
		line := strings.SplitN(string(out), "\n", 2)[0]
		var r v2HostReport
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("host helper said %q: %v", out, err)
		}
		if r.Error != "" {
			t.Fatalf("host helper: %s", r.Error)
		}
		return r
	}
	first := runHost()
	want := fmt.Sprintf("0::/%s/host-%d-", CgroupParent, first.Pid)
	if !strings.HasPrefix(first.Cgroup, want) || !first.AllThreads {
		t.Fatalf("the confined host was in %q (all %d threads there: %v), want %q", first.Cgroup, first.Threads, first.AllThreads, want)
	}
	if !strings.Contains(strings.Join(first.Applied, ","), "cgroup") {
		t.Errorf("ConfineHost applied %v, missing %v: want the cgroup layer", first.Applied, first.Missing)
	}
	// A process cannot remove its own cgroup: it stays until the next
	// host, so its limits can be read here.
	firstDir := filepath.Join(unifiedRoot, strings.TrimPrefix(first.Cgroup, "0::/"))
	if _, err := os.Stat(firstDir); err != nil {
		t.Fatalf("the exited host's cgroup %s: %v", firstDir, err)
	}
	if mem, pids := readCg(t, firstDir, "memory.max"), readCg(t, firstDir, "pids.max"); mem != strconv.Itoa(96<<20) || pids != "40" {
		t.Errorf("host cgroup memory.max %q, pids.max %q: want %d and 40", mem, pids, 96<<20)
	}
	second := runHost()
	if _, err := os.Stat(firstDir); !os.IsNotExist(err) {
		t.Errorf("the next host left the stale %s (%v)", firstDir, err)
	}
	RemoveStaleCgroups(fmt.Sprintf("host-%d-*", second.Pid), 0)
	if _, err := os.Stat(filepath.Join(unifiedRoot, strings.TrimPrefix(second.Cgroup, "0::/"))); !os.IsNotExist(err) {
		t.Errorf("host-%d left behind (%v)", second.Pid, err)
	}
}

type v2HostReport struct {
	Pid        int               `json:"pid"`
	Cgroup     string            `json:"cgroup"`
	Threads    int               `json:"threads"`
	AllThreads bool              `json:"all_threads"`
	Applied    []string          `json:"applied"`
	Missing    map[string]string `json:"missing"`
	Error      string            `json:"error,omitempty"`
}

// v2HostHelper confines itself as moat run does (cgroup, then Landlock,
// which leaves it /proc but not /sys), reports where it landed and exits.
func v2HostHelper() {
	r := v2HostReport{Pid: os.Getpid()}
	defer func() {
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
		os.Exit(0)
	}()
	rep, err := ConfineHost(HostConfinement{Mode: ConfineBestEffort, MemoryBytes: 96 << 20, Pids: 40})
	if err != nil {
		r.Error = err.Error()
		return
	}
	r.Applied, r.Missing = rep.Applied, rep.Missing
	b, _ := os.ReadFile("/proc/self/cgroup")
	r.Cgroup = strings.TrimSpace(string(b))
	tasks, _ := os.ReadDir("/proc/self/task")
	r.Threads, r.AllThreads = len(tasks), len(tasks) > 0
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/cgroup")
		if strings.TrimSpace(string(b)) != r.Cgroup {
			r.AllThreads = false
		}
	}
}

// TestV2RemoveStaleCgroups: the sweep removes empty cgroups of the
// pattern older than minAge, and never one with a member, one younger
// than minAge, or one of another pattern.
func TestV2RemoveStaleCgroups(t *testing.T) {
	needV2(t)
	parent := filepath.Join(unifiedRoot, CgroupParent)
	tag := strconv.Itoa(os.Getpid())
	mk := func(name string) string {
		d := filepath.Join(parent, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(d) })
		return d
	}
	empty, busy, other := mk("stale"+tag+"-empty"), mk("stale"+tag+"-busy"), mk("keep"+tag+"-empty")
	cmd := startIn(t, busy, "sleep 30")
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	RemoveStaleCgroups("stale"+tag+"-*", time.Hour)
	for _, d := range []string{empty, busy, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("minAge 1h: %s removed (%v), want kept: it is younger", d, err)
		}
	}
	RemoveStaleCgroups("stale"+tag+"-*", 0)
	for d, wantGone := range map[string]bool{empty: true, busy: false, other: false} {
		_, err := os.Stat(d)
		if gone := os.IsNotExist(err); gone != wantGone {
			t.Errorf("%s: removed %v, want %v", d, gone, wantGone)
		}
	}
	if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid)); !strings.Contains(string(b), "/stale"+tag+"-busy") {
		t.Errorf("the busy cgroup's member moved: %q", b)
	}
}
