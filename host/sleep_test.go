package host_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestPollOneoffClocks: a WASI sleep works on either clock, relative or
// absolute (wazero alone answers an absolute one ENOTSUP, errno 58: every
// CPython time.sleep), and a hostile timeout is bounded by the run's
// deadline: never an early return, never a panic, never past the
// deadline. testdata/wat/sleep.wat makes one clock subscription as its
// stdin says and exits with what poll_oneoff answered; it also checks that
// the host handed its subscription back unchanged.
func TestPollOneoffClocks(t *testing.T) {
	testenv.Timing(t)
	wasm, err := os.ReadFile("../testdata/sleep.wasm")
	if err != nil {
		t.Fatal(err)
	}
	h := newHost(t, nil)
	m, err := h.Load(context.Background(), wasm, host.LoadOptions{Name: "sleep"})
	if err != nil {
		t.Fatal(err)
	}
	const (
		realtime, monotonic = 0, 1
		relative, absolute  = 0, 1
		wasiEINVAL          = 28
	)
	sub := func(timeout uint64, clock, flags uint32, addNow bool) []byte {
		b := make([]byte, 32)
		binary.LittleEndian.PutUint64(b, timeout)
		binary.LittleEndian.PutUint32(b[8:], clock)
		binary.LittleEndian.PutUint32(b[12:], flags)
		if addNow {
			binary.LittleEndian.PutUint32(b[16:], 1)
		}
		return b
	}
	past := uint64(1e9)
	cases := []struct {
		name     string
		stdin    []byte
		limit    time.Duration
		exit     uint32   // when code is ""
		code     abi.Code // the run's error
		min, max time.Duration
	}{
		{"relative 50ms", sub(50e6, monotonic, relative, false), 5 * time.Second, 0, "", 50 * time.Millisecond, 2 * time.Second},
		{"absolute monotonic now+50ms", sub(50e6, monotonic, absolute, true), 5 * time.Second, 0, "", 45 * time.Millisecond, 2 * time.Second},
		{"absolute realtime now+50ms", sub(50e6, realtime, absolute, true), 5 * time.Second, 0, "", 45 * time.Millisecond, 2 * time.Second},
		{"absolute in the past", sub(-past, monotonic, absolute, true), 5 * time.Second, 0, "", 0, time.Second},
		{"absolute zero", sub(0, realtime, absolute, false), 5 * time.Second, 0, "", 0, time.Second},
		{"absolute far future ends at the deadline", sub(math.MaxUint64, monotonic, absolute, false), 300 * time.Millisecond, 0, abi.CodeTimeout, 250 * time.Millisecond, 3 * time.Second},
		{"absolute now+MaxInt64 ends at the deadline", sub(math.MaxInt64, realtime, absolute, true), 300 * time.Millisecond, 0, abi.CodeTimeout, 250 * time.Millisecond, 3 * time.Second},
		// wazero read these as a negative duration and returned at once.
		{"relative MaxUint64 ends at the deadline", sub(math.MaxUint64, monotonic, relative, false), 300 * time.Millisecond, 0, abi.CodeTimeout, 250 * time.Millisecond, 3 * time.Second},
		{"relative 2^63 ends at the deadline", sub(1<<63, realtime, relative, false), 300 * time.Millisecond, 0, abi.CodeTimeout, 250 * time.Millisecond, 3 * time.Second},
		{"relative 1e18 ends at the deadline", sub(1e18, monotonic, relative, false), 300 * time.Millisecond, 0, abi.CodeTimeout, 250 * time.Millisecond, 3 * time.Second},
		{"unknown flags", sub(50e6, monotonic, 2, false), 5 * time.Second, wasiEINVAL, "", 0, time.Second},
		{"absolute on an unknown clock", sub(50e6, 7, absolute, false), 5 * time.Second, wasiEINVAL, "", 0, time.Second},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			start := time.Now()
			res, err := m.Run(context.Background(), host.RunRequest{Stdin: bytes.NewReader(tt.stdin), Stderr: &stderr, Principal: ann, Limits: host.Limits{Timeout: tt.limit}})
			took := time.Since(start)
			if tt.code != "" {
				if abi.CodeOf(err) != tt.code {
					t.Fatalf("got %v (exit %d), want %s", err, res.ExitCode, tt.code)
				}
			} else if err != nil || res.ExitCode != tt.exit {
				t.Fatalf("exit %d, %v, want exit %d (stderr %q)", res.ExitCode, err, tt.exit, stderr.String())
			}
			if took < tt.min || took > tt.max {
				t.Fatalf("took %s, want between %s and %s", took, tt.min, tt.max)
			}
		})
	}
	t.Run("cancellation ends an absolute sleep", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		_, err := m.Run(ctx, host.RunRequest{Stdin: bytes.NewReader(sub(math.MaxUint64, monotonic, absolute, false)), Principal: ann, Limits: host.Limits{Timeout: time.Minute}})
		if abi.CodeOf(err) != abi.CodeCanceled {
			t.Fatalf("got %v, want %s", err, abi.CodeCanceled)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("took %s after a cancellation at 100ms", took)
		}
	})
}
