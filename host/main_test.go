package host_test

import (
	"os"
	"testing"

	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testwasm"
	"github.com/moat-sandbox/moat/policy/kernel"
)

// compileCache is the compilation cache of the hosts most tests start
// (newHost and the fixtures beside it): compiling the Go guest to machine
// code is most of this package's CPU, and with a cache per host each test
// paid it again. wazero's cache is keyed by the module's bytes and
// written by rename, so hosts side by side share it safely. The tests of
// the cache itself (TestCompileCacheAcrossHosts, TestLoadFirstTime,
// TestLoadCacheUnwritable) keep a directory of their own.
var compileCache string

// Most of this package's tests call t.Parallel(): each starts hosts of
// its own (its own data directory, store and audit trail) and mostly
// waits on a guest, a server or a subprocess, so two side by side keep
// the cores busy where one at a time left one idle. The ones that do not
// assert a wall-clock bound (a deadline met within a slack, a cancel
// within 300 ms, a fetch within its timeout: TestHostile, TestCancel,
// TestMediaFetchHoldsMemory, and those under testenv.Timing), measure
// the process's own heap (TestHostilePooledTableStaysBounded), set an
// environment variable (TestAIGuest), register into the package-wide
// driver table while the test runs (TestRegisterRefusesTakenKinds,
// TestDriverKindFromTestFiles) or are a soak. go test runs those first,
// one at a time, and the parallel ones after them.

// TestMain lets this test binary serve as the confinement wrapper of the
// native plugins its tests start (native.Spec.Wrapper's default: the
// running executable, which must call kernel.ConfineMain first).
func TestMain(m *testing.M) {
	kernel.ConfineMain()
	native.LauncherMain()
	dir, err := os.MkdirTemp("", "moat-host-cache-")
	if err != nil {
		panic(err)
	}
	compileCache = dir
	if shared := testwasm.SharedCompileCache(); shared != "" {
		// The Go guests' machine code (goguest, dbguest, mediaguest,
		// ...: 10-15 CPU-seconds each) is then compiled once per
		// guest's bytes, not once per go test.
		compileCache = shared
	}
	code := m.Run()
	os.RemoveAll(dir)
	pgtest.Stop() // the throwaway PostgreSQL cluster of the db and task tests and benchmarks, if one was started
	os.Exit(code)
}
