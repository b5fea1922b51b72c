package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testwasm"
)

// TestConfigOnEveryDataCommand: every command that opens the store, the
// compile cache or the data directory, or reads the profile, takes the
// server's --config and works on what that server would: its data_dir
// (inspect's compile cache and store land there) and its profile (policy
// check reports it), with --profile still winning.
func TestConfigOnEveryDataCommand(t *testing.T) {
	for _, c := range [][]string{
		{"inspect"}, {"build"}, {"confine-check"}, {"policy", "check"}, {"verify"}, {"exec"},
		{"toolchains", "warm"}, {"keys"}, {"audit"}, {"tasks"}, {"ai"}, {"secrets"}, {"serve"},
		{"migrate"}, {"backup"}, {"restore"}, {"audit", "prune"},
	} {
		if r := moat(t, "", append(c, "--help")...); r.code != 0 || !strings.Contains(r.stdout, "--config") {
			t.Errorf("moat %s has no --config:\n%s%s", strings.Join(c, " "), r.stdout, r.stderr)
		}
	}

	noSharedCache(t) // the cache must land in the config's data_dir
	dir := t.TempDir()
	served := filepath.Join(dir, "served")
	cfg := filepath.Join(dir, "moat-server.yaml")
	if err := os.WriteFile(cfg, []byte("data_dir: "+served+"\nprofile: dev\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plugin := filepath.Join(testwasm.RepoRoot(t), "testdata", "plugin.wasm")
	first := moat(t, "", "inspect", "--config", cfg, plugin)
	second := moat(t, "", "inspect", "--config", cfg, plugin)
	if first.code != 0 || !strings.Contains(second.stdout, "machine code:  from the disk cache") {
		t.Fatalf("inspect --config did not keep its compile cache in the config's data_dir:\n%s%s\n%s%s", first.stdout, first.stderr, second.stdout, second.stderr)
	}
	if _, err := os.Stat(served); err != nil {
		t.Fatalf("inspect --config: data_dir %s not used: %v", served, err)
	}

	manifest := filepath.Join(testwasm.RepoRoot(t), "examples", "hello-go")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"policy", "check", "--config", cfg, manifest}, "profile  dev "},
		{[]string{"policy", "check", "--config", cfg, "--profile", "minimal", manifest}, "profile  minimal "},
		{[]string{"policy", "check", manifest}, "profile  minimal "},
	} {
		if r := moat(t, "", tt.args...); r.code != 0 || !strings.Contains(r.stdout, tt.want) {
			t.Errorf("moat %s: want %q:\n%s%s", strings.Join(tt.args, " "), tt.want, r.stdout, r.stderr)
		}
	}
	if r := moat(t, "", "policy", "check", "--config", filepath.Join(dir, "missing.yaml"), manifest); r.code != 2 || !strings.Contains(r.stderr, "missing.yaml") {
		t.Errorf("a missing --config: want exit 2 naming the file, got %d:\n%s", r.code, r.stderr)
	}
}
