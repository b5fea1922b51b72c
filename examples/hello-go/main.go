// Command hello-go is a minimal moat plugin written in Go. Its one action,
// greet, greets the input (or "world"), counts its calls in the key-value
// store and logs who it greeted. See README.md to build and run it.
package main

import (
	"fmt"
	"strconv"

	moat "github.com/moat-sandbox/moat/guests/go"
)

func init() {
	moat.Action("greet", greet)
}

func greet(input []byte) ([]byte, error) {
	greeting, found, err := moat.Config("greeting")
	if err != nil {
		return nil, err
	}
	if !found {
		greeting = "Hello"
	}
	name := string(input)
	if name == "" {
		name = "world"
	}
	moat.Log.Info("greeting", "name", name)

	count := 0
	if v, found, err := moat.KV.Get("count"); err != nil {
		return nil, err
	} else if found {
		if count, err = strconv.Atoi(string(v)); err != nil {
			return nil, fmt.Errorf("kv key count holds %q, not a number", v)
		}
	}
	count++
	if err := moat.KV.Put("count", []byte(strconv.Itoa(count))); err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, "%s, %s! (call #%d)", greeting, name, count), nil
}

// main never runs in a plugin built with -buildmode=c-shared; the Go
// toolchain still requires it in package main.
func main() {}
