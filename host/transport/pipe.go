package transport

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
)

// PipeConn is the host's end of the pipe transport to one native worker
// (see abi.PipeMessage for the protocol). It runs one invocation at a time:
// while the worker works, its op calls are dispatched like a WASM guest's,
// through the same Dispatcher, so the same grants and audit apply.
//
// A worker that writes a malformed or oversized line, answers the wrong id,
// or closes its pipe breaks the connection for good (Err reports why); the
// supervisor then replaces the worker.
type PipeConn struct {
	w    *bufio.Writer
	wmu  sync.Mutex
	in   chan abi.PipeMessage
	mu   sync.Mutex // one invocation or ping at a time
	next uint64

	errOnce sync.Once
	err     error
	dead    chan struct{}
}

// ErrWorkerGone is the cause when the worker closed its pipe.
var ErrWorkerGone = errors.New("worker closed its pipe")

// NewPipeConn starts reading the worker's messages from r; messages to the
// worker go to w.
func NewPipeConn(r io.Reader, w io.Writer) *PipeConn {
	c := &PipeConn{w: bufio.NewWriter(w), in: make(chan abi.PipeMessage), dead: make(chan struct{})}
	go c.read(r)
	return c
}

func (c *PipeConn) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), abi.MaxPipeLine)
	for sc.Scan() {
		var m abi.PipeMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			c.fail(fmt.Errorf("worker sent a malformed line: %v", err))
			return
		}
		select {
		case c.in <- m:
		case <-c.dead:
			return
		}
	}
	if err := sc.Err(); err != nil {
		c.fail(fmt.Errorf("reading from the worker: %w", err))
		return
	}
	c.fail(ErrWorkerGone)
}

func (c *PipeConn) fail(err error) {
	c.errOnce.Do(func() {
		c.err = err
		close(c.dead)
	})
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

// Handshake waits for the worker's ready message and returns its actions.
func (c *PipeConn) Handshake(ctx context.Context) ([]string, error) {
	m, err := c.receive(ctx)
	if err != nil {
		return nil, err
	}
	if m.Type != abi.PipeReady {
		c.fail(fmt.Errorf("worker's first message is %q, not %q", m.Type, abi.PipeReady))
		return nil, c.err
	}
	if m.Version != abi.Version {
		c.fail(fmt.Errorf("worker speaks moat ABI v%d; this host speaks v%d", m.Version, abi.Version))
		return nil, c.err
	}
	return m.Actions, nil
}

// Invoke runs one action on the worker, dispatching its op calls through d
// until it answers. An error is an *abi.Error when the worker reported one;
// anything else means the connection is broken (or ctx ended) and the
// worker must be replaced.
//
// The worker's op calls are charged to the invocation's budget
// (budget.From(ctx), or one with budget.DefaultLimits): a request over
// abi.MaxRequestBytes is refused with too_large, and once the audit budget
// is used up every call is refused with resource_exhausted.
func (c *PipeConn) Invoke(ctx context.Context, d Dispatcher, action string, input []byte, correlationID string) ([]byte, error) {
	if budget.From(ctx) == nil {
		ctx = budget.With(ctx, budget.New(budget.Limits{}, nil))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	id := c.next
	if err := c.send(abi.PipeMessage{Type: abi.PipeInvoke, ID: id, Action: action, Input: input, CorrelationID: correlationID}); err != nil {
		return nil, err
	}
	for {
		m, err := c.receive(ctx)
		if err != nil {
			return nil, err
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
				return nil, err
			}
		case abi.PipeResult:
			if m.ID != id {
				c.fail(fmt.Errorf("worker answered invocation %d while %d was running", m.ID, id))
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
			c.fail(fmt.Errorf("worker sent %q during an invocation", m.Type))
			return nil, c.err
		}
	}
}

// Ping checks that the worker answers; the supervisor's health check. A
// worker busy with an invocation counts as alive (the invocation has its
// own deadline), so Ping does not wait behind it.
func (c *PipeConn) Ping(ctx context.Context) error {
	if !c.mu.TryLock() {
		return c.Err()
	}
	defer c.mu.Unlock()
	c.next++
	id := c.next
	if err := c.send(abi.PipeMessage{Type: abi.PipePing, ID: id}); err != nil {
		return err
	}
	m, err := c.receive(ctx)
	if err != nil {
		return err
	}
	if m.Type != abi.PipePong || m.ID != id {
		c.fail(fmt.Errorf("worker answered a ping with %q %d", m.Type, m.ID))
		return c.err
	}
	return nil
}

func asABIError(err error) *abi.Error {
	var e *abi.Error
	if errors.As(err, &e) {
		return e
	}
	return &abi.Error{Code: abi.CodeInternal, Message: err.Error()}
}
