package golang

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/policy/kernel"
	"github.com/moat-sandbox/moat/toolchains"
)

// TestMain serves as the confinement wrapper and the launcher when the
// runner re-executes this binary for the confined go command.
func TestMain(m *testing.M) {
	kernel.ConfineMain()
	native.LauncherMain()
	os.Exit(m.Run())
}

// rebuildGoal is issue 35's bound on a Go plugin's rebuild after a
// one-line change, on a quiet machine.
const rebuildGoal = 3 * time.Second

// stageTimes collects stageTimer's reports of one build.
type stageTimes struct {
	mu sync.Mutex
	d  map[string]time.Duration
}

func (s *stageTimes) add(stage string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.d[stage] += d
}

func (s *stageTimes) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.d))
	for n := range s.d {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, " %s=%s", n, s.d[n].Round(time.Millisecond))
	}
	return b.String()
}

// needGo skips without a Go toolchain (fails under MOAT_REQUIRE_TOOLS),
// and without root or user namespaces for the confined compiler.
func needGo(t testing.TB) {
	t.Helper()
	if err := Go.Available(); err != nil {
		testenv.Require(t, fmt.Sprintf("go: %v", err))
	}
}

// machineState is the seed's directory the package's tests share with
// languages/all's (keyed by the toolchain's version and content, so
// reusing it across runs is safe): one standard library build per
// machine, not per test run.
func machineState(t testing.TB) string {
	d := filepath.Join(os.TempDir(), "moat-test-lang-state", "go")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// buildPlugin builds the plugin in dir as moat build does, reporting the
// time of each stage into st (when not nil).
func buildPlugin(t testing.TB, dir, machine string, st *stageTimes) ([]byte, time.Duration, error) {
	t.Helper()
	work, err := os.MkdirTemp("", "moat-build-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	if st != nil {
		stageTimer = st.add
		defer func() { stageTimer = nil }()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	began := time.Now()
	wasm, err := Go.BuildPlugin(ctx, languages.BuildEnv{WorkDir: work, ToolchainDir: toolchains.Dir(), StateDir: t.TempDir(), MachineStateDir: machine}, dir)
	return wasm, time.Since(began), err
}

// copyExample copies examples/NAME into a fresh directory the job uid can
// read.
func copyExample(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join("..", "..", "examples", name)
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || strings.HasSuffix(e.Name(), ".wasm") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestPluginRebuild: examples/hello-go built, then rebuilt after a
// one-line change, as `moat build` does, with each stage's time logged.
// The rebuild compiles the plugin's own package and links, nothing of the
// SDK: its time is held to issue 35's goal when the machine is quiet
// enough for a wall-clock bound to mean anything.
func TestPluginRebuild(t *testing.T) {
	testenv.Slow(t, "two Go plugin builds (2-10 s; the first on a machine also compiles the standard library, 40 s)")
	needGo(t)
	testenv.Timing(t)
	dir := copyExample(t, "hello-go")
	machine := machineState(t)
	first := &stageTimes{d: map[string]time.Duration{}}
	wasm1, d1, err := buildPlugin(t, dir, machine, first)
	if err != nil {
		t.Fatal(err)
	}
	main := filepath.Join(dir, "main.go")
	src, err := os.ReadFile(main)
	if err != nil {
		t.Fatal(err)
	}
	changed := bytes.Replace(src, []byte(`greeting = "Hello"`), []byte(`greeting = "Hallo"`), 1)
	if bytes.Equal(changed, src) {
		t.Fatal("examples/hello-go/main.go has no `greeting = \"Hello\"` line to change")
	}
	if err := os.WriteFile(main, changed, 0o644); err != nil {
		t.Fatal(err)
	}
	second := &stageTimes{d: map[string]time.Duration{}}
	wasm2, d2, err := buildPlugin(t, dir, machine, second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first build %s:%s", d1.Round(time.Millisecond), first)
	t.Logf("rebuild after a one-line change %s:%s", d2.Round(time.Millisecond), second)
	if bytes.Equal(wasm1, wasm2) || !bytes.Contains(wasm2, []byte("Hallo")) {
		t.Fatal("the rebuild did not build the changed source")
	}
	checkSDKLayer(t, machine)
	if load := loadAverage(); d2 > rebuildGoal {
		if load < 1.5 {
			t.Errorf("rebuild took %s at load %.1f, goal %s", d2, load, rebuildGoal)
		} else {
			t.Logf("rebuild took %s, over the goal of %s, at load %.1f (not held to it on a loaded machine)", d2, rebuildGoal, load)
		}
	}
}

// checkSDKLayer: the SDK layer the builds used is complete, holds only
// what the seed lacks (the SDK's packages, not a second copy of the
// standard library), and, as root, is root's and read-only to the job
// uids that link its files into their caches.
func checkSDKLayer(t *testing.T, machine string) {
	t.Helper()
	layers, _ := filepath.Glob(filepath.Join(machine, "gocache-*-sdk-*"))
	var layer string
	for _, l := range layers {
		if _, err := os.Stat(filepath.Join(l, ".complete")); err == nil {
			layer = l
		}
	}
	if layer == "" {
		t.Fatalf("no complete SDK layer in %s: %v", machine, layers)
	}
	seed := layer[:strings.Index(layer, "-sdk-")]
	n := 0
	err := filepath.WalkDir(layer, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(layer, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			st := fi.Sys().(*syscall.Stat_t)
			if st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
				t.Errorf("%s: uid %d mode %v, want root's and writable by root alone", rel, st.Uid, fi.Mode())
			}
		}
		if d.IsDir() || !strings.ContainsRune(rel, os.PathSeparator) {
			return nil
		}
		n++
		if _, err := os.Lstat(filepath.Join(seed, rel)); err == nil {
			t.Errorf("%s is in the seed too: the layer should hold only what the seed lacks", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || n > 100 {
		t.Errorf("the SDK layer holds %d entries, want the SDK's few packages", n)
	}
}

// loadAverage is the machine's one-minute load average (0 when unknown).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	fmt.Sscanf(string(b), "%f", &l)
	return l
}
