package python_test

import (
	"testing"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/internal/interptest"
)

// The package's tests share one host: the interpreter is compiled once.
var suite = &interptest.Suite{Language: "python", Module: "py-test", Snapshots: true}

func TestMain(m *testing.M) { interptest.Main(m, suite) }

type runOpts = interptest.RunOpts

// run runs an artifact the way the executor does (see interptest.Suite.Run).
func run(t testing.TB, a *languages.Artifact, o runOpts) (interptest.RunResult, error) {
	t.Helper()
	return suite.Run(t, a, o)
}

// build builds files (name, content, name, content...).
func build(t testing.TB, files ...string) *languages.Artifact {
	t.Helper()
	return suite.Build(t, files...)
}
