package main_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/internal/proctest"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy/kernel"
)

// Issue 27 (14, 15, 16) through the binary: whatever ends a job (its
// compile timeout, a signal to moat, moat serve's shutdown), nothing of
// it is left once moat has exited: no process, no cgroup directory in any
// hierarchy, no job dir. Only jobs whose runner is gone and that were not
// there before the test are counted: another moat on the machine may run
// jobs of its own meanwhile (and those carry their live runner's name).

// jobLeftovers lists the job cgroup directories, job dirs and job
// processes of runners that are gone.
func jobLeftovers() map[string]bool {
	out := map[string]bool{}
	dead := func(name string) bool {
		gone, named := kernel.JobRunnerGone(name)
		return named && gone
	}
	for _, d := range kernel.JobCgroupDirs("job-") {
		if dead(filepath.Base(d)) {
			out[d] = true
		}
	}
	jobDirs, _ := filepath.Glob(filepath.Join(native.JobsDir(), "job-*"))
	for _, d := range jobDirs {
		if dead(filepath.Base(d)) {
			out[d] = true
		}
	}
	for _, p := range proctest.List() {
		for _, line := range p.Cgroups {
			_, after, ok := strings.Cut(line, "/"+kernel.CgroupParent+"/")
			if ok && dead(after) {
				out["process "+p.Stat()+" in "+after] = true
				break
			}
		}
	}
	return out
}

// assertNoNewLeftovers fails for each leftover not in before.
func assertNoNewLeftovers(t *testing.T, before map[string]bool) {
	t.Helper()
	for l := range jobLeftovers() {
		if !before[l] {
			t.Errorf("left behind: %s", l)
		}
	}
}

// cppBomb is C whose preprocessing never ends: 2^32 tokens.
func cppBomb(nonce string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "/* %s */\n#define A0 x x\n", nonce)
	for i := 1; i <= 31; i++ {
		fmt.Fprintf(&b, "#define A%d A%d A%d\n", i, i-1, i-1)
	}
	b.WriteString("int main(void) { A31; return 0; }\n")
	return b.String()
}

func needRootCgroups(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Require(t, "needs root: job cgroups (CI runs as root)")
	}
}

// TestExecCompileBombLeavesNothing: moat exec --lang c --compile-timeout
// 3s of a preprocessor bomb reports the timeout, and once it has exited
// neither clang nor its cgroup is left, run after run (it once left clang
// frozen in its cgroup in 4 of 5 runs).
func TestExecCompileBombLeavesNothing(t *testing.T) {
	needRootCgroups(t)
	testenv.Require(t, langMissing("c"))
	testenv.Timing(t)
	data := t.TempDir()
	before := jobLeftovers()
	for run := range 3 {
		src := filepath.Join(t.TempDir(), "main.c")
		os.WriteFile(src, []byte(cppBomb(fmt.Sprintf("%s-%d-%d", t.Name(), run, time.Now().UnixNano()))), 0o644)
		began := time.Now()
		r := moat(t, "", "exec", "--data", data, "--lang", "c", "--compile-timeout", "3s", src)
		if r.code != 124 || !strings.Contains(r.stderr, "status=timeout") {
			t.Errorf("run %d: exit %d, stderr %q: want 124 and status=timeout", run, r.code, r.stderr)
		}
		if took := time.Since(began); took > 20*time.Second {
			t.Errorf("run %d took %s", run, took)
		}
		assertNoNewLeftovers(t, before)
	}
}

// TestExecSignalLeavesNothing: SIGINT or SIGTERM to moat exec (to it
// alone, or to its whole process group as a terminal's Ctrl-C does) in the
// middle of a job ends the job, and nothing of it is left once moat has
// exited.
func TestExecSignalLeavesNothing(t *testing.T) {
	needRootCgroups(t)
	const forkSleep = `for i in 1 2 3 4 5 6 7 8; do (sleep 300 & sleep 300) & done; echo started; sleep 300`
	cases := []struct {
		name  string
		args  []string
		sig   syscall.Signal
		group bool
		after time.Duration
		needC bool
	}{
		{"native-sigterm", []string{"--native", "--timeout", "60s", "--allow-exec", "/usr/bin/sleep", "--", "sh", "-c", forkSleep}, syscall.SIGTERM, false, time.Second, false},
		{"native-sigint-group", []string{"--native", "--timeout", "60s", "--allow-exec", "/usr/bin/sleep", "--", "sh", "-c", forkSleep}, syscall.SIGINT, true, time.Second, false},
		{"bash-sigterm-group", []string{"--lang", "bash", "--timeout", "60s", "-e", forkSleep}, syscall.SIGTERM, true, 1500 * time.Millisecond, false},
		{"c-bomb-sigint-group", []string{"--lang", "c", "--compile-timeout", "60s"}, syscall.SIGINT, true, 2 * time.Second, true},
	}
	data := t.TempDir()
	before := jobLeftovers()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"exec", "--data", data}, c.args...)
			if c.needC {
				testenv.Require(t, langMissing("c"))
				src := filepath.Join(t.TempDir(), "main.c")
				os.WriteFile(src, []byte(cppBomb(fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()))), 0o644)
				args = append(args, src)
			}
			cmd := exec.Command(moatBin, args...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			time.Sleep(c.after)
			pid := cmd.Process.Pid
			if c.group {
				pid = -pid
			}
			if err := syscall.Kill(pid, c.sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("moat exec did not exit 30s after %s:\n%s", c.sig, out.String())
			}
			if cmd.ProcessState.Success() {
				t.Errorf("moat exec succeeded after %s:\n%s", c.sig, out.String())
			}
			assertNoNewLeftovers(t, before)
		})
	}
}

// TestServeSIGTERMLeavesNothing: SIGTERM to moat serve's process group
// (systemd's stop, docker stop, Ctrl-C) while a native run is in flight:
// the server drains the run, no child of it is a zombie meanwhile (its
// launcher died of the signal and stayed one), and once it has exited
// nothing of its jobs or helpers is left.
func TestServeSIGTERMLeavesNothing(t *testing.T) {
	testenv.Slow(t, "a confined moat serve with native jobs; host/native's job-end tests keep the kill")
	testenv.Timing(t)
	needRootCgroups(t)
	data := t.TempDir()
	key := strings.TrimSpace(moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "ann", "--role", "admin").stdout)
	before := jobLeftovers()
	cmd := exec.Command(moatBin, "serve", "--data", data, "--listen", "127.0.0.1:0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var rest lockedBuffer
	base := startServeCmd(t, cmd, &rest)
	pid := cmd.Process.Pid
	helpers := proctest.Children(pid)
	if len(helpers) == 0 {
		t.Fatal("moat serve has no helper process (launcher, backstop watcher): the case tests nothing")
	}

	type reply struct {
		code int
		out  string
		err  error
	}
	ran := make(chan reply, 1)
	go func() {
		run := `{"language":"bash","files":[{"name":"main.sh","content":"for i in 1 2 3; do (sleep 300 &) ; done; sleep 2; echo drained"}]}`
		req, _ := http.NewRequestWithContext(context.Background(), "POST", base+"/v1/runs", strings.NewReader(run))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		res, err := (&http.Client{Timeout: 40 * time.Second}).Do(req)
		if err != nil {
			ran <- reply{err: err}
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		ran <- reply{res.StatusCode, string(b), err}
	}()
	time.Sleep(time.Second)
	if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	// A child is a zombie for the moment between its exit and its
	// reaping; one that stays so for a second is not being reaped.
	zombieSince := map[int]time.Time{}
	zombies := map[int]string{}
	deadline := time.After(40 * time.Second)
wait:
	for {
		select {
		case <-exited:
			break wait
		case <-deadline:
			t.Fatalf("moat serve did not exit 40s after SIGTERM:\n%s", rest.String())
		case <-time.After(20 * time.Millisecond):
		}
		for _, c := range proctest.Children(pid) {
			if p := (proctest.Process{PID: c}); p.Zombie() {
				if _, ok := zombieSince[c]; !ok {
					zombieSince[c] = time.Now()
				} else if time.Since(zombieSince[c]) > time.Second {
					zombies[c] = p.Stat()
				}
			}
		}
	}
	if len(zombies) > 0 {
		t.Errorf("moat serve had zombie children while it shut down: %v", zombies)
	}
	r := <-ran
	if r.err != nil || r.code != 200 || !strings.Contains(r.out, "drained") {
		t.Errorf("the run in flight at SIGTERM: %d %q %v", r.code, r.out, r.err)
	}
	// The backstop watcher reports after the server is gone: a moment.
	for _, h := range helpers {
		for i := 0; syscall.Kill(h, 0) == nil; i++ {
			if i == 250 {
				st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", h))
				t.Errorf("a helper of moat serve outlived it by 5s: %s", st)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	assertNoNewLeftovers(t, before)
}

// TestExecKill9ThenSweep: moat exec killed with SIGKILL mid-job cannot
// clean up: its job's cgroup (and job dir) stay, in every hierarchy. The
// next moat exec sweeps them (their runner is gone) before its own job.
func TestExecKill9ThenSweep(t *testing.T) {
	needRootCgroups(t)
	data := t.TempDir()
	before := jobLeftovers()
	cmd := exec.Command(moatBin, "exec", "--data", data, "--native", "--timeout", "60s", "--allow-exec", "/usr/bin/sleep", "--",
		"sh", "-c", "for i in 1 2 3 4; do (sleep 300 & sleep 300) & done; sleep 300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("job-%d-", cmd.Process.Pid)
	deadline := time.Now().Add(15 * time.Second)
	for len(kernel.JobCgroupDirs(tag)) == 0 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("moat exec made no job cgroup")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	time.Sleep(300 * time.Millisecond)
	left := 0
	for l := range jobLeftovers() {
		if !before[l] && strings.Contains(l, tag) {
			left++
		}
	}
	if left == 0 {
		t.Fatal("the killed moat exec left nothing: the case tests nothing")
	}
	if r := moat(t, "", "exec", "--data", data, "--native", "--", "true"); r.code != 0 {
		t.Fatalf("the next moat exec: %+v", r)
	}
	assertNoNewLeftovers(t, before)
}
