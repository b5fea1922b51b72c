// Package interptest is the shared test support of the interpreted
// languages (javascript, python, ruby): one host per test binary, so each
// interpreter compiles once; running an artifact exactly as the executor
// does; and CPU time per benchmark operation.
package interptest

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/toolchains"
)

// Suite is one language's test host. Create it in TestMain with Main.
type Suite struct {
	Language string // as languages.Lookup takes it
	Module   string // the module name runs load under; default Language + "-test"
	Host     *host.Host
	// Store and Audit are what Host runs on, opened by Main: the tests
	// read the rows and events their runs leave.
	Store *store.Store
	Audit *audit.Log
	Log   SyncBuffer // the host's log, JSON lines
	// Snapshots says the language starts resident instances from a
	// snapshot (languages.Snapshotter): TestResident then checks that
	// they do.
	Snapshots bool
}

// Main sets up the suite's host (its compilation cache kept in the
// toolchains directory when there is one, so a second `go test` does not
// recompile the interpreter), runs the tests and exits.
func Main(m *testing.M, s *Suite) {
	code := func() int {
		dir, err := os.MkdirTemp("", "moat-"+s.Language+"-test-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		ctx := context.Background()
		if s.Store, err = store.Open(ctx, dir); err != nil {
			panic(err)
		}
		defer s.Store.Close()
		log := slog.New(slog.NewJSONHandler(&s.Log, &slog.HandlerOptions{Level: slog.LevelDebug}))
		s.Audit = audit.New(s.Store, log)
		defer s.Audit.Close(ctx)
		s.Host, err = host.New(ctx, host.Config{DataDir: dir, CacheDir: CacheDir(dir), Store: s.Store, Audit: s.Audit, Logger: log})
		if err != nil {
			panic(err)
		}
		defer s.Host.Close(ctx)
		return m.Run()
	}()
	os.Exit(code)
}

// CacheDir is the wazero cache for tests: under .toolchains when `make
// toolchains` made it, else under tmp.
func CacheDir(tmp string) string {
	if d := toolchains.Dir(); d != "" {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return filepath.Join(d, "cache", "wazero")
		}
	}
	return filepath.Join(tmp, "cache")
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// RunOpts are the parts of a run a test varies.
type RunOpts struct {
	Stdin    string
	Args     []string
	Env      map[string]string
	Ops      bool
	Manifest string           // moat.yaml text; empty: no manifest (no kv grant)
	MF       *policy.Manifest // a parsed manifest, instead of Manifest
	User     string           // principal user (default ann), org acme
	Limits   host.Limits
}

// RunResult is what a run printed and its exit code.
type RunResult struct {
	Stdout, Stderr string
	Code           uint32
}

// Run runs an artifact the way the executor does: load the interpreter,
// write Files to a directory mounted read-only at /src, and run it with
// Artifact.Args before the user's arguments.
func (s *Suite) Run(t testing.TB, a *languages.Artifact, o RunOpts) (RunResult, error) {
	t.Helper()
	ctx := context.Background()
	name := s.Module
	if name == "" {
		name = s.Language + "-test"
	}
	lo := host.LoadOptions{Name: name}
	if o.Manifest != "" {
		mf, err := policy.ParseManifest("moat.yaml", []byte(o.Manifest))
		if err != nil {
			t.Fatal(err)
		}
		lo = host.LoadOptions{Manifest: mf}
	}
	if o.MF != nil {
		lo = host.LoadOptions{Manifest: o.MF}
	}
	m, err := s.Host.Load(ctx, a.WASM, lo)
	if err != nil {
		t.Fatal(err)
	}
	src := WriteFiles(t, a)
	env := map[string]string{}
	for k, v := range a.Env {
		env[k] = v
	}
	for k, v := range o.Env {
		env[k] = v
	}
	user := o.User
	if user == "" {
		user = "ann"
	}
	if o.Limits.Timeout == 0 {
		o.Limits.Timeout = 20 * time.Second
	}
	var stdout, stderr bytes.Buffer
	res, err := m.Run(ctx, host.RunRequest{
		Stdin:     strings.NewReader(o.Stdin),
		Stdout:    &stdout,
		Stderr:    &stderr,
		Args:      append(append([]string(nil), a.Args...), o.Args...),
		Env:       env,
		Principal: policy.Principal{User: user, Org: "acme"},
		Limits:    o.Limits,
		Mounts:    a.RunMounts(src),
		Ops:       o.Ops,
	})
	return RunResult{Stdout: stdout.String(), Stderr: stderr.String(), Code: res.ExitCode}, err
}

// Build builds files (name, content, name, content...) in the suite's
// language. A missing interpreter skips the test, except under
// MOAT_REQUIRE_TOOLS (CI), where it fails.
func (s *Suite) Build(t testing.TB, files ...string) *languages.Artifact {
	t.Helper()
	l, err := languages.Lookup(s.Language)
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
	if errors.Is(err, toolchains.ErrMissing) {
		testenv.Require(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// CPUTimer reports CPU time per operation next to wall time: on a shared
// machine wall time measures the neighbours as much as the code. who is
// RUSAGE_SELF for work in this process, RUSAGE_CHILDREN for subprocesses.
type CPUTimer struct {
	who   int
	start time.Duration
}

// StartCPU starts a CPUTimer.
func StartCPU(who int) CPUTimer { return CPUTimer{who: who, start: cpuTime(who)} }

// Report adds the cpu-ms/op metric to b.
func (c CPUTimer) Report(b *testing.B) {
	b.ReportMetric(float64(cpuTime(c.who)-c.start)/float64(b.N)/1e6, "cpu-ms/op")
}

func cpuTime(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// LoadScript loads a plugin from its source files (name, content, name,
// content...) the way moat run and moat serve do (languages.PluginSource,
// languages.BuildScriptPlugin): the interpreter serving mf's actions.
func (s *Suite) LoadScript(t testing.TB, mf *policy.Manifest, files ...string) *host.Module {
	t.Helper()
	m, err := s.load(t, mf, files...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// load is LoadScript returning the build's or the load's error.
func (s *Suite) load(t testing.TB, mf *policy.Manifest, files ...string) (*host.Module, error) {
	return s.loadIsolated(t, mf, "", files...)
}

// loadIsolated is load with the module's isolation.
func (s *Suite) loadIsolated(t testing.TB, mf *policy.Manifest, iso host.Isolation, files ...string) (*host.Module, error) {
	t.Helper()
	l, err := languages.Lookup(s.Language)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string][]byte{}
	for i := 0; i+1 < len(files); i += 2 {
		byName[files[i]] = []byte(files[i+1])
	}
	src, err := languages.PluginSource(l, byName)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := languages.BuildScriptPlugin(context.Background(), l, src, t.TempDir(), "")
	if errors.Is(err, toolchains.ErrMissing) {
		testenv.Require(t, err.Error())
	}
	if err != nil {
		return nil, err
	}
	return s.Host.Load(context.Background(), sp.WASM, host.LoadOptions{Manifest: mf, Script: sp.Script, Isolation: iso})
}

// WriteFiles writes the artifact's files into a new directory, the one
// mounted at /src.
func WriteFiles(t testing.TB, a *languages.Artifact) string {
	t.Helper()
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
	return src
}
