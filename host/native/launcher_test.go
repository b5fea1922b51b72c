package native

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy/kernel"
)

const (
	confinedHostEnv = "MOAT_TEST_CONFINED_HOST"
	pipeWorkerEnv   = "MOAT_TEST_PIPEWORKER"
)

// noOps answers every op call of a worker with unknown_op: the echo and
// crash actions used here make none.
type noOps struct{}

func (noOps) Dispatch(_ context.Context, op, _ []byte) ([]byte, error) {
	return nil, abi.Errorf(abi.CodeUnknownOp, "no op %q here", op)
}

// TestLauncherServesAConfinedHost: a host that started its launcher and
// then confined itself (seccomp without execve, Landlock) cannot start a
// process, yet still runs confined native jobs through the launcher. The
// host side runs in a child process, since confinement cannot be undone.
func TestLauncherServesAConfinedHost(t *testing.T) {
	testenv.Timing(t)
	if os.Getenv(confinedHostEnv) != "" {
		t.Skip("this is the helper process")
	}
	// The worker binary, where the job uid can reach and run it.
	bin, err := os.MkdirTemp("", "moat-worker")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bin)
	os.Chmod(bin, 0o755)
	worker := filepath.Join(bin, "pipeworker")
	build := exec.Command("go", "build", "-o", worker, "./testdata/pipeworker")
	build.Dir = testwasm.RepoRoot(t)
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build pipeworker: %v\n%s", err, msg)
	}
	warmBefore := warmCgroups()
	cmd := exec.Command(os.Args[0], "-test.run=^TestConfinedHostHelper$", "-test.v")
	// The confined helper may not remove its own temp dir (Landlock denies
	// /tmp itself), so the dir is made and removed here.
	cmd.Env = append(os.Environ(), confinedHostEnv+"="+t.TempDir(), pipeWorkerEnv+"="+worker)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CONFINED-HOST-OK") {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	// The launcher's warm wrappers went with it.
	assertNoNewWarmCgroups(t, warmBefore)
}

func TestConfinedHostHelper(t *testing.T) {
	if os.Getenv(confinedHostEnv) == "" {
		t.Skip("run by TestLauncherServesAConfinedHost")
	}
	l, err := StartWarmLauncher(1)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := kernel.ConfineHost(kernel.HostConfinement{Mode: kernel.ConfineStrict, ReadWrite: []string{os.Getenv(confinedHostEnv)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("host confined: %v", rep.Applied)
	if err := exec.Command("/bin/true").Run(); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("the confined host could exec: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The launcher keeps a wrapper warm: once it is ready, runs take it.
	var res *Result
	for i := 0; i < 100 && (res == nil || !res.Warm); i++ {
		time.Sleep(20 * time.Millisecond)
		if res, err = l.Run(ctx, Spec{Command: []string{"sh", "-c", "echo launched; cat /etc/shadow; /usr/bin/ls"}, ExtraExec: []string{"/usr/bin/cat"}}); err != nil {
			t.Fatal(err)
		}
	}
	if !res.Warm {
		t.Fatal("no run through the warm launcher took a warm wrapper")
	}
	if string(res.Stdout) != "launched\n" || !strings.Contains(string(res.Stderr), "No such file or directory") || !strings.Contains(string(res.Stderr), "ls: Permission denied") || !strings.Contains(strings.Join(res.Layers, ","), "landlock") {
		t.Fatalf("result: %+v", res)
	}
	// A job canceled through the launcher is killed.
	cctx, ccancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer ccancel()
	start := time.Now()
	res, err = l.Run(cctx, Spec{Command: []string{"sleep", "30"}, ExtraExec: []string{"/usr/bin/sleep"}})
	if took := time.Since(start); took > 5*time.Second || err == nil && res.Status != StatusKilled {
		t.Fatalf("cancel: after %s, err %v, result %+v; want the job killed promptly", took, err, res)
	}

	// A supervised worker started through the launcher: its pipe ends
	// travel to the launcher over SCM_RIGHTS, the transport runs host to
	// worker directly, and a crash is followed by a confined restart.
	s, err := Supervise(context.Background(), WorkerSpec{Name: "pipeworker", Command: []string{os.Getenv(pipeWorkerEnv)},
		Launch: l.Workers(Spec{MemoryBytes: 128 << 20}), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("supervise through the launcher: %v", err)
	}
	if out, err := s.Invoke(ctx, noOps{}, "echo", []byte("through the launcher"), "c1"); err != nil || string(out) != "through the launcher" {
		t.Fatalf("echo: %q %v", out, err)
	}
	pid := s.Pid()
	if os.Geteuid() == 0 {
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if !strings.Contains(string(status), "Uid:\t1600") {
			t.Fatalf("the launched worker does not run as a leased uid (native.UIDBase...):\n%s", status)
		}
	}
	if _, err := s.Invoke(ctx, noOps{}, "crash", nil, "c2"); err == nil {
		t.Fatal("crash did not fail")
	}
	deadline := time.Now().Add(10 * time.Second)
	for p := s.Pid(); p == 0 || p == pid; p = s.Pid() {
		if time.Now().After(deadline) {
			t.Fatal("no replacement worker through the launcher")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, err := s.Invoke(ctx, noOps{}, "echo", []byte("again"), "c3"); err != nil || string(out) != "again" {
		t.Fatalf("echo after restart: %q %v", out, err)
	}
	s.Close()
	if err := l.Close(); err != nil {
		t.Logf("launcher exit: %v", err)
	}
	t.Log("CONFINED-HOST-OK")
}
