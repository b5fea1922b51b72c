package javascript_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/toolchains"
)

// The package's tests share one host: the interpreter is compiled once.
var (
	testHost *host.Host
	testLog  syncBuffer
)

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "moat-js-test-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		ctx := context.Background()
		testHost, err = host.New(ctx, host.Config{
			DataDir:  dir,
			CacheDir: cacheDir(dir),
			Logger:   slog.New(slog.NewJSONHandler(&testLog, &slog.HandlerOptions{Level: slog.LevelDebug})),
		})
		if err != nil {
			panic(err)
		}
		defer testHost.Close(ctx)
		return m.Run()
	}()
	os.Exit(code)
}

// cacheDir keeps compiled interpreters between test runs when `make
// toolchains` made a .toolchains directory, so a second `go test` does not
// recompile them.
func cacheDir(tmp string) string {
	if d := toolchains.Dir(); isDir(d) {
		return filepath.Join(d, "cache", "wazero")
	}
	return filepath.Join(tmp, "cache")
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runOpts are the parts of a run a test varies.
type runOpts struct {
	stdin    string
	args     []string
	env      map[string]string
	ops      bool
	manifest string // moat.yaml text; empty: no manifest (no kv grant)
	mf       *policy.Manifest
	user     string // principal user, org "acme"
	limits   host.Limits
}

type runResult struct {
	stdout, stderr string
	code           uint32
}

// run runs an artifact the way the executor does: load the interpreter,
// write Files to a directory mounted read-only at /src, and run it with
// Artifact.Args before the user's arguments.
func run(t testing.TB, a *languages.Artifact, o runOpts) (runResult, error) {
	t.Helper()
	ctx := context.Background()
	lo := host.LoadOptions{Name: "js-test"}
	if o.manifest != "" {
		mf, err := policy.ParseManifest("moat.yaml", []byte(o.manifest))
		if err != nil {
			t.Fatal(err)
		}
		lo = host.LoadOptions{Manifest: mf}
	}
	if o.mf != nil {
		lo = host.LoadOptions{Manifest: o.mf}
	}
	m, err := testHost.Load(ctx, a.WASM, lo)
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	for _, f := range a.Files {
		p := filepath.Join(src, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{}
	for k, v := range a.Env {
		env[k] = v
	}
	for k, v := range o.env {
		env[k] = v
	}
	user := o.user
	if user == "" {
		user = "ann"
	}
	if o.limits.Timeout == 0 {
		o.limits.Timeout = 20 * time.Second
	}
	var stdout, stderr bytes.Buffer
	res, err := m.Run(ctx, host.RunRequest{
		Stdin:     strings.NewReader(o.stdin),
		Stdout:    &stdout,
		Stderr:    &stderr,
		Args:      append(append([]string(nil), a.Args...), o.args...),
		Env:       env,
		Principal: policy.Principal{User: user, Org: "acme"},
		Limits:    o.limits,
		Mounts:    []host.Mount{{HostDir: src, GuestPath: "/src", ReadOnly: true}},
		Ops:       o.ops,
	})
	return runResult{stdout: stdout.String(), stderr: stderr.String(), code: res.ExitCode}, err
}

// build builds files (name, content, name, content...) as JavaScript.
func build(t testing.TB, files ...string) *languages.Artifact {
	t.Helper()
	l, err := languages.Lookup("js")
	if err != nil {
		t.Fatal(err)
	}
	var src languages.Source
	for i := 0; i+1 < len(files); i += 2 {
		src.Files = append(src.Files, languages.File{Name: files[i], Content: []byte(files[i+1])})
	}
	if vs := l.Validate(src, languages.ValidationProfile{}); len(vs) > 0 {
		t.Fatalf("validate: %v", vs)
	}
	a, err := l.Build(context.Background(), languages.BuildEnv{WorkDir: t.TempDir()}, src)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return p != "" && err == nil && fi.IsDir()
}
