// Command stock is an Extism plug-in written only against the Extism Go PDK:
// nothing in it knows about moat. host/extism's tests run it through moat
// and through the extism go-sdk and expect the same behaviour.
package main

import (
	"errors"
	"strconv"

	"github.com/extism/go-pdk"
)

// greet: input and output, config and logging.
//
//go:wasmexport greet
func greet() int32 {
	name := pdk.InputString()
	greeting, ok := pdk.GetConfig("greeting")
	if !ok {
		greeting = "Hello"
	}
	pdk.Log(pdk.LogInfo, "greeting "+name)
	pdk.OutputString(greeting + ", " + name + "!")
	return 0
}

// count: a var that lives as long as the plug-in instance.
//
//go:wasmexport count
func count() int32 {
	n := pdk.GetVarInt("count") + 1
	pdk.SetVarInt("count", n)
	pdk.OutputString(strconv.Itoa(n))
	return 0
}

// fail: the Extism error convention (error_set and a non-zero return).
//
//go:wasmexport fail
func fail() int32 {
	pdk.SetError(errors.New("no such order: " + pdk.InputString()))
	return 1
}

// spin never returns.
//
//go:wasmexport spin
func spin() int32 {
	n := 0
	for {
		n++
	}
}

// grow allocates the number of MiB given as input, to test memory limits.
//
//go:wasmexport grow
func grow() int32 {
	mib, err := strconv.Atoi(pdk.InputString())
	if err != nil {
		pdk.SetError(err)
		return 1
	}
	buf := make([]byte, mib<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	pdk.OutputString(strconv.Itoa(len(buf)))
	return 0
}

// fetch: Extism's own http_request. The input is the URL; the output is the
// status and the body.
//
//go:wasmexport fetch
func fetch() int32 {
	res := pdk.NewHTTPRequest(pdk.MethodGet, pdk.InputString()).Send()
	pdk.OutputString(strconv.Itoa(int(res.Status())) + " " + string(res.Body()))
	return 0
}

// noop is the benchmark's call: it echoes its input.
//
//go:wasmexport echo
func echo() int32 {
	pdk.Output(pdk.Input())
	return 0
}

func main() {}
