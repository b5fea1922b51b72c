package host_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/policy"
)

// TestFullInstanceIsDiscarded: a pooled instance whose memory.grow the
// host refused during a call serves no other call, whatever its guest made
// of the refusal (testdata/wat/hostile_hoard.wat grows until refused and
// survives it, as an interpreter catching its own out-of-memory error
// does). The hoarding caller keeps its answer, or gets memory_limit with
// its guest's message; the next caller, another user, is served by a new
// instance, not one whose memory is full. A call that stays within the
// limit keeps its instance.
func TestFullInstanceIsDiscarded(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	m, err := h.Load(context.Background(), fixture(t, "hostile_hoard.wasm"), host.LoadOptions{Name: "hoard",
		Limits: host.Limits{MemoryLimitPages: 64, Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	hog, other := policy.Principal{User: "mallory", Org: "acme"}, policy.Principal{User: "ann", Org: "acme"}
	call := func(p policy.Principal, action, input string) (string, error) {
		res, err := m.Invoke(context.Background(), host.Request{Action: action, Input: []byte(input), Principal: p})
		return string(res.Output), err
	}
	for _, tt := range []struct {
		name, input string
		code        abi.Code // the hoarding call's ("" ok)
		out, reason string   // its output, or what its reason contains
	}{
		{name: "survives the refusal and answers", input: "0", out: "full"},
		{name: "survives the refusal and fails with its own error", input: "1", code: abi.CodeMemoryLimit,
			reason: "past the limit of 64 pages (4 MiB) and failed: out of memory, caught"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// A warm instance that has served calls: the count rises.
			first, err := call(other, "calls", "")
			if err != nil {
				t.Fatal(err)
			}
			if out, err := call(other, "calls", ""); err != nil || out[0] != first[0]+1 {
				t.Fatalf("calls on a warm instance: %q after %q, %v", out, first, err)
			}
			out, err := call(hog, "hoard", tt.input)
			if abi.CodeOf(err) != tt.code || tt.code == "" && out != tt.out || tt.code != "" && !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("hoard: %q, %v; want %q %q %q", out, err, tt.code, tt.out, tt.reason)
			}
			// The next caller: a new instance (its first call).
			if out, err := call(other, "calls", ""); err != nil || out != "1" {
				t.Fatalf("the next user's call after hoard: %q, %v; want 1 from a new instance", out, err)
			}
			if n := m.IdleInstances(); n != 1 {
				t.Errorf("%d idle instances after calls one at a time, want 1", n)
			}
		})
	}
}
