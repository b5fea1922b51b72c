package native

import (
	"bytes"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a buffer a job's output goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestProcess: a started job reads its stdin pipe as it is written,
// its output reaches the writers as it is produced (before it ends), it
// runs under the layers a Run has, and Wait reports it once its cgroup is
// gone.
func TestProcess(t *testing.T) {
	var out, errb syncBuffer
	p, err := Start(Spec{Command: []string{"sh", "-c", `while read l; do echo "got $l"; done; echo bye >&2`}, Timeout: 20 * time.Second},
		Stdio{Stdin: true, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	cgroups := p.CgroupDirs()
	if _, err := p.Write([]byte("one\n")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for out.String() != "got one\n" {
		if time.Now().After(deadline) {
			t.Fatalf("no output while the job runs: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := p.Write([]byte("two\n")); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusOK || out.String() != "got one\ngot two\n" || errb.String() != "bye\n" {
		t.Fatalf("%s %q %q", res.Status, out.String(), errb.String())
	}
	if !slices.Equal(res.Layers, wantLayers()) {
		t.Errorf("layers %v, want %v", res.Layers, wantLayers())
	}
	for _, d := range cgroups {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left after Wait: %v", d, err)
		}
	}
}

// TestProcessSignals: the first process of the job's pid namespace takes
// a signal it handles (SIGTERM to a trap), Kill ends the job and its
// children, and a signal to an ended job is an error.
func TestProcessSignals(t *testing.T) {
	var out syncBuffer
	p, err := Start(Spec{Command: []string{"sh", "-c", `trap 'echo term; exit 5' TERM; echo ready; while :; do sleep 0.05; done`}, ExtraExec: []string{"/usr/bin/sleep"}, Timeout: 20 * time.Second}, Stdio{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	for out.String() != "ready\n" {
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	res, _ := p.Wait()
	if res == nil || res.ExitCode != 5 || out.String() != "ready\nterm\n" {
		t.Fatalf("SIGTERM: %+v %q", res, out.String())
	}
	if err := p.Signal(syscall.SIGTERM); err == nil {
		t.Error("a signal to an ended job: no error")
	}

	p, err = Start(Spec{Command: []string{"sh", "-c", `sleep 60 & sleep 60`}, ExtraExec: []string{"/usr/bin/sleep"}, Timeout: 20 * time.Second}, Stdio{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	began := time.Now()
	p.Kill()
	res, err = p.Wait()
	if err != nil || res.Status != StatusKilled || time.Since(began) > 5*time.Second {
		t.Fatalf("Kill: %+v %v after %v", res, err, time.Since(began))
	}
}

// TestProcessThroughLauncher: a Process a confined host starts goes
// through its launcher: the pipes reach the job, a signal the job handles
// reaches it, the output arrives as written, Kill ends it, and its end
// comes back with the exit code.
func TestProcessThroughLauncher(t *testing.T) {
	l, err := StartLauncher()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := func(spec Spec, out *syncBuffer) (*Process, *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		p, err := l.startProcess(spec, r, out, out)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		p.stdin = w
		return p, w
	}
	var out syncBuffer
	p, _ := start(Spec{Command: []string{"sh", "-c", `trap 'echo term; exit 5' TERM; read l; echo "got $l"; while :; do read x || :; done`}, Timeout: 20 * time.Second}, &out)
	if _, err := p.Write([]byte("one\n")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); out.String() != "got one\n"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no output through the launcher: %q", out.String())
		}
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait()
	if err != nil || res.ExitCode != 5 || out.String() != "got one\nterm\n" {
		t.Fatalf("SIGTERM through the launcher: %+v %v %q", res, err, out.String())
	}

	var out2 syncBuffer
	p, _ = start(Spec{Command: []string{"sh", "-c", `sleep 60`}, ExtraExec: []string{"/usr/bin/sleep"}, Timeout: 20 * time.Second}, &out2)
	time.Sleep(100 * time.Millisecond)
	p.Kill()
	if res, err = p.Wait(); err != nil || res.ExitCode != -1 {
		t.Fatalf("Kill through the launcher: %+v %v", res, err)
	}
	p, _ = start(Spec{Command: []string{"sh", "-c", `sleep 60`}, ExtraExec: []string{"/usr/bin/sleep"}, Timeout: time.Second}, &out2)
	if res, err = p.Wait(); err != nil || res.Status != StatusTimeout {
		t.Fatalf("the timeout through the launcher: %+v %v", res, err)
	}
}
