package main_test

import (
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestExecOnceLine: "preparing python (compiling it to machine code,
// once)" is said by the run that compiles, and by no later run of the
// machine: a second `moat exec --lang python` reads the code from the
// compilation cache and prints no "once" line. MOAT_PREPARING_AFTER=0
// shows every step the executor reports, however fast, so a run that
// reports a load the cache answers fails here instead of hiding under
// the one-second threshold.
func TestExecOnceLine(t *testing.T) {
	testenv.Slow(t, "three runs, the first compiling python.wasm into a cold cache (45 s of make check under load)")
	noSharedCache(t)
	t.Setenv("MOAT_PREPARING_AFTER", "0s")
	data := t.TempDir()
	for i := range 3 {
		r := moat(t, "", "exec", "--data", data, "--lang", "python", "-e", "print(6*7)")
		if r.code != 0 && strings.Contains(r.stderr, "moat toolchains install") {
			testenv.Require(t, "the python toolchain is not installed: "+r.stderr)
		}
		if r.code != 0 || strings.TrimSpace(r.stdout) != "42" {
			t.Fatalf("run %d: exit %d, stdout %q, stderr %s", i+1, r.code, r.stdout, r.stderr)
		}
		once := strings.Contains(r.stderr, "once)")
		switch {
		case i == 0 && !once:
			t.Errorf("first run (fresh cache) said nothing of compiling python once:\n%s", r.stderr)
		case i > 0 && once:
			t.Errorf("run %d (warm cache) claims first-time work:\n%s", i+1, r.stderr)
		}
	}
}
