// Command moatops is an Extism plug-in that calls moat's ops through the
// moat_call host function, as guests/extism/README.md shows.
package main

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/extism/go-pdk"
)

//go:wasmimport extism:host/user moat_call
func moatCall(op, req uint64) uint64

// callError is the error half of moat_call's reply.
type callError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// call runs one moat op: req and resp are the op's JSON request and reply.
func call(op string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	opMem, reqMem := pdk.AllocateString(op), pdk.AllocateBytes(body)
	defer opMem.Free()
	defer reqMem.Free()
	out := pdk.FindMemory(moatCall(opMem.Offset(), reqMem.Offset()))
	defer out.Free()
	var reply struct {
		Resp  json.RawMessage `json:"resp"`
		Error *callError      `json:"error"`
	}
	if err := json.Unmarshal(out.ReadBytes(), &reply); err != nil {
		return err
	}
	if reply.Error != nil {
		return errors.New(op + ": " + reply.Error.Code + ": " + reply.Error.Message)
	}
	return json.Unmarshal(reply.Resp, resp)
}

// visit counts visits in moat's kv store (per organization and module)
// and returns the new count.
//
//go:wasmexport visit
func visit() int32 {
	key := "visits/" + pdk.InputString()
	var got struct {
		Value []byte `json:"value"`
		Found bool   `json:"found"`
	}
	if err := call("kv.get", map[string]string{"key": key}, &got); err != nil {
		pdk.SetError(err)
		return 1
	}
	n := 0
	if got.Found {
		n, _ = strconv.Atoi(string(got.Value))
	}
	n++
	var empty struct{}
	if err := call("kv.put", map[string]any{"key": key, "value": []byte(strconv.Itoa(n))}, &empty); err != nil {
		pdk.SetError(err)
		return 1
	}
	if err := call("log.write", map[string]any{"level": "info", "message": "visit", "fields": map[string]any{"n": n}}, &empty); err != nil {
		pdk.SetError(err)
		return 1
	}
	pdk.OutputString(strconv.Itoa(n))
	return 0
}

// op runs the op named by config "op" with the input as its request and
// returns the reply, or fails with moat's error.
//
//go:wasmexport op
func op() int32 {
	name, _ := pdk.GetConfig("op")
	var resp json.RawMessage
	if err := call(name, json.RawMessage(pdk.Input()), &resp); err != nil {
		pdk.SetError(err)
		return 1
	}
	pdk.Output(resp)
	return 0
}

func main() {}
