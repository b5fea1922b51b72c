//go:build wasip1

//lint:file-ignore U1000 the exports are called by the host through go:wasmexport, which staticcheck does not see

package moat

// This file is the only platform-specific part of the SDK: the moat.call
// import and the four exports of ABI version 1. Each is a line or two of
// glue around the plain Go in the other files, which unit tests exercise on
// any platform through the callHost variable.

import (
	"unsafe"

	"github.com/moat-sandbox/moat/abi"
)

// hostCall is the moat.call import:
// (op_ptr, op_len, req_ptr, req_len, resp_ptr, resp_cap i32) -> i64.
// Pointer parameters are typed *byte rather than uint32 so the compiler
// passes them as i32 addresses and the GC sees them as live for the call.
//
//go:wasmimport moat call
//go:noescape
func hostCall(opPtr *byte, opLen uint32, reqPtr *byte, reqLen uint32, respPtr *byte, respCap uint32) uint64

func init() { callHost = wasmCallHost }

// wasmCallHost is callHost for a real host. An empty op (a fetch) may pass
// any pointer: the host does not read op_ptr when op_len is 0.
func wasmCallHost(op string, req, resp []byte) (abi.Status, uint32) {
	v := hostCall(unsafe.StringData(op), uint32(len(op)),
		unsafe.SliceData(req), uint32(len(req)),
		unsafe.SliceData(resp), uint32(len(resp)))
	return abi.UnpackCall(v)
}

//go:wasmexport moat_abi_version
func moatABIVersion() uint32 { return abi.Version }

//go:wasmexport moat_actions
func moatActions() uint64 {
	list := encodeActionList()
	return abi.Pack(addr(list), uint32(len(list)))
}

//go:wasmexport moat_alloc
func moatAlloc(size uint32) uint32 { return addr(allocInput(size)) }

//go:wasmexport moat_invoke
func moatInvoke(action, inPtr, inLen uint32) uint64 {
	out, failed := invokeAt(action, inPtr, inLen)
	return abi.PackOutput(addr(out), uint32(len(out)), failed)
}
