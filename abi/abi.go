// Package abi is the contract between a moat host and its guests: the op
// names, their request and response types, the error codes, the ABI version,
// and the wire encoding. It imports nothing but the standard library so that
// guest SDKs written in Go (GOOS=wasip1) can share these types with the host.
//
// # The import transport (ABI version 1)
//
// A compiled guest imports one host function and exports four:
//
//	import "moat" "call" (op_ptr, op_len, req_ptr, req_len, resp_ptr, resp_cap i32) -> i64
//	export "moat_abi_version" () -> i32                       ; must return Version
//	export "moat_actions"     () -> i64                       ; Pack(ptr, len) of "name\nname\n..."
//	export "moat_alloc"       (size i32) -> i32               ; a buffer the host fills with the input
//	export "moat_invoke"      (action, in_ptr, in_len i32) -> i64 ; PackOutput(ptr, len, failed)
//
// The action argument of moat_invoke is the index of the action in the list
// returned by moat_actions. The host reads that list once per module.
//
// call writes the op's response into the guest-supplied buffer
// [resp_ptr, resp_ptr+resp_cap) and returns PackCall(status, len). When the
// response does not fit, status is StatusTooSmall and len is the size needed;
// the host keeps the response, and the guest fetches it by calling call again
// with op_len == 0 and a buffer of at least that size. The guest therefore
// never has to be re-entered from inside a host call (stock Go guests cannot
// be), and the common case is a single crossing.
//
// A failing op (StatusError) or action (failed bit set) carries an Error
// encoded with Marshal as its body.
package abi

import "encoding/json"

// Version is the ABI version this package describes. A guest reports the
// version it was built against through its moat_abi_version export; the host
// refuses a module whose version differs.
const Version = 1

// Names of the import module, the import and the guest exports.
const (
	ImportModule   = "moat"
	ImportCall     = "call"
	ExportVersion  = "moat_abi_version"
	ExportActions  = "moat_actions"
	ExportAlloc    = "moat_alloc"
	ExportInvoke   = "moat_invoke"
	ExportMemory   = "memory"
	ExportStart    = "_start"
	ExportInitWASI = "_initialize"
)

// Status is the high word of the value returned by the call import.
type Status uint32

const (
	// StatusOK: the response body (low word bytes) is in the guest buffer.
	StatusOK Status = 0
	// StatusError: the body is a Marshal-encoded Error.
	StatusError Status = 1
	// StatusTooSmall: the low word is the size needed; fetch it with op_len == 0.
	StatusTooSmall Status = 2
)

// PackCall packs the result of the call import.
func PackCall(s Status, n uint32) uint64 { return uint64(s)<<32 | uint64(n) }

// UnpackCall splits the result of the call import.
func UnpackCall(v uint64) (Status, uint32) { return Status(v >> 32), uint32(v) }

// Pack packs a pointer and a length into one i64 (pointer in the high word).
func Pack(ptr, n uint32) uint64 { return uint64(ptr)<<32 | uint64(n) }

// Unpack splits a value made by Pack.
func Unpack(v uint64) (ptr, n uint32) { return uint32(v >> 32), uint32(v) }

// failedBit marks a failed action in the low word returned by moat_invoke.
// Output lengths never reach 2 GiB (the host caps output far below that), so
// the top bit of the length is free to carry it.
const failedBit = 1 << 31

// MaxOutputLen is the largest output length moat_invoke can report.
const MaxOutputLen = failedBit - 1

// PackOutput packs the result of moat_invoke. When failed is true the bytes
// are a Marshal-encoded Error.
func PackOutput(ptr, n uint32, failed bool) uint64 {
	v := Pack(ptr, n&MaxOutputLen)
	if failed {
		v |= failedBit
	}
	return v
}

// UnpackOutput splits a value made by PackOutput.
func UnpackOutput(v uint64) (ptr, n uint32, failed bool) {
	return uint32(v >> 32), uint32(v) & MaxOutputLen, uint32(v)&failedBit != 0
}

// Marshal encodes an op request, response or Error for the wire. JSON was
// chosen first because every guest language has it; see docs/RATIONALE.md.
func Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes wire bytes into v. Unknown fields are ignored so that a
// newer guest can talk to an older host within one ABI version. A failure
// is an *Error in the wire's terms (see UnmarshalRequest, which also names
// the op).
func Unmarshal(b []byte, v any) error { return UnmarshalRequest("", b, v) }
