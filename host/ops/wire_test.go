package ops

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/moat-sandbox/moat/abi"
)

// newReq returns a fresh request of each type with a fast path.
var fastRequests = []func() any{
	func() any { return &abi.KVGetRequest{} },
	func() any { return &abi.ConfigGetRequest{} },
	func() any { return &abi.KVDeleteRequest{} },
	func() any { return &abi.KVPutRequest{} },
	func() any { return &abi.LogWriteRequest{} },
}

// checkDecode holds decodeFast to encoding/json on b for every request
// type: when the fast path takes b, json.Unmarshal must take it too and
// give the same value. It returns the types the fast path took b for.
func checkDecode(t *testing.T, b []byte) (took []string) {
	t.Helper()
	for _, mk := range fastRequests {
		fast, slow := mk(), mk()
		if !decodeFast(b, fast) {
			if !reflect.DeepEqual(fast, mk()) {
				t.Errorf("%T %q: refused, but changed the request to %+v", fast, b, fast)
			}
			continue
		}
		took = append(took, fmt.Sprintf("%T", fast))
		if err := json.Unmarshal(b, slow); err != nil {
			t.Errorf("%T %q: the fast path took what encoding/json refuses (%v): %+v", fast, b, err, fast)
			continue
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Errorf("%T %q: fast path %#v, encoding/json %#v", fast, b, fast, slow)
		}
	}
	return took
}

// TestDecodeFast: the canonical forms the guest SDKs write take the fast
// path, anything else is left to encoding/json, and the value is the same
// either way.
func TestDecodeFast(t *testing.T) {
	for _, tc := range []struct {
		in   string
		took []string // the types the fast path must take it for
	}{
		{`{"key":"count"}`, []string{"*abi.KVGetRequest", "*abi.ConfigGetRequest", "*abi.KVDeleteRequest"}},
		{`{"key":""}`, []string{"*abi.KVGetRequest", "*abi.ConfigGetRequest", "*abi.KVDeleteRequest"}},
		{`{"key":"héllo wörld"}`, []string{"*abi.KVGetRequest", "*abi.ConfigGetRequest", "*abi.KVDeleteRequest"}},
		{`{"key":"c","value":"MQ=="}`, []string{"*abi.KVPutRequest"}},
		{`{"key":"c","value":""}`, []string{"*abi.KVPutRequest"}},
		{`{"key":"c","value":"AAEC/w+/"}`, []string{"*abi.KVPutRequest"}},
		{`{"level":"info","message":"greeting","fields":{"name":"World"}}`, []string{"*abi.LogWriteRequest"}},
		{`{"message":"m"}`, []string{"*abi.LogWriteRequest"}},
		{`{"level":"warn","message":"m","fields":{"a":"1","b":"x,y}z","a":"again"}}`, []string{"*abi.LogWriteRequest"}},
		// Anything else is encoding/json's to decide.
		{`{"key":"a\"b"}`, nil},
		{`{"key":"a\u0041"}`, nil},
		{"{\"key\":\"a\x01\"}", nil},
		{"{\"key\":\"\xff\"}", nil},
		{`{"KEY":"count"}`, nil},
		{`{"Key":"count"}`, nil},
		{`{ "key":"count"}`, nil},
		{`{"key":"count" }`, nil},
		{`{"key":"count","key":"other"}`, nil},
		{`{"key":"count","extra":1}`, nil},
		{`{"key":null}`, nil},
		{`{"key":1}`, nil},
		{`{"key":"count"`, nil},
		{`{"key":"count"}}`, nil},
		{`[]`, nil},
		{``, nil},
		{`{"key":"c","value":null}`, nil},
		{`{"key":"c","value":"MQ"}`, nil},
		{`{"key":"c","value":"M\nQ=="}`, nil},
		{`{"key":"c","value":"MQ==","value":"Mg=="}`, nil},
		{`{"value":"MQ==","key":"c"}`, nil},
		{`{"message":"m","fields":{"n":1}}`, nil},
		{`{"message":"m","fields":{"n":{"x":"y"}}}`, nil},
		{`{"message":"m","fields":{}}`, nil},
		{`{"message":"m","fields":{"a":"b",}}`, nil},
		{`{"message":"m","fields":{"a":"b"},"level":"info"}`, nil},
		{`{"message":"m","fields":{"a":"b"},"x":{"c":"d"}}`, nil},
		{`{"message":"m","level":"info"}`, nil},
		{`{"level":"info","message":"m","message":"n"}`, nil},
	} {
		got := checkDecode(t, []byte(tc.in))
		if !slicesEqual(got, tc.took) {
			t.Errorf("%q: the fast path took it as %v, want %v", tc.in, got, tc.took)
		}
	}
}

func slicesEqual(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

// TestEncodeFast: the replies the fast path writes are json.Marshal's
// bytes, and the strings it cannot write as they are go to json.Marshal.
func TestEncodeFast(t *testing.T) {
	for _, tc := range []struct {
		v    any
		fast bool
	}{
		{&abi.Empty{}, true},
		{&abi.KVGetResponse{}, true},
		{&abi.KVGetResponse{Found: true}, true},
		{&abi.KVGetResponse{Value: []byte{}, Found: true}, true},
		{&abi.KVGetResponse{Value: []byte("42"), Found: true}, true},
		{&abi.KVGetResponse{Value: []byte{0, 0xff, '"', '<'}, Found: true}, true},
		{&abi.ConfigGetResponse{}, true},
		{&abi.ConfigGetResponse{Value: "Hello", Found: true}, true},
		{&abi.ConfigGetResponse{Value: "a<b", Found: true}, false},
		{&abi.ConfigGetResponse{Value: "a&b", Found: true}, false},
		{&abi.ConfigGetResponse{Value: `a"b`, Found: true}, false},
		{&abi.ConfigGetResponse{Value: "a\u2028b", Found: true}, false},
		{&abi.ConfigGetResponse{Value: "a\nb", Found: true}, false},
		{&abi.ConfigGetResponse{Value: "\xff", Found: true}, false},
		{&abi.KVListResponse{Keys: []string{"a"}}, false},
	} {
		want, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := encodeFast(tc.v)
		if ok != tc.fast {
			t.Errorf("%#v: fast path %v, want %v", tc.v, ok, tc.fast)
		}
		if ok && !bytes.Equal(got, want) {
			t.Errorf("%#v: fast path %s, json.Marshal %s", tc.v, got, want)
		}
	}
}

// FuzzDecodeFast holds the fast path to encoding/json on any bytes.
func FuzzDecodeFast(f *testing.F) {
	for _, s := range []string{`{"key":"count"}`, `{"key":"c","value":"MQ=="}`,
		`{"level":"info","message":"greeting","fields":{"name":"World"}}`, `{"message":"m","fields":{"a":"b","c":"d"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkDecode(t, b) })
}

// FuzzEncodeFast holds the fast path to json.Marshal on any value.
func FuzzEncodeFast(f *testing.F) {
	f.Add("Hello", []byte("42"), true)
	f.Fuzz(func(t *testing.T, s string, v []byte, found bool) {
		for _, r := range []any{&abi.ConfigGetResponse{Value: s, Found: found}, &abi.KVGetResponse{Value: v, Found: found}} {
			want, _ := json.Marshal(r)
			if got, ok := encodeFast(r); ok && !bytes.Equal(got, want) {
				t.Errorf("%#v: fast path %s, json.Marshal %s", r, got, want)
			}
		}
	})
}
