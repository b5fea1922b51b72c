package host

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
)

// guestStream receives what a plugin writes to its WASI stdout or stderr.
// Plugins have no terminal: complete lines go to the host log, tagged with
// the invocation, and the last bytes are kept so that a trap or a panic is
// reported with what the guest printed on its way down (a Go guest's panic
// message arrives this way).
type guestStream struct {
	mu      sync.Mutex
	name    string // "stdout" or "stderr"
	level   slog.Level
	log     func() *slog.Logger // the current invocation's tagged logger
	ctx     context.Context
	line    []byte
	tail    []byte
	budget  int // bytes still forwarded to the log in this invocation
	dropped int
	fatal   string // the first "panic: " or "fatal error: " line of the invocation
}

const (
	tailBytes     = 2048
	logBudgetByte = 64 << 10
)

func (s *guestStream) begin(ctx context.Context, log func() *slog.Logger) {
	s.mu.Lock()
	s.ctx, s.log, s.line, s.tail, s.budget, s.dropped, s.fatal = ctx, log, s.line[:0], s.tail[:0], logBudgetByte, 0, ""
	s.mu.Unlock()
}

func (s *guestStream) end() {
	s.mu.Lock()
	if len(s.line) > 0 {
		s.emit(s.line)
		s.line = s.line[:0]
	}
	if s.dropped > 0 && s.log != nil {
		s.log().LogAttrs(s.ctx, slog.LevelWarn, "guest output dropped from the log",
			slog.String("stream", s.name), slog.Int("bytes", s.dropped))
	}
	s.ctx, s.log = nil, nil
	s.mu.Unlock()
}

// Write buffers guest output and emits it as one log record per write
// that ends a line: a Go guest writes a panic and its stack in one call,
// and that becomes one record rather than thirty.
//
// The stream holds at most tailBytes of tail and, for the line, what the
// invocation's log budget could still take: a write that could never be
// logged is counted as dropped and not copied, so a guest writing 100 MB to
// stdout in one call does not make the host keep a 100 MB line (nor the
// pooled instance keep its buffer).
func (s *guestStream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(p) >= tailBytes {
		s.tail = append(s.tail[:0], p[len(p)-tailBytes:]...)
	} else {
		s.tail = append(s.tail, p...)
		if len(s.tail) > tailBytes {
			s.tail = append(s.tail[:0], s.tail[len(s.tail)-tailBytes:]...)
		}
	}
	if len(s.line)+len(p) > max(s.budget, tailBytes) {
		// Too big to be logged: look for the fatal line, count the rest.
		s.findFatal(s.line)
		s.findFatal(p)
		if s.log != nil {
			s.dropped += len(s.line) + len(p)
		}
		s.line = s.line[:0]
		return len(p), nil
	}
	s.line = append(s.line, p...)
	if bytes.HasSuffix(s.line, []byte("\n")) || len(s.line) > tailBytes {
		s.emit(bytes.TrimRight(s.line, "\n"))
		s.line = s.line[:0]
	}
	return len(p), nil
}

// findFatal keeps the first "panic: " or "fatal error: " line of the
// invocation.
func (s *guestStream) findFatal(text []byte) {
	if s.fatal != "" {
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
			s.fatal = string(line[:min(len(line), tailBytes)])
			return
		}
	}
}

func (s *guestStream) emit(text []byte) {
	s.findFatal(text)
	if s.log == nil { // written outside an invocation, e.g. by _initialize
		return
	}
	if len(text) > s.budget {
		s.dropped += len(text)
		return
	}
	s.budget -= len(text)
	s.log().LogAttrs(s.ctx, s.level, string(text), slog.String("source", "guest"), slog.String("stream", s.name))
}

// summary is one line saying how the guest went down: its first panic or
// fatal error line (Go prints stacks after it), else its last line.
func (s *guestStream) summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fatal != "" {
		return s.fatal
	}
	t := bytes.TrimSpace(s.tail)
	if i := bytes.LastIndexByte(t, '\n'); i >= 0 {
		t = t[i+1:]
	}
	return string(t)
}
