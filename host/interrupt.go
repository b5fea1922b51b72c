package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// Stopping a guest that never returns, at the price of a load per loop.
//
// A deadline has to stop a guest spinning in a loop that calls nothing:
// Go cannot preempt machine code, so the compiled code itself must look.
// wazero's own answer, CloseOnContextDone, makes every loop header call
// out of the machine code into a Go trampoline that checks whether the
// module was closed. Every iteration pays that exit: 0.35 ns → 31.5 ns
// per iteration of a tight loop (90x), and Go-compiled guests, whose
// every function begins with a loop (the resumption point of goroutine
// switching), ran 6x slower (../shared/research/perf.md §6). On hello-go's
// greet it was 40% of the call.
//
// So the host does what Wasmtime's epoch interruption does, in the bytes
// it compiles: the module gets one more global, an i32 the host exports
// to itself as InterruptExport, and every loop header of every function
// begins with
//
//	global.get $interrupt
//	if
//	  unreachable
//	end
//
// two loads, a test and a branch never taken. The host sets the global
// to 1 from another goroutine when an invocation's context ends
// (armInterrupt); the guest traps at its next loop header, and the call
// is classified by its context, as a timeout or a cancellation. wazero
// reloads a global at a loop header (the block has two predecessors, so
// no cached value reaches it), so the store is seen at the next
// iteration; TestInterruptStopsSpinningGuest holds a spinning guest to
// its deadline.
//
// What else had to move: the start section and the start functions
// (_start, _initialize) run inside InstantiateModule, before the host can
// reach the global, so the rewritten module has no start section (its
// function is exported as InterruptStartExport instead) and the host
// calls each of them itself, armed, right after instantiation: the same
// order the specification gives. A function without a loop runs for a
// bounded time (its body, and a recursion ends at the stack limit), so
// loop headers are the only places a check is needed.
//
// Only the compiled copy is rewritten; a module's digest and signature
// stay those of its author's bytes, as for the table limits (tables.go).
// Extism plug-ins and the Ruby driver run in runtimes of their own and
// keep CloseOnContextDone.

// hostCloseOnContextDone is the host runtime's CloseOnContextDone: off,
// since the check at every loop header does its work. It is part of the
// key of shared compiled code (sharedcode.go): wazero's code differs with
// it.
const hostCloseOnContextDone = false

const (
	// InterruptExport is the name under which an instrumented module
	// exports its interrupt flag. A module that exports this name itself
	// is refused: the host could not tell the two apart.
	InterruptExport = "moat:interrupt"
	// InterruptStartExport is the name under which an instrumented
	// module exports the function its start section named.
	InterruptStartExport = "moat:start"
)

// interruptCheck is the check inserted at a loop header, around the
// global index: global.get idx; if (empty); unreachable; end.
func interruptCheck(global uint32) []byte {
	b := binary.AppendUvarint([]byte{0x23}, uint64(global))
	return append(b, 0x04, 0x40, 0x00, 0x0b)
}

// instrumentLoops returns wasm with the interrupt global, its export and
// a check at every loop header, and the start section turned into an
// export; lay is what readLayout read of wasm. It refuses a module it
// cannot read to the last opcode, naming the function and the byte: the
// host would rather refuse a module than run one whose loops it has not
// all seen.
func instrumentLoops(wasm []byte, lay *layout) ([]byte, error) {
	var importedGlobals uint32
	for _, im := range lay.imports {
		if im.kind == "global" {
			importedGlobals++
		}
	}
	global := importedGlobals + lay.counts[6]
	check := interruptCheck(global)
	// The new global: i32, mutable, initialised to 0.
	newGlobal := []byte{0x7f, 0x01, 0x41, 0x00, 0x0b}

	out := make([]byte, 0, len(wasm)+len(wasm)/16+64)
	out = append(out, wasm[:8]...)
	emit := func(id byte, body []byte) {
		out = append(out, id)
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
	}
	var start *uint32
	var globalDone, exportDone bool
	// addExports returns the export section's body with the host's
	// exports appended to its entries (body without its count).
	addExports := func(n uint32, entries []byte) []byte {
		extra := 1
		if start != nil {
			extra = 2
		}
		body := binary.AppendUvarint(nil, uint64(n)+uint64(extra))
		body = append(body, entries...)
		body = appendName(body, InterruptExport)
		body = append(body, 0x03) // global
		body = binary.AppendUvarint(body, uint64(global))
		if start != nil {
			body = appendName(body, InterruptStartExport)
			body = append(body, 0x00) // function
			body = binary.AppendUvarint(body, uint64(*start))
		}
		return body
	}
	// before emits the sections a module without a global or export
	// section needs, ahead of the first section that must follow them.
	before := func(id byte) {
		if id == 0 {
			return
		}
		if !globalDone && afterInOrder(id, 6) {
			globalDone = true
			emit(6, append([]byte{0x01}, newGlobal...))
		}
		if !exportDone && afterInOrder(id, 7) {
			exportDone = true
			emit(7, addExports(0, nil))
		}
	}
	// The start section comes after the export section, but the export
	// of its function must be in the export section: find it first.
	err := walkSections(wasm, func(id byte, _, bodyStart, bodyEnd int) error {
		if id == 8 {
			r := &wasmReader{b: wasm[:bodyEnd], off: bodyStart}
			f, err := r.u32()
			if err != nil {
				return fmt.Errorf("start section: %w", err)
			}
			start = &f
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = walkSections(wasm, func(id byte, sectionStart, bodyStart, bodyEnd int) error {
		before(id)
		r := &wasmReader{b: wasm[:bodyEnd], off: bodyStart}
		switch id {
		case 6:
			n, err := r.u32()
			if err != nil {
				return fmt.Errorf("global section: %w", err)
			}
			body := binary.AppendUvarint(nil, uint64(n)+1)
			body = append(body, wasm[r.off:bodyEnd]...)
			emit(6, append(body, newGlobal...))
			globalDone = true
		case 7:
			n, err := r.u32()
			if err != nil {
				return fmt.Errorf("export section: %w", err)
			}
			entries := wasm[r.off:bodyEnd]
			if err := checkExportNames(entries, n); err != nil {
				return err
			}
			emit(7, addExports(n, entries))
			exportDone = true
		case 8:
			// dropped: the host calls the function after instantiation
		case 10:
			body, err := instrumentCode(r, bodyEnd, check, lay.importedFuncs)
			if err != nil {
				return fmt.Errorf("code section: %w", err)
			}
			emit(10, body)
		default:
			out = append(out, wasm[sectionStart:bodyEnd]...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A module with neither a global section nor anything after it.
	before(11)
	if !exportDone || !globalDone {
		return nil, errors.New("internal error: the interrupt global was not added")
	}
	return out, nil
}

// afterInOrder reports whether a section with id comes after section want
// in the order the specification gives (sectionOrder).
func afterInOrder(id, want byte) bool {
	_, ok := sectionOrder(id, want)
	return ok && id != want
}

func appendName(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// checkExportNames refuses a module exporting one of the host's names.
func checkExportNames(entries []byte, n uint32) error {
	r := &wasmReader{b: entries}
	for i := uint32(0); i < n; i++ {
		name, err := r.name()
		if err != nil {
			return fmt.Errorf("export %d: %w", i, err)
		}
		if name == InterruptExport || name == InterruptStartExport {
			return fmt.Errorf("the module exports %q, a name the host reserves for itself", name)
		}
		if _, err := r.byte(); err != nil {
			return err
		}
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return nil
}

// instrumentCode returns the code section's body with check inserted
// after every loop's block type.
func instrumentCode(r *wasmReader, end int, check []byte, firstFunc uint32) ([]byte, error) {
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	body := binary.AppendUvarint(make([]byte, 0, end-r.off+end/16), uint64(n))
	var fn []byte
	for i := uint32(0); i < n; i++ {
		size, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("function %d: %w", firstFunc+i, err)
		}
		fend := r.off + int(size)
		if uint64(size) > uint64(end-r.off) {
			return nil, fmt.Errorf("function %d: a body of %d bytes in the %d bytes left", firstFunc+i, size, end-r.off)
		}
		fr := &wasmReader{b: r.b[:fend], off: r.off}
		fn, err = instrumentFunction(fn[:0], fr, check)
		if err != nil {
			return nil, fmt.Errorf("function %d: %w", firstFunc+i, err)
		}
		body = binary.AppendUvarint(body, uint64(len(fn)))
		body = append(body, fn...)
		r.off = fend
	}
	if r.off != end {
		return nil, fmt.Errorf("%d bytes after the last function", end-r.off)
	}
	return body, nil
}

// instrumentFunction appends to out one function body (locals and
// instructions) read from r, with check after each loop's block type.
func instrumentFunction(out []byte, r *wasmReader, check []byte) ([]byte, error) {
	start := r.off
	nl, err := r.u32()
	if err != nil {
		return nil, err
	}
	for i := uint32(0); i < nl; i++ {
		if _, err := r.u32(); err != nil {
			return nil, err
		}
		if err := r.valueType(); err != nil {
			return nil, err
		}
	}
	copied := start
	for r.off < len(r.b) {
		at := r.off
		op, _ := r.byte()
		if err := r.skipImmediates(op); err != nil {
			return nil, fmt.Errorf("opcode %#x at byte %d of the body: %w", op, at-start, err)
		}
		if op == 0x03 { // loop
			out = append(out, r.b[copied:r.off]...)
			out = append(out, check...)
			copied = r.off
		}
	}
	return append(out, r.b[copied:]...), nil
}

// skipImmediates skips the immediates of the instruction op, every
// instruction wazero v1.12 compiles: WebAssembly 2.0 (sign extension,
// saturating conversions, bulk memory, reference types, multiple values,
// 128-bit SIMD), tail calls and threads. Any other opcode is an error.
func (r *wasmReader) skipImmediates(op byte) error {
	var err error
	switch {
	case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if
		err = r.blockType()
	case op == 0x0c || op == 0x0d: // br, br_if
		_, err = r.u32()
	case op == 0x0e: // br_table
		var n uint32
		if n, err = r.vec(1, "branch targets"); err == nil {
			for i := uint32(0); i <= n && err == nil; i++ {
				_, err = r.u32()
			}
		}
	case op == 0x10 || op == 0x12: // call, return_call
		_, err = r.u32()
	case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect
		if _, err = r.u32(); err == nil {
			_, err = r.u32()
		}
	case op == 0x1c: // select t*
		var n uint32
		if n, err = r.vec(1, "select types"); err == nil {
			for i := uint32(0); i < n && err == nil; i++ {
				err = r.valueType()
			}
		}
	case op >= 0x20 && op <= 0x26: // local.*, global.*, table.get/set
		_, err = r.u32()
	case op >= 0x28 && op <= 0x3e: // loads and stores
		err = r.memarg()
	case op == 0x3f || op == 0x40: // memory.size, memory.grow
		_, err = r.u32()
	case op == 0x41:
		err = r.sleb(5)
	case op == 0x42:
		err = r.sleb(10)
	case op == 0x43:
		err = r.skip(4)
	case op == 0x44:
		err = r.skip(8)
	case op == 0xd0: // ref.null heaptype
		var b byte
		if b, err = r.byte(); err == nil && b != 0x70 && b != 0x6f {
			r.off--
			err = r.sleb(5)
		}
	case op == 0xd2: // ref.func
		_, err = r.u32()
	case op <= 0x01, op == 0x05, op == 0x0b, op == 0x0f, op == 0x1a, op == 0x1b,
		op >= 0x45 && op <= 0xc4, op == 0xd1: // no immediates
	case op == 0xfc:
		err = r.miscImmediates()
	case op == 0xfd:
		err = r.simdImmediates()
	case op == 0xfe:
		err = r.atomicImmediates()
	default:
		return errors.New("not an instruction this host compiles")
	}
	return err
}

// blockType skips a block type: empty (0x40), a value type, or a type
// index (a positive signed LEB128 of up to 33 bits).
func (r *wasmReader) blockType() error {
	b, err := r.byte()
	if err != nil {
		return err
	}
	switch b {
	case 0x40, 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		return nil
	}
	r.off--
	return r.sleb(5)
}

// memarg skips a memory argument: alignment (with bit 6 set, a memory
// index follows) and offset.
func (r *wasmReader) memarg() error {
	align, err := r.u32()
	if err != nil {
		return err
	}
	if align&0x40 != 0 {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	_, err = r.u64()
	return err
}

// miscImmediates skips a 0xfc instruction: saturating conversions, bulk
// memory and table instructions.
func (r *wasmReader) miscImmediates() error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	args := 0
	switch {
	case sub <= 7: // trunc_sat
	case sub == 8, sub == 10, sub == 12, sub == 14: // memory.init, memory.copy, table.init, table.copy
		args = 2
	case sub == 9, sub == 11, sub == 13, sub >= 15 && sub <= 17: // data.drop, memory.fill, elem.drop, table.grow/size/fill
		args = 1
	default:
		return fmt.Errorf("0xfc %d is not an instruction this host compiles", sub)
	}
	for ; args > 0; args-- {
		if _, err := r.u32(); err != nil {
			return err
		}
	}
	return nil
}

// simdImmediates skips a 0xfd (128-bit SIMD) instruction.
func (r *wasmReader) simdImmediates() error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub <= 11 || sub == 92 || sub == 93: // v128.load*, v128.store, load*_zero
		return r.memarg()
	case sub == 12 || sub == 13: // v128.const, i8x16.shuffle
		return r.skip(16)
	case sub >= 21 && sub <= 34: // extract_lane, replace_lane
		return r.skip(1)
	case sub >= 84 && sub <= 91: // load*_lane, store*_lane
		if err := r.memarg(); err != nil {
			return err
		}
		return r.skip(1)
	case sub <= 0x113: // the rest of SIMD and relaxed SIMD: no immediates
		return nil
	}
	return fmt.Errorf("0xfd %d is not an instruction this host compiles", sub)
}

// atomicImmediates skips a 0xfe (threads) instruction.
func (r *wasmReader) atomicImmediates() error {
	sub, err := r.u32()
	if err != nil {
		return err
	}
	switch {
	case sub == 0x03: // atomic.fence
		return r.skip(1)
	case sub <= 0x02 || sub >= 0x10 && sub <= 0x4e:
		return r.memarg()
	}
	return fmt.Errorf("0xfe %d is not an instruction this host compiles", sub)
}

// u64 reads an unsigned LEB128 of at most 10 bytes (a memory offset).
func (r *wasmReader) u64() (uint64, error) {
	var v uint64
	for i := 0; i < 10; i++ {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, errors.New("LEB128 integer longer than 10 bytes")
}

// interruptFlag is an instance's interrupt global.
type interruptFlag struct{ g api.MutableGlobal }

// interruptOf finds mod's interrupt global; the zero flag (for a module
// the host did not instrument) arms nothing.
func interruptOf(mod api.Module) interruptFlag {
	if g, ok := mod.ExportedGlobal(InterruptExport).(api.MutableGlobal); ok {
		return interruptFlag{g}
	}
	return interruptFlag{}
}

// arm sets the flag when ctx ends, and returns what disarms it, which
// reports whether the flag was set: an instance whose flag was set traps
// at its next loop and must not be used again.
func (f interruptFlag) arm(ctx context.Context) (disarm func() (fired bool)) {
	if f.g == nil {
		return func() bool { return false }
	}
	stop := context.AfterFunc(ctx, func() { f.g.Set(1) })
	return func() bool { return !stop() }
}

// start runs, armed under ctx, what instantiation used to run: the
// function of the module's start section (exported as
// InterruptStartExport by instrumentLoops), then each of the named start
// functions the module exports (_initialize for a reactor, _start for a
// command). A start function that exits with code 0 has succeeded, as
// wazero's own start functions do.
func (f interruptFlag) start(ctx context.Context, mod api.Module, names ...string) (fired bool, err error) {
	disarm := f.arm(ctx)
	defer func() { fired = disarm() }()
	for _, name := range append([]string{InterruptStartExport}, names...) {
		fn := mod.ExportedFunction(name)
		if fn == nil {
			continue
		}
		if _, err := fn.Call(ctx); err != nil {
			if ee, ok := err.(*sys.ExitError); ok {
				if ee.ExitCode() == 0 {
					return false, nil
				}
				return false, err
			}
			if name == InterruptStartExport {
				name = "the start function"
			}
			return false, fmt.Errorf("%s: %w", name, err)
		}
	}
	return false, nil
}
