package native

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/proctest"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy/kernel"
)

// Issue 27 (14, 15): a job ended by moat (its timeout, the OOM killer, its
// caller's cancellation) leaves nothing: no process, and no directory of
// its cgroup in any hierarchy, when Run returns. A runner killed with
// SIGKILL leaves its job's cgroup, maybe frozen; the sweep of the next
// runner reaps it, and never a live runner's.

// needCgroups fails under MOAT_REQUIRE_TOOLS=1, and skips otherwise, when
// job cgroups cannot be made here.
func needCgroups(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Require(t, "needs root: job cgroups and the uid switch (CI runs as root)")
	}
}

// forkSleep starts children that each start more and sleep: what a build
// tool does (clang's driver and cc1, go build's compile and link), and a
// fork bomb held by the pids limit.
const forkSleep = `for i in 1 2 3 4 5 6 7 8; do (sleep 300 & sleep 300) & done; echo started; sleep 300`

// ownJobProcs lists the processes in this test binary's job cgroups,
// read from each process's /proc/PID/cgroup: what a job leaves running.
func ownJobProcs(tag string) []string {
	return proctest.InCgroup("/" + kernel.CgroupParent + "/job-" + tag)
}

// assertNothingLeft: no directory of a job cgroup with the runner tag in
// any hierarchy, and no process in one.
func assertNothingLeft(t *testing.T, tag string) {
	t.Helper()
	if left := kernel.JobCgroupDirs("job-" + tag); len(left) > 0 {
		t.Errorf("job cgroup directories left: %v", left)
	}
	if procs := ownJobProcs(tag); len(procs) > 0 {
		t.Errorf("job processes left: %q", procs)
	}
	if left, _ := filepath.Glob(filepath.Join(JobsDir(), "job-"+tag+"*")); len(left) > 0 {
		t.Errorf("job dirs left: %v", left)
	}
}

// freezeOwnJobs freezes every job cgroup of the runner tag (v1: its
// freezer directory; v2: cgroup.freeze): what a killer that died between
// the freeze and the thaw leaves.
func freezeOwnJobs(t *testing.T, tag string) int {
	t.Helper()
	n := 0
	for _, d := range kernel.JobCgroupDirs("job-" + tag) {
		file, value := "freezer.state", "FROZEN"
		if kernel.CgroupUnified() {
			file, value = "cgroup.freeze", "1"
		} else if filepath.Base(filepath.Dir(filepath.Dir(d))) != "freezer" {
			continue
		}
		if err := os.WriteFile(filepath.Join(d, file), []byte(value), 0); err != nil {
			t.Fatalf("freeze %s: %v", d, err)
		}
		n++
	}
	return n
}

func TestJobEndLeavesNothing(t *testing.T) {
	needCgroups(t)
	tag := kernel.OwnJobCgroupTag()
	cases := []struct {
		name   string
		spec   Spec
		cancel time.Duration // cancel the caller's context after this (0: never)
		freeze bool          // freeze the job's cgroup before its end (v1)
		want   Status
	}{
		{"fork-sleep-at-timeout", Spec{Command: []string{"sh", "-c", forkSleep}, Timeout: 700 * time.Millisecond, ExtraExec: []string{"/usr/bin/sleep"}}, 0, false, StatusTimeout},
		{"fork-sleep-canceled", Spec{Command: []string{"sh", "-c", forkSleep}, Timeout: 20 * time.Second, ExtraExec: []string{"/usr/bin/sleep"}}, 500 * time.Millisecond, false, StatusKilled},
		{"oom-kill", Spec{Command: []string{"sh", "-c", `(sleep 300 &); a=xxxxxxxxxxxxxxxx; while :; do a=$a$a; done`}, MemoryBytes: 24 << 20, Timeout: 20 * time.Second, ExtraExec: []string{"/usr/bin/sleep"}}, 0, false, StatusMemoryLimit},
		// A killer that died between its freeze and its thaw left the
		// group frozen: the next kill must thaw it, or SIGKILL is never
		// acted on.
		{"frozen-at-timeout", Spec{Command: []string{"sh", "-c", forkSleep}, Timeout: 1500 * time.Millisecond, ExtraExec: []string{"/usr/bin/sleep"}}, 0, true, StatusTimeout},
		{"frozen-canceled", Spec{Command: []string{"sh", "-c", forkSleep}, Timeout: 20 * time.Second, ExtraExec: []string{"/usr/bin/sleep"}}, time.Second, true, StatusKilled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if c.cancel > 0 {
				time.AfterFunc(c.cancel, cancel)
			}
			if c.freeze {
				time.AfterFunc(500*time.Millisecond, func() {
					if freezeOwnJobs(t, tag) == 0 {
						t.Error("no job cgroup to freeze")
					}
				})
			}
			res, err := Run(ctx, c.spec)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.Status != c.want {
				t.Errorf("status %s (reason %q, stderr %q): want %s", res.Status, res.Reason, clip(res.Stderr), c.want)
			}
			assertNothingLeft(t, tag)
		})
	}
}

// runnerEnv makes the test binary a runner (see TestMain): it runs one
// forkSleep job and waits to be killed.
const runnerEnv = "MOAT_TEST_JOB_RUNNER"

// jobRunnerMain runs forkSleep as a job for a test that kills this process.
func jobRunnerMain() {
	if os.Getenv(runnerEnv) != "1" {
		return
	}
	fmt.Println(kernel.OwnJobCgroupTag())
	res, err := Run(context.Background(), Spec{Command: []string{"sh", "-c", forkSleep}, Timeout: time.Minute, ExtraExec: []string{"/usr/bin/sleep"}})
	fmt.Fprintln(os.Stderr, res, err)
	os.Exit(0)
}

// TestSweepReapsDeadRunner: a runner killed with SIGKILL (with its job's
// group as a kill interrupted mid-way leaves it: frozen, or not) leaves
// the job's cgroup; the sweep leaves it alone while the runner lives, and
// reaps it (processes and directories in every hierarchy) once it is gone.
func TestSweepReapsDeadRunner(t *testing.T) {
	needCgroups(t)
	for _, frozen := range []bool{false, true} {
		t.Run(fmt.Sprintf("frozen=%v", frozen), func(t *testing.T) {
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(self, "-test.run=^$")
			cmd.Env = append(os.Environ(), runnerEnv+"=1")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			sc := bufio.NewScanner(out)
			if !sc.Scan() {
				t.Fatal("the runner said nothing")
			}
			tag := sc.Text()
			// Wait for the job to run.
			deadline := time.Now().Add(10 * time.Second)
			for len(ownJobProcs(tag)) < 4 {
				if time.Now().After(deadline) {
					t.Fatalf("the runner's job did not start: %q", ownJobProcs(tag))
				}
				time.Sleep(20 * time.Millisecond)
			}
			if frozen && freezeOwnJobs(t, tag) == 0 {
				t.Fatal("no job cgroup to freeze")
			}
			// While the runner lives, its job is not the sweep's.
			reaped, err := kernel.SweepJobCgroups()
			if err != nil {
				t.Errorf("sweep: %v", err)
			}
			for _, r := range reaped {
				if strings.Contains(r, tag) {
					t.Fatalf("the sweep reaped %s, of a live runner", r)
				}
			}
			if len(kernel.JobCgroupDirs("job-"+tag)) == 0 || len(ownJobProcs(tag)) == 0 {
				t.Fatal("the sweep touched a live runner's job")
			}

			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
			if !frozen {
				// The wrapper dies with the runner (parent-death
				// signal), and its pid namespace with it, but nothing
				// removes the cgroup's directories.
				time.Sleep(200 * time.Millisecond)
			} else if len(ownJobProcs(tag)) == 0 && !kernel.CgroupUnified() {
				// (On v2 a fatal signal reaches a frozen task: the job
				// dies with its runner, and only its cgroup is left.)
				t.Fatal("a frozen job died with its runner: the case tests nothing")
			}
			if len(kernel.JobCgroupDirs("job-"+tag)) == 0 {
				t.Fatal("the killed runner left no cgroup: the case tests nothing")
			}
			if left, _ := filepath.Glob(filepath.Join(JobsDir(), "job-"+tag+"*")); len(left) == 0 {
				t.Fatal("the killed runner left no job dir: the case tests nothing")
			}
			reaped, err = sweepDeadRunners()
			if err != nil {
				t.Errorf("sweep: %v", err)
			}
			if !slices.ContainsFunc(reaped, func(r string) bool { return strings.Contains(r, tag) }) {
				t.Errorf("the sweep reaped %v, not the dead runner's job (%s)", reaped, tag)
			}
			assertNothingLeft(t, tag)
		})
	}
}
