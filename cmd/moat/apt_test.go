package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every apt-get moat or its Makefile runs waits for another apt's lock
// instead of failing at once ("Could not get lock
// /var/lib/dpkg/lock-frontend"): moat toolchains install through aptArgs,
// the Makefile and mk/*.mk through $(APT_GET). A new bare apt-get call in
// a recipe fails here.
func TestAptWaitsForLock(t *testing.T) {
	for _, args := range [][]string{{"install", "-y", "-q", "wabt"}, {"update", "-q"}} {
		got := aptArgs(args...)
		if !slices.Equal(got[:2], []string{"-o", "DPkg::Lock::Timeout=600"}) || !slices.Equal(got[2:], args) {
			t.Errorf("aptArgs(%q) = %q, want the lock wait first", args, got)
		}
	}
	files, _ := filepath.Glob(filepath.Join("..", "..", "mk", "*.mk"))
	files = append(files, filepath.Join("..", "..", "Makefile"))
	// apt-get as a command: at the start of a shell command, after sudo,
	// an env assignment, or a shell separator; not inside an echo's text.
	bare := regexp.MustCompile(`(^|[;&|{(]\s*|\b(?:then|else|do)\s+|sudo\s+|=\S*\s+)apt-get\s+(install|update|download|upgrade|remove)`)
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			code := strings.TrimSpace(line)
			if strings.HasPrefix(code, "#") || strings.HasPrefix(code, "APT_GET :=") {
				continue
			}
			code = regexp.MustCompile(`echo "[^"]*"`).ReplaceAllString(code, "")
			if bare.MatchString(code) {
				t.Errorf("%s:%d runs apt-get without the lock wait; use $(APT_GET): %s", f, i+1, code)
			}
			checked += strings.Count(line, "$(APT_GET)") + strings.Count(line, "$(APT_UPDATE)")
		}
	}
	if checked < 4 {
		t.Errorf("only %d uses of $(APT_GET)/$(APT_UPDATE) in the Makefiles: the check lost its subject", checked)
	}
}
