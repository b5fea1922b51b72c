package host

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestGuestStreamForward: a call's caller gets what the guest writes
// (Request.Output) up to the limit, the write that passes it is cut and
// fails (ErrOutputLimit) as every later one does, and once the call ends
// (unforward) a write goes to the log writer again and never to the
// caller — an abandoned instance cannot reach a finished request.
func TestGuestStreamForward(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		limit  int
		writes []string
		got    string
		errs   []bool
	}{
		{"within", 10, []string{"one\n", "two\n"}, "one\ntwo\n", []bool{false, false}},
		{"exactly", 8, []string{"one\n", "two\n"}, "one\ntwo\n", []bool{false, false}},
		{"cut", 6, []string{"one\n", "two\n", "three\n"}, "one\ntw", []bool{false, true, true}},
		{"none", 0, []string{"x"}, "", []bool{true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &guestStream{name: "stdout", level: slog.LevelInfo}
			var got strings.Builder
			s.forward(func(stream string, b []byte) {
				if stream != "stdout" {
					t.Errorf("stream %q", stream)
				}
				got.Write(b)
			}, tc.limit)
			for i, w := range tc.writes {
				n, err := s.Write([]byte(w))
				if failed := err != nil; failed != tc.errs[i] || failed && !errors.Is(err, ErrOutputLimit) {
					t.Fatalf("write %d: %v", i, err)
				}
				if err == nil && n != len(w) {
					t.Fatalf("write %d: %d of %d bytes", i, n, len(w))
				}
			}
			s.unforward()
			if _, err := s.Write([]byte("after\n")); err != nil {
				t.Fatalf("a write after the call: %v", err)
			}
			if got.String() != tc.got {
				t.Fatalf("forwarded %q, want %q", got.String(), tc.got)
			}
			if !strings.Contains(s.summary(), "after") {
				t.Fatalf("a write after the call did not reach the log writer: %q", s.summary())
			}
		})
	}
}

// BenchmarkGuestStreamWrite: what a write costs when nobody streams (the
// log writer's path, behind one atomic load) and when a caller does.
func BenchmarkGuestStreamWrite(b *testing.B) {
	line := []byte("a line the guest printed\n")
	b.Run("log", func(b *testing.B) {
		s := &guestStream{name: "stdout", level: slog.LevelInfo}
		for b.Loop() {
			_, _ = s.Write(line)
		}
	})
	b.Run("forward", func(b *testing.B) {
		s := &guestStream{name: "stdout", level: slog.LevelInfo}
		s.forward(func(string, []byte) {}, 1<<62)
		for b.Loop() {
			_, _ = s.Write(line)
		}
	})
}
