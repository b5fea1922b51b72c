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
}

const (
	tailBytes     = 2048
	logBudgetByte = 64 << 10
)

func (s *guestStream) begin(ctx context.Context, log func() *slog.Logger) {
	s.mu.Lock()
	s.ctx, s.log, s.line, s.tail, s.budget, s.dropped = ctx, log, s.line[:0], s.tail[:0], logBudgetByte, 0
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

func (s *guestStream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tail = append(s.tail, p...)
	if len(s.tail) > tailBytes {
		s.tail = append(s.tail[:0], s.tail[len(s.tail)-tailBytes:]...)
	}
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			s.line = append(s.line, rest...)
			if len(s.line) > tailBytes { // a very long line: emit in pieces
				s.emit(s.line)
				s.line = s.line[:0]
			}
			break
		}
		s.line = append(s.line, rest[:i]...)
		s.emit(s.line)
		s.line = s.line[:0]
		rest = rest[i+1:]
	}
	return len(p), nil
}

func (s *guestStream) emit(line []byte) {
	if s.log == nil { // written outside an invocation, e.g. by _initialize
		return
	}
	if len(line) > s.budget {
		s.dropped += len(line)
		return
	}
	s.budget -= len(line)
	s.log().LogAttrs(s.ctx, s.level, string(line), slog.String("source", "guest"), slog.String("stream", s.name))
}

// lastLines returns the kept tail, trimmed to whole lines where possible.
func (s *guestStream) lastLines() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := bytes.TrimSpace(s.tail)
	if i := bytes.LastIndex(t, []byte("\n\n")); i >= 0 && len(t)-i > 16 {
		t = t[i+2:]
	}
	return string(t)
}
