package abi_test

import (
	"errors"
	"testing"

	"github.com/moat-sandbox/moat/abi"
)

func TestPacking(t *testing.T) {
	for _, tt := range []struct {
		ptr, n uint32
		failed bool
	}{{0, 0, false}, {65536, 5, false}, {0xffffffff, abi.MaxOutputLen, true}, {1024, 53, true}} {
		p, n, f := abi.UnpackOutput(abi.PackOutput(tt.ptr, tt.n, tt.failed))
		if p != tt.ptr || n != tt.n || f != tt.failed {
			t.Errorf("PackOutput(%d, %d, %v) round trip = %d, %d, %v", tt.ptr, tt.n, tt.failed, p, n, f)
		}
	}
	if s, n := abi.UnpackCall(abi.PackCall(abi.StatusTooSmall, 70000)); s != abi.StatusTooSmall || n != 70000 {
		t.Errorf("PackCall round trip = %d, %d", s, n)
	}
	if p, n := abi.Unpack(abi.Pack(0x80000000, 7)); p != 0x80000000 || n != 7 {
		t.Errorf("Pack round trip = %d, %d", p, n)
	}
}

func TestUnmarshalErrorIsInvalidArgument(t *testing.T) {
	var req abi.KVGetRequest
	err := abi.Unmarshal([]byte(`{"key":`), &req)
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.Code != abi.CodeInvalidArgument {
		t.Fatalf("got %v", err)
	}
}
