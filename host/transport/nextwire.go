package transport

import (
	"bytes"
	"encoding/base64"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
)

// moat.next runs once per call of a resident interpreter, and between two
// calls the host's code is out of the processor's caches: encoding/json's
// reflection, cold, costs the call measurably more than the few lines
// below. These read and write the usual shapes of abi.NextRequest and
// abi.NextReply by hand; ok is false for anything else, which then goes
// through encoding/json, so a message means the same whichever path it
// takes (FuzzWire holds the two to each other).

// decodeNextRequest reads {"output_text":"TEXT"} and {"output":"BASE64"}
// whose strings need no escapes.
func decodeNextRequest(body []byte) (req abi.NextRequest, ok bool) {
	const text, bin, tail = `{"output_text":"`, `{"output":"`, `"}`
	switch {
	case bytes.HasPrefix(body, []byte(text)) && bytes.HasSuffix(body, []byte(tail)) && len(body) >= len(text)+len(tail):
		s := body[len(text) : len(body)-len(tail)]
		if !plainJSON(s) {
			return req, false
		}
		req.OutputText = string(s)
		if req.OutputText == "" {
			return req, false // the same as no output; let the decoder say so
		}
		return req, true
	case bytes.HasPrefix(body, []byte(bin)) && bytes.HasSuffix(body, []byte(tail)) && len(body) >= len(bin)+len(tail):
		s := body[len(bin) : len(body)-len(tail)]
		if !plainJSON(s) {
			return req, false // base64 would skip a raw newline that JSON refuses
		}
		out, err := base64.StdEncoding.DecodeString(string(s))
		if err != nil || len(out) == 0 {
			return req, false
		}
		req.Output = out
		return req, true
	}
	return req, false
}

// appendNextReply appends r as encoding/json would write it (the same
// fields, order and omissions), but with text that needs no escapes
// written as it is; ok is false when some string needs one.
func appendNextReply(b []byte, r abi.NextReply) (_ []byte, ok bool) {
	b = append(b, '{')
	sep := false
	field := func(name string) {
		if sep {
			b = append(b, ',')
		}
		sep = true
		b = append(append(append(b, '"'), name...), `":`...)
	}
	str := func(name, v string) bool {
		if v == "" {
			return true
		}
		if !plainJSON([]byte(v)) {
			return false
		}
		field(name)
		b = append(append(append(b, '"'), v...), '"')
		return true
	}
	if !str("action", r.Action) {
		return nil, false
	}
	if len(r.Input) > 0 {
		field("input")
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, r.Input)
		b = append(b, '"')
	}
	if !str("text", r.Text) || !str("correlation_id", r.CorrelationID) {
		return nil, false
	}
	if r.Stop {
		field("stop")
		b = append(b, "true"...)
	}
	return append(b, '}'), true
}

// plainJSON reports whether s is valid UTF-8 that a JSON string holds as
// it is: no quote, no backslash, no control character.
func plainJSON(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return utf8.Valid(s)
}
