package moat

import (
	"encoding/json"
	"math"
	"reflect"
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
