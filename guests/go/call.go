package moat

import (
	"sync"

	"github.com/moat-sandbox/moat/abi"
)

// callHost is the transport: one crossing of the moat.call import. It
// passes the op name, the request and a response buffer, and returns the
// status and the reply length (or, with abi.StatusTooSmall, the size
// needed). An empty op fetches the reply the host kept after
// StatusTooSmall. The wasip1 build sets it to the real import; unit tests
// set it to a fake host. Everything above it is plain Go and testable.
var callHost func(op string, req, resp []byte) (status abi.Status, n uint32)

// initialRespBuf is the starting size of the response buffer: large enough
// that almost every reply arrives in one crossing.
const initialRespBuf = 16 << 10

var (
	// opMu serializes op calls. A guest may run goroutines, and between a
	// StatusTooSmall and its fetch the host holds exactly one pending reply,
	// which another op would replace; the shared response buffer must not
	// be overwritten while a reply is decoded either.
	opMu sync.Mutex

	// respBuf is the reusable response buffer. It starts at
	// initialRespBuf bytes and grows to the largest reply seen (buffers
	// over maxRetainedBuf are dropped when the invocation ends).
	respBuf []byte
)

// errNoHost is returned by ops outside a moat host, for example when a
// plugin's code runs in an ordinary test binary.
var errNoHost = &abi.Error{Code: abi.CodeUnavailable, Message: "moat ops are available only inside a moat host (GOOS=wasip1)"}

// roundTrip sends one op and passes the reply body to decode, under opMu.
// The body aliases the shared response buffer: decode must copy what it
// keeps (json.Unmarshal does). A StatusError reply becomes an *abi.Error.
func roundTrip(op string, req []byte, decode func(body []byte) error) error {
	if op == "" {
		// An empty op name means "fetch the pending reply" on the wire.
		return abi.Errorf(abi.CodeInvalidArgument, "op name is empty")
	}
	if callHost == nil {
		return errNoHost
	}
	opMu.Lock()
	defer opMu.Unlock()
	if respBuf == nil {
		respBuf = make([]byte, initialRespBuf)
	}
	status, n := callHost(op, req, respBuf)
	if status == abi.StatusTooSmall {
		// The host kept the reply; fetch it into a buffer of the size it
		// asked for, with an empty op name.
		if uint64(n) <= uint64(len(respBuf)) {
			return abi.Errorf(abi.CodeInternal, "op %s: host asked for a %d-byte buffer but %d bytes were offered", op, n, len(respBuf))
		}
		respBuf = make([]byte, n)
		status, n = callHost("", nil, respBuf)
		if status == abi.StatusTooSmall {
			return abi.Errorf(abi.CodeInternal, "op %s: host asked for a larger buffer twice (%d bytes after %d)", op, n, len(respBuf))
		}
	}
	if uint64(n) > uint64(len(respBuf)) {
		return abi.Errorf(abi.CodeInternal, "op %s: host reported a %d-byte reply in a %d-byte buffer", op, n, len(respBuf))
	}
	body := respBuf[:n]
	switch status {
	case abi.StatusOK:
		if decode == nil {
			return nil
		}
		return decode(body)
	case abi.StatusError:
		return decodeOpError(op, body)
	default:
		return abi.Errorf(abi.CodeInternal, "op %s: host returned unknown status %d", op, status)
	}
}

// decodeOpError turns the body of a StatusError reply into an *abi.Error.
func decodeOpError(op string, body []byte) error {
	var e abi.Error
	if err := abi.Unmarshal(body, &e); err != nil || e.Code == "" {
		return abi.Errorf(abi.CodeInternal, "op %s failed with an undecodable error reply: %q", op, body)
	}
	return &e
}

// Call runs an op by name with a request encoded from req and decodes the
// reply into resp. It is the low-level door to every op of the ABI, for ops
// this SDK does not wrap yet. req may be nil (an empty request, "{}");
// resp may be nil to ignore the reply, or must be a pointer, as for
// json.Unmarshal.
//
// An op that fails returns an *abi.Error; use errors.As to read its Code:
//
//	var e *abi.Error
//	if errors.As(err, &e) && e.Code == abi.CodeDenied { ... }
func Call(op string, req, resp any) error {
	body := []byte("{}")
	if req != nil {
		b, err := abi.Marshal(req)
		if err != nil {
			return abi.Errorf(abi.CodeInvalidArgument, "op %s: encode request: %v", op, err)
		}
		body = b
	}
	return roundTrip(op, body, decodeInto(op, resp))
}

// decodeInto returns the reply decoder that unmarshals into resp, or nil
// (ignore the reply) when resp is nil.
func decodeInto(op string, resp any) func([]byte) error {
	if resp == nil {
		return nil
	}
	return func(b []byte) error {
		if err := abi.Unmarshal(b, resp); err != nil {
			return abi.Errorf(abi.CodeInternal, "op %s: decode reply into %T: %v", op, resp, err)
		}
		return nil
	}
}
