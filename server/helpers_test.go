package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy/kernel"
	"github.com/moat-sandbox/moat/server"
	"github.com/moat-sandbox/moat/toolchains"
)

// cacheDir is the compilation cache every test server shares, so that
// hello-go (3 MB of Go) is compiled once per test binary, not per test.
var cacheDir string

// TestMain also serves as the confinement wrapper and the native
// launcher when the test binary is re-executed as one: the code executor
// runs compilers and native programs that way.
func TestMain(m *testing.M) {
	kernel.ConfineMain()
	native.LauncherMain()
	dir, err := os.MkdirTemp("", "moat-server-cache")
	if err != nil {
		panic(err)
	}
	cacheDir = dir
	if d := toolchains.Dir(); d != "" {
		// The interpreters' machine code (ruby.wasm takes 12 s to
		// compile) is the same for every package's tests: kept where
		// languages' tests keep it (interptest.CacheDir).
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			cacheDir = filepath.Join(d, "cache", "wazero")
		}
	}
	code := m.Run()
	pgtest.Stop() // the throwaway PostgreSQL cluster, if a test started one
	os.RemoveAll(dir)
	os.Exit(code)
}

// testServer is a real server on a loopback port with its own data
// directory.
type testServer struct {
	*server.Server
	URL  string
	dir  string
	done chan error
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// start starts a server in dir (a fresh one when dir is empty) with the
// configuration changed by edit, and shuts it down at the end of the test.
func start(t testing.TB, dir string, edit func(*server.Config)) *testServer {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	cfg := server.DefaultConfig()
	cfg.DataDir = dir
	cfg.CacheDir = cacheDir
	cfg.Listen = "127.0.0.1:0"
	cfg.Logger = quietLogger()
	if edit != nil {
		edit(&cfg)
	}
	srv, err := server.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: srv, URL: "http://" + ln.Addr().String(), dir: dir, done: make(chan error, 1)}
	go func() { ts.done <- srv.Serve(ln) }()
	t.Cleanup(func() { ts.stop(t) })
	return ts
}

func (ts *testServer) stop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// key creates an API key in the server's store.
func (ts *testServer) key(t testing.TB, org, user string, roles ...string) string {
	t.Helper()
	secret, _, err := server.CreateAPIKey(context.Background(), ts.Store(), server.NewAPIKey{Org: org, User: user, Roles: roles})
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response %d is not a JSON object: %v\n%s", r.status, err, r.body)
	}
	return m
}

var client = &http.Client{Timeout: 60 * time.Second}

// do sends a request; key may be empty, headers come in pairs.
func (ts *testServer) do(t testing.TB, method, path, key string, body io.Reader, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// helloWasm builds examples/hello-go as `make examples` does.
func helloWasm(t testing.TB) []byte {
	return testwasm.BuildGo(t, "./examples/hello-go", true)
}

func helloManifest(t testing.TB) []byte {
	b, err := os.ReadFile(filepath.Join(testwasm.RepoRoot(t), "examples/hello-go/moat.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tinyWasm is testdata/plugin.wasm (784 bytes, written by hand in
// testdata/wat/plugin.wat): for tests of what the server does with an
// upload (confirmations, versions, quotas, signatures), where a variant of
// hello-go would cost a compile of a Go guest's machine code per variant
// (7-12 s each under load) for the same path.
func tinyWasm(t testing.TB) []byte {
	b, err := os.ReadFile(filepath.Join(testwasm.RepoRoot(t), "testdata/plugin.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tinyManifest is a manifest for tinyWasm named name, its action echo
// followed by the action lines extra ("    confirm: true\n"), with
// hello-go's capabilities and config.
func tinyManifest(name, extra string) []byte {
	return []byte("name: " + name + "\nversion: 0.1.0\nkind: moat\nactions:\n  - name: echo\n" + extra +
		"capabilities:\n  kv: true\nconfig:\n  greeting: Hello\n")
}

// multipartUpload builds an upload body from parts name → content.
func multipartUpload(t testing.TB, parts map[string][]byte) (io.Reader, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for name, content := range parts {
		fw, err := w.CreateFormFile(name, name)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(content)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf, w.FormDataContentType()
}

// upload uploads wasm with a manifest and returns the response.
func (ts *testServer) upload(t testing.TB, key string, wasm, manifest []byte) response {
	t.Helper()
	parts := map[string][]byte{"module": wasm}
	if manifest != nil {
		parts["manifest"] = manifest
	}
	body, ct := multipartUpload(t, parts)
	return ts.do(t, "POST", "/v1/modules", key, body, "Content-Type", ct)
}

// renamed returns the hello-go manifest under another name with its greet
// action replaced by action (YAML of one list item's fields).
func renamed(t testing.TB, name, action string) []byte {
	m := string(helloManifest(t))
	m = strings.Replace(m, "name: hello-go", "name: "+name, 1)
	m = strings.Replace(m, "  - name: greet\n", "  - name: greet\n"+action, 1)
	return []byte(m)
}
