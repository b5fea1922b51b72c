// Command goguest is a test fixture: a moat plugin built with stock Go and
// the guest SDK (github.com/moat-sandbox/moat/guests/go), used by the
// host's tests. Build it with:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o goguest.wasm ./testdata/goguest
//
// Its actions, in registration order (the host sees them at these indexes):
//
//	echo       returns the input
//	upper      returns the input in upper case
//	config     returns the config value of the key given as input;
//	           an unknown key fails with abi.CodeNotFound
//	kv         runs one kv command given as input and describes the result:
//	             "put K V" -> "ok"
//	             "get K"   -> the value, or "<not found>"
//	             "del K"   -> "deleted" or "<not found>"
//	             "list P"  -> the keys starting with P, one per line
//	           op errors (denied, too_large, ...) are returned with their code
//	log        writes the input to the log at info level (field "bytes":
//	           its length) and returns "ok"; a refused log.write fails
//	fail       fails with a plain error: "deliberate failure: " + input
//	           (abi.CodeGuestError)
//	panic      panics with "deliberate panic" (recovered by the SDK:
//	           abi.CodeGuestError, the instance survives)
//	loop       never returns (for timeouts)
//	grow       allocates and touches N MiB (N decimal input) and keeps it
//	           referenced (for memory limits); returns N
//	big        returns N bytes of 'x' (N decimal input)
//	unknownop  calls the op "no.such.op" and fails with its error
//	           (abi.CodeUnknownOp)
//	bigcall    puts a 100 KiB value under kv key "bigcall", reads it back
//	           (the reply exceeds the SDK's 16 KiB response buffer, so it
//	           takes the StatusTooSmall path) and returns its length, "102400"
//	exit       calls os.Exit(3)
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/moat-sandbox/moat/abi"
	moat "github.com/moat-sandbox/moat/guests/go"
)

func init() {
	moat.Action("echo", func(in []byte) ([]byte, error) { return in, nil })
	moat.Action("upper", func(in []byte) ([]byte, error) { return bytes.ToUpper(in), nil })
	moat.Action("config", config)
	moat.Action("kv", kv)
	moat.Action("log", logInput)
	moat.Action("fail", func(in []byte) ([]byte, error) {
		return nil, errors.New("deliberate failure: " + string(in))
	})
	moat.Action("panic", func([]byte) ([]byte, error) { panic("deliberate panic") })
	moat.Action("loop", loop)
	moat.Action("grow", grow)
	moat.Action("big", big)
	moat.Action("unknownop", unknownOp)
	moat.Action("call", callOp)
	moat.Action("bigcall", bigCall)
	moat.Action("exit", func([]byte) ([]byte, error) {
		os.Exit(3)
		return nil, nil
	})
}

func config(in []byte) ([]byte, error) {
	key := string(in)
	v, found, err := moat.Config(key)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, &abi.Error{Code: abi.CodeNotFound, Message: fmt.Sprintf("no config key %q", key)}
	}
	return []byte(v), nil
}

const notFound = "<not found>"

func kv(in []byte) ([]byte, error) {
	cmd, rest, _ := strings.Cut(string(in), " ")
	switch cmd {
	case "put":
		key, value, _ := strings.Cut(rest, " ")
		if err := moat.KV.Put(key, []byte(value)); err != nil {
			return nil, err
		}
		return []byte("ok"), nil
	case "get":
		v, found, err := moat.KV.Get(rest)
		if err != nil {
			return nil, err
		}
		if !found {
			return []byte(notFound), nil
		}
		return v, nil
	case "del":
		deleted, err := moat.KV.Delete(rest)
		if err != nil {
			return nil, err
		}
		if !deleted {
			return []byte(notFound), nil
		}
		return []byte("deleted"), nil
	case "list":
		keys, err := moat.KV.List(rest)
		if err != nil {
			return nil, err
		}
		return []byte(strings.Join(keys, "\n")), nil
	}
	return nil, abi.Errorf(abi.CodeInvalidArgument, "kv: want \"put K V\", \"get K\", \"del K\" or \"list PREFIX\", got %q", in)
}

func logInput(in []byte) ([]byte, error) {
	if err := moat.Log.Write(abi.LevelInfo, string(in), map[string]any{"bytes": len(in)}); err != nil {
		return nil, err
	}
	return []byte("ok"), nil
}

// spins is package-level so the compiler cannot remove the loop.
//
//lint:ignore U1000 written, never read, on purpose: the loop must not be optimized away
var spins uint64

func loop([]byte) ([]byte, error) {
	for {
		spins++
	}
}

// hoard keeps what grow allocates reachable, so the memory stays in use.
var hoard [][]byte

func grow(in []byte) ([]byte, error) {
	n, err := decimal(in)
	if err != nil {
		return nil, err
	}
	for range n {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1 // touch every page
		}
		hoard = append(hoard, b)
	}
	return []byte(strconv.Itoa(n)), nil
}

func big(in []byte) ([]byte, error) {
	n, err := decimal(in)
	if err != nil {
		return nil, err
	}
	return bytes.Repeat([]byte("x"), n), nil
}

func unknownOp([]byte) ([]byte, error) {
	if err := moat.Call("no.such.op", nil, nil); err != nil {
		return nil, err
	}
	return nil, errors.New("op no.such.op unexpectedly succeeded")
}

// callOp runs the op named by the input's first word with the rest as its
// JSON request, and returns the reply: any op of the table, as the tests
// of a new op family need.
func callOp(in []byte) ([]byte, error) {
	op, req, _ := strings.Cut(string(in), " ")
	if req == "" {
		req = "{}"
	}
	var resp json.RawMessage
	if err := moat.Call(op, json.RawMessage(req), &resp); err != nil {
		return nil, err
	}
	return resp, nil
}

func bigCall([]byte) ([]byte, error) {
	want := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16)
	if err := moat.KV.Put("bigcall", want); err != nil {
		return nil, err
	}
	got, found, err := moat.KV.Get("bigcall")
	if err != nil {
		return nil, err
	}
	if !found || !bytes.Equal(got, want) {
		return nil, fmt.Errorf("bigcall: read back %d bytes (found %v), want the %d bytes written", len(got), found, len(want))
	}
	return []byte(strconv.Itoa(len(got))), nil
}

func decimal(in []byte) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(string(in)))
	if err != nil || n < 0 {
		return 0, abi.Errorf(abi.CodeInvalidArgument, "want a non-negative decimal number, got %q", in)
	}
	return n, nil
}

func main() {}
