// Command fsguest is a test fixture: a moat plugin (Go, -buildmode=c-shared)
// whose one action, fs, runs the file operation its input describes
// (package fsops) in the directories its manifest is granted, and returns
// what the guest observed: the file-grant tests drive every hostile case
// through it.
package main

import (
	moat "github.com/moat-sandbox/moat/guests/go"
	"github.com/moat-sandbox/moat/testdata/fsguest/fsops"
)

func init() {
	moat.Action("fs", func(in []byte) ([]byte, error) { return []byte(fsops.Do(string(in))), nil })
}

func main() {}
