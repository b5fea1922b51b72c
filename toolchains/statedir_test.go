package toolchains_test

import (
	"os"
	"path/filepath"
	"testing"

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
