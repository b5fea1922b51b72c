package moat

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"unsafe"

	"github.com/moat-sandbox/moat/abi"
)

// Handler runs one action. input is valid only until the handler returns:
// it lives in a buffer the SDK reuses for the next invocation's input, so a
// handler that keeps it (in a global, a goroutine, a returned slice that
// outlives the call) must copy it first. Returning input itself as the
// output is fine: the host copies the output before the next invocation.
//
// A non-nil error fails the invocation; see [Action] for how it is reported.
type Handler func(input []byte) ([]byte, error)

// registered is one action: its name and its handler. The host addresses
// actions by their index in registration order.
type registered struct {
	name string
	fn   Handler
}

var (
	actions     []registered
	actionNames = map[string]bool{}

	// actionList is the encoded list handed to the host by moat_actions.
	// Once it exists the registry is frozen: the host reads the list once
	// per module, so an action added later could never be invoked (and
	// indexes would no longer match what the host saw).
	actionList []byte

	// inputBuf is the buffer moat_alloc hands to the host for the input.
	// It lives in a package variable so the GC keeps it alive between
	// moat_alloc and moat_invoke (Go's GC does not move heap objects, so
	// its address stays valid). It is reused from call to call.
	inputBuf []byte

	// lastOutput is the output (or encoded error) of the last moat_invoke.
	// The host reads it after moat_invoke returns, so it must stay
	// referenced until then; it is replaced by the next invocation.
	lastOutput []byte
)

// maxRetainedBuf bounds the input and op-response buffers kept between
// invocations. A larger buffer, needed once for a big input or reply, is
// dropped when the invocation ends so the GC can reuse its memory for other
// things (a Wasm linear memory never shrinks, so the space is not returned
// to the host either way).
const maxRetainedBuf = 1 << 20

// Action registers fn as the action called name (fn is a [Handler]; read
// its documentation for the lifetime of input). Call it from an init
// function: in a plugin built with -buildmode=c-shared, main never runs,
// but init functions run when the host instantiates the module (during
// _initialize), before it asks for the list of actions.
//
// Action panics if name is empty, contains a newline (the action list is
// newline-separated), is already registered, if fn is nil, or if the host
// has already read the action list.
//
// When fn returns an error the invocation fails. If the error is, or wraps,
// an *abi.Error, its Code reaches the host's caller unchanged (for example
// abi.CodeNotFound); any other error is reported as abi.CodeGuestError with
// err.Error() as the message. A panic in fn is recovered and reported as
// abi.CodeGuestError too, so the instance survives it; the stack goes to
// stderr, which the host logs.
//
// Ops (Config, Log, KV, Call) work only while an action runs: the host
// refuses them during init.
func Action(name string, fn func(input []byte) ([]byte, error)) {
	switch {
	case name == "":
		panic("moat.Action: action name is empty")
	case strings.ContainsAny(name, "\n"):
		panic(fmt.Sprintf("moat.Action: action name %q contains a newline", name))
	case fn == nil:
		panic(fmt.Sprintf("moat.Action: action %q has a nil function", name))
	case actionNames[name]:
		panic(fmt.Sprintf("moat.Action: action %q is registered twice", name))
	case actionList != nil:
		panic(fmt.Sprintf("moat.Action: action %q registered after the host read the action list; register actions in an init function", name))
	}
	actionNames[name] = true
	actions = append(actions, registered{name: name, fn: fn})
}

// encodeActionList returns the registered action names as "name\nname\n"
// and freezes the registry. The result is kept in a package variable so it
// stays valid while the host reads it.
func encodeActionList() []byte {
	if actionList == nil {
		var b strings.Builder
		for _, a := range actions {
			b.WriteString(a.name)
			b.WriteByte('\n')
		}
		actionList = []byte(b.String())
	}
	return actionList
}

// allocInput returns a buffer of size bytes for the host to write the next
// input into. It reuses inputBuf when it is large enough.
func allocInput(size uint32) []byte {
	if uint64(cap(inputBuf)) < uint64(size) {
		inputBuf = make([]byte, size)
	}
	inputBuf = inputBuf[:size]
	return inputBuf
}

// inputAt returns the n bytes at guest address ptr, which must lie inside
// the buffer last returned by allocInput. The host writes the input there;
// checking it, rather than turning an arbitrary address into a slice, keeps
// a confused host from making the SDK hand an action memory the GC does not
// know about. An empty input needs no buffer (the host passes 0, 0).
func inputAt(ptr, n uint32) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	off := ptr - addr(inputBuf) // wraps around if ptr is below the buffer
	if uint64(off)+uint64(n) > uint64(len(inputBuf)) {
		return nil, abi.Errorf(abi.CodeInvalidArgument,
			"%s: input [%d, +%d) is not inside the buffer returned by %s (%d bytes at %d)",
			abi.ExportInvoke, ptr, n, abi.ExportAlloc, len(inputBuf), addr(inputBuf))
	}
	return inputBuf[off : off+n : off+n], nil
}

// addr is the linear-memory address of b's first byte, or 0 for an empty
// slice (the host never reads a zero-length range). On wasm, addresses fit
// in 32 bits; on other platforms (unit tests) the value is truncated, which
// keeps offset arithmetic between addresses of one buffer correct.
func addr(b []byte) uint32 {
	if cap(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// invokeAt is moat_invoke minus the pointer packing: it finds the input the
// host wrote, runs the action and returns its output, which stays in
// lastOutput until the next invocation.
func invokeAt(index, ptr, n uint32) (out []byte, failed bool) {
	input, err := inputAt(ptr, n)
	if err != nil {
		out, failed = encodeFailure(err), true
	} else {
		out, failed = invoke(index, input)
	}
	if uint64(len(out)) > abi.MaxOutputLen {
		out, failed = encodeFailure(abi.Errorf(abi.CodeOutputTooLarge, "output is %d bytes; the ABI allows at most %d", len(out), abi.MaxOutputLen)), true
	}
	lastOutput = out
	releaseLargeBuffers()
	return out, failed
}

// invoke runs the action at index with input and returns its output, or an
// encoded *abi.Error and failed == true.
func invoke(index uint32, input []byte) (out []byte, failed bool) {
	lastOutput = nil // let the GC have the previous output while this runs
	if uint64(index) >= uint64(len(actions)) {
		return encodeFailure(abi.Errorf(abi.CodeNoSuchAction,
			"no action at index %d; the module has %d actions", index, len(actions))), true
	}
	a := actions[index]
	res, err := runAction(a, input)
	if err != nil {
		return encodeFailure(err), true
	}
	return res, false
}

// runAction calls the handler and turns a panic into an error, so that one
// bad input fails one invocation instead of crashing the instance.
func runAction(a registered, input []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "moat: action %q panicked: %v\n%s", a.name, r, debug.Stack())
			out, err = nil, abi.Errorf(abi.CodeGuestError, "action %q panicked: %v", a.name, r)
		}
	}()
	return a.fn(input)
}

// toABIError converts an action's error to its wire form: an *abi.Error
// (possibly wrapped) keeps its code, anything else is a guest error.
func toABIError(err error) *abi.Error {
	var ae *abi.Error
	if errors.As(err, &ae) {
		if ae == nil {
			return &abi.Error{Code: abi.CodeGuestError, Message: "the action returned a nil *abi.Error as its error"}
		}
		e := &abi.Error{Code: ae.Code, Message: ae.Message}
		if e.Code == "" {
			e.Code = abi.CodeGuestError
		}
		if err != error(ae) {
			// Wrapped: keep the context the wrappers added.
			e.Message = err.Error()
		}
		return e
	}
	return &abi.Error{Code: abi.CodeGuestError, Message: err.Error()}
}

func encodeFailure(err error) []byte {
	b, mErr := abi.Marshal(toABIError(err))
	if mErr != nil {
		return []byte(`{"code":"guest_error","message":"unencodable error"}`)
	}
	return b
}

// releaseLargeBuffers drops input and response buffers that grew past
// maxRetainedBuf; see its comment.
func releaseLargeBuffers() {
	if cap(inputBuf) > maxRetainedBuf {
		inputBuf = nil
	}
	opMu.Lock()
	if cap(respBuf) > maxRetainedBuf {
		respBuf = nil
	}
	opMu.Unlock()
}
