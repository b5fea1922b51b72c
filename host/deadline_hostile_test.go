package host_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/hostile"
	"github.com/moat-sandbox/moat/internal/testenv"
)

// The deadline's hostile corpus (issue 27): every shape of code that
// runs long without a loop, and every way a module could reach the
// counter the host adds to it. Each module is built here, byte by byte,
// so that each case is exactly the shape it names.

// wsec is one section of a module built by wmodule.
type wsec struct {
	id   byte
	body []byte
}

// wmodule is a module of the sections given, in the order given.
func wmodule(secs ...wsec) []byte {
	m := []byte("\x00asm\x01\x00\x00\x00")
	for _, s := range secs {
		m = append(m, s.id)
		m = binary.AppendUvarint(m, uint64(len(s.body)))
		m = append(m, s.body...)
	}
	return m
}

// wvec is a vector of the items given.
func wvec(items ...[]byte) []byte {
	b := binary.AppendUvarint(nil, uint64(len(items)))
	for _, it := range items {
		b = append(b, it...)
	}
	return b
}

// wcode is the code section of the bodies given (each its locals and
// instructions, without the final end).
func wcode(bodies ...[]byte) wsec {
	var items [][]byte
	for _, b := range bodies {
		b = append(b, 0x0b)
		items = append(items, append(binary.AppendUvarint(nil, uint64(len(b))), b...))
	}
	return wsec{10, wvec(items...)}
}

// wfuncs is a function section of n functions of type t.
func wfuncs(n int, t byte) wsec {
	items := make([][]byte, n)
	for i := range items {
		items[i] = []byte{t}
	}
	return wsec{3, wvec(items...)}
}

// wexport exports function f as name.
func wexport(name string, f uint32) []byte {
	b := append(binary.AppendUvarint(nil, uint64(len(name))), name...)
	return binary.AppendUvarint(append(b, 0x00), uint64(f))
}

func uleb(v uint64) []byte { return binary.AppendUvarint(nil, v) }

var (
	typeVoid    = []byte{0x60, 0x00, 0x00}       // () -> ()
	typeI32Void = []byte{0x60, 0x01, 0x7f, 0x00} // (i32) -> ()
	typeVoidI32 = []byte{0x60, 0x00, 0x01, 0x7f} // () -> (i32)
	noLocals    = []byte{0x00}                   // a body's empty locals vector
	callOf      = func(f uint32) []byte { return append([]byte{0x10}, uleb(uint64(f))...) }
)

// callTree is a command whose _start calls f_depth, where f_0 does
// nothing and f_{i+1} calls f_i twice: 2^depth calls, none in a loop, at
// a stack depth of depth+1. With indirect, each call goes through
// call_indirect and a table holding every f_i.
func callTree(depth int, indirect bool) []byte {
	n := depth + 1 // f_0..f_depth, then _start
	bodies := [][]byte{noLocals}
	for i := 1; i <= depth; i++ {
		b := bytes.Clone(noLocals)
		for range 2 {
			if indirect {
				b = append(b, 0x41)
				b = append(b, sleb(int64(i-1))...)
				b = append(b, 0x11, 0x00, 0x00) // call_indirect type 0, table 0
			} else {
				b = append(b, callOf(uint32(i-1))...)
			}
		}
		bodies = append(bodies, b)
	}
	bodies = append(bodies, append(bytes.Clone(noLocals), callOf(uint32(depth))...))
	secs := []wsec{{1, wvec(typeVoid)}, wfuncs(n+1, 0)}
	if indirect {
		secs = append(secs, wsec{4, append([]byte{1, 0x70, 0x00}, uleb(uint64(n))...)}) // funcref table, min n
	}
	secs = append(secs, wsec{7, wvec(wexport("_start", uint32(n)))})
	if indirect {
		elems := []byte{0x00, 0x41, 0x00, 0x0b} // active, table 0, offset 0
		elems = append(elems, uleb(uint64(n))...)
		for i := range n {
			elems = append(elems, uleb(uint64(i))...)
		}
		secs = append(secs, wsec{9, wvec(elems)})
	}
	return wmodule(append(secs, wcode(bodies...))...)
}

// startTree is callTree's tree run by the start section.
func startTree(depth int) []byte {
	bodies := [][]byte{noLocals}
	for i := 1; i <= depth; i++ {
		bodies = append(bodies, append(append(bytes.Clone(noLocals), callOf(uint32(i-1))...), callOf(uint32(i-1))...))
	}
	return wmodule(wsec{1, wvec(typeVoid)}, wfuncs(depth+1, 0),
		wsec{7, wvec(wexport("_start", 0))}, wsec{8, uleb(uint64(depth))}, wcode(bodies...))
}

// bulkLine is a command whose _start is one function of n straight-line
// bulk operations over 64 MiB: memory.fill, memory.copy, or table.fill
// over a table of 2^20 references. No loop, no call.
func bulkLine(op string, n int) []byte {
	body := bytes.Clone(noLocals)
	secs := []wsec{{1, wvec(typeVoid)}, wfuncs(1, 0)}
	for range n {
		switch op {
		case "memory.fill":
			body = append(body, 0x41, 0x00, 0x41, 0x00, 0x41)
			body = append(body, sleb(64<<20)...)
			body = append(body, 0xfc, 0x0b, 0x00)
		case "memory.copy":
			body = append(body, 0x41, 0x00, 0x41, 0x00, 0x41)
			body = append(body, sleb(64<<20)...)
			body = append(body, 0xfc, 0x0a, 0x00, 0x00)
		case "table.fill":
			body = append(body, 0x41, 0x00, 0xd0, 0x70, 0x41)
			body = append(body, sleb(1<<20)...)
			body = append(body, 0xfc, 0x11, 0x00)
		}
	}
	if op == "table.fill" {
		secs = append(secs, wsec{4, append([]byte{1, 0x70, 0x00}, uleb(1<<20)...)})
	} else {
		secs = append(secs, wsec{5, []byte{1, 0x00, 0x80, 0x08}}) // memory of 1024 pages: 64 MiB
	}
	return wmodule(append(secs, wsec{7, wvec(wexport("_start", 0))}, wcode(body))...)
}

// bulkLoop is a command whose _start loops n times over one memory.fill
// of 64 MiB: the loop counts n iterations, the fill does the work.
func bulkLoop(n int) []byte {
	body := []byte{0x01, 0x01, 0x7f} // one i32 local
	body = append(body, 0x03, 0x40)  // loop
	body = append(body, 0x41, 0x00, 0x41, 0x00, 0x41)
	body = append(body, sleb(64<<20)...)
	body = append(body, 0xfc, 0x0b, 0x00)
	body = append(body, 0x20, 0x00, 0x41, 0x01, 0x6a, 0x22, 0x00) // local.get 0; i32.const 1; i32.add; local.tee 0
	body = append(body, 0x41)
	body = append(body, sleb(int64(n))...)
	body = append(body, 0x48, 0x0d, 0x00, 0x0b) // i32.lt_s; br_if 0; end
	return wmodule(wsec{1, wvec(typeVoid)}, wfuncs(1, 0), wsec{5, []byte{1, 0x00, 0x80, 0x08}},
		wsec{7, wvec(wexport("_start", 0))}, wcode(body))
}

// TestDeadlineHostile: no shape of code outruns its deadline by more than
// deadlineSlack, and no module reaches the counter that enforces it.
// After each call that ended at its deadline, the process spends no more
// CPU on it: nothing of the guest runs on once its caller has the answer.
func TestDeadlineHostile(t *testing.T) {
	testenv.Timing(t)
	second := host.Limits{Timeout: time.Second}
	start := func(body ...byte) []byte { // a command of one function, _start, of type ()
		return wmodule(wsec{1, wvec(typeVoid)}, wfuncs(1, 0), wsec{7, wvec(wexport("_start", 0))}, wcode(append(bytes.Clone(noLocals), body...)))
	}
	tests := []struct {
		name   string
		wasm   []byte
		limits host.Limits
		cancel time.Duration
		// the outcome: of Load when load is set, of Run otherwise
		load   bool
		code   abi.Code
		reason string
		within time.Duration
	}{
		// Reaching what the rewrite adds: refused at load, as wazero
		// refuses the module as its author built it.
		{name: "global.set of the counter (the 46-byte module)", load: true, wasm: start(0x41, 0x00, 0x24, 0x00),
			code: abi.CodeBadModule, reason: "global index 0, but the module declares 0"},
		{name: "global.get of the counter", load: true, wasm: start(0x23, 0x00, 0x1a),
			code: abi.CodeBadModule, reason: "global index 0, but the module declares 0"},
		{name: "global.set of the scratch global", load: true, wasm: start(0x41, 0x00, 0x24, 0x01),
			code: abi.CodeBadModule, reason: "global index 1, but the module declares 0"},
		{name: "the counter past a defined global", load: true,
			wasm: wmodule(wsec{1, wvec(typeVoid)}, wfuncs(1, 0), wsec{6, wvec([]byte{0x7f, 0x01, 0x41, 0x00, 0x0b})},
				wsec{7, wvec(wexport("_start", 0))}, wcode([]byte{0x00, 0x41, 0x00, 0x24, 0x01})),
			code: abi.CodeBadModule, reason: "global index 1, but the module declares 1"},
		{name: "export of the counter", load: true,
			wasm: wmodule(wsec{1, wvec(typeVoid)}, wfuncs(1, 0), wsec{7, wvec(wexport("_start", 0), []byte{4, 'f', 'u', 'e', 'l', 0x03, 0x00})}, wcode(noLocals)),
			code: abi.CodeBadModule, reason: "global index 0, but the module declares 0"},
		{name: "call_indirect of the yield's type", load: true,
			wasm: wmodule(wsec{1, wvec(typeVoid)}, wfuncs(1, 0), wsec{4, []byte{1, 0x70, 0x00, 0x01}}, wsec{7, wvec(wexport("_start", 0))},
				wcode([]byte{0x00, 0x41, 0x00, 0x11, 0x01, 0x00, 0x1a})),
			code: abi.CodeBadModule, reason: "type index 1, but the module declares 1"},
		{name: "a block of the yield's type", load: true, wasm: start(0x02, 0x01, 0x1a, 0x0b),
			code: abi.CodeBadModule, reason: "a block of type 1, but the module declares 1 types"},
		{name: "a loop of the yield's type", load: true, wasm: start(0x03, 0x01, 0x1a, 0x0b),
			code: abi.CodeBadModule, reason: "a block of type 1, but the module declares 1 types"},
		{name: "call of function 2^32-1 (renumbered, it would wrap to 0)", load: true, wasm: start(0x10, 0xff, 0xff, 0xff, 0xff, 0x0f),
			code: abi.CodeBadModule, reason: "function index 4294967295, but the module declares 1"},
		{name: "call of the function after the module's own", load: true, wasm: start(callOf(1)...),
			code: abi.CodeBadModule, reason: "function index 1, but the module declares 1"},
		{name: "ref.func 2^32-1 in an element segment", load: true,
			wasm: wmodule(wsec{1, wvec(typeVoid)}, wfuncs(1, 0), wsec{4, []byte{1, 0x70, 0x00, 0x01}}, wsec{7, wvec(wexport("_start", 0))},
				wsec{9, wvec([]byte{0x00, 0x41, 0x00, 0x0b, 0x01, 0xff, 0xff, 0xff, 0xff, 0x0f})}, wcode(noLocals)),
			code: abi.CodeBadModule, reason: "function index 4294967295, but the module declares 1"},
		{name: "a start function with a parameter", load: true,
			wasm: wmodule(wsec{1, wvec(typeVoid, typeI32Void)}, wsec{3, wvec([]byte{0}, []byte{1})}, wsec{7, wvec(wexport("_start", 0))},
				wsec{8, []byte{0x01}}, wcode(noLocals, noLocals)),
			code: abi.CodeBadModule, reason: "the start function 1 takes 1 parameters and returns 0 results"},
		{name: "a start function with a result", load: true,
			wasm: wmodule(wsec{1, wvec(typeVoid, typeVoidI32)}, wsec{3, wvec([]byte{0}, []byte{1})}, wsec{7, wvec(wexport("_start", 0))},
				wsec{8, []byte{0x01}}, wcode(noLocals, []byte{0x00, 0x41, 0x00})),
			code: abi.CodeBadModule, reason: "takes 0 parameters and returns 1 results"},
		{name: "a start section past the functions", load: true,
			wasm: wmodule(wsec{1, wvec(typeVoid)}, wfuncs(1, 0), wsec{7, wvec(wexport("_start", 0))}, wsec{8, []byte{0x05}}, wcode(noLocals)),
			code: abi.CodeBadModule, reason: "function index 5, but the module declares 1"},
		{name: "a tail call (a proposal the host does not run)", load: true, wasm: start(0x12, 0x00),
			code: abi.CodeBadModule, reason: "invalid WebAssembly"},

		// Code with no loop: every call of a function that calls counts.
		{name: "a call tree of depth 60", wasm: callTree(60, false), limits: second,
			code: abi.CodeTimeout, reason: "did not finish within 1s"},
		{name: "a call tree of depth 60 through call_indirect", wasm: callTree(60, true), limits: second,
			code: abi.CodeTimeout, reason: "did not finish within 1s"},
		{name: "a call tree canceled by its caller", wasm: callTree(60, false), cancel: 200 * time.Millisecond,
			code: abi.CodeCanceled, within: 200*time.Millisecond + deadlineSlack},
		{name: "a call tree in the start section", wasm: startTree(60), limits: second,
			code: abi.CodeTimeout, reason: "did not finish within 1s"},
		// The stack's limit, not the clock, ends it: a deadline of its own
		// that a loaded machine cannot reach first (at 1 s, three test
		// packages on two cores once took it to the timeout).
		{name: "unbounded recursion ends at the stack's limit", wasm: start(callOf(0)...), limits: host.Limits{Timeout: 10 * time.Second},
			code: abi.CodeTrap, reason: "stack overflow"},

		// Bulk operations: charged by their length.
		{name: "4000 straight-line memory.fill of 64 MiB", wasm: bulkLine("memory.fill", 4000), limits: second,
			code: abi.CodeTimeout, reason: "did not finish within 1s"},
		{name: "4000 straight-line memory.copy of 64 MiB", wasm: bulkLine("memory.copy", 4000), limits: second,
			code: abi.CodeTimeout, reason: "did not finish within 1s"},
		{name: "4000 straight-line table.fill of 2^20", wasm: bulkLine("table.fill", 4000), limits: second,
			code: abi.CodeTimeout, reason: "did not finish within 1s"},
		{name: "a loop of 1000 memory.fill of 64 MiB", wasm: bulkLoop(1000), limits: second,
			code: abi.CodeTimeout, reason: "did not finish within 1s"},
		{name: "a loop of 3 memory.fill of 64 MiB ends", wasm: bulkLoop(3), limits: second},
		{name: "a call tree of depth 10 ends", wasm: callTree(10, false), limits: second},
	}
	h := newHost(t, nil)
	ctx := context.Background()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			within := tc.within
			if within == 0 {
				within = tc.limits.Timeout + deadlineSlack
			}
			began := time.Now()
			m, err := h.Load(ctx, tc.wasm, host.LoadOptions{Name: "deadline", Limits: tc.limits})
			if tc.load {
				checkOutcome(t, err, tc.code, tc.reason)
				if took := time.Since(began); took > within+5*time.Second {
					t.Errorf("the load took %s", took)
				}
				return
			}
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			defer m.Close(ctx)
			cctx := ctx
			if tc.cancel > 0 {
				var cancel context.CancelFunc
				cctx, cancel = context.WithCancel(ctx)
				defer cancel()
				time.AfterFunc(tc.cancel, cancel)
			}
			began = time.Now()
			_, err = m.Run(cctx, host.RunRequest{Principal: ann})
			took := time.Since(began)
			checkOutcome(t, err, tc.code, tc.reason)
			if took > within {
				t.Errorf("ended after %s, more than %s", took, within)
			}
			// Nothing of the guest runs on: over the next 300 ms the
			// process spends well under one processor's 300 ms.
			cpu0 := hostile.ProcessCPU()
			time.Sleep(300 * time.Millisecond)
			if used := hostile.ProcessCPU() - cpu0; used > 150*time.Millisecond {
				t.Errorf("%s of CPU in the 300 ms after the call ended", used)
			}
		})
	}
}
