package main_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestSessionExecCLI: moat session exec against a real moat serve (confined
// as it is by default: its commands start through the launcher) runs the
// command in the workspace, prints its output, exits with its status, and
// --background prints a pid; a file a command writes is there for the next.
func TestSessionExecCLI(t *testing.T) {
	testenv.Root(t, "commands run as a leased job uid in a cgroup")
	if _, err := os.Stat("/usr/bin/bash"); err != nil {
		testenv.Require(t, "/usr/bin/bash")
	}
	t.Parallel()
	data := t.TempDir()
	key := strings.TrimSpace(moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "ann").stdout)
	var rest bytes.Buffer
	_, base := startServe(t, &rest, "--data", data, "--listen", "127.0.0.1:0")
	env := []string{"MOAT_SERVER=" + base, "MOAT_API_KEY=" + key}
	work := t.TempDir()
	sh := func(args ...string) result { return moatEnvIn(t, work, env, append([]string{"session"}, args...)...) }
	r := sh("create")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("create: %+v", r)
	}
	if r = sh("exec", id, "echo hi > f.txt; pwd; cat f.txt; echo oops >&2; exit 3"); r.code != 3 || r.stdout != "/home/user\nhi\n" || r.stderr != "oops\n" {
		t.Fatalf("exec: %+v\n%s", r, rest.String())
	}
	if r = sh("exec", id, "--env", "X=1", "--", "echo", "$X", "&&", "cat", "f.txt"); r.code != 0 || r.stdout != "1\nhi\n" {
		t.Fatalf("exec with --env: %+v", r)
	}
	if r = sh("exec", id, "--background", "sleep 60"); r.code != 0 || strings.TrimSpace(r.stdout) != "3" {
		t.Fatalf("--background: %+v", r)
	}
	if r = sh("kill", id); r.code != 0 {
		t.Fatalf("kill: %+v", r)
	}
}
