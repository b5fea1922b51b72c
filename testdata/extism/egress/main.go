// Command egress is an Extism plug-in that calls Extism's HTTP host
// functions directly, without the PDK's request builder, so a test can
// send what a hostile plug-in would: any method, any header bytes, any
// URL. host/extism's egress tests run it.
package main

import (
	"encoding/json"

	"github.com/extism/go-pdk"
)

//go:wasmimport extism:host/env http_request
func httpRequest(req, body uint64) uint64

//go:wasmimport extism:host/env http_status_code
func httpStatusCode() int32

//go:wasmimport extism:host/env http_headers
func httpHeaders() uint64

// call is the input of raw: Extism's request object as JSON, and a body.
type call struct {
	Req  json.RawMessage `json:"req"`
	Body *string         `json:"body"`
}

// result is the output of raw and last.
type result struct {
	Status  int32             `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body,omitempty"`
}

// raw sends the input's request object as it is and returns the status,
// headers and body.
//
//go:wasmexport raw
func raw() int32 {
	var in call
	if err := json.Unmarshal(pdk.Input(), &in); err != nil {
		pdk.SetError(err)
		return 1
	}
	req := pdk.AllocateBytes(in.Req)
	var body uint64
	if in.Body != nil {
		b := pdk.AllocateString(*in.Body)
		body = b.Offset()
	}
	off := httpRequest(req.Offset(), body)
	var out result
	if off != 0 {
		m := pdk.FindMemory(off)
		out.Body = string(m.ReadBytes())
		m.Free()
	}
	out.Status, out.Headers = httpStatusCode(), headers()
	return output(out)
}

// last sends nothing: it returns what http_status_code and http_headers
// report, which must be nothing at the start of an invocation.
//
//go:wasmexport last
func last() int32 {
	return output(result{Status: httpStatusCode(), Headers: headers()})
}

func headers() map[string]string {
	off := httpHeaders()
	if off == 0 {
		return nil
	}
	m := pdk.FindMemory(off)
	defer m.Free()
	var h map[string]string
	if err := json.Unmarshal(m.ReadBytes(), &h); err != nil {
		return map[string]string{"error": err.Error()}
	}
	return h
}

func output(r result) int32 {
	b, err := json.Marshal(r)
	if err != nil {
		pdk.SetError(err)
		return 1
	}
	pdk.Output(b)
	return 0
}

func main() {}
