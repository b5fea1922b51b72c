package native_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/host/ops"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
)

// buildWorker compiles testdata/pipeworker for this machine.
func buildWorker(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "pipeworker")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/pipeworker")
	cmd.Dir = testwasm.RepoRoot(t)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build pipeworker: %v\n%s", err, msg)
	}
	return out
}

// opsDispatcher runs the real op table against a real store, as the host
// does for WASM guests (without policy, which the host adds on top).
type opsDispatcher struct{ env *ops.Env }

func (d opsDispatcher) Dispatch(ctx context.Context, op, req []byte) ([]byte, error) {
	o, ok := ops.Lookup(op)
	if !ok {
		return nil, abi.Errorf(abi.CodeUnknownOp, "no op %q", op)
	}
	d.env.Context = ctx
	return ops.Dispatch(d.env, allowAll{}, o, req)
}

// allowAll is a policy gate that allows every op: these tests hold the
// transport, the host's gate is tested end to end in package host.
type allowAll struct{}

func (allowAll) AllowOp(*ops.Env, *ops.Op, string) error { return nil }

func newDispatcher(t *testing.T) opsDispatcher {
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	env := &ops.Env{Module: "pipeworker", Store: st, Logger: slog.New(slog.DiscardHandler)}
	env.Begin(context.Background(), "count", policy.Principal{User: "ann", Org: "acme"}, "c1")
	return opsDispatcher{env}
}

func supervise(t *testing.T, spec native.WorkerSpec) *native.Supervisor {
	t.Helper()
	spec.Name = "pipeworker"
	spec.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := native.Supervise(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSupervisorProtocolAndRestarts(t *testing.T) {
	bin := buildWorker(t)
	d := newDispatcher(t)
	s := supervise(t, native.WorkerSpec{Command: []string{bin}, HealthInterval: 100 * time.Millisecond})
	ctx := context.Background()
	invoke := func(action, input string, timeout time.Duration) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		out, err := s.Invoke(cctx, d, action, []byte(input), "corr")
		return string(out), err
	}
	if got := strings.Join(s.Actions(), ","); got != "echo,count,fail,crash,hang,garbage,hog" {
		t.Fatalf("actions %s", got)
	}
	if out, err := invoke("echo", "hi", time.Second); err != nil || out != "hi" {
		t.Fatalf("echo: %q %v", out, err)
	}
	// Ops from a native worker reach the real op table and store.
	for want := 1; want <= 3; want++ {
		if out, err := invoke("count", "", time.Second); err != nil || out != string(rune('0'+want)) {
			t.Fatalf("count: %q %v", out, err)
		}
	}
	pid := s.Pid()
	var ae *abi.Error
	if _, err := invoke("fail", "", time.Second); !errors.As(err, &ae) || ae.Code != abi.CodeGuestError || s.Pid() != pid {
		t.Fatalf("fail: %v (pid %d→%d)", err, pid, s.Pid())
	}

	tests := []struct {
		action string
		want   string
	}{
		{"crash", "exited during the call (exit status 3)"},
		{"hang", "context deadline exceeded"},
		{"garbage", "malformed line"},
	}
	for _, tt := range tests {
		t.Run(tt.action, func(t *testing.T) {
			var before int
			waitFor(t, "a running worker", func() bool { before = s.Pid(); return before > 0 })
			if _, err := invoke(tt.action, "", 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
			waitFor(t, "a new worker", func() bool { p := s.Pid(); return p != 0 && p != before })
			if out, err := invoke("echo", "back", time.Second); err != nil || out != "back" {
				t.Fatalf("after %s: %q %v", tt.action, out, err)
			}
			if syscall.Kill(before, 0) == nil {
				t.Fatalf("the old worker %d is still alive", before)
			}
		})
	}
	// A worker killed from outside is noticed and replaced. Pid is 0 while
	// a worker restarts, and kill(0, SIGKILL) would end this test's whole
	// process group (go test, make, CI): wait for a real pid first.
	var before int
	waitFor(t, "a running worker", func() bool { before = s.Pid(); return before > 0 })
	if err := syscall.Kill(before, syscall.SIGKILL); err != nil {
		t.Fatalf("kill worker %d: %v", before, err)
	}
	waitFor(t, "a replacement", func() bool { p := s.Pid(); return p != 0 && p != before })
}

// TestSupervisorGivesUp: a worker that keeps crashing is not restarted
// forever; the error says so.
func TestSupervisorGivesUp(t *testing.T) {
	bin := buildWorker(t)
	d := newDispatcher(t)
	s := supervise(t, native.WorkerSpec{Command: []string{bin}, MaxRestarts: 2, RestartWindow: time.Minute})
	var err error
	waitFor(t, "the supervisor to give up", func() bool {
		_, err = s.Invoke(context.Background(), d, "crash", nil, "")
		return errors.Is(err, native.ErrGaveUp)
	})
	if !strings.Contains(err.Error(), "2 restarts within 1m0s") {
		t.Fatalf("%v", err)
	}
}

func TestSupervisorBadWorker(t *testing.T) {
	for _, tt := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"/bin/false"}, "exited before saying ready (exit status 1)"},
		{[]string{"/nonexistent/worker"}, "no such file or directory"},
	} {
		_, err := native.Supervise(context.Background(), native.WorkerSpec{Name: "bad", Command: tt.cmd, StartTimeout: 2 * time.Second,
			Logger: slog.New(slog.DiscardHandler)})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: got %v, want %q", tt.cmd, err, tt.want)
		}
	}
}

// TestSupervisorConfined: a supervised worker runs under the kernel layers
// (its own cgroup, the job uid), keeps serving ops through the pipe
// transport, is restarted confined after a crash, and leaves nothing behind.
func TestSupervisorConfined(t *testing.T) {
	testenv.Root(t, "the confined worker test checks the uid switch and cgroup, which need root; CI runs as root")
	bin := buildWorker(t)
	// The job uid must be able to reach and run the binary.
	dir, err := os.MkdirTemp("", "moat-worker")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	exe := filepath.Join(dir, "pipeworker")
	b, _ := os.ReadFile(bin)
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	d := newDispatcher(t)
	denials := make(chan string, 8)
	s := supervise(t, native.WorkerSpec{Command: []string{exe}, Launch: native.ConfinedLauncher(native.Spec{MemoryBytes: 128 << 20}),
		OnDenial: func(d native.Denial, corr string) { denials <- corr + " " + d.Rule }})
	if out, err := s.Invoke(context.Background(), d, "count", nil, ""); err != nil || string(out) != "1" {
		t.Fatalf("count: %q %v", out, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Pid()))
	if err != nil || !strings.Contains(string(status), fmt.Sprintf("Uid:\t%d", native.UIDBase/100000)) {
		t.Fatalf("the worker does not run as a leased uid (native.UIDBase...):\n%s", status)
	}
	// The memory cgroup of each worker this test sees; all must be gone at
	// the end (other jobs on the machine may have their own meanwhile).
	var cgroups []string
	memCgroup := func() {
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", s.Pid()))
		_, after, ok := strings.Cut(string(cg), ":memory:/moat/job-")
		if !ok {
			t.Fatalf("the worker is not in a job cgroup:\n%s", cg)
		}
		name, _, _ := strings.Cut(after, "\n")
		cgroups = append(cgroups, "/sys/fs/cgroup/memory/moat/job-"+name)
	}
	memCgroup()
	before := s.Pid()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := s.Invoke(ctx, d, "crash", nil, ""); err == nil {
		t.Fatal("crash did not fail")
	}
	waitFor(t, "a confined replacement", func() bool { p := s.Pid(); return p != 0 && p != before })
	memCgroup()
	if out, err := s.Invoke(context.Background(), d, "count", nil, ""); err != nil || string(out) != "2" {
		t.Fatalf("count after restart: %q %v", out, err)
	}
	// A worker OOM-killed at its cgroup limit during a call is a kernel
	// denial, audited with the call's correlation id.
	before = s.Pid()
	hctx, hcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer hcancel()
	if _, err := s.Invoke(hctx, d, "hog", nil, "corr-hog"); err == nil {
		t.Fatal("hog did not fail")
	}
	select {
	case got := <-denials:
		if got != "corr-hog kernel: cgroup memory limit" {
			t.Fatalf("denial %q, want the memory limit correlated with corr-hog", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no denial reported for the OOM kill")
	}
	waitFor(t, "a confined replacement", func() bool { p := s.Pid(); return p != 0 && p != before })
	memCgroup()
	s.Close()
	for _, dir := range cgroups {
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("job cgroup left behind: %s", dir)
		}
	}
}
