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
