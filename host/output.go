package host

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/moat-sandbox/moat/internal/wasmlimit"
)

// guestStream receives what a plugin writes to its WASI stdout or stderr:
// complete lines go to the host log, tagged with the invocation, within a
// budget, and the last bytes are kept so that a trap or a panic is
// reported with what the guest printed on its way down. It is
// wasmlimit.LineWriter (shared with the Extism host) under the names the
// instance uses.
//
// During an invocation whose caller streams its output (Request.Output)
// the writes go to the caller instead (fwd), not to the log: a session's
// print output is its user's, not the operator's. The check is one atomic
// load per write, so an invocation nobody streams pays nothing else.
type guestStream struct {
	name  string // "stdout" or "stderr"
	level slog.Level
	w     wasmlimit.LineWriter
	fwd   atomic.Pointer[outputForward]
}

// tailBytes is how much of a guest's last output is kept for error
// messages and logs.
const tailBytes = wasmlimit.TailBytes

// Write implements io.Writer.
func (s *guestStream) Write(p []byte) (int, error) {
	if f := s.fwd.Load(); f != nil {
		return f.write(s.name, p)
	}
	return s.w.Write(p)
}

// forward sends the stream's writes to out until unforward, at most limit
// bytes of them (Request.Output).
func (s *guestStream) forward(out func(string, []byte), limit int) {
	s.fwd.Store(&outputForward{out: out, left: max(limit, 0)})
}

// unforward ends forwarding: once it returns, out is not called again,
// whatever the guest goes on writing (an instance abandoned after a
// timeout may, until it is stopped).
func (s *guestStream) unforward() {
	if f := s.fwd.Swap(nil); f != nil {
		f.mu.Lock()
		f.out = nil
		f.mu.Unlock()
	}
}

// ErrOutputLimit is what a guest's write to a streamed stdout or stderr
// fails with once the stream has passed the invocation's MaxOutputBytes
// (Request.Output).
var ErrOutputLimit = errors.New("the output limit was reached: what follows is not streamed")

// outputForward hands one stream's writes to an invocation's caller,
// bounded: past limit bytes each write fails (ErrOutputLimit; wazero
// gives the guest EIO), and the guest decides what its code sees — the
// session REPLs raise it in the code that printed. The write is handed on
// before it returns to the guest, so a caller that writes slowly slows the
// guest (backpressure) and nothing queues in the host.
type outputForward struct {
	mu   sync.Mutex
	out  func(string, []byte)
	left int
}

func (f *outputForward) write(stream string, p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.out == nil { // after the invocation
		return len(p), nil
	}
	if len(p) > f.left {
		if f.left > 0 {
			f.out(stream, p[:f.left])
		}
		n := f.left
		f.left = 0
		return n, ErrOutputLimit
	}
	f.left -= len(p)
	f.out(stream, p)
	return len(p), nil
}

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
