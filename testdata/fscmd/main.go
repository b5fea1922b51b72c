// Command fscmd is a test fixture: a WASI command that runs the file
// operation its arguments describe (package fsops, the arguments joined
// with spaces) and prints what it observed, for the file-grant tests of
// Module.Run.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/moat-sandbox/moat/testdata/fsguest/fsops"
)

func main() {
	fmt.Print(fsops.Do(strings.Join(os.Args[1:], " ")))
}
