package main_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/server"
)

// TestSessionCLI: moat session create, run (state kept between runs),
// files put/get/ls/rm, fork, pause, resume and kill against a real server on loopback; a run
// whose code raises exits non-zero with the exception.
func TestSessionCLI(t *testing.T) {
	testenv.Slow(t, "the server compiles CPython on its first context (15 s); server's TestSessionLifecycle covers the routes under -short")
	t.Parallel()
	cfg := server.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.CacheDir = os.Getenv("MOAT_CACHE_DIR")
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); srv.Close(context.Background()) })
	key, _, err := server.CreateAPIKey(context.Background(), srv.Store(), server.NewAPIKey{Org: "acme", User: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	env := []string{"MOAT_SERVER=" + hs.URL, "MOAT_API_KEY=" + key}
	sh := func(args ...string) result { return moatEnvIn(t, work, env, append([]string{"session"}, args...)...) }

	r := sh("create")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("create: %+v", r)
	}
	if r = sh("run", id, "x = 21\nprint('hi')"); r.code != 0 || r.stdout != "hi\n" {
		if strings.Contains(r.stderr, "toolchain") {
			t.Skipf("no interpreter: %s", r.stderr)
		}
		t.Fatalf("run: %+v", r)
	}
	if r = sh("run", id, "x * 2"); r.code != 0 || r.stdout != "42\n" {
		t.Fatalf("state kept: %+v", r)
	}
	if r = sh("run", id, "1/0"); r.code == 0 || !strings.Contains(r.stderr, "ZeroDivisionError") {
		t.Fatalf("an exception: %+v", r)
	}
	local := filepath.Join(work, "in.txt")
	if err := os.WriteFile(local, []byte("uploaded"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r = sh("files", "put", id, "d/in.txt", local); r.code != 0 {
		t.Fatalf("put: %+v", r)
	}
	if r = sh("run", id, "open('d/in.txt').read().upper()"); r.stdout != "'UPLOADED'\n" {
		t.Fatalf("code reads the upload: %+v", r)
	}
	if r = sh("files", "get", id, "/home/user/d/in.txt"); r.stdout != "uploaded" {
		t.Fatalf("get: %+v", r)
	}
	if r = sh("files", "ls", id, "d"); !strings.Contains(r.stdout, "/home/user/d/in.txt") {
		t.Fatalf("ls: %+v", r)
	}
	if r = sh("files", "get", id, "../etc/passwd"); r.code == 0 {
		t.Fatalf("a path out: %+v", r)
	}
	if r = sh("files", "rm", id, "d"); r.code != 0 {
		t.Fatalf("rm: %+v", r)
	}
	r = sh("fork", id)
	kid := strings.TrimSpace(r.stdout)
	if r.code != 0 || kid == "" {
		t.Fatalf("fork: %+v", r)
	}
	if r = sh("run", kid, "x += 1\nx"); r.stdout != "22\n" {
		t.Fatalf("the copy's x: %+v", r)
	}
	if r = sh("pause", id); r.code != 0 {
		t.Fatalf("pause: %+v", r)
	}
	if r = sh("resume", id); r.code != 0 {
		t.Fatalf("resume: %+v", r)
	}
	if r = sh("run", id, "x"); r.stdout != "21\n" {
		t.Fatalf("the parent's x after the copy's x += 1, paused and resumed: %+v", r)
	}
	if r = sh("kill", id); r.code != 0 {
		t.Fatalf("kill: %+v", r)
	}
	if r = sh("run", id, "x"); r.code == 0 || !strings.Contains(r.stderr, "no such session") {
		t.Fatalf("after kill: %+v", r)
	}
}
