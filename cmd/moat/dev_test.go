package main_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestDev: moat dev builds and runs a C plugin, then after an edit of its
// source rebuilds it and runs it again, and stops on an interrupt.
func TestDev(t *testing.T) {
	testenv.Require(t, langMissing("c"))
	work := t.TempDir()
	if r := moatIn(t, work, "new", "live", "--lang", "c"); r.code != 0 {
		t.Fatalf("new: exit %d: %s", r.code, r.stderr)
	}
	data := filepath.Join(work, "data")
	cmd := exec.Command(moatBin, "dev", "live", "greet", "--input", "World", "--data", data, "--interval", "100ms")
	cmd.Dir = work
	var out, errb lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-done
		}
	}()
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for !strings.Contains(out.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in moat dev's output after 2 minutes:\nstdout:\n%s\nstderr:\n%s", want, out.String(), errb.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("Hello, World! (call #1)")
	src := filepath.Join(work, "live", "main.c")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(b, []byte(`"%s, %s! (call #%ld)"`), []byte(`"%s, %s!! (call #%ld)"`), 1)
	if bytes.Equal(edited, b) {
		t.Fatal("the C template's greeting format changed: update this test")
	}
	time.Sleep(20 * time.Millisecond) // a modification time after the module's
	if err := os.WriteFile(src, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor("Hello, World!! (call #2)")
	if !strings.Contains(errb.String(), "live changed") {
		t.Errorf("moat dev did not say what changed:\n%s", errb.String())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("moat dev after an interrupt: %v\n%s", err, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("moat dev did not stop on an interrupt")
	}
}
