package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
)

// PipeConn is the host's end of the pipe transport to one native worker
// (see abi.PipeMessage for the protocol). It runs one invocation at a time:
// while the worker works, its op calls are dispatched like a WASM guest's,
// through the same Dispatcher, so the same grants and audit apply.
//
// The worker is untrusted, so every way it could hold the host is bounded:
// a line is at most abi.MaxPipeLine bytes (the ready message at most
// MaxReadyLine, read before anything is decoded), the ready message names
// at most MaxPipeActions actions of the host's action-name alphabet, and a
// write to a worker that stopped reading ends with the invocation's
// context instead of blocking the host.
//
// A worker that writes a malformed or oversized line, answers the wrong id,
// or closes its pipe breaks the connection for good (Err reports why); the
// supervisor then replaces the worker.
type PipeConn struct {
	w     *bufio.Writer
	raw   io.Writer
	wmu   sync.Mutex
	in    chan abi.PipeMessage
	mu    sync.Mutex // one invocation or ping at a time
	next  uint64
	r     io.Reader
	begin sync.Once    // starts the reader, on the first Handshake, Invoke or Ping
	limit atomic.Int64 // the longest line read next: MaxReadyLine until the handshake, then abi.MaxPipeLine

	dmu      sync.Mutex // guards watching: whether a context may cut a write
	watching bool

	errOnce sync.Once
	err     error
	dead    chan struct{}
}

// Bounds of the ready message: it is read before the worker has proved
// anything, so it is small, and the actions it lists are as many and as
// named as a manifest's may be.
const (
	MaxReadyLine   = 64 << 10
	MaxPipeActions = 256
	maxActionName  = 64
)

// Why a connection broke; each wraps into Err and the errors of Handshake,
// Invoke and Ping.
var (
	// ErrWorkerGone is the cause when the worker closed its pipe.
	ErrWorkerGone = errors.New("worker closed its pipe")
	// ErrPipeProtocol: the worker sent what the protocol does not allow
	// at that point (a malformed or oversized line, a wrong id or type,
	// a bad ready message).
	ErrPipeProtocol = errors.New("worker broke the pipe protocol")
)

// NewPipeConn starts reading the worker's messages from r; messages to the
// worker go to w. When w has SetWriteDeadline (an *os.File pipe end) or is
// an io.Closer, a write the worker does not drain is cut off when the
// invocation's context ends.
func NewPipeConn(r io.Reader, w io.Writer) *PipeConn {
	return &PipeConn{r: r, w: bufio.NewWriter(w), raw: w, in: make(chan abi.PipeMessage), dead: make(chan struct{})}
}

// start starts reading with limit as the longest line, once: Handshake
// reads the ready message with MaxReadyLine, so nothing of a worker is read
// under the larger limit before it said ready.
func (c *PipeConn) start(limit int64) {
	c.begin.Do(func() {
		c.limit.Store(limit)
		go c.read(c.r)
	})
}

func (c *PipeConn) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4<<10), abi.MaxPipeLine+1) // +1: the split function refuses first, naming the limit
	// The split function enforces the current limit itself, so a ready
	// message is refused at MaxReadyLine bytes, not after the scanner has
	// grown its buffer to abi.MaxPipeLine.
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		limit := int(c.limit.Load())
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			if i > limit {
				return 0, nil, c.tooLong(limit)
			}
			return i + 1, data[:i], nil
		}
		if len(data) > limit {
			return 0, nil, c.tooLong(limit)
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	})
	for sc.Scan() {
		var m abi.PipeMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			c.fail(fmt.Errorf("%w: it sent a malformed line: %v", ErrPipeProtocol, err))
			return
		}
		select {
		case c.in <- m:
		case <-c.dead:
			return
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, ErrPipeProtocol) {
			c.fail(err)
		} else {
			c.fail(fmt.Errorf("reading from the worker: %w", err))
		}
		return
	}
	c.fail(ErrWorkerGone)
}

func (c *PipeConn) tooLong(limit int) error {
	what := "abi.MaxPipeLine"
	if limit == MaxReadyLine {
		what = "transport.MaxReadyLine, before its ready message"
	}
	return fmt.Errorf("%w: it sent a line over %d bytes (%s): %w", ErrPipeProtocol, limit, what, bufio.ErrTooLong)
}

func (c *PipeConn) fail(err error) {
	c.errOnce.Do(func() {
		c.err = err
		close(c.dead)
		c.cutWrites()
	})
}

// cutWrites makes a write blocked on a worker that does not read return.
func (c *PipeConn) cutWrites() {
	if d, ok := c.raw.(interface{ SetWriteDeadline(time.Time) error }); ok {
		if d.SetWriteDeadline(time.Unix(1, 0)) == nil {
			return
		}
	}
	if cl, ok := c.raw.(io.Closer); ok {
		_ = cl.Close()
	}
}

// watch cuts the connection when ctx ends while a call is under way: the
// host never waits on a worker longer than the invocation may last. The
// returned func ends the watch; after it, ctx no longer affects the
// connection.
func (c *PipeConn) watch(ctx context.Context) func() {
	c.dmu.Lock()
	c.watching = true
	c.dmu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		c.dmu.Lock()
		defer c.dmu.Unlock()
		if c.watching {
			c.fail(ctx.Err())
		}
	})
	return func() {
		stop()
		c.dmu.Lock()
		c.watching = false
		c.dmu.Unlock()
	}
}

// Err says why the connection broke, or nil while it works.
func (c *PipeConn) Err() error {
	select {
	case <-c.dead:
		return c.err
	default:
		return nil
	}
}

// Close marks the connection broken; the caller closes the pipes.
func (c *PipeConn) Close() { c.fail(errors.New("closed by the host")) }

func (c *PipeConn) send(m abi.PipeMessage) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.Err(); err != nil {
		return err
	}
	c.w.Write(b)
	c.w.WriteByte('\n')
	if err := c.w.Flush(); err != nil {
		c.fail(fmt.Errorf("writing to the worker: %w", err))
		return c.err
	}
	return nil
}

// receive waits for the next message, the context, or a broken connection.
func (c *PipeConn) receive(ctx context.Context) (abi.PipeMessage, error) {
	select {
	case m := <-c.in:
		return m, nil
	case <-c.dead:
		return abi.PipeMessage{}, c.err
	case <-ctx.Done():
		return abi.PipeMessage{}, ctx.Err()
	}
}

// Handshake waits for the worker's ready message and returns its actions:
// 1 to MaxPipeActions distinct names of 1-64 characters A-Z a-z 0-9 . _ -
// (starting with a letter or digit), as a manifest's action names are.
func (c *PipeConn) Handshake(ctx context.Context) ([]string, error) {
	c.start(MaxReadyLine)
	m, err := c.receive(ctx)
	if err != nil {
		return nil, err
	}
	if m.Type != abi.PipeReady {
		c.fail(fmt.Errorf("%w: its first message is %q, not %q", ErrPipeProtocol, m.Type, abi.PipeReady))
		return nil, c.err
	}
	if m.Version != abi.Version {
		c.fail(fmt.Errorf("%w: it speaks moat ABI v%d; this host speaks v%d", ErrPipeProtocol, m.Version, abi.Version))
		return nil, c.err
	}
	if err := checkActions(m.Actions); err != nil {
		c.fail(fmt.Errorf("%w: its ready message: %w", ErrPipeProtocol, err))
		return nil, c.err
	}
	c.limit.Store(abi.MaxPipeLine)
	return m.Actions, nil
}

func checkActions(actions []string) error {
	if len(actions) == 0 {
		return errors.New("it names no actions")
	}
	if len(actions) > MaxPipeActions {
		return fmt.Errorf("it names %d actions; the limit is %d (transport.MaxPipeActions)", len(actions), MaxPipeActions)
	}
	for i, a := range actions {
		if err := checkActionName(a); err != nil {
			return err
		}
		if slices.Contains(actions[:i], a) {
			return fmt.Errorf("action %q is named twice", a)
		}
	}
	return nil
}

// checkActionName is the alphabet of action names (host.ValidateActionName,
// policy's manifest rule): names travel into audit rows, logs and URLs.
func checkActionName(s string) error {
	if s == "" || len(s) > maxActionName {
		return fmt.Errorf("action name %.64q... (%d bytes) must be 1 to %d characters long", s, len(s), maxActionName)
	}
	for i := 0; i < len(s); i++ {
		r := s[i]
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && (r == '.' || r == '_' || r == '-')) {
			return fmt.Errorf("action name %q: byte 0x%02x at %d is not allowed (use A-Z, a-z, 0-9, and . _ - after the first)", s, r, i)
		}
	}
	return nil
}

// Invoke runs one action on the worker, dispatching its op calls through d
// until it answers. An error is an *abi.Error when the worker reported one;
// anything else means the connection is broken (or ctx ended) and the
// worker must be replaced.
//
// The worker's op calls are charged to the invocation's budget
// (budget.From(ctx), or one with budget.DefaultLimits): a request over
// abi.MaxRequestBytes is refused with too_large, and once the audit budget
// is used up every call is refused with resource_exhausted. When ctx ends,
// the connection breaks, even when the worker has stopped reading its
// replies (a flood of calls): the host is never held past the deadline.
func (c *PipeConn) Invoke(ctx context.Context, d Dispatcher, action string, input []byte, correlationID string) ([]byte, error) {
	if budget.From(ctx) == nil {
		ctx = budget.With(ctx, budget.New(budget.Limits{}, nil))
	}
	c.start(abi.MaxPipeLine)
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.watch(ctx)()
	c.next++
	id := c.next
	if err := c.send(abi.PipeMessage{Type: abi.PipeInvoke, ID: id, Action: action, Input: input, CorrelationID: correlationID}); err != nil {
		return nil, c.ctxErr(ctx, err)
	}
	for {
		m, err := c.receive(ctx)
		if err != nil {
			return nil, c.ctxErr(ctx, err)
		}
		switch m.Type {
		case abi.PipeCall:
			reply := abi.PipeMessage{Type: abi.PipeReply, ID: m.ID}
			op, req := []byte(m.Op), []byte(m.Req)
			if len(req) == 0 || string(req) == "null" {
				req = []byte("{}") // absent means {}, as on the device file
			}
			err := Admit(ctx, op, req)
			var resp []byte
			if err == nil {
				resp, err = d.Dispatch(ctx, op, req)
			}
			if err == nil && !json.Valid(resp) {
				// An op's reply that is not JSON is a host bug; the worker
				// still gets its reply, and the connection stays usable.
				err = abi.Errorf(abi.CodeInternal, "op %.64s: the reply is not valid JSON", op)
			}
			if err != nil {
				var f *FaultError
				if errors.As(err, &f) {
					c.fail(f)
					return nil, f
				}
				reply.Error = asABIError(err)
			} else {
				reply.Resp = resp
			}
			if err := c.send(reply); err != nil {
				return nil, c.ctxErr(ctx, err)
			}
		case abi.PipeResult:
			if m.ID != id {
				c.fail(fmt.Errorf("%w: it answered invocation %d while %d was running", ErrPipeProtocol, m.ID, id))
				return nil, c.err
			}
			if m.Error != nil {
				return nil, m.Error
			}
			if m.Output == nil {
				m.Output = []byte{}
			}
			return m.Output, nil
		default:
			c.fail(fmt.Errorf("%w: it sent %q during an invocation", ErrPipeProtocol, m.Type))
			return nil, c.err
		}
	}
}

// ctxErr reports the context's end as the cause when it is what broke the
// connection (a write cut off at the deadline reads as a write error).
func (c *PipeConn) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		if e := c.Err(); e != nil && errors.Is(e, ctx.Err()) {
			return e
		}
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// Ping checks that the worker answers; the supervisor's health check. A
// worker busy with an invocation counts as alive (the invocation has its
// own deadline), so Ping does not wait behind it.
func (c *PipeConn) Ping(ctx context.Context) error {
	c.start(abi.MaxPipeLine)
	if !c.mu.TryLock() {
		return c.Err()
	}
	defer c.mu.Unlock()
	defer c.watch(ctx)()
	c.next++
	id := c.next
	if err := c.send(abi.PipeMessage{Type: abi.PipePing, ID: id}); err != nil {
		return c.ctxErr(ctx, err)
	}
	m, err := c.receive(ctx)
	if err != nil {
		return c.ctxErr(ctx, err)
	}
	if m.Type != abi.PipePong || m.ID != id {
		c.fail(fmt.Errorf("%w: it answered a ping with %q %d", ErrPipeProtocol, m.Type, m.ID))
		return c.err
	}
	return nil
}

func asABIError(err error) *abi.Error { return abi.AsError(err) }
