package wasmlimit

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestOutputCap(t *testing.T) {
	type write struct {
		stream string // "stdout" or "stderr"
		data   string
		n      int
		err    string // "" or the error's text
	}
	tests := []struct {
		name           string
		limit          int
		writes         []write
		stdout, stderr string
		exceeded       string
	}{
		{name: "under the cap", limit: 10, writes: []write{{"stdout", "hello", 5, ""}, {"stderr", "oops", 4, ""}},
			stdout: "hello", stderr: "oops"},
		{name: "exactly the cap", limit: 5, writes: []write{{"stdout", "hel", 3, ""}, {"stdout", "lo", 2, ""}, {"stdout", "", 0, ""}},
			stdout: "hello"},
		{name: "over in one write passes the cap's worth and says so", limit: 4, writes: []write{{"stdout", "hello", 4, "stdout: output limit reached"}},
			stdout: "hell", exceeded: "stdout"},
		{name: "writes after the cap fail", limit: 4, writes: []write{{"stdout", "hell", 4, ""}, {"stdout", "o", 0, "stdout: output limit reached"},
			{"stdout", "again", 0, "stdout: output limit reached"}}, stdout: "hell", exceeded: "stdout"},
		{name: "the first stream over is the one named", limit: 3, writes: []write{{"stderr", "abcd", 3, "stderr: output limit reached"},
			{"stdout", "wxyz", 3, "stdout: output limit reached"}}, stdout: "wxy", stderr: "abc", exceeded: "stderr"},
		{name: "each stream has its own cap", limit: 3, writes: []write{{"stdout", "abc", 3, ""}, {"stderr", "def", 3, ""}},
			stdout: "abc", stderr: "def"},
		{name: "zero cap", limit: 0, writes: []write{{"stdout", "a", 0, "stdout: output limit reached"}}, exceeded: "stdout"},
		// A negative limit (a caller's unvalidated knob) passes nothing;
		// the old copy in the Ruby driver sliced p[:left] and panicked.
		{name: "negative cap", limit: -5, writes: []write{{"stderr", "a", 0, "stderr: output limit reached"}}, exceeded: "stderr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			canceled := 0
			c := NewOutputCap(func() { canceled++ })
			var stdout, stderr bytes.Buffer
			ws := map[string]interface {
				Write([]byte) (int, error)
			}{"stdout": c.Writer(&stdout, "stdout", tt.limit), "stderr": c.Writer(&stderr, "stderr", tt.limit)}
			failures := 0
			for i, w := range tt.writes {
				n, err := ws[w.stream].Write([]byte(w.data))
				got := ""
				if err != nil {
					got = err.Error()
					failures++
				}
				if n != w.n || got != w.err {
					t.Fatalf("write %d (%s %q): (%d, %q), want (%d, %q)", i, w.stream, w.data, n, got, w.n, w.err)
				}
			}
			if stdout.String() != tt.stdout || stderr.String() != tt.stderr {
				t.Errorf("passed stdout %q stderr %q, want %q %q", stdout.String(), stderr.String(), tt.stdout, tt.stderr)
			}
			if c.Exceeded() != tt.exceeded {
				t.Errorf("Exceeded() = %q, want %q", c.Exceeded(), tt.exceeded)
			}
			if canceled != failures {
				t.Errorf("canceled %d times for %d refused writes", canceled, failures)
			}
		})
	}
}

// TestOutputCapStopsTheRun: the cancel a cap calls is the run's.
func TestOutputCapStopsTheRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := NewOutputCap(cancel)
	w := c.Writer(&strings.Builder{}, "stdout", 2)
	if _, err := w.Write([]byte("abc")); err == nil {
		t.Fatal("no error past the cap")
	}
	if ctx.Err() != context.Canceled {
		t.Fatalf("the run's context: %v, want canceled", ctx.Err())
	}
}
