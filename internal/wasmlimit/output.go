package wasmlimit

import (
	"context"
	"fmt"
	"io"
	"sync"
)

// OutputCap caps the output streams of one run (a WASI command, an
// interpreter's script). Each writer it makes passes at most its limit to
// the writer underneath; past it, the write fails and the run is stopped:
// a guest flooding its output would otherwise run to its deadline,
// ignoring write errors. The run is then output_too_large whatever it did
// next: a program that ignores the write error and exits cleanly before the
// cancellation reaches it still lost output, and a truncated output
// reported as a success is a wrong answer nobody can see.
type OutputCap struct {
	cancel context.CancelFunc

	mu       sync.Mutex
	exceeded string
}

// NewOutputCap returns a cap whose writers call cancel, the run's, when
// they go over.
func NewOutputCap(cancel context.CancelFunc) *OutputCap { return &OutputCap{cancel: cancel} }

// Writer returns a writer that passes at most limit bytes to w (a limit
// of zero or less passes nothing), naming itself stream in Exceeded and in
// its error.
func (c *OutputCap) Writer(w io.Writer, stream string, limit int) io.Writer {
	return &capWriter{w: w, left: max(limit, 0), cap: c, stream: stream}
}

// Exceeded names the first stream that went over its limit, or is "".
func (c *OutputCap) Exceeded() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exceeded
}

type capWriter struct {
	w      io.Writer
	left   int
	cap    *OutputCap
	stream string
}

func (c *capWriter) Write(p []byte) (int, error) {
	if len(p) <= c.left {
		c.left -= len(p)
		return c.w.Write(p)
	}
	n := 0
	if c.left > 0 {
		n, _ = c.w.Write(p[:c.left])
		c.left = 0
	}
	c.cap.mu.Lock()
	if c.cap.exceeded == "" {
		c.cap.exceeded = c.stream
	}
	c.cap.mu.Unlock()
	c.cap.cancel()
	return n, fmt.Errorf("%s: output limit reached", c.stream)
}
