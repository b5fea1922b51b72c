package toolchains_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/toolchains"
)

// TestDirOrder: $MOAT_TOOLCHAINS, then a .toolchains above the working
// directory, then moat's home's toolchains, then the system's; none, "".
func TestDirOrder(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	deep := filepath.Join(repo, "a", "b")
	xdg := filepath.Join(root, "xdg")
	home := filepath.Join(xdg, "moat", "toolchains")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(repo, ".toolchains"), deep, home, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A system home (root's installs, for every user) of the test's own.
	system := filepath.Join(root, "system")
	if err := os.MkdirAll(filepath.Join(system, "toolchains"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, env, wd, xdg, system, want string
	}{
		{name: "MOAT_TOOLCHAINS wins", env: "/explicit", wd: deep, xdg: xdg, system: system, want: "/explicit"},
		{name: "a repository's .toolchains above the working dir", wd: deep, xdg: xdg, system: system, want: filepath.Join(repo, ".toolchains")},
		{name: "moat's home from anywhere else", wd: outside, xdg: xdg, system: system, want: home},
		{name: "the system's when the home has none", wd: outside, xdg: filepath.Join(root, "empty-xdg"), system: system, want: filepath.Join(system, "toolchains")},
		{name: "no home's toolchains yet, no system's", wd: outside, xdg: filepath.Join(root, "empty-xdg"), system: filepath.Join(root, "no-system"), want: ""},
		// In a test binary the machine's /var/lib/moat/toolchains is never
		// the answer, whether or not root installed there.
		{name: "no system home named", wd: outside, xdg: filepath.Join(root, "empty-xdg"), want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(toolchains.EnvDir, tt.env)
			t.Setenv("XDG_DATA_HOME", tt.xdg)
			t.Setenv("MOAT_SYSTEM_HOME", tt.system)
			t.Chdir(tt.wd)
			if got := toolchains.Dir(); got != tt.want {
				t.Errorf("Dir() = %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("InstallDir", func(t *testing.T) {
		t.Setenv(toolchains.EnvDir, "")
		t.Setenv("XDG_DATA_HOME", xdg)
		t.Chdir(deep) // not the repository's: make toolchains names that one
		if got, err := toolchains.InstallDir(); err != nil || got != home {
			t.Errorf("InstallDir() = %q, %v; want %q", got, err, home)
		}
	})
}
