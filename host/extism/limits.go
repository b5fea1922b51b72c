package extism

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero/experimental"
)

// allocator backs the linear memories of one go-sdk Plugin: the plug-in's
// own and the Extism kernel's, which holds the input, the output, vars and
// every block the PDK allocates. Each may grow up to the limit of the
// current call, which the host may change between calls; a refused grow is
// recorded so the call is reported as memory_limit rather than as whatever
// the guest's runtime printed on its way down. (host/memory.go does the
// same for moat plugins; it is unexported there.)
type allocator struct {
	mu    sync.Mutex
	limit uint64
	mems  []*memory
	hit   bool
}

func (a *allocator) setLimit(pages uint32) {
	a.mu.Lock()
	a.limit, a.hit = uint64(pages)*65536, false
	a.mu.Unlock()
}

// Allocate implements experimental.MemoryAllocator.
func (a *allocator) Allocate(capacity, max uint64) experimental.LinearMemory {
	m := &memory{a: a, max: max, buf: make([]byte, 0, min(capacity, max))}
	a.mu.Lock()
	a.mems = append(a.mems, m)
	a.mu.Unlock()
	return m
}

// size is the bytes the instance's memories hold now.
func (a *allocator) size() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var n uint64
	for _, m := range a.mems {
		n += uint64(len(m.buf))
	}
	return n
}

type memory struct {
	a    *allocator
	buf  []byte
	max  uint64
	init bool
}

// Reallocate grows the memory to size bytes; nil makes memory.grow fail.
func (m *memory) Reallocate(size uint64) []byte {
	m.a.mu.Lock()
	limit := m.a.limit
	over := size > limit
	if over {
		m.a.hit = true
	}
	m.a.mu.Unlock()
	if !m.init {
		// wazero cannot take a refused initial allocation; grant it and let
		// the instance be refused (hit is set).
		m.init = true
		m.buf = append(m.buf[:0], make([]byte, size)...)
		return m.buf
	}
	if over || size > m.max {
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	newCap := min(max(size, uint64(cap(m.buf))*2), m.max, max(limit, size))
	buf := make([]byte, size, newCap)
	copy(buf, m.buf)
	m.buf = buf
	return buf
}

// Free implements experimental.LinearMemory.
func (m *memory) Free() { m.buf = nil }

// lineWriter sends what a plug-in writes to WASI stdout or stderr to the
// call's logger, a record per line, and keeps the last line for error
// messages (a Go plug-in's panic arrives on stderr).
type lineWriter struct {
	mu     sync.Mutex
	stream string
	level  slog.Level
	log    func() *slog.Logger // the call's tagged logger, built on first use
	line   []byte
	last   string
	budget int
}

const logBudget = 64 << 10 // bytes of guest output logged per call

func (w *lineWriter) begin(log func() *slog.Logger) {
	w.mu.Lock()
	w.log, w.line, w.last, w.budget = log, w.line[:0], "", logBudget
	w.mu.Unlock()
}

func (w *lineWriter) end() {
	w.mu.Lock()
	if len(w.line) > 0 {
		w.emit(w.line)
		w.line = w.line[:0]
	}
	w.log = nil
	w.mu.Unlock()
}

// Write implements io.Writer.
func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			break
		}
		w.emit(w.line[:i])
		w.line = w.line[:copy(w.line, w.line[i+1:])]
	}
	if len(w.line) > 4096 {
		w.emit(w.line)
		w.line = w.line[:0]
	}
	return len(p), nil
}

func (w *lineWriter) emit(line []byte) {
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	if !strings.HasPrefix(w.last, "panic: ") { // keep a Go panic's first line over its stack
		w.last = string(line)
	}
	if w.log == nil || len(line) > w.budget {
		return
	}
	w.budget -= len(line)
	w.log().LogAttrs(context.Background(), w.level, string(line), slog.String("source", "guest"), slog.String("stream", w.stream))
}

// note is the last line the plug-in wrote on this stream (the first panic
// line, for a Go plug-in), for error messages.
func (w *lineWriter) note() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.line) > 0 {
		w.emit(w.line)
		w.line = w.line[:0]
	}
	if w.last == "" {
		return ""
	}
	return "; plug-in " + w.stream + ": " + w.last
}
