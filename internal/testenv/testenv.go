// Package testenv says whether what a test needs is on this machine. A
// test whose tool or privilege is missing skips with the reason, except
// under MOAT_REQUIRE_TOOLS=1 (CI, which installs everything and runs as
// root), where it fails: a test that silently skips in CI tests nothing.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// EnvRequire is the variable that turns a missing tool or privilege from
// a skip into a failure. "1" is its one meaning; no test reads it but
// through this package (internal/archtest holds that).
const EnvRequire = "MOAT_REQUIRE_TOOLS"

// Required reports whether MOAT_REQUIRE_TOOLS=1: every tool and root are
// promised, so their absence fails. For a test that runs fewer cases,
// rather than none, without a tool.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// Require skips t, or fails it under MOAT_REQUIRE_TOOLS=1, when why is
// not empty.
func Require(t testing.TB, why string) {
	t.Helper()
	if why == "" {
		return
	}
	if Required() {
		t.Fatal(why)
	}
	t.Skip(why)
}

// Root skips t, or fails it under MOAT_REQUIRE_TOOLS=1, unless the test
// runs as root; why says what needs root. A CI runner that lost root then
// goes red, not silently green with the kernel layers untested.
func Root(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Require(t, why)
	}
}

// NativePython says why confined native Python workers cannot run here
// ("" when they can): they need root (every kernel layer) and Debian's
// python3 (the workers' PATH is /usr/bin:/bin, whatever the test's is),
// with numpy when numpy is set.
func NativePython(numpy bool) string {
	if os.Geteuid() != 0 {
		return "native plugins run confined, which these tests assert as root"
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		return "Debian's python3 is not installed (apt-get install python3)"
	}
	if numpy {
		if err := exec.Command("/usr/bin/python3", "-c", "import numpy").Run(); err != nil {
			return "Debian's python3-numpy is not installed (apt-get install python3-numpy)"
		}
	}
	return ""
}

// Slow skips t under go test -short (make check, the inner loop) and
// says why it is slow; make test, which never passes -short, runs it.
// It is for tests that cost tens of seconds for what a faster test
// already shows on the path a change usually touches: a cold toolchain
// build, a bomb at the default limits, every language where one shows
// the path. A loop over languages keeps one under -short with
// ShortLanguages instead, so the path itself is still checked.
func Slow(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("slow under -short (" + why + "): make test runs it")
	}
}

// ShortLanguages is langs under make test, and only its first under
// go test -short: an every-language loop keeps one language in the inner
// loop, the one listed first.
func ShortLanguages[S ~[]E, E any](langs S) S {
	if testing.Short() && len(langs) > 1 {
		return langs[:1]
	}
	return langs
}
