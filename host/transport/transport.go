// Package transport binds moat's op table to guests. transport.go holds the
// import transport: the one host function compiled guests import
// ("moat"."call"). pipe.go holds the pipe transport of native workers
// (newline-delimited JSON over inherited pipes). Both hand ops to the same
// Dispatcher, so a native worker meets the same grants and audit as a WASM
// guest. devfile.go holds the device-file transport of interpreters
// (QuickJS, CPython): a character device in their WASI filesystem carrying
// the same ops as newline-delimited JSON.
//
// The transport knows nothing about what an op does. It copies the op name
// and request out of guest memory, hands them to the session's Dispatcher,
// and copies the reply into the buffer the guest offered. A guest that hands
// the host a pointer outside its memory ends the invocation with a
// *FaultError: a buggy or hostile guest cannot make the host read or write
// anything but its own linear memory.
package transport

import (
	"context"
	"fmt"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Dispatcher runs one op for the current invocation. It returns the encoded
// reply, or an error that goes back to the guest as abi.StatusError (an
// *abi.Error keeps its code; any other error becomes abi.CodeInternal).
// Returning a *FaultError instead aborts the invocation.
type Dispatcher interface {
	Dispatch(ctx context.Context, op, req []byte) ([]byte, error)
}

// Session is the per-instance state of the transport: the dispatcher of the
// current invocation and a reply waiting to be fetched. The host keeps one
// per live instance and attaches it to each guest call's context with
// Attach.
type Session struct {
	Dispatcher Dispatcher

	pending       []byte      // a reply that did not fit the guest's buffer
	pendingStatus abi.Status  // its status, returned by the fetch
	fault         *FaultError // the first ABI violation seen in this invocation
	// own is the invocation's budget when the context has none (a WASI
	// command importing moat, run without one): every invocation is
	// charged to some budget.
	own *budget.Budget
}

// sessionCtx carries a Session on a call's context. It is a small struct
// rather than context.WithValue so that finding the session is a type
// assertion, not a walk up the context chain. It must be immutable: wazero
// watches the context from another goroutine (CloseOnContextDone), which
// may still be reading it after the call has returned.
type sessionCtx struct {
	context.Context
	s *Session
}

type sessionKey struct{}

func (c *sessionCtx) Value(key any) any {
	switch key {
	case sessionKey{}:
		return c.s
	case budget.Key():
		if b := c.Context.Value(key); b != nil {
			return b
		}
		if c.s.own == nil {
			c.s.own = budget.New(budget.Limits{}, nil)
		}
		return c.s.own
	}
	return c.Context.Value(key)
}

// SessionOf is the session a guest call's context carries (Attach), or
// nil: for the host's other host functions (its WASI wrappers) that need
// the invocation in flight.
func SessionOf(ctx context.Context) *Session {
	if c, ok := ctx.(*sessionCtx); ok {
		return c.s
	}
	s, _ := ctx.Value(sessionKey{}).(*Session)
	return s
}

// Attach returns a context for guest calls of this session.
func (s *Session) Attach(ctx context.Context) context.Context { return &sessionCtx{ctx, s} }

// Begin prepares the session for a new invocation.
func (s *Session) Begin(d Dispatcher) {
	s.Dispatcher, s.pending, s.fault, s.own = d, nil, nil, nil
}

// End drops references to the finished invocation so a pooled instance does
// not keep its reply alive.
func (s *Session) End() {
	s.Dispatcher, s.pending, s.own = nil, nil, nil
}

// Fault returns the ABI violation that aborted the invocation, if any. The
// host checks it after a failed call because the error wazero returns for a
// panicking host function is a wrapped string.
func (s *Session) Fault() *FaultError { return s.fault }

// FaultError is a guest breaking the ABI: a pointer or length outside its
// memory, or a fetch of a reply that does not exist. The invocation stops
// and the instance is discarded.
type FaultError struct {
	Op     string
	Reason string
}

func (e *FaultError) Error() string {
	if e.Op == "" {
		return "guest fault: " + e.Reason
	}
	return fmt.Sprintf("guest fault in op %q: %s", e.Op, e.Reason)
}

// Instantiate adds the "moat" host module to r. Call it once per runtime,
// before instantiating guests that import it.
func Instantiate(ctx context.Context, r wazero.Runtime) error {
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	_, err := r.NewHostModuleBuilder(abi.ImportModule).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(call), []api.ValueType{i32, i32, i32, i32, i32, i32}, []api.ValueType{i64}).
		WithParameterNames("op_ptr", "op_len", "req_ptr", "req_len", "resp_ptr", "resp_cap").
		WithResultNames("status_len").
		Export(abi.ImportCall).
		Instantiate(ctx)
	if err != nil {
		return fmt.Errorf("transport: instantiate host module %q: %w", abi.ImportModule, err)
	}
	return nil
}

// call is moat.call. It is a GoModuleFunc, the cheapest kind of wazero host
// function (no reflection), because every op crosses it.
func call(ctx context.Context, mod api.Module, stack []uint64) {
	s := SessionOf(ctx)
	if s == nil || s.Dispatcher == nil {
		// Called outside an invocation: during _initialize, or by a host
		// that did not set up a session.
		panic(&FaultError{Reason: "moat.call used outside an invocation (for example during _initialize)"})
	}
	opPtr, opLen := uint32(stack[0]), uint32(stack[1])
	reqPtr, reqLen := uint32(stack[2]), uint32(stack[3])
	respPtr, respCap := uint32(stack[4]), uint32(stack[5])
	mem := mod.Memory()
	if mem == nil {
		s.abort(&FaultError{Reason: "module exports no memory"})
	}

	var reply []byte
	var status abi.Status
	if opLen == 0 {
		if s.pending == nil {
			s.abort(&FaultError{Reason: "fetch (op_len 0) with no pending reply"})
		}
		reply, status = s.pending, s.pendingStatus
		s.pending = nil
	} else {
		op, ok := mem.Read(opPtr, opLen)
		if !ok {
			s.abort(&FaultError{Reason: fmt.Sprintf("op name [%d, +%d) is outside guest memory (%d bytes)", opPtr, opLen, mem.Size())})
		}
		req, ok := mem.Read(reqPtr, reqLen)
		if !ok {
			s.abort(&FaultError{Op: string(op), Reason: fmt.Sprintf("request [%d, +%d) is outside guest memory (%d bytes)", reqPtr, reqLen, mem.Size())})
		}
		out, err := s.dispatch(ctx, op, req)
		if err != nil {
			if f, ok := err.(*FaultError); ok {
				s.abort(f)
			}
			reply, status = encodeError(err), abi.StatusError
		} else {
			reply, status = out, abi.StatusOK
		}
	}

	n := uint32(len(reply))
	if n > respCap {
		// Keep the reply (ok or error); the guest fetches it with a buffer
		// of at least n bytes by calling again with op_len 0.
		s.pending, s.pendingStatus = reply, status
		stack[0] = abi.PackCall(abi.StatusTooSmall, n)
		return
	}
	if n > 0 && !mem.Write(respPtr, reply) {
		s.abort(&FaultError{Reason: fmt.Sprintf("reply buffer [%d, +%d) is outside guest memory (%d bytes)", respPtr, respCap, mem.Size())})
	}
	stack[0] = abi.PackCall(status, n)
}

// dispatch runs one op after the checks every transport makes: the
// request's size on the wire, and the invocation's budget (once its audit
// budget is used up, no op runs).
func (s *Session) dispatch(ctx context.Context, op, req []byte) ([]byte, error) {
	if err := Admit(ctx, op, req); err != nil {
		return nil, err
	}
	return s.Dispatcher.Dispatch(ctx, op, req)
}

// Admit is the check every transport makes before it dispatches an op:
// a request over abi.MaxRequestBytes is too_large, and once the
// invocation's audit budget is used up every op is resource_exhausted
// (budget.Budget.Admit). Foreign drivers reach the ops through
// the host's driver.Gate (Dispatch), which makes it too.
func Admit(ctx context.Context, op, req []byte) error {
	if len(req) > abi.MaxRequestBytes {
		return abi.Errorf(abi.CodeTooLarge, "op %.64s: the request is %d bytes; the limit is %d (abi.MaxRequestBytes)", op, len(req), abi.MaxRequestBytes)
	}
	return budget.From(ctx).Admit(op)
}

func (s *Session) abort(f *FaultError) {
	if s.fault == nil {
		s.fault = f
	}
	panic(f)
}

func encodeError(err error) []byte {
	b, mErr := abi.Marshal(asABIError(err))
	if mErr != nil {
		return []byte(`{"code":"internal","message":"unencodable error"}`)
	}
	return b
}
