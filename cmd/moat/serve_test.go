package main_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/proctest"
	"github.com/moat-sandbox/moat/internal/testwasm"
)

// TestServeNewcomerFlow is the README's server walk-through with the real
// binary: moat keys create, moat serve, upload hello-go with a multipart
// POST, invoke greet, read the audit trail, revoke a key, stop with
// SIGTERM.
func TestServeNewcomerFlow(t *testing.T) {
	data := t.TempDir()
	create := moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "ann", "--role", "admin", "--name", "laptop")
	key := strings.TrimSpace(create.stdout)
	if create.code != 0 || !strings.HasPrefix(key, "moat_sk_") || !strings.Contains(create.stderr, "ann@acme [admin]") {
		t.Fatalf("keys create: %+v", create)
	}
	spare := strings.TrimSpace(moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "bob").stdout)
	list := moat(t, "", "keys", "list", "--data", data)
	if list.code != 0 || !strings.Contains(list.stdout, "laptop") || strings.Contains(list.stdout, key) || strings.Count(list.stdout, "active") != 2 {
		t.Fatalf("keys list: %+v", list)
	}
	if r := moat(t, "", "keys", "create", "--data", data, "--org", "acme"); r.code != 2 {
		t.Errorf("keys create without --user: exit %d, want 2", r.code)
	}

	cmd := exec.Command(moatBin, "serve", "--data", data, "--listen", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stderr)
	urlRe := regexp.MustCompile(`url=(http://127\.0\.0\.1:\d+)`)
	base := ""
	for base == "" && lines.Scan() {
		if m := urlRe.FindStringSubmatch(lines.Text()); m != nil {
			base = m[1]
		}
	}
	if base == "" {
		t.Fatal("moat serve did not log its URL")
	}
	var rest bytes.Buffer
	go io.Copy(&rest, stderr)

	req := func(method, path, key, ct string, body io.Reader) (int, string) {
		t.Helper()
		r, _ := http.NewRequest(method, base+path, body)
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}

	manifest, _ := os.ReadFile(filepath.Join(testwasm.RepoRoot(t), "examples/hello-go/moat.yaml"))
	body, bodyType := moduleForm(testwasm.BuildGo(t, "./examples/hello-go", true), manifest)
	if code, out := req("POST", "/v1/modules", key, bodyType, body); code != 201 {
		t.Fatalf("upload: %d %s", code, out)
	}
	if code, out := req("POST", "/v1/modules/hello-go/actions/greet", key, "", strings.NewReader("World")); code != 200 || out != "Hello, World! (call #1)" {
		t.Errorf("greet: %d %q", code, out)
	}
	if code, out := req("GET", "/v1/audit?module=hello-go&kind=invocation", key, "", nil); code != 200 || !strings.Contains(out, `"code":"ok"`) {
		t.Errorf("audit: %d %s", code, out)
	}
	// Its confinement is on the operator's record (no organization's):
	// the layers it applied.
	if code, out := req("GET", "/v1/audit?kind=confinement", key, "", nil); code != 200 || strings.Contains(out, "seccomp") {
		t.Errorf("an organization sees the server's confinement events: %d %s", code, out)
	}
	if a := moat(t, "", "audit", "--data", data, "--kind", "confinement"); a.code != 0 || !strings.Contains(a.stdout, "moat serve") || !strings.Contains(a.stdout, "landlock") || !strings.Contains(a.stdout, "seccomp") {
		t.Errorf("moat audit --kind confinement: %+v", a)
	}
	// The server confined itself once its port was bound (--confine
	// best-effort is the default): seccomp on every thread; and code runs
	// still work, native ones started by the launcher under their own layers.
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if !strings.Contains(string(status), "Seccomp:\t2") || !strings.Contains(string(status), "NoNewPrivs:\t1") {
		t.Errorf("moat serve is not confined:\n%s", status)
	}
	run := `{"language":"bash","files":[{"name":"main.sh","content":"echo from bash; cat /etc/shadow"}]}`
	if code, out := req("POST", "/v1/runs", key, "application/json", strings.NewReader(run)); code != 200 ||
		!strings.Contains(out, `"stdout":"from bash\n"`) || !strings.Contains(out, "cat: /etc/shadow: No such file or directory") {
		t.Errorf("a native run from the confined server: %d %s", code, out)
	}
	id := regexp.MustCompile(`(?m)^(key_[0-9a-f]+)\s+acme\s+bob`).FindStringSubmatch(list.stdout)
	if id == nil {
		t.Fatalf("no id for bob's key in:\n%s", list.stdout)
	}
	if r := moat(t, "", "keys", "revoke", "--data", data, id[1]); r.code != 0 {
		t.Fatalf("revoke: %+v", r)
	}
	if code, _ := req("GET", "/v1/modules", spare, "", nil); code != 401 {
		t.Errorf("revoked key: %d, want 401", code)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("moat serve after SIGTERM: %v\n%s", err, rest.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("moat serve did not stop within 15 s of SIGTERM")
	}
	// A graceful stop leaves no scratch dir, although the confined server
	// itself could not remove it.
	if left, _ := filepath.Glob(filepath.Join(os.TempDir(), fmt.Sprintf("moat-serve-%d-*", cmd.Process.Pid))); len(left) > 0 {
		t.Errorf("moat serve left its scratch dir: %v", left)
	}
}

// TestServeConfigError: moat serve refuses a bad config before it
// listens, naming the file, line and field; the hostile rows are the
// strict YAML decoder's (a second document was ignored and the server
// started on the first; a tag was decoded).
func TestServeConfigError(t *testing.T) {
	for _, tt := range []struct{ name, yaml, want string }{
		{"bad value", "listen: 127.0.0.1:0\nlimits:\n  key_rate: lots\n", "moat-server.yaml:3: limits.key_rate: \"lots\" is not a number"},
		{"second document", "listen: 127.0.0.1:0\n---\nlisten: 127.0.0.1:1\n", "moat-server.yaml:3: a second YAML document starts here"},
		{"alias", "listen: &l 127.0.0.1:0\ndata_dir: *l\n", "moat-server.yaml:2: data_dir: YAML aliases (*l) are not supported"},
		{"binary tag", "listen: 127.0.0.1:0\ndata_dir: !!binary L3RtcA==\n", "moat-server.yaml:2: data_dir: YAML tags (!!binary) are not supported"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "moat-server.yaml")
			os.WriteFile(cfg, []byte(tt.yaml), 0o644)
			// A server that started anyway is killed, and fails the row.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r := runCmd(t, exec.CommandContext(ctx, moatBin, "serve", "--config", cfg))
			if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("got %+v, want exit 2 and %q", r, tt.want)
			}
		})
	}
}

// startServe starts moat serve with args and returns it and its URL, read
// off its log; the rest of its stderr goes to rest.
func startServe(t *testing.T, rest *bytes.Buffer, args ...string) (*exec.Cmd, string) {
	t.Helper()
	return startServeIn(t, "", rest, args...)
}

// startServeIn is startServe in the working directory dir ("" for the
// test's), for a configuration whose paths are relative.
func startServeIn(t *testing.T, dir string, rest io.Writer, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(moatBin, append([]string{"serve"}, args...)...)
	cmd.Dir = dir
	return cmd, startServeCmd(t, cmd, rest)
}

// startServeCmd starts cmd, a moat serve, and returns its URL, read off its
// log; the rest of its stderr goes to rest. The server is killed when the
// test ends.
func startServeCmd(t *testing.T, cmd *exec.Cmd, rest io.Writer) string {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(stderr)
	urlRe := regexp.MustCompile(`url=(http://127\.0\.0\.1:\d+)`)
	var head strings.Builder
	for lines.Scan() {
		head.WriteString(lines.Text() + "\n")
		if m := urlRe.FindStringSubmatch(lines.Text()); m != nil {
			go io.Copy(rest, stderr)
			return m[1]
		}
	}
	t.Fatalf("moat serve did not log its URL:\n%s", head.String())
	return ""
}

// TestServeKill9: moat serve killed with SIGKILL in the middle of kv writes
// loses no write it acknowledged, and starts again on the same data
// directory with no repair: every acknowledged value is read back, and
// the killed server's scratch directory, helper processes and backstop
// cgroup are gone.
func TestServeKill9(t *testing.T) {
	data := t.TempDir()
	key := strings.TrimSpace(moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "ann", "--role", "admin").stdout)
	cfg := filepath.Join(t.TempDir(), "moat-server.yaml")
	os.WriteFile(cfg, []byte("limits: {key_rate: 100000, key_burst: 100000, org_rate: 100000, org_burst: 100000}\nadmission: {org_invocations: 4, max_invocations: 8}\n"), 0o644)
	args := []string{"--config", cfg, "--data", data, "--listen", "127.0.0.1:0"}
	var rest bytes.Buffer
	srv, base := startServe(t, &rest, args...)

	do := func(base, path, body, ct string) (int, string, error) { return api(base, key, "POST", path, body, ct) }
	body, bodyType := moduleForm(testwasm.BuildGo(t, "./testdata/goguest", true),
		[]byte("name: store\nversion: 1.0.0\nactions: [{name: kv}]\ncapabilities: {kv: true}\n"))
	if code, out, err := do(base, "/v1/modules", body.String(), bodyType); code != 201 {
		t.Fatalf("upload: %d %s %v", code, out, err)
	}

	// Writers put k<w>-<i> = v<i> until the kill; a write counts once the
	// server has answered "ok".
	var mu sync.Mutex
	acked := map[string]string{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k, v := fmt.Sprintf("k%d-%d", w, i), fmt.Sprintf("v%d-%d-%s", w, i, strings.Repeat("x", i%200))
				code, out, err := do(base, "/v1/modules/store/actions/kv", "put "+k+" "+v, "")
				if err == nil && code == 200 && out == "ok" {
					mu.Lock()
					acked[k] = v
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	pid := srv.Process.Pid
	helpers := proctest.Children(pid)
	if err := srv.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	srv.Wait()
	close(stop)
	wg.Wait()
	if len(acked) < 50 {
		t.Fatalf("only %d writes acknowledged before the kill; the load did not run:\n%s", len(acked), rest.String())
	}

	// Restarted on the same data directory, with no repair.
	var rest2 bytes.Buffer
	_, base2 := startServe(t, &rest2, args...)
	lost := 0
	for k, v := range acked {
		code, out, err := do(base2, "/v1/modules/store/actions/kv", "get "+k, "")
		if err != nil || code != 200 || out != v {
			if lost++; lost <= 5 {
				t.Errorf("acknowledged write %s=%s after the restart: %d %q %v", k, v, code, out, err)
			}
		}
	}
	t.Logf("%d acknowledged writes before SIGKILL, %d lost; %d helper processes of the killed server", len(acked), lost, len(helpers))
	if lost > 0 {
		t.Errorf("%d of %d acknowledged writes lost", lost, len(acked))
	}

	// Nothing of the killed server is left: its scratch dir, its helpers
	// (launcher, warm wrappers, backstop watcher), its backstop cgroup.
	deadline := time.Now().Add(5 * time.Second)
	var left []string
	for {
		left = nil
		if d, _ := filepath.Glob(filepath.Join(os.TempDir(), fmt.Sprintf("moat-serve-%d-*", pid))); len(d) > 0 {
			left = append(left, d...)
		}
		for _, c := range helpers {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c)); err == nil && !strings.Contains(string(b), "State:\tZ") {
				left = append(left, fmt.Sprintf("process %d", c))
			}
		}
		for _, pat := range []string{"/sys/fs/cgroup/moat/host-%d-*", "/sys/fs/cgroup/*/moat/host-%d-*"} {
			if d, _ := filepath.Glob(fmt.Sprintf(pat, pid)); len(d) > 0 {
				left = append(left, d...)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("the killed server left %v", left)
	}
}
