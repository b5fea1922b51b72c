package moat

import (
	"bytes"
	"encoding/base64"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
)

// Fast paths for the wire encoding of the common ops.
//
// encoding/json is reflection-driven, and on wasm that is slow: under
// wazero one json.Unmarshal of a two-field reply costs about 38 µs and one
// json.Marshal of a kv.put request about 14 µs, so the four ops of a
// typical action (config, log, kv.get, kv.put) spent more time encoding
// JSON in the guest than the host spent running them, SQLite included.
// The requests of these ops have fixed shapes, so they are appended by
// hand, and the replies the host's encoder produces are recognised by
// shape; anything else (invalid UTF-8, a log field of another type, an
// escaped reply) takes the encoding/json path, so the bytes on the wire
// always mean what json.Marshal's would.

// appendJSONString appends s as a JSON string. ok is false when s is not
// valid UTF-8, which json.Marshal would rewrite (to U+FFFD); the caller
// then uses json.Marshal so that the two paths never differ.
func appendJSONString(b []byte, s string) (_ []byte, ok bool) {
	if !utf8.ValidString(s) {
		return b, false
	}
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		start = i + 1
	}
	b = append(append(b, s[start:]...), '"')
	return b, true
}

// keyRequest encodes {"key":K}, the request of config.get, kv.get and
// kv.delete.
func keyRequest(key string) ([]byte, error) {
	b, ok := appendJSONString(append(make([]byte, 0, len(key)+10), `{"key":`...), key)
	if !ok {
		return abi.Marshal(abi.KVGetRequest{Key: key})
	}
	return append(b, '}'), nil
}

// kvPutRequest encodes {"key":K,"value":"BASE64"}; a nil value is sent
// as "" (an empty value), never null.
func kvPutRequest(key string, value []byte) ([]byte, error) {
	if value == nil {
		value = []byte{}
	}
	n := base64.StdEncoding.EncodedLen(len(value))
	b, ok := appendJSONString(append(make([]byte, 0, len(key)+n+22), `{"key":`...), key)
	if !ok {
		return abi.Marshal(abi.KVPutRequest{Key: key, Value: value})
	}
	b = append(b, `,"value":"`...)
	b = base64.StdEncoding.AppendEncode(b, value)
	return append(b, `"}`...), nil
}

// logWriteRequest encodes a log.write request when every field value is a
// string, a bool, an integer or a finite float; ok is false otherwise.
func logWriteRequest(level, msg string, fields map[string]any) (b []byte, ok bool) {
	b = append(make([]byte, 0, 64+len(msg)), '{')
	if level != "" {
		b = append(b, `"level":`...)
		if b, ok = appendJSONString(b, level); !ok {
			return nil, false
		}
		b = append(b, ',')
	}
	b = append(b, `"message":`...)
	if b, ok = appendJSONString(b, msg); !ok {
		return nil, false
	}
	if len(fields) > 0 {
		b = append(b, `,"fields":{`...)
		first := true
		for k, v := range fields {
			if !first {
				b = append(b, ',')
			}
			first = false
			if b, ok = appendJSONString(b, k); !ok {
				return nil, false
			}
			b = append(b, ':')
			if b, ok = appendScalar(b, v); !ok {
				return nil, false
			}
		}
		b = append(b, '}')
	}
	return append(b, '}'), true
}

// appendScalar appends v as JSON if it is a string, bool, integer or
// finite float.
func appendScalar(b []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case string:
		return appendJSONString(b, v)
	case bool:
		return strconv.AppendBool(b, v), true
	case int:
		return strconv.AppendInt(b, int64(v), 10), true
	case int8:
		return strconv.AppendInt(b, int64(v), 10), true
	case int16:
		return strconv.AppendInt(b, int64(v), 10), true
	case int32:
		return strconv.AppendInt(b, int64(v), 10), true
	case int64:
		return strconv.AppendInt(b, v, 10), true
	case uint:
		return strconv.AppendUint(b, uint64(v), 10), true
	case uint8:
		return strconv.AppendUint(b, uint64(v), 10), true
	case uint16:
		return strconv.AppendUint(b, uint64(v), 10), true
	case uint32:
		return strconv.AppendUint(b, uint64(v), 10), true
	case uint64:
		return strconv.AppendUint(b, v, 10), true
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return b, false // json.Marshal refuses these; let it say so
		}
		return strconv.AppendFloat(b, v, 'g', -1, 64), true
	}
	return b, false
}

// decodeConfigGet decodes a config.get reply. The host's encoder writes
// {"value":"V","found":true} or {"value":"","found":false}; a value with
// no escape sequence (no backslash) is the JSON string's bytes as they
// are. Any other reply goes through abi.Unmarshal.
func decodeConfigGet(body []byte, resp *abi.ConfigGetResponse) error {
	const prefix, found, notFound = `{"value":"`, `","found":true}`, `{"value":"","found":false}`
	if string(body) == notFound {
		*resp = abi.ConfigGetResponse{}
		return nil
	}
	if len(body) >= len(prefix)+len(found) && bytes.HasPrefix(body, []byte(prefix)) && bytes.HasSuffix(body, []byte(found)) {
		v := body[len(prefix) : len(body)-len(found)]
		if !bytes.ContainsAny(v, "\"\\") && utf8.Valid(v) {
			*resp = abi.ConfigGetResponse{Value: string(v), Found: true}
			return nil
		}
	}
	if err := abi.Unmarshal(body, resp); err != nil {
		return abi.Errorf(abi.CodeInternal, "op %s: decode reply: %v", abi.OpConfigGet, err)
	}
	return nil
}

// callBytes runs op like Call, but decodes the reply's top-level member
// named member, a []byte (base64 in JSON), without encoding/json: set
// receives its bytes and the rest of the reply is decoded into resp as
// usual. http.fetch's body and media.get's data are up to 2 MiB, whose
// base64 encoding/json would scan byte by byte twice (to validate, then
// to decode), which on wasm costs far more than the op itself (see
// decodeKVGet; BenchmarkDecodeBytesMember measures both paths). A reply
// whose member is not the plain base64 string the host's encoder writes
// goes whole through abi.Unmarshal.
func callBytes(op string, req, resp any, member string, set func([]byte)) error {
	body, err := abi.Marshal(req)
	if err != nil {
		return abi.Errorf(abi.CodeInvalidArgument, "op %s: encode request: %v", op, err)
	}
	return roundTrip(op, body, func(b []byte) error { return decodeBytesMember(op, b, member, resp, set) })
}

// decodeBytesMember decodes body into resp, taking the top-level member
// named member out first when its value is a base64 string.
func decodeBytesMember(op string, body []byte, member string, resp any, set func([]byte)) error {
	if start, end, ok := findStringMember(body, member); ok {
		enc := body[start+1 : end-1]
		if !bytes.ContainsAny(enc, "\\\r\n") {
			data := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
			if n, err := base64.StdEncoding.Decode(data, enc); err == nil {
				rest := make([]byte, 0, len(body)-(end-start)+4)
				rest = append(append(append(rest, body[:start]...), "null"...), body[end:]...)
				if err := abi.Unmarshal(rest, resp); err != nil {
					return abi.Errorf(abi.CodeInternal, "op %s: decode reply into %T: %v", op, resp, err)
				}
				set(data[:n])
				return nil
			}
		}
	}
	if err := abi.Unmarshal(body, resp); err != nil {
		return abi.Errorf(abi.CodeInternal, "op %s: decode reply into %T: %v", op, resp, err)
	}
	return nil
}

// findStringMember finds the value of the top-level member name of the
// JSON object in b when that value is a string: b[start:end] is the
// literal, quotes included. It only locates: what it returns is decoded
// by the caller, and anything it does not understand (malformed JSON, a
// member that is not a string, the name twice, which encoding/json would
// resolve to the last) is false, leaving the reply to encoding/json,
// which says what is wrong with it.
func findStringMember(b []byte, name string) (start, end int, found bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, 0, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return 0, 0, false
	}
	for i < len(b) {
		kStart := i
		kEnd, ok := skipString(b, i)
		if !ok {
			return 0, 0, false
		}
		i = skipSpace(b, kEnd)
		if i >= len(b) || b[i] != ':' {
			return 0, 0, false
		}
		vStart := skipSpace(b, i+1)
		vEnd, ok := skipValue(b, vStart, 0)
		if !ok {
			return 0, 0, false
		}
		// A key with escapes is not the plain name the host writes.
		if string(b[kStart+1:kEnd-1]) == name {
			if found || b[vStart] != '"' {
				return 0, 0, false
			}
			start, end, found = vStart, vEnd, true
		}
		i = skipSpace(b, vEnd)
		if i < len(b) && b[i] == '}' {
			return start, end, found && skipSpace(b, i+1) == len(b)
		}
		if i >= len(b) || b[i] != ',' {
			return 0, 0, false
		}
		i = skipSpace(b, i+1)
	}
	return 0, 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string literal at b[i].
func skipString(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	for i++; i < len(b); {
		j := bytes.IndexAny(b[i:], "\"\\")
		if j < 0 {
			return 0, false
		}
		i += j
		if b[i] == '"' {
			return i + 1, true
		}
		i += 2 // a backslash and the byte it escapes
	}
	return 0, false
}

// skipValue returns the index after the JSON value at b[i]; nesting is
// bounded, as in the other SDKs' readers.
func skipValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) || depth > 64 {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		closing := byte('}')
		if b[i] == '[' {
			closing = ']'
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == closing {
			return i + 1, true
		}
		for {
			if closing == '}' {
				var ok bool
				if i, ok = skipString(b, i); !ok {
					return 0, false
				}
				if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
					return 0, false
				}
				i = skipSpace(b, i+1)
			}
			var ok bool
			if i, ok = skipValue(b, i, depth+1); !ok {
				return 0, false
			}
			if i = skipSpace(b, i); i >= len(b) {
				return 0, false
			}
			if b[i] == closing {
				return i + 1, true
			}
			if b[i] != ',' {
				return 0, false
			}
			i = skipSpace(b, i+1)
		}
	}
	// A number, true, false or null: up to the next delimiter.
	j := i
	for ; j < len(b); j++ {
		if c := b[j]; c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			break
		}
	}
	return j, j > i
}
