package main_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

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

	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	manifest, _ := os.ReadFile(filepath.Join(testwasm.RepoRoot(t), "examples/hello-go/moat.yaml"))
	for name, content := range map[string][]byte{"module": testwasm.BuildGo(t, "./examples/hello-go", true), "manifest": manifest} {
		w, _ := mw.CreateFormFile(name, name)
		w.Write(content)
	}
	mw.Close()
	if code, out := req("POST", "/v1/modules", key, mw.FormDataContentType(), &body); code != 201 {
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

func TestServeConfigError(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "moat-server.yaml")
	os.WriteFile(cfg, []byte("listen: 127.0.0.1:0\nlimits:\n  key_rate: lots\n"), 0o644)
	r := moat(t, "", "serve", "--config", cfg)
	if r.code != 2 || !strings.Contains(r.stderr, "moat-server.yaml:3: limits.key_rate: \"lots\" is not a number") {
		t.Errorf("bad config: %+v", r)
	}
}
