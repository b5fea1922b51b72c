package main_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
)

// TestRunFileGrants is the report, end to end: a profile grants
// directories, `moat policy check` shows each with its mode, and the
// plugin, run strictly confined, reads the read-only one, is refused
// writes there with EROFS, and writes the read-write one (it used to get
// "Bad file number": no preopen existed). The write is in the audit
// trail.
func TestRunFileGrants(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	base := t.TempDir()
	ro, rw := filepath.Join(base, "ro"), filepath.Join(base, "rw")
	for _, d := range []string{ro, rw} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ro, "file.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	plugin := writeModule(t, "fsguest", testwasm.BuildGo(t, "./testdata/fsguest", true))
	manifest := "name: fsguest\nversion: 1.0.0\nactions: [{name: fs}]\ncapabilities:\n  filesystem: [" + ro + ", " + rw + ":rw]\n"
	if err := os.WriteFile(filepath.Join(plugin, "moat.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(base, "profile.yaml")
	if err := os.WriteFile(profile, []byte("name: files\ndefault:\n  capabilities:\n    filesystem: ["+ro+", {path: "+rw+", rw: true}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	r := moat(t, "", "policy", "check", plugin, "--profile", profile)
	for _, want := range []string{"filesystem " + ro + "     ✓ granted read-only", "filesystem " + rw + ":rw  ✓ granted read-write", "verdict: LOADS"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("policy check lacks %q:\n%s", want, r.stdout)
		}
	}

	data := t.TempDir()
	for _, tt := range []struct{ input, want string }{
		{"read " + ro + "/file.txt", "ok hello"},
		{"write " + ro + "/file.txt x", "err EROFS"},
		{"write " + rw + "/out.txt written-by-the-plugin", "ok"},
		{"read " + rw + "/out.txt", "ok written-by-the-plugin"},
	} {
		r := moat(t, "", "run", plugin, "fs", "--input", tt.input, "--profile", profile, "--data", data, "--confine", "strict", "--correlation-id", "files-cli")
		if r.code != 0 || r.stdout != tt.want {
			t.Errorf("%s: exit %d stdout %q stderr %q; want %q", tt.input, r.code, r.stdout, r.stderr, tt.want)
		}
	}
	a := moat(t, "", "audit", "--data", data, "--kind", "op", "--correlation", "files-cli")
	if !strings.Contains(a.stdout, "fs/fs.write") || !strings.Contains(a.stdout, "deny") {
		t.Errorf("the trail lacks the write and the refusal:\n%s", a.stdout)
	}
}

// TestServeFileGrants: moat serve, confined after it binds its port,
// still opens the directories its profile grants (its Landlock layer
// allows them), and a module uploaded later uses them as granted.
func TestServeFileGrants(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	base := t.TempDir()
	ro, rw := filepath.Join(base, "ro"), filepath.Join(base, "rw")
	for _, d := range []string{ro, rw} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ro, "file.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(base, "profile.yaml")
	if err := os.WriteFile(profile, []byte("name: files\ndefault:\n  capabilities:\n    filesystem: ["+ro+", "+rw+":rw]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	key := strings.TrimSpace(moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "ann", "--role", "admin").stdout)
	var rest bytes.Buffer
	_, url := startServe(t, &rest, "--data", data, "--listen", "127.0.0.1:0", "--profile", profile)
	req := func(method, path, ct string, body io.Reader) (int, string) {
		t.Helper()
		r, _ := http.NewRequest(method, url+path, body)
		r.Header.Set("Authorization", "Bearer "+key)
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
	manifest := "name: fsguest\nversion: 1.0.0\nactions: [{name: fs}]\ncapabilities:\n  filesystem: [" + ro + ", " + rw + ":rw]\n"
	body, bodyType := moduleForm(testwasm.BuildGo(t, "./testdata/fsguest", true), []byte(manifest))
	if code, out := req("POST", "/v1/modules", bodyType, body); code != 201 {
		t.Fatalf("upload: %d %s\n%s", code, out, rest.String())
	}
	for _, tt := range []struct{ input, want string }{
		{"read " + ro + "/file.txt", "ok hello"},
		{"write " + ro + "/file.txt x", "err EROFS"},
		{"write " + rw + "/served.txt from-the-server", "ok"},
	} {
		if code, out := req("POST", "/v1/modules/fsguest/actions/fs", "", strings.NewReader(tt.input)); code != 200 || out != tt.want {
			t.Errorf("%s: %d %q, want %q", tt.input, code, out, tt.want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(rw, "served.txt")); string(b) != "from-the-server" {
		t.Errorf("served.txt holds %q", b)
	}
	if a := moat(t, "", "audit", "--data", data, "--kind", "confinement"); !strings.Contains(a.stdout, "landlock") {
		t.Errorf("the server did not confine itself with Landlock: %+v", a)
	}
}

// TestRunFileGrantsHostile: through `moat run`, strictly confined, a
// grant of a bind mount of the data directory is refused at load, a full
// granted disk gives the plugin ENOSPC (not EIO), and a FIFO in a granted
// directory is refused without its writer ever seeing a reader.
func TestRunFileGrantsHostile(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Require(t, "bind mounts and a tmpfs need root")
	}
	base := t.TempDir()
	data, bound, full, ro := filepath.Join(base, "data"), filepath.Join(base, "bound"), filepath.Join(base, "full"), filepath.Join(base, "ro")
	for _, d := range []string{data, bound, full, ro} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mount(data, bound, "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(bound, syscall.MNT_DETACH) })
	if err := syscall.Mount("tmpfs", full, "tmpfs", 0, "size=64k,mode=0755"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(full, syscall.MNT_DETACH) })
	fifo := filepath.Join(ro, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	writerIn := make(chan struct{})
	go func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		close(writerIn)
	}()
	t.Cleanup(func() {
		if r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			<-writerIn
			r.Close()
		}
	})

	wasm := testwasm.BuildGo(t, "./testdata/fsguest", true)
	run := func(grants, input string) result {
		t.Helper()
		plugin := writeModule(t, "fsguest", wasm)
		manifest := "name: fsguest\nversion: 1.0.0\nactions: [{name: fs}]\ncapabilities:\n  filesystem: [" + grants + "]\n"
		if err := os.WriteFile(filepath.Join(plugin, "moat.yaml"), []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		profile := filepath.Join(t.TempDir(), "profile.yaml")
		if err := os.WriteFile(profile, []byte("name: files\ndefault:\n  capabilities:\n    filesystem: ["+grants+"]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return moat(t, "", "run", plugin, "fs", "--input", input, "--profile", profile, "--data", data, "--confine", "strict")
	}
	if r := run(bound+":rw", "read "+bound+"/x"); r.code == 0 || !strings.Contains(r.stderr, "reaches moat's own data directory") {
		t.Errorf("a bind mount of the data directory: exit %d stdout %q stderr %q; want refused", r.code, r.stdout, r.stderr)
	}
	if r := run(full+":rw", "write "+full+"/big "+strings.Repeat("x", 100<<10)); r.code != 0 || r.stdout != "err ENOSPC" {
		t.Errorf("a full disk: exit %d stdout %q stderr %q; want err ENOSPC", r.code, r.stdout, r.stderr)
	}
	if r := run(ro, "read "+fifo); r.code != 0 || r.stdout != "err EPERM" {
		t.Errorf("a FIFO: exit %d stdout %q stderr %q; want err EPERM", r.code, r.stdout, r.stderr)
	}
	select {
	case <-writerIn:
		t.Error("the FIFO's writer got a reader: moat opened it")
	case <-time.After(200 * time.Millisecond):
	}
}
