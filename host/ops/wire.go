package ops

import (
	"encoding/base64"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
)

// Fast paths for the wire encoding of the common ops.
//
// encoding/json decodes by reflection: the four requests of a typical
// action (config.get, log.write, kv.get, kv.put) cost the host about
// 12 µs to decode and 3 µs to encode their replies, more than a kv.get
// costs SQLite. Their requests have fixed shapes, which the guest SDKs
// write in one canonical form ({"key":"count"}, no spaces, fields in
// order), so the host recognises that form by hand and takes
// abi.Unmarshal for anything else: other spacing or order, an escape
// sequence, a number, invalid UTF-8, a duplicate or differently cased
// field name, a null. A request decoded either way is the same value, and
// a reply encoded either way the same bytes (wire_test.go holds both
// against encoding/json).

// decodeFast decodes b into v when v is a request type with a fast path
// and b is in its canonical form. It reports whether it did; v is
// untouched when it did not.
func decodeFast(b []byte, v any) bool {
	switch r := v.(type) {
	case *abi.KVGetRequest:
		return decodeKey(b, &r.Key)
	case *abi.ConfigGetRequest:
		return decodeKey(b, &r.Key)
	case *abi.KVDeleteRequest:
		return decodeKey(b, &r.Key)
	case *abi.KVPutRequest:
		return decodeKVPut(b, r)
	case *abi.LogWriteRequest:
		return decodeLogWrite(b, r)
	}
	return false
}

// encodeFast encodes v when it is a reply type with a fast path whose
// json.Marshal bytes it can write by hand.
func encodeFast(v any) ([]byte, bool) {
	switch r := v.(type) {
	case *abi.Empty:
		return []byte("{}"), true
	case *abi.KVGetResponse:
		b := make([]byte, 0, 32+base64.StdEncoding.EncodedLen(len(r.Value)))
		b = append(b, '{')
		if len(r.Value) > 0 { // omitempty
			b = append(b, `"value":"`...)
			b = base64.StdEncoding.AppendEncode(b, r.Value)
			b = append(b, `",`...)
		}
		return appendFound(append(b, `"found":`...), r.Found), true
	case *abi.ConfigGetResponse:
		if !plainASCII(r.Value) {
			return nil, false
		}
		b := make([]byte, 0, 28+len(r.Value))
		b = append(append(append(b, `{"value":"`...), r.Value...), `","found":`...)
		return appendFound(b, r.Found), true
	}
	return nil, false
}

func appendFound(b []byte, found bool) []byte {
	if found {
		return append(b, "true}"...)
	}
	return append(b, "false}"...)
}

// plainASCII reports whether json.Marshal writes s as it is between the
// quotes: printable ASCII but for the quote, the backslash and the three
// characters it escapes for HTML (<, >, &).
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// cutString takes a JSON string with no escape sequence from the start of
// b: its contents and the rest of b. ok is false when b does not start
// with one, or when the string holds a control character (which JSON
// refuses) or invalid UTF-8 (which encoding/json replaces): those take
// the slow path, which decides.
func cutString(b []byte) (s, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			s = b[1:i]
			if !utf8.Valid(s) {
				return nil, nil, false
			}
			return s, b[i+1:], true
		case c == '\\' || c < 0x20:
			return nil, nil, false
		}
	}
	return nil, nil, false
}

// cutField takes `"name":` from the start of b.
func cutField(b []byte, name string) ([]byte, bool) {
	if len(b) < len(name)+3 || b[0] != '"' || string(b[1:1+len(name)]) != name || b[1+len(name)] != '"' || b[2+len(name)] != ':' {
		return nil, false
	}
	return b[3+len(name):], true
}

// decodeKey decodes {"key":"K"}.
func decodeKey(b []byte, key *string) bool {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return false
	}
	rest, ok := cutField(b[1:len(b)-1], "key")
	if !ok {
		return false
	}
	k, rest, ok := cutString(rest)
	if !ok || len(rest) != 0 {
		return false
	}
	*key = string(k)
	return true
}

// decodeKVPut decodes {"key":"K","value":"BASE64"}.
func decodeKVPut(b []byte, r *abi.KVPutRequest) bool {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return false
	}
	rest, ok := cutField(b[1:len(b)-1], "key")
	if !ok {
		return false
	}
	k, rest, ok := cutString(rest)
	if !ok || len(rest) == 0 || rest[0] != ',' {
		return false
	}
	if rest, ok = cutField(rest[1:], "value"); !ok {
		return false
	}
	v, rest, ok := cutString(rest)
	if !ok || len(rest) != 0 {
		return false
	}
	// encoding/json decodes a []byte with base64.StdEncoding, which also
	// skips \r and \n: only the plain alphabet is taken here.
	for _, c := range v {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			return false
		}
	}
	val := make([]byte, base64.StdEncoding.DecodedLen(len(v)))
	n, err := base64.StdEncoding.Decode(val, v)
	if err != nil {
		return false // the slow path reports it
	}
	r.Key, r.Value = string(k), val[:n]
	return true
}

// decodeLogWrite decodes {"level":"L","message":"M","fields":{"k":"v",...}}
// (level and fields optional) when every field value is a string.
func decodeLogWrite(b []byte, r *abi.LogWriteRequest) bool {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return false
	}
	var out abi.LogWriteRequest
	rest := b[1 : len(b)-1]
	if after, ok := cutField(rest, "level"); ok {
		lv, after, ok := cutString(after)
		if !ok || len(after) == 0 || after[0] != ',' {
			return false
		}
		out.Level, rest = string(lv), after[1:]
	}
	rest, ok := cutField(rest, "message")
	if !ok {
		return false
	}
	msg, rest, ok := cutString(rest)
	if !ok {
		return false
	}
	out.Message = string(msg)
	if len(rest) > 0 {
		if rest[0] != ',' {
			return false
		}
		if rest, ok = cutField(rest[1:], "fields"); !ok || len(rest) < 2 || rest[0] != '{' || rest[len(rest)-1] != '}' {
			return false
		}
		body := rest[1 : len(rest)-1]
		out.Fields = map[string]any{}
		for len(body) > 0 {
			k, after, ok := cutString(body)
			if !ok || len(after) == 0 || after[0] != ':' {
				return false
			}
			v, after, ok := cutString(after[1:])
			if !ok {
				return false
			}
			out.Fields[string(k)] = string(v) // a later duplicate wins, as in encoding/json
			if len(after) > 0 {
				if after[0] != ',' || len(after) == 1 {
					return false
				}
				after = after[1:]
			}
			body = after
		}
		if len(out.Fields) == 0 {
			// {"fields":{}}: encoding/json makes an empty map too, but
			// the SDKs never send it; keep the one form simple.
			return false
		}
	}
	*r = out
	return true
}
