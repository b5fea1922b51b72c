// Command extractstdlib copies CPython's standard library out of
// python.wasm into the toolchain directory, where package python mounts it
// for every run (see python.ExtractStdlib for why). `make toolchains` runs
// it after installing the interpreter:
//
//	go run ./languages/python/internal/extractstdlib [-toolchains DIR]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/moat-sandbox/moat/languages/python"
	"github.com/moat-sandbox/moat/toolchains"
)

func main() {
	dir := flag.String("toolchains", toolchains.Dir(), "the toolchain directory (default: $"+toolchains.EnvDir+", or .toolchains above the working directory)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "extractstdlib: no toolchain directory: run `make toolchains`, or pass -toolchains DIR")
		os.Exit(2)
	}
	wasm, err := python.Interpreter(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "extractstdlib:", err)
		os.Exit(1)
	}
	if err := python.ExtractStdlib(context.Background(), wasm, *dir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "extractstdlib:", err)
		os.Exit(1)
	}
}
