package ruby_test

import (
	"bytes"
	"fmt"
	"regexp"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	rbsdk "github.com/moat-sandbox/moat/guests/ruby"
	"github.com/moat-sandbox/moat/host/transport"
)

// TestSDKConstants: moat.rb's copies of the wire constants are abi's and
// the transport's. The SDK's behaviour is tested through a real host in
// languages/ruby (there is no Ruby outside WASM on this machine).
func TestSDKConstants(t *testing.T) {
	for _, c := range []struct{ re, want string }{
		{`(?m)^  ABI_VERSION = (\d+)`, fmt.Sprint(abi.Version)},
		{`(?m)^  OP_NEXT = "([^"]+)"`, abi.OpNext},
		{`(?m)^  RESIDENT_ENV = "([^"]+)"`, abi.ResidentEnv},
		{`(?m)^  OPS_ENV = "([^"]+)"`, transport.DeviceEnv},
		{`(?m)^  MAX_REQUEST = (\d+ << \d+)`, "4 << 20"},
	} {
		m := regexp.MustCompile(c.re).FindSubmatch(rbsdk.SDK)
		if m == nil {
			t.Fatalf("moat.rb has no %s", c.re)
		}
		if got := string(bytes.Join(m[1:], []byte(" "))); got != c.want {
			t.Fatalf("moat.rb %s: %q, want %q", c.re, got, c.want)
		}
	}
	if abi.MaxRequestBytes != 4<<20 {
		t.Fatal("abi.MaxRequestBytes changed: update moat.rb's MAX_REQUEST")
	}
}
