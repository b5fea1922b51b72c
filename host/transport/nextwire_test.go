package transport

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
)

// FuzzWire holds the device's hand-written readers and writers (Serve's
// request line, moat.next's request and reply) to encoding/json: whatever
// the bytes, a line or body the fast path takes means exactly what the
// decoder makes of it, and a reply it writes decodes to what was written.
func FuzzWire(f *testing.F) {
	for _, s := range []string{
		`{"op":"kv.get","req":{"key":"k"}}`,
		`{"op":"log.write","noreply":true,"req":{"level":"info","message":"m"}}`,
		`{"op":"a","req":{}} `, `{"op":"a","req":{},"x":1}`, `{"op":"a\"b","req":{}}`, `{"op":"","req":{}}`,
		`{"op":"a","req":1}}`, "{\"op\":\"\xff\",\"req\":{}}", `{"op":"a","noreply":false,"req":{}}`,
		`{"output_text":"Hello, World! (call #3)"}`, `{"output_text":"a\"b"}`, `{"output_text":""}`,
		`{"output":"AAEC"}`, `{"output":"AAE"}`, "{\"output\":\"AA\nEC\"}", `{"output_text":"x","error":{"code":"c"}}`, "{\"output_text\":\"\x01\"}",
		"greet\x00World\x00c-1", "\x00é\xff\x00",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if op, body, noReply, ok := parseRequest(data); ok {
			var want DeviceRequest
			if err := json.Unmarshal(data, &want); err != nil {
				t.Fatalf("parseRequest took %q, which does not decode: %v", data, err)
			}
			if op != want.Op || string(body) != string(want.Req) || noReply != want.NoReply {
				t.Fatalf("parseRequest(%q) = %q %q %v; the decoder: %q %q %v", data, op, body, noReply, want.Op, want.Req, want.NoReply)
			}
		}
		if got, ok := decodeNextRequest(data); ok {
			var want abi.NextRequest
			if err := json.Unmarshal(data, &want); err != nil {
				t.Fatalf("decodeNextRequest took %q, which does not decode: %v", data, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decodeNextRequest(%q) = %+v; the decoder: %+v", data, got, want)
			}
		}
		// The reply: fields cut from the bytes at NULs.
		parts := strings.SplitN(string(data), "\x00", 4)
		for len(parts) < 4 {
			parts = append(parts, "")
		}
		r := abi.NextReply{Action: parts[0], Text: parts[1], CorrelationID: parts[2], Input: []byte(parts[3]), Stop: len(data)%7 == 0}
		b, ok := appendNextReply(nil, r)
		if !ok {
			return
		}
		var back abi.NextReply
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("appendNextReply(%+v) = %q, which does not decode: %v", r, b, err)
		}
		if len(r.Input) == 0 {
			r.Input = nil
		}
		if !reflect.DeepEqual(back, r) {
			t.Fatalf("appendNextReply(%+v) = %q, which decodes to %+v", r, b, back)
		}
		if want, _ := json.Marshal(r); !strings.Contains(string(want), "\\") && string(want) != string(b) {
			t.Fatalf("appendNextReply(%+v) = %q; encoding/json writes %q", r, b, want)
		}
	})
}
