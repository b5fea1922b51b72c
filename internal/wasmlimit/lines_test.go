package wasmlimit

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// records is a slog.Handler that keeps what it is given, as
// "LEVEL stream=... message" (the warning about dropped output as
// "WARN dropped=<bytes>").
type records struct {
	mu  sync.Mutex
	got []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	attrs := map[string]string{}
	rec.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
	s := rec.Level.String() + " stream=" + attrs["stream"] + " " + rec.Message
	if d, ok := attrs["bytes"]; ok {
		s = rec.Level.String() + " dropped=" + d
	}
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
	return nil
}

func TestLineWriter(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	line := strings.Repeat("y", 1023) + "\n"
	var budget, budgetRecords []string
	for i := 0; i < 100; i++ {
		budget = append(budget, line)
		if (i+1)*1023 <= LogBudget {
			budgetRecords = append(budgetRecords, "WARN stream=stderr "+line[:1023])
		}
	}
	budgetRecords = append(budgetRecords, fmt.Sprintf("WARN dropped=%d", (100-len(budgetRecords))*1023))
	goPanic := "panic: boom\n\ngoroutine 1 [running]:\nmain.main()\n\t/src/main.go:5 +0x2\n"
	tests := []struct {
		name    string
		before  []string // written before Begin (by _initialize, say)
		writes  []string
		records []string
		summary string
	}{
		{name: "one record per line written", writes: []string{"one\n", "two\n"},
			records: []string{"WARN stream=stderr one", "WARN stream=stderr two"}, summary: "two"},
		{name: "a line in pieces is one record", writes: []string{"on", "e", "\n"},
			records: []string{"WARN stream=stderr one"}, summary: "one"},
		{name: "a write of several lines is one record", writes: []string{goPanic},
			records: []string{"WARN stream=stderr " + strings.TrimRight(goPanic, "\n")}, summary: "panic: boom"},
		{name: "the first panic line, not the stack's last", writes: []string{"panic: first\n", "goroutine 1\n", "panic: second\n", "main.go:9\n"},
			records: []string{"WARN stream=stderr panic: first", "WARN stream=stderr goroutine 1", "WARN stream=stderr panic: second", "WARN stream=stderr main.go:9"},
			summary: "panic: first"},
		// The Extism copy knew only "panic: ": a Go runtime's fatal error
		// was summarized by the last line of its stack.
		{name: "a Go runtime fatal error", writes: []string{"fatal error: all goroutines are asleep - deadlock!\n\ngoroutine 1 [chan receive]:\nmain.main()\n"},
			records: []string{"WARN stream=stderr fatal error: all goroutines are asleep - deadlock!\n\ngoroutine 1 [chan receive]:\nmain.main()"},
			summary: "fatal error: all goroutines are asleep - deadlock!"},
		{name: "the pending line is logged at End", writes: []string{"no newline"},
			records: []string{"WARN stream=stderr no newline"}, summary: "no newline"},
		{name: "blank lines are not records", writes: []string{"\n", "  \n", "\n\n", "last\n", "\n"},
			records: []string{"WARN stream=stderr last"}, summary: "last"},
		{name: "a line longer than the tail is logged without its end", writes: []string{strings.Repeat("a", TailBytes+1), "b\n"},
			records: []string{"WARN stream=stderr " + strings.Repeat("a", TailBytes+1), "WARN stream=stderr b"},
			summary: strings.Repeat("a", TailBytes-2) + "b"}, // the tail's last line
		// One write over the budget is counted, not copied: the Extism
		// copy appended it whole and kept it as its last line, which an
		// error message then quoted (a 1 MiB reason).
		{name: "a write that could never be logged", writes: []string{"before\n", big, "after\n"},
			records: []string{"WARN stream=stderr before", "WARN stream=stderr after", fmt.Sprintf("WARN dropped=%d", len(big))},
			summary: strings.Repeat("x", TailBytes-6) + "after"}, // "after" ends the big write's line
		{name: "the fatal line of a dropped write is still found", writes: []string{big + "\npanic: hidden\n" + big},
			records: []string{fmt.Sprintf("WARN dropped=%d", 2*len(big)+len("\npanic: hidden\n"))}, summary: "panic: hidden"},
		// 100 records of 1023 bytes: 64 fit in LogBudget, the rest are
		// reported as dropped.
		{name: "the budget", writes: budget, records: budgetRecords, summary: line[:1023]},
		{name: "output before Begin is summarized, not logged", before: []string{"init says hi\n"},
			summary: "init says hi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r records
			log := slog.New(&r)
			w := &LineWriter{Stream: "stderr", Level: slog.LevelWarn}
			for _, s := range tt.before {
				if _, err := io.WriteString(w, s); err != nil {
					t.Fatal(err)
				}
			}
			if len(tt.before) > 0 {
				if got := w.Summary(); got != tt.summary {
					t.Fatalf("Summary() before Begin = %q, want %q", got, tt.summary)
				}
				if len(r.got) != 0 {
					t.Fatalf("records before Begin: %q", r.got)
				}
				return
			}
			w.Begin(context.Background(), func() *slog.Logger { return log })
			for _, s := range tt.writes {
				n, err := io.WriteString(w, s)
				if n != len(s) || err != nil {
					t.Fatalf("Write: (%d, %v), want (%d, nil)", n, err, len(s))
				}
			}
			summary := w.Summary()
			w.End()
			if strings.Join(r.got, "\n|") != strings.Join(tt.records, "\n|") {
				t.Errorf("records:\n%q\nwant:\n%q", r.got, tt.records)
			}
			if summary != tt.summary {
				t.Errorf("Summary() = %q, want %q", clip(summary), clip(tt.summary))
			}
			if len(summary) > TailBytes {
				t.Errorf("Summary() is %d bytes, over %d", len(summary), TailBytes)
			}
			// What the writer holds is bounded, whatever was written.
			if c := cap(w.line) + cap(w.tail); c > LogBudget+2*TailBytes {
				t.Errorf("the writer holds %d bytes of buffers", c)
			}
		})
	}
}

// TestLineWriterNextInvocation: Begin forgets the last invocation's fatal
// line, tail and budget.
func TestLineWriterNextInvocation(t *testing.T) {
	var r records
	log := slog.New(&r)
	w := &LineWriter{Stream: "stdout", Level: slog.LevelInfo}
	w.Begin(context.Background(), func() *slog.Logger { return log })
	_, _ = io.WriteString(w, "panic: first call\n")
	_, _ = io.WriteString(w, strings.Repeat("z", 2*LogBudget)+"\n")
	w.End()
	w.Begin(context.Background(), func() *slog.Logger { return log })
	_, _ = io.WriteString(w, "second call\n")
	if got := w.Summary(); got != "second call" {
		t.Errorf("Summary() = %q, want the second call's line", got)
	}
	w.End()
	if want := "INFO stream=stdout second call"; r.got[len(r.got)-1] != want {
		t.Errorf("last record %q, want %q (the budget is per invocation)", r.got[len(r.got)-1], want)
	}
}

// TestLineWriterLinear: one write of many short lines costs a pass over
// its bytes. The Extism copy split it line by line, moving the rest of the
// buffer down after each: quadratic, and a host function that no deadline
// interrupts (wazero checks the context in guest code only): 512 KiB of
// 2-byte lines took it 0.8 s, so 8 MiB minutes and 64 MiB hours.
func TestLineWriterLinear(t *testing.T) {
	testenv.Timing(t)
	w := &LineWriter{Stream: "stdout", Level: slog.LevelInfo}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w.Begin(context.Background(), func() *slog.Logger { return log })
	p := bytes.Repeat([]byte("a\n"), 4<<20)
	start := time.Now()
	if _, err := w.Write(p); err != nil {
		t.Fatal(err)
	}
	w.End()
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("one 8 MiB write of 2-byte lines took %s", took)
	}
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + fmt.Sprintf("…(%d bytes)", len(s))
	}
	return s
}

func BenchmarkLineWriter(b *testing.B) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, size := range []int{16, 256, 4096} {
		p := append(bytes.Repeat([]byte("x"), size-1), '\n')
		b.Run(fmt.Sprintf("line-%d", size), func(b *testing.B) {
			w := &LineWriter{Stream: "stdout", Level: slog.LevelInfo}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if i%64 == 0 { // an invocation writes 64 lines
					w.End()
					w.Begin(context.Background(), func() *slog.Logger { return log })
				}
				_, _ = w.Write(p)
			}
			w.End()
		})
	}
}
