package toolchains_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/toolchains"
)

// TestDirOrder: $MOAT_TOOLCHAINS, then a .toolchains above the working
// directory, then moat's home's toolchains; none, "".
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
	tests := []struct {
		name, env, wd, xdg, want string
	}{
		{name: "MOAT_TOOLCHAINS wins", env: "/explicit", wd: deep, xdg: xdg, want: "/explicit"},
		{name: "a repository's .toolchains above the working dir", wd: deep, xdg: xdg, want: filepath.Join(repo, ".toolchains")},
		{name: "moat's home from anywhere else", wd: outside, xdg: xdg, want: home},
		{name: "no home's toolchains yet", wd: outside, xdg: filepath.Join(root, "empty-xdg"), want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := os.Stat("/var/lib/moat/toolchains"); err == nil && tt.want == "" {
				t.Skip("/var/lib/moat/toolchains exists on this machine: the system's toolchains are found")
			}
			t.Setenv(toolchains.EnvDir, tt.env)
			t.Setenv("XDG_DATA_HOME", tt.xdg)
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
