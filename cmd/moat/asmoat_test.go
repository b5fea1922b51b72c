package main

import (
	"os"
	"path/filepath"

	"github.com/moat-sandbox/moat/host/native"
	"github.com/moat-sandbox/moat/policy/kernel"
)

// init makes this test binary moat itself when it runs under the name
// moat: TestMain links it as moat into its temp dir (moatBin) instead of
// building moat a second time, which cost a compile of this package and
// a link of the whole binary (10-20 CPU-seconds after a change low in
// the tree) before any test could start. It runs before the testing
// package parses its flags, so moat sees its own command line.
//
// The re-executions moat makes of itself come first, as in main: a
// confined child, a launcher or a backstop watcher is started through
// /proc/self/exe or os.Executable with its variable set, whatever its
// argv[0]; without this they would run the test suite instead.
func init() {
	kernel.ConfineMain()
	native.LauncherMain()
	backstopWatchMain()
	if filepath.Base(os.Args[0]) == "moat" {
		main()
	}
}
