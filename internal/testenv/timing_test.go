package testenv_test

import (
	"bufio"
	"os"
	"os/exec"
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
func TestTimingExcludesProcesses(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // a lock of this test's own: none of the suite's timing tests wait on it
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
			if _, err := os.Stat(tmp + "/" + testenv.TimingLockName); err != nil {
				t.Fatalf("the lock file is not in TMPDIR: %v", err)
			}
		})
	}
}
