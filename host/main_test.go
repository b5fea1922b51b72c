package host_test

import (
	"os"
	"testing"

	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/policy/kernel"
)

// TestMain lets this test binary serve as the confinement wrapper of the
// native plugins its tests start (native.Spec.Wrapper's default: the
// running executable, which must call kernel.ConfineMain first).
func TestMain(m *testing.M) {
	kernel.ConfineMain()
	native.LauncherMain()
	code := m.Run()
	pgtest.Stop() // the throwaway PostgreSQL cluster of the db and task tests and benchmarks, if one was started
	os.Exit(code)
}
