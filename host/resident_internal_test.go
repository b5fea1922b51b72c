package host

import (
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestSpinning: the two sides of a resident call poll for each other only
// while every call in flight can have two processors; past that they park
// at once (a guest polling without yielding would hold the processor
// another call's caller needs), and with one processor they always do.
func TestSpinning(t *testing.T) {
	testenv.Timing(t)
	defer residentProcs.Store(residentProcs.Load())
	defer residentCalls.Store(residentCalls.Load())
	for _, tc := range []struct {
		procs int
		calls int64
		poll  bool
	}{
		{1, 1, false}, {2, 1, true}, {2, 2, false}, {4, 2, true}, {4, 3, false}, {16, 8, true}, {16, 9, false},
	} {
		residentProcs.Store(int64(tc.procs))
		residentCalls.Store(tc.calls)
		if got := spinning() != nil; got != tc.poll {
			t.Errorf("%d processors, %d calls in flight: polling %v, want %v", tc.procs, tc.calls, got, tc.poll)
		}
	}
}
