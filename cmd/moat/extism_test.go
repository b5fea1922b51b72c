package main_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
)

// TestRunExtism: `moat run` runs Extism plug-ins: output as the Extism
// CLI prints it, the plug-in's error as a one-line failure with exit 1,
// moat's kv through moat_call persisting between runs.
func TestRunExtism(t *testing.T) {
	t.Parallel() // its own data directory and moat processes; it mostly waits on them
	root := testwasm.RepoRoot(t)
	upper := filepath.Join(root, "testdata", "extism_upper.wasm")
	data := t.TempDir()
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{name: "output", args: []string{"run", upper, "upper", "--input", "hello"}, stdout: "HELLO"},
		{name: "input from stdin", args: []string{"run", upper, "upper"}, stdout: "FROM STDIN"},
		{name: "no function", args: []string{"run", upper}, code: 2, stderr: "is a plugin: name an action (upper)"},
		{name: "unknown function", args: []string{"run", upper, "lower"}, code: 1, stderr: `no action "lower"`},
	}
	if clang, err := exec.LookPath("clang-19"); err == nil {
		dir := filepath.Join(t.TempDir(), "memo")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if msg, err := exec.Command(clang, "--target=wasm32-wasi", "-O2", "-mexec-model=reactor", "-Wl,--strip-all",
			"-o", filepath.Join(dir, "memo.wasm"), filepath.Join(root, "guests", "extism", "c", "memo.c")).CombinedOutput(); err != nil {
			t.Fatalf("clang: %v\n%s", err, msg)
		}
		mf := "name: memo\nversion: 1.0.0\nkind: extism\nactions: [{name: remember}, {name: recall}]\ncapabilities: {kv: true}\n"
		if err := os.WriteFile(filepath.Join(dir, "moat.yaml"), []byte(mf), 0o644); err != nil {
			t.Fatal(err)
		}
		tests = append(tests, []struct {
			name   string
			args   []string
			code   int
			stdout string
			stderr string
		}{
			{name: "moat_call kv.put", args: []string{"run", dir, "remember", "--input", "hi"}, stdout: `{"resp":{}}`},
			{name: "kv persists between runs", args: []string{"run", dir, "recall"}, stdout: `{"resp":{"value":"aGk=","found":true}}`},
			{name: "plug-in error", args: []string{"run", dir, "remember", "--input", strings.Repeat("x", 5000)}, code: 1,
				stderr: "moat: module memo: action remember: guest_error: a note is at most 4096 bytes"},
		}...)
	} else if testenv.Required() {
		t.Fatal("clang-19 is not installed; `make toolchains` installs it")
	} else {
		t.Log("clang-19 is not installed: the C plug-in cases are skipped")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{tt.args[0], "--data", data}, tt.args[1:]...)
			r := moat(t, "from stdin", args...)
			if r.code != tt.code || r.stdout != tt.stdout || !strings.Contains(r.stderr, tt.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr with %q", r.code, r.stdout, r.stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}

// TestRunExtismEgress: a stock Extism plug-in's http_request from `moat
// run`, which confines itself (Landlock allows TCP connections only to the
// ports of the manifest's HTTP targets): the granted server answers, a
// server on another port is refused, by the grant check and by the kernel;
// and loopback servers on a port a wildcard grants are refused whatever
// form their address is written in (decimal, hex, IPv4-mapped, IPv6 zones,
// through a redirect), by the one egress check, and get no request.
func TestRunExtismEgress(t *testing.T) {
	testenv.Slow(t, "Extism egress through the binary; host/extism keeps the relinking")
	root := testwasm.RepoRoot(t)
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
	dl := exec.Command("go", "mod", "download", "github.com/extism/go-pdk")
	dl.Dir, dl.Env = filepath.Join(root, "testdata", "extism"), env
	if msg, err := dl.CombinedOutput(); err != nil {
		testenv.Require(t, fmt.Sprintf("the Extism Go PDK is not available (`make extism-pdk`): %v\n%s", err, msg))
	}
	dir := filepath.Join(t.TempDir(), "fetcher")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-buildmode=c-shared", "-o", filepath.Join(dir, "fetcher.wasm"), "./stock")
	build.Dir, build.Env = filepath.Join(root, "testdata", "extism"), append(env, "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the stock plug-in: %v\n%s", err, msg)
	}
	serve := func(body string) (*countingServer, string) {
		c := &countingServer{}
		c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.hits.Add(1)
			if to := r.URL.Query().Get("to"); to != "" {
				w.Header().Set("Location", to)
				w.WriteHeader(http.StatusFound)
				return
			}
			io.WriteString(w, body)
		}))
		t.Cleanup(c.Close)
		u, _ := url.Parse(c.URL)
		return c, u.Port()
	}
	granted, gport := serve("granted")
	other, _ := serve("other")
	// Loopback servers on a port that a wildcard grants: only the address
	// check stands between them and the plug-in.
	loop4, lport := serve("loopback v4")
	l6, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	var hits6 atomic.Int32
	loop6 := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits6.Add(1); io.WriteString(w, "loopback v6") }))
	loop6.Listener = l6
	loop6.Start()
	t.Cleanup(loop6.Close)
	port6 := l6.Addr().(*net.TCPAddr).Port
	targets := fmt.Sprintf("{targets: [%s, \"http://*:%s\", \"http://*:%d\"], allow_any: true}", granted.URL, lport, port6)
	mf := fmt.Sprintf("name: fetcher\nversion: 1.0.0\nkind: extism\nactions: [{name: fetch}]\ncapabilities: {http: %s}\n", targets)
	if err := os.WriteFile(filepath.Join(dir, "moat.yaml"), []byte(mf), 0o644); err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(t.TempDir(), "egress.yaml")
	pf := fmt.Sprintf("name: egress\non_ungranted: deny_at_call\ndefault:\n  capabilities:\n    http: {targets: [\"http://127.0.0.1:%s\", \"http://*:%s\", \"http://*:%d\"], allow_any: true}\n", gport, lport, port6)
	if err := os.WriteFile(profile, []byte(pf), 0o644); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	r := moat(t, "", "run", "--data", data, "--profile", profile, "--confine", "strict", dir, "fetch", "--input", granted.URL+"/")
	if r.code != 0 || r.stdout != "200 granted" {
		t.Fatalf("granted target: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = moat(t, "", "run", "--data", data, "--profile", profile, "--confine", "strict", dir, "fetch", "--input", other.URL+"/")
	if r.code == 0 || !strings.Contains(r.stderr, "denied") {
		t.Fatalf("another port: exit %d, stdout %q, stderr %q; want a denial", r.code, r.stdout, r.stderr)
	}
	// The address forms of issue 13, under the confined host: refused by
	// the one egress check, whatever form the destination is written in.
	loop := func(ap string) string {
		return ap + " is a loopback address, and no granted target names it (a grant of http://" + ap + " would)"
	}
	zone := func(in string) string {
		return "[" + in + "]: an IPv6 zone (%lo) is not allowed in a destination; it names a local interface, and the address with it is no address a grant names"
	}
	for _, tc := range []struct{ url, reason string }{
		{fmt.Sprintf("http://2130706433:%s/", lport), "http_request GET http://127.0.0.1:" + lport + ": " + loop("127.0.0.1:"+lport)},
		{fmt.Sprintf("http://0x7f.1:%s/", lport), "http_request GET http://127.0.0.1:" + lport + ": " + loop("127.0.0.1:"+lport)},
		{fmt.Sprintf("http://[::ffff:127.0.0.1]:%s/", lport), "http_request GET http://127.0.0.1:" + lport + ": " + loop("127.0.0.1:"+lport)},
		{fmt.Sprintf("http://[::1]:%d/", port6), fmt.Sprintf("http_request GET http://[::1]:%d: ", port6) + loop(fmt.Sprintf("[::1]:%d", port6))},
		{fmt.Sprintf("http://[::1%%25lo]:%d/", port6), fmt.Sprintf("http_request http://[::1%%lo]:%d: ", port6) + zone("::1%lo")},
		{fmt.Sprintf("http://[::%%25lo]:%d/", port6), fmt.Sprintf("http_request http://[::%%lo]:%d: ", port6) + zone("::%lo")},
		{fmt.Sprintf("http://[fd00:ec2::254%%25lo]:%d/", port6), fmt.Sprintf("http_request http://[fd00:ec2::254%%lo]:%d: ", port6) + zone("fd00:ec2::254%lo")},
		{granted.URL + "/redirect?to=" + url.QueryEscape(fmt.Sprintf("http://[::1%%25lo]:%d/", port6)), "http_request GET " + granted.URL + ": redirect to " + fmt.Sprintf("http://[::1%%lo]:%d: ", port6) + zone("::1%lo")},
	} {
		r := moat(t, "", "run", "--data", data, "--profile", profile, "--confine", "strict", dir, "fetch", "--input", tc.url)
		if r.code == 0 || !strings.Contains(r.stderr, "denied: "+tc.reason) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want denied: %s", tc.url, r.code, r.stdout, r.stderr, tc.reason)
		}
	}
	if n := loop4.hits.Load(); n != 0 || hits6.Load() != 0 {
		t.Errorf("the loopback servers got %d and %d requests, want none", n, hits6.Load())
	}

	// The same plug-in in a confined moat serve, its organization on the
	// same profile: the server's Extism driver takes the same path.
	key := strings.TrimSpace(moat(t, "", "keys", "create", "--data", data, "--org", "acme", "--user", "ann", "--role", "admin").stdout)
	cfg := filepath.Join(t.TempDir(), "moat-server.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("profiles: {acme: %s}\n", profile)), 0o644); err != nil {
		t.Fatal(err)
	}
	var rest bytes.Buffer
	_, base := startServe(t, &rest, "--config", cfg, "--data", data, "--listen", "127.0.0.1:0", "--confine", "strict")
	post := func(path, ct string, body io.Reader) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+path, body)
		req.Header.Set("Authorization", "Bearer "+key)
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	wasm, _ := os.ReadFile(filepath.Join(dir, "fetcher.wasm"))
	up, upType := moduleForm(wasm, []byte(mf))
	if code, out := post("/v1/modules", upType, up); code != 201 {
		t.Fatalf("upload to moat serve: %d %s\n%s", code, out, rest.String())
	}
	if code, out := post("/v1/modules/fetcher/actions/fetch", "", strings.NewReader(granted.URL+"/")); code != 200 || out != "200 granted" {
		t.Fatalf("moat serve, granted target: %d %q", code, out)
	}
	for _, u := range []string{
		fmt.Sprintf("http://[::1%%25lo]:%d/", port6),
		fmt.Sprintf("http://[fd00:ec2::254%%25lo]:%d/", port6),
		fmt.Sprintf("http://2130706433:%s/", lport),
		granted.URL + "/redirect?to=" + url.QueryEscape(fmt.Sprintf("http://[::%%25lo]:%d/", port6)),
	} {
		if code, out := post("/v1/modules/fetcher/actions/fetch", "", strings.NewReader(u)); code != 403 || !strings.Contains(out, "denied") {
			t.Errorf("moat serve, %s: %d %s; want 403 denied", u, code, out)
		}
	}
	if n := loop4.hits.Load(); n != 0 || hits6.Load() != 0 {
		t.Errorf("through moat serve the loopback servers got %d and %d requests, want none", n, hits6.Load())
	}
}

type countingServer struct {
	*httptest.Server
	hits atomic.Int32
}
