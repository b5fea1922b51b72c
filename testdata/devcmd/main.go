// Command devcmd is a WASI command fixture for moat's tests: an
// interpreter's use of the device-file transport ($MOAT_OPS), pushed past
// the run's budget. It prints what the host answered.
//
//	devcmd open N      open the device N times, keeping each open
//	devcmd log N       N log.write ops on one descriptor, a reply read after each
//	devcmd line BYTES  one config.get request line of BYTES bytes
//	devcmd call OP REQ one op with the JSON request REQ; prints its reply line
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "call" {
		f, r := open(os.Getenv("MOAT_OPS"))
		line, _ := json.Marshal(map[string]any{"op": os.Args[2], "req": json.RawMessage(os.Args[3])})
		fmt.Fprintf(f, "%s\n", line)
		reply, err := r.ReadBytes('\n')
		if err != nil {
			fail("read a reply: " + err.Error())
		}
		os.Stdout.Write(reply)
		return
	}
	if len(os.Args) != 3 {
		fail("usage: devcmd open|log|line N, or devcmd call OP REQ")
	}
	n, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fail(err.Error())
	}
	path := os.Getenv("MOAT_OPS")
	switch os.Args[1] {
	case "open":
		var files []*os.File
		for range n {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				fmt.Printf("opened %d: %v\n", len(files), err)
				return
			}
			files = append(files, f)
		}
		fmt.Printf("opened %d\n", len(files))
	case "log":
		f, r := open(path)
		codes := map[string]int{}
		for i := range n {
			fmt.Fprintf(f, `{"op":"log.write","req":{"level":"info","message":"record %d"}}`+"\n", i)
			codes[code(r)]++
		}
		printCodes(codes)
	case "line":
		f, r := open(path)
		pad := max(0, n-len(`{"op":"config.get","req":{"key":""}}`))
		fmt.Fprintf(f, `{"op":"config.get","req":{"key":"%s"}}`+"\n", strings.Repeat("k", pad))
		printCodes(map[string]int{code(r): 1})
	default:
		fail("unknown mode " + os.Args[1])
	}
}

func open(path string) (*os.File, *bufio.Reader) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		fail(err.Error())
	}
	return f, bufio.NewReader(f)
}

// code reads one reply line and returns its error code, or "ok".
func code(r *bufio.Reader) string {
	line, err := r.ReadBytes('\n')
	if err != nil {
		fail("read a reply: " + err.Error())
	}
	var reply struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(line, &reply); err != nil {
		fail("reply " + string(line) + ": " + err.Error())
	}
	if reply.Error == nil {
		return "ok"
	}
	fmt.Fprintln(os.Stderr, reply.Error.Code+": "+reply.Error.Message)
	return reply.Error.Code
}

func printCodes(codes map[string]int) {
	var out []string
	for c, k := range codes {
		out = append(out, fmt.Sprintf("%s=%d", c, k))
	}
	sort.Strings(out)
	fmt.Println(strings.Join(out, " "))
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "devcmd:", msg)
	os.Exit(2)
}
