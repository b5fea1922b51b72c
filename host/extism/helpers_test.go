package extism_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/host"
	_ "github.com/moat-sandbox/moat/host/extism"
	"github.com/moat-sandbox/moat/host/hosttest"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy"
)

// cacheDir is one compilation cache for the package's hosts: each Go
// plug-in (about 3 MB) is compiled once per its bytes with the
// repository's toolchains (testwasm.SharedCompileCache), else once per
// run, and not once per test.
var cacheDir string

// Most tests call t.Parallel(): each loads its own plug-ins into hosts
// of its own and mostly waits on a call or a server. The ones that stay
// sequential (go test runs them first, alone) measure what the whole
// process allocated during a call (budget_test.go: a test beside them
// would be counted as theirs), assert a deadline within a slack, give
// each call a few seconds (TestStock: beside another test at load 30 a
// 5 s call ran out of time) or take testenv.Timing.
func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "moat-extism-cache-")
	if err != nil {
		panic(err)
	}
	cacheDir = d
	if shared := testwasm.SharedCompileCache(); shared != "" {
		cacheDir = shared // once per plug-in's bytes, not once per run
	}
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// requireTool skips the test when a tool is missing, or fails it when
// MOAT_REQUIRE_TOOLS is set (CI, after `make toolchains`).
func requireTool(t testing.TB, format string, args ...any) {
	t.Helper()
	testenv.Require(t, fmt.Sprintf(format, args...))
}

// buildPlugin builds testdata/extism/NAME (testwasm.BuildExtism).
func buildPlugin(t testing.TB, name string) []byte { return testwasm.BuildExtism(t, name) }

// newHost starts a host with its own data directory, the shared
// compilation cache and profile (nil: the built-in minimal). Its log goes
// to logs when that is not nil.
func newHost(t testing.TB, profile *policy.Profile, logs io.Writer) *host.Host {
	return newHostWith(t, profile, logs, nil)
}

// newHostWith is newHost with the configuration changed by edit (a
// test's own DNS server as the Resolver, secrets).
func newHostWith(t testing.TB, profile *policy.Profile, logs io.Writer, edit func(*host.Config)) *host.Host {
	t.Helper()
	if logs == nil {
		logs = io.Discard
	}
	ctx := context.Background()
	cfg := host.Config{
		DataDir: t.TempDir(), CacheDir: cacheDir, Profile: profile,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if edit != nil {
		edit(&cfg)
	}
	h := hosttest.New(t, cfg)
	t.Cleanup(func() { h.Close(ctx) })
	return h
}

func manifest(t testing.TB, yaml string) *policy.Manifest {
	t.Helper()
	mf, err := policy.ParseManifest("moat.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

func profile(t testing.TB, yaml string) *policy.Profile {
	t.Helper()
	p, err := policy.ParseProfile("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// syncBuffer is a log sink safe for the host's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
