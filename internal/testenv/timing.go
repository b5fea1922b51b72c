package testenv

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TimingLockName is the file, in os.TempDir(), whose lock Timing holds
// unless EnvTimingLock names another.
const TimingLockName = "moat-timing.lock"

// EnvTimingLock is the variable naming the file whose lock Timing holds
// instead of TimingLockName in os.TempDir(). `make check` sets it to a
// file of its own run: the inner loop's timing tests then wait for one
// another, not for every other test run on the machine (on a machine
// shared by several engineers, TestDeadlineHostile once waited 8 minutes
// for other worktrees' timing tests before it started, and its package
// ran out of time). `make test`, CI's, leaves it unset.
const EnvTimingLock = "MOAT_TIMING_LOCK"

// timingMu serializes Timing within one test binary: flock belongs to the
// open file description, so two descriptors of one process exclude each
// other too, but taking the mutex first keeps a parallel test from
// holding a descriptor while it waits.
var timingMu sync.Mutex

// Timing makes t one of the timing-sensitive tests (a deadline, a sleep,
// admission or fairness, an interrupt, a CPU or cgroup bound, "answered
// within"), which never run at the same time as one another, in any test
// binary on this machine, until t and its subtests end.
//
// Why a lock and not -p 1: such a test asserts a wall-clock bound, and
// the bound holds only if the cores are not taken by another test of the
// same kind. The rest of the suite (servers and subprocesses that mostly
// wait) can share the cores, so `make test` runs two packages at a time
// and the I/O-bound tests call t.Parallel(); the timing tests take this
// lock instead, so at most one of them runs at once even across packages.
// It is an flock on a file in os.TempDir() (which go test gives every
// package the same), or the one EnvTimingLock names, released by the
// kernel when the holder exits, so a killed test binary never leaves it
// held.
//
// A test skips before it calls Timing, never after (testenv.Slow, a
// missing tool, -short): the lock is shared by every moat test binary on
// the machine, other worktrees' too, so a test that takes it only to skip
// can wait minutes for nothing while it holds one of go test's -p slots
// (TestThumbnailMemoryBounded waited 266 s under make check to skip).
//
// Timing does not make a bound hold on an overloaded machine (another
// user's build still competes); it removes the competition the suite
// itself creates. A test that calls Timing must not call t.Parallel(),
// and neither may its subtests call Timing again (they hold it already).
func Timing(t testing.TB) {
	t.Helper()
	timingMu.Lock()
	path := os.Getenv(EnvTimingLock)
	if path == "" {
		path = filepath.Join(os.TempDir(), TimingLockName)
	}
	// Open before create: with fs.protected_regular, O_CREAT on another
	// user's file in a sticky /tmp fails even though it exists.
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		f, err = os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o666)
	}
	if err != nil {
		timingMu.Unlock()
		t.Fatalf("timing lock %s: %v", path, err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		timingMu.Unlock()
		t.Fatalf("timing lock %s: %v", path, err)
	}
	t.Cleanup(func() {
		// Closing the file releases the flock.
		f.Close()
		timingMu.Unlock()
	})
}
