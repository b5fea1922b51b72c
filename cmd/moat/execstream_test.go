package main_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestExecStreams: `moat exec` writes a WASM run's output to the terminal
// as the program writes it, not at its end: a CPython program prints,
// sleeps a second and prints, and its first line reaches moat's stdout
// about a second before moat exits; the output is whole and once.
func TestExecStreams(t *testing.T) {
	testenv.Slow(t, "runs CPython and waits a second")
	dir := t.TempDir()
	src := filepath.Join(dir, "main.py")
	if err := os.WriteFile(src, []byte("import time\nprint('one', flush=True)\ntime.sleep(1)\nprint('two')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(moatBin, "exec", "--data", t.TempDir(), "--lang", "python", src)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	var first time.Time
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if first.IsZero() {
			first = time.Now()
		}
		lines = append(lines, sc.Text())
	}
	err = cmd.Wait()
	ended := time.Now()
	if err != nil {
		if strings.Contains(stderr.String(), "toolchains install") || strings.Contains(stderr.String(), "not installed") {
			testenv.Require(t, stderr.String())
		}
		t.Fatalf("%v: %s", err, stderr.String())
	}
	if strings.Join(lines, ",") != "one,two" {
		t.Fatalf("stdout %q; stderr %s", lines, stderr.String())
	}
	if gap := ended.Sub(first); gap < 700*time.Millisecond {
		t.Fatalf("the first line came %v before the end: not streamed", gap)
	}
}
