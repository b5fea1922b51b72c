package host

import (
	"context"
	"log/slog"

	"github.com/moat-sandbox/moat/internal/wasmlimit"
)

// guestStream receives what a plugin writes to its WASI stdout or stderr:
// complete lines go to the host log, tagged with the invocation, within a
// budget, and the last bytes are kept so that a trap or a panic is
// reported with what the guest printed on its way down. It is
// wasmlimit.LineWriter (shared with the Extism host) under the names the
// instance uses.
type guestStream struct {
	name  string // "stdout" or "stderr"
	level slog.Level
	w     wasmlimit.LineWriter
}

// tailBytes is how much of a guest's last output is kept for error
// messages and logs.
const tailBytes = wasmlimit.TailBytes

// Write implements io.Writer.
func (s *guestStream) Write(p []byte) (int, error) { return s.w.Write(p) }

// begin starts an invocation: complete lines go to log() until end.
func (s *guestStream) begin(ctx context.Context, log func() *slog.Logger) {
	s.w.Stream, s.w.Level = s.name, s.level
	s.w.Begin(ctx, log)
}

// end logs the pending line and what was dropped from the log.
func (s *guestStream) end() { s.w.End() }

// summary is one line saying how the guest went down: its first panic or
// fatal error line (Go prints stacks after it), else its last line.
func (s *guestStream) summary() string { return s.w.Summary() }
