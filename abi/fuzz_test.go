package abi_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/moat-sandbox/moat/abi"
)

// FuzzWire feeds arbitrary bytes to the wire decoding of every op's
// request and of the pipe transport's messages. Whatever the bytes, the
// decoder returns a value or an *abi.Error with code invalid_argument
// (never a panic or another error), and a decoded value survives a round
// trip through Marshal and Unmarshal unchanged.
func FuzzWire(f *testing.F) {
	for _, s := range []string{
		`{"key":"count"}`, `{"key":"k","value":"aGk="}`, `{"prefix":"a","after":"b","limit":5}`,
		`{"level":"warn","message":"m","fields":{"n":1,"x":[1,{"y":null}],"s":"\u00e9"}}`,
		`{"type":"call","id":7,"op":"kv.get","req":{"key":"count"}}`,
		`{"type":"result","id":1,"output":"SGVsbG8=","error":{"code":"denied","message":"no"}}`,
		`{"type":"invoke","id":18446744073709551615,"action":"a","input":"","correlation_id":"c"}`,
		``, `null`, `{`, `[]`, `{"key":1e999}`, `{"limit":-1}`, `{"limit":1e300}`, `{"value":"not base64!"}`,
		`{"key":"\ud800"}`, "{\"key\":\"\xff\xfe\"}", `{"fields":{"a":{"b":{"c":{"d":[[[[[[]]]]]]}}}}}`,
		`{"req":` + string(make([]byte, 64)) + `}`, `{"type":"call","req":{"a":1,"a":2}}`,
		`{"model":"notes","doc":{"title":"x","tags":["a"],"due":"2026-01-01T00:00:00Z"}}`,
		`{"model":"notes","where":[["done","=",false],["tags","contains","a"],["n","in",[1,2]]],"order":["-due"],"limit":10,"after":"eyJ2IjoxfQ"}`,
		`{"model":"notes","where":[["a","="]]}`, `{"model":"notes","where":[[1,2,3]]}`, `{"model":"notes","where":[null]}`, `{"model":"notes","where":"x"}`,
		`{"model":"notes","id":"0123456789abcdef0123456789ab","set":{"done":true},"unset":["due"],"version":3}`,
		`{"model":"n","doc":"{"a":1}"}`, `{"docs":[{"id":"x","version":1,"doc":{},"owner":"o","created":"c","updated":"u"}],"next":"n"}`,
	} {
		f.Add([]byte(s))
	}
	targets := []func() any{
		func() any { return new(abi.ConfigGetRequest) },
		func() any { return new(abi.KVGetRequest) },
		func() any { return new(abi.KVPutRequest) },
		func() any { return new(abi.KVDeleteRequest) },
		func() any { return new(abi.KVListRequest) },
		func() any { return new(abi.LogWriteRequest) },
		func() any { return new(abi.KVGetResponse) },
		func() any { return new(abi.KVListResponse) },
		func() any { return new(abi.Error) },
		func() any { return new(abi.PipeMessage) },
		func() any { return new(abi.DBInsertRequest) },
		func() any { return new(abi.DBGetRequest) },
		func() any { return new(abi.DBQueryRequest) },
		func() any { return new(abi.DBUpdateRequest) },
		func() any { return new(abi.DBDeleteRequest) },
		func() any { return new(abi.DBCountRequest) },
		func() any { return new(abi.DBGetResponse) },
		func() any { return new(abi.DBQueryResponse) },
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > abi.MaxRequestBytes {
			t.Skip("the transports refuse a request this long before decoding it")
		}
		for _, newV := range targets {
			v := newV()
			err := abi.Unmarshal(b, v)
			if err != nil {
				var ae *abi.Error
				if !errors.As(err, &ae) || ae.Code != abi.CodeInvalidArgument {
					t.Fatalf("Unmarshal(%T) error %v is not an invalid_argument *abi.Error", v, err)
				}
				continue
			}
			enc, err := abi.Marshal(v)
			if err != nil {
				t.Fatalf("Marshal(%T) of a decoded value: %v", v, err)
			}
			w := newV()
			if err := abi.Unmarshal(enc, w); err != nil {
				t.Fatalf("re-decoding %T %s: %v", v, enc, err)
			}
			enc2, _ := abi.Marshal(w)
			if !reflect.DeepEqual(enc, enc2) {
				t.Fatalf("%T round trip changed:\n%s\n%s", v, enc, enc2)
			}
		}
	})
}

// FuzzPacking: the i64 packings of the ABI split back into what they were
// made of, whatever the values.
func FuzzPacking(f *testing.F) {
	f.Add(uint32(0), uint32(0), false)
	f.Add(uint32(0xffffffff), uint32(0xffffffff), true)
	f.Add(uint32(65536), uint32(abi.MaxOutputLen), false)
	f.Fuzz(func(t *testing.T, ptr, n uint32, failed bool) {
		if p, m := abi.Unpack(abi.Pack(ptr, n)); p != ptr || m != n {
			t.Fatalf("Pack(%d, %d) round trip = %d, %d", ptr, n, p, m)
		}
		p, m, fl := abi.UnpackOutput(abi.PackOutput(ptr, n, failed))
		if p != ptr || m != n&abi.MaxOutputLen || fl != failed {
			t.Fatalf("PackOutput(%d, %d, %v) round trip = %d, %d, %v", ptr, n, failed, p, m, fl)
		}
		if s, m := abi.UnpackCall(abi.PackCall(abi.Status(ptr), n)); s != abi.Status(ptr) || m != n {
			t.Fatalf("PackCall(%d, %d) round trip = %d, %d", ptr, n, s, m)
		}
	})
}
