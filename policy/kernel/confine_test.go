package kernel

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// The package has no TestMain of its own (probe_test.go may add one), so the
// wrapper runs through TestConfineHelper: the test binary re-runs itself
// with -test.run=^TestConfineHelper$ and MOAT_CONFINE set.
func TestConfineHelper(t *testing.T) {
	if os.Getenv(ConfineEnv) == "" {
		t.Skip("the confinement wrapper, run by the other tests")
	}
	ConfineMain() // never returns
}

// confined runs spec through the wrapper (no namespaces, no uid switch) and
// returns stdout, stderr and the exit code.
func confined(t *testing.T, spec ConfineSpec) (string, string, int) {
	t.Helper()
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/proc/self/exe", "-test.run=^TestConfineHelper$")
	cmd.Env = []string{ConfineEnv + "=" + string(js)}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func TestConfineMainReturnsWithoutEnv(t *testing.T) {
	if os.Getenv(ConfineEnv) != "" {
		t.Skip("inside the wrapper")
	}
	ConfineMain() // must return at once
}

func TestConfineRefusesBadSpec(t *testing.T) {
	cases := []struct {
		name string
		spec ConfineSpec
		want string
	}{
		{"no-such-target", ConfineSpec{Path: "/nonexistent/bin", Args: []string{"x"}}, "moat-confine: exec /nonexistent/bin: no such file or directory"},
		{"bad-dir", ConfineSpec{Path: "/usr/bin/true", Args: []string{"true"}, Dir: "/nonexistent"}, "moat-confine: chdir"},
		{"bad-cgroup", ConfineSpec{Path: "/usr/bin/true", Args: []string{"true"}, CgroupProcs: []string{"/nonexistent/cgroup.procs"}}, "moat-confine: cgroup: join"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := confined(t, c.spec)
			if code != ConfineExitCode || !strings.HasPrefix(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("exit %d stderr %q, want %d and one line starting %q", code, stderr, ConfineExitCode, c.want)
			}
		})
	}
}

func TestConfineLayers(t *testing.T) {
	if abi, err := LandlockABI(); err != nil || abi < 4 {
		t.Skipf("Landlock ABI %d (%v): this test needs ABI 4+", abi, err)
	}
	if !SeccompSupported() {
		t.Skip("no seccomp")
	}
	job := t.TempDir()
	script := `
ulimit -n; ulimit -c
echo data > f && cat f
cat /etc/passwd 2>/dev/null || echo passwd-denied
cat /usr/share/common-licenses/GPL-3 >/dev/null && echo usr-readable
echo x > /usr/moat-test 2>/dev/null || echo usr-readonly
cp /usr/bin/true ./t && (./t 2>/dev/null && echo jobdir-exec || echo jobdir-noexec)
unshare -r true 2>/dev/null || echo unshare-denied
`
	filters, err := ChildFilters()
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := confined(t, ConfineSpec{
		Path: "/usr/bin/sh", Args: []string{"sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: job,
		Rlimits:  Rlimits{OpenFiles: 32},
		FS:       ChildFS{Target: "/usr/bin/sh", ExtraExec: []string{"/usr/bin/cat", "/usr/bin/cp", "/usr/bin/unshare", "/usr/bin/true"}, ReadWrite: []string{job}},
		Landlock: true, Seccomp: true, SeccompFilters: filters,
	})
	want := "32\n0\ndata\npasswd-denied\nusr-readable\nusr-readonly\njobdir-noexec\nunshare-denied\n"
	if code != 0 || stdout != want {
		t.Errorf("exit %d stdout %q stderr %q, want 0 and %q", code, stdout, stderr, want)
	}
}

func TestSeccompPoliciesAssemble(t *testing.T) {
	for _, deny := range [][]string{ChildDenyList, HostDenyList} {
		if _, err := Assemble(FilterRules(deny)); err != nil {
			t.Errorf("%v (a syscall name unknown on this architecture?)", err)
		}
	}
	for _, s := range []string{"execve", "execveat"} {
		if slices.Contains(ChildDenyList, s) || !slices.Contains(HostDenyList, s) {
			t.Errorf("%s: want it in HostDenyList only", s)
		}
	}
	if len(HostDenyList) != len(ChildDenyList)+2 {
		t.Errorf("HostDenyList has %d entries, want ChildDenyList (%d) + 2", len(HostDenyList), len(ChildDenyList))
	}
}

func TestCgroupLifecycle(t *testing.T) {
	testenv.Root(t, "needs root to create cgroups")
	cg, err := NewJobCgroup("test-"+strings.ReplaceAll(t.Name(), "/", "-"), JobLimits{MemoryBytes: 32 << 20, CPUQuota: 0.5, Pids: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Destroy()
	files := cg.ProcsFiles()
	if len(files) == 0 {
		t.Fatal("no cgroup.procs files")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "read _; for i in 1 2 3 4 5 6 7 8 9 10; do sleep 30 & done; wait")
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := cg.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("\n"))
	w.Close()
	deadline := time.Now().Add(3 * time.Second)
	for {
		_, _, pidsHit, _ := cg.Stats()
		if pidsHit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pids limit never hit; pids %v", cg.Pids())
		}
		time.Sleep(10 * time.Millisecond)
	}
	members := cg.Pids()
	if n := len(members); n == 0 || n > 8 {
		t.Errorf("%d processes in the cgroup, want 1..8", n)
	}
	_ = cmd.Wait() // the shell gives up at the failed fork; its sleeps stay behind in the cgroup
	if err := cg.Destroy(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range members {
		if st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && !strings.Contains(string(st), ") Z ") {
			t.Errorf("member %d still running after Destroy: %s", pid, st)
		}
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Dir(f)); !os.IsNotExist(err) {
			t.Errorf("%s still exists after Destroy (%v)", filepath.Dir(f), err)
		}
	}
	if err := cg.Destroy(); err != nil {
		t.Errorf("second Destroy: %v, want nil (idempotent)", err)
	}
}

// TestPrimeCgroupAttach: priming moves this process nowhere (it writes
// itself into the cgroup it is in) and leaves the next attach cheap.
func TestPrimeCgroupAttach(t *testing.T) {
	testenv.Root(t, "needs root to write cgroup.procs")
	if CgroupUnified() {
		t.Skip("a pure cgroup v2 host: moat clones into the job cgroup, nothing to prime")
	}
	procs, ok := ownV1Procs("pids")
	if !ok {
		t.Fatal("no v1 pids hierarchy on a hybrid host")
	}
	b, err := os.ReadFile(procs)
	if err != nil {
		t.Fatalf("own cgroup.procs %s: %v", procs, err)
	}
	if !slices.Contains(strings.Fields(string(b)), strconv.Itoa(os.Getpid())) {
		t.Fatalf("%s does not list this process (%d)", procs, os.Getpid())
	}
	before, _ := os.ReadFile("/proc/self/cgroup")
	PrimeCgroupAttach()
	// The write runs in the background; a job cgroup's join right after
	// must not fail or wait on it for long.
	cg, err := NewJobCgroup("test-prime", JobLimits{Pids: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Destroy()
	time.Sleep(200 * time.Millisecond) // long past any grace period
	after, _ := os.ReadFile("/proc/self/cgroup")
	if !bytes.Equal(before, after) {
		t.Fatalf("priming moved the process:\nbefore %s\nafter %s", before, after)
	}
}
