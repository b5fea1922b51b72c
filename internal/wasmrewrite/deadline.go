package wasmrewrite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Stopping a guest that never returns, at the price of a counter per loop.
//
// A deadline has to stop a guest spinning in a loop that calls nothing:
// Go cannot preempt machine code, so the compiled code itself must look.
// wazero's own answer, CloseOnContextDone, makes every loop header call
// out of the machine code into a Go trampoline that checks whether the
// module was closed. Every iteration pays that exit: 0.35 ns → 31.5 ns
// per iteration of a tight loop (90x), and Go-compiled guests, whose
// every function begins with a loop (the resumption point of goroutine
// switching), ran 6x slower (../shared/research/perf.md §6).
//
// So the host does what Wasmtime's fuel does, in the bytes it compiles:
// the module gets one more global, a counter, and every loop header of
// every function begins with
//
//	global.get $fuel
//	i32.eqz
//	if
//	  call $moat:interrupt.yield
//	  global.set $fuel
//	end
//	global.get $fuel
//	i32.const 1
//	i32.sub
//	global.set $fuel
//
// a test, a branch never taken and a decrement, but once every FuelPerYield
// iterations, when the guest calls the host's yield. yield ends the guest,
// as WASI's proc_exit does, when its invocation's deadline has passed or
// its context is done (Yield), and otherwise refills the counter.
//
// Why a call and not a flag the host sets: a flag needs a goroutine to set
// it, and a goroutine needs one of GOMAXPROCS processors, which guests
// spinning in machine code hold and never give up (Go preempts only at
// Go code: its signal finds a program counter in no Go function and lets
// it run). Two spinning guests on a two-core server held both, the timer
// that would have set their flags never ran, and neither the guests nor
// the garbage collector's stop-the-world ever ended. A call into Go every
// FuelPerYield iterations is a preemption point: the scheduler runs
// timers and other goroutines there, the collector stops the world there,
// and yield reads the deadline itself (one clock read), so a deadline
// holds within FuelPerYield iterations even when every processor spins.
// TestSpinningOnEveryProcessor holds that.
//
// What else had to move: the start section and the start functions
// (_start, _initialize) run inside InstantiateModule, before the host
// passes them an invocation's context, so the rewritten module has no
// start section (its function is exported as InterruptStartExport
// instead) and the host calls each of them itself, under the context,
// right after instantiation: the same order the specification gives.
// The import is appended after the module's own, so every defined
// function's index grows by one: calls, references, exports, element
// segments, constant expressions and the name section are renumbered.
//
// Loop headers are not the only places a check is needed (issue 27): a
// tree of calls with no loop makes 2^60 calls at a depth of 61, so the
// same check runs at the entry of every function that calls (function);
// and one memory.fill is one instruction however long, so every bulk
// operation first calls a function the rewrite adds, which charges its
// length (appendCharge). What the rewrite adds to the module's index
// spaces must stay out of the guest's reach: each index the rewrite reads
// in a space it extends is checked against the module's own (checkIndex),
// since wazero validates only the rewritten module.
//
// Only the compiled copy is rewritten; a module's digest and signature
// stay those of its author's bytes, as for the table limits (tables.go).
// Extism plug-ins are rewritten too, by their driver (driver.Spec.Deadline);
// the Ruby driver runs ruby.wasm, which no user shapes, in a runtime of its
// own with CloseOnContextDone.

const (
	// InterruptModule and InterruptYield name the host function an
	// instrumented module imports. A module that imports from
	// InterruptModule itself is refused.
	InterruptModule = "moat:interrupt"
	InterruptYield  = "yield"
	// InterruptStartExport is the name under which an instrumented
	// module exports the function its start section named; a module that
	// exports this name itself is refused.
	InterruptStartExport = "moat:start"
	// FuelPerYield is how many loop iterations (calls, bulk-operation
	// units) a guest runs between two calls of yield: ~50 ns a call, so
	// under 0.01 ns an iteration, and a deadline overrun of at most this
	// many iterations (~0.1 ms of a Go guest's code).
	FuelPerYield = 1 << 14
)

// DeadlineVersion names what InstrumentDeadline writes for a given
// module: change it with any change to the bytes it writes, and rewritten
// modules a host keeps on disk (the host's rewrite cache, keyed by it)
// are made again.
const DeadlineVersion = "deadline-2"

// loopCheck is the check inserted at a loop header. The counter is
// tested before it is decremented, so a guest whose yield ended it (the
// counter still 0) yields again at its first loop, whoever calls it next.
func loopCheck(fuel, yieldFunc uint32) []byte {
	g := binary.AppendUvarint(nil, uint64(fuel))
	b := append([]byte{0x23}, g...) // global.get $fuel
	b = append(b, 0x45, 0x04, 0x40) // i32.eqz; if
	b = binary.AppendUvarint(append(b, 0x10), uint64(yieldFunc))
	b = append(append(b, 0x24), g...)     // global.set $fuel
	b = append(b, 0x0b)                   // end
	b = append(append(b, 0x23), g...)     // global.get $fuel
	b = append(b, 0x41, 0x01, 0x6b, 0x24) // i32.const 1; i32.sub; global.set
	return append(b, g...)
}

// instrumentation is one module's rewrite: where the new import, type and
// global land, and how defined functions are renumbered.
type instrumentation struct {
	importedFuncs uint32 // the module's own function imports
	yieldType     uint32 // the new type () -> i32
	fuel          uint32 // the new global
	chargeType    uint32 // the second new type, (i32) -> i32
	chargeFunc    uint32 // the new function that charges a bulk operation
	check         []byte
	charge        []byte  // the call of chargeFunc
	start         *uint32 // the start section's function, renumbered
	keepStart     bool    // leave the start section where it is

	// The module's own index spaces, before the rewrite extends them:
	// an index past one of these is refused (validate).
	nTypes, nFuncs, nGlobals uint32
}

// fn renumbers a function index: the yield import comes after the
// module's own imports, before its defined functions. The caller has
// checked i against the module's functions (funcIndex).
func (in *instrumentation) fn(i uint32) uint32 {
	if i >= in.importedFuncs {
		return i + 1
	}
	return i
}

// The rewrite adds a type, a function, two globals and an export to the
// module's index spaces. wazero validates only the rewritten module, in
// which those indices exist, so an index one past the module's own would
// name what the host added: a 46-byte module wrote the counter itself
// (global.set of the index after its own globals) and ran past every
// deadline. Each index the rewrite reads in a space it extends is checked
// against the module's own count before anything is written; the
// differential fuzz test (FuzzInstrumentValidates) holds the rewrite to
// refusing whatever wazero refuses in the module as its author built it.

// checkIndex refuses index i of a space holding n entries.
func checkIndex(what string, i, n uint32) error {
	if i >= n {
		return fmt.Errorf("%s index %d, but the module declares %d", what, i, n)
	}
	return nil
}

// InstrumentDeadline returns wasm rewritten as described above; lay is what
// ReadLayout read of wasm. It refuses a module it cannot read to the last
// opcode, naming the function and the byte: the host would rather refuse a
// module than run one whose loops it has not all seen.
func InstrumentDeadline(wasm []byte, lay *Layout, keepStart bool) ([]byte, error) {
	if lay.importsInterrupt {
		return nil, fmt.Errorf("the module imports from %q, a module name the host reserves for itself", InterruptModule)
	}
	in := &instrumentation{importedFuncs: lay.importedFuncs, yieldType: lay.counts[1], keepStart: keepStart}
	var importedGlobals uint32
	for _, im := range lay.Imports {
		if im.Kind == "global" {
			importedGlobals++
		}
	}
	in.nTypes, in.nFuncs, in.nGlobals = lay.counts[1], lay.importedFuncs+lay.counts[3], importedGlobals+lay.counts[6]
	in.fuel = in.nGlobals
	in.chargeType, in.chargeFunc = in.nTypes+1, in.nFuncs+1
	in.check = loopCheck(in.fuel, in.importedFuncs)
	in.charge = binary.AppendUvarint([]byte{0x10}, uint64(in.chargeFunc))
	// The start section comes after the export section, but the export
	// of its function must be in the export section: find it first.
	err := walkSections(wasm, func(id byte, _, bodyStart, bodyEnd int) error {
		if id == 8 {
			r := &wasmReader{b: wasm[:bodyEnd], off: bodyStart}
			f, err := r.u32()
			if err == nil {
				err = checkIndex("function", f, in.nFuncs)
			}
			if err == nil {
				err = checkStartType(wasm, lay, f)
			}
			if err != nil {
				return fmt.Errorf("start section: %w", err)
			}
			f = in.fn(f)
			in.start = &f
		}
		return nil
	})
	if err != nil {
		return nil, err
	}

	out := make([]byte, 0, len(wasm)+len(wasm)/8+64)
	out = append(out, wasm[:8]...)
	emit := func(id byte, body []byte) {
		out = append(out, id)
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
	}
	// Each section the rewrite adds to, made when the module has none,
	// ahead of the first section that must follow it.
	added := map[byte]func(n uint32, entries []byte) ([]byte, error){
		1: in.types, 2: in.imports, 3: in.functions, 6: in.globals, 7: in.exports,
		10: func(uint32, []byte) ([]byte, error) { return in.appendCharge(uleb(1)), nil },
	}
	done := map[byte]bool{}
	before := func(id byte) {
		if id == 0 {
			return
		}
		for _, want := range []byte{1, 2, 3, 6, 7, 10} {
			if !done[want] && afterInOrder(id, want) {
				done[want] = true
				body, _ := added[want](0, nil) // nothing to refuse in no entries
				emit(want, body)
			}
		}
	}
	err = walkSections(wasm, func(id byte, sectionStart, bodyStart, bodyEnd int) error {
		before(id)
		r := &wasmReader{b: wasm[:bodyEnd], off: bodyStart}
		var body []byte
		var err error
		switch id {
		case 1, 2, 3, 6, 7:
			var n uint32
			if n, err = r.u32(); err == nil {
				body, err = added[id](n, wasm[r.off:bodyEnd])
				done[id] = true
			}
		case 8:
			if in.keepStart {
				emit(8, binary.AppendUvarint(nil, uint64(*in.start)))
			}
			return nil // otherwise dropped: the host calls the function after instantiation
		case 9:
			body, err = in.elements(r, bodyEnd)
		case 10:
			body, err = in.code(r, bodyEnd)
			done[10] = true
		case 0:
			body, err = in.custom(r, bodyEnd)
		default:
			out = append(out, wasm[sectionStart:bodyEnd]...)
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s section: %w", sectionName(id), err)
		}
		if body != nil {
			emit(id, body)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	before(11) // a module ending before the sections the rewrite needs
	return out, nil
}

// types appends the yield function's type, () -> i32, and the charge
// function's, (i32) -> i32.
func (in *instrumentation) types(n uint32, entries []byte) ([]byte, error) {
	body := binary.AppendUvarint(nil, uint64(n)+2)
	body = append(body, entries...)
	return append(body, 0x60, 0x00, 0x01, 0x7f, 0x60, 0x01, 0x7f, 0x01, 0x7f), nil
}

// imports appends the yield import after the module's own.
func (in *instrumentation) imports(n uint32, entries []byte) ([]byte, error) {
	body := binary.AppendUvarint(nil, uint64(n)+1)
	body = append(body, entries...)
	body = appendName(body, InterruptModule)
	body = appendName(body, InterruptYield)
	body = append(body, 0x00)
	return binary.AppendUvarint(body, uint64(in.yieldType)), nil
}

// globals renumbers the functions the module's globals' initializers
// name, and appends the fuel counter.
func (in *instrumentation) globals(n uint32, entries []byte) ([]byte, error) {
	w := &rewriter{r: &wasmReader{b: entries}, in: in}
	for i := uint32(0); i < n && w.err == nil; i++ {
		w.valueType()
		w.byte() // mutability
		w.constExpr()
	}
	if w.err != nil {
		return nil, w.err
	}
	body := binary.AppendUvarint(nil, uint64(n)+1)
	body = append(body, w.finish()...)
	body = append(body, 0x7f, 0x01, 0x41) // i32, mutable, i32.const
	body = appendSLEB(body, FuelPerYield)
	return append(body, 0x0b), nil
}

// functions appends the charge function's type to the function section.
func (in *instrumentation) functions(n uint32, entries []byte) ([]byte, error) {
	body := binary.AppendUvarint(nil, uint64(n)+1)
	body = append(body, entries...)
	return binary.AppendUvarint(body, uint64(in.chargeType)), nil
}

// exports renumbers exported functions, refuses the host's name, and
// exports the start section's function.
func (in *instrumentation) exports(n uint32, entries []byte) ([]byte, error) {
	w := &rewriter{r: &wasmReader{b: entries}, in: in}
	for i := uint32(0); i < n && w.err == nil; i++ {
		name, err := w.r.name()
		if err != nil {
			w.err = err
			break
		}
		if name == InterruptStartExport {
			w.err = fmt.Errorf("the module exports %q, a name the host reserves for itself", name)
			break
		}
		switch kind := w.byte(); kind {
		case 0x00:
			w.funcIndex()
		case 0x03:
			w.checked("global", in.nGlobals)
		default:
			w.index()
		}
	}
	if w.err != nil {
		return nil, w.err
	}
	extra := uint32(0)
	if in.start != nil && !in.keepStart {
		extra = 1
	}
	body := binary.AppendUvarint(nil, uint64(n+extra))
	body = append(body, w.finish()...)
	if in.start != nil && !in.keepStart {
		body = appendName(body, InterruptStartExport)
		body = append(body, 0x00)
		body = binary.AppendUvarint(body, uint64(*in.start))
	}
	return body, nil
}

// elements renumbers the functions element segments name.
func (in *instrumentation) elements(r *wasmReader, end int) ([]byte, error) {
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	w := &rewriter{r: &wasmReader{b: r.b[:end], off: r.off}, in: in}
	w.copied = w.r.off
	for i := uint32(0); i < n && w.err == nil; i++ {
		prefix := w.u32()
		if prefix == 2 || prefix == 6 {
			w.index() // table
		}
		if prefix&1 == 0 {
			w.constExpr() // offset
		}
		if prefix&3 != 0 {
			if b := w.byte(); prefix&4 != 0 && w.err == nil {
				w.err = w.r.refTypeAfter(b)
			}
		}
		count := w.u32()
		for j := uint32(0); j < count && w.err == nil; j++ {
			if prefix&4 == 0 {
				w.funcIndex()
			} else {
				w.constExpr()
			}
		}
	}
	if w.err != nil {
		return nil, w.err
	}
	return append(binary.AppendUvarint(nil, uint64(n)), w.finish()...), nil
}

// code renumbers calls and function references, and inserts the check
// after every loop's block type.
func (in *instrumentation) code(r *wasmReader, end int) ([]byte, error) {
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	body := binary.AppendUvarint(make([]byte, 0, end-r.off+end/8), uint64(n)+1)
	var fn []byte
	for i := uint32(0); i < n; i++ {
		index := in.importedFuncs + i // as tools number it: before the rewrite
		size, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("function %d: %w", index, err)
		}
		if uint64(size) > uint64(end-r.off) {
			return nil, fmt.Errorf("function %d: a body of %d bytes in the %d bytes left", index, size, end-r.off)
		}
		fend := r.off + int(size)
		if fn, err = in.function(fn[:0], &wasmReader{b: r.b[:fend], off: r.off}); err != nil {
			return nil, fmt.Errorf("function %d: %w", index, err)
		}
		body = binary.AppendUvarint(body, uint64(len(fn)))
		body = append(body, fn...)
		r.off = fend
	}
	if r.off != end {
		return nil, fmt.Errorf("%d bytes after the last function", end-r.off)
	}
	return in.appendCharge(body), nil
}

// function rewrites one function body (locals and instructions) read
// from r, appending it to out: the check after every loop's block type
// and at the entry of every function that calls, the charge before every
// bulk operation, and every index the rewrite's additions could answer
// checked against the module's own.
//
// Why at entry: code with no loop still runs for ever when it calls. A
// tree of sixty functions each calling the one below twice makes 2^60
// calls at a depth of 61, the stack limit never nears, and there is no
// loop header to count at. Every entry of a function with two or more
// places that call guest code (a call of a defined function, any
// call_indirect), or with a tail call, now counts as one iteration. The
// others need no check: between two checks every function entered calls
// at most once per activation outside loops (whose headers check), so the
// calls form a chain no longer than the call stack, and the work between
// two checks is bounded by the stack's depth times the bodies' sizes. A
// call of an import is the host's, which calls no guest code back. A
// function that begins with a loop (every function Go compiles) has the
// check at that loop's header, which is its entry: it gets no second one.
// Wasmtime's epoch interruption checks at the same two places, every
// function entry and loop header.
func (in *instrumentation) function(out []byte, r *wasmReader) ([]byte, error) {
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
	w := &rewriter{r: r, in: in, out: out, copied: start}
	w.insert(nil)
	entry := len(w.out) // where the body's instructions begin
	calls, tail, loopFirst := 0, false, r.off < len(r.b) && r.b[r.off] == 0x03
	for r.off < len(r.b) {
		at := r.off
		op, _ := r.byte()
		switch op {
		case 0x10, 0x12: // call, return_call
			if f, err := (&wasmReader{b: r.b, off: r.off}).u32(); err == nil && f >= in.importedFuncs {
				calls++ // a call of the host's (an import) calls no guest code back
			}
			tail = tail || op == 0x12
			w.funcIndex()
		case 0xd2: // ref.func
			w.funcIndex()
		case 0x11, 0x13: // call_indirect, return_call_indirect: type, table
			calls++
			tail = tail || op == 0x13
			w.checked("type", in.nTypes)
			w.index()
		case 0x23, 0x24: // global.get, global.set
			w.checked("global", in.nGlobals)
		case 0x02, 0x03, 0x04: // block, loop, if
			w.err = in.blockType(r)
			if op == 0x03 && w.err == nil {
				w.insert(in.check)
			}
		case 0xfc:
			sub, _ := (&wasmReader{b: r.b, off: r.off}).u32()
			w.err = r.skipImmediates(op)
			if w.err == nil && isBulk(sub) {
				w.insertAt(at, in.charge)
			}
		default:
			w.err = r.skipImmediates(op)
		}
		if w.err != nil {
			return nil, fmt.Errorf("opcode %#x at byte %d of the body: %w", op, at-start, w.err)
		}
	}
	body := w.finish()
	if (calls > 1 || tail) && !loopFirst {
		body = slices.Insert(body, entry, in.check...)
	}
	return body, nil
}

// blockType reads a block type, checking a type index against the
// module's types.
func (in *instrumentation) blockType(r *wasmReader) error {
	v, err := r.blockTypeIndex()
	if err == nil && v >= int64(in.nTypes) {
		err = fmt.Errorf("a block of type %d, but the module declares %d types", v, in.nTypes)
	}
	return err
}

// isBulk reports whether the 0xfc instruction sub writes or copies a
// length its operands give: memory.init, memory.copy, memory.fill,
// table.init, table.copy, table.fill. (memory.grow and table.grow are
// bounded by the module's limits, not by their operands.)
func isBulk(sub uint32) bool {
	switch sub {
	case 8, 10, 11, 12, 14, 17:
		return true
	}
	return false
}

// bulkShift: a bulk operation costs one unit of fuel per 1<<bulkShift
// elements it may touch (bytes for memory, references for tables): 64
// bytes, about what a loop iteration of copying code moves, so that a
// counter's worth (FuelPerYield) is ~1 MiB, ~0.1 ms of memory.fill.
const bulkShift = 6

// appendCharge appends the body of the charge function to a code
// section's body: a call of it is inserted before every bulk operation,
// whose length n is on top of the stack, and it returns n after charging
// n>>bulkShift units of fuel, calling yield first when the counter holds
// fewer. A function of memory.fill calls over 64 MiB each ran 18 s under
// a 1 s deadline when only loop iterations counted; now every operation
// longer than what is left of the counter is preceded by a check of the
// deadline, so the overrun is at most one operation, bounded by the
// module's memory (or table) limit. The counter never goes below zero,
// so the loop check (which tests it for zero) still holds. A call, not
// the same bytes inline: inline, a function of 4 000 bulk operations took
// wazero 3.6 s to compile instead of 0.9 s.
//
//	(func $charge (param $n i32) (result i32)
//	  local.get $n  i32.const 6  i32.shr_u  global.get $fuel  i32.ge_u
//	  if  call $yield  global.set $fuel
//	  else  global.get $fuel  local.get $n  i32.const 6  i32.shr_u  i32.sub  global.set $fuel
//	  end
//	  local.get $n)
func (in *instrumentation) appendCharge(code []byte) []byte {
	f := binary.AppendUvarint(nil, uint64(in.fuel))
	b := []byte{0x00, 0x20, 0x00, 0x41, bulkShift, 0x76, 0x23}
	b = append(b, f...)
	b = append(b, 0x4f, 0x04, 0x40) // i32.ge_u; if
	b = binary.AppendUvarint(append(b, 0x10), uint64(in.importedFuncs))
	b = append(append(b, 0x24), f...)
	b = append(b, 0x05) // else
	b = append(append(b, 0x23), f...)
	b = append(b, 0x20, 0x00, 0x41, bulkShift, 0x76, 0x6b, 0x24)
	b = append(b, f...)
	b = append(b, 0x0b, 0x20, 0x00, 0x0b) // end; local.get $n; end
	code = binary.AppendUvarint(code, uint64(len(b)))
	return append(code, b...)
}

// checkStartType refuses a start function that takes or returns
// anything, as wazero would have refused the module: the rewrite turns
// the start section into an export, which may be of any type.
func checkStartType(wasm []byte, lay *Layout, f uint32) error {
	var typ uint32
	var found bool
	var sigs [][2]uint32 // params, results of each type
	err := walkSections(wasm, func(id byte, _, bodyStart, bodyEnd int) error {
		r := &wasmReader{b: wasm[:bodyEnd], off: bodyStart}
		n, err := r.u32()
		if err != nil {
			return err
		}
		for i := uint32(0); i < n && err == nil; i++ {
			switch id {
			case 1:
				var s [2]uint32
				if _, err = r.byte(); err != nil { // 0x60
					break
				}
				for k := range 2 {
					if s[k], err = r.u32(); err == nil {
						for j := uint32(0); j < s[k] && err == nil; j++ {
							err = r.valueType()
						}
					}
				}
				sigs = append(sigs, s)
			case 2:
				if _, err = r.name(); err == nil {
					_, err = r.name()
				}
				if err != nil {
					break
				}
				var kind byte
				if kind, err = r.byte(); err != nil || kind != 0 {
					return nil // the functions come first in the index space; the rest of the section does not matter
				}
				var t uint32
				if t, err = r.u32(); err == nil && i == f {
					typ, found = t, true
				}
			case 3:
				var t uint32
				if t, err = r.u32(); err == nil && lay.importedFuncs+i == f {
					typ, found = t, true
				}
			default:
				return nil
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	if !found || int(typ) >= len(sigs) {
		return fmt.Errorf("function %d has no type the rewrite can read", f)
	}
	if sigs[typ] != [2]uint32{} {
		return fmt.Errorf("the start function %d takes %d parameters and returns %d results; a start function takes and returns nothing", f, sigs[typ][0], sigs[typ][1])
	}
	return nil
}

// custom renumbers the functions of the name section (function, local
// and label names); other custom sections are kept as they are. A name
// section the rewrite cannot read is dropped (wazero reads it only to
// name functions in traces).
func (in *instrumentation) custom(r *wasmReader, end int) ([]byte, error) {
	start := r.off
	name, err := r.name()
	if err != nil {
		return nil, err
	}
	if name != "name" {
		return r.b[start:end], nil
	}
	w := &rewriter{r: &wasmReader{b: r.b[:end], off: r.off}, in: in}
	w.copied = start
	for w.r.off < end && w.err == nil {
		subStart := w.r.off
		id := w.byte()
		size := w.u32()
		if w.err != nil || uint64(size) > uint64(end-w.r.off) {
			return nil, nil
		}
		subEnd := w.r.off + int(size)
		if id < 1 || id > 3 {
			w.r.off = subEnd
			continue
		}
		// Renumbering can lengthen the subsection: rewrite it apart.
		sub := &rewriter{r: &wasmReader{b: r.b[:subEnd], off: w.r.off}, in: in}
		sub.copied = sub.r.off
		count := sub.u32()
		for i := uint32(0); i < count && sub.err == nil; i++ {
			sub.funcIndex()
			if id == 1 {
				_, sub.err = sub.r.name()
				continue
			}
			inner := sub.u32() // local or label names
			for j := uint32(0); j < inner && sub.err == nil; j++ {
				sub.index()
				_, sub.err = sub.r.name()
			}
		}
		if sub.err != nil || sub.r.off != subEnd {
			return nil, nil
		}
		content := sub.finish()
		w.out = append(w.out, w.r.b[w.copied:subStart]...)
		w.out = append(w.out, id)
		w.out = binary.AppendUvarint(w.out, uint64(len(content)))
		w.out = append(w.out, content...)
		w.r.off, w.copied = subEnd, subEnd
	}
	if w.err != nil {
		return nil, nil
	}
	return w.finish(), nil
}

// rewriter copies the bytes it reads, except the function indices it
// renumbers and what it inserts. The first error stops it.
type rewriter struct {
	r      *wasmReader
	in     *instrumentation
	out    []byte
	copied int // r.b[copied:r.off] is read but not yet copied
	err    error
}

func (w *rewriter) byte() byte {
	if w.err != nil {
		return 0
	}
	b, err := w.r.byte()
	w.err = err
	return b
}

func (w *rewriter) u32() uint32 {
	if w.err != nil {
		return 0
	}
	v, err := w.r.u32()
	w.err = err
	return v
}

func (w *rewriter) index() { w.u32() }

// checked reads an index of the space what, which holds n entries.
func (w *rewriter) checked(what string, n uint32) {
	if i := w.u32(); w.err == nil {
		w.err = checkIndex(what, i, n)
	}
}

func (w *rewriter) valueType() {
	if w.err == nil {
		w.err = w.r.valueType()
	}
}

// funcIndex renumbers the function index at the reader.
func (w *rewriter) funcIndex() {
	if w.err != nil {
		return
	}
	at := w.r.off
	i, err := w.r.u32()
	if err == nil {
		err = checkIndex("function", i, w.in.nFuncs)
	}
	if err != nil {
		w.err = err
		return
	}
	w.out = append(w.out, w.r.b[w.copied:at]...)
	w.out = binary.AppendUvarint(w.out, uint64(w.in.fn(i)))
	w.copied = w.r.off
}

// insert puts b at the reader's position.
func (w *rewriter) insert(b []byte) { w.insertAt(w.r.off, b) }

// insertAt puts b at offset at of the input, at or after what was
// copied: before the instruction that starts there.
func (w *rewriter) insertAt(at int, b []byte) {
	w.out = append(w.out, w.r.b[w.copied:at]...)
	w.out = append(w.out, b...)
	w.copied = at
}

// constExpr reads a constant expression, renumbering ref.func.
func (w *rewriter) constExpr() {
	for w.err == nil {
		at := w.r.off
		op := w.byte()
		switch op {
		case 0x0b:
			return
		case 0xd2:
			w.funcIndex()
			continue
		case 0x23:
			w.checked("global", w.in.nGlobals)
			continue
		}
		w.r.off = at
		w.err = w.r.skipConstOp()
	}
}

// finish copies what is left and returns the rewritten bytes.
func (w *rewriter) finish() []byte {
	return append(w.out, w.r.b[w.copied:w.r.off]...)
}

// afterInOrder reports whether a section with id comes after section want
// in the order the specification gives (sectionOrder).
func afterInOrder(id, want byte) bool {
	_, ok := sectionOrder(id, want)
	return ok && id != want
}

// appendSLEB appends v as a signed LEB128, the encoding of i32.const.
func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func uleb(v uint64) []byte { return binary.AppendUvarint(nil, v) }

func appendName(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// skipImmediates skips the immediates of the instruction op, every
// instruction wazero v1.12 compiles: WebAssembly 2.0 (sign extension,
// saturating conversions, bulk memory, reference types, multiple values,
// 128-bit SIMD), tail calls and threads. Any other opcode is an error.
func (r *wasmReader) skipImmediates(op byte) error {
	var err error
	switch {
	case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if
		_, err = r.blockTypeIndex()
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
		return errors.New("not an instruction this host compiles (a proposal wazero v1.12 does not run, such as exception handling or garbage collection: build the module without it)")
	}
	return err
}

// blockTypeIndex reads a block type: empty (0x40), a value type, or a
// type index (a positive signed LEB128 of up to 33 bits), which it
// returns; -1 for the others.
func (r *wasmReader) blockTypeIndex() (int64, error) {
	b, err := r.byte()
	if err != nil {
		return -1, err
	}
	switch b {
	case 0x40, 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		return -1, nil
	}
	r.off--
	v, err := r.s33()
	if err == nil && v < 0 {
		err = fmt.Errorf("a block of type %d", v)
	}
	return v, err
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

// s33 reads a signed LEB128 of at most 5 bytes (a block's type index).
func (r *wasmReader) s33() (int64, error) {
	var v int64
	for i := 0; i < 5; i++ {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= int64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			if c&0x40 != 0 {
				v |= -1 << (7 * (i + 1))
			}
			return v, nil
		}
	}
	return 0, errors.New("LEB128 integer longer than 5 bytes")
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
