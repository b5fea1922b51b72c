package native

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/policy/kernel"
)

const confinedHostEnv = "MOAT_TEST_CONFINED_HOST"

// TestLauncherServesAConfinedHost: a host that started its launcher and
// then confined itself (seccomp without execve, Landlock) cannot start a
// process, yet still runs confined native jobs through the launcher. The
// host side runs in a child process, since confinement cannot be undone.
func TestLauncherServesAConfinedHost(t *testing.T) {
	if os.Getenv(confinedHostEnv) != "" {
		t.Skip("this is the helper process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestConfinedHostHelper$", "-test.v")
	// The confined helper may not remove its own temp dir (Landlock denies
	// /tmp itself), so the dir is made and removed here.
	cmd.Env = append(os.Environ(), confinedHostEnv+"="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CONFINED-HOST-OK") {
		t.Fatalf("helper: %v\n%s", err, out)
	}
}

func TestConfinedHostHelper(t *testing.T) {
	if os.Getenv(confinedHostEnv) == "" {
		t.Skip("run by TestLauncherServesAConfinedHost")
	}
	l, err := StartLauncher()
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
	res, err := l.Run(ctx, Spec{Command: []string{"sh", "-c", "echo launched; cat /etc/shadow"}, ExtraExec: []string{"/usr/bin/cat"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "launched\n" || !strings.Contains(string(res.Stderr), "Permission denied") || !strings.Contains(strings.Join(res.Layers, ","), "landlock") {
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
	if err := l.Close(); err != nil {
		t.Logf("launcher exit: %v", err)
	}
	t.Log("CONFINED-HOST-OK")
}
