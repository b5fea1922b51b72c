package moat

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/abi"
)

// sameJSON reports whether a and b decode to the same value.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("fast path wrote invalid JSON %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(va, vb)
}

var wireStrings = []string{
	"", "count", "ключ", "quote\" backslash\\ slash/", "line\nbreak\ttab\rcr",
	"ctl\x00\x01\x1f\x7f", "<html>&amp;", "emoji 🦫", "\u2028\u2029", "bad utf8 \xff\xfe",
}

// TestWireRequestsMatchEncodingJSON holds the hand-written encoders to
// what json.Marshal of the abi types means, for every awkward string.
func TestWireRequestsMatchEncodingJSON(t *testing.T) {
	for _, s := range wireStrings {
		fast, err := keyRequest(s)
		if err != nil {
			t.Fatal(err)
		}
		slow, _ := json.Marshal(abi.KVGetRequest{Key: s})
		if !sameJSON(t, fast, slow) {
			t.Errorf("keyRequest(%q) = %s, json.Marshal = %s", s, fast, slow)
		}
		for _, v := range [][]byte{nil, {}, []byte(s), {0, 0xff, 0x80}} {
			fast, err := kvPutRequest(s, v)
			if err != nil {
				t.Fatal(err)
			}
			if v == nil {
				v = []byte{} // KV.Put sends "" for nil
			}
			slow, _ := json.Marshal(abi.KVPutRequest{Key: s, Value: v})
			if !sameJSON(t, fast, slow) {
				t.Errorf("kvPutRequest(%q, %q) = %s, json.Marshal = %s", s, v, fast, slow)
			}
		}
		fields := map[string]any{s: s, "n": 42, "neg": int8(-3), "u": uint64(math.MaxUint64), "f": 2.5, "ok": true}
		if fast, ok := logWriteRequest(abi.LevelInfo, s, fields); ok {
			slow, _ := json.Marshal(abi.LogWriteRequest{Level: abi.LevelInfo, Message: s, Fields: fields})
			if !sameJSON(t, fast, slow) {
				t.Errorf("logWriteRequest(%q) = %s, json.Marshal = %s", s, fast, slow)
			}
		}
	}
	for _, tc := range []struct {
		name   string
		fields map[string]any
		fast   bool
	}{
		{"scalars", map[string]any{"a": "x", "b": 1, "c": false}, true},
		{"no fields", nil, true},
		{"a struct", map[string]any{"a": struct{ X int }{1}}, false},
		{"a slice", map[string]any{"a": []int{1}}, false},
		{"NaN", map[string]any{"a": math.NaN()}, false},
		{"nil value", map[string]any{"a": nil}, false},
	} {
		_, ok := logWriteRequest("", "m", tc.fields)
		if ok != tc.fast {
			t.Errorf("%s: fast path = %v, want %v", tc.name, ok, tc.fast)
		}
	}
	if _, ok := logWriteRequest("", "bad \xff", nil); ok {
		t.Error("a message with invalid UTF-8 took the fast path")
	}
}

func TestDecodeConfigGet(t *testing.T) {
	for _, want := range []abi.ConfigGetResponse{
		{}, {Value: "Hello", Found: true}, {Value: "", Found: true}, {Value: `a "quoted" \ value`, Found: true},
		{Value: "<b>&</b>", Found: true}, {Value: "ключ\n", Found: true},
	} {
		body, _ := json.Marshal(want)
		var got abi.ConfigGetResponse
		if err := decodeConfigGet(body, &got); err != nil || got != want {
			t.Errorf("decodeConfigGet(%s) = %+v, %v; want %+v", body, got, err, want)
		}
	}
	var got abi.ConfigGetResponse
	if err := decodeConfigGet([]byte(`{"value":`), &got); err == nil {
		t.Error("a truncated reply decoded")
	}
}

// TestDecodeBytesMember holds callBytes's fast path to what abi.Unmarshal
// makes of the same reply: the shapes the host writes, and the ones it
// does not (escapes, a duplicate member, a member named like the bytes
// inside a nested object, a non-string value, malformed JSON).
func TestDecodeBytesMember(t *testing.T) {
	for _, body := range []string{
		`{"status":200,"headers":{"body":"Zm9v","x":"a\"b\\"},"body":"AP9oaQ==","url":"u"}`,
		`{"status":200,"body":""}`,
		` { "body" : "aGk=" , "status" : 7 } `,
		`{"body":"aGk\u003d","status":1}`,
		`{"body":"aGk=","body":"Ynll"}`,
		`{"body":null,"status":2}`,
		`{"status":3}`,
		`{"body":"not base64!","status":4}`,
		`{"body":"aGk=","status":}`,
		`{"body":"aGk=","status":5`,
		`{"body":"aGk=","status":5} x`,
		`{"extra":{"a":[1,{"b":"}\"]"}]},"body":"aGk=","status":6}`,
		`["body","aGk="]`,
		`{"bo\u0064y":"aGk=","status":8}`,
	} {
		var fast, slow abi.HTTPFetchResponse
		fastErr := decodeBytesMember("http.fetch", []byte(body), "body", &fast, func(b []byte) { fast.Body = b })
		slowErr := abi.Unmarshal([]byte(body), &slow)
		if (fastErr == nil) != (slowErr == nil) || slowErr == nil && !reflect.DeepEqual(fast, slow) && !(len(fast.Body) == 0 && len(slow.Body) == 0 && fast.Status == slow.Status) {
			t.Errorf("%s:\nfast %+v, %v\nslow %+v, %v", body, fast, fastErr, slow, slowErr)
		}
	}
	if s, e, ok := findStringMember([]byte(`{"headers":{"body":"x"},"body":"aGk="}`), "body"); !ok || string([]byte(`{"headers":{"body":"x"},"body":"aGk="}`)[s:e]) != `"aGk="` {
		t.Errorf("findStringMember took a nested member: %d %d %v", s, e, ok)
	}
	deep := `{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,"body":"aGk="}`
	if _, _, ok := findStringMember([]byte(deep), "body"); ok {
		t.Error("nesting past the bound was scanned")
	}
}

// TestBytesMemberFastPath: the replies the host's encoder writes take the
// fast path (a change of shape on either side would otherwise only show
// as slowness).
func TestBytesMemberFastPath(t *testing.T) {
	for _, tc := range []struct {
		member string
		reply  any
	}{
		{"body", abi.HTTPFetchResponse{Status: 200, Headers: map[string]string{"body": "x", "content-type": "a/b"}, Body: []byte{0, 1, 0xff}, URL: "https://x/"}},
		{"data", abi.MediaGetResponse{MediaInfo: abi.MediaInfo{ID: "ab", Type: "image/png", Size: 3}, Data: []byte{0, 1, 0xff}}},
	} {
		b, err := abi.Marshal(tc.reply)
		if err != nil {
			t.Fatal(err)
		}
		if s, e, ok := findStringMember(b, tc.member); !ok || string(b[s:e]) != `"AAH/"` {
			t.Errorf("%s of %s: not found by the fast path (%d, %d, %v)", tc.member, b, s, e, ok)
		}
	}
}

// BenchmarkDecodeBytesMember: a 2 MiB http.fetch body (the most one may
// ask for) decoded by callBytes's fast path and by abi.Unmarshal.
func BenchmarkDecodeBytesMember(b *testing.B) {
	reply, err := abi.Marshal(abi.HTTPFetchResponse{Status: 200, Headers: map[string]string{"content-type": "image/png"},
		Body: bytes.Repeat([]byte{0, 1, 2, 0xff}, abi.MaxHTTPResponseBytes/4), URL: "https://img.example.com/a.png"})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("fast", func(b *testing.B) {
		b.SetBytes(int64(len(reply)))
		for i := 0; i < b.N; i++ {
			var r abi.HTTPFetchResponse
			if err := decodeBytesMember(abi.OpHTTPFetch, reply, "body", &r, func(d []byte) { r.Body = d }); err != nil || len(r.Body) != abi.MaxHTTPResponseBytes {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(reply)))
		for i := 0; i < b.N; i++ {
			var r abi.HTTPFetchResponse
			if err := abi.Unmarshal(reply, &r); err != nil || len(r.Body) != abi.MaxHTTPResponseBytes {
				b.Fatal(err)
			}
		}
	})
}
