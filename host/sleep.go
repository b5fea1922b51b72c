package host

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/sys"
)

// A deadline must hold inside host calls too, not only in guest code.
// The fuel check (interrupt.go) stops a guest running its own code within
// a few thousand loop iterations, but a guest blocked in a host function
// is in Go, where no check in its code can run: WASI's poll_oneoff sleeps with the module's
// sys.Nanosleep, which has no context (WithSysNanosleep is a bare
// time.Sleep), and fd_read of a stdin pipe blocks in read(2). A guest
// sleeping 20 s under a 1 s limit slept 20 s.
//
// So every blocking host call the host configures watches the
// invocation's context, and when it ends, the call does not return to the
// guest at all: it ends the guest the way WASI's proc_exit does, by
// panicking with a *sys.ExitError carrying wazero's own exit code for a
// deadline (or a cancellation). wazero returns that error from the guest
// call unwrapped, and the host classifies it as the timeout it is, within
// a scheduler tick of the deadline. Returning early instead would let the
// guest carry on until its next yield, or return a result computed
// after its deadline.

// nanosleep returns a sys.Nanosleep for wazero.ModuleConfig.WithNanosleep
// that sleeps at most until the context current returns is done, and then
// ends the guest with sys.ExitCodeDeadlineExceeded (or
// sys.ExitCodeContextCanceled). current is asked on every sleep, because a
// pooled instance serves one invocation after another with the same
// configuration; a nil context sleeps unbounded.
func nanosleep(current func() context.Context) sys.Nanosleep {
	return func(ns int64) {
		ctx := current()
		if ctx == nil {
			time.Sleep(time.Duration(ns))
			return
		}
		abortIfDone(ctx)
		if ns <= 0 {
			return
		}
		t := time.NewTimer(time.Duration(ns))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			panic(exitFor(ctx))
		}
	}
}

// exitFor is the exit error that ends a guest whose context is done.
func exitFor(ctx context.Context) *sys.ExitError {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return sys.NewExitError(sys.ExitCodeDeadlineExceeded)
	}
	return sys.NewExitError(sys.ExitCodeContextCanceled)
}

// abortIfDone ends the guest, from inside a host function, when ctx is
// done.
func abortIfDone(ctx context.Context) {
	if ctx != nil && ctx.Err() != nil {
		panic(exitFor(ctx))
	}
}

// stdinFor returns r as a command's stdin. Readers that never block (bytes
// and strings) are used as they are; any other (a pipe, os.Stdin) is read
// through a contextReader, so that fd_read and poll_oneoff on stdin end at
// the run's deadline.
func stdinFor(ctx context.Context, r io.Reader) io.Reader {
	switch r.(type) {
	case nil:
		return strings.NewReader("")
	case *bytes.Reader, *strings.Reader, *bytes.Buffer:
		return r
	}
	return &contextReader{ctx: ctx, r: r}
}

// contextReader reads r in a goroutine of its own, one read at a time, so
// that a read or a poll can stop waiting when ctx is done. A read still
// blocked when the run ends stays blocked until r delivers or is closed
// (no portable way interrupts a read(2)); what it reads then is dropped.
// It implements experimentalsys.Pollable, which wazero's stdin asks for
// poll_oneoff.
type contextReader struct {
	ctx context.Context
	r   io.Reader

	mu       sync.Mutex
	inflight chan readResult // the read under way, or nil
	buf      []byte          // read and not yet returned
	err      error           // r's error, returned once buf is empty
}

type readResult struct {
	b   []byte
	err error
}

const readChunk = 32 << 10

// start begins a read of r if none is under way; mu is held.
func (c *contextReader) start() chan readResult {
	if c.inflight == nil {
		ch := make(chan readResult, 1)
		c.inflight = ch
		go func() {
			b := make([]byte, readChunk)
			n, err := c.r.Read(b)
			ch <- readResult{b[:n], err}
		}()
	}
	return c.inflight
}

// take records a finished read; mu is held.
func (c *contextReader) take(res readResult) {
	c.inflight = nil
	c.buf = append(c.buf, res.b...)
	if res.err != nil {
		c.err = res.err
	}
}

func (c *contextReader) ready() bool { return len(c.buf) > 0 || c.err != nil }

// Read implements io.Reader. It waits for r or ctx; when ctx is done
// first, it ends the guest (see Nanosleep).
func (c *contextReader) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.ready() {
		ch := c.start()
		select {
		case res := <-ch:
			c.take(res)
		case <-c.ctx.Done():
			panic(exitFor(c.ctx))
		}
	}
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return 0, c.err
}

// Poll implements experimentalsys.Pollable: stdin is readable when a read
// has delivered; it waits at most timeoutMillis (forever when negative)
// and never past ctx.
func (c *contextReader) Poll(flag experimentalsys.Pflag, timeoutMillis int32) (bool, experimentalsys.Errno) {
	if flag != experimentalsys.POLLIN {
		return false, experimentalsys.ENOTSUP
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ready() {
		return true, 0
	}
	ch := c.start()
	var timeout <-chan time.Time
	if timeoutMillis >= 0 {
		t := time.NewTimer(time.Duration(timeoutMillis) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case res := <-ch:
		c.take(res)
		return true, 0
	case <-timeout:
		return false, 0
	case <-c.ctx.Done():
		panic(exitFor(c.ctx))
	}
}
