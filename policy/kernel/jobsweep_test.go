package kernel

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

func needV1Root(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Require(t, "needs root: job cgroups")
	}
	if CgroupUnified() {
		t.Skip("a v1 case (the freezer hierarchy); the v2 kill is cgroup.kill")
	}
}

// TestKillSurvivorIsAnError: a member that outlives SIGKILL (here: held
// frozen by a freezer cgroup that is not the job's, as a task stuck in the
// kernel would be) makes Kill and Destroy fail with a *SurvivorsError
// naming it, after the bounded wait: never a silent success.
func TestKillSurvivorIsAnError(t *testing.T) {
	needV1Root(t)
	defer func(d time.Duration) { killWait = d }(killWait)
	killWait = 300 * time.Millisecond
	cg, err := NewJobCgroup(JobCgroupName("job", "survivor"), JobLimits{})
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Destroy()
	sleeper := exec.Command("/bin/sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	if err := cg.Add(sleeper.Process.Pid); err != nil {
		t.Fatal(err)
	}
	// Into a frozen freezer cgroup of its own: the job's freezer no
	// longer holds it, its memory and pids cgroups still do.
	mounts, _ := v1Mounts()
	foreign := filepath.Join(mounts["freezer"], CgroupParent, "foreign-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = writeFile(foreign, "freezer.state", "THAWED")
		for i := 0; i < 500 && os.Remove(foreign) != nil; i++ {
			time.Sleep(5 * time.Millisecond)
		}
	}()
	if err := writeFile(foreign, "cgroup.procs", strconv.Itoa(sleeper.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(foreign, "freezer.state", "FROZEN"); err != nil {
		t.Fatal(err)
	}
	err = cg.Kill()
	var se *SurvivorsError
	if !errors.As(err, &se) || len(se.Pids) != 1 || se.Pids[0] != sleeper.Process.Pid || !strings.Contains(err.Error(), "still alive") {
		t.Fatalf("Kill: %v; want a SurvivorsError naming pid %d", err, sleeper.Process.Pid)
	}
	if err := cg.Destroy(); !errors.As(err, &se) {
		t.Fatalf("Destroy: %v; want a SurvivorsError", err)
	}
	// Once it can die, it does (reaped here: it is this test's child), and
	// the cgroup goes.
	_ = writeFile(foreign, "freezer.state", "THAWED")
	_ = sleeper.Wait()
	if err := cg.Destroy(); err != nil {
		t.Fatalf("Destroy after the thaw: %v", err)
	}
	if left := JobCgroupDirs("job-" + OwnJobCgroupTag() + "survivor"); len(left) > 0 {
		t.Fatalf("left: %v", left)
	}
}

// TestJobCgroupNames: a job cgroup's name carries its runner; the names of
// an older moat (no runner) and of other kinds are not a runner's.
func TestJobCgroupNames(t *testing.T) {
	name := JobCgroupName("job", "abc123")
	if !strings.HasPrefix(name, "job-"+strconv.Itoa(os.Getpid())+"-") || !strings.HasSuffix(name, "-abc123") {
		t.Fatalf("JobCgroupName = %q", name)
	}
	if gone, named := JobRunnerGone(name); !named || gone {
		t.Fatalf("this process's job: gone %v named %v", gone, named)
	}
	for _, tt := range []struct {
		name        string
		named, gone bool
	}{
		{"job-0123456789abcdef", false, false},
		{"warm-" + strconv.Itoa(os.Getpid()) + "-1-x", true, true}, // this pid, another start: a process that reused it is not the runner
		{"host-1-2", false, false},
		{"job-999999999-5-x", true, true},
		{"job--5-5-x", false, false},
	} {
		gone, named := JobRunnerGone(tt.name)
		if named != tt.named || (named && gone != tt.gone) {
			t.Errorf("JobRunnerGone(%q) = gone %v named %v; want %v %v", tt.name, gone, named, tt.gone, tt.named)
		}
	}
}
