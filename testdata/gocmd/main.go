// Command gocmd is a WASI command fixture for moat's tests: it echoes its
// stdin, args and environment, and can loop, flood its output, exhaust its
// memory or exit with a chosen code. As a script (gocmd script, with the
// action in $MOAT_ACTION) it ends as its stdin says: "STATUS\nSTDOUT",
// the action's name going to stderr.
package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

var sink [][]byte

func main() {
	mode := ""
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	switch mode {
	case "loop":
		n := 0
		for {
			n++
		}
	case "flood":
		line := []byte(strings.Repeat("y", 1023) + "\n")
		for {
			os.Stdout.Write(line)
		}
	case "alloc":
		for {
			sink = append(sink, make([]byte, 1<<20))
		}
	case "script":
		in, _ := io.ReadAll(os.Stdin)
		status, out, _ := strings.Cut(string(in), "\n")
		code, _ := strconv.Atoi(status)
		fmt.Fprintln(os.Stderr, "script action", os.Getenv("MOAT_ACTION"), "exits", code)
		os.Stdout.WriteString(out)
		os.Exit(code)
	case "exit":
		code, _ := strconv.Atoi(os.Args[2])
		fmt.Fprintln(os.Stderr, "exiting with", code)
		os.Exit(code)
	}
	in, _ := io.ReadAll(os.Stdin)
	fmt.Printf("stdin=%q args=%q GREETING=%q HOME=%q\n", in, os.Args[1:], os.Getenv("GREETING"), os.Getenv("HOME"))
	fmt.Fprintln(os.Stderr, "to stderr")
}
