package wasmlimit

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
)

const (
	// TailBytes is how much of a stream's last output a LineWriter keeps,
	// and the longest line it holds back waiting for its end.
	TailBytes = 2048
	// LogBudget is the bytes of a stream's output a LineWriter forwards to
	// the log in one invocation; the rest is counted and reported as
	// dropped.
	LogBudget = 64 << 10
)

// LineWriter receives what a plugin writes to its WASI stdout or stderr.
// Plugins have no terminal: their output goes to the host log, tagged with
// the invocation, and the last bytes are kept so that a trap or a panic is
// reported with what the guest printed on its way down (a Go guest's panic
// message arrives this way).
//
// Each write that ends a line becomes one record: a Go guest writes a
// panic and its stack in one call, and that becomes one record rather than
// thirty. What the host holds is bounded whatever the guest writes: at
// most TailBytes of tail and, for the pending line, what the invocation's
// log budget could still take. A write that could never be logged is
// counted as dropped and not copied, so a guest writing 100 MB in one call
// does not make the host keep a 100 MB line (nor a pooled instance keep
// its buffer), and no write costs more than a pass over its bytes.
//
// The zero value, with Stream and Level set, is ready; Begin and End
// bracket each invocation. Output written outside one (by _initialize,
// say) is kept for Summary but not logged.
type LineWriter struct {
	Stream string     // "stdout" or "stderr", as the records name it
	Level  slog.Level // of the records

	mu      sync.Mutex
	ctx     context.Context
	log     func() *slog.Logger // the current invocation's tagged logger
	line    []byte
	tail    []byte
	budget  int // bytes still forwarded to the log in this invocation
	dropped int
	fatal   string // the first "panic: " or "fatal error: " line of the invocation
}

// Begin starts an invocation: output goes to log(), with ctx, until End.
func (w *LineWriter) Begin(ctx context.Context, log func() *slog.Logger) {
	w.mu.Lock()
	w.ctx, w.log, w.line, w.tail, w.budget, w.dropped, w.fatal = ctx, log, w.line[:0], w.tail[:0], LogBudget, 0, ""
	w.mu.Unlock()
}

// End ends the invocation: it logs the pending line and, if any output
// was dropped, one warning saying how much.
func (w *LineWriter) End() {
	w.mu.Lock()
	if len(w.line) > 0 {
		w.emit(w.line)
		w.line = w.line[:0]
	}
	if w.dropped > 0 && w.log != nil {
		w.log().LogAttrs(w.ctx, slog.LevelWarn, "guest output dropped from the log",
			slog.String("stream", w.Stream), slog.Int("bytes", w.dropped))
	}
	w.ctx, w.log = nil, nil
	w.mu.Unlock()
}

// Write implements io.Writer. It never fails: a guest's output is not
// worth failing its write for.
func (w *LineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(p) >= TailBytes {
		w.tail = append(w.tail[:0], p[len(p)-TailBytes:]...)
	} else {
		w.tail = append(w.tail, p...)
		if len(w.tail) > TailBytes {
			w.tail = append(w.tail[:0], w.tail[len(w.tail)-TailBytes:]...)
		}
	}
	if len(w.line)+len(p) > max(w.budget, TailBytes) {
		// Too big to be logged: look for the fatal line, count the rest.
		w.findFatal(w.line)
		w.findFatal(p)
		if w.log != nil {
			w.dropped += len(w.line) + len(p)
		}
		w.line = w.line[:0]
		return len(p), nil
	}
	w.line = append(w.line, p...)
	if bytes.HasSuffix(w.line, []byte("\n")) || len(w.line) > TailBytes {
		w.emit(bytes.TrimRight(w.line, "\n"))
		w.line = w.line[:0]
	}
	return len(p), nil
}

// findFatal keeps the first "panic: " or "fatal error: " line of the
// invocation: Go prints its stack after it, and the runtime's fatal errors
// (a deadlock, out of memory) begin with the second.
func (w *LineWriter) findFatal(text []byte) {
	if w.fatal != "" {
		return
	}
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		if bytes.HasPrefix(line, []byte("panic: ")) || bytes.HasPrefix(line, []byte("fatal error: ")) {
			w.fatal = string(line[:min(len(line), TailBytes)])
			return
		}
	}
}

func (w *LineWriter) emit(text []byte) {
	w.findFatal(text)
	if w.log == nil || len(bytes.TrimSpace(text)) == 0 {
		return
	}
	if len(text) > w.budget {
		w.dropped += len(text)
		return
	}
	w.budget -= len(text)
	w.log().LogAttrs(w.ctx, w.Level, string(text), slog.String("source", "guest"), slog.String("stream", w.Stream))
}

// Summary is one line saying how the guest went down: the invocation's
// first panic or fatal error line, else the last non-blank line it wrote
// (at most TailBytes).
func (w *LineWriter) Summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fatal != "" {
		return w.fatal
	}
	t := bytes.TrimSpace(w.tail)
	if i := bytes.LastIndexByte(t, '\n'); i >= 0 {
		t = t[i+1:]
	}
	return string(t)
}
