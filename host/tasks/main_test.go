package tasks_test

import (
	"os"
	"testing"

	"github.com/moat-sandbox/moat/internal/testwasm"
)

// compileCache is the compilation cache every test's host shares: the
// tasker guest then compiles to machine code once per its bytes with the
// repository's toolchains (testwasm.SharedCompileCache), else once per
// run, instead of once per host (about 1 s of CPU each, two or three hosts a test). wazero's
// cache is keyed by the module's bytes and written by rename, so hosts
// side by side share it safely; no test here asserts on a cold cache.
var compileCache string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "moat-tasks-cache-")
	if err != nil {
		panic(err)
	}
	compileCache = dir
	if shared := testwasm.SharedCompileCache(); shared != "" {
		compileCache = shared // once per guest's bytes, not once per run
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
