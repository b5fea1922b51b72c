package toolchains_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/moatdir"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/toolchains"
)

// TestStateDir: the machine's toolchain state is $MOAT_TOOLCHAIN_STATE,
// else beside the toolchains; made when missing; and "" (the data
// directory keeps the state then) when there is no toolchains directory
// or moat cannot make or write the directory.
func TestStateDir(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tc := filepath.Join(tmp, "toolchains")
	if err := os.Mkdir(tc, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, toolchains, state, want string
	}{
		{name: "beside the toolchains", toolchains: tc, want: filepath.Join(tc, "state")},
		{name: "the variable wins", toolchains: tc, state: filepath.Join(tmp, "own"), want: filepath.Join(tmp, "own")},
		{name: "not a directory moat can make", toolchains: tc, state: filepath.Join(file, "state"), want: ""},
		{name: "toolchains not a directory", toolchains: file, want: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(toolchains.EnvDir, tt.toolchains)
			t.Setenv(toolchains.EnvStateDir, tt.state)
			got := toolchains.StateDir()
			if got != tt.want {
				t.Fatalf("StateDir() = %q, want %q", got, tt.want)
			}
			if got == "" {
				return
			}
			if fi, err := os.Stat(got); err != nil || !fi.IsDir() {
				t.Fatalf("StateDir() = %q was not made: %v", got, err)
			}
			if left, _ := filepath.Glob(filepath.Join(got, ".probe-*")); len(left) != 0 {
				t.Fatalf("the write probe was left behind: %v", left)
			}
		})
	}
}

// TestStateDirRefusesOthers: the machine's state is read back as trusted
// (machine code, interpreter images), so a directory another user may
// write, or another user's, is not used: moat keeps its state in its data
// directory instead (StateDir returns "").
func TestStateDirRefusesOthers(t *testing.T) {
	t.Run("writable by others", func(t *testing.T) {
		d := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
		t.Setenv(toolchains.EnvStateDir, d)
		if got := toolchains.StateDir(); got != "" {
			t.Fatalf("StateDir() = %q for a directory of mode 0777, want \"\"", got)
		}
		if err := moatdir.OwnedDir(d); err == nil || !strings.Contains(err.Error(), "chmod go-w") {
			t.Fatalf("OwnedDir = %v, want the fix named", err)
		}
		if err := os.Chmod(d, 0o770); err != nil {
			t.Fatal(err)
		}
		if got := toolchains.StateDir(); got != "" {
			t.Fatalf("StateDir() = %q for a group-writable directory, want \"\"", got)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if got := toolchains.StateDir(); got != d {
			t.Fatalf("StateDir() = %q once the directory is the owner's alone, want %q", got, d)
		}
	})
	t.Run("another user's", func(t *testing.T) {
		testenv.Root(t, "chown to another user")
		d := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		t.Setenv(toolchains.EnvStateDir, d)
		if got := toolchains.StateDir(); got != "" {
			t.Fatalf("StateDir() = %q for a directory uid 65534 owns, want \"\"", got)
		}
		if err := moatdir.OwnedDir(d); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Fatalf("OwnedDir = %v, want the owner named", err)
		}
	})
}
