package testenv_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestTimingHolder is the child of TestTimingExcludesProcesses: it takes
// the lock, says so, and holds it until its stdin closes or it is killed.
func TestTimingHolder(t *testing.T) {
	if os.Getenv("MOAT_TEST_TIMING_HOLDER") != "1" {
		t.Skip("the child of TestTimingExcludesProcesses")
	}
	testenv.Timing(t)
	os.Stdout.WriteString("locked\n")
	bufio.NewReader(os.Stdin).ReadString('\n')
}

// TestTimingExcludesProcesses: while another test binary holds the lock,
// Timing waits; it gets the lock once that process ends, however it ends
// (a clean exit, or SIGKILL, which leaves no chance to unlock).
//
// The lock is TMPDIR's moat-timing.lock, or the file MOAT_TIMING_LOCK
// names (make check's own run), and then only that one.
func TestTimingExcludesProcesses(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // a lock of this test's own: none of the suite's timing tests wait on it
	for _, c := range []struct{ name, env, lock string }{
		{"in TMPDIR", "", filepath.Join(tmp, testenv.TimingLockName)},
		{"named by " + testenv.EnvTimingLock, filepath.Join(t.TempDir(), "run.lock"), ""},
	} {
		if c.lock == "" {
			c.lock = c.env
		}
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(testenv.EnvTimingLock, c.env)
			os.Remove(filepath.Join(tmp, testenv.TimingLockName))
			timingExcludesProcesses(t, c.lock)
			if c.env != "" {
				if _, err := os.Stat(filepath.Join(tmp, testenv.TimingLockName)); err == nil {
					t.Errorf("with %s set, TMPDIR's lock was taken too", testenv.EnvTimingLock)
				}
			}
		})
	}
}

// timingExcludesProcesses: see TestTimingExcludesProcesses; lock is the
// file the lock must be on.
func timingExcludesProcesses(t *testing.T, lock string) {
	for _, end := range []string{"exit", "kill"} {
		t.Run(end, func(t *testing.T) {
			child := exec.Command(os.Args[0], "-test.run=^TestTimingHolder$", "-test.count=1")
			child.Env = append(os.Environ(), "MOAT_TEST_TIMING_HOLDER=1")
			stdin, err := child.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			out, err := child.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || line != "locked\n" {
				child.Process.Kill()
				child.Wait()
				t.Fatalf("holder said %q, %v", line, err)
			}
			got := make(chan struct{})
			go func() {
				// A subtest of its own: Timing's cleanup is when it ends.
				t.Run("waiter", func(t *testing.T) { testenv.Timing(t) })
				close(got)
			}()
			select {
			case <-got:
				t.Fatal("Timing returned while another process held the lock")
			case <-time.After(500 * time.Millisecond):
			}
			if end == "exit" {
				stdin.Close()
			} else {
				child.Process.Kill()
			}
			child.Wait()
			select {
			case <-got:
			case <-time.After(10 * time.Second):
				t.Fatalf("Timing still waits 10 s after the holder's %s", end)
			}
			if _, err := os.Stat(lock); err != nil {
				t.Fatalf("the lock file is not %s: %v", lock, err)
			}
		})
	}
}
