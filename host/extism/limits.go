package extism

import (
	"context"
	"log/slog"

	"github.com/moat-sandbox/moat/internal/wasmlimit"
)

// allocator backs the linear memories of one go-sdk Plugin: the plug-in's
// own and the Extism kernel's, which holds the input, the output, vars and
// every block the PDK allocates. Together they may grow up to the limit of
// the current call, which the host may change between calls; a refused
// grow is recorded (Hit) so the call is reported as memory_limit rather
// than as whatever the guest's runtime printed on its way down. It is
// wasmlimit.Allocator, which moat plugins and the Ruby driver share.
type allocator struct{ wasmlimit.Allocator }

// setLimit sets the limit of the next call, in pages, and forgets the last
// call's hit.
func (a *allocator) setLimit(pages uint32) { a.SetLimit(uint64(pages) * wasmlimit.PageSize) }

// size is the bytes the instance's memories hold now.
func (a *allocator) size() uint64 { return a.Size() }

// lineWriter sends what a plug-in writes to WASI stdout or stderr to the
// call's logger, a record per write that ends a line, within a budget per
// call, and keeps what error messages quote (a Go plug-in's panic arrives
// on stderr). It is wasmlimit.LineWriter, which moat plugins share.
type lineWriter struct{ wasmlimit.LineWriter }

func newLineWriter(stream string, level slog.Level) *lineWriter {
	return &lineWriter{wasmlimit.LineWriter{Stream: stream, Level: level}}
}

// begin starts a call whose records go to log() (the call's tagged
// logger, built on first use).
func (w *lineWriter) begin(log func() *slog.Logger) { w.Begin(context.Background(), log) }

// end ends the call.
func (w *lineWriter) end() { w.End() }

// note is the plug-in's first panic or fatal error line on this stream,
// else its last line, for error messages.
func (w *lineWriter) note() string {
	if s := w.Summary(); s != "" {
		return "; plug-in " + w.Stream + ": " + s
	}
	return ""
}
