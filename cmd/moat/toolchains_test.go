package main_test

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/moatdir"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
)

// newUser is a new user's machine in temp dirs: a copy of the moat binary
// alone in its own directory (no moat-confine, no .toolchains, no
// repository above it), a home, an XDG data dir, two working directories,
// none inside the repository, and the machine's system home (what is
// /var/lib/moat elsewhere: root's home and its toolchains for every
// user), not made: a new machine has none.
type newUser struct {
	bin, xdg, home, work, other, system string
}

func newUserMachine(t *testing.T) newUser {
	t.Helper()
	root := t.TempDir()
	u := newUser{bin: filepath.Join(root, "bin", "moat"), xdg: filepath.Join(root, "xdg"), home: filepath.Join(root, "home"),
		work: filepath.Join(root, "work"), other: filepath.Join(root, "elsewhere", "deeper"), system: filepath.Join(root, "var-lib-moat")}
	for _, d := range []string{filepath.Dir(u.bin), u.xdg, u.home, u.work, u.other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(moatBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(u.bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return u
}

// run runs the copied binary in dir with the user's environment: HOME and
// XDG_DATA_HOME in the temp tree, and none of moat's overrides.
func (u newUser) run(t *testing.T, dir, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(u.bin, args...)
	cmd.Dir = dir
	cmd.Env = u.env()
	cmd.Stdin = strings.NewReader(stdin)
	return runCmd(t, cmd)
}

// env is the test's environment with HOME, XDG_DATA_HOME and the system
// home in the temp tree and none of moat's overrides: the machine's
// /var/lib/moat is not the new user's machine's.
func (u newUser) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "MOAT_TOOLCHAINS", "MOAT_DATA", "XDG_DATA_HOME", "HOME", "MOAT_DATABASE_URL", moatdir.EnvSystemHome:
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+u.home, "XDG_DATA_HOME="+u.xdg, moatdir.EnvSystemHome+"="+u.system)
}

func (u newUser) langStatus(t *testing.T, name string) (available bool, missing string) {
	t.Helper()
	r := u.run(t, u.work, "", "langs", "--json")
	var list []struct {
		Name      string
		Available bool   `json:"available"`
		Missing   string `json:"missing"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("langs --json: %v: %+v", err, r)
	}
	for _, l := range list {
		if l.Name == name {
			return l.Available, l.Missing
		}
	}
	t.Fatalf("langs has no %s", name)
	return false, ""
}

// TestDataDirStable: one plugin run from two working directories counts
// in one store, the home's; $MOAT_DATA and --data still win.
func TestDataDirStable(t *testing.T) {
	u := newUserMachine(t)
	plugin := writeModule(t, "hello-go", testwasm.BuildGo(t, "./examples/hello-go", true))
	copyFile(t, filepath.Join(testwasm.RepoRoot(t), "examples", "hello-go", "moat.yaml"), filepath.Join(plugin, "moat.yaml"))
	for i, dir := range []string{u.work, u.other} {
		r := u.run(t, dir, "", "run", plugin, "greet", "--input", "World")
		if want := []string{"Hello, World! (call #1)", "Hello, World! (call #2)"}[i]; r.code != 0 || r.stdout != want {
			t.Fatalf("run %d in %s: %+v; want %q", i+1, dir, r, want)
		}
	}
	if _, err := os.Stat(filepath.Join(u.xdg, "moat", "data", "moat.db")); err != nil {
		t.Errorf("no store in the home's data dir: %v", err)
	}
	data := t.TempDir()
	if r := u.run(t, u.work, "", "run", plugin, "greet", "--input", "World", "--data", data); r.stdout != "Hello, World! (call #1)" {
		t.Errorf("--data: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(data, "moat.db")); err != nil {
		t.Errorf("--data: no store there: %v", err)
	}
}

// TestKeysConfigHonoured is the reported bug: keys created with the
// server's --config land in the store its data_dir names, where the
// server reads them, and not in the default one.
func TestKeysConfigHonoured(t *testing.T) {
	u := newUserMachine(t)
	serverData := filepath.Join(t.TempDir(), "server-data")
	cfg := filepath.Join(u.work, "moat-server.yaml")
	if err := os.WriteFile(cfg, []byte("data_dir: "+serverData+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := u.run(t, u.other, "", "keys", "create", "--config", cfg, "--org", "acme", "--user", "ann"); r.code != 0 || !strings.HasPrefix(r.stdout, "moat_") {
		t.Fatalf("keys create --config: %+v", r)
	}
	if r := u.run(t, u.other, "", "keys", "list", "--config", cfg); !strings.Contains(r.stdout, "ann") {
		t.Errorf("keys list --config does not show the key: %+v", r)
	}
	if r := u.run(t, u.work, "", "keys", "list"); strings.Contains(r.stdout, "ann") {
		t.Errorf("the key landed in the default store too: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(serverData, "moat.db")); err != nil {
		t.Errorf("no store in the config's data_dir: %v", err)
	}
}

// TestCopiedBinaryRunsNative: a copied moat with no moat-confine beside it
// confines native jobs by re-executing itself.
func TestCopiedBinaryRunsNative(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Require(t, "the native layer stack (cgroups, uid switch) needs root")
	}
	u := newUserMachine(t)
	if _, err := os.Stat(filepath.Join(filepath.Dir(u.bin), "moat-confine")); err == nil {
		t.Fatal("moat-confine beside the copy")
	}
	r := u.run(t, u.work, "", "exec", "--native", "--", "sh", "-c", "echo confined; cat /etc/shadow")
	if r.stdout != "confined\n" || r.code == 0 || !strings.Contains(r.stderr, "layers=cgroup,") {
		t.Fatalf("native run from a copied binary: %+v", r)
	}
}

// TestExecConfigHonoured: moat exec --config runs on the server's store
// and caches: its audit trail has the run, the default store does not.
func TestExecConfigHonoured(t *testing.T) {
	u := newUserMachine(t)
	serverData := filepath.Join(t.TempDir(), "server-data")
	cfg := filepath.Join(u.work, "moat-server.yaml")
	if err := os.WriteFile(cfg, []byte("data_dir: "+serverData+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := u.run(t, u.other, "", "exec", "--config", cfg, "--lang", "javascript", "-e", "console.log('served')")
	if r.code != 0 || r.stdout != "served\n" {
		t.Fatalf("exec --config: %+v", r)
	}
	_, id, ok := strings.Cut(r.stderr, "correlation_id=")
	if !ok {
		t.Fatalf("no correlation id: %q", r.stderr)
	}
	id = strings.TrimSpace(id)
	if a := u.run(t, u.work, "", "audit", "--config", cfg); !strings.Contains(a.stdout, id) {
		t.Errorf("the server's audit trail lacks run %s: %+v", id, a)
	}
	if a := u.run(t, u.work, "", "audit"); strings.Contains(a.stdout, id) {
		t.Errorf("the default audit trail has run %s too: %+v", id, a)
	}
	if _, err := os.Stat(filepath.Join(serverData, "build-cache")); err != nil {
		t.Errorf("the build cache is not in the config's data_dir: %v", err)
	}
}

// TestServeSeesKeysFromAnywhere is the reported 401: moat serve started in
// one directory and moat keys create run in another, neither given --data
// nor --config, share one store (moat's home), so the key works.
func TestServeSeesKeysFromAnywhere(t *testing.T) {
	u := newUserMachine(t)
	base := u.serve(t, u.work, "serve", "--listen", "127.0.0.1:0")

	create := u.run(t, u.other, "", "keys", "create", "--org", "acme", "--user", "ann")
	key := strings.TrimSpace(create.stdout)
	if create.code != 0 || key == "" {
		t.Fatalf("keys create: %+v", create)
	}
	req, _ := http.NewRequest("GET", base+"/v1/audit", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/audit with a key made in another directory: %s, want 200 OK", res.Status)
	}
}
