package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testwasm"
)

// TestRunMaxTableElements: --max-table-elements bounds the module's tables
// at load, like --memory its memory: a Go command's function table (a few
// thousand references) runs under the default and is refused under 100,
// at the memory-limit exit status; a value outside the range is a usage
// error naming the flag.
func TestRunMaxTableElements(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	cmdWasm := filepath.Join(t.TempDir(), "gocmd.wasm")
	if err := os.WriteFile(cmdWasm, testwasm.BuildGo(t, "./testdata/gocmd", false), 0o644); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	tests := []struct {
		name   string
		flag   string
		code   int
		stdout string
		stderr string
	}{
		{name: "the default", code: 0, stdout: `stdin="" args=[] GREETING="" HOME=""` + "\n"},
		{name: "room for the table", flag: "1000000", code: 0, stdout: `stdin="" args=[] GREETING="" HOME=""` + "\n"},
		{name: "under the table's size", flag: "100", code: 125, stderr: "a module's tables may hold at most 100 elements"},
		{name: "zero", flag: "0", code: 2, stderr: "--max-table-elements 0: give a number of elements between 1 and 134217728"},
		{name: "past the ceiling", flag: "134217729", code: 2, stderr: "--max-table-elements 134217729: give a number of elements between 1 and 134217728"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"run", "--data", data, cmdWasm}
			if tt.flag != "" {
				args = append(args, "--max-table-elements", tt.flag)
			}
			r := moat(t, "", args...)
			if r.code != tt.code || r.stdout != tt.stdout || !strings.Contains(r.stderr, tt.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr containing %q", r.code, r.stdout, r.stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}
